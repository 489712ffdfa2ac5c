"""Spatial sampling: GridSample (n-D, nearest/linear/cubic, three padding modes), AffineGrid."""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np

from ..ir import Node, TensorMeta
from . import attrs as A
from .device_helpers import kernel, reject_rank
from .kernel_utils import ints
from .registry import DeviceKernel, OpSchema, register, shape_error
from .shape_helpers import FLOATS, check_dtype, const_ints, out, shape_in, sym


def _reflect(x: np.ndarray, lo: float, hi: float) -> np.ndarray:
    span = hi - lo
    below, above = x < lo, x > hi
    d = np.where(below, lo - x, np.where(above, x - hi, 0.0))
    n = np.floor(d / span) if span > 0 else np.zeros_like(d)
    r = d - n * span
    even = (n % 2) == 0
    low_side = np.where(even, lo + r, hi - r)
    high_side = np.where(even, hi - r, lo + r)
    return np.where(below, low_side, np.where(above, high_side, x))


def _cubic_weights(t: np.ndarray, a: float = -0.75) -> list[np.ndarray]:
    def near(x: np.ndarray) -> np.ndarray:
        return ((a + 2) * x - (a + 3)) * x * x + 1

    def far(x: np.ndarray) -> np.ndarray:
        return ((a * x - 5 * a) * x + 8 * a) * x - 4 * a

    return [far(t + 1), near(t), near(1 - t), far(2 - t)]


def grid_sample(x: np.ndarray, grid: np.ndarray, a: dict[str, Any]) -> np.ndarray:
    n, c = x.shape[:2]
    dims = x.shape[2:]
    align = bool(a["align_corners"])
    mode, pad = a["mode"], a["padding_mode"]
    mode = {"bilinear": "linear", "bicubic": "cubic"}.get(mode, mode)
    g = grid.astype(np.float64)[..., ::-1]  # grid is (x, y[, z]); dims are (..., H, W)
    coords, borders = [], []
    for i, size in enumerate(dims):
        v = g[..., i]
        v = (v + 1) / 2 * (size - 1) if align else ((v + 1) * size - 1) / 2
        lo, hi = (0.0, size - 1.0) if align else (-0.5, size - 0.5)
        if mode == "nearest":
            v = np.rint(v)
        if pad == "border":
            v = np.where((v < lo) | (v > hi), np.clip(v, 0, size - 1), v)
        elif pad == "reflection":
            v = _reflect(v, lo, hi)
        coords.append(v)
        borders.append((lo, hi))
    taps_per_dim = []
    for v in coords:
        if mode == "nearest":
            taps_per_dim.append([(np.trunc(v).astype(np.int64), np.ones_like(v))])
        elif mode == "linear":
            f = np.floor(v)
            t = v - f
            taps_per_dim.append([(f.astype(np.int64), 1 - t), (f.astype(np.int64) + 1, t)])
        elif mode == "cubic":
            f = np.floor(v)
            w = _cubic_weights(v - f)
            taps_per_dim.append([(f.astype(np.int64) + k - 1, w[k]) for k in range(4)])
        else:
            raise ValueError(f"unknown GridSample mode '{mode}'")
    bidx = np.arange(n).reshape((n,) + (1,) * (g.ndim - 2))
    y = np.zeros((n,) + g.shape[1:-1] + (c,), dtype=np.float64)
    for combo in itertools.product(*taps_per_dim):
        weight = np.ones(g.shape[:-1])
        idx, valid = [], np.ones(g.shape[:-1], dtype=bool)
        for i, (pos, w) in enumerate(combo):
            size = dims[i]
            if pad == "zeros":
                valid &= (pos >= 0) & (pos < size)
                pos = np.clip(pos, 0, size - 1)
            elif pad == "border":
                pos = np.clip(pos, 0, size - 1)
            else:
                pos = _reflect(pos.astype(np.float64), *borders[i]).astype(np.int64)
                pos = np.clip(pos, 0, size - 1)
            idx.append(pos)
            weight = weight * w
        vals = _gather(x, bidx, idx)
        y += vals * (weight * valid)[..., None]
    return np.moveaxis(y, -1, 1).astype(x.dtype)


