"""A DFT of static length as one MatMul by its table (a canonicalize row).

DFT has no device kernel: FNet's token mixing (two DFTs a layer, [B, S, H, 2] along S and
along H) ran as numpy host steps between four device programs (0.66x of the best peer at
batch 1, 0.36x at batch 8). Along an axis of static length N, with the complex pairs last,
the transform is linear in the 2N (or N, real input) values of each line: out = in @ W with
W [2N, 2N] of cos/sin of 2 pi k n / N, interleaved as the pairs are. The axis is moved next
to the pairs (a Transpose when it is not there), each line flattened, multiplied and put
back. The table is 16 N^2 bytes: lengths up to MAX_LENGTH. Not for `onesided` (its halved
spectrum) or a run-time length or axis, nor below MIN_LENGTH: a short transform costs the
host little, and there the host kernel's float64 FFT keeps outputs that cancel to zero at
zero (ONNX's conformance cases, N = 10, hold them to 1e-7 absolute, under a float32 sum of
N products' rounding).
"""

from __future__ import annotations

import numpy as np

from ..dtypes import DType
from ..ir import Graph, Node
from .steps import chain, replace_outputs

MIN_LENGTH = 16
MAX_LENGTH = 1024


def _plan(node: Node) -> tuple[int, int, int, bool] | None:
    """(axis, N, 1 or 2 values a sample, inverse) of a DFT this rewrite takes."""
    if node.op_type != "DFT" or node.attrs.get("onesided") or len(node.outputs) != 1:
        return None
    x = node.input(0)
    if x is None or x.meta is None or x.meta.shape is None or x.meta.dtype is not DType.FLOAT32:
        return None
    shape = x.meta.shape
    rank = len(shape)
    if rank < 2 or not all(isinstance(d, int) and d > 0 for d in shape) or shape[-1] not in (1, 2):
        return None
    axis_v = node.input(2)
    if axis_v is not None and not axis_v.is_constant:
        return None
    axis = int(np.asarray(axis_v.const).reshape(-1)[0]) if axis_v is not None else -2
    axis = axis + rank if axis < 0 else axis
    if not 0 <= axis < rank - 1:
        return None
    n = shape[axis]
    length = node.input(1)
    if length is not None and (not length.is_constant
                               or int(np.asarray(length.const).reshape(-1)[0]) != n):
        return None
    if not MIN_LENGTH <= n <= MAX_LENGTH:
        return None
    return axis, n, shape[-1], bool(node.attrs.get("inverse"))


def static_dft(node: Node) -> bool:
    return _plan(node) is not None


def dft_table(n: int, values: int, inverse: bool) -> np.ndarray:
    """W [values * n, 2n]: row (sample j, part c) to column (bin k, part d), so that a line of
    interleaved (re, im) samples times W is its interleaved spectrum (e^{-i 2 pi k j / n};
    inverse: e^{+i ...} / n). Angles from k * j mod n, in float64."""
    k = np.arange(n)
    theta = 2 * np.pi * (np.outer(k, k) % n) / n  # [sample, bin]
    cos, sin = np.cos(theta), np.sin(theta)
    scale, sign = (1.0 / n, -1.0) if inverse else (1.0, 1.0)
    w = np.zeros((n, values, n, 2))
    w[:, 0, :, 0] = cos * scale  # re -> re
    w[:, 0, :, 1] = -sign * sin * scale  # re -> im
    if values == 2:
        w[:, 1, :, 0] = sign * sin * scale  # im -> re
        w[:, 1, :, 1] = cos * scale  # im -> im
    return w.reshape(values * n, 2 * n).astype(np.float32)


def as_table_product(graph: Graph, node: Node) -> None:
    axis, n, values, inverse = _plan(node)
    x = node.inputs[0]
    shape = list(x.meta.shape)
    rank = len(shape)
    step = chain(graph, node)

    def const(v, dtype=np.int64):
        return graph.add_constant(None, np.asarray(v, dtype))

    perm = [d for d in range(rank - 1) if d != axis] + [axis, rank - 1]
    moved = perm != list(range(rank))
    if moved:
        x = step("Transpose", [x], perm=perm)
    lines = [shape[d] for d in perm[:-2]]
    flat = step("Reshape", [x, const(lines + [n * values])])
    spectrum = step("MatMul", [flat, const(dft_table(n, values, inverse), np.float32)])
    y = step("Reshape", [spectrum, const(lines + [n, 2])])
    if moved:
        y = step("Transpose", [y], perm=[int(i) for i in np.argsort(perm)])
    replace_outputs(graph, node, {0: y})
