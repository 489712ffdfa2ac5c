"""Triton's config.pbtxt mapped onto the repository's ModelConfig: every supported field,
the refused and ignored ones, bounds, and malformed text named by file and line."""

from __future__ import annotations

import pathlib

import pytest

from graphengine.engine.dtypes import DType
from graphengine.engine.errors import InvalidInput
from graphengine.server.core import triton_config
from graphengine.server.core.model_config import PolicyKind, TensorSpec
from graphengine.server.core.repository_layout import config_from_text

SOURCE = "models/m/config.pbtxt"

FULL = """
name: "m"
platform: "onnxruntime_onnx"
max_batch_size: 8
input [
  { name: "x" data_type: TYPE_FP32 dims: [ 3, -1 ] },
  { name: "ids" data_type: TYPE_INT64 dims: [ 5 ] }
]
output [ { name: "y" data_type: TYPE_FP16 dims: [ -1 ] } ]
dynamic_batching { preferred_batch_size: [ 2, 4 ] max_queue_delay_microseconds: 1500 }
instance_group [ { count: 2 kind: KIND_CPU }, { kind: KIND_AUTO } ]
version_policy: { specific: { versions: [ 3, 1 ] } }
default_model_filename: "net.onnx"
parameters { key: "max_streams" value: { string_value: "2" } }
"""


def _parse(text: str):
    return triton_config.parse_text(text, "m", SOURCE)


def test_every_supported_field_is_mapped() -> None:
    cfg, warnings = _parse(FULL)
    assert warnings == []
    assert cfg.declared_max_batch_size == 8
    # the batch dimension is prepended to the declared dims, as Triton does
    assert cfg.inputs == (TensorSpec("x", DType.FLOAT32, (-1, 3, -1)),
                          TensorSpec("ids", DType.INT64, (-1, 5)))
    assert cfg.outputs == (TensorSpec("y", DType.FLOAT16, (-1, -1)),)
    assert cfg.gears == (2, 4, 8)  # the preferred sizes, and max_batch_size always
    assert cfg.dynamic_batching.max_queue_delay_ms == 1.5
    assert cfg.dynamic_batching.max_batch_size == 8 and cfg.max_batch_size == 8
    assert cfg.instances == 3  # 2 + an unset count (Triton's default: 1)
    assert cfg.version_policy.kind is PolicyKind.SPECIFIC
    assert cfg.version_policy.versions == (1, 3)
    assert cfg.default_model_filename == "net.onnx" and cfg.platform == "onnxruntime_onnx"
    assert cfg.max_streams == 2 and cfg.source == SOURCE


def test_gears_follow_max_batch_size() -> None:
    cfg, _ = _parse("max_batch_size: 12")
    assert cfg.gears == (1, 2, 4, 8, 12) and cfg.dynamic_batching is None
    cfg, _ = _parse('max_batch_size: 16 parameters { key: "gears" value { string_value: '
                    '"1, 4" } }')
    assert cfg.gears == (1, 4, 16)
    cfg, _ = _parse("max_batch_size: 65536")  # the largest: 15 powers of two and itself
    assert len(cfg.gears) == 16 and cfg.gears[0] == 2 and cfg.gears[-1] == 65536
    cfg, _ = _parse('input [ { name: "x" data_type: TYPE_FP32 dims: [ 2, 2 ] } ]')
    assert cfg.gears == () and cfg.declared_max_batch_size == 0
    assert cfg.inputs[0].dims == (2, 2)  # no batching: the dims are the whole shape


def test_an_absent_config_leaves_everything_to_the_model() -> None:
    cfg, warnings = _parse("")
    assert (cfg.inputs, cfg.outputs, cfg.gears, cfg.instances, warnings) == ((), (), (), 1, [])
    assert cfg.version_policy.kind is PolicyKind.LATEST and cfg.version_policy.num_versions == 1


@pytest.mark.parametrize("text, kind, chosen, missing", [
    ("", PolicyKind.LATEST, [5], []),
    ("version_policy { latest { num_versions: 2 } }", PolicyKind.LATEST, [2, 5], []),
    ("version_policy { latest { } }", PolicyKind.LATEST, [5], []),
    ("version_policy { all { } }", PolicyKind.ALL, [1, 2, 5], []),
    ("version_policy { specific { versions: [ 2, 9 ] } }", PolicyKind.SPECIFIC, [2], [9]),
])
def test_version_policies(text: str, kind: PolicyKind, chosen: list[int],
                          missing: list[int]) -> None:
    policy = _parse(text)[0].version_policy
    assert policy.kind is kind
    assert policy.select({1, 2, 5}) == (chosen, missing)


