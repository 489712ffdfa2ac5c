"""Ops that make tensors or change element types: Cast, CastLike, BitCast, Constant,
ConstantOfShape, Range, EyeLike, Trilu, OneHot, and the random generators."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ..dtypes import DType
from ..ir import Node, TensorMeta
from . import attrs as A
from .device_helpers import kernel, reject
from .kernel_utils import ints, is_bfloat16, is_ml_dtype, np_dtype, onnx_dtype, to_low_precision
from .registry import DeviceKernel, OpSchema, register, shape_error
from .shape_helpers import (
    FLOATS,
    NUMERIC,
    check_dtype,
    const_in,
    dtype_in,
    meta_in,
    norm_axis,
    out,
    shape_in,
    shape_value,
    sym,
    symbolic_shape,
    value_rank,
)


def target_dtype(node: Node, code: Any, what: str = "to") -> DType:
    try:
        return onnx_dtype(code)
    except (TypeError, ValueError):
        raise shape_error(node, f"attribute {what}={code} names an unsupported element "
                                f"type") from None


def cast_array(x: np.ndarray, dt: np.dtype, saturate: bool = True,
               round_mode: str = "up") -> np.ndarray:
    if dt == np.dtype(object):
        if x.dtype == object:
            return x
        if x.dtype.kind == "b":
            return np.vectorize(lambda v: "1" if v else "0", otypes=[object])(x)
        return x.astype(str).astype(object)
    if x.dtype == object:
        return np.vectorize(lambda v: float(v), otypes=[np.float64])(x).astype(dt) \
            if x.size else x.astype(dt)
    if is_ml_dtype(dt) and not is_bfloat16(dt):
        return to_low_precision(x, dt, saturate, round_mode)
    if dt.kind in "iu" and x.dtype.kind == "f":
        return np.nan_to_num(x, nan=0, posinf=0, neginf=0).astype(dt)
    return x.astype(dt)


# ---- Cast / CastLike / BitCast --------------------------------------------------------------
def _cast_infer(node: Node, a: dict[str, Any]) -> list[TensorMeta]:
    return [out(target_dtype(node, a["to"]), shape_in(node, 0))]


def _cast_device(node: Node, a: dict[str, Any]) -> DeviceKernel | str:
    """The runtime casts between any two of its dtypes; CastLike is a Cast to input 1's."""
    why = reject(node, data_inputs=(0,))
    return why or kernel("Cast", {"to": node.outputs[0].meta.dtype.value}, (0,))


_CAST_ATTRS = {"saturate": A.i(1), "round_mode": A.s("up")}
register(OpSchema("Cast", 1, 1, _cast_infer,
                  lambda ins, a: [cast_array(ins[0], np_dtype(onnx_dtype(a["to"])),
                                             bool(a["saturate"]), a["round_mode"])],
                  attrs={"to": A.i(A.REQUIRED), **_CAST_ATTRS}, device=_cast_device))
register(OpSchema("CastLike", 2, 2,
                  lambda node, a: [out(dtype_in(node, 1), shape_in(node, 0))],
                  lambda ins, a: [cast_array(ins[0], ins[1].dtype, bool(a["saturate"]),
                                             a["round_mode"])], attrs=_CAST_ATTRS,
                  device=_cast_device))


def _bitcast_infer(node: Node, a: dict[str, Any]) -> list[TensorMeta]:
    dt = target_dtype(node, a["to"])
    src = dtype_in(node, 0)
    if DType.STRING in (dt, src) or dt.itemsize != src.itemsize:
        raise shape_error(node, f"cannot bitcast {src.value} to {dt.value}: element sizes "
                                f"differ or are not fixed")
    return [out(dt, shape_in(node, 0))]


register(OpSchema("BitCast", 1, 1, _bitcast_infer, lambda ins, a: [
    np.array(ins[0], copy=True).view(np_dtype(onnx_dtype(a["to"]))).reshape(ins[0].shape)],
    attrs={"to": A.i(A.REQUIRED)}))


# ---- Constant / ConstantOfShape -----------------------------------------------------------
_CONST_KEYS = ("value", "value_float", "value_floats", "value_int", "value_ints",
               "value_string", "value_strings", "sparse_value")


def constant_array(a: dict[str, Any]) -> np.ndarray:
    for key in _CONST_KEYS:
        if key in a:
            v = a[key]
            if key in ("value_float", "value_floats"):
                return np.asarray(v, dtype=np.float32)
            if key in ("value_int", "value_ints"):
                return np.asarray(v, dtype=np.int64)
            if key in ("value_string", "value_strings"):
                return np.asarray(v, dtype=object)
            return np.asarray(v)
    raise ValueError("Constant has no value attribute")


