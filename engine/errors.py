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
           "bounded_text", "decode_problem"]


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


def decode_problem(failed: str, thing: str, exc: Exception) -> str:
    """Why protobuf bytes did not parse, in the user's terms: `thing` ("the model") nested
    deeper than protobuf parses (subgraphs inside subgraphs: If, Loop, Scan bodies) says so,
    instead of calling the bytes something they may well be; else `failed` and the cause."""
    text = str(exc)
    if "MaxDepth" in text or "recursion" in text.lower():
        return (f"{thing} is nested too deep: protobuf parses at most 100 levels of nested "
                f"messages (each subgraph of If, Loop or Scan takes 3)")
    return f"{failed}: {text}"