def _gather(x: np.ndarray, bidx: np.ndarray, idx: list[np.ndarray]) -> np.ndarray:
    """x[b, :, i0, i1...] for per-point indices; result (N, *points, C)."""
    moved = np.moveaxis(x, 1, -1)  # (N, *dims, C)
    return moved[(bidx, *idx)]


def _grid_sample_infer(node: Node, a: dict[str, Any]) -> list[TensorMeta]:
    dt = check_dtype(node, 0, FLOATS, "X")
    xs, gs = shape_in(node, 0), shape_in(node, 1)
    if xs is None or gs is None:
        return [out(dt, None)]
    if len(gs) != len(xs):
        raise shape_error(node, f"grid rank {len(gs)} must equal X rank {len(xs)}")
    return [out(dt, (xs[0], xs[1]) + tuple(gs[1:-1]))]


def _grid_sample_device(node: Node, a: dict[str, Any]) -> DeviceKernel | str:
    """A 4-D image sampled linearly or by the nearest pixel, any padding, on the device's
    own kernel (kernels_sampling.cc: these rules, in double); cubic and 3-D stay here."""
    mode = {"bilinear": "linear", "bicubic": "cubic"}.get(a["mode"], a["mode"])
    if mode not in ("linear", "nearest"):
        return f"device GridSample has no {mode} mode"
    why = reject_rank(node, 4, "4-D only")
    return why or kernel("GridSample", {"mode": mode, "padding_mode": a["padding_mode"],
                                        "align_corners": int(a["align_corners"])}, (0, 1))


register(OpSchema("GridSample", 2, 2, _grid_sample_infer,
                  lambda ins, a: [grid_sample(ins[0], ins[1], a)], device=_grid_sample_device,
                  attrs={
                      "align_corners": A.i(0), "mode": A.s("linear", (
                          "linear", "nearest", "cubic", "bilinear", "bicubic")),
                      "padding_mode": A.s("zeros", ("zeros", "border", "reflection"))}))


# ---- AffineGrid -----------------------------------------------------------------------------
def _base(size: int, align: bool) -> np.ndarray:
    if align:
        return np.linspace(-1, 1, size) if size > 1 else np.zeros(1)
    return (np.arange(size) * 2 + 1) / size - 1


def affine_grid(theta: np.ndarray, size: list[int], align: bool) -> np.ndarray:
    spatial = size[2:]
    axes = [_base(s, align) for s in spatial]
    mesh = np.meshgrid(*axes, indexing="ij")  # per spatial dim (D,) H, W
    coords = [m for m in mesh[::-1]]  # x (W) first
    homo = np.stack(coords + [np.ones_like(coords[0])], axis=-1)  # (*spatial, nd+1)
    flat = homo.reshape(-1, homo.shape[-1])
    res = np.einsum("pk,njk->npj", flat, theta.astype(np.float64))
    return res.reshape((theta.shape[0],) + tuple(spatial) + (len(spatial),)).astype(theta.dtype)


def _affine_infer(node: Node, a: dict[str, Any]) -> list[TensorMeta]:
    dt = check_dtype(node, 0, FLOATS, "theta")
    size = const_ints(node, 1)
    if size is None:
        s = shape_in(node, 1)
        k = s[0] if s is not None and isinstance(s[0], int) else None
        return [out(dt, None if k is None else
                    tuple(sym(node, i) for i in range(k - 1)) + (k - 2,))]
    return [out(dt, (size[0], *size[2:], len(size) - 2))]


register(OpSchema("AffineGrid", 2, 2, _affine_infer, lambda ins, a: [affine_grid(
    ins[0], ints(ins[1]), bool(a["align_corners"]))],
    attrs={"align_corners": A.i(0)}))
