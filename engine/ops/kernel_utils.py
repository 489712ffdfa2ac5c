"""Helpers for numpy kernels: numpy dtypes for every DType, widening, optional inputs,
and conversions into the low-precision types numpy lacks (float8, float4, int4, int2)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ..dtypes import ML_DTYPES, DType, from_onnx


def np_dtype(dt: DType) -> np.dtype:
    return dt.numpy


def onnx_dtype(code: int) -> DType:
    return from_onnx(int(code))


def onnx_np_dtype(code: int) -> np.dtype:
    return np_dtype(from_onnx(int(code)))


def is_bfloat16(dtype: np.dtype) -> bool:
    return np.dtype(dtype).name == "bfloat16"


def is_ml_dtype(dtype: np.dtype) -> bool:
    """bfloat16, float8, float4, int4, int2: the ml_dtypes types (numpy kind 'V')."""
    try:
        return DType.from_numpy(dtype) in ML_DTYPES
    except TypeError:
        return False


def widen(x: np.ndarray) -> np.ndarray:
    """float16/bfloat16 arrays as float32, for math numpy cannot do in the small type."""
    dt = x.dtype
    # itemsize first: comparing a dtype with np.float16 builds a dtype (~2 us a call, and
    # every host Add or Mul widened both operands)
    if dt.itemsize == 2 and (dt.kind == "f" or is_bfloat16(dt)):
        return x.astype(np.float32)
    return x


def ints(x: Any) -> list[int]:
    """An int tensor input (axes, a shape, pads, sizes) as Python ints, read the way shape
    inference reads it (`const_ints`: flattened), so a 0-d tensor is one entry here as there
    instead of a TypeError the run turned into INTERNAL (found by the fuzz harness)."""
    return [int(v) for v in np.asarray(x).reshape(-1)]


def opt(ins: Sequence[Any], i: int, nonempty: bool = False) -> Any:
    """Input i of a kernel, or None when omitted (or empty, when `nonempty`)."""
    if i >= len(ins) or ins[i] is None:
        return None
    if nonempty and np.size(ins[i]) == 0:
        return None
    return ins[i]


# ---- conversions into low-precision types -------------------------------------------------
_FLOAT8 = frozenset({"float8_e4m3fn", "float8_e4m3fnuz", "float8_e5m2", "float8_e5m2fnuz"})
_SUB_BYTE_INTS = frozenset({"int4", "uint4", "int2", "uint2"})


def to_low_precision(x: np.ndarray, dt: np.dtype, saturate: bool = True,
                     round_mode: str = "up") -> np.ndarray:
    """Convert to an ml_dtypes type with ONNX Cast semantics (round to nearest even).

    float8: with `saturate`, finite values and infinities beyond the range clamp to the
    largest finite value; without, they become NaN (or inf where the type has it).
    float8e8m0 rounds powers of two per `round_mode`. float4 and the sub-byte integers
    follow ml_dtypes' conversion, which is what the ONNX reference produces.
    """
    name = dt.name
    if name == "float8_e8m0fnu":
        return _to_e8m0(x, saturate, round_mode)
    if name in _FLOAT8 and saturate and x.dtype.kind == "f":
        import ml_dtypes

        limit = float(ml_dtypes.finfo(dt).max)
        x = np.where(np.isnan(x), x, np.clip(x.astype(np.float64), -limit, limit))
    return x.astype(dt)


def _to_e8m0(x: np.ndarray, saturate: bool, round_mode: str) -> np.ndarray:
    """float8e8m0 holds only 2**(e-127), e in 0..254 (255 is NaN); the sign is dropped.

    The exponent field is rounded on the float32 bits, as CUDA and the ONNX reference do
    (so zero and subnormals land on e = 0 or 1). Beyond the range, and for inf, `saturate`
    gives the largest value (the Cast spec's table), else NaN.
    """
    bits = np.abs(np.asarray(x, dtype=np.float32)).view(np.uint32)
    exp = ((bits >> 23) & 0xFF).astype(np.int32)
    man = bits & 0x7FFFFF
    nan = (exp == 0xFF) & (man != 0)
    inf = (exp == 0xFF) & (man == 0)
    half = 0x400000  # the mantissa of 1.5: the midpoint between two powers of two
    if round_mode == "up":
        e = exp + (man != 0)
    elif round_mode == "down":
        e = exp
    elif round_mode == "nearest":  # ties away from zero, except on the subnormal boundary
        e = exp + ((man > half) | ((man == half) & (exp != 0)))
    else:
        raise ValueError(f"unknown round_mode '{round_mode}'")
    e = np.where((e > 254) | inf, 254 if saturate else 255, e)
    e = np.where(nan, 255, e)
    import ml_dtypes

    return e.astype(np.uint8).view(ml_dtypes.float8_e8m0fnu).reshape(np.shape(x))


def saturate_int(y: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """Round-tripped integers clamped into `dtype`'s range (sub-byte types included)."""
    if dtype.name in _SUB_BYTE_INTS:
        import ml_dtypes

        info = ml_dtypes.iinfo(dtype)
    else:
        info = np.iinfo(dtype)
    return np.clip(y, int(info.min), int(info.max)).astype(dtype)


def exact_int32(y: np.ndarray) -> np.ndarray:
    """Integer-valued float64 sums (8-bit products, exact below 2^53) as int32, wrapping as
    an int32 accumulator would."""
    return y.astype(np.int64).astype(np.int32)
