"""Reductions: ReduceX, ArgMax/ArgMin, CumSum/CumProd, TopK."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ..dtypes import DType
from ..ir import Dim, Node, TensorMeta
from . import attrs as A
from .device_helpers import kernel, reject
from .kernel_utils import ints, widen
from .registry import DeviceKernel, Layout, OpSchema, register, shape_error
from .shape_helpers import (
    INDEX,
    NUMERIC,
    check_dtype,
    const_in,
    const_ints,
    meta_in,
    norm_axes,
    norm_axis,
    out,
    shape_in,
    sym,
    symbolic_shape,
)

_REDUCE_ATTRS = {"keepdims": A.i(1), "noop_with_empty_axes": A.i(0)}


def reduce_axes(node: Node, a: dict[str, Any], rank: int) -> list[int] | None:
    """Normalized axes to reduce ([] = identity); None when they are not constant."""
    if node.input(1) is None:
        return [] if a["noop_with_empty_axes"] else list(range(rank))
    axes = const_ints(node, 1)
    if axes is None:
        return None
    if not axes:
        return [] if a["noop_with_empty_axes"] else list(range(rank))
    return norm_axes(node, axes, rank)


def _reduce_infer(node: Node, a: dict[str, Any], dtypes: frozenset[DType]) -> list[TensorMeta]:
    m = meta_in(node, 0)
    check_dtype(node, 0, dtypes, "data")
    if node.input(1) is not None:
        check_dtype(node, 1, {DType.INT64}, "axes")
    if m.shape is None:
        return [out(m.dtype, None)]
    rank = len(m.shape)
    axes = reduce_axes(node, a, rank)
    if axes is None:
        keep = a["keepdims"]
        return [out(m.dtype, symbolic_shape(node, rank) if keep else None)]
    dims: list[Dim] = []
    for i, d in enumerate(m.shape):
        if i not in axes:
            dims.append(d)
        elif a["keepdims"]:
            dims.append(1)
    return [out(m.dtype, dims)]


def _axes_of(ins: list[Any], a: dict[str, Any], rank: int) -> tuple[int, ...] | None:
    """Axes for numpy; None = all; () = identity."""
    if len(ins) < 2 or ins[1] is None or np.size(ins[1]) == 0:
        return () if a["noop_with_empty_axes"] else None
    return tuple(sorted(v + rank if v < 0 else v for v in ints(ins[1])))


def _extreme(x: np.ndarray, largest: bool) -> Any:
    if x.dtype == bool:
        return not largest
    if x.dtype.kind in "iu":
        info = np.iinfo(x.dtype)
        return info.min if largest else info.max
    return -np.inf if largest else np.inf


ReduceFn = Callable[[np.ndarray, tuple[int, ...] | None, bool], np.ndarray]

_FUNCS: dict[str, ReduceFn] = {
    "ReduceSum": lambda x, ax, k: np.sum(x, axis=ax, keepdims=k),
    "ReduceMean": lambda x, ax, k: np.mean(x, axis=ax, keepdims=k),
    "ReduceProd": lambda x, ax, k: np.prod(x, axis=ax, keepdims=k),
    "ReduceMax": lambda x, ax, k: np.max(x, axis=ax, keepdims=k, initial=_extreme(x, True)),
    "ReduceMin": lambda x, ax, k: np.min(x, axis=ax, keepdims=k, initial=_extreme(x, False)),
    "ReduceL1": lambda x, ax, k: np.sum(np.abs(x), axis=ax, keepdims=k),
    "ReduceL2": lambda x, ax, k: np.sqrt(np.sum(np.square(x), axis=ax, keepdims=k)),
    "ReduceSumSquare": lambda x, ax, k: np.sum(np.square(x), axis=ax, keepdims=k),
    "ReduceLogSum": lambda x, ax, k: np.log(np.sum(x, axis=ax, keepdims=k)),
    "ReduceLogSumExp": lambda x, ax, k: _logsumexp(x, ax, k),
}


def _logsumexp(x: np.ndarray, ax: tuple[int, ...] | None, keep: bool) -> np.ndarray:
    m = np.max(x, axis=ax, keepdims=True, initial=-np.inf)
    m = np.where(np.isfinite(m), m, 0)
    r = np.log(np.sum(np.exp(x - m), axis=ax, keepdims=True)) + m
    return r if keep else np.squeeze(r, axis=ax)


def _reduce_op(name: str, fn: ReduceFn, device: bool) -> None:
    dtypes = NUMERIC | ({DType.BOOL} if name in ("ReduceMax", "ReduceMin") else frozenset())

    def compute(ins: list[Any], a: dict[str, Any]) -> list[np.ndarray]:
        x = ins[0]
        axes = _axes_of(ins, a, x.ndim)
        if axes == ():
            return [x]
        if x.dtype.kind in "iu" and name in ("ReduceMean", "ReduceL2", "ReduceLogSum",
                                              "ReduceLogSumExp"):
            wide = x.astype(np.float64)
        elif x.dtype.kind in "iu" and name in ("ReduceSum", "ReduceProd", "ReduceL1",
                                                "ReduceSumSquare"):
            wide = x.astype(np.int64) if x.dtype.kind == "i" else x.astype(np.uint64)
        else:
            wide = widen(x)
        return [np.asarray(fn(wide, axes, bool(a["keepdims"]))).astype(x.dtype)]

    def lower(node: Node, a: dict[str, Any]) -> DeviceKernel | str:
        if node.input(1) is not None and const_ints(node, 1) is None:
            return f"{name} axes are not constant"
        why = reject(node, data_inputs=(0,))
        if why:
            return why
        axes = reduce_axes(node, a, len(node.inputs[0].meta.shape))
        if axes is None:
            return f"{name} axes are not constant"
        if not axes:
            return f"{name} with empty axes is a no-op"
        return kernel(name, {"axes": sorted(axes), "keepdims": int(a["keepdims"])}, (0,))

    register(OpSchema(name, 1, 2, lambda node, a: _reduce_infer(node, a, dtypes), compute,
                      attrs=_REDUCE_ATTRS, device=lower if device else None,
                      layout=Layout.REDUCE if device else Layout.PLAIN))


# ReduceMax / ReduceMin run a loop of the runtime's own that keeps -inf and NaNs as numpy
# (test_attention_23_boolmask_fullymasked_row_nan_robustness_expanded); ReduceProd the same
# loop (a SigLIP2 patch count, the product of each image's grid shape, was a host step
# between two device programs).
for _name, _fn in _FUNCS.items():
    _reduce_op(_name, _fn, _name in ("ReduceMean", "ReduceSum", "ReduceMax", "ReduceMin",
                                     "ReduceProd"))


# ---- ArgMax / ArgMin ----------------------------------------------------------------------
def _arg_infer(node: Node, a: dict[str, Any]) -> list[TensorMeta]:
    check_dtype(node, 0, NUMERIC, "data")
    shape = shape_in(node, 0)
    if shape is None:
        return [out(DType.INT64, None)]
    axis = norm_axis(node, a["axis"], len(shape))
    dims = [1 if i == axis else d for i, d in enumerate(shape) if i != axis or a["keepdims"]]
    return [out(DType.INT64, dims)]


def _arg(largest: bool) -> Callable[[list[Any], dict[str, Any]], list[np.ndarray]]:
    def compute(ins: list[Any], a: dict[str, Any]) -> list[np.ndarray]:
        x = widen(ins[0])
        axis = a["axis"] + x.ndim if a["axis"] < 0 else a["axis"]
        fn = np.argmax if largest else np.argmin
        if a["select_last_index"]:
            flipped = np.flip(x, axis)
            idx = x.shape[axis] - 1 - fn(flipped, axis=axis)
        else:
            idx = fn(x, axis=axis)
        if a["keepdims"]:
            idx = np.expand_dims(idx, axis)
        return [idx.astype(np.int64)]
    return compute


def _arg_device(node: Node, a: dict[str, Any]) -> DeviceKernel | str:
    why = reject(node)
    if why:
        return why
    rank = len(node.inputs[0].meta.shape)
    return kernel(node.op_type, {"axis": norm_axis(node, a["axis"], rank),
                                 "keepdims": int(a["keepdims"]),
                                 "select_last_index": int(a["select_last_index"])}, (0,))


_ARG_ATTRS = {"axis": A.i(0), "keepdims": A.i(1), "select_last_index": A.i(0)}
register(OpSchema("ArgMax", 1, 1, _arg_infer, _arg(True), attrs=_ARG_ATTRS, device=_arg_device))
register(OpSchema("ArgMin", 1, 1, _arg_infer, _arg(False), attrs=_ARG_ATTRS,
                  device=_arg_device))


# ---- CumSum / CumProd ---------------------------------------------------------------------
def _cum(ufunc: np.ufunc) -> Callable[[list[Any], dict[str, Any]], list[np.ndarray]]:
    def compute(ins: list[Any], a: dict[str, Any]) -> list[np.ndarray]:
        x = ins[0]
        axis = int(np.asarray(ins[1]).reshape(-1)[0])
        axis = axis + x.ndim if axis < 0 else axis
        y = np.flip(x, axis) if a["reverse"] else x
        acc = ufunc.accumulate(widen(y), axis=axis)
        if a["exclusive"]:
            acc = np.concatenate([np.full_like(np.take(acc, [0], axis), ufunc.identity),
                                  np.take(acc, np.arange(acc.shape[axis] - 1), axis)],
                                 axis=axis)
        if a["reverse"]:
            acc = np.flip(acc, axis)
        return [acc.astype(x.dtype)]
    return compute


def _cum_infer(node: Node, a: dict[str, Any]) -> list[TensorMeta]:
    check_dtype(node, 0, NUMERIC, "x")
    check_dtype(node, 1, INDEX, "axis")
    shape, axis = shape_in(node, 0), const_ints(node, 1)
    if shape is not None and axis is not None:
        if len(axis) != 1:
            raise shape_error(node, f"axis has {len(axis)} values, expected one")
        norm_axis(node, axis[0], len(shape))
    return [out(meta_in(node, 0).dtype, shape)]


def _cumsum_device(node: Node, a: dict[str, Any]) -> DeviceKernel | str:
    """The axis resolved here (a constant); the kernel adds in the reference's order."""
    why = reject(node, data_inputs=(0,))
    if why:
        return why
    axis = const_ints(node, 1)
    if axis is None or len(axis) != 1:
        return "CumSum axis is not a constant scalar"
    rank = len(node.inputs[0].meta.shape)
    return kernel("CumSum", {"axis": norm_axis(node, axis[0], rank),
                             "exclusive": int(a["exclusive"]), "reverse": int(a["reverse"])}, (0,))


