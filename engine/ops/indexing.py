"""Indexing ops: Gather, GatherND, Slice, Pad, Compress, NonZero, Unique, CenterCropPad,
TensorScatter (GatherElements, Scatter*, ReverseSequence: elements.py)."""

from __future__ import annotations

from typing import Any

import numpy as np

from ..dtypes import DType
from ..ir import Dim, Node, TensorMeta
from . import attrs as A
from .device_helpers import kernel, reject
from .kernel_utils import ints
from .registry import DeviceKernel, Layout, OpSchema, register, shape_error
from .shape_helpers import (
    INDEX,
    check_dtype,
    const_in,
    const_ints,
    meta_in,
    norm_axes,
    norm_axis,
    out,
    shape_in,
    shape_value,
    sym,
    symbolic_shape,
)


def _norm_index(idx: np.ndarray, dim: int) -> np.ndarray:
    idx = np.asarray(idx).astype(np.int64)
    return np.where(idx < 0, idx + dim, idx)


# ---- Gather family --------------------------------------------------------------------------
def _gather_infer(node: Node, a: dict[str, Any]) -> list[TensorMeta]:
    m = meta_in(node, 0)
    check_dtype(node, 1, INDEX, "indices")
    idx = shape_in(node, 1)
    if m.shape is None or idx is None:
        return [out(m.dtype, None)]
    axis = norm_axis(node, a["axis"], len(m.shape))
    return [out(m.dtype, m.shape[:axis] + idx + m.shape[axis + 1:])]


def _gathers(node: Node, attrs: dict[str, Any]) -> DeviceKernel | str:
    """Data (input 0) of any runtime dtype and indices (input 1) of a static shape."""
    why = reject(node, data_inputs=(0,))
    if why:
        return why
    idx = node.inputs[1].meta
    if idx is None or not idx.is_static:
        return "input 1 shape is not static"
    return kernel(node.op_type, attrs, (0, 1))


def _gather_device(node: Node, a: dict[str, Any]) -> DeviceKernel | str:
    rank = len(node.inputs[0].meta.shape)  # static: placement checked every shape
    return _gathers(node, {"axis": norm_axis(node, a["axis"], rank)})


def _gather(ins: list[Any], a: dict[str, Any]) -> list[np.ndarray]:
    idx = ins[1]
    if type(idx) is not np.ndarray or idx.dtype.kind not in "iu":
        idx = _norm_index(idx, ins[0].shape[a["axis"]])
    # np.take reads an index in [-dim, 0) from the end, as ONNX does, and raises an
    # IndexError naming any other out of range one
    return [np.take(ins[0], idx, axis=a["axis"])]


register(OpSchema("Gather", 2, 2, _gather_infer, _gather,
    attrs={"axis": A.i(0)}, device=_gather_device))


def _gather_nd_infer(node: Node, a: dict[str, Any]) -> list[TensorMeta]:
    m = meta_in(node, 0)
    idx = shape_in(node, 1)
    b = a["batch_dims"]
    if m.shape is None or idx is None or not isinstance(idx[-1], int):
        return [out(m.dtype, None)]
    k = idx[-1]
    if b + k > len(m.shape):
        raise shape_error(node, f"indices last dim {k} + batch_dims {b} exceeds data rank "
                                f"{len(m.shape)}")
    return [out(m.dtype, idx[:-1] + m.shape[b + k:])]


def _gather_nd(ins: list[Any], a: dict[str, Any]) -> list[np.ndarray]:
    data, idx = ins[0], np.asarray(ins[1]).astype(np.int64, copy=False)
    b = a["batch_dims"]
    k = idx.shape[-1]
    if b == 0 and 0 < k <= data.ndim:
        # numpy's own indexing by the k index columns: negative ones count from the end,
        # out of range ones raise an IndexError (one call, where the general form below
        # stacks one lookup per batch)
        return [np.asarray(data[tuple([idx[..., j] for j in range(k)])])]
    batch_shape = data.shape[:b]
    nb = int(np.prod(batch_shape, dtype=np.int64))
    d = data.reshape((nb,) + data.shape[b:])
    i = idx.reshape((nb, -1, k))
    i = np.where(i < 0, i + np.array(data.shape[b:b + k]), i)
    res = np.stack([d[n][tuple(i[n].T)] for n in range(nb)]) if nb else \
        np.zeros((0,) + i.shape[1:2] + data.shape[b + k:], data.dtype)
    return [res.reshape(idx.shape[:-1] + data.shape[b + k:])]


