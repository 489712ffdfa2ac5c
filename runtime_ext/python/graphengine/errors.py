"""The errors GraphEngine raises: one hierarchy, in process and over the wire.

Every error is a `GraphEngineError` with an `ErrorCode` (the gRPC status names) and one class
per code (`InvalidArgument`, `NotFound`, ...). The in-process `Session` raises them, or the
engine's finer kinds beneath them (`graphengine.engine.errors.InvalidGraph` is an
`InvalidArgument`); the remote client raises the class of the status it received, with the
server's kind in `error_type`. So `except graphengine.errors.NotFound` catches an unknown graph
id either way.

Context travels with the error: `graph`, `node`, `tensor`, `stage` and `error_type`, and for a
session another replica holds, `replica` (its id) and `address` (where it is reached). On the
wire they are the standard `google.rpc.Status` details (in the `grpc-status-details-bin`
trailer) as one `google.rpc.ErrorInfo` (reason: the kind, domain: `graphengine`, metadata:
the context), so a client in any language decodes them with its gRPC library alone.

This module imports nothing of the compiler, the runtime or gRPC.
"""

from __future__ import annotations

import enum

__all__ = ["DOMAIN", "Aborted", "AlreadyExists", "Cancelled", "DataLoss", "DeadlineExceeded",
           "ErrorCode", "FailedPrecondition", "GraphEngineError", "Internal",
           "InvalidArgument", "NotFound", "OutOfRange", "PermissionDenied",
           "ResourceExhausted", "Unauthenticated", "Unavailable", "Unimplemented", "Unknown",
           "bounded_text", "error_class"]

DOMAIN = "graphengine"  # google.rpc.ErrorInfo.domain of the errors this project raises
CONTEXT = ("graph", "node", "tensor", "stage", "replica", "address")
# A user's name (graph, node, tensor, session) as it appears in a message or in metadata: a
# graph name of a megabyte is the user's to send, not ours to echo (gRPC's trailers hold 8 KiB).
NAME_CHARS = 200


class ErrorCode(enum.Enum):
    """The gRPC status codes an error may carry; `number` is the code on the wire."""

    CANCELLED = "CANCELLED"
    UNKNOWN = "UNKNOWN"
    INVALID_ARGUMENT = "INVALID_ARGUMENT"
    DEADLINE_EXCEEDED = "DEADLINE_EXCEEDED"
    NOT_FOUND = "NOT_FOUND"
    ALREADY_EXISTS = "ALREADY_EXISTS"
    PERMISSION_DENIED = "PERMISSION_DENIED"
    RESOURCE_EXHAUSTED = "RESOURCE_EXHAUSTED"
    FAILED_PRECONDITION = "FAILED_PRECONDITION"
    UNIMPLEMENTED = "UNIMPLEMENTED"
    INTERNAL = "INTERNAL"
    UNAVAILABLE = "UNAVAILABLE"
    UNAUTHENTICATED = "UNAUTHENTICATED"
    ABORTED = "ABORTED"
    OUT_OF_RANGE = "OUT_OF_RANGE"
    DATA_LOSS = "DATA_LOSS"

    @property
    def number(self) -> int:
        """The status code's number on the wire (gRPC's numbering: NOT_FOUND is 5)."""
        return _NUMBERS[self]


_NUMBERS = {ErrorCode.CANCELLED: 1, ErrorCode.UNKNOWN: 2, ErrorCode.INVALID_ARGUMENT: 3,
            ErrorCode.DEADLINE_EXCEEDED: 4, ErrorCode.NOT_FOUND: 5,
            ErrorCode.ALREADY_EXISTS: 6, ErrorCode.PERMISSION_DENIED: 7,
            ErrorCode.RESOURCE_EXHAUSTED: 8, ErrorCode.FAILED_PRECONDITION: 9,
            ErrorCode.UNIMPLEMENTED: 12, ErrorCode.INTERNAL: 13, ErrorCode.UNAVAILABLE: 14,
            ErrorCode.UNAUTHENTICATED: 16, ErrorCode.ABORTED: 10, ErrorCode.OUT_OF_RANGE: 11,
            ErrorCode.DATA_LOSS: 15}


def bounded_text(text: object, limit: int) -> str:
    """`text` as printable UTF-8 of at most about `limit` characters: control characters and
    anything UTF-8 cannot encode escaped, the middle of a long text cut (its start and end
    are what identify it), and the cut said."""
    s = str(text)
    if len(s) > limit:
        keep = max(limit - 40, 8)
        s = f"{s[:keep * 3 // 4]}...({len(s)} chars)...{s[-(keep // 4):]}"
    if not s.isprintable():
        s = "".join(c if c.isprintable() else repr(c)[1:-1] for c in s)
    return s.encode("utf-8", "backslashreplace").decode("utf-8")


