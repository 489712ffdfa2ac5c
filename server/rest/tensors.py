"""The KServe v2 HTTP infer body <-> the KServe message and numpy, and protos as JSON.

An HTTP infer request is a JSON object, optionally followed by binary tensor data (Triton's
binary tensor extension, which tritonclient.http uses by default):

    Inference-Header-Content-Length: 212        <- the JSON part's length in bytes
    {"inputs": [{"name": "x", "shape": [1, 16], "datatype": "FP32",
                 "parameters": {"binary_data_size": 64}}],
     "outputs": [{"name": "y", "parameters": {"binary_data": true}}]}<64 bytes of x>

Without the header the whole body is the JSON, and each input carries `data` (a flat or
nested JSON array, row-major). `parse_infer` turns the body into the ModelInferRequest the
gRPC servicer takes (names, shapes, datatypes, requested outputs; no tensor bytes) plus
each input's little-endian bytes: the binary parts are views of the body (not copied), JSON
data is checked value by value and converted. Every size is checked before it is used: the
JSON part against MAX_JSON_BYTES, the header length against the body, each binary size
against the bytes left, their sum against the body's end, a JSON array's values against its
shape (codec.decode_inputs checks the bytes against the shape and the element limit).

The response's outputs go out as JSON `data` or, when asked (the output's `binary_data`
parameter, or the request's `binary_data_output`), as binary parts after the JSON header,
each a view of the output array.
"""

from __future__ import annotations

import base64
import dataclasses
import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import Message

from graphengine.engine.bounds import MAX_RANK
from graphengine.engine.dtypes import DType
from graphengine.engine.errors import InvalidInput, ResourceExhausted, bounded_text
from graphengine.kserve.v2 import grpc_service_pb2 as pb

from ..rpc import kserve_codec as codec

HEADER_LENGTH = "Inference-Header-Content-Length"
BYTE_COUNT = re.compile(r"[0-9]{1,18}")  # a length header's value (< 10**18)
# JSON becomes Python objects of up to ~10x its size (a float in 3 characters takes 32
# bytes as an object in a list), so the JSON part has a bound of its own; binary data
# has only max_message_bytes.
MAX_JSON_BYTES = 32 << 20
_INT_KINDS = "iu"
_JSON_NUMBER = (int, float)


@dataclasses.dataclass
class InferCall:
    """One HTTP infer request, decoded: the message, each input's bytes, and how to answer."""

    request: pb.ModelInferRequest
    raw: list[bytes | memoryview]
    binary_outputs: frozenset[str]  # outputs sent as binary parts
    binary_default: bool  # ... and every output the request does not list


def loads(data: bytes | memoryview, what: str) -> Any:
    """JSON text -> value; InvalidInput saying where it is malformed."""
    if len(data) > MAX_JSON_BYTES:
        raise ResourceExhausted(f"{what} has {len(data)} bytes of JSON, over the bound of "
                                f"{MAX_JSON_BYTES}; send large tensors as binary data "
                                f"(binary_data_size, tritonclient's default)")
    try:
        return json.loads(bytes(data))
    except UnicodeDecodeError:
        raise InvalidInput(f"{what} is not UTF-8 text") from None
    except json.JSONDecodeError as exc:
        raise InvalidInput(f"{what} is not valid JSON: {exc.msg} at line {exc.lineno} "
                           f"column {exc.colno}") from None
    except RecursionError:
        raise InvalidInput(f"{what} nests JSON arrays or objects too deeply") from None


def dumps(value: Any) -> bytes:
    return json.dumps(value, separators=(",", ":")).encode()


def _object(value: Any, what: str) -> dict:
    if not isinstance(value, dict):
        raise InvalidInput(f"{what} must be a JSON object, got {_kind(value)}")
    return value


def _kind(value: Any) -> str:
    return {dict: "an object", list: "an array", str: "a string", bool: "a boolean",
            int: "a number", float: "a number", type(None): "null"}.get(type(value), "a value")


def _field(obj: dict, key: str, kind: type, what: str, default: Any = None) -> Any:
    if key not in obj:
        return default
    value = obj[key]
    # bool is an int in Python, never in JSON.
    if not isinstance(value, kind) or (isinstance(value, bool) and kind is not bool):
        raise InvalidInput(f"{what}: '{key}' must be {_JSON_NAMES[kind]}, got "
                           f"{_kind(value)}")
    return value


_JSON_NAMES = {str: "a string", int: "an integer", list: "an array", dict: "an object",
               bool: "a boolean"}


def split_body(body: memoryview, header_length: str | None) -> tuple[memoryview, memoryview]:
    """(JSON part, binary part) of an infer body, by the Inference-Header-Content-Length."""
    if header_length is None:
        return body, body[len(body):]
    text = header_length.strip()
    if not BYTE_COUNT.fullmatch(text):
        raise InvalidInput(f"{HEADER_LENGTH} '{bounded_text(header_length, 40)}' is not a "
                           f"byte count")
    length = int(text)
    if length == 0 or length > len(body):
        raise InvalidInput(f"{HEADER_LENGTH} is {length} but the body has {len(body)} bytes; "
                           f"it must be the JSON part's length, between 1 and the body's")
    return body[:length], body[length:]