def _constant_infer(node: Node, a: dict[str, Any]) -> list[TensorMeta]:
    try:
        arr = constant_array(a)
    except ValueError:
        raise shape_error(node, "Constant has none of the value attributes") from None
    return [out(DType.from_numpy(arr.dtype), arr.shape)]


register(OpSchema("Constant", 0, 0, _constant_infer, lambda ins, a: [constant_array(a)],
                  attrs={"value": A.tensor(), "sparse_value": A.tensor(),
                         "value_float": A.f(), "value_floats": A.floats(),
                         "value_int": A.i(), "value_ints": A.ints(),
                         "value_string": A.s(), "value_strings": A.strings()}))


def _cos_value(a: dict[str, Any]) -> np.ndarray:
    v = a.get("value")
    return np.zeros(1, np.float32) if v is None else np.asarray(v).reshape(-1)


def _cos_infer(node: Node, a: dict[str, Any]) -> list[TensorMeta]:
    check_dtype(node, 0, {DType.INT64}, "input")
    dt = DType.from_numpy(_cos_value(a).dtype)
    dims = shape_value(node, 0)
    if dims is None:
        return [out(dt, symbolic_shape(node, value_rank(node, 0)))]
    if any(isinstance(d, int) and d < 0 for d in dims):
        raise shape_error(node, f"shape {dims} has a negative dim")
    return [out(dt, dims)]


register(OpSchema("ConstantOfShape", 1, 1, _cos_infer, lambda ins, a: [
    np.full(tuple(ints(ins[0])), _cos_value(a)[0], dtype=_cos_value(a).dtype)],
    attrs={"value": A.tensor()}))


# ---- Range --------------------------------------------------------------------------------
def range_count(start: Any, limit: Any, delta: Any) -> int:
    if isinstance(start, (int, np.integer)) and isinstance(delta, (int, np.integer)):
        q, r = divmod(int(limit) - int(start), int(delta))
        return max(q + (r != 0), 0)
    return max(int(math.ceil((float(limit) - float(start)) / float(delta))), 0)


def _range_infer(node: Node, a: dict[str, Any]) -> list[TensorMeta]:
    dt = check_dtype(node, 0, NUMERIC, "start")
    for i in (1, 2):
        if dtype_in(node, i) is not dt:
            raise shape_error(node, f"input {i} has dtype {dtype_in(node, i).value}, "
                                    f"expected {dt.value} like start")
    vals = [const_in(node, i) for i in range(3)]
    if any(v is None for v in vals):
        # arange(n) over a dim (positions of a sequence, rows of a batch): n elements
        start, limit, delta = vals[0], shape_value(node, 1), vals[2]
        if (start is not None and delta is not None and limit is not None and len(limit) == 1
                and np.size(start) == 1 and np.size(delta) == 1
                and np.asarray(start).item() == 0 and np.asarray(delta).item() == 1):
            return [out(dt, (limit[0],))]
        return [out(dt, (sym(node, 0),))]
    s, lim, d = (np.asarray(v).reshape(-1)[0].item() for v in vals)
    if d == 0:
        raise shape_error(node, "delta is 0")
    return [out(dt, (range_count(s, lim, d),))]


def _range(ins: list[Any], a: dict[str, Any]) -> list[np.ndarray]:
    s, lim, d = (np.asarray(v).reshape(-1)[0] for v in ins)
    dt = np.asarray(ins[0]).dtype
    n = range_count(s.item(), lim.item(), d.item())
    if dt.kind in "iu":
        return [(np.arange(n, dtype=np.int64) * int(d) + int(s)).astype(dt)]
    wide = np.float64 if dt == np.float64 else np.float32
    return [(wide(s) + np.arange(n, dtype=wide) * wide(d)).astype(dt)]


register(OpSchema("Range", 3, 3, _range_infer, _range, attrs={"stash_type": A.i(1)}))


# ---- EyeLike / Trilu / OneHot -----------------------------------------------------------
def _eyelike_dtype(node_dtype: DType, a: dict[str, Any]) -> DType:
    return onnx_dtype(a["dtype"]) if a.get("dtype") is not None else node_dtype


def _eyelike_infer(node: Node, a: dict[str, Any]) -> list[TensorMeta]:
    m = meta_in(node, 0)
    if m.shape is not None and len(m.shape) != 2:
        raise shape_error(node, f"input has rank {len(m.shape)}, expected 2")
    return [out(_eyelike_dtype(m.dtype, a), m.shape)]


def _eyelike(ins: list[Any], a: dict[str, Any]) -> list[np.ndarray]:
    x = ins[0]
    dt = np_dtype(onnx_dtype(a["dtype"])) if a.get("dtype") is not None else x.dtype
    return [np.eye(x.shape[0], x.shape[1], k=a["k"], dtype=dt)]


register(OpSchema("EyeLike", 1, 1, _eyelike_infer, _eyelike,
                  attrs={"dtype": A.i(), "k": A.i(0)}))


