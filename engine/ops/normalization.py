"""Normalizations: Batch, Layer, Instance, Group, RMS, LRN, MeanVariance, Lp."""

from __future__ import annotations

from typing import Any

import numpy as np

from ..dtypes import DType
from ..ir import Node, TensorMeta
from . import attrs as A
from .device_helpers import kernel, optional_index, reject
from .kernel_utils import widen
from .registry import DeviceKernel, Layout, OpSchema, register, shape_error
from .shape_helpers import (
    FLOATS,
    check_dtype,
    check_rank,
    meta_in,
    norm_axis,
    out,
    same,
    shape_in,
)


def _per_channel(v: np.ndarray, ndim: int) -> np.ndarray:
    return np.asarray(v).reshape((1, -1) + (1,) * (ndim - 2))


# ---- BatchNormalization --------------------------------------------------------------------
def _bn_infer(node: Node, a: dict[str, Any]) -> list[TensorMeta]:
    m = meta_in(node, 0)
    check_dtype(node, 0, FLOATS, "X")
    shape = m.shape
    c = shape[1] if shape is not None and len(shape) > 1 else None
    for i, what in ((1, "scale"), (2, "B"), (3, "input_mean"), (4, "input_var")):
        s = check_rank(node, i, 1, what)
        if s is not None and isinstance(c, int) and isinstance(s[0], int) and s[0] != c:
            raise shape_error(node, f"{what} has {s[0]} entries, expected C = {c}")
    stats = out(meta_in(node, 3).dtype, shape_in(node, 3))
    return [out(m.dtype, shape), stats, stats]


def _bn(ins: list[Any], a: dict[str, Any]) -> list[np.ndarray]:
    x, scale, bias, mean, var = (widen(np.asarray(v)) for v in ins[:5])
    nd = x.ndim
    if a["training_mode"]:
        axes = (0,) + tuple(range(2, nd))
        bmean, bvar = x.mean(axis=axes), x.var(axis=axes)
        y = (x - _per_channel(bmean, nd)) / np.sqrt(_per_channel(bvar, nd) + a["epsilon"])
        y = y * _per_channel(scale, nd) + _per_channel(bias, nd)
        mom = a["momentum"]
        rmean = mean * mom + bmean * (1 - mom)
        rvar = var * mom + bvar * (1 - mom)
        st = ins[3].dtype
        return [y.astype(ins[0].dtype), rmean.astype(st), rvar.astype(ins[4].dtype)]
    inv = _per_channel(scale, nd) / np.sqrt(_per_channel(var, nd) + a["epsilon"])
    y = (x - _per_channel(mean, nd)) * inv + _per_channel(bias, nd)
    return [y.astype(ins[0].dtype), ins[3], ins[4]]


def _bn_device(node: Node, a: dict[str, Any]) -> DeviceKernel | str:
    if a["training_mode"]:
        return "device BatchNormalization runs the inference form only"
    if any(o.users or o in node.graph.outputs for o in node.outputs[1:]):
        return "device BatchNormalization produces only Y"
    why = reject(node)
    return why or kernel("BatchNormalization", {"epsilon": float(a["epsilon"])},
                         (0, 1, 2, 3, 4))


register(OpSchema("BatchNormalization", 5, 5, _bn_infer, _bn, max_outputs=3,
                  device=_bn_device, attrs={"epsilon": A.f(1e-5), "momentum": A.f(0.9),
                                            "training_mode": A.i(0)}, layout=Layout.UNIFORM))


# ---- LayerNormalization / RMSNormalization ------------------------------------------------
def _ln_infer(node: Node, a: dict[str, Any]) -> list[TensorMeta]:
    m = meta_in(node, 0)
    check_dtype(node, 0, FLOATS, "X")
    stash = DType.FLOAT32 if a.get("stash_type", 1) == 1 else m.dtype
    if m.shape is None:
        return [out(m.dtype, None), out(stash, None), out(stash, None)]
    axis = norm_axis(node, a["axis"], len(m.shape))
    stat = m.shape[:axis] + (1,) * (len(m.shape) - axis)
    return [out(m.dtype, m.shape), out(stash, stat), out(stash, stat)]


