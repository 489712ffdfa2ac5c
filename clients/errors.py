"""Exceptions the client SDK raises for failed RPCs.

Every failed call raises a `ClientError` subclass chosen by the gRPC status code, e.g.
`InvalidArgument` for a malformed graph or a wrong input shape, `NotFound` for an unknown
session or graph id. The exception keeps:

- `code`: the `grpc.StatusCode`;
- `message`: the server's message verbatim (it names the graph, node or tensor);
- `error_type`, `graph`, `node`, `tensor`, `stage`: the server-side exception's class name
  and context, when the server sent them (None otherwise).

These are deliberately not the engine's exception classes: what arrives over the wire is
a status, and several engine errors share one status (InvalidGraph, InvalidModel and
InvalidInput are all INVALID_ARGUMENT); `error_type` tells them apart when needed.
"""

from __future__ import annotations

from typing import Any

import grpc

# Kept in step with graphengine.server.errors (the server writes these keys).
_META_TYPE = "graphengine-error-type-bin"
_META_FIELDS = {"graphengine-graph-bin": "graph", "graphengine-node-bin": "node",
                "graphengine-tensor-bin": "tensor", "graphengine-stage-bin": "stage"}


class ClientError(Exception):
    """A failed RPC: the status code and the server's message."""

    def __init__(self, code: grpc.StatusCode, message: str, *, error_type: str | None = None,
                 graph: str | None = None, node: str | None = None,
                 tensor: str | None = None, stage: str | None = None) -> None:
        self.code = code
        self.message = message
        self.error_type = error_type
        self.graph = graph
        self.node = node
        self.tensor = tensor
        self.stage = stage
        super().__init__(f"{code.name}: {message}")


class InvalidArgument(ClientError):
    """The request is wrong: malformed graph, bytes that are no model, bad inputs."""


class NotFound(ClientError):
    """Unknown session id or graph id."""


class AlreadyExists(ClientError):
    pass


class FailedPrecondition(ClientError):
    """The request is valid but the state is not, e.g. running a graph that cannot compile."""


class ResourceExhausted(ClientError):
    """A limit was hit: sessions, memory, message size."""


class Unavailable(ClientError):
    """The server cannot be reached or is shutting down; retrying later may work."""


class DeadlineExceeded(ClientError):
    pass


class Cancelled(ClientError):
    pass


class Unimplemented(ClientError):
    pass


class Unauthenticated(ClientError):
    pass


class PermissionDenied(ClientError):
    pass


class Internal(ClientError):
    """A server bug or a kernel failure; the message says where."""


_BY_CODE: dict[grpc.StatusCode, type[ClientError]] = {
    grpc.StatusCode.INVALID_ARGUMENT: InvalidArgument,
    grpc.StatusCode.NOT_FOUND: NotFound,
    grpc.StatusCode.ALREADY_EXISTS: AlreadyExists,
    grpc.StatusCode.FAILED_PRECONDITION: FailedPrecondition,
    grpc.StatusCode.RESOURCE_EXHAUSTED: ResourceExhausted,
    grpc.StatusCode.UNAVAILABLE: Unavailable,
    grpc.StatusCode.DEADLINE_EXCEEDED: DeadlineExceeded,
    grpc.StatusCode.CANCELLED: Cancelled,
    grpc.StatusCode.UNIMPLEMENTED: Unimplemented,
    grpc.StatusCode.UNAUTHENTICATED: Unauthenticated,
    grpc.StatusCode.PERMISSION_DENIED: PermissionDenied,
    grpc.StatusCode.INTERNAL: Internal,
}


def error_class(code: grpc.StatusCode) -> type[ClientError]:
    return _BY_CODE.get(code, ClientError)


def from_rpc_error(err: grpc.RpcError) -> ClientError:
    """The ClientError for a failed call (a grpc.RpcError that is also a grpc.Call)."""
    code: grpc.StatusCode = err.code() if hasattr(err, "code") else grpc.StatusCode.UNKNOWN
    message = (err.details() if hasattr(err, "details") else None) or str(err)
    context: dict[str, Any] = {}
    trailing = err.trailing_metadata() if hasattr(err, "trailing_metadata") else None
    for key, value in trailing or ():
        text = value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)
        if key == _META_TYPE:
            context["error_type"] = text
        elif key in _META_FIELDS:
            context[_META_FIELDS[key]] = text
    return error_class(code)(code, message, **context)
