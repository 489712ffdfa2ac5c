"""Python SDK for a GraphEngine server.

    from graphengine.clients import Client

    with Client("127.0.0.1:50051") as client, client.session() as sess:
        gid = sess.add_graph("mlp.onnx")
        report = sess.compile_graph(gid)
        outputs = sess.run_graph(gid, {"input": x})

`RemoteSession` has the method names and signatures of the in-process
`graphengine.server.core.session.Session`, so code written against one runs against the other;
it adds what only makes sense over the wire: `run_graph_async` (a future) and
`run_graph_stream` (many runs in flight on one bidirectional stream). Failed calls raise
`graphengine.clients.errors.ClientError` subclasses that keep the status code and the
server's message. A server with TLS needs `root_certificates` (or `tls=True` for the
system's roots); one with token authentication needs `token`. `Client(["h1:p", "h2:p"])`
(or a DNS name with several records) spreads sessions over replicas and sends each
session's calls to the replica holding it.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import Future
from typing import TYPE_CHECKING, Any

import grpc
import numpy as np
from grpc_health.v1 import health_pb2, health_pb2_grpc

from graphengine.api import convert
from graphengine.engine.report import CompileReport
from graphengine.errors import InvalidArgument
from graphengine.v1 import graph_pb2, session_pb2, session_pb2_grpc

from .errors import (
    ClientError,
    NotFound,
    ResourceExhausted,
    Unavailable,
    error_class,
    from_rpc_error,
)
from .replicas import Endpoint, Replicas, expand, split_host_port
from .variables import RemoteVariables

if TYPE_CHECKING:
    from typing_extensions import Self

DEFAULT_MAX_MESSAGE_BYTES = 256 * 1024 * 1024


def _read(value: bytes | str | os.PathLike | None) -> bytes | None:
    if value is None or isinstance(value, bytes):
        return value
    with open(value, "rb") as f:
        return f.read()


class Client:
    """A connection to a server, or to several replicas of one. Cheap to keep open;
    thread-safe like its gRPC channels.

    `address`: "host:port"; or a list of them, or a DNS name with several A records (a
    Kubernetes headless Service): one channel per replica, sessions opened on each in
    turn, and every call of a session sent to the replica its id names
    (graphengine.clients.replicas).

    `timeout` is the deadline in seconds applied to every call (None: no deadline).
    `token`: a bearer token sent with every call. `root_certificates` (PEM bytes or a
    path) or `tls=True` makes the channel TLS; `private_key` / `certificate_chain` present
    a client certificate (mutual TLS); `server_name` overrides the name the server's
    certificate is checked against.
    """

    def __init__(self, address: str | Sequence[str], *, timeout: float | None = None,
                 max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES, token: str | None = None,
                 tls: bool = False, root_certificates: bytes | str | None = None,
                 private_key: bytes | str | None = None,
                 certificate_chain: bytes | str | None = None,
                 server_name: str | None = None) -> None:
        if isinstance(address, str):
            addresses, dns_name = expand(address), None
            if len(addresses) > 1:
                dns_name = address
        else:
            addresses, dns_name = list(address), None
            if not addresses or not all(isinstance(a, str) and a for a in addresses):
                raise ValueError(f"Client: expected an address or a list of addresses, got "
                                 f"{address!r:.200}")
        self.address = address if isinstance(address, str) else ",".join(addresses)
        self.timeout = timeout
        self._metadata = (("authorization", f"Bearer {token}"),) if token else ()
        options = [("grpc.max_send_message_length", max_message_bytes),
                   ("grpc.max_receive_message_length", max_message_bytes)]
        credentials = None
        if tls or root_certificates is not None or private_key is not None:
            credentials = grpc.ssl_channel_credentials(
                _read(root_certificates), _read(private_key), _read(certificate_chain))
            # The addresses of a DNS name's records are IPs: the certificate names the name.
            name = server_name or (split_host_port(dns_name)[0] if dns_name else None)
            if name:
                options.append(("grpc.ssl_target_name_override", name))

        def make_channel(target: str) -> grpc.Channel:
            if credentials is not None:
                return grpc.secure_channel(target, credentials, options=options)
            return grpc.insecure_channel(target, options=options)

        self._replicas = Replicas(addresses, make_channel, self._call, dns_name=dns_name,
                                  routed=not isinstance(address, str))
        # The first address's channel: all there is for one address.
        self._channel = self._replicas.endpoints[0].channel
        self._stub = self._replicas.endpoints[0].stub

    # ---- plumbing --------------------------------------------------------------------
    def _call(self, method: Callable[..., Any], request: Any,
              timeout: float | None = None) -> Any:
        try:
            return method(request, timeout=timeout if timeout is not None else self.timeout,
                          metadata=self._metadata)
        except grpc.RpcError as err:
            # `from None`: the gRPC error's repr only repeats what the ClientError says.
            raise from_rpc_error(err) from None

    # ---- API ---------------------------------------------------------------------------
    def session(self, options: Any = None) -> RemoteSession:
        """Open a session on the server; use it as a context manager to close it.

        `options`: None, a `SessionOptions`, or a mapping with its keys (`max_streams`,
        `memory_limit_bytes`, `options`, `precision`, `instances`). With several replicas,
        sessions are opened on each in turn (a replica that is down, draining or full is
        passed over).
        """
        request = session_pb2.CreateSessionRequest(
            options=convert.session_options_to_pb(options))
        order = self._replicas.creation_order()
        for i, endpoint in enumerate(order):
            try:
                response = self._call(endpoint.stub.CreateSession, request)
            except (Unavailable, ResourceExhausted):
                if i == len(order) - 1:
                    raise
                continue
            self._replicas.learn(endpoint, response.session_id)
            return RemoteSession(self, response.session_id, endpoint)
        raise AssertionError("unreachable: a Client has at least one address")

    def attach(self, session_id: str) -> RemoteSession:
        """A handle on a session that already exists (e.g. opened by another process); with
        several replicas, on the replica its id names."""
        return RemoteSession(self, session_id)

    def list_sessions(self) -> list[Any]:
        """This identity's open sessions (on every replica), as
        `graphengine.api.types.SessionInfo`."""
        found = []
        for endpoint in self._replicas.each():
            response = self._call(endpoint.stub.ListSessions, session_pb2.ListSessionsRequest())
            for s in response.sessions:
                self._replicas.learn(endpoint, s.session_id)
                found.append(convert.session_info_from_pb(s))
        return found

    def replicas(self) -> dict[str, str | None]:
        """Each address this client dials and the replica answering there (None: unknown,
        e.g. down); asks the addresses not known yet."""
        self._replicas.discover()
        return {e.target: e.replica_id for e in self._replicas.each()}

    def health(self, service: str = "") -> str:
        """The server's health status name for `service` ("" = the server as a whole); with
        several replicas, SERVING only if every one is, else the first other status."""
        statuses = []
        for endpoint in self._replicas.each():
            stub = health_pb2_grpc.HealthStub(endpoint.channel)
            response = self._call(stub.Check, health_pb2.HealthCheckRequest(service=service))
            statuses.append(health_pb2.HealthCheckResponse.ServingStatus.Name(response.status))
        return next((s for s in statuses if s != "SERVING"), statuses[0])

    def wait_ready(self, timeout: float = 10.0) -> None:
        """Block until every channel connects; raises grpc.FutureTimeoutError otherwise."""
        for endpoint in self._replicas.each():
            grpc.channel_ready_future(endpoint.channel).result(timeout=timeout)

    def close(self) -> None:
        self._replicas.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Client({self.address!r})"


@dataclasses.dataclass
class StreamResult:
    """One answer on a run stream: outputs, or the error that run got."""

    request_id: str
    outputs: dict[str, np.ndarray] | None = None
    error: ClientError | None = None


class RemoteSession(RemoteVariables):
    """A session held by the server; mirrors the in-process Session's methods (its
    variables and checkpoints: clients/variables.py)."""

    def __init__(self, client: Client, session_id: str, endpoint: Endpoint | None = None) -> None:
        self._client = client
        self._endpoint = endpoint or client._replicas.for_session(session_id)
        self.id = session_id
        self._closed = False

    @property
    def _stub(self) -> session_pb2_grpc.GraphEngineStub:
        return self._endpoint.stub

    def _call(self, method: str, request: Any, timeout: float | None = None) -> Any:
        """The RPC `method` on the replica holding the session; once more on the replica a
        NOT_FOUND names as the owner (SessionElsewhere), if that is another one."""
        try:
            return self._client._call(getattr(self._stub, method), request, timeout)
        except NotFound as exc:
            moved = self._client._replicas.reroute(self.id, self._endpoint, exc)
            if moved is None:
                raise
        self._endpoint = moved
        return self._client._call(getattr(self._stub, method), request, timeout)

    def add_graph(self, model: Any, name: str | None = None,
                  gears: Sequence[int] | None = None) -> int:
        """Send a model; returns its graph id.

        `model`: a graphengine.Graph (the builder's), a GraphDef, ONNX or frozen TensorFlow
        GraphDef bytes, offline model bytes, an onnx.ModelProto, a TensorFlow GraphDef
        message, or a path to a model file (ONNX, offline, frozen TensorFlow, or a GraphDef
        that Graph.save wrote). `gears`: batch sizes to compile ahead (symbolic batch dim).
        """
        request = session_pb2.AddGraphRequest(session_id=self.id, name=name or "",
                                              gears=list(gears or ()), **model_fields(model))
        return self._call("AddGraph", request).graph_id

    def compile_graph(self, graph_id: int,
                      input_shapes: Mapping[str, Sequence[int]] | None = None) -> CompileReport:
        request = session_pb2.CompileGraphRequest(
            session_id=self.id, graph_id=graph_id,
            input_shapes=convert.input_shapes_to_pb(input_shapes))
        return convert.report_from_pb(self._call("CompileGraph", request).report)

    def _run_request(self, graph_id: int, inputs: Mapping[str, np.ndarray],
                     output_names: Sequence[str] | None, request_id: str = "",
                     iterations: int = 1, return_all: bool = False
                     ) -> session_pb2.RunGraphRequest:
        if type(iterations) is bool or not isinstance(iterations, (int, np.integer)) or \
                not 1 <= iterations < 1 << 32:
            raise InvalidArgument(f"iterations must be a positive integer, got {iterations!r}")
        return session_pb2.RunGraphRequest(
            session_id=self.id, graph_id=graph_id, inputs=convert.tensors_to_pb(inputs),
            output_names=list(output_names or ()), request_id=request_id,
            iterations=int(iterations), return_all=bool(return_all))

    def run_graph(self, graph_id: int, inputs: Mapping[str, np.ndarray],
                  output_names: Sequence[str] | None = None, *, iterations: int = 1,
                  return_all: bool = False, timeout: float | None = None
                  ) -> dict[str, np.ndarray]:
        """Outputs by name: in graph order, or in the order of `output_names`.

        `iterations=N` is sink mode, as `graphengine.Session.run_graph`: N runs in one call
        on the server (inputs with a leading axis of N are sliced per iteration), returning
        the last iteration's outputs, or every iteration's stacked with `return_all=True`.
        """
        response = self._call("RunGraph",
                              self._run_request(graph_id, inputs, output_names,
                                                iterations=iterations, return_all=return_all),
                              timeout)
        return _arrays(response.outputs)

    def run_graph_async(self, graph_id: int, inputs: Mapping[str, np.ndarray],
                        output_names: Sequence[str] | None = None, *,
                        timeout: float | None = None) -> Future:
        """A concurrent.futures.Future of run_graph's result (or its ClientError)."""
        call = self._stub.RunGraph.future(
            self._run_request(graph_id, inputs, output_names),
            timeout=timeout if timeout is not None else self._client.timeout,
            metadata=self._client._metadata)
        result: Future = Future()

        def done(f: Any) -> None:
            try:
                result.set_result(_arrays(f.result().outputs))
            except grpc.RpcError as err:
                result.set_exception(from_rpc_error(err))
            except Exception as exc:  # a cancelled call
                result.set_exception(exc)

        call.add_done_callback(done)
        return result

    def run_graph_stream(self, graph_id: int,
                         requests: Iterable[tuple[str, Mapping[str, np.ndarray]]],
                         output_names: Sequence[str] | None = None, *,
                         timeout: float | None = None) -> Iterator[StreamResult]:
        """Run each (request_id, inputs) on one stream; yields results as they finish.

        Many runs are in flight at once and results may come in any order; a failed run
        yields a StreamResult with its `error`, and the others go on.
        """
        stream = (self._run_request(graph_id, inputs, output_names, request_id)
                  for request_id, inputs in requests)
        try:
            for response in self._stub.RunGraphStream(
                    stream, timeout=timeout if timeout is not None else self._client.timeout,
                    metadata=self._client._metadata):
                if response.HasField("error"):
                    yield StreamResult(response.request_id, error=error_class(
                        response.error.code).received(response.error.message))
                else:
                    yield StreamResult(response.request_id, _arrays(response.outputs))
        except grpc.RpcError as err:
            raise from_rpc_error(err) from None

    def remove_graph(self, graph_id: int) -> None:
        self._call("RemoveGraph",
                   session_pb2.RemoveGraphRequest(session_id=self.id, graph_id=graph_id))

    def graph_info(self, graph_id: int) -> Any:
        """A `graphengine.api.types.GraphInfo`, as the in-process Session returns."""
        request = session_pb2.GetGraphInfoRequest(session_id=self.id, graph_id=graph_id)
        return convert.graph_info_from_pb(self._call("GetGraphInfo", request).info)

    def export_model(self, graph_id: int,
                     input_shapes: Mapping[str, Sequence[int]] | None = None) -> bytes:
        """The compiled graph as offline model bytes (every gear, or `input_shapes`)."""
        request = session_pb2.ExportModelRequest(
            session_id=self.id, graph_id=graph_id,
            input_shapes=convert.input_shapes_to_pb(input_shapes))
        return self._call("ExportModel", request).offline_model

    def import_model(self, data: bytes | str | os.PathLike, name: str | None = None) -> int:
        """Add an offline model (bytes or a file path); returns its graph id."""
        blob = data if isinstance(data, (bytes, bytearray)) else _read(data)
        request = session_pb2.ImportModelRequest(session_id=self.id, offline_model=bytes(blob),
                                                 name=name or "")
        return self._call("ImportModel", request).graph_id

    def close(self) -> None:
        """Close the session on the server; closing twice is a no-op."""
        if self._closed:
            return
        self._call("CloseSession", session_pb2.CloseSessionRequest(session_id=self.id))
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
        return f"RemoteSession({self.id!r} on {self._endpoint.target})"


def _arrays(tensors: Iterable[graph_pb2.Tensor]) -> dict[str, np.ndarray]:
    # Decoded arrays view immutable protobuf bytes; copy so that callers get ordinary
    # writable arrays, as the in-process Session returns.
    return {name: a.copy() for name, a in convert.tensors_from_pb(tensors).items()}


_TF_GRAPHDEFS = ("tensorflow.GraphDef", "graphengine.tensorflow.GraphDef")


def model_fields(model: Any) -> dict[str, Any]:
    """The AddGraphRequest `model` oneof for what the caller passed."""
    if isinstance(model, graph_pb2.GraphDef):
        return {"graph": model}
    if callable(getattr(model, "to_graphdef", None)):  # graphengine.Graph (the builder)
        return {"graph": model.to_graphdef()}
    if isinstance(model, (bytes, bytearray, memoryview)):
        return {"onnx_model": bytes(model)}
    if isinstance(model, (str, os.PathLike)) and str(model).endswith((".pbtxt", ".txt")):
        from google.protobuf import text_format

        with open(model, encoding="utf-8") as f:
            return {"graph": text_format.Parse(f.read(), graph_pb2.GraphDef())}
    if isinstance(model, (str, os.PathLike)):
        with open(model, "rb") as f:
            return {"onnx_model": f.read()}
    # onnx is imported only when needed: it is slow to import and most calls pass bytes.
    import onnx

    if isinstance(model, onnx.ModelProto):
        return {"onnx_model": model.SerializeToString()}
    # A TensorFlow GraphDef (tensorflow's message or our copy of it) travels as its bytes
    # in the same field; the server tells the formats apart.
    if getattr(getattr(model, "DESCRIPTOR", None), "full_name", "") in _TF_GRAPHDEFS:
        return {"onnx_model": model.SerializeToString()}
    raise TypeError(f"add_graph: cannot send a {type(model).__name__}; pass a "
                    "graphengine.Graph, a GraphDef, ONNX or TensorFlow GraphDef bytes, an "
                    "onnx.ModelProto, a TensorFlow GraphDef or a path to an .onnx or .pb file")
