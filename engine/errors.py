"""The engine's errors: the finer kinds beneath graphengine.errors' code classes.

`graphengine.errors` is the one hierarchy (a class per gRPC status code, shared by the
in-process Session and the remote client); the engine raises these kinds of its own under
it, each a subclass of its code's class: `InvalidGraph` is an `InvalidArgument`. The server
maps codes to statuses in one place (graphengine.server.rpc.errors). Messages name the graph,
node or tensor, what was expected and what was found, and the stage that failed.
"""

from __future__ import annotations

from graphengine.errors import (
    NAME_CHARS,
    ErrorCode,
    FailedPrecondition,
    GraphEngineError,
    Internal,
    InvalidArgument,
    NotFound,
    ResourceExhausted,
    Unauthenticated,
    Unavailable,
    bounded_text,
)

__all__ = ["NAME_CHARS", "CompilerError", "ErrorCode", "ExecutionError", "FailedPrecondition",
           "GraphEngineError", "InvalidGraph", "InvalidInput", "InvalidModel", "InvalidPlugin",
           "NotFound",
           "ResourceExhausted", "SessionElsewhere", "ShapeError", "Unauthenticated", "Unavailable",
           "bounded_text", "decode_problem", "nested_deeper_than"]


class InvalidGraph(InvalidArgument):
    """The graph itself is malformed: cycle, dangling input, unknown op, bad attribute."""


class ShapeError(InvalidGraph):
    """Shapes or dtypes of a node's inputs do not fit its op."""


class InvalidModel(InvalidArgument):
    """Bytes that are not a model, or an offline model that is truncated or corrupt."""


class InvalidPlugin(InvalidArgument):
    """A custom operator or a plugin file that cannot be registered: a bad description, a
    file that does not load, a name GraphEngine has already."""


class InvalidInput(InvalidArgument):
    """A run request does not match the graph: missing input, wrong shape or dtype."""


class SessionElsewhere(NotFound):
    """A session id that names another replica: `replica` is its owner, `address` where that
    replica is reached ("" when this server does not know)."""


class CompilerError(Internal):
    """A compiler pass failed on a graph that passed validation: GraphEngine's bug, not the
    caller's, so INTERNAL (INVALID_ARGUMENT would tell the caller to fix a valid graph); the
    message names the pass and the exception."""


class ExecutionError(Internal):
    """A kernel failed while running; the message names the node."""


def decode_problem(failed: str, thing: str, exc: Exception,
                   data: bytes | memoryview | None = None) -> str:
    """Why protobuf bytes did not parse, in the user's terms: `thing` ("the model") nested
    deeper than protobuf parses (subgraphs inside subgraphs: If, Loop, Scan bodies) says so,
    instead of calling the bytes something they may well be; else `failed` and the cause.

    protobuf 7 says MaxDepth in its error; protobuf 6 (upb) says only that parsing failed, so
    with the bytes at hand their nesting is measured (`nested_deeper_than`)."""
    text = str(exc)
    if ("MaxDepth" in text or "recursion" in text.lower()
            or (data is not None and nested_deeper_than(data, _PROTOBUF_MAX_DEPTH))):
        return (f"{thing} is nested too deep: protobuf parses at most 100 levels of nested "
                f"messages (each subgraph of If, Loop or Scan takes 3)")
    return f"{failed}: {text}"


_PROTOBUF_MAX_DEPTH = 100
_DEPTH_BUDGET = 64 << 20  # payload bytes descended into before the measure gives up


class _OverBudget(Exception):
    pass


def nested_deeper_than(data: bytes | memoryview, levels: int) -> bool:
    """Whether `data`, read as protobuf wire format, nests more than `levels` messages deep.

    A length-delimited field whose payload reads as a message counts as one level deeper
    (a string or bytes field that happens to read as one counts too: this only explains a
    parse that already failed). At most _DEPTH_BUDGET payload bytes are descended into;
    past that the answer is False (unknown)."""
    buf = memoryview(data).cast("B")
    try:
        return _depth(buf, 0, len(buf), levels + 1, [_DEPTH_BUDGET]) > levels
    except _OverBudget:
        return False


def _varint(buf: memoryview, pos: int, end: int) -> tuple[int, int]:
    value = shift = 0
    while pos < end and shift < 64:
        byte = buf[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, pos
        shift += 7
    return -1, pos


def _depth(buf: memoryview, pos: int, end: int, room: int, budget: list[int]) -> int:
    """The nesting below buf[pos:end] as a message, counted up to `room`; -1: not a message."""
    deepest = 0
    while pos < end:
        tag, pos = _varint(buf, pos, end)
        wire = tag & 7
        if tag >> 3 == 0 or wire in (3, 4, 6, 7):  # also tag == -1
            return -1
        if wire == 0:
            value, pos = _varint(buf, pos, end)
            if value < 0:
                return -1
        elif wire == 2:
            size, pos = _varint(buf, pos, end)
            if size < 0 or pos + size > end:
                return -1
            if size and room > 0:
                budget[0] -= size
                if budget[0] < 0:
                    raise _OverBudget
                deepest = max(deepest, _depth(buf, pos, pos + size, room - 1, budget) + 1)
                if deepest >= room:
                    return room
            pos += size
        else:
            pos += 8 if wire == 1 else 4
    return deepest if pos == end else -1
