"""Tensors across the boundary: torch -> numpy views for the session's inputs, numpy ->
torch for its outputs, without copies where memory allows.

A contiguous CPU tensor of a type numpy has is handed over as `tensor.numpy()` (the same
memory; the runtime reads C-contiguous inputs in place), and an output array becomes a tensor
with `torch.from_numpy` (the same memory: the runtime writes each run's outputs into fresh
arrays). Anything else (a strided view, another device) costs one copy here."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch


def to_numpy(t: Any) -> np.ndarray:
    if isinstance(t, torch.Tensor):
        t = t.detach()
        if t.device.type != "cpu":
            t = t.cpu()
        if not t.is_contiguous():
            t = t.contiguous()
        return t.numpy()
    return np.asarray(t, np.int64)  # a size (SymInt at trace time, an int at run time)


def to_torch(a: np.ndarray) -> torch.Tensor:
    if not a.flags.writeable:  # torch tensors are writable; a read-only array is copied
        a = a.copy()
    return torch.from_numpy(a)


def run_part(session: Any, graph_id: int, feeds: list[tuple[str, int]], outputs: list[Any],
             multi: bool, args: tuple) -> Any:
    """Run one compiled region: `feeds` are (graph input name, argument position);
    `outputs` per result its graph output name, or the int / None to return as it is."""
    got = session.run_graph(graph_id, {name: to_numpy(args[i]) for name, i in feeds})
    results = []
    for o in outputs:
        if isinstance(o, str):
            a = got[o]
            results.append(to_torch(a))
        else:
            results.append(o)
    return tuple(results) if multi else results[0]