def parse_infer(name: str, version: str, body: memoryview, header_length: str | None
                ) -> InferCall:
    """An HTTP infer body -> InferCall (see the module docstring); InvalidInput naming the
    input, field or size that is wrong."""
    header, binary = split_body(body, header_length)
    doc = _object(loads(header, "the inference request"), "the inference request")
    request = pb.ModelInferRequest(model_name=name, model_version=version,
                                   id=_field(doc, "id", str, "the inference request", ""))
    params = _field(doc, "parameters", dict, "the inference request", {})
    binary_default = _field(params, "binary_data_output", bool, "request parameters", False)
    inputs = _field(doc, "inputs", list, "the inference request", None)
    if inputs is None:
        raise InvalidInput("the inference request has no 'inputs'")
    raw: list[bytes | memoryview] = []
    offset = 0
    for i, item in enumerate(inputs):
        tensor, data, size = _input(i, item)
        request.inputs.append(tensor)
        if size is not None:
            left = len(binary) - offset
            if size > left:
                raise InvalidInput(
                    f"input '{tensor.name}': binary_data_size {size} but only {left} bytes of "
                    f"binary data are left after the JSON part ({HEADER_LENGTH} "
                    f"{'missing' if header_length is None else header_length.strip()})",
                    tensor=tensor.name)
            raw.append(binary[offset:offset + size])
            offset += size
        else:
            raw.append(_json_bytes(tensor, data))
    if offset != len(binary):
        raise InvalidInput(f"the body has {len(binary)} bytes of binary data after the JSON "
                           f"part, the inputs' binary_data_size add up to {offset}")
    binary_outputs = set()
    for i, item in enumerate(_field(doc, "outputs", list, "the inference request", [])):
        out, is_binary = _output(i, item, binary_default)
        request.outputs.append(out)
        if is_binary:
            binary_outputs.add(out.name)
    return InferCall(request, raw, frozenset(binary_outputs), binary_default)


def _input(i: int, item: Any) -> tuple[pb.ModelInferRequest.InferInputTensor, Any, int | None]:
    what = f"input {i}"
    item = _object(item, what)
    name = _field(item, "name", str, what, "")
    if not name:
        raise InvalidInput(f"input {i} has no name")
    what = f"input '{name}'"
    datatype = _field(item, "datatype", str, what, "")
    shape = _field(item, "shape", list, what, None)
    if shape is None:
        raise InvalidInput(f"{what} has no 'shape'", tensor=name)
    if len(shape) > MAX_RANK:
        raise InvalidInput(f"{what}: rank {len(shape)} exceeds the bound of {MAX_RANK}",
                           tensor=name)
    if not all(isinstance(d, int) and not isinstance(d, bool) and 0 <= d < 2**63
               for d in shape):
        raise InvalidInput(f"{what}: shape {_show(shape)} must be non-negative integers",
                           tensor=name)
    params = _field(item, "parameters", dict, what, {})
    if "shared_memory_region" in params:
        raise InvalidInput(f"{what}: shared memory is not supported; send the data in the "
                           f"request", tensor=name)
    size = _field(params, "binary_data_size", int, f"{what} parameters", None)
    if size is not None and not 0 <= size < 2**63:
        raise InvalidInput(f"{what}: binary_data_size {size} is negative", tensor=name)
    if size is not None and "data" in item:
        raise InvalidInput(f"{what} has both binary_data_size and 'data'", tensor=name)
    if size is None and "data" not in item:
        raise InvalidInput(f"{what} has neither 'data' nor a binary_data_size parameter",
                           tensor=name)
    tensor = pb.ModelInferRequest.InferInputTensor(name=name, datatype=datatype, shape=shape)
    return tensor, item.get("data"), size


