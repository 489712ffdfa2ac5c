"""The KServe v2 servicer in-process, through GraphEngine's own stubs: inference with raw
and typed contents, errors, streams, repository control, statistics, readiness.

(The standard client, tritonclient, is exercised against the real server process in
tests/integration/test_kserve_triton.py.)
"""

from __future__ import annotations

import pathlib
import time

import grpc
import numpy as np
import onnx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from graphengine.kserve.v2 import grpc_service_pb2 as pb
from tests.integration.ge_models import mlp_onnx, ort_run

MODEL = mlp_onnx(batch="batch", seed=6)


@pytest.fixture
def served(tmp_path: pathlib.Path, kserve_servers):
    (tmp_path / "mlp").mkdir()
    onnx.save(MODEL, tmp_path / "mlp" / "model.onnx")
    (tmp_path / "mlp" / "config.yaml").write_text("gears: [1, 4]\n")
    (tmp_path / "later.onnx").write_bytes(b"not yet a model")
    return tmp_path, kserve_servers


def _wait_ready(stub, name: str) -> None:
    deadline = time.monotonic() + 30
    while not stub.ModelReady(pb.ModelReadyRequest(name=name), timeout=5).ready:
        assert time.monotonic() < deadline, name
        time.sleep(0.02)


def _request(x: np.ndarray, raw: bool = True, **fields) -> pb.ModelInferRequest:
    request = pb.ModelInferRequest(**{"model_name": "mlp", **fields})
    t = request.inputs.add(name="x", datatype="FP32", shape=x.shape)
    if raw:
        request.raw_input_contents.append(x.tobytes())
    else:
        t.contents.fp32_contents.extend(x.ravel().tolist())
    return request


def _code(fn) -> tuple[grpc.StatusCode, str]:
    with pytest.raises(grpc.RpcError) as info:
        fn()
    return info.value.code(), info.value.details()


def test_infer_stream_and_statistics(served) -> None:
    root, start = served
    parts, stub = start(model_repository=str(root))
    _wait_ready(stub, "mlp")
    assert stub.ServerReady(pb.ServerReadyRequest(), timeout=5).ready  # "later" failed: fine
    x = np.random.default_rng(0).standard_normal((3, 16)).astype(np.float32)
    want = ort_run(MODEL, {"x": x})["y"]
    for raw in (True, False):
        response = stub.ModelInfer(_request(x, raw, id="r1"), timeout=10)
        assert (response.model_name, response.model_version, response.id) == ("mlp", "1", "r1")
        assert [(o.name, o.datatype, list(o.shape)) for o in response.outputs] == [
            ("y", "FP32", [3, 5])]
        got = np.frombuffer(response.raw_output_contents[0], np.float32).reshape(3, 5)
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)

    bad = _request(x)
    bad.inputs[0].datatype = "FP64"
    code, details = _code(lambda: stub.ModelInfer(bad, timeout=10))
    assert code == grpc.StatusCode.INVALID_ARGUMENT and "bytes" in details
    code, details = _code(lambda: stub.ModelInfer(_request(x, model_version="7"), timeout=10))
    assert code == grpc.StatusCode.NOT_FOUND and "version" in details
    extra = _request(x)
    extra.inputs.add(name="z", datatype="FP32", shape=[1])
    extra.raw_input_contents.append(b"\0" * 4)
    code, details = _code(lambda: stub.ModelInfer(extra, timeout=10))
    assert code == grpc.StatusCode.INVALID_ARGUMENT and "'z'" in details

    requests = [_request(x[:i + 1], id=f"s{i}") for i in range(3)]
    requests.append(pb.ModelInferRequest(model_name="later", id="bad"))
    answers = list(stub.ModelStreamInfer(iter(requests), timeout=30))
    by_id = {a.infer_response.id: a for a in answers}
    assert sorted(by_id) == ["bad", "s0", "s1", "s2"]
    assert "UNAVAILABLE" in by_id["bad"].error_message
    assert list(by_id["s2"].infer_response.outputs[0].shape) == [3, 5]

    stats = stub.ModelStatistics(pb.ModelStatisticsRequest(name="mlp"), timeout=5)
    s = stats.model_stats[0]
    assert s.inference_count == 3 + 3 + 1 + 2 + 3  # rows of the successful requests
    assert s.inference_stats.success.count == 5 and s.inference_stats.fail.count == 2
    assert s.inference_stats.compute_infer.ns > 0 and s.memory_usage[0].byte_size > 0
    text = parts.metrics.render().decode()
    assert 'graphengine_request_duration_seconds_count{api="ModelInfer",model="mlp",' \
           'stage="execute"} 2.0' in text
    assert 'graphengine_repository_models{state="READY"} 1.0' in text
    # the runtime's own statistics of the model: one native launch per successful request
    samples = {(s.name, tuple(sorted(s.labels.items()))): s.value
               for f in text_string_to_metric_families(text) for s in f.samples}
    mlp = (("model", "mlp"),)
    assert samples[("graphengine_model_runs_total", mlp)] == 5
    assert samples[("graphengine_model_device_seconds_total", mlp)] > 0
    assert samples[("graphengine_model_stream_busy_seconds_total", mlp + (("stream", "0"),))] > 0
    assert samples[("graphengine_model_io_bytes_total", (("binding", "in_place"),) + mlp)] > 0
    for kind in ("arena", "weights"):
        assert samples[("graphengine_model_memory_bytes", (("kind", kind),) + mlp)] > 0