def _ln(ins: list[Any], a: dict[str, Any]) -> list[np.ndarray]:
    x = ins[0]
    axis = a["axis"] + x.ndim if a["axis"] < 0 else a["axis"]
    axes = tuple(range(axis, x.ndim))
    xs = x.astype(np.float32) if a["stash_type"] == 1 and x.dtype != np.float64 else widen(x)
    mean = xs.mean(axis=axes, keepdims=True)
    var = ((xs - mean) ** 2).mean(axis=axes, keepdims=True)
    inv = 1 / np.sqrt(var + a["epsilon"])
    y = (xs - mean) * inv * widen(ins[1])
    if len(ins) > 2 and ins[2] is not None:
        y = y + widen(ins[2])
    stash = np.float32 if a["stash_type"] == 1 else x.dtype
    return [y.astype(x.dtype), mean.astype(stash), inv.astype(stash)]


def _ln_device(node: Node, a: dict[str, Any]) -> DeviceKernel | str:
    if any(o.users or o in node.graph.outputs for o in node.outputs[1:]):
        return "device LayerNormalization produces only Y"
    why = reject(node, data_inputs=(0, 1, 2))
    if why:
        return why
    rank = len(node.inputs[0].meta.shape)
    return kernel("LayerNormalization", {"axis": norm_axis(node, a["axis"], rank),
                                         "epsilon": float(a["epsilon"])},
                  (0, 1, optional_index(node, 2)))


_LN_ATTRS = {"axis": A.i(-1), "epsilon": A.f(1e-5), "stash_type": A.i(1)}
register(OpSchema("LayerNormalization", 2, 3, _ln_infer, _ln, attrs=_LN_ATTRS,
                  max_outputs=3, device=_ln_device))


def _rms(ins: list[Any], a: dict[str, Any]) -> list[np.ndarray]:
    x = ins[0]
    axis = a["axis"] + x.ndim if a["axis"] < 0 else a["axis"]
    xs = x.astype(np.float32) if a["stash_type"] == 1 and x.dtype != np.float64 else widen(x)
    ms = np.mean(xs * xs, axis=tuple(range(axis, x.ndim)), keepdims=True)
    return [(xs / np.sqrt(ms + a["epsilon"]) * widen(ins[1])).astype(x.dtype)]


def _rms_device(node: Node, a: dict[str, Any]) -> DeviceKernel | str:
    x = node.inputs[0]
    rank = len(x.meta.shape)
    axis = norm_axis(node, a["axis"], rank)
    scale = node.inputs[1].meta
    inner = int(np.prod(x.meta.shape[axis:])) if x.meta.is_static else None
    if scale is None or not scale.is_static or inner is None or scale.numel != inner:
        return "device RMSNormalization takes a Scale of the normalized shape (no broadcast)"
    if a["stash_type"] != 1:
        return "device RMSNormalization computes in float32 (stash_type 1)"
    why = reject(node, data_inputs=(0, 1))
    return why or kernel("RMSNormalization", {"axis": axis, "epsilon": float(a["epsilon"])}, (0, 1))


register(OpSchema("RMSNormalization", 2, 2, lambda node, a: _ln_infer(node, a)[:1], _rms,
                  attrs=_LN_ATTRS, device=_rms_device))


# ---- Instance / Group -------------------------------------------------------------------
def _instance(ins: list[Any], a: dict[str, Any]) -> list[np.ndarray]:
    x = widen(ins[0])
    axes = tuple(range(2, x.ndim))
    mean = x.mean(axis=axes, keepdims=True)
    var = x.var(axis=axes, keepdims=True)
    y = (x - mean) / np.sqrt(var + a["epsilon"])
    y = y * _per_channel(widen(ins[1]), x.ndim) + _per_channel(widen(ins[2]), x.ndim)
    return [y.astype(ins[0].dtype)]