def _show(value: Any) -> str:
    text = json.dumps(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _flatten(data: Any, name: str) -> list:
    """A JSON array, nested or flat, as its values in row-major order."""
    if not isinstance(data, list):
        raise InvalidInput(f"input '{name}': 'data' must be a JSON array, got {_kind(data)}",
                           tensor=name)
    values: list = []
    stack = [iter(data)]
    while stack:
        for item in stack[-1]:
            if isinstance(item, list):
                if len(stack) >= MAX_RANK:
                    raise InvalidInput(f"input '{name}': 'data' nests deeper than rank "
                                       f"{MAX_RANK}", tensor=name)
                stack.append(iter(item))
                break
            values.append(item)
        else:
            stack.pop()
    return values


def _json_bytes(tensor: pb.ModelInferRequest.InferInputTensor, data: Any) -> bytes:
    """An input's JSON `data`, checked against its shape and datatype, as little-endian
    bytes."""
    name = tensor.name
    dtype = codec.DATATYPES.get(tensor.datatype)
    values = _flatten(data, name)
    count = 1
    for d in tensor.shape:
        count *= d
    if dtype is None:
        return b""  # decode_inputs names the datatype
    if count != len(values):
        raise InvalidInput(f"input '{name}': shape {list(tensor.shape)} needs {count} values, "
                           f"'data' has {len(values)}", tensor=name)
    if dtype in (DType.BFLOAT16, DType.STRING):
        raise InvalidInput(f"input '{name}': {tensor.datatype} data must be sent as binary "
                           f"data", tensor=name)
    np_type = dtype.numpy
    if dtype is DType.BOOL:
        ok, expected = all(type(v) is bool for v in values), "true or false"
    elif np_type.kind in _INT_KINDS:
        ok, expected = all(type(v) is int for v in values), "integers"
    else:
        ok, expected = all(type(v) in _JSON_NUMBER for v in values), "numbers"
    if not ok:
        bad = next(v for v in values if not _fits_kind(v, dtype))
        raise InvalidInput(f"input '{name}': {tensor.datatype} data must be {expected}, got "
                           f"{_show(bad)}", tensor=name)
    try:
        array = np.array(values, dtype=np_type.newbyteorder("<"))
    except OverflowError:
        raise InvalidInput(f"input '{name}': a value in 'data' does not fit "
                           f"{tensor.datatype}", tensor=name) from None
    return array.tobytes()


def _fits_kind(value: Any, dtype: DType) -> bool:
    if dtype is DType.BOOL:
        return type(value) is bool
    if dtype.numpy.kind in _INT_KINDS:
        return type(value) is int
    return type(value) in _JSON_NUMBER


def _output(i: int, item: Any, binary_default: bool
            ) -> tuple[pb.ModelInferRequest.InferRequestedOutputTensor, bool]:
    item = _object(item, f"output {i}")
    name = _field(item, "name", str, f"output {i}", "")
    if not name:
        raise InvalidInput(f"output {i} has no name")
    what = f"output '{name}'"
    params = _field(item, "parameters", dict, what, {})
    if "shared_memory_region" in params:
        raise InvalidInput(f"{what}: shared memory is not supported; the output is sent in "
                           f"the response", tensor=name)
    out = pb.ModelInferRequest.InferRequestedOutputTensor(name=name)
    if "classification" in params:  # the servicer refuses it, naming the parameter
        out.parameters["classification"].string_param = str(params["classification"])[:64]
    return out, _field(params, "binary_data", bool, f"{what} parameters", binary_default)


def encode_outputs(call: InferCall, model_name: str, model_version: str,
                   outputs: Mapping[str, np.ndarray], names: Sequence[str]
                   ) -> tuple[bytes, list[memoryview]]:
    """(JSON part, binary parts) of the response."""
    listed = {o.name for o in call.request.outputs}
    entries, parts = [], []
    for name in names:
        array, dtype = codec.output_tensor(outputs, name)
        entry: dict[str, Any] = {"name": name, "datatype": codec.datatype_name(dtype),
                                 "shape": list(array.shape)}
        binary = name in call.binary_outputs if name in listed else call.binary_default
        if binary:
            part = memoryview(codec.little_endian(array).reshape(-1).view(np.uint8))
            entry["parameters"] = {"binary_data_size": part.nbytes}
            parts.append(part)
        else:
            flat = array.reshape(-1)
            if dtype is DType.BFLOAT16:
                flat = flat.astype(np.float32)
            entry["data"] = flat.tolist()
        entries.append(entry)
    header: dict[str, Any] = {"model_name": model_name, "model_version": model_version}
    if call.request.id:
        header["id"] = call.request.id
    header["outputs"] = entries
    return dumps(header), parts


# ---- protos as JSON --------------------------------------------------------------------
_INT64 = frozenset({FieldDescriptor.TYPE_INT64, FieldDescriptor.TYPE_UINT64,
                    FieldDescriptor.TYPE_SINT64, FieldDescriptor.TYPE_FIXED64,
                    FieldDescriptor.TYPE_SFIXED64})


def proto_json(message: Message) -> dict[str, Any]:
    """A KServe/Triton message as the HTTP API's JSON: field names as in the .proto, every
    field without presence printed (0, "", [] included), enums by name, 64-bit integers as
    numbers (protobuf's JSON mapping would make them strings; Triton's HTTP API does not)."""
    out: dict[str, Any] = {}
    for field in message.DESCRIPTOR.fields:
        if field.has_presence and not message.HasField(field.name):
            continue
        value = getattr(message, field.name)
        if field.message_type is not None and field.message_type.GetOptions().map_entry:
            item = field.message_type.fields_by_name["value"]
            out[field.name] = {str(k): _scalar(item, v) for k, v in value.items()}
        elif field.is_repeated:
            out[field.name] = [_scalar(field, v) for v in value]
        else:
            out[field.name] = _scalar(field, value)
    return out


def _scalar(field: FieldDescriptor, value: Any) -> Any:
    if field.message_type is not None:
        return proto_json(value)
    if field.enum_type is not None:
        known = field.enum_type.values_by_number.get(value)
        return known.name if known is not None else value
    if field.type == FieldDescriptor.TYPE_BYTES:
        return base64.b64encode(value).decode()
    if field.type in _INT64:
        return int(value)
    return value
