"""Python's cyclic garbage collector paused while the compiler builds a model.

An import, a compile and a load are bursts of allocation: tens of thousands of nodes,
values, metas and tuples, nearly all alive until the burst ends. CPython's generational
collector counts allocations, not garbage: every 700 it walks the young objects, every
tenth of those the middle generation, and once the objects created since the last full
collection exceed a quarter of the old ones, every object of the process (the modules'
too). During a compile these walks find next to nothing: hf_mobilenet_v2's cold
add_graph + compile + first run made 41 collections, 23 ms of ~240 (one full
collection, over the ~48 k objects of the process, most of it).

Paused, the garbage a compile does make in cycles (a dropped copy of the graph, removed
nodes and their values) waits for the first collection after it: reference counting still
frees everything not in a cycle, arrays included, as it goes. The pause is counted, so
nested and concurrent compiles (a body compiled inside its graph's compile, two sessions
in two threads) resume collection only when the last one ends, and it never enables a
collector the application had disabled itself.
"""

from __future__ import annotations

import functools
import gc
import threading
from collections.abc import Callable
from typing import TypeVar

_lock = threading.Lock()
_depth = 0  # compiles under way that paused collection
_resume = False  # whether collection was enabled when the first of them began

F = TypeVar("F", bound=Callable)


def pause() -> None:
    """Automatic collection off until the matching `resume` (process-wide, counted)."""
    global _depth, _resume
    with _lock:
        if _depth == 0:
            _resume = gc.isenabled()
            gc.disable()
        _depth += 1


def resume() -> None:
    """The end of one `pause`: collection back on when it ends the last one under way."""
    global _depth
    with _lock:
        _depth -= 1
        if _depth == 0 and _resume:
            gc.enable()


class collection_paused:
    """`with collection_paused():` the block runs with automatic collection paused. A
    plain class, not a generator: nothing is allocated before the pause begins."""

    def __enter__(self) -> None:
        pause()

    def __exit__(self, *exc) -> None:
        resume()


def paused(fn: F) -> F:
    """`fn` run with collection paused (a decorator for the compiler's entry points)."""
    @functools.wraps(fn)
    def run(*args, **kwargs):
        pause()
        try:
            return fn(*args, **kwargs)
        finally:
            resume()
    return run  # type: ignore[return-value]
