"""Memory planning: a pure function from buffer lifetimes to offsets in one arena.

Lifetimes are inclusive step intervals of a schedule. Two strategies run and the smaller
arena wins; both are reported next to the lower bound (peak bytes live at any step).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence

ALIGN = 64


@dataclasses.dataclass(frozen=True)
class Buffer:
    id: int
    size: int
    start: int
    end: int  # inclusive

    def overlaps(self, other: Buffer) -> bool:
        return self.start <= other.end and other.start <= self.end


@dataclasses.dataclass(frozen=True)
class MemoryPlan:
    offsets: dict[int, int]
    arena_bytes: int
    lower_bound: int
    strategy: str


def align(n: int) -> int:
    return (n + ALIGN - 1) // ALIGN * ALIGN


def lower_bound(buffers: Sequence[Buffer]) -> int:
    """Peak of the sum of (aligned) sizes live at one step: no plan can do better."""
    events: dict[int, int] = {}
    for b in buffers:
        events[b.start] = events.get(b.start, 0) + align(b.size)
        events[b.end + 1] = events.get(b.end + 1, 0) - align(b.size)
    peak = live = 0
    for t in sorted(events):
        live += events[t]
        peak = max(peak, live)
    return peak


def _place(order: Sequence[Buffer]) -> dict[int, int]:
    """Best-fit: each buffer takes the smallest gap between live neighbours that fits."""
    placed: list[tuple[int, Buffer]] = []
    offsets: dict[int, int] = {}
    for b in order:
        size = align(b.size)
        busy = sorted((off, align(o.size)) for off, o in placed if o.overlaps(b))
        best_off, best_gap, cursor = None, None, 0
        for off, sz in busy:
            gap = off - cursor
            if gap >= size and (best_gap is None or gap < best_gap):
                best_off, best_gap = cursor, gap
            cursor = max(cursor, off + sz)
        if best_off is None:
            best_off = cursor
        offsets[b.id] = best_off
        placed.append((best_off, b))
    return offsets


def _by_size(buffers: Sequence[Buffer]) -> dict[int, int]:
    return _place(sorted(buffers, key=lambda b: (-b.size, b.start, b.id)))


def _by_start(buffers: Sequence[Buffer]) -> dict[int, int]:
    return _place(sorted(buffers, key=lambda b: (b.start, -b.size, b.id)))


STRATEGIES: dict[str, Callable[[Sequence[Buffer]], dict[int, int]]] = {
    "greedy_by_size": _by_size,
    "greedy_by_start": _by_start,
}


def plan_memory(buffers: Sequence[Buffer]) -> MemoryPlan:
    bound = lower_bound(buffers)
    best: MemoryPlan | None = None
    for name, strategy in STRATEGIES.items():
        offsets = strategy(buffers)
        arena = max((offsets[b.id] + align(b.size) for b in buffers), default=0)
        if best is None or arena < best.arena_bytes:
            best = MemoryPlan(offsets, arena, bound, name)
    assert best is not None
    return best


def check_plan(buffers: Sequence[Buffer], plan: MemoryPlan) -> None:
    """Raise AssertionError if two buffers live at the same time share bytes."""
    for i, a in enumerate(buffers):
        oa = plan.offsets[a.id]
        assert oa % ALIGN == 0 and oa + a.size <= plan.arena_bytes
        for b in buffers[i + 1:]:
            if a.overlaps(b):
                ob = plan.offsets[b.id]
                assert oa + a.size <= ob or ob + b.size <= oa, (a, b, oa, ob)