def test_metadata_config_and_repository_control(served) -> None:
    root, start = served
    _, stub = start(model_repository=str(root))
    _wait_ready(stub, "mlp")
    meta = stub.ModelMetadata(pb.ModelMetadataRequest(name="mlp"), timeout=5)
    assert [(t.name, t.datatype, list(t.shape)) for t in meta.inputs] == [("x", "FP32",
                                                                            [-1, 16])]
    config = stub.ModelConfig(pb.ModelConfigRequest(name="mlp"), timeout=5).config
    assert config.max_batch_size == 4 and list(config.input[0].dims) == [16]
    assert config.instance_group[0].count == 1 and not config.HasField("dynamic_batching")
    assert not stub.ModelReady(pb.ModelReadyRequest(name="nope"), timeout=5).ready
    index = stub.RepositoryIndex(pb.RepositoryIndexRequest(), timeout=5)
    assert {m.name: m.state for m in index.models} == {"mlp": "READY", "later": "UNAVAILABLE"}

    onnx.save(MODEL, root / "later.onnx")  # fix the broken model, then load it on request
    load = pb.RepositoryModelLoadRequest(model_name="later")
    load.parameters["config"].string_param = '{"gears": [2], "dynamic_batching": true}'
    stub.RepositoryModelLoad(load, timeout=30)
    config = stub.ModelConfig(pb.ModelConfigRequest(name="later"), timeout=5).config
    assert config.max_batch_size == 2 and list(config.dynamic_batching.preferred_batch_size) == [2]
    stub.RepositoryModelUnload(pb.RepositoryModelUnloadRequest(model_name="later"), timeout=30)
    assert not stub.ModelReady(pb.ModelReadyRequest(name="later"), timeout=5).ready
    code, details = _code(lambda: stub.ModelInfer(
        _request(np.ones((1, 16), np.float32), model_name="later"), timeout=5))
    assert code == grpc.StatusCode.UNAVAILABLE and "unloaded" in details
    code, _ = _code(lambda: stub.RepositoryModelLoad(
        pb.RepositoryModelLoadRequest(model_name="missing"), timeout=5))
    assert code == grpc.StatusCode.NOT_FOUND


def test_without_a_repository_and_strict_readiness(served) -> None:
    root, start = served
    _, stub = start()
    assert stub.ServerLive(pb.ServerLiveRequest(), timeout=5).live
    assert stub.ServerReady(pb.ServerReadyRequest(), timeout=5).ready
    assert list(stub.RepositoryIndex(pb.RepositoryIndexRequest(), timeout=5).models) == []
    code, _ = _code(lambda: stub.ModelInfer(_request(np.ones((1, 16), np.float32)), timeout=5))
    assert code == grpc.StatusCode.NOT_FOUND
    code, _ = _code(lambda: stub.RepositoryModelLoad(
        pb.RepositoryModelLoadRequest(model_name="mlp"), timeout=5))
    assert code == grpc.StatusCode.FAILED_PRECONDITION
    meta = stub.ServerMetadata(pb.ServerMetadataRequest(), timeout=5)
    assert meta.name == "graphengine" and "model_repository" in meta.extensions

    _, strict = start(model_repository=str(root), strict_readiness=True)
    _wait_ready(strict, "mlp")
    assert not strict.ServerReady(pb.ServerReadyRequest(), timeout=5).ready  # "later" failed