class GraphEngineError(Exception):
    """Base of every error GraphEngine raises on purpose: a code, a message that names the
    graph, node or tensor at fault, and that context as fields."""

    code = ErrorCode.INTERNAL

    def __init__(self, message: str, *, graph: str | None = None, node: str | None = None,
                 tensor: str | None = None, stage: str | None = None,
                 replica: str | None = None, address: str | None = None) -> None:
        self.message = message
        self.graph = graph
        self.node = node
        self.tensor = tensor
        self.stage = stage
        self.replica = replica  # a session's owner, when another replica holds it
        self.address = address
        self._error_type: str | None = None
        super().__init__(self._format())

    @property
    def error_type(self) -> str:
        """The kind of error: the raising class's name, also for one received over the wire
        (InvalidGraph, InvalidInput and InvalidModel share INVALID_ARGUMENT)."""
        return self._error_type or type(self).__name__

    def _format(self) -> str:
        where = []
        if self.stage:
            where.append(f"stage {self.stage}")
        if self.graph:
            where.append(f"graph '{bounded_text(self.graph, NAME_CHARS)}'")
        prefix = f"[{', '.join(where)}] " if where else ""
        return prefix + self.message

    def with_context(self, *, graph: str | None = None, stage: str | None = None):
        """Fill in context an inner layer did not know; returns self for `raise ... from`."""
        if graph and not self.graph:
            self.graph = graph
        if stage and not self.stage:
            self.stage = stage
        self.args = (self._format(),)
        return self

    @classmethod
    def received(cls, message: str, *, error_type: str | None = None,
                 **context: str | None) -> GraphEngineError:
        """The error as a client receives it: `message` is already the server's full text
        (with its context prefix), the context fields are set beside it."""
        exc = cls(message)
        for key in CONTEXT:
            setattr(exc, key, context.get(key))
        exc._error_type = error_type
        return exc


class InvalidArgument(GraphEngineError):
    """The request is wrong: a malformed graph, bytes that are no model, bad inputs."""

    code = ErrorCode.INVALID_ARGUMENT


class NotFound(GraphEngineError):
    """An unknown session, graph or model."""

    code = ErrorCode.NOT_FOUND


class AlreadyExists(GraphEngineError):
    """Something of that name exists already."""

    code = ErrorCode.ALREADY_EXISTS


class FailedPrecondition(GraphEngineError):
    """The request is valid but the state is not (e.g. a model that is not ready)."""

    code = ErrorCode.FAILED_PRECONDITION


class ResourceExhausted(GraphEngineError):
    """A configured limit was hit: sessions, memory, tensor size, message size."""

    code = ErrorCode.RESOURCE_EXHAUSTED


class Unavailable(GraphEngineError):
    """The server cannot be reached or is shutting down; retrying later may work."""

    code = ErrorCode.UNAVAILABLE


class DeadlineExceeded(GraphEngineError):
    """The caller's deadline passed before the work finished."""

    code = ErrorCode.DEADLINE_EXCEEDED


class Cancelled(GraphEngineError):
    """The caller gave up (cancelled the call) while the work was waiting."""

    code = ErrorCode.CANCELLED


class Unimplemented(GraphEngineError):
    """The server does not offer this call."""

    code = ErrorCode.UNIMPLEMENTED


class Unauthenticated(GraphEngineError):
    """No bearer token, or one the server does not know."""

    code = ErrorCode.UNAUTHENTICATED


class PermissionDenied(GraphEngineError):
    """The identity may not do this."""

    code = ErrorCode.PERMISSION_DENIED


class Internal(GraphEngineError):
    """GraphEngine's own failure (a bug, a kernel that failed); the message says where."""

    code = ErrorCode.INTERNAL


class Unknown(GraphEngineError):
    """A status the client could not map to another class."""

    code = ErrorCode.UNKNOWN


class Aborted(GraphEngineError):
    """The work was stopped by a conflict with other work."""

    code = ErrorCode.ABORTED


class OutOfRange(GraphEngineError):
    """A value past the end of what it indexes."""

    code = ErrorCode.OUT_OF_RANGE


class DataLoss(GraphEngineError):
    """Data was lost or corrupted."""

    code = ErrorCode.DATA_LOSS


_BY_CODE: dict[ErrorCode, type[GraphEngineError]] = {
    cls.code: cls for cls in (InvalidArgument, NotFound, AlreadyExists, FailedPrecondition,
                              ResourceExhausted, Unavailable, DeadlineExceeded, Cancelled,
                              Unimplemented, Unauthenticated, PermissionDenied, Internal,
                              Unknown, Aborted, OutOfRange, DataLoss)}


def error_class(code: ErrorCode | str) -> type[GraphEngineError]:
    """The class for a code, given as an ErrorCode or its name (grpc.StatusCode.X.name)."""
    if not isinstance(code, ErrorCode):
        code = ErrorCode.__members__.get(str(code), ErrorCode.UNKNOWN)
    return _BY_CODE[code]
