"""KServe v2 tensors <-> numpy: raw and typed contents, every check before allocation."""

from __future__ import annotations

import numpy as np
import pytest

from graphengine.engine.dtypes import DType
from graphengine.engine.errors import InvalidInput, ResourceExhausted
from graphengine.kserve.v2 import grpc_service_pb2 as pb
from graphengine.server.rpc import kserve_codec as codec


def _raw_request(**arrays: np.ndarray) -> pb.ModelInferRequest:
    request = pb.ModelInferRequest(model_name="m")
    for name, a in arrays.items():
        request.inputs.add(name=name, datatype=codec.datatype_name(DType.from_numpy(a.dtype)),
                           shape=a.shape)
        request.raw_input_contents.append(a.astype(a.dtype.newbyteorder("<")).tobytes())
    return request


@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.float64, np.int8, np.int16,
                                   np.int32, np.int64, np.uint8, np.uint16, np.uint32,
                                   np.uint64, np.bool_])
def test_raw_round_trip_for_every_dtype(dtype) -> None:
    a = (np.arange(12) % 3).astype(dtype).reshape(3, 4)
    decoded = codec.decode_inputs(_raw_request(a=a))
    assert decoded["a"].dtype == a.dtype and (decoded["a"] == a).all()
    response = pb.ModelInferResponse()
    codec.encode_outputs(response, {"out": a, "skip": a}, ["out"])
    assert [o.name for o in response.outputs] == ["out"]
    assert list(response.outputs[0].shape) == [3, 4]
    assert response.raw_output_contents[0] == a.tobytes()


def test_typed_contents() -> None:
    request = pb.ModelInferRequest()
    t = request.inputs.add(name="f", datatype="FP32", shape=[2, 2])
    t.contents.fp32_contents.extend([1, 2, 3, 4])
    t = request.inputs.add(name="i", datatype="INT8", shape=[3])
    t.contents.int_contents.extend([-1, 0, 1])
    decoded = codec.decode_inputs(request)
    assert decoded["f"].tolist() == [[1, 2], [3, 4]] and decoded["f"].dtype == np.float32
    assert decoded["i"].dtype == np.int8 and decoded["i"].tolist() == [-1, 0, 1]


def _fails(request: pb.ModelInferRequest, match: str, max_elements: int | None = None) -> None:
    with pytest.raises(InvalidInput, match=match):
        codec.decode_inputs(request, max_elements)


def test_bad_inputs_name_the_problem() -> None:
    a = np.ones((2, 2), np.float32)
    request = _raw_request(x=a)
    request.inputs[0].datatype = "FLOAT"
    _fails(request, "unknown datatype 'FLOAT'")
    request = _raw_request(x=a)
    request.inputs[0].datatype = "BYTES"
    _fails(request, "BYTES")
    request = _raw_request(x=a)
    del request.inputs[0].shape[:]
    request.inputs[0].shape.extend([-2, 2])
    _fails(request, "negative")
    request = _raw_request(x=a)
    del request.inputs[0].shape[:]
    request.inputs[0].shape.extend([1 << 40, 1 << 40])
    _fails(request, "bound of", max_elements=1000)  # beyond any configuration
    request = _raw_request(x=a)
    del request.inputs[0].shape[:]
    request.inputs[0].shape.extend([1 << 20, 1 << 10])
    _fails(request, "needs")  # the bytes do not match: malformed whatever the limit
    with pytest.raises(ResourceExhausted, match="at most 3 per tensor"):
        codec.decode_inputs(_raw_request(x=a), 3)  # well-formed but over the server's limit
    request = _raw_request(x=a, y=a)
    del request.raw_input_contents[1]
    _fails(request, "2 inputs")
    request = _raw_request(x=a)
    request.inputs.add(name="x", datatype="FP32", shape=[1])
    request.raw_input_contents.append(b"\0" * 4)
    _fails(request, "twice")
    request = pb.ModelInferRequest()
    t = request.inputs.add(name="h", datatype="FP16", shape=[1])
    _fails(request, "raw_input_contents")
    t.datatype = "FP32"
    t.contents.fp32_contents.extend([1, 2])
    _fails(request, "needs 1 values")
    request = pb.ModelInferRequest()
    request.inputs.add(name="", datatype="FP32", shape=[1])
    _fails(request, "no name")


def test_metadata_dims() -> None:
    assert codec.dims(("batch", 3, 224)) == [-1, 3, 224]
    assert codec.dims(None) == []
    assert codec.datatype_name(DType.BFLOAT16) == "BF16"
