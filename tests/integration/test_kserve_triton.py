"""KServe v2 against the real server with the real, unmodified `tritonclient[grpc]`.

The repository holds a ResNet-18-size ONNX model (symbolic batch, gears 1 and 4, dynamic
batching) and a broken one; tritonclient runs in its own process (see triton_probe.py).
"""

from __future__ import annotations

import importlib.util
import json
import pathlib
import subprocess
import sys

import numpy as np
import onnx
import pytest

from tests import zoo

from .ge_models import ort_run

# tritonclient comes with the test extra (make test installs it): its absence is a failure.
assert importlib.util.find_spec("tritonclient"), "tritonclient missing: pip install '.[test]'"
PROBE = pathlib.Path(__file__).with_name("triton_probe.py")


@pytest.fixture(scope="module")
def repository(tmp_path_factory) -> tuple[pathlib.Path, onnx.ModelProto]:
    root = tmp_path_factory.mktemp("repository")
    model = zoo.resnet(batch="batch")  # ResNet-18: 11.7M parameters, 224x224 input
    (root / "resnet18").mkdir()
    onnx.save(model, root / "resnet18" / "model.onnx")
    (root / "resnet18" / "config.yaml").write_text(
        "gears: [1, 4]\ndynamic_batching:\n  max_queue_delay_ms: 2\n")
    (root / "broken.onnx").write_bytes(b"not a model")
    return root, model


def test_tritonclient_against_the_server(server_process, repository, tmp_path) -> None:
    root, model = repository
    proc = server_process("--model-repository", str(root))
    x = np.random.default_rng(0).standard_normal((1, 3, 224, 224)).astype(np.float32)
    np.savez(tmp_path / "in.npz", input=x)
    done = subprocess.run([sys.executable, str(PROBE), proc.address, "resnet18",
                           str(tmp_path / "in.npz"), str(tmp_path / "out.npz")],
                          capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr + proc.logs()
    summary = json.loads(done.stdout)

    assert summary["live"] and summary["ready"] and summary["model_ready"]
    meta = summary["metadata"]
    assert meta["name"] == "resnet18" and meta["versions"] == ["1"]
    assert meta["inputs"] == [{"name": "input", "datatype": "FP32",
                               "shape": ["-1", "3", "224", "224"]}]
    assert meta["outputs"] == [{"name": "output", "datatype": "FP32", "shape": ["-1", "1000"]}]
    assert summary["config"]["max_batch_size"] == 4
    assert summary["config"]["dynamic_batching"]["preferred_batch_size"] == [1, 4]

    expected = ort_run(model, {"input": x})["output"]
    with np.load(tmp_path / "out.npz") as out:
        assert sorted(out.files) == ["async", "infer", "stream_req-0", "stream_req-1",
                                     "stream_req-2"]
        for key in out.files:
            assert out[key].shape == (1, 1000), key
            np.testing.assert_allclose(out[key], expected, rtol=1e-3, atol=2e-3, err_msg=key)
    assert summary["stream_ids"] == ["req-0", "req-1", "req-2"]
    assert len(summary["stream_errors"]) == 1 and "no-such-model" in summary["stream_errors"][0]
    assert summary["unknown_model_status"] == "StatusCode.NOT_FOUND"

    stats = summary["statistics"]
    assert stats["name"] == "resnet18"
    assert int(stats["inference_count"]) == 5  # infer + async + 3 streamed, one row each
    assert 1 <= int(stats["execution_count"]) <= 5
    success = stats["inference_stats"]["success"]
    assert int(success["count"]) == 5 and int(success["ns"]) > 0
    assert int(stats["inference_stats"]["compute_infer"]["ns"]) > 0

    states = {m["name"]: m.get("state") for m in summary["index"]}
    assert states == {"broken": "UNAVAILABLE", "resnet18": "READY"}
    assert proc.terminate() == 0
