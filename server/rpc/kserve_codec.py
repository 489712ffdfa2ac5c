"""KServe v2 tensors <-> numpy: datatype names, typed contents and raw bytes.

Inputs come either as `raw_input_contents` (one little-endian, row-major byte string per
input, in the order of `inputs`; what tritonclient sends) or as typed `contents`. Outputs
always go out as `raw_output_contents`, in the order of `outputs`. Every size is checked
against the declared shape before anything is allocated.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from graphengine.engine.bounds import element_count
from graphengine.engine.dtypes import DType
from graphengine.engine.errors import InvalidInput
from graphengine.kserve.v2 import grpc_service_pb2 as pb

from ..core.triton_config import DATA_TYPES as CONFIG_DATA_TYPES

DATATYPES: dict[str, DType] = {
    "BOOL": DType.BOOL, "UINT8": DType.UINT8, "UINT16": DType.UINT16, "UINT32": DType.UINT32,
    "UINT64": DType.UINT64, "INT8": DType.INT8, "INT16": DType.INT16, "INT32": DType.INT32,
    "INT64": DType.INT64, "FP16": DType.FLOAT16, "FP32": DType.FLOAT32, "FP64": DType.FLOAT64,
    "BF16": DType.BFLOAT16, "BYTES": DType.STRING,
}
NAMES: dict[DType, str] = {v: k for k, v in DATATYPES.items()}
CONFIG_TYPES: dict[DType, int] = {v: k for k, v in CONFIG_DATA_TYPES.items()}
# Which typed-contents field carries each datatype (FP16 and BF16 travel raw only).
_CONTENTS_FIELD = {
    DType.BOOL: "bool_contents", DType.INT8: "int_contents", DType.INT16: "int_contents",
    DType.INT32: "int_contents", DType.INT64: "int64_contents", DType.UINT8: "uint_contents",
    DType.UINT16: "uint_contents", DType.UINT32: "uint_contents",
    DType.UINT64: "uint64_contents", DType.FLOAT32: "fp32_contents",
    DType.FLOAT64: "fp64_contents",
}


def datatype_name(dtype: DType) -> str:
    return NAMES.get(dtype, dtype.value.upper())


def dims(shape: Sequence[int | str] | None) -> list[int]:
    """A shape for metadata: symbolic dimensions become -1."""
    return [-1 if isinstance(d, str) else int(d) for d in shape or ()]


def _dtype(name: str, tensor: str) -> DType:
    dtype = DATATYPES.get(name)
    if dtype is None:
        raise InvalidInput(f"input '{tensor}': unknown datatype '{name}'; valid datatypes are "
                           f"{', '.join(DATATYPES)}", tensor=tensor)
    if dtype is DType.STRING:
        raise InvalidInput(f"input '{tensor}': BYTES tensors are not supported by GraphEngine "
                           f"models", tensor=tensor)
    return dtype


def decode_inputs(request: pb.ModelInferRequest, max_elements: int | None = None,
                  raw: Sequence[bytes | memoryview] | None = None) -> dict[str, np.ndarray]:
    """The request's input arrays; `raw` replaces `request.raw_input_contents` (the HTTP
    front end's binary parts, which are not copied into the message)."""
    raw = request.raw_input_contents if raw is None else raw
    if raw and len(raw) != len(request.inputs):
        raise InvalidInput(f"raw_input_contents has {len(raw)} entries for "
                           f"{len(request.inputs)} inputs; it needs one per input, in order")
    arrays: dict[str, np.ndarray] = {}
    for i, t in enumerate(request.inputs):
        if not t.name:
            raise InvalidInput(f"input {i} has no name")
        if t.name in arrays:
            raise InvalidInput(f"input '{t.name}' is given twice", tensor=t.name)
        dtype = _dtype(t.datatype, t.name)
        shape = tuple(int(d) for d in t.shape)
        if raw:
            if t.HasField("contents"):
                raise InvalidInput(f"input '{t.name}' sets contents while the request uses "
                                   f"raw_input_contents", tensor=t.name)
            arrays[t.name] = _from_raw(t.name, dtype, shape, raw[i], max_elements)
        else:
            arrays[t.name] = _from_contents(t, dtype, shape, max_elements)
    return arrays


def _from_raw(name: str, dtype: DType, shape: tuple[int, ...], data: bytes,
              max_elements: int | None) -> np.ndarray:
    # The shape is checked against the bytes that came before anything is allocated.
    element_count(f"input '{name}' ({datatype_name(dtype)} in raw_input_contents)", shape,
                  limit=max_elements, present=len(data), unit=dtype.itemsize, tensor=name)
    return np.frombuffer(data, dtype=dtype.numpy.newbyteorder("<")).reshape(shape).astype(
        dtype.numpy, copy=False)


def _from_contents(t: pb.ModelInferRequest.InferInputTensor, dtype: DType,
                   shape: tuple[int, ...], max_elements: int | None) -> np.ndarray:
    field = _CONTENTS_FIELD.get(dtype)
    if field is None:
        raise InvalidInput(f"input '{t.name}': {datatype_name(dtype)} data must be sent in "
                           f"raw_input_contents", tensor=t.name)
    values = getattr(t.contents, field)
    element_count(f"input '{t.name}' (contents.{field})", shape, limit=max_elements,
                  present=len(values), tensor=t.name)
    try:
        return np.array(values, dtype=dtype.numpy).reshape(shape)
    except OverflowError:
        raise InvalidInput(f"input '{t.name}': a value in contents.{field} does not fit "
                           f"{datatype_name(dtype)}", tensor=t.name) from None


def encode_outputs(response: pb.ModelInferResponse, outputs: Mapping[str, np.ndarray],
                   names: Sequence[str]) -> None:
    """Append `names` of `outputs`, in that order, as raw little-endian contents."""
    for name in names:
        array, dtype = output_tensor(outputs, name)
        response.outputs.add(name=name, datatype=datatype_name(dtype), shape=array.shape)
        response.raw_output_contents.append(little_endian(array).tobytes())


def output_tensor(outputs: Mapping[str, np.ndarray], name: str) -> tuple[np.ndarray, DType]:
    """Output `name` and its element type; a string tensor is not sent over KServe."""
    array = np.asarray(outputs[name])
    dtype = DType.from_numpy(array.dtype)
    if dtype is DType.STRING:
        raise InvalidInput(f"output '{name}' is a string tensor, which GraphEngine does not "
                           f"send over KServe", tensor=name)
    return array, dtype


def little_endian(array: np.ndarray) -> np.ndarray:
    """`array` as the wire has it: C-contiguous and little-endian (a copy only if needed)."""
    return np.ascontiguousarray(array, dtype=array.dtype.newbyteorder("<"))
