"""The HTTP infer body (JSON and Triton's binary tensor extension) and protos as JSON:
what is decoded, and every size and type checked before it is used."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest

from graphengine.engine.errors import InvalidInput, ResourceExhausted
from graphengine.kserve.v2 import grpc_service_pb2 as pb
from graphengine.kserve.v2 import model_config_pb2 as mc
from graphengine.server.rest import tensors
from graphengine.server.rpc import kserve_codec


def _body(doc: dict, *blobs: bytes) -> tuple[memoryview, str | None]:
    header = json.dumps(doc).encode()
    if not blobs:
        return memoryview(header), None
    return memoryview(header + b"".join(blobs)), str(len(header))


def _decode(doc: dict, *blobs: bytes, max_elements: int | None = None) -> dict:
    body, length = _body(doc, *blobs)
    call = tensors.parse_infer("m", "", body, length)
    return kserve_codec.decode_inputs(call.request, max_elements, call.raw)


def test_binary_inputs_are_views_of_the_body_in_order() -> None:
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    b = np.array([7, -8], np.int64)
    doc = {"id": "r1", "inputs": [
        {"name": "a", "shape": [2, 3], "datatype": "FP32",
         "parameters": {"binary_data_size": a.nbytes}},
        {"name": "b", "shape": [2], "datatype": "INT64",
         "parameters": {"binary_data_size": b.nbytes}}],
        "outputs": [{"name": "y", "parameters": {"binary_data": True}}, {"name": "z"}]}
    body, length = _body(doc, a.tobytes(), b.tobytes())
    call = tensors.parse_infer("m", "1", body, length)
    assert (call.request.model_name, call.request.model_version, call.request.id) == (
        "m", "1", "r1")
    assert all(isinstance(r, memoryview) for r in call.raw)  # not copied
    assert [o.name for o in call.request.outputs] == ["y", "z"]
    assert call.binary_outputs == {"y"} and not call.binary_default
    arrays = kserve_codec.decode_inputs(call.request, None, call.raw)
    np.testing.assert_array_equal(arrays["a"], a)
    np.testing.assert_array_equal(arrays["b"], b)


def test_json_data_flat_or_nested_of_each_kind() -> None:
    arrays = _decode({"inputs": [
        {"name": "f", "shape": [2, 2], "datatype": "FP32", "data": [[1, 2.5], [3, -4]]},
        {"name": "h", "shape": [3], "datatype": "FP16", "data": [0.5, 1, -2]},
        {"name": "i", "shape": [1, 3], "datatype": "INT8", "data": [-128, 0, 127]},
        {"name": "u", "shape": [2], "datatype": "UINT64", "data": [0, 2**64 - 1]},
        {"name": "b", "shape": [2], "datatype": "BOOL", "data": [True, False]},
        {"name": "e", "shape": [0, 4], "datatype": "FP64", "data": []}]})
    np.testing.assert_array_equal(arrays["f"], np.array([[1, 2.5], [3, -4]], np.float32))
    assert arrays["h"].dtype == np.float16 and arrays["h"].tolist() == [0.5, 1.0, -2.0]
    assert arrays["i"].dtype == np.int8 and arrays["i"].tolist() == [[-128, 0, 127]]
    assert arrays["u"].dtype == np.uint64 and int(arrays["u"][1]) == 2**64 - 1
    assert arrays["b"].dtype == np.bool_ and arrays["b"].tolist() == [True, False]
    assert arrays["e"].shape == (0, 4)


A4 = {"name": "a", "shape": [4], "datatype": "FP32",
      "parameters": {"binary_data_size": 16}}


@pytest.mark.parametrize("doc, blobs, header, message", [
    ({"inputs": [A4]}, [b"\0" * 16], "0", "between 1 and the body's"),
    ({"inputs": [A4]}, [b"\0" * 16], "99999", "Inference-Header-Content-Length is 99999 but "
                                               "the body has"),
    ({"inputs": [A4]}, [b"\0" * 16], "12a", "'12a' is not a byte count"),
    ({"inputs": [A4]}, [b"\0" * 16], "-5", "'-5' is not a byte count"),
    ({"inputs": [A4]}, [b"\0" * 12], None, "input 'a': binary_data_size 16 but only 12 bytes"),
    ({"inputs": [A4]}, [b"\0" * 20], None, "20 bytes of binary data after the JSON part, the "
                                           "inputs' binary_data_size add up to 16"),
    ({"inputs": [{**A4, "parameters": {"binary_data_size": -1}}]}, [b""], None,
     "binary_data_size -1 is negative"),
    ({"inputs": [{**A4, "parameters": {"binary_data_size": "16"}}]}, [b"\0" * 16], None,
     "'binary_data_size' must be an integer, got a string"),
    ({"inputs": [{**A4, "parameters": {"binary_data_size": True}}]}, [b"\0"], None,
     "'binary_data_size' must be an integer, got a boolean"),
    ({"inputs": [{**A4, "data": [1, 2, 3, 4]}]}, [b"\0" * 16], None,
     "has both binary_data_size and 'data'"),
])
def test_binary_sizes_are_checked_against_the_body(doc, blobs, header, message) -> None:
    body, length = _body(doc, *blobs)
    with pytest.raises(InvalidInput, match=re.escape(message)):
        tensors.parse_infer("m", "", body, header if header is not None else length)


@pytest.mark.parametrize("doc, message", [
    ({"inputs": [{"name": "a", "shape": [2, 2], "datatype": "FP32", "data": [1, 2, 3]}]},
     "input 'a': shape [2, 2] needs 4 values, 'data' has 3"),
    ({"inputs": [{"name": "a", "shape": [2], "datatype": "FP32", "data": [1, "2"]}]},
     "FP32 data must be numbers, got \"2\""),
    ({"inputs": [{"name": "a", "shape": [2], "datatype": "INT32", "data": [1, 2.5]}]},
     "INT32 data must be integers, got 2.5"),
    ({"inputs": [{"name": "a", "shape": [1], "datatype": "INT32", "data": [True]}]},
     "INT32 data must be integers, got true"),
    ({"inputs": [{"name": "a", "shape": [1], "datatype": "BOOL", "data": [1]}]},
     "BOOL data must be true or false, got 1"),
    ({"inputs": [{"name": "a", "shape": [1], "datatype": "UINT8", "data": [256]}]},
     "a value in 'data' does not fit UINT8"),
    ({"inputs": [{"name": "a", "shape": [1], "datatype": "INT8", "data": [[[-1]]]}]},
     ""),  # nested deeper than the shape, but the values count: accepted, as Triton does
    ({"inputs": [{"name": "a", "shape": [1], "datatype": "BF16", "data": [1.0]}]},
     "BF16 data must be sent as binary data"),
    ({"inputs": [{"name": "a", "shape": [1], "datatype": "FP8", "data": [1.0]}]},
     "unknown datatype 'FP8'"),
    ({"inputs": [{"name": "a", "shape": [1.5], "datatype": "FP32", "data": [1.0]}]},
     "shape [1.5] must be non-negative integers"),
    ({"inputs": [{"name": "a", "shape": [-1], "datatype": "FP32", "data": []}]},
     "must be non-negative integers"),
    ({"inputs": [{"name": "a", "shape": [1] * 33, "datatype": "FP32", "data": [1]}]},
     "rank 33 exceeds the bound of 32"),
    ({"inputs": [{"name": "a", "shape": [1], "datatype": "FP32", "data": 1}]},
     "'data' must be a JSON array, got a number"),
    ({"inputs": [{"name": "a", "shape": [1], "datatype": "FP32"}]},
     "has neither 'data' nor a binary_data_size parameter"),
    ({"inputs": [{"shape": [1], "datatype": "FP32", "data": [1]}]}, "input 0 has no name"),
    ({"inputs": [{"name": "a", "datatype": "FP32", "data": [1]}]}, "input 'a' has no 'shape'"),
    ({"inputs": [{"name": "a", "shape": [1], "datatype": "FP32", "data": [1],
                  "parameters": {"shared_memory_region": "r"}}]}, "shared memory"),
    ({"inputs": "x"}, "'inputs' must be an array, got a string"),
    ({"outputs": []}, "has no 'inputs'"),
    ({"inputs": [], "outputs": [{"name": "y", "parameters": {"binary_data": 1}}]},
     "'binary_data' must be a boolean, got a number"),
    ({"inputs": [], "outputs": [{"parameters": {}}]}, "output 0 has no name"),
    ({"inputs": [], "parameters": {"binary_data_output": "yes"}},
     "'binary_data_output' must be a boolean"),
])
def test_json_tensors_are_checked_naming_the_input(doc, message) -> None:
    if not message:
        assert _decode(doc)["a"].tolist() == [-1]
        return
    with pytest.raises(InvalidInput, match=re.escape(message)):
        _decode(doc)


def test_malformed_json_says_where() -> None:
    with pytest.raises(InvalidInput, match="not valid JSON: Expecting .* line 1 column"):
        tensors.parse_infer("m", "", memoryview(b'{"inputs": [}'), None)
    with pytest.raises(InvalidInput, match="must be a JSON object, got an array"):
        tensors.parse_infer("m", "", memoryview(b"[1, 2]"), None)
    with pytest.raises(InvalidInput, match="not UTF-8"):
        tensors.parse_infer("m", "", memoryview(b'{"id": "\xff"}'), None)
    with pytest.raises(InvalidInput, match="too deeply"):
        tensors.parse_infer("m", "", memoryview(b"[" * 100000 + b"]" * 100000), None)


def test_the_json_part_has_a_bound_of_its_own(monkeypatch) -> None:
    binary = {"inputs": [{"name": "a", "shape": [1024], "datatype": "FP32",
                          "parameters": {"binary_data_size": 4096}}]}
    bound = len(json.dumps(binary))
    monkeypatch.setattr(tensors, "MAX_JSON_BYTES", bound)
    assert _decode(binary, b"\0" * 4096)["a"].shape == (1024,)  # binary data: not JSON
    doc = {"inputs": [{"name": "a", "shape": [64], "datatype": "FP32", "data": [0.5] * 64}]}
    with pytest.raises(ResourceExhausted, match=f"bytes of JSON, over the bound of {bound}; "
                                                f"send large tensors as binary data"):
        _decode(doc)


def test_the_element_limit_applies_to_both_forms() -> None:
    doc = {"inputs": [{"name": "a", "shape": [8], "datatype": "FP32", "data": [0] * 8}]}
    with pytest.raises(ResourceExhausted, match="at most 4 per tensor"):
        _decode(doc, max_elements=4)
    doc = {"inputs": [{"name": "a", "shape": [8], "datatype": "FP32",
                       "parameters": {"binary_data_size": 32}}]}
    with pytest.raises(ResourceExhausted, match="at most 4 per tensor"):
        _decode(doc, b"\0" * 32, max_elements=4)


def test_outputs_go_binary_or_json_as_asked() -> None:
    outputs = {"y": np.array([[1.5, -2.0]], np.float32), "n": np.array([True, False]),
               "h": np.array([0.25], np.float16)}
    body, length = _body({"id": "q", "inputs": [],
                          "outputs": [{"name": "y", "parameters": {"binary_data": True}},
                                      {"name": "n"}, {"name": "h"}]})
    call = tensors.parse_infer("m", "", body, length)
    header, parts = tensors.encode_outputs(call, "m", "1", outputs, ["y", "n", "h"])
    doc = json.loads(header)
    assert doc["model_name"] == "m" and doc["model_version"] == "1" and doc["id"] == "q"
    y, n, h = doc["outputs"]
    assert y == {"name": "y", "datatype": "FP32", "shape": [1, 2],
                 "parameters": {"binary_data_size": 8}}
    assert n == {"name": "n", "datatype": "BOOL", "shape": [2], "data": [True, False]}
    assert h == {"name": "h", "datatype": "FP16", "shape": [1], "data": [0.25]}
    assert len(parts) == 1 and bytes(parts[0]) == outputs["y"].tobytes()

    # No outputs listed: binary_data_output decides for every output.
    body, _ = _body({"inputs": [], "parameters": {"binary_data_output": True}})
    call = tensors.parse_infer("m", "", body, None)
    header, parts = tensors.encode_outputs(call, "m", "1", outputs, ["n", "h"])
    assert [o["parameters"]["binary_data_size"] for o in json.loads(header)["outputs"]] == [2, 2]
    assert b"".join(bytes(p) for p in parts) == outputs["n"].tobytes() + outputs["h"].tobytes()


def test_protos_as_the_http_apis_json() -> None:
    stats = pb.ModelStatisticsResponse(model_stats=[pb.ModelStatistics(
        name="m", version="1", inference_count=2**40,
        inference_stats=pb.InferStatistics(success=pb.StatisticDuration(count=3, ns=7)))])
    doc = tensors.proto_json(stats)
    entry = doc["model_stats"][0]
    assert entry["inference_count"] == 2**40  # a number, not protobuf JSON's string
    assert entry["execution_count"] == 0 and entry["batch_stats"] == []  # defaults printed
    assert entry["inference_stats"]["success"] == {"count": 3, "ns": 7}
    assert "queue" not in entry["inference_stats"]  # an unset message is left out
    config = mc.ModelConfig(name="m", max_batch_size=4, input=[mc.ModelInput(
        name="x", data_type=mc.TYPE_FP16, dims=[3, -1])])
    config.parameters["gears"].string_value = "1,4"
    doc = tensors.proto_json(config)
    assert doc["input"][0]["data_type"] == "TYPE_FP16" and doc["input"][0]["dims"] == [3, -1]
    assert doc["parameters"] == {"gears": {"string_value": "1,4"}}
    assert doc["max_batch_size"] == 4 and json.loads(tensors.dumps(doc)) == doc
