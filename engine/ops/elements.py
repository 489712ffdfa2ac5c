"""Ops that address single elements through index data: GatherElements, ScatterElements,
ScatterND, ReverseSequence.

The device runs GatherElements, ScatterElements, ScatterND and ReverseSequence
(kernels_scatter.cc, kernels_sequence.cc): it checks every index and length at run time, so
the lowerings only resolve the axes; which shapes and dtypes the kernels take is the
runtime's answer."""

from __future__ import annotations

from typing import Any

import numpy as np

from ..ir import Node, TensorMeta
from . import attrs as A
from .device_helpers import kernel, reject
from .indexing import _norm_index
from .registry import DeviceKernel, OpSchema, register, shape_error
from .shape_helpers import INDEX, check_dtype, check_same_dtype, meta_in, norm_axis, out, shape_in


def _gather_elements_infer(node: Node, a: dict[str, Any]) -> list[TensorMeta]:
    m = meta_in(node, 0)
    check_dtype(node, 1, INDEX, "indices")
    idx = shape_in(node, 1)
    if m.shape is not None and idx is not None and len(m.shape) != len(idx):
        raise shape_error(node, f"indices rank {len(idx)} differs from data rank "
                                f"{len(m.shape)}")
    if m.shape is not None:
        norm_axis(node, a["axis"], len(m.shape))
    return [out(m.dtype, idx)]


def _gather_elements_device(node: Node, a: dict[str, Any]) -> DeviceKernel | str:
    why = reject(node)
    if why:
        return why
    rank = len(node.inputs[0].meta.shape)
    return kernel("GatherElements", {"axis": norm_axis(node, a["axis"], rank)}, (0, 1))


register(OpSchema("GatherElements", 2, 2, _gather_elements_infer, lambda ins, a: [
    np.take_along_axis(ins[0], _norm_index(ins[1], ins[0].shape[a["axis"]]), axis=a["axis"])],
    attrs={"axis": A.i(0)}, device=_gather_elements_device))


# ---- Scatter family -------------------------------------------------------------------------
_UFUNC = {"add": np.add, "mul": np.multiply, "max": np.maximum, "min": np.minimum}


def _scatter_infer(node: Node, a: dict[str, Any]) -> list[TensorMeta]:
    check_dtype(node, 1, INDEX, "indices")
    check_same_dtype(node, [0, 2])
    m = meta_in(node, 0)
    return [out(m.dtype, m.shape)]


def _scatter_elements_infer(node: Node, a: dict[str, Any]) -> list[TensorMeta]:
    metas = _scatter_infer(node, a)
    data, idx = shape_in(node, 0), shape_in(node, 1)
    if data is not None:
        norm_axis(node, a["axis"], len(data))
        if idx is not None and len(idx) != len(data):
            raise shape_error(node, f"indices rank {len(idx)} differs from data rank {len(data)}")
    return metas


def _scatter_elements(ins: list[Any], a: dict[str, Any]) -> list[np.ndarray]:
    data, idx, upd = ins
    res = data.copy()
    axis = a["axis"] + data.ndim if a["axis"] < 0 else a["axis"]
    grid = list(np.indices(idx.shape, sparse=True))
    grid[axis] = _norm_index(idx, data.shape[axis])
    where = tuple(grid)
    if a["reduction"] == "none":
        res[where] = upd
    else:
        _UFUNC[a["reduction"]].at(res, where, upd)
    return [res]


def _scatter_nd(ins: list[Any], a: dict[str, Any]) -> list[np.ndarray]:
    data, idx, upd = ins
    res = data.copy()
    k = idx.shape[-1]
    flat = _norm_index(idx, 0).reshape(-1, k)
    flat = np.where(flat < 0, flat + np.array(data.shape[:k]), flat)
    u = upd.reshape((flat.shape[0],) + data.shape[k:])
    where = tuple(flat.T)
    if a["reduction"] == "none":
        res[where] = u
    else:
        _UFUNC[a["reduction"]].at(res, where, u)
    return [res]


_SCATTER = {"reduction": A.s("none", ("none", "add", "mul", "max", "min"))}


def _scatter_elements_device(node: Node, a: dict[str, Any]) -> DeviceKernel | str:
    why = reject(node)
    if why:
        return why
    rank = len(node.inputs[0].meta.shape)
    return kernel("ScatterElements", {"axis": norm_axis(node, a["axis"], rank),
                                      "reduction": a["reduction"]}, (0, 1, 2))


register(OpSchema("ScatterElements", 3, 3, _scatter_elements_infer, _scatter_elements,
                  attrs={"axis": A.i(0), **_SCATTER}, device=_scatter_elements_device))
def _scatter_nd_device(node: Node, a: dict[str, Any]) -> DeviceKernel | str:
    return reject(node) or kernel("ScatterND", {"reduction": a["reduction"]}, (0, 1, 2))


register(OpSchema("ScatterND", 3, 3, _scatter_infer, _scatter_nd, attrs=_SCATTER,
                  device=_scatter_nd_device))


def _reverse_sequence(ins: list[Any], a: dict[str, Any]) -> list[np.ndarray]:
    x, lens = ins[0], ins[1]
    res = x.copy()
    t, b = a["time_axis"], a["batch_axis"]
    for i, n in enumerate(np.asarray(lens).astype(np.int64)):
        src = [slice(None)] * x.ndim
        src[b] = i
        src[t] = slice(0, int(n))
        dst = list(src)
        dst[t] = slice(int(n) - 1, None, -1) if n > 0 else slice(0, 0)
        res[tuple(src)] = x[tuple(dst)]
    return [res]


def _sequence_axes(node: Node, a: dict[str, Any], rank: int) -> tuple[int, int]:
    """(time axis, batch axis), non-negative; an error naming the node unless they are two
    distinct axes of a rank >= 2 input."""
    if rank < 2:
        raise shape_error(node, f"input rank {rank} is below 2")
    t = norm_axis(node, a["time_axis"], rank, "time_axis")
    b = norm_axis(node, a["batch_axis"], rank, "batch_axis")
    if t == b:
        raise shape_error(node, f"time_axis and batch_axis are both axis {t}")
    return t, b


def _reverse_sequence_infer(node: Node, a: dict[str, Any]) -> list[TensorMeta]:
    m = meta_in(node, 0)
    check_dtype(node, 1, INDEX, "sequence_lens")
    if m.shape is not None:
        _sequence_axes(node, a, len(m.shape))
    return [out(m.dtype, m.shape)]


def _reverse_sequence_device(node: Node, a: dict[str, Any]) -> DeviceKernel | str:
    why = reject(node)
    if why:
        return why
    t, b = _sequence_axes(node, a, len(node.inputs[0].meta.shape))
    return kernel("ReverseSequence", {"time_axis": t, "batch_axis": b}, (0, 1))


register(OpSchema("ReverseSequence", 2, 2, _reverse_sequence_infer, _reverse_sequence,
                  attrs={"batch_axis": A.i(1), "time_axis": A.i(0)},
                  device=_reverse_sequence_device))
