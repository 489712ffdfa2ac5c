"""Weight segments shared by the programs compiled from one graph.

A session compiles a graph once per input signature (batch 1 and batch 8, every gear), and
each compile folds the same weights again (BatchNorm into its Conv, layout transforms) into
new arrays: ResNet-50's 100 MB were held once per signature, and the runtime reordered each
copy again (its prepared weights are shared by source address). After a compile, every
weight segment whose bytes equal a live segment of an earlier program of the same graph is
replaced by that segment, so both programs hand the runtime the same memory: the new copy is
freed, and the runtime's device-wide index of prepared weights (host/dnnl_util.h,
PreparedRegistry) finds the reordered copy by its address. Segments are compared byte for
byte; the index holds them weakly (a segment lives while a compiled model holds it).
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Sequence

import numpy as np

from ..ir import Graph
from ..model import DeviceProgram, Program

_SEEN: weakref.WeakKeyDictionary[Graph, list[weakref.ref]] = weakref.WeakKeyDictionary()
_LOCK = threading.Lock()
_CHUNK = 1 << 22  # bytes compared at a time (the comparison's temporary stays small)


def _same_bytes(a: np.ndarray, b: np.ndarray) -> bool:
    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    x, y = a.reshape(-1).view(np.uint8), b.reshape(-1).view(np.uint8)
    return all(np.array_equal(x[i:i + _CHUNK], y[i:i + _CHUNK])
               for i in range(0, x.size, _CHUNK))


def share_segments(source: Graph, programs: Sequence[Program]) -> int:
    """Replace each device program's weight segments by equal live segments of programs
    compiled earlier from `source`, and remember this compile's; returns the bytes shared."""
    shared = 0
    with _LOCK:
        earlier = [s for s in (r() for r in _SEEN.get(source, [])) if s is not None]
        by_size: dict[int, list[np.ndarray]] = {}
        for seg in earlier:
            by_size.setdefault(seg.nbytes, []).append(seg)
        known = {id(s) for s in earlier}
        for prog in programs:
            if not isinstance(prog, DeviceProgram):
                continue
            segments = list(prog.weights)
            for i, seg in enumerate(segments):
                if id(seg) in known or not seg.nbytes:
                    continue
                match = next((s for s in by_size.get(seg.nbytes, ()) if _same_bytes(s, seg)),
                             None)
                if match is not None:
                    segments[i] = match
                    shared += seg.nbytes
                else:
                    by_size.setdefault(seg.nbytes, []).append(seg)
                    earlier.append(seg)
                    known.add(id(seg))
            prog.weights = segments
        _SEEN[source] = [weakref.ref(s) for s in earlier]
    return shared
