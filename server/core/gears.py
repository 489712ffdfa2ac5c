"""Gears: a graph with a symbolic batch dimension compiled ahead for a few batch sizes.

A request of n rows is served by the smallest gear that holds it: its inputs are padded
with zero rows up to the gear and the batched outputs sliced back to n rows. A request
larger than the largest gear runs as several chunks whose outputs are concatenated. These
are the pure array helpers; the session decides when to use them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from graphengine.engine.bounds import MAX_GEAR, MAX_GEARS
from graphengine.engine.errors import InvalidInput


def normalize(gears: Sequence[int] | None) -> tuple[int, ...]:
    """Sorted, unique, positive batch sizes; an error names a bad value.

    Every gear is compiled and loaded ahead, so their count and size are bounded here,
    before anything is (the memory they need is checked per gear at compile)."""
    gears = list(gears or ())
    if len(gears) > MAX_GEARS:
        raise InvalidInput(f"{len(gears)} gears given; a graph may have at most {MAX_GEARS}")
    values = []
    for g in gears:
        if isinstance(g, bool) or int(g) != g or int(g) < 1:
            raise InvalidInput(f"gears must be positive integers, got {gears}")
        if int(g) > MAX_GEAR:
            raise InvalidInput(f"gear {int(g)} exceeds the bound of {MAX_GEAR} rows per gear")
        values.append(int(g))
    return tuple(sorted(set(values)))


def plan(rows: int, gears: Sequence[int]) -> list[tuple[int, int, int]]:
    """Chunks (start, stop, gear) covering `rows` rows, each in the smallest gear that fits."""
    largest = gears[-1]
    chunks = []
    start = 0
    while start < rows:
        stop = min(rows, start + largest)
        gear = next(g for g in gears if g >= stop - start)
        chunks.append((start, stop, gear))
        start = stop
    return chunks


def batch_rows(graph: str, inputs: Mapping[str, np.ndarray], names: Sequence[str]) -> int:
    """The batch size every input agrees on (their first dimension)."""
    rows = None
    for name in names:
        if name not in inputs:
            raise InvalidInput(f"missing input '{name}'", graph=graph, tensor=name)
        shape = np.shape(inputs[name])
        if not shape:
            raise InvalidInput(f"input '{name}' is a scalar; a geared graph batches along the "
                               f"first dimension", graph=graph, tensor=name)
        if rows is None:
            rows = shape[0]
        elif shape[0] != rows:
            raise InvalidInput(f"input '{name}' has batch {shape[0]}, other inputs {rows}; "
                               f"every input must have the same batch", graph=graph,
                               tensor=name)
    if not rows:
        raise InvalidInput("the batch is empty (0 rows)", graph=graph)
    return rows


def pad(array: np.ndarray, rows: int) -> np.ndarray:
    """`array` grown to `rows` along axis 0 with zero rows (the array itself if it fits)."""
    array = np.asarray(array)
    have = array.shape[0]
    if have == rows:
        return array
    out = np.zeros((rows, *array.shape[1:]), dtype=array.dtype)
    out[:have] = array
    return out


def concat(chunks: Sequence[Mapping[str, np.ndarray]], batched: set[str]) -> dict[str, np.ndarray]:
    """Outputs of several chunks joined: batched outputs concatenated, others from the first."""
    if len(chunks) == 1:
        return dict(chunks[0])
    return {name: np.concatenate([c[name] for c in chunks]) if name in batched else value
            for name, value in chunks[0].items()}