def _gather_nd_device(node: Node, a: dict[str, Any]) -> DeviceKernel | str:
    return _gathers(node, {"batch_dims": int(a["batch_dims"])})


register(OpSchema("GatherND", 2, 2, _gather_nd_infer, _gather_nd,
                  attrs={"batch_dims": A.i(0)}, device=_gather_nd_device))


def _tensor_scatter(ins: list[Any], a: dict[str, Any]) -> list[np.ndarray]:
    cache, upd = ins[0], ins[1]
    widx = ins[2] if len(ins) > 2 and ins[2] is not None else np.zeros(cache.shape[0], np.int64)
    axis = a["axis"] % cache.ndim
    res = cache.copy()
    max_len, n = cache.shape[axis], upd.shape[axis]
    for b in range(cache.shape[0]):
        pos = int(widx[b]) + np.arange(n)
        if a["mode"] == "circular":
            pos = pos % max_len
        dst = np.moveaxis(res[b], axis - 1, 0) if axis > 0 else res
        src = np.moveaxis(upd[b], axis - 1, 0)
        dst[pos] = src
    return [res]


register(OpSchema("TensorScatter", 2, 3, lambda node, a: [out(meta_in(node, 0).dtype,
                                                             shape_in(node, 0))],
                  _tensor_scatter, attrs={"mode": A.s("linear"), "axis": A.i(-2)}))


# ---- Slice ----------------------------------------------------------------------------------
def slice_params(shape: tuple[int, ...], starts: list[int], ends: list[int],
                 axes: list[int] | None, steps: list[int] | None
                 ) -> list[tuple[int, int, int]]:
    """(start, end, step) per axis of `shape`, clamped the ONNX way; end may be -1 for
    a negative step that runs to the front."""
    rank = len(shape)
    axes = list(range(len(starts))) if axes is None else [x + rank if x < 0 else x
                                                          for x in axes]
    steps = [1] * len(starts) if steps is None else steps
    params = [(0, d, 1) for d in shape]
    for s, e, ax, st in zip(starts, ends, axes, steps):
        d = shape[ax]
        if st == 0:
            raise ValueError("slice step cannot be 0")
        s = s + d if s < 0 else s
        e = e + d if e < 0 else e
        if st > 0:
            s, e = min(max(s, 0), d), min(max(e, 0), d)
        else:
            s, e = min(max(s, 0), d - 1), min(max(e, -1), d - 1)
        params[ax] = (s, e, st)
    return params


def _slice_len(s: int, e: int, st: int) -> int:
    return len(range(s, e, st))


# "To the end" as exporters write it: INT32_MAX, INT64_MAX, tf2onnx's 1e9. Only symbolic
# analysis reads this (a compile binds concrete dims and slices exactly); no axis that long
# fits a tensor the server admits.
_HUGE = 10**9


def _whole_axis(start: int, end: int, step: int) -> bool:
    """Whether a slice takes every element of an axis of any length, in order or reversed."""
    if step == 1:
        return (start == 0 or start <= -_HUGE) and end >= _HUGE
    if step == -1:
        return (start == -1 or start >= _HUGE) and end <= -_HUGE
    return False


