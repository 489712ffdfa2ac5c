"""The KServe servicer over a Triton-layout repository, through GraphEngine's own stubs:
versions in requests, metadata, configuration, statistics and the index; control modes at
the RPCs. (tritonclient against a real server process: tests/integration/test_triton_repository.py.)
"""

from __future__ import annotations

import pathlib
import time

import grpc
import numpy as np
import onnx
import pytest

from graphengine.kserve.v2 import grpc_service_pb2 as pb
from graphengine.kserve.v2 import model_config_pb2 as mc
from tests.integration.ge_models import offset_onnx

CONFIG = """
name: "add"
backend: "onnxruntime"
max_batch_size: 8
input [ { name: "x" data_type: TYPE_FP32 dims: [ 4 ] } ]
output [ { name: "y" data_type: TYPE_FP32 dims: [ 4 ] } ]
dynamic_batching { preferred_batch_size: [ 4 ] max_queue_delay_microseconds: 200 }
instance_group [ { count: 2 kind: KIND_CPU } ]
version_policy: { all { } }
"""


@pytest.fixture
def started(tmp_path: pathlib.Path, kserve_servers):
    for v in (1, 2):
        (tmp_path / "add" / str(v)).mkdir(parents=True)
        onnx.save(offset_onnx(v), tmp_path / "add" / str(v) / "model.onnx")
    (tmp_path / "add" / "config.pbtxt").write_text(CONFIG)

    def start(**settings):
        return kserve_servers(model_repository=str(tmp_path), **settings)

    return tmp_path, start


def _wait(stub, name: str, version: str = "") -> None:
    deadline = time.monotonic() + 60
    while not stub.ModelReady(pb.ModelReadyRequest(name=name, version=version), timeout=5).ready:
        assert time.monotonic() < deadline, (name, version)
        time.sleep(0.02)


def _infer(stub, version: str = "", rows: int = 2, model: str = "add") -> pb.ModelInferResponse:
    x = np.ones((rows, 4), np.float32)
    request = pb.ModelInferRequest(model_name=model, model_version=version)
    request.inputs.add(name="x", datatype="FP32", shape=x.shape)
    request.raw_input_contents.append(x.tobytes())
    return stub.ModelInfer(request, timeout=30)


def _y(response: pb.ModelInferResponse) -> np.ndarray:
    assert [o.name for o in response.outputs] == ["y"]  # the declared outputs only
    return np.frombuffer(response.raw_output_contents[0], np.float32)


def test_versions_metadata_config_and_statistics(started) -> None:
    root, start = started
    parts, stub = start()
    _wait(stub, "add", "1")
    _wait(stub, "add", "2")
    latest = _infer(stub)
    assert latest.model_version == "2" and (_y(latest) == 3).all()
    first = _infer(stub, "1")
    assert first.model_version == "1" and (_y(first) == 2).all()
    with pytest.raises(grpc.RpcError) as info:
        _infer(stub, "3")
    assert info.value.code() == grpc.StatusCode.NOT_FOUND and "version '3'" in info.value.details()
    with pytest.raises(grpc.RpcError) as info:
        _infer(stub, rows=9)
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "max_batch_size of 8" in info.value.details()

    meta = stub.ModelMetadata(pb.ModelMetadataRequest(name="add"), timeout=5)
    assert list(meta.versions) == ["1", "2"] and meta.platform == "onnxruntime_onnx"
    assert [(t.name, list(t.shape)) for t in meta.inputs] == [("x", [-1, 4])]
    assert [t.name for t in meta.outputs] == ["y"]
    one = stub.ModelMetadata(pb.ModelMetadataRequest(name="add", version="1"), timeout=5)
    assert list(one.versions) == ["1"]

    config = stub.ModelConfig(pb.ModelConfigRequest(name="add"), timeout=5).config
    assert config.max_batch_size == 8 and config.version_policy.HasField("all")
    assert [(i.name, i.data_type, list(i.dims)) for i in config.input] == [
        ("x", mc.TYPE_FP32, [4])]
    assert list(config.dynamic_batching.preferred_batch_size) == [4, 8]
    assert config.dynamic_batching.max_queue_delay_microseconds == 200
    assert config.instance_group[0].count == 2 and config.parameters["gears"].string_value \
        == "4,8"

    stats = stub.ModelStatistics(pb.ModelStatisticsRequest(name="add"), timeout=5)
    by_version = {s.version: s.inference_stats.success.count for s in stats.model_stats}
    assert by_version == {"1": 1, "2": 1}
    stats = stub.ModelStatistics(pb.ModelStatisticsRequest(name="add", version="1"), timeout=5)
    assert [s.version for s in stats.model_stats] == ["1"]

    index = stub.RepositoryIndex(pb.RepositoryIndexRequest(), timeout=5)
    assert [(m.name, m.version, m.state) for m in index.models] == [
        ("add", "1", "READY"), ("add", "2", "READY")]
    text = parts.metrics.render().decode()  # the versions' runtime statistics, added up
    assert 'graphengine_model_runs_total{model="add"} 2.0' in text


def test_control_modes_at_the_rpcs(started) -> None:
    root, start = started
    (root / "other").mkdir()
    onnx.save(offset_onnx(5), root / "other" / "model.onnx")
    _, explicit = start(model_control_mode="explicit", load_models=("other",))
    _wait(explicit, "other")
    index = explicit.RepositoryIndex(pb.RepositoryIndexRequest(), timeout=5)
    assert {(m.name, m.version, m.state, m.reason) for m in index.models} == {
        ("add", "", "UNAVAILABLE", "not loaded"), ("other", "1", "READY", "")}
    load = pb.RepositoryModelLoadRequest(model_name="add")  # Triton's JSON form of a config
    load.parameters["config"].string_param = (
        '{"max_batch_size": 2, "version_policy": {"specific": {"versions": [1]}}}')
    explicit.RepositoryModelLoad(load, timeout=60)
    assert _infer(explicit, rows=2).model_version == "1"
    config = explicit.ModelConfig(pb.ModelConfigRequest(name="add"), timeout=5).config
    assert config.max_batch_size == 2 and list(config.version_policy.specific.versions) == [1]
    explicit.RepositoryModelUnload(pb.RepositoryModelUnloadRequest(model_name="add"), timeout=60)
    with pytest.raises(grpc.RpcError) as info:
        _infer(explicit)
    assert info.value.code() == grpc.StatusCode.UNAVAILABLE

    _, poll = start(model_control_mode="poll", repository_poll_seconds=3600.0)
    _wait(poll, "add", "2")
    with pytest.raises(grpc.RpcError) as info:
        poll.RepositoryModelLoad(pb.RepositoryModelLoadRequest(model_name="add"), timeout=5)
    assert info.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert "model control mode is poll" in info.value.details()
