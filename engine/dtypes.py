"""Element types: one Enum shared by the IR, the wire format and the runtime."""

from __future__ import annotations

import enum
import functools

import numpy as np


class DType(enum.Enum):
    FLOAT32 = "float32"
    FLOAT16 = "float16"
    FLOAT64 = "float64"
    BFLOAT16 = "bfloat16"
    INT8 = "int8"
    INT16 = "int16"
    INT32 = "int32"
    INT64 = "int64"
    UINT8 = "uint8"
    UINT16 = "uint16"
    UINT32 = "uint32"
    UINT64 = "uint64"
    BOOL = "bool"
    STRING = "string"
    # Low-precision types (ONNX 1.14+). numpy has none of them; ml_dtypes (shipped with
    # onnx) provides them, one element per byte in memory. Values are ml_dtypes' names.
    FLOAT8E4M3FN = "float8_e4m3fn"
    FLOAT8E4M3FNUZ = "float8_e4m3fnuz"
    FLOAT8E5M2 = "float8_e5m2"
    FLOAT8E5M2FNUZ = "float8_e5m2fnuz"
    FLOAT8E8M0 = "float8_e8m0fnu"
    FLOAT4E2M1 = "float4_e2m1fn"
    INT4 = "int4"
    UINT4 = "uint4"
    INT2 = "int2"
    UINT2 = "uint2"

    # Members are compared by identity (Enum defines no __eq__), so they may hash by it:
    # Enum's own __hash__ is a Python call hashing the name, and dtype sets and dicts are
    # asked about every value of every pass (~120 k times over 16 models' compiles).
    __hash__ = object.__hash__

    # numpy, itemsize and is_float: asked of nearly every value by nearly every pass; a
    # member never changes, so each is worked out once (np.dtype of a name is a parse).
    @functools.cached_property
    def numpy(self) -> np.dtype:
        if self is DType.STRING:
            return np.dtype(object)
        if self in ML_DTYPES:
            import ml_dtypes

            return np.dtype(getattr(ml_dtypes, self.value))
        return np.dtype(self.value)

    @functools.cached_property
    def itemsize(self) -> int:
        """Bytes per element in memory (the sub-byte types take one byte each)."""
        return self.numpy.itemsize

    @functools.cached_property
    def is_float(self) -> bool:
        return self in (DType.FLOAT32, DType.FLOAT16, DType.FLOAT64, DType.BFLOAT16) or \
            self in LOW_PRECISION_FLOATS

    @classmethod
    def from_numpy(cls, dtype) -> DType:
        dt = np.dtype(dtype)
        known = _FROM_NUMPY.get(dt)
        if known is not None:  # numpy's dtype.name is slow, and every value's type asks
            return known
        if dt == np.dtype(object) or dt.kind in "US":
            return cls.STRING
        try:
            found = cls(dt.name)
        except ValueError:
            raise TypeError(f"unsupported numpy dtype {dt}") from None
        if len(_FROM_NUMPY) < 256:  # a dtype is hashable by value; a few dozen exist
            _FROM_NUMPY[dt] = found
        return found


_FROM_NUMPY: dict[np.dtype, DType] = {}


LOW_PRECISION_FLOATS = frozenset({
    DType.FLOAT8E4M3FN, DType.FLOAT8E4M3FNUZ, DType.FLOAT8E5M2, DType.FLOAT8E5M2FNUZ,
    DType.FLOAT8E8M0, DType.FLOAT4E2M1})
SUB_BYTE_INTS = frozenset({DType.INT4, DType.UINT4, DType.INT2, DType.UINT2})
ML_DTYPES = LOW_PRECISION_FLOATS | SUB_BYTE_INTS | {DType.BFLOAT16}

# ONNX TensorProto.DataType numbers (a fact of the ONNX format).
_ONNX = {
    1: DType.FLOAT32, 2: DType.UINT8, 3: DType.INT8, 4: DType.UINT16, 5: DType.INT16,
    6: DType.INT32, 7: DType.INT64, 8: DType.STRING, 9: DType.BOOL, 10: DType.FLOAT16,
    11: DType.FLOAT64, 12: DType.UINT32, 13: DType.UINT64, 16: DType.BFLOAT16,
    17: DType.FLOAT8E4M3FN, 18: DType.FLOAT8E4M3FNUZ, 19: DType.FLOAT8E5M2,
    20: DType.FLOAT8E5M2FNUZ, 21: DType.UINT4, 22: DType.INT4, 23: DType.FLOAT4E2M1,
    24: DType.FLOAT8E8M0, 25: DType.UINT2, 26: DType.INT2,
}
_ONNX_INV = {v: k for k, v in _ONNX.items()}


def from_onnx(code: int) -> DType:
    try:
        return _ONNX[code]
    except KeyError:
        raise TypeError(f"unsupported ONNX element type {code}") from None


def to_onnx(dtype: DType) -> int:
    return _ONNX_INV[dtype]
