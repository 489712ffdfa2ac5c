"""Wire compatibility of proto/graphengine/kserve/v2 with the protocol as a standard client
(tritonclient) compiled it: every method and every field we declare has the protocol's
number, type and label.

tritonclient's descriptors are read from its generated modules' source, so that this
comparison does not depend on importing them (that both import into one process is
tests/unit/test_packaging.py's subject).
"""

from __future__ import annotations

import ast
import importlib.util
import pathlib

import pytest
from google.protobuf import descriptor_pb2

from graphengine.kserve.v2 import grpc_service_pb2, model_config_pb2

FieldProto = descriptor_pb2.FieldDescriptorProto


def _reference(module: str) -> descriptor_pb2.FileDescriptorProto:
    spec = importlib.util.find_spec("tritonclient")
    assert spec is not None and spec.submodule_search_locations, \
        "tritonclient missing: pip install '.[test]'"
    path = pathlib.Path(next(iter(spec.submodule_search_locations))) / "grpc" / module
    for node in ast.walk(ast.parse(path.read_text())):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and node.func.attr == "AddSerializedFile"):
            return descriptor_pb2.FileDescriptorProto.FromString(
                ast.literal_eval(node.args[0]))
    raise AssertionError(f"no serialized descriptor in {path}")


def _ours(module) -> descriptor_pb2.FileDescriptorProto:
    proto = descriptor_pb2.FileDescriptorProto()
    module.DESCRIPTOR.CopyToProto(proto)
    return proto


def _messages(fd: descriptor_pb2.FileDescriptorProto) -> dict[str, descriptor_pb2.DescriptorProto]:
    found = {}

    def walk(prefix: str, messages) -> None:
        for m in messages:
            name = f"{prefix}.{m.name}"
            found[name] = m
            walk(name, m.nested_type)

    walk("." + fd.package, fd.message_type)
    return found


def _enums(fd: descriptor_pb2.FileDescriptorProto) -> dict[str, dict[str, int]]:
    found = {f".{fd.package}.{e.name}": {v.name: v.number for v in e.value} for e in fd.enum_type}
    for name, m in _messages(fd).items():
        for e in m.enum_type:
            found[f"{name}.{e.name}"] = {v.name: v.number for v in e.value}
    return found


@pytest.mark.parametrize("ours, theirs", [
    (grpc_service_pb2, "service_pb2.py"),
    (model_config_pb2, "model_config_pb2.py"),
])
def test_every_field_matches_the_protocol(ours, theirs: str) -> None:
    mine, ref = _messages(_ours(ours)), _messages(_reference(theirs))
    assert mine, "no messages parsed"
    for name, message in mine.items():
        assert name in ref, f"{name} is not a message of the protocol"
        ref_fields = {f.number: f for f in ref[name].field}
        for field in message.field:
            want = ref_fields.get(field.number)
            assert want is not None, f"{name}.{field.name}: number {field.number} is not used"
            assert (field.name, field.type, field.label, field.type_name) == (
                want.name, want.type, want.label, want.type_name), f"{name}.{field.name}"
            assert (field.HasField("oneof_index") == want.HasField("oneof_index")), field.name


def test_enum_values_match_the_protocol() -> None:
    mine, ref = _enums(_ours(model_config_pb2)), _enums(_reference("model_config_pb2.py"))
    for name, values in mine.items():
        for value, number in values.items():
            assert ref[name][value] == number, f"{name}.{value}"


def test_service_methods_match_the_protocol() -> None:
    mine, ref = _ours(grpc_service_pb2), _reference("service_pb2.py")
    assert [s.name for s in mine.service] == ["GRPCInferenceService"]
    assert mine.package == ref.package == "inference"
    ref_methods = {m.name: m for m in ref.service[0].method}
    for method in mine.service[0].method:
        want = ref_methods[method.name]
        assert (method.input_type, method.output_type, method.client_streaming,
                method.server_streaming) == (want.input_type, want.output_type,
                                             want.client_streaming, want.server_streaming)
    required = {"ServerLive", "ServerReady", "ModelReady", "ServerMetadata", "ModelMetadata",
                "ModelInfer", "ModelStreamInfer", "ModelConfig", "ModelStatistics",
                "RepositoryIndex", "RepositoryModelLoad", "RepositoryModelUnload"}
    assert required <= {m.name for m in mine.service[0].method}
