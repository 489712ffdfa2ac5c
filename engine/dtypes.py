"""Element types: one Enum shared by the IR, the wire format and the runtime."""

from __future__ import annotations

import enum

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

    @property
    def numpy(self) -> np.dtype:
        if self is DType.STRING:
            return np.dtype(object)
        if self is DType.BFLOAT16:
            import ml_dtypes  # shipped with onnx; numpy itself has no bfloat16

            return np.dtype(ml_dtypes.bfloat16)
        return np.dtype(self.value)

    @property
    def itemsize(self) -> int:
        if self is DType.BFLOAT16:
            return 2
        return self.numpy.itemsize

    @property
    def is_float(self) -> bool:
        return self in (DType.FLOAT32, DType.FLOAT16, DType.FLOAT64, DType.BFLOAT16)

    @classmethod
    def from_numpy(cls, dtype) -> DType:
        dt = np.dtype(dtype)
        if dt == np.dtype(object) or dt.kind in "US":
            return cls.STRING
        if dt.name == "bfloat16":
            return cls.BFLOAT16
        try:
            return cls(dt.name)
        except ValueError:
            raise TypeError(f"unsupported numpy dtype {dt}") from None


# ONNX TensorProto.DataType numbers (a fact of the ONNX format).
_ONNX = {
    1: DType.FLOAT32, 2: DType.UINT8, 3: DType.INT8, 4: DType.UINT16, 5: DType.INT16,
    6: DType.INT32, 7: DType.INT64, 8: DType.STRING, 9: DType.BOOL, 10: DType.FLOAT16,
    11: DType.FLOAT64, 12: DType.UINT32, 13: DType.UINT64, 16: DType.BFLOAT16,
}
_ONNX_INV = {v: k for k, v in _ONNX.items()}


def from_onnx(code: int) -> DType:
    try:
        return _ONNX[code]
    except KeyError:
        raise TypeError(f"unsupported ONNX element type {code}") from None


def to_onnx(dtype: DType) -> int:
    return _ONNX_INV[dtype]