_CUM_ATTRS = {"exclusive": A.i(0), "reverse": A.i(0)}
register(OpSchema("CumSum", 2, 2, _cum_infer, _cum(np.add), attrs=_CUM_ATTRS,
                  device=_cumsum_device))
register(OpSchema("CumProd", 2, 2, _cum_infer, _cum(np.multiply), attrs=_CUM_ATTRS))


# ---- TopK --------------------------------------------------------------------------------
def _topk_infer(node: Node, a: dict[str, Any]) -> list[TensorMeta]:
    m = meta_in(node, 0)
    check_dtype(node, 1, {DType.INT64}, "K")
    if m.shape is None:
        return [out(m.dtype, None), out(DType.INT64, None)]
    axis = norm_axis(node, a["axis"], len(m.shape))
    k = const_in(node, 1)
    dims = list(m.shape)
    if k is not None:
        kv = int(np.asarray(k).reshape(-1)[0])
        if isinstance(dims[axis], int) and kv > dims[axis]:
            raise shape_error(node, f"K={kv} exceeds the axis size {dims[axis]}")
        dims[axis] = kv
    else:
        dims[axis] = sym(node, axis)
    return [out(m.dtype, dims), out(DType.INT64, dims)]


def _topk(ins: list[Any], a: dict[str, Any]) -> list[np.ndarray]:
    x = ins[0]
    k = int(np.asarray(ins[1]).reshape(-1)[0])
    axis = a["axis"] + x.ndim if a["axis"] < 0 else a["axis"]
    keys = widen(x) if x.dtype.kind == "f" or x.dtype.name == "bfloat16" else \
        x.astype(np.float64)
    order = np.argsort(-keys if a["largest"] else keys, axis=axis, kind="stable")
    idx = np.take(order, np.arange(k), axis=axis)
    return [np.take_along_axis(x, idx, axis=axis), idx.astype(np.int64)]


def _topk_device(node: Node, a: dict[str, Any]) -> DeviceKernel | str:
    """K resolved here (a constant); the kernel always sorts, which `sorted=0` allows."""
    why = reject(node, data_inputs=(0,))
    if why:
        return why
    k = const_ints(node, 1)
    if k is None or len(k) != 1:
        return "TopK's K is not a constant scalar"
    if len(node.outputs) != 2:
        return "device TopK writes both outputs"
    rank = len(node.inputs[0].meta.shape)
    return kernel("TopK", {"axis": norm_axis(node, a["axis"], rank), "k": int(k[0]),
                           "largest": int(a["largest"])}, (0,))


register(OpSchema("TopK", 2, 2, _topk_infer, _topk, max_outputs=2,
                  attrs={"axis": A.i(-1), "largest": A.i(1), "sorted": A.i(1)},
                  device=_topk_device))
