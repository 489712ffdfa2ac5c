"""The errors the client SDK raises: graphengine.errors, the same classes as in process.

A failed RPC raises the `graphengine.errors` class of its status (`InvalidArgument` for a
malformed graph or a wrong input shape, `NotFound` for an unknown session or graph id, ...),
so code written against the in-process `Session` catches the same exceptions remotely. The
exception keeps:

- `code`: the `graphengine.errors.ErrorCode` (its name is the gRPC status name);
- `message`: the server's message verbatim (it names the graph, node or tensor);
- `error_type`, `graph`, `node`, `tensor`, `stage`: the server-side kind (InvalidGraph,
  InvalidInput and InvalidModel share INVALID_ARGUMENT) and its context, read from the
  standard `google.rpc.Status` details (one `google.rpc.ErrorInfo`), or from the project's
  own trailing metadata for older servers; None when the server sent neither.
"""

from __future__ import annotations

from typing import Any

import grpc

from graphengine.errors import (
    CONTEXT,
    DOMAIN,
    Aborted,
    AlreadyExists,
    Cancelled,
    DataLoss,
    DeadlineExceeded,
    ErrorCode,
    FailedPrecondition,
    GraphEngineError,
    Internal,
    InvalidArgument,
    NotFound,
    OutOfRange,
    PermissionDenied,
    ResourceExhausted,
    Unauthenticated,
    Unavailable,
    Unimplemented,
    Unknown,
    error_class,
)

# What this SDK has always called its base class: the one hierarchy's base now.
ClientError = GraphEngineError

__all__ = ["Aborted", "AlreadyExists", "Cancelled", "ClientError", "DataLoss",
           "DeadlineExceeded", "ErrorCode", "OutOfRange",
           "FailedPrecondition", "GraphEngineError", "Internal", "InvalidArgument",
           "NotFound", "PermissionDenied", "ResourceExhausted", "Unauthenticated",
           "Unavailable", "Unimplemented", "Unknown", "error_class", "from_rpc_error"]

STATUS_DETAILS = "grpc-status-details-bin"  # google.rpc.Status, as gRPC defines it
# The project's own keys (servers before the standard details; still sent beside them).
_META_TYPE = "graphengine-error-type-bin"
_META_FIELDS = {f"graphengine-{k}-bin": k for k in CONTEXT}


def _status_details(value: bytes) -> dict[str, Any] | None:
    """error_type and context from a serialized google.rpc.Status's ErrorInfo, if any."""
    from google.rpc import error_details_pb2, status_pb2

    status = status_pb2.Status()
    try:
        status.ParseFromString(value)
    except Exception:  # not ours to fail on: fall back to the metadata
        return None
    for any_msg in status.details:
        info = error_details_pb2.ErrorInfo()
        if any_msg.Is(info.DESCRIPTOR) and any_msg.Unpack(info) and info.domain == DOMAIN:
            found: dict[str, Any] = {k: info.metadata[k] for k in CONTEXT if k in info.metadata}
            found["error_type"] = info.reason or None
            return found
    return None


def from_rpc_error(err: grpc.RpcError) -> GraphEngineError:
    """The graphengine.errors exception for a failed call (a grpc.RpcError that is also a
    grpc.Call)."""
    status: grpc.StatusCode = err.code() if hasattr(err, "code") else grpc.StatusCode.UNKNOWN
    message = (err.details() if hasattr(err, "details") else None) or str(err)
    context: dict[str, Any] = {}
    trailing = err.trailing_metadata() if hasattr(err, "trailing_metadata") else None
    details = None
    for key, value in trailing or ():
        if key == STATUS_DETAILS and isinstance(value, bytes):
            details = _status_details(value)
            continue
        text = value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)
        if key == _META_TYPE:
            context["error_type"] = text
        elif key in _META_FIELDS:
            context[_META_FIELDS[key]] = text
    if details is not None:
        context = details
    return error_class(status.name).received(message, **context)
