"""Helpers for numpy kernels: numpy dtypes for every DType, widening, optional inputs."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ..dtypes import DType, from_onnx


def np_dtype(dt: DType) -> np.dtype:
    if dt is DType.BFLOAT16:
        import ml_dtypes  # shipped with onnx; numpy itself has no bfloat16

        return np.dtype(ml_dtypes.bfloat16)
    return dt.numpy


def onnx_dtype(code: int) -> DType:
    return from_onnx(int(code))


def onnx_np_dtype(code: int) -> np.dtype:
    return np_dtype(from_onnx(int(code)))


def is_bfloat16(dtype: np.dtype) -> bool:
    return np.dtype(dtype).name == "bfloat16"


def widen(x: np.ndarray) -> np.ndarray:
    """float16/bfloat16 arrays as float32, for math numpy cannot do in the small type."""
    if x.dtype == np.float16 or is_bfloat16(x.dtype):
        return x.astype(np.float32)
    return x


def opt(ins: Sequence[Any], i: int, nonempty: bool = False) -> Any:
    """Input i of a kernel, or None when omitted (or empty, when `nonempty`)."""
    if i >= len(ins) or ins[i] is None:
        return None
    if nonempty and np.size(ins[i]) == 0:
        return None
    return ins[i]