def _slice_infer(node: Node, a: dict[str, Any]) -> list[TensorMeta]:
    m = meta_in(node, 0)
    for i in range(1, 5):
        if node.input(i) is not None:
            check_dtype(node, i, INDEX, ("starts", "ends", "axes", "steps")[i - 1])
    if m.shape is None:
        return [out(m.dtype, None)]
    rank = len(m.shape)
    vals = [const_ints(node, i) for i in range(1, 5)]
    starts, ends, axes, steps = vals
    if node.input(3) is not None and axes is None:
        return [out(m.dtype, symbolic_shape(node, rank))]
    if axes is not None:
        axes = norm_axes(node, axes, rank)
    else:
        n = (len(starts) if starts is not None else
             shape_in(node, 1)[0] if shape_in(node, 1) else None)
        if not isinstance(n, int):
            return [out(m.dtype, symbolic_shape(node, rank))]
        axes = list(range(n))
    dims: list[Dim] = list(m.shape)
    known = starts is not None and ends is not None and (node.input(4) is None
                                                         or steps is not None)
    sym_ends = shape_value(node, 2) if ends is None else None
    for k, ax in enumerate(axes):
        d = m.shape[ax]
        if sym_ends is not None and starts is not None and starts[k] == 0 and \
                isinstance(sym_ends[k], str) and (steps is None or steps[k] == 1):
            dims[ax] = sym_ends[k]  # x[:n] with n a symbol: n (assumed within range)
        elif known and isinstance(d, str) and _whole_axis(
                starts[k], ends[k], 1 if steps is None else steps[k]):
            dims[ax] = d  # x[0:INT_MAX] (tf2onnx's strided_slice of a whole axis): d itself
        elif known and isinstance(d, int):
            shape = tuple(1 if j != ax else d for j in range(rank))
            s, e, st = slice_params(shape, [starts[k]], [ends[k]], [ax],
                                    None if steps is None else [steps[k]])[ax]
            dims[ax] = _slice_len(s, e, st)
        else:
            dims[ax] = sym(node, ax)
    return [out(m.dtype, dims)]


def _slice(ins: list[Any], a: dict[str, Any]) -> list[np.ndarray]:
    x = ins[0]
    opt = [None if len(ins) <= i or ins[i] is None else [int(v) for v in ins[i]]
           for i in range(3, 5)]
    params = slice_params(x.shape, ints(ins[1]), ints(ins[2]), *opt)
    return [x[tuple(slice(s, e if e >= 0 else None, st) for s, e, st in params)]]


def _slice_device(node: Node, a: dict[str, Any]) -> DeviceKernel | str:
    why = reject(node, data_inputs=(0,))
    if why:
        return why
    vals = [None if node.input(i) is None else const_ints(node, i) for i in range(1, 5)]
    if any(v is None and node.input(i + 1) is not None for i, v in enumerate(vals)):
        return "Slice starts/ends/axes/steps are not constants"
    starts, ends, axes, steps = vals
    shape = node.inputs[0].meta.shape
    params = slice_params(shape, starts, ends, axes, steps)
    # normalized (slice_params): a negative step's end -1 runs through index 0
    return kernel("Slice", {"starts": [p[0] for p in params],
                            "ends": [p[1] if p[2] < 0 else max(p[1], p[0]) for p in params],
                            "axes": list(range(len(shape))),
                            "steps": [p[2] for p in params]}, (0,))


register(OpSchema("Slice", 3, 5, _slice_infer, _slice, device=_slice_device))


# ---- Pad -----------------------------------------------------------------------------------
def _pad_axes(rank: int, axes: list[int] | None) -> list[int]:
    return list(range(rank)) if axes is None else [x + rank if x < 0 else x for x in axes]


def _pad_infer(node: Node, a: dict[str, Any]) -> list[TensorMeta]:
    m = meta_in(node, 0)
    check_dtype(node, 1, {DType.INT64}, "pads")
    if m.shape is None:
        return [out(m.dtype, None)]
    rank = len(m.shape)
    pads = const_ints(node, 1)
    axes = const_ints(node, 3) if node.input(3) is not None else None
    if pads is None or (node.input(3) is not None and axes is None):
        return [out(m.dtype, symbolic_shape(node, rank))]
    axes = _pad_axes(rank, axes)
    if len(pads) != 2 * len(axes):
        raise shape_error(node, f"pads has {len(pads)} entries, expected {2 * len(axes)}")
    dims = list(m.shape)
    for k, ax in enumerate(axes):
        d = dims[ax]
        grow = pads[k] + pads[k + len(axes)]
        dims[ax] = d + grow if isinstance(d, int) else d if grow == 0 else sym(node, ax)
    return [out(m.dtype, dims)]


