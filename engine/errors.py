"""Domain exceptions: the one place every layer raises from.

Each exception carries an ErrorCode; the server maps codes to gRPC status codes in one
place (graphengine.server.errors). Messages name the graph, node or tensor, what was
expected and what was found, and the stage that failed.
"""

from __future__ import annotations

import enum

# A user's name (graph, node, tensor, session) as it appears in a message or in metadata: a
# graph name of a megabyte is the user's to send, not ours to echo (gRPC's trailers hold 8 KiB).
NAME_CHARS = 200


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


class ErrorCode(enum.Enum):
    INVALID_ARGUMENT = "INVALID_ARGUMENT"
    NOT_FOUND = "NOT_FOUND"
    ALREADY_EXISTS = "ALREADY_EXISTS"
    FAILED_PRECONDITION = "FAILED_PRECONDITION"
    RESOURCE_EXHAUSTED = "RESOURCE_EXHAUSTED"
    UNAVAILABLE = "UNAVAILABLE"
    UNAUTHENTICATED = "UNAUTHENTICATED"
    UNIMPLEMENTED = "UNIMPLEMENTED"
    INTERNAL = "INTERNAL"


class GraphEngineError(Exception):
    """Base of every error GraphEngine raises on purpose."""

    code = ErrorCode.INTERNAL

    def __init__(
        self,
        message: str,
        *,
        graph: str | None = None,
        node: str | None = None,
        tensor: str | None = None,
        stage: str | None = None,
    ) -> None:
        self.message = message
        self.graph = graph
        self.node = node
        self.tensor = tensor
        self.stage = stage
        super().__init__(self._format())

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


class InvalidGraph(GraphEngineError):
    """The graph itself is malformed: cycle, dangling input, unknown op, bad attribute."""

    code = ErrorCode.INVALID_ARGUMENT


class ShapeError(InvalidGraph):
    """Shapes or dtypes of a node's inputs do not fit its op."""


class InvalidModel(GraphEngineError):
    """Bytes that are not a model, or an offline model that is truncated or corrupt."""

    code = ErrorCode.INVALID_ARGUMENT


class InvalidInput(GraphEngineError):
    """A run request does not match the graph: missing input, wrong shape or dtype."""

    code = ErrorCode.INVALID_ARGUMENT


class NotFound(GraphEngineError):
    code = ErrorCode.NOT_FOUND


class FailedPrecondition(GraphEngineError):
    code = ErrorCode.FAILED_PRECONDITION


class ResourceExhausted(GraphEngineError):
    code = ErrorCode.RESOURCE_EXHAUSTED


class Unavailable(GraphEngineError):
    code = ErrorCode.UNAVAILABLE


class Unauthenticated(GraphEngineError):
    code = ErrorCode.UNAUTHENTICATED


class CompilerError(GraphEngineError):
    """A compiler pass failed on a graph that passed validation: GraphEngine's bug, not the
    caller's, so INTERNAL (INVALID_ARGUMENT would tell the caller to fix a valid graph); the
    message names the pass and the exception."""

    code = ErrorCode.INTERNAL


class ExecutionError(GraphEngineError):
    """A kernel failed while running; the message names the node."""

    code = ErrorCode.INTERNAL


def decode_problem(failed: str, thing: str, exc: Exception) -> str:
    """Why protobuf bytes did not parse, in the user's terms: `thing` ("the model") nested
    deeper than protobuf parses (subgraphs inside subgraphs: If, Loop, Scan bodies) says so,
    instead of calling the bytes something they may well be; else `failed` and the cause."""
    text = str(exc)
    if "MaxDepth" in text or "recursion" in text.lower():
        return (f"{thing} is nested too deep: protobuf parses at most 100 levels of nested "
                f"messages (each subgraph of If, Loop or Scan takes 3)")
    return f"{failed}: {text}"