@pytest.mark.parametrize("text, culprit", [
    ('name: "other"', "name: 'other' is not the model's folder name 'm'"),
    ('platform: "tensorrt_plan"', "platform: 'tensorrt_plan' is not served"),
    ('backend: "python"', "backend: 'python' is not served"),
    ('platform: "graphengine_offline" backend: "onnxruntime"', "backend: 'onnxruntime' is "
                                                                "not the backend"),
    ('default_model_filename: "../x.onnx"', "default_model_filename"),
    ("instance_group [ { kind: KIND_GPU } ]", "instance_group[0].kind: KIND_GPU"),
    ("instance_group [ { kind: KIND_MODEL } ]", "instance_group[0].kind: KIND_MODEL"),
    ("instance_group [ { gpus: [ 0 ] } ]", "instance_group[0].gpus"),
    ("instance_group [ { passive: true } ]", "instance_group[0].passive"),
    ("instance_group [ { count: -1 } ]", "instance_group[0].count"),
    ('max_batch_size: 4 input [ { name: "x" data_type: TYPE_FP32 dims: [ 4 ] '
     'reshape { shape: [ 2, 2 ] } } ]', "input 'x'.reshape"),
    ('input [ { name: "x" data_type: TYPE_FP32 dims: [ 4 ] optional: true } ]',
     "input 'x'.optional"),
    ('input [ { name: "x" data_type: TYPE_FP32 dims: [ 1 ] is_shape_tensor: true } ]',
     "is_shape_tensor"),
    ('input [ { name: "x" data_type: TYPE_STRING dims: [ 1 ] } ]', "TYPE_STRING"),
    ('input [ { name: "x" dims: [ 1 ] } ]', "input 'x'.data_type"),
    ('input [ { data_type: TYPE_FP32 dims: [ 1 ] } ]', "input[0]: needs a name"),
    ('output [ { name: "y" data_type: TYPE_FP32 dims: [ 1 ] }, '
     '{ name: "y" data_type: TYPE_FP32 dims: [ 1 ] } ]', "output 'y': is declared twice"),
    ("dynamic_batching { }", "dynamic_batching: needs max_batch_size > 0"),
    ("max_batch_size: 4 dynamic_batching { preserve_ordering: true }", "preserve_ordering"),
    ("max_batch_size: 4 dynamic_batching { priority_levels: 2 }", "priority_levels"),
    ("max_batch_size: 4 dynamic_batching { default_queue_policy { max_queue_size: 3 } }",
     "default_queue_policy"),
    ("sequence_batching { }", "sequence_batching: stateful"),
    ('ensemble_scheduling { step [ { model_name: "a" } ] }', "ensemble_scheduling"),
    ("model_transaction_policy { decoupled: true }", "decoupled"),
    ('model_operations { op_library_filename: "libops.so" }', "--plugin"),
    ('model_repository_agents { agents [ { name: "checksum" } ] }', "model_repository_agents"),
    ('runtime: "model.py"', "runtime"),
    ('batch_input [ { kind: BATCH_ELEMENT_COUNT } ]', "batch_input"),
    ('parameters { key: "gears" value { string_value: "1" } }', "gears need max_batch_size"),
    ('max_batch_size: 4 parameters { key: "gears" value { string_value: "1,x" } }',
     "parameters.gears"),
])
def test_settings_that_change_results_are_refused(text: str, culprit: str) -> None:
    with pytest.raises(InvalidInput) as info:
        _parse(text)
    message = str(info.value)
    assert message.startswith(f"{SOURCE}: model 'm': "), message
    assert culprit in message, message


@pytest.mark.parametrize("text, culprit", [
    ("max_batch_size: 65537", "max_batch_size: 65537 is outside 0..65536"),
    ("max_batch_size: -1", "max_batch_size: -1 is outside"),
    ("instance_group [ { count: 40 }, { count: 25 } ]", "65 instances exceed the bound of 64"),
    ("max_batch_size: 4 dynamic_batching { max_queue_delay_microseconds: 10000001 }",
     "max_queue_delay_microseconds: 10000001 is outside 0..10000000"),
    ("max_batch_size: 4 dynamic_batching { preferred_batch_size: [ 8 ] }",
     "preferred_batch_size: 8 is outside 1..4"),
    ('input [ { name: "x" data_type: TYPE_FP32 dims: [ -2 ] } ]', "-2 is neither -1"),
    ('input [ { name: "x" data_type: TYPE_FP32 dims: [ 1099511627777 ] } ]', "neither -1"),
    ('input [ { name: "x" data_type: TYPE_FP32 dims: [ 1048576, 1048576, 2 ] } ]',
     "exceeds the bound of 1099511627776 elements"),
    ('max_batch_size: 1 input [ { name: "x" data_type: TYPE_FP32 dims: [ '
     + ", ".join(["1"] * 32) + " ] } ]", "rank 33 exceeds the bound of 32"),
    ("version_policy { latest { num_versions: 65 } }", "num_versions must be between 1 and 64"),
    ("version_policy { specific { versions: [ 0 ] } }", "version number in 1.."),
    ('parameters { key: "max_streams" value { string_value: "65" } }',
     "parameters.max_streams: 65 is outside 1..64"),
    ('max_batch_size: 4 parameters { key: "gears" value { string_value: "8" } }',
     "gears: 8 is outside 1..4"),
])
def test_every_number_is_bounded(text: str, culprit: str) -> None:
    with pytest.raises(InvalidInput) as info:
        _parse(text)
    assert culprit in str(info.value) and "model 'm'" in str(info.value)


