"""Conversions between numpy / IR types and the wire contract in proto/graphengine/v1."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from graphengine.v1 import graph_pb2 as pb

from .bounds import element_count
from .dtypes import DType
from .errors import InvalidInput
from .ir import Dim, TensorMeta

_TO_PB = {
    DType.FLOAT32: pb.DT_FLOAT32, DType.FLOAT16: pb.DT_FLOAT16, DType.FLOAT64: pb.DT_FLOAT64,
    DType.INT8: pb.DT_INT8, DType.INT16: pb.DT_INT16, DType.INT32: pb.DT_INT32,
    DType.INT64: pb.DT_INT64, DType.UINT8: pb.DT_UINT8, DType.BOOL: pb.DT_BOOL,
    DType.UINT16: pb.DT_UINT16, DType.UINT32: pb.DT_UINT32, DType.UINT64: pb.DT_UINT64,
    DType.BFLOAT16: pb.DT_BFLOAT16, DType.STRING: pb.DT_STRING,
}
_FROM_PB = {v: k for k, v in _TO_PB.items()}
WIRE_DTYPES = frozenset(_TO_PB)  # the dtypes the wire contract has a code for


def dtype_to_pb(dtype: DType, what: str = "tensor") -> int:
    try:
        return _TO_PB[dtype]
    except KeyError:
        raise InvalidInput(f"{what}: dtype {dtype.value} has no code on the wire") from None


def dtype_from_pb(code: int, what: str = "tensor") -> DType:
    try:
        return _FROM_PB[code]
    except KeyError:
        raise InvalidInput(f"{what}: unknown or undefined dtype code {code}") from None


def shape_to_pb(shape: Sequence[Dim] | None) -> list[pb.Dim]:
    if shape is None:
        return []
    return [pb.Dim(symbol=d) if isinstance(d, str) else pb.Dim(size=int(d)) for d in shape]


def shape_from_pb(dims: Sequence[pb.Dim]) -> tuple[Dim, ...]:
    return tuple(d.symbol if d.WhichOneof("value") == "symbol" else int(d.size) for d in dims)


def desc_to_pb(name: str, meta: TensorMeta | None) -> pb.TensorDesc:
    if meta is None:
        return pb.TensorDesc(name=name)
    # A description still says what it can of a dtype the wire has no code for.
    return pb.TensorDesc(name=name, dtype=_TO_PB.get(meta.dtype, pb.DT_UNDEFINED),
                         shape=shape_to_pb(meta.shape),
                         unknown_rank=meta.shape is None)


def tensor_to_pb(name: str, array: np.ndarray) -> pb.Tensor:
    array = np.asarray(array)
    dtype = DType.from_numpy(array.dtype)
    if dtype is DType.STRING:
        raise InvalidInput(f"tensor '{name}': string tensors are not supported on the wire")
    data = np.ascontiguousarray(array, dtype=array.dtype.newbyteorder("<")).tobytes()
    return pb.Tensor(name=name, dtype=dtype_to_pb(dtype, f"tensor '{name}'"),
                     shape=list(array.shape), data=data)


def tensor_from_pb(t: pb.Tensor, max_elements: int | None = None) -> np.ndarray:
    """Decode a wire tensor; every size is checked before any allocation."""
    what = f"tensor '{t.name}'"
    dtype = dtype_from_pb(t.dtype, what)
    if dtype in (DType.STRING, DType.BFLOAT16):
        raise InvalidInput(f"{what}: dtype {dtype.value} is not supported on the wire",
                           tensor=t.name)
    shape = tuple(int(d) for d in t.shape)
    element_count(f"{what} ({dtype.value})", shape, limit=max_elements, present=len(t.data),
                  unit=dtype.itemsize, tensor=t.name)
    arr = np.frombuffer(t.data, dtype=dtype.numpy.newbyteorder("<")).reshape(shape)
    return arr.astype(dtype.numpy, copy=False)