def _pad(ins: list[Any], a: dict[str, Any]) -> list[np.ndarray]:
    x = ins[0]
    pads = ints(ins[1])
    value = ins[2] if len(ins) > 2 and ins[2] is not None and np.size(ins[2]) else 0
    axes = _pad_axes(x.ndim, None if len(ins) < 4 or ins[3] is None
                     else ints(ins[3]))
    n = len(axes)
    width = [[0, 0] for _ in range(x.ndim)]
    for k, ax in enumerate(axes):
        width[ax] = [pads[k], pads[k + n]]
    crop = tuple(slice(max(-b, 0), x.shape[i] - max(-e, 0)) for i, (b, e) in enumerate(width))
    x = x[crop]
    width = [(max(b, 0), max(e, 0)) for b, e in width]
    mode = a["mode"]
    if mode == "constant":
        v = np.asarray(value).reshape(-1)[0] if np.size(value) else 0
        return [np.pad(x, width, mode="constant", constant_values=v)]
    return [np.pad(x, width, mode={"reflect": "reflect", "edge": "edge", "wrap": "wrap"}[mode])]


def _pad_device(node: Node, a: dict[str, Any]) -> DeviceKernel | str:
    if a["mode"] not in ("constant", "reflect", "edge"):
        return f"device Pad has no {a['mode']} mode"
    why = reject(node, data_inputs=(0,))
    if why:
        return why
    pads = const_ints(node, 1)
    axes = const_ints(node, 3) if node.input(3) is not None else None
    if pads is None or (node.input(3) is not None and axes is None):
        return "Pad pads/axes are not constants"
    value = 0.0
    if node.input(2) is not None and a["mode"] == "constant":
        c = const_in(node, 2)
        if c is None:
            return "Pad constant_value is not a constant"
        raw = np.asarray(c).reshape(-1)[0] if np.size(c) else 0
        value = float(raw)
        if int(abs(value)) > 2**53 and np.asarray(c).dtype.kind in "iu":
            return "Pad constant_value does not fit the kernel's double attribute exactly"
    rank = len(node.inputs[0].meta.shape)
    axes = _pad_axes(rank, axes)
    full = [0] * (2 * rank)
    for k, ax in enumerate(axes):
        full[ax], full[ax + rank] = pads[k], pads[k + len(axes)]
    if any(p < 0 for p in full):
        return "device Pad does not support negative pads"
    if a["mode"] != "constant":
        return kernel("Pad", {"pads": full, "mode": a["mode"]}, (0,))
    return kernel("Pad", {"pads": full, "value": value}, (0,))


_PAD_MODES = ("constant", "reflect", "edge", "wrap")
register(OpSchema("Pad", 2, 4, _pad_infer, _pad, attrs={"mode": A.s("constant", _PAD_MODES)},
                  device=_pad_device, layout=Layout.SPATIAL))


# ---- data-dependent shapes -------------------------------------------------------------------
def _compress_infer(node: Node, a: dict[str, Any]) -> list[TensorMeta]:
    m = meta_in(node, 0)
    check_dtype(node, 1, {DType.BOOL}, "condition")
    cond = const_in(node, 1)
    n: Dim = int(np.count_nonzero(cond)) if cond is not None else sym(node, "n")
    if a.get("axis") is None:
        return [out(m.dtype, (n,))]
    if m.shape is None:
        return [out(m.dtype, None)]
    axis = norm_axis(node, a["axis"], len(m.shape))
    dims = list(m.shape)
    dims[axis] = n
    return [out(m.dtype, dims)]


register(OpSchema("Compress", 2, 2, _compress_infer, lambda ins, a: [
    np.compress(np.asarray(ins[1]).astype(bool), ins[0], axis=a.get("axis"))],
    attrs={"axis": A.i()}))