def test_settings_that_only_tune_are_ignored_with_a_warning() -> None:
    text = """
    max_batch_size: 2
    input [ { name: "x" data_type: TYPE_FP32 format: FORMAT_NCHW dims: [ 3, 8, 8 ] } ]
    output [ { name: "p" data_type: TYPE_FP32 dims: [ 10 ] label_filename: "labels.txt" } ]
    optimization { execution_accelerators { cpu_execution_accelerator [ { name: "openvino" } ] } }
    model_warmup [ { name: "w" batch_size: 1 } ]
    response_cache { enable: true }
    instance_group [ { count: 1 kind: KIND_CPU rate_limiter { priority: 2 } } ]
    parameters { key: "intra_op_thread_count" value { string_value: "1" } }
    """
    cfg, warnings = _parse(text)
    assert cfg.declared_max_batch_size == 2 and cfg.instances == 1
    fields = ["input 'x'.format", "output 'p'.label_filename", "optimization", "model_warmup",
              "response_cache", "instance_group[0].rate_limiter",
              "parameters 'intra_op_thread_count'"]
    for field in fields:
        assert any(f"model 'm': {field} is ignored" in w for w in warnings), (field, warnings)
    assert len(warnings) == len(fields)


@pytest.mark.parametrize("text, where, words", [
    ('name: "m"\nmax_batch_size: 4\nmax_batch: 2\n', ":3:1:", 'no field named "max_batch"'),
    ('input [ { name: "x" data_type: TYPE_FP33 } ]', ":1:32:", "TYPE_FP33"),
    ('max_batch_size: 4\ninput [ { name: "x" ', ":2:", "Expected"),
    ("max_batch_size: 99999999999", ":1:17:", "out of range"),
])
def test_malformed_text_names_the_file_and_line(text: str, where: str, words: str) -> None:
    with pytest.raises(InvalidInput) as info:
        _parse(text)
    message = str(info.value)
    assert message.startswith(SOURCE + where), message
    assert words in message and "model 'm'" in message


def test_the_file_is_bounded_and_utf8(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "config.pbtxt"
    path.write_bytes(b"max_batch_size: 4\n" + b"#" * triton_config.MAX_CONFIG_BYTES)
    with pytest.raises(InvalidInput, match="exceed the bound of 1048576"):
        triton_config.load(str(path), "m")
    path.write_bytes(b'name: "\xff"')
    with pytest.raises(InvalidInput, match="not UTF-8"):
        triton_config.load(str(path), "m")
    path.write_text("max_batch_size: 4\n")
    assert triton_config.load(str(path), "m")[0].declared_max_batch_size == 4
    with pytest.raises(InvalidInput, match="cannot read"):
        triton_config.load(str(tmp_path / "missing.pbtxt"), "m")


def test_load_parameter_takes_the_yaml_form_or_tritons_json() -> None:
    yaml_form, _ = config_from_text('{"gears": [2], "instances": 2}', "m", "param")
    assert yaml_form.gears == (2,) and yaml_form.declared_max_batch_size is None
    triton_form, _ = config_from_text(
        '{"max_batch_size": 4, "input": [{"name": "x", "data_type": "TYPE_FP32", '
        '"dims": [16]}], "instance_group": [{"count": 2, "kind": "KIND_CPU"}]}', "m", "param")
    assert triton_form.declared_max_batch_size == 4 and triton_form.instances == 2
    assert triton_form.inputs == (TensorSpec("x", DType.FLOAT32, (-1, 16)),)
    with pytest.raises(InvalidInput, match="param: model 'm': not a valid model "
                                           "configuration.*max_batch"):
        config_from_text('{"max_batch": 4}', "m", "param")
    with pytest.raises(InvalidInput, match="instance_group.*KIND_GPU"):
        config_from_text('{"instance_group": [{"kind": "KIND_GPU"}]}', "m", "param")


def test_the_yaml_form_has_version_policies_too() -> None:
    from graphengine.server.core import model_config

    for value, kind, chosen in [({"latest": 2}, PolicyKind.LATEST, [3, 4]),
                                ("all", PolicyKind.ALL, [1, 3, 4]),
                                ({"specific": [3]}, PolicyKind.SPECIFIC, [3])]:
        policy = model_config.parse({"version_policy": value}, "c.yaml").version_policy
        assert policy.kind is kind and policy.select({1, 3, 4})[0] == chosen
    for value in ({"latest": 0}, {"specific": []}, "some", {"latest": True}):
        with pytest.raises(InvalidInput, match="c.yaml: version_policy"):
            model_config.parse({"version_policy": value}, "c.yaml")
