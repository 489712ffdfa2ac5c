"""Python SDK for a GraphEngine server.

    from graphengine.clients import Client

    with Client("127.0.0.1:50051") as client, client.session() as sess:
        gid = sess.add_graph("mlp.onnx")
        report = sess.compile_graph(gid)
        outputs = sess.run_graph(gid, {"input": x})

`RemoteSession` has the method names and signatures of the in-process
`graphengine.server.session.Session`, so code written against one runs against the other.
Failed calls raise `graphengine.clients.errors.ClientError` subclasses that keep the
status code and the server's message.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import grpc
import numpy as np
from grpc_health.v1 import health_pb2, health_pb2_grpc

from graphengine.engine.report import CompileReport
from graphengine.server import convert
from graphengine.v1 import graph_pb2, session_pb2, session_pb2_grpc

from .errors import ClientError, from_rpc_error

if TYPE_CHECKING:
    from typing_extensions import Self

DEFAULT_MAX_MESSAGE_BYTES = 256 * 1024 * 1024


class Client:
    """A connection to one server. Cheap to keep open; thread-safe like its gRPC channel.

    `timeout` is the deadline in seconds applied to every call (None: no deadline).
    """

    def __init__(self, address: str, *, timeout: float | None = None,
                 max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES) -> None:
        self.address = address
        self.timeout = timeout
        self._channel = grpc.insecure_channel(address, options=[
            ("grpc.max_send_message_length", max_message_bytes),
            ("grpc.max_receive_message_length", max_message_bytes),
        ])
        self._stub = session_pb2_grpc.GraphEngineStub(self._channel)

    # ---- plumbing --------------------------------------------------------------------
    def _call(self, method: Callable[..., Any], request: Any) -> Any:
        try:
            return method(request, timeout=self.timeout)
        except grpc.RpcError as err:
            # `from None`: the gRPC error's repr only repeats what the ClientError says.
            raise from_rpc_error(err) from None

    # ---- API ---------------------------------------------------------------------------
    def session(self, options: Any = None) -> RemoteSession:
        """Open a session on the server; use it as a context manager to close it.

        `options`: None, a `SessionOptions`, or a mapping with its keys (`max_streams`,
        `memory_limit_bytes`, `options`).
        """
        request = session_pb2.CreateSessionRequest(
            options=convert.session_options_to_pb(options))
        response = self._call(self._stub.CreateSession, request)
        return RemoteSession(self, response.session_id)

    def attach(self, session_id: str) -> RemoteSession:
        """A handle on a session that already exists (e.g. opened by another process)."""
        return RemoteSession(self, session_id)

    def health(self, service: str = "") -> str:
        """The server's health status name for `service` ("" = the server as a whole)."""
        stub = health_pb2_grpc.HealthStub(self._channel)
        response = self._call(stub.Check, health_pb2.HealthCheckRequest(service=service))
        return health_pb2.HealthCheckResponse.ServingStatus.Name(response.status)

    def wait_ready(self, timeout: float = 10.0) -> None:
        """Block until the channel connects; raises grpc.FutureTimeoutError otherwise."""
        grpc.channel_ready_future(self._channel).result(timeout=timeout)

    def close(self) -> None:
        self._channel.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Client({self.address!r})"


class RemoteSession:
    """A session held by the server; mirrors the in-process Session's methods."""

    def __init__(self, client: Client, session_id: str) -> None:
        self._client = client
        self._stub = client._stub
        self.id = session_id
        self._closed = False

    def _call(self, method: Callable[..., Any], request: Any) -> Any:
        return self._client._call(method, request)

    def add_graph(self, model: Any, name: str | None = None) -> int:
        """Send a model; returns its graph id.

        `model`: a GraphDef, ONNX bytes, an onnx.ModelProto, or a path to an .onnx file.
        """
        request = session_pb2.AddGraphRequest(session_id=self.id, name=name or "",
                                              **model_fields(model))
        return self._call(self._stub.AddGraph, request).graph_id

    def compile_graph(self, graph_id: int,
                      input_shapes: Mapping[str, Sequence[int]] | None = None) -> CompileReport:
        request = session_pb2.CompileGraphRequest(
            session_id=self.id, graph_id=graph_id,
            input_shapes=convert.input_shapes_to_pb(input_shapes))
        return convert.report_from_pb(self._call(self._stub.CompileGraph, request).report)

    def run_graph(self, graph_id: int, inputs: Mapping[str, np.ndarray],
                  output_names: Sequence[str] | None = None) -> dict[str, np.ndarray]:
        """Outputs by name: in graph order, or in the order of `output_names`."""
        request = session_pb2.RunGraphRequest(
            session_id=self.id, graph_id=graph_id, inputs=convert.tensors_to_pb(inputs),
            output_names=list(output_names or ()))
        response = self._call(self._stub.RunGraph, request)
        arrays = convert.tensors_from_pb(response.outputs)
        # Decoded arrays view immutable protobuf bytes; copy so that callers get ordinary
        # writable arrays, as the in-process Session returns.
        return {name: a.copy() for name, a in arrays.items()}

    def remove_graph(self, graph_id: int) -> None:
        self._call(self._stub.RemoveGraph,
                   session_pb2.RemoveGraphRequest(session_id=self.id, graph_id=graph_id))

    def graph_info(self, graph_id: int) -> Any:
        """A `graphengine.server.session.GraphInfo`, as the in-process Session returns."""
        request = session_pb2.GetGraphInfoRequest(session_id=self.id, graph_id=graph_id)
        return convert.graph_info_from_pb(self._call(self._stub.GetGraphInfo, request).info)

    def close(self) -> None:
        """Close the session on the server; closing twice is a no-op."""
        if self._closed:
            return
        self._call(self._stub.CloseSession, session_pb2.CloseSessionRequest(session_id=self.id))
        self._closed = True

    def __enter__(self) -> Self:
        return self

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        try:
            self.close()
        except ClientError:
            if exc is None:
                raise
            # The error already propagating says more than a failed close after it.

    def __repr__(self) -> str:
        return f"RemoteSession({self.id!r} on {self._client.address})"


def model_fields(model: Any) -> dict[str, Any]:
    """The AddGraphRequest `model` oneof for what the caller passed."""
    if isinstance(model, graph_pb2.GraphDef):
        return {"graph": model}
    if isinstance(model, (bytes, bytearray, memoryview)):
        return {"onnx_model": bytes(model)}
    if isinstance(model, (str, os.PathLike)):
        with open(model, "rb") as f:
            return {"onnx_model": f.read()}
    # onnx is imported only when needed: it is slow to import and most calls pass bytes.
    import onnx

    if isinstance(model, onnx.ModelProto):
        return {"onnx_model": model.SerializeToString()}
    raise TypeError(f"add_graph: cannot send a {type(model).__name__}; pass a GraphDef, "
                    "ONNX bytes, an onnx.ModelProto or a path to an .onnx file")
