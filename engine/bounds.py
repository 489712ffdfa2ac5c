"""Bounds on every number a request, a configuration or a file gives us.

A number that sizes work (streams, chunks, instances, gears, dims, array lengths, nesting) is
checked here before anything is allocated or computed with it: a request costs what it
says it costs only after the check, never before. Two kinds of bound, two codes:

- a hard bound (below): no configuration could allow more, so the value is the caller's
  mistake: `InvalidInput` (INVALID_ARGUMENT), naming the option or tensor, the value and
  the bound;
- a configured limit (`max_tensor_elements`, a session's memory quota, the device's
  memory): the request is well-formed but too big for this server: `ResourceExhausted`.

The memory estimate (`check_memory_budget`) is a pass that runs right after shape inference,
so a compile whose tensors cannot fit is refused before folding, fusion, planning and load.
"""

from __future__ import annotations

import dataclasses
import math
import os
from collections.abc import Sequence

from .errors import InvalidInput, ResourceExhausted
from .ir import Graph, Value, ValueKind
from .passes import PassResult

# ---- hard bounds (documented in docs/ARCHITECTURE.md, "Bounds") ---------------------------
MAX_STREAMS = 64  # streams of one device partition: each is a worker thread and a clock column
MAX_DATA_PARALLEL = 64  # data-parallel chunks: each clones the graph
MAX_INSTANCES = 64  # model instances per signature: each has an arena of its own
MAX_GEARS = 16  # gears of one graph: each is compiled and loaded ahead
MAX_GEAR = 1 << 16  # the largest batch size a gear may name
MAX_RANK = 32  # dims of one tensor (numpy's own limit is 64)
MAX_ELEMENTS = 1 << 40  # elements of one tensor, and the product of its non-zero dims
# What a tensor may hold when no `max_tensor_elements` is configured (8 GiB of float32).
DEFAULT_MAX_TENSOR_ELEMENTS = 1 << 31
MAX_NESTING = 128  # an offline description's depth (16 with one If; decoding recurses)
MAX_OFFLINE_MODELS = 64  # compiled signatures in one offline model
# An array stored as shared pieces is rebuilt by copying: all of a file's rebuilt arrays
# together may take at most this many times its weights section (gears share most pieces).
PIECE_EXPANSION = 64

__all__ = ["DEFAULT_MAX_TENSOR_ELEMENTS", "MAX_DATA_PARALLEL", "MAX_ELEMENTS", "MAX_GEAR",
           "MAX_GEARS", "MAX_INSTANCES", "MAX_NESTING", "MAX_OFFLINE_MODELS", "MAX_RANK",
           "MAX_STREAMS", "PIECE_EXPANSION", "MemoryBudget", "check_int",
           "check_memory_budget", "element_count", "largest_tensor", "physical_memory_bytes"]


def check_int(what: str, value: int, low: int, high: int) -> int:
    """`value` as an int within [low, high], else InvalidInput naming `what` and the bound."""
    if isinstance(value, bool) or int(value) != value:
        raise InvalidInput(f"{what} must be an integer, got {value!r}")
    value = int(value)
    if not low <= value <= high:
        raise InvalidInput(f"{what} is {value}; it must be between {low} and {high}")
    return value


def element_count(what: str, shape: Sequence[int], *, limit: int | None = 0,
                  present: int | None = None, unit: int = 1, tensor: str | None = None,
                  graph: str | None = None) -> int:
    """The elements of `shape`, checked: hard bounds, then that the request carries them
    (`present` bytes, or values when `unit` is 1; InvalidInput), then `limit`
    (ResourceExhausted; 0 or None: none). `what` names the tensor in the messages."""
    if len(shape) > MAX_RANK:
        raise InvalidInput(f"{what}: rank {len(shape)} exceeds the bound of {MAX_RANK}",
                           tensor=tensor, graph=graph)
    dims = [int(d) for d in shape]
    if any(d < 0 for d in dims):
        raise InvalidInput(f"{what}: negative dimension in shape {dims}", tensor=tensor,
                           graph=graph)
    # Zero dims are left out: numpy refuses (0, 2**62, 2**62) although it holds nothing.
    if math.prod(max(d, 1) for d in dims) > MAX_ELEMENTS:
        raise InvalidInput(f"{what}: shape {dims} exceeds the bound of {MAX_ELEMENTS} "
                           f"elements", tensor=tensor, graph=graph)
    count = math.prod(dims)
    # A shape that claims more than the request carries is malformed, whatever the limit.
    if present is not None and count * unit != present:
        noun = "bytes" if unit > 1 else "values"
        raise InvalidInput(f"{what}: shape {dims} needs {count * unit} {noun}, the request "
                           f"carries {present}", tensor=tensor, graph=graph)
    if limit and count > limit:
        raise ResourceExhausted(f"{what}: shape {dims} has {count} elements; the server "
                                f"accepts at most {limit} per tensor", tensor=tensor,
                                graph=graph)
    return count


def physical_memory_bytes() -> int:
    """The machine's memory: the host device's size when no other is configured (0: unknown)."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return 0


# ---- the memory estimate ----------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class MemoryBudget:
    """Bytes a compile may plan for, and why (the quota's state, for the message)."""

    bytes: int
    reason: str
    copies: int = 1  # instances: each holds the tensors once


def largest_tensor(graph: Graph) -> tuple[str, str, int]:
    """(tensor, what holds it, bytes) of the largest tensor a run must hold whole.

    A lower bound, safe under batch splitting: inputs and outputs are held whole (the
    caller's arrays and the arena's copies), an intermediate only one sample at a time
    (split_batch may run it in chunks of a sample). Values with symbolic dims are skipped.
    """
    best: Value | None = None
    best_bytes = 0
    whole = {id(v) for v in graph.outputs}
    for v in graph.values.values():
        meta = v.meta
        if meta is None or v.kind is ValueKind.CONSTANT or not meta.is_static:
            continue  # a constant is already in memory: the imported file's, not the request's
        nbytes = meta.numel * meta.dtype.itemsize
        if v.kind is ValueKind.INTERMEDIATE and id(v) not in whole and meta.shape:
            nbytes //= max(meta.shape[0], 1)  # type: ignore[call-overload]
        if nbytes > best_bytes:
            best, best_bytes = v, nbytes
    if best is None:
        return ("", "", 0)
    # what holds it, worded for the one found (not for every value looked at)
    if best.kind is ValueKind.INPUT:
        holder = "an input"
    elif id(best) in whole:
        holder = "a graph output"
    elif best.producer is not None:
        holder = f"an output of node '{best.producer.name}', per sample"
    else:
        holder = "an intermediate, per sample"
    return best.name, f"{holder}: {best.meta}", best_bytes


def check_memory_budget(graph: Graph, budget: MemoryBudget | None = None) -> PassResult:
    """Refuse, right after shape inference, a graph whose largest tensor cannot fit."""
    if budget is None:
        return PassResult(graph, False, "no budget")
    name, held, nbytes = largest_tensor(graph)
    need = nbytes * budget.copies
    if need > budget.bytes:
        copies = f" ({budget.copies} instances)" if budget.copies > 1 else ""
        raise ResourceExhausted(
            f"graph '{graph.name}' needs {need} bytes at these input shapes{copies} before "
            f"anything is planned: tensor '{name}' ({held}) alone takes {nbytes}; "
            f"{budget.reason}", graph=graph.name, tensor=name)
    return PassResult(graph, False, f"largest tensor '{name}' {nbytes} B of {budget.bytes}")