def _trilu_infer(node: Node, a: dict[str, Any]) -> list[TensorMeta]:
    m = meta_in(node, 0)
    if m.shape is not None and len(m.shape) < 2:
        raise shape_error(node, f"input has rank {len(m.shape)}, expected at least 2")
    return [out(m.dtype, m.shape)]


def _trilu(ins: list[Any], a: dict[str, Any]) -> list[np.ndarray]:
    k = 0 if len(ins) < 2 or ins[1] is None else int(np.asarray(ins[1]).reshape(-1)[0])
    x = ins[0]
    return [np.triu(x, k) if a["upper"] else np.tril(x, k)]


register(OpSchema("Trilu", 1, 2, _trilu_infer, _trilu, attrs={"upper": A.i(1)}))


def _onehot_infer(node: Node, a: dict[str, Any]) -> list[TensorMeta]:
    check_dtype(node, 0, NUMERIC, "indices")
    dt = dtype_in(node, 2)
    shape = shape_in(node, 0)
    if shape is None:
        return [out(dt, None)]
    depth = const_in(node, 1)
    d = int(np.asarray(depth).reshape(-1)[0]) if depth is not None else sym(node, "depth")
    axis = norm_axis(node, a["axis"], len(shape) + 1)
    dims = list(shape)
    dims.insert(axis, d)
    return [out(dt, dims)]


def _onehot(ins: list[Any], a: dict[str, Any]) -> list[np.ndarray]:
    idx = np.asarray(ins[0]).astype(np.int64)
    depth = int(np.asarray(ins[1]).reshape(-1)[0])
    off, on = np.asarray(ins[2]).reshape(-1)[:2]
    idx = np.where(idx < 0, idx + depth, idx)
    hot = np.arange(depth) == idx[..., None]
    y = np.where(hot, on, off).astype(ins[2].dtype)
    axis = a["axis"] + idx.ndim + 1 if a["axis"] < 0 else a["axis"]
    return [np.moveaxis(y, -1, axis)]


register(OpSchema("OneHot", 3, 3, _onehot_infer, _onehot, attrs={"axis": A.i(-1)}))


# ---- random generators (never folded) ---------------------------------------------------
def _rng(a: dict[str, Any]) -> np.random.Generator:
    seed = a.get("seed")
    return np.random.default_rng(None if seed is None else int(seed))


def _random_dtype(node: Node, a: dict[str, Any], like: bool) -> DType:
    if a.get("dtype") is not None:
        return target_dtype(node, a["dtype"], "dtype")
    return dtype_in(node, 0) if like else DType.FLOAT32


def _random(name: str, like: bool, draw: Any, extra: dict[str, Any]) -> None:
    def infer(node: Node, a: dict[str, Any]) -> list[TensorMeta]:
        dt = _random_dtype(node, a, like)
        if dt not in FLOATS:
            raise shape_error(node, f"dtype {dt.value} is not a float type")
        return [out(dt, shape_in(node, 0) if like else a["shape"])]

    def compute(ins: list[Any], a: dict[str, Any]) -> list[np.ndarray]:
        shape = ins[0].shape if like else tuple(a["shape"])
        dt = (np_dtype(onnx_dtype(a["dtype"])) if a.get("dtype") is not None
              else (ins[0].dtype if like else np.float32))
        return [draw(_rng(a), a, shape).astype(dt)]

    attrs = {"dtype": A.i(), "seed": A.f(), **extra}
    if not like:
        attrs["shape"] = A.ints(A.REQUIRED)
    register(OpSchema(name, 1 if like else 0, 1 if like else 0, infer, compute, attrs=attrs,
                      foldable=False))


_NORMAL = {"mean": A.f(0.0), "scale": A.f(1.0)}
_UNIFORM = {"low": A.f(0.0), "high": A.f(1.0)}
for _like in (False, True):
    _random("RandomNormal" + ("Like" if _like else ""), _like,
            lambda r, a, s: r.normal(a["mean"], a["scale"], s), _NORMAL)
    _random("RandomUniform" + ("Like" if _like else ""), _like,
            lambda r, a, s: r.uniform(a["low"], a["high"], s), _UNIFORM)


def _bernoulli(ins: list[Any], a: dict[str, Any]) -> list[np.ndarray]:
    p = np.asarray(ins[0])
    dt = np_dtype(onnx_dtype(a["dtype"])) if a.get("dtype") is not None else p.dtype
    return [(_rng(a).uniform(0, 1, p.shape) < p).astype(dt)]


register(OpSchema("Bernoulli", 1, 1, lambda node, a: [out(
    _random_dtype(node, a, True), shape_in(node, 0))], _bernoulli,
    attrs={"dtype": A.i(), "seed": A.f()}, foldable=False))
