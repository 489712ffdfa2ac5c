"""A few ops of the ai.onnx.ml domain: LabelEncoder, ArrayFeatureExtractor, Binarizer.
Registered under their domain-qualified names."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ..dtypes import DType
from ..ir import Node, TensorMeta
from . import attrs as A
from .registry import OpSchema, register, shape_error
from .shape_helpers import meta_in, out, shape_in, sym

ML = "ai.onnx.ml."


def _pick(a: dict[str, Any], prefix: str) -> tuple[str, Any]:
    for suffix in ("int64s", "strings", "floats", "tensor"):
        value = a.get(f"{prefix}_{suffix}")
        if value is not None:
            return suffix, value
    raise ValueError(f"LabelEncoder has no {prefix}_* attribute")


def _values_dtype(a: dict[str, Any]) -> DType:
    kind, values = _pick(a, "values")
    if kind == "tensor":
        return DType.from_numpy(np.asarray(values).dtype)
    return {"int64s": DType.INT64, "strings": DType.STRING, "floats": DType.FLOAT32}[kind]


def _label_encoder(ins: list[Any], a: dict[str, Any]) -> list[np.ndarray]:
    x = np.asarray(ins[0])
    _, keys = _pick(a, "keys")
    kind, values = _pick(a, "values")
    keys = list(np.asarray(keys).reshape(-1).tolist())
    values = list(np.asarray(values).reshape(-1).tolist())
    table = dict(zip(keys, values))
    nan_value = next((v for k, v in zip(keys, values)
                      if isinstance(k, float) and math.isnan(k)), None)
    if kind == "tensor":
        default = np.asarray(a["default_tensor"]).reshape(-1)[0].item() \
            if a.get("default_tensor") is not None else 0
        dtype = np.asarray(a["values_tensor"]).dtype
    else:
        default = {"int64s": ("default_int64", -1), "floats": ("default_float", -0.0),
                   "strings": ("default_string", "_Unused")}[kind]
        default = a.get(*default)
        dtype = {"int64s": np.int64, "floats": np.float32, "strings": object}[kind]

    def look(v: Any) -> Any:
        if isinstance(v, float) and math.isnan(v) and nan_value is not None:
            return nan_value
        return table.get(v, default)

    flat = [look(v) for v in x.reshape(-1).tolist()]
    return [np.array(flat, dtype=dtype).reshape(x.shape)]


def _label_encoder_infer(node: Node, a: dict[str, Any]) -> list[TensorMeta]:
    try:
        dt = _values_dtype(a)
    except ValueError as exc:
        raise shape_error(node, str(exc)) from None
    return [out(dt, shape_in(node, 0))]


_KEYS = {f"{p}_{s}": (A.tensor() if s == "tensor" else A.ints() if s == "int64s" else
                      A.strings() if s == "strings" else A.floats())
         for p in ("keys", "values") for s in ("int64s", "strings", "floats", "tensor")}
register(OpSchema(ML + "LabelEncoder", 1, 1, _label_encoder_infer, _label_encoder, attrs={
    **_KEYS, "default_float": A.f(-0.0), "default_int64": A.i(-1),
    "default_string": A.s("_Unused"), "default_tensor": A.tensor()}))


def _extract(ins: list[Any], a: dict[str, Any]) -> list[np.ndarray]:
    x, idx = np.asarray(ins[0]), np.asarray(ins[1]).reshape(-1)
    res = x[..., idx.tolist()]
    return [res.reshape((1, len(idx)) if x.ndim == 1 else x.shape[:-1] + (len(idx),))]


def _extract_infer(node: Node, a: dict[str, Any]) -> list[TensorMeta]:
    m = meta_in(node, 0)
    idx = shape_in(node, 1)
    n = idx[-1] if idx and len(idx) == 1 else sym(node, "n")
    if m.shape is None:
        return [out(m.dtype, None)]
    return [out(m.dtype, (1, n) if len(m.shape) == 1 else m.shape[:-1] + (n,))]


register(OpSchema(ML + "ArrayFeatureExtractor", 2, 2, _extract_infer, _extract))
register(OpSchema(ML + "Binarizer", 1, 1,
                  lambda node, a: [out(meta_in(node, 0).dtype, shape_in(node, 0))],
                  lambda ins, a: [(ins[0] > a["threshold"]).astype(ins[0].dtype)],
                  attrs={"threshold": A.f(0.0)}))