def _norm_infer(node: Node, a: dict[str, Any]) -> list[TensorMeta]:
    check_dtype(node, 0, FLOATS, "X")
    shape = shape_in(node, 0)
    if shape is not None and len(shape) < 2:
        raise shape_error(node, f"input has rank {len(shape)}, expected N, C, ...")
    return same(node)


register(OpSchema("InstanceNormalization", 3, 3, _norm_infer, _instance,
                  attrs={"epsilon": A.f(1e-5)}))


def _group(ins: list[Any], a: dict[str, Any]) -> list[np.ndarray]:
    x = ins[0]
    xs = x.astype(np.float32) if a["stash_type"] == 1 and x.dtype != np.float64 else widen(x)
    n, c = x.shape[:2]
    g = a["num_groups"]
    grouped = xs.reshape((n, g, -1))
    mean = grouped.mean(axis=2, keepdims=True)
    var = grouped.var(axis=2, keepdims=True)
    y = ((grouped - mean) / np.sqrt(var + a["epsilon"])).reshape(xs.shape)
    scale, bias = widen(np.asarray(ins[1])), widen(np.asarray(ins[2]))
    if scale.size == g and c != g:  # opset 18 form: one scale per group
        scale, bias = np.repeat(scale, c // g), np.repeat(bias, c // g)
    y = y * _per_channel(scale, x.ndim) + _per_channel(bias, x.ndim)
    return [y.astype(x.dtype)]


register(OpSchema("GroupNormalization", 3, 3, _norm_infer, _group, attrs={
    "epsilon": A.f(1e-5), "num_groups": A.i(A.REQUIRED), "stash_type": A.i(1)}))


# ---- LRN / MVN / Lp ------------------------------------------------------------------------
def _lrn(ins: list[Any], a: dict[str, Any]) -> list[np.ndarray]:
    x = widen(ins[0])
    size = a["size"]
    c = x.shape[1]
    sq = np.square(x)
    lo, hi = (size - 1) // 2, size - 1 - (size - 1) // 2
    padded = np.pad(sq, [(0, 0), (lo, hi)] + [(0, 0)] * (x.ndim - 2))
    total = sum(padded[:, k:k + c] for k in range(size))
    y = x / (a["bias"] + a["alpha"] / size * total) ** a["beta"]
    return [y.astype(ins[0].dtype)]


register(OpSchema("LRN", 1, 1, _norm_infer, _lrn, attrs={
    "alpha": A.f(1e-4), "beta": A.f(0.75), "bias": A.f(1.0), "size": A.i(A.REQUIRED)}))


def _mvn(ins: list[Any], a: dict[str, Any]) -> list[np.ndarray]:
    x = widen(ins[0])
    axes = tuple(a["axes"])
    mean = x.mean(axis=axes, keepdims=True)
    std = np.sqrt(np.maximum((x * x).mean(axis=axes, keepdims=True) - mean * mean, 0))
    return [((x - mean) / (std + 1e-9)).astype(ins[0].dtype)]


register(OpSchema("MeanVarianceNormalization", 1, 1,
                  lambda node, a: [out(meta_in(node, 0).dtype, shape_in(node, 0))], _mvn,
                  attrs={"axes": A.ints([0, 2, 3])}))


def _lp_norm(ins: list[Any], a: dict[str, Any]) -> list[np.ndarray]:
    x = widen(ins[0])
    if a["p"] == 1:
        norm = np.sum(np.abs(x), axis=a["axis"], keepdims=True)
    else:
        norm = np.sqrt(np.sum(x * x, axis=a["axis"], keepdims=True))
    return [np.where(norm == 0, 0, x / np.where(norm == 0, 1, norm)).astype(ins[0].dtype)]


register(OpSchema("LpNormalization", 1, 1,
                  lambda node, a: [out(meta_in(node, 0).dtype, shape_in(node, 0))], _lp_norm,
                  attrs={"axis": A.i(-1), "p": A.i(2)}))
