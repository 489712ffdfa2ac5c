"""Pooling: MaxPool, AveragePool, LpPool, Global*Pool, MaxUnpool, MaxRoiPool."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ..dtypes import DType
from ..ir import Dim, Node, TensorMeta
from . import attrs as A
from .device_helpers import kernel, reject
from .kernel_utils import ints, widen
from .registry import DeviceKernel, Layout, OpSchema, register, shape_error
from .shape_helpers import FLOATS, check_dtype, const_ints, meta_in, out, shape_in, sym
from .spatial import Window, pad_for_windows, window, window_slices

POOL_ATTRS = {"auto_pad": A.s("NOTSET", A.AUTO_PAD), "ceil_mode": A.i(0), "dilations": A.ints(),
              "kernel_shape": A.ints(A.REQUIRED), "pads": A.ints(), "strides": A.ints()}


def _geometry(node: Node | None, a: dict[str, Any], spatial: tuple[Dim, ...]
              ) -> tuple[Window, tuple[Dim, ...]]:
    kern = list(a["kernel_shape"])
    if len(kern) != len(spatial):
        msg = f"kernel_shape {kern} does not match {len(spatial)} spatial dims"
        if node is None:
            raise ValueError(msg)
        raise shape_error(node, msg)
    return window(node, a, kern, spatial, bool(a.get("ceil_mode", 0)))


def _pool_infer(node: Node, a: dict[str, Any]) -> list[TensorMeta]:
    m = meta_in(node, 0)
    check_dtype(node, 0, FLOATS | {DType.INT8, DType.UINT8}, "X")
    if m.shape is None:
        return [out(m.dtype, None), out(DType.INT64, None)]
    if len(m.shape) < 3:
        raise shape_error(node, f"input has rank {len(m.shape)}, expected N, C and spatial dims")
    _, spatial = _geometry(node, a, m.shape[2:])
    shape = m.shape[:2] + spatial
    return [out(m.dtype, shape), out(DType.INT64, shape)]


def _valid_mask(x_shape: tuple[int, ...], w: Window, outs: tuple[int, ...],
                include_pad: bool) -> np.ndarray:
    """1 where a padded position counts toward an average window, else 0."""
    ones = np.ones((1, 1) + x_shape[2:], dtype=np.float64)
    mask, _ = pad_for_windows(ones, w, outs, 0.0)
    if include_pad:  # explicit pads count, the ceil-mode extension does not
        mask = _explicit_region(mask.shape, x_shape, w)
    return mask


def _explicit_region(shape: tuple[int, ...], x_shape: tuple[int, ...], w: Window) -> np.ndarray:
    mask = np.ones(shape, dtype=np.float64)
    for i in range(w.n):
        lim = x_shape[i + 2] + w.pads[i] + w.pads[i + w.n]
        idx = [slice(None)] * len(shape)
        idx[i + 2] = slice(lim, None)
        mask[tuple(idx)] = 0
    return mask


def _average(x: np.ndarray, a: dict[str, Any]) -> np.ndarray:
    w, outs = _geometry(None, a, x.shape[2:])
    xp, _ = pad_for_windows(x, w, outs, 0.0)  # type: ignore[arg-type]
    mask = _valid_mask(x.shape, w, outs, bool(a["count_include_pad"]))  # type: ignore
    total = np.zeros(x.shape[:2] + tuple(outs), dtype=np.float64)  # type: ignore[operator]
    count = np.zeros((1, 1) + tuple(outs), dtype=np.float64)  # type: ignore[arg-type]
    for _, sl in window_slices(w, outs):  # type: ignore[arg-type]
        total += xp[sl]
        count += mask[sl]
    return total / np.maximum(count, 1)


def _lp(x: np.ndarray, a: dict[str, Any]) -> np.ndarray:
    w, outs = _geometry(None, a, x.shape[2:])
    xp, _ = pad_for_windows(x, w, outs, 0.0)  # type: ignore[arg-type]
    p = a["p"]
    total = np.zeros(x.shape[:2] + tuple(outs), dtype=np.float64)  # type: ignore[operator]
    for _, sl in window_slices(w, outs):  # type: ignore[arg-type]
        total += np.abs(xp[sl]) ** p
    return total ** (1.0 / p)


def max_pool(x: np.ndarray, a: dict[str, Any]) -> tuple[np.ndarray, np.ndarray]:
    w, outs = _geometry(None, a, x.shape[2:])
    fill = -np.inf if x.dtype.kind == "f" else np.iinfo(x.dtype).min
    xp, begins = pad_for_windows(x.astype(np.float64), w, outs, fill)  # type: ignore
    best = np.full(x.shape[:2] + tuple(outs), -np.inf)  # type: ignore[operator]
    arg = np.zeros(best.shape, dtype=np.int64)
    n, c = x.shape[:2]
    spatial = x.shape[2:]
    base = (np.arange(n)[:, None] * c + np.arange(c)[None, :]) * math.prod(spatial)
    base = base.reshape((n, c) + (1,) * len(spatial))
    coords = [np.arange(o) * s for o, s in zip(outs, w.strides)]  # type: ignore[arg-type]
    for kpos, sl in window_slices(w, outs):  # type: ignore[arg-type]
        vals = xp[sl]
        better = vals > best
        best = np.where(better, vals, best)
        flat = np.zeros((1, 1) + tuple(outs), dtype=np.int64)  # type: ignore[arg-type]
        order = range(len(spatial)) if not a.get("storage_order") else \
            reversed(range(len(spatial)))
        for i in order:
            pos = coords[i] + kpos[i] * w.dilations[i] - begins[i]
            shape = [1] * (2 + len(spatial))
            shape[i + 2] = len(pos)
            flat = flat * spatial[i] + pos.reshape(shape)
        arg = np.where(better, base + flat, arg)
    return best.astype(x.dtype), arg


def _pool_device(op: str) -> Any:
    def lower(node: Node, a: dict[str, Any]) -> DeviceKernel | str:
        if op == "MaxPool" and len(node.outputs) > 1:
            return "device MaxPool has no Indices output"
        why = reject(node, data_inputs=(0,))
        if why:
            return why
        shape = node.inputs[0].meta.shape
        if len(shape) not in (4, 5):  # 2-D and 3-D (a 1-D pool is a 2-D one: canonicalize)
            return f"device {op} is 2-D or 3-D only, input has rank {len(shape)}"
        w, _ = _geometry(node, a, shape[2:])
        attrs = {"kernel_shape": list(w.kernel), "strides": list(w.strides),
                 "pads": list(w.pads), "ceil_mode": int(a["ceil_mode"])}
        if any(d != 1 for d in w.dilations):  # oneDNN's pooling and the plane loop dilate
            attrs["dilations"] = list(w.dilations)
        attrs["count_include_pad"] = int(a.get("count_include_pad", 0))
        return kernel(op, attrs, (0,))
    return lower


register(OpSchema("MaxPool", 1, 1, _pool_infer, lambda ins, a: list(max_pool(ins[0], a)),
                  attrs={**POOL_ATTRS, "storage_order": A.i(0)}, max_outputs=2,
                  device=_pool_device("MaxPool"), layout=Layout.UNIFORM))
register(OpSchema("AveragePool", 1, 1, _pool_infer, lambda ins, a: [
    _average(widen(ins[0]), a).astype(ins[0].dtype)],
    attrs={**POOL_ATTRS, "count_include_pad": A.i(0)}, device=_pool_device("AveragePool"),
    layout=Layout.UNIFORM))
register(OpSchema("LpPool", 1, 1, _pool_infer, lambda ins, a: [
    _lp(widen(ins[0]), a).astype(ins[0].dtype)], attrs={**POOL_ATTRS, "p": A.i(2)}))


# ---- global pools ---------------------------------------------------------------------------
def _global_infer(node: Node, a: dict[str, Any]) -> list[TensorMeta]:
    m = meta_in(node, 0)
    check_dtype(node, 0, FLOATS, "X")
    if m.shape is None:
        return [out(m.dtype, None)]
    if len(m.shape) < 3:
        raise shape_error(node, f"input has rank {len(m.shape)}, expected at least 3")
    return [out(m.dtype, m.shape[:2] + (1,) * (len(m.shape) - 2))]


def _global(op: str, fn: Any) -> None:
    def compute(ins: list[Any], a: dict[str, Any]) -> list[np.ndarray]:
        x = ins[0]
        axes = tuple(range(2, x.ndim))
        return [np.asarray(fn(widen(x), axes, a)).astype(x.dtype)]

    def lower(node: Node, a: dict[str, Any]) -> DeviceKernel | str:
        why = reject(node)
        if why:
            return why
        if len(node.inputs[0].meta.shape) not in (4, 5):
            return f"device {op} needs a 4-D or 5-D input"
        return kernel(op, {}, (0,))

    device = lower if op in ("GlobalAveragePool", "GlobalMaxPool") else None
    attrs = {"p": A.i(2)} if op == "GlobalLpPool" else {}
    register(OpSchema(op, 1, 1, _global_infer, compute, attrs=attrs, device=device,
                      layout=Layout.UNIFORM))


_global("GlobalAveragePool", lambda x, ax, a: np.mean(x, axis=ax, keepdims=True))
_global("GlobalMaxPool", lambda x, ax, a: np.max(x, axis=ax, keepdims=True))
_global("GlobalLpPool", lambda x, ax, a: np.sum(np.abs(x) ** a["p"], axis=ax,
                                                 keepdims=True) ** (1.0 / a["p"]))


# ---- MaxUnpool / MaxRoiPool -----------------------------------------------------------------
def _unpool_shape(a: dict[str, Any], xs: tuple[int, ...]) -> tuple[int, ...]:
    kern = a["kernel_shape"]
    n = len(kern)
    strides = a.get("strides") or [1] * n
    pads = a.get("pads") or [0] * (2 * n)
    return tuple((xs[i + 2] - 1) * strides[i] + kern[i] - pads[i] - pads[i + n]
                 for i in range(n))


def _max_unpool_infer(node: Node, a: dict[str, Any]) -> list[TensorMeta]:
    m = meta_in(node, 0)
    if node.input(2) is not None:
        shape = const_ints(node, 2)
        if shape is None:
            return [out(m.dtype, None if m.shape is None else
                        tuple(sym(node, i) for i in range(len(m.shape))))]
        return [out(m.dtype, shape)]
    if m.shape is None or not all(isinstance(d, int) for d in m.shape[2:]):
        return [out(m.dtype, None if m.shape is None else m.shape[:2] + tuple(
            sym(node, i + 2) for i in range(len(m.shape) - 2)))]
    return [out(m.dtype, m.shape[:2] + _unpool_shape(a, m.shape))]  # type: ignore[arg-type]


def _max_unpool(ins: list[Any], a: dict[str, Any]) -> list[np.ndarray]:
    x, idx = ins[0], ins[1]
    inferred = x.shape[:2] + _unpool_shape(a, x.shape)
    y = np.zeros(math.prod(inferred), dtype=x.dtype)
    y[np.asarray(idx).reshape(-1)] = x.reshape(-1)
    y = y.reshape(inferred)
    if len(ins) > 2 and ins[2] is not None:  # indices address the inferred shape
        res = np.zeros(tuple(ints(ins[2])), dtype=x.dtype)
        res[tuple(slice(0, d) for d in inferred)] = y
        y = res
    return [y]


register(OpSchema("MaxUnpool", 2, 3, _max_unpool_infer, _max_unpool, attrs={
    "kernel_shape": A.ints(A.REQUIRED), "pads": A.ints(), "strides": A.ints()}))


def _max_roi_pool(ins: list[Any], a: dict[str, Any]) -> list[np.ndarray]:
    x, rois = ins
    ph, pw = a["pooled_shape"]
    scale = a["spatial_scale"]
    y = np.zeros((rois.shape[0], x.shape[1], ph, pw), dtype=x.dtype)
    for r, roi in enumerate(rois):
        b = int(roi[0])
        x1, y1, x2, y2 = (int(round(float(v) * scale)) for v in roi[1:5])
        h, w = max(y2 - y1 + 1, 1), max(x2 - x1 + 1, 1)
        for i in range(ph):
            for j in range(pw):
                hs = min(max(y1 + int(math.floor(i * h / ph)), 0), x.shape[2])
                he = min(max(y1 + int(math.ceil((i + 1) * h / ph)), 0), x.shape[2])
                ws = min(max(x1 + int(math.floor(j * w / pw)), 0), x.shape[3])
                we = min(max(x1 + int(math.ceil((j + 1) * w / pw)), 0), x.shape[3])
                if he > hs and we > ws:
                    y[r, :, i, j] = x[b, :, hs:he, ws:we].max(axis=(1, 2))
    return [y]


register(OpSchema("MaxRoiPool", 2, 2, lambda node, a: [out(meta_in(node, 0).dtype, (
    shape_in(node, 1)[0] if shape_in(node, 1) else sym(node, 0),
    shape_in(node, 0)[1] if shape_in(node, 0) else sym(node, 1), *a["pooled_shape"]))],
    _max_roi_pool, attrs={"pooled_shape": A.ints(A.REQUIRED), "spatial_scale": A.f(1.0)}))