def _nonzero_infer(node: Node, a: dict[str, Any]) -> list[TensorMeta]:
    shape = shape_in(node, 0)
    return [out(DType.INT64, (len(shape) if shape is not None else sym(node, 0), sym(node, 1)))]


register(OpSchema("NonZero", 1, 1, _nonzero_infer, lambda ins, a: [
    np.array(np.nonzero(ins[0]), dtype=np.int64).reshape(max(np.ndim(ins[0]), 1), -1)
    if np.ndim(ins[0]) else np.zeros((0, int(bool(ins[0]))), np.int64)]))


def _unique_infer(node: Node, a: dict[str, Any]) -> list[TensorMeta]:
    m = meta_in(node, 0)
    n = sym(node, "n")
    if a.get("axis") is None or m.shape is None:
        y = (n,) if a.get("axis") is None else None
        total = None if m.shape is None else _flat_len(node, m.shape)
        inv: tuple[Dim, ...] = (total if total is not None else sym(node, "m"),)
    else:
        axis = norm_axis(node, a["axis"], len(m.shape))
        dims = list(m.shape)
        dims[axis] = n
        y = tuple(dims)
        inv = (m.shape[axis],)
    return [out(m.dtype, y), out(DType.INT64, (n,)), out(DType.INT64, inv),
            out(DType.INT64, (n,))]


def _flat_len(node: Node, shape: tuple[Dim, ...]) -> Dim | None:
    if all(isinstance(d, int) for d in shape):
        return int(np.prod(shape, dtype=np.int64))
    return None


def _unique(ins: list[Any], a: dict[str, Any]) -> list[np.ndarray]:
    x = ins[0]
    axis = a.get("axis")
    if axis is None:
        y, idx, inv, cnt = np.unique(x.reshape(-1), return_index=True, return_inverse=True,
                                     return_counts=True)
    else:
        axis = axis + x.ndim if axis < 0 else axis
        y, idx, inv, cnt = np.unique(x, return_index=True, return_inverse=True,
                                     return_counts=True, axis=axis)
    inv = inv.reshape(-1)
    if not a["sorted"]:
        order = np.argsort(idx, kind="stable")
        rank = np.empty_like(order)
        rank[order] = np.arange(len(order))
        y = np.take(y, order, axis=0 if axis is None else axis)
        idx, cnt, inv = idx[order], cnt[order], rank[inv]
    return [y, idx.astype(np.int64), inv.astype(np.int64), cnt.astype(np.int64)]


register(OpSchema("Unique", 1, 1, _unique_infer, _unique,
                  attrs={"axis": A.i(), "sorted": A.i(1)}, max_outputs=4))


def _center_crop_pad_infer(node: Node, a: dict[str, Any]) -> list[TensorMeta]:
    m = meta_in(node, 0)
    target = const_ints(node, 1)
    if m.shape is None:
        return [out(m.dtype, None)]
    axes = _pad_axes(len(m.shape), a.get("axes"))
    dims = list(m.shape)
    for k, ax in enumerate(axes):
        dims[ax] = target[k] if target is not None else sym(node, ax)
    return [out(m.dtype, dims)]


def _center_crop_pad(ins: list[Any], a: dict[str, Any]) -> list[np.ndarray]:
    x = ins[0]
    target = ints(ins[1])
    axes = _pad_axes(x.ndim, a.get("axes"))
    src = [slice(None)] * x.ndim
    dst = [slice(None)] * x.ndim
    shape = list(x.shape)
    for ax, want in zip(axes, target):
        have = x.shape[ax]
        shape[ax] = want
        if want < have:
            start = (have - want) // 2
            src[ax] = slice(start, start + want)
        elif want > have:
            start = (want - have) // 2
            dst[ax] = slice(start, start + have)
    res = np.zeros(shape, dtype=x.dtype)
    res[tuple(dst)] = x[tuple(src)]
    return [res]


register(OpSchema("CenterCropPad", 2, 2, _center_crop_pad_infer, _center_crop_pad,
                  attrs={"axes": A.ints()}))
