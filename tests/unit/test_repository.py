"""The model repository: folder layouts, per-model YAML, background loading and states,
reload and unload, and serving with statistics."""

from __future__ import annotations

import pathlib
import time

import numpy as np
import onnx
import pytest

from graphengine.engine.errors import InvalidInput, NotFound, Unavailable
from graphengine.server.core import model_config
from graphengine.server.core.repository import ModelRepository, ModelState, scan
from graphengine.server.timing import StageTimes
from tests.integration.ge_models import mlp_onnx, ort_run


def _write(path: pathlib.Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def test_scan_names_models_after_folders_and_files(tmp_path: pathlib.Path) -> None:
    (tmp_path / "alpha").mkdir()
    onnx.save(mlp_onnx(), tmp_path / "alpha" / "whatever.onnx")
    _write(tmp_path / "alpha" / "config.yaml", "instances: 2\n")
    onnx.save(mlp_onnx(), tmp_path / "beta.onnx")
    _write(tmp_path / "beta.yaml", "gears: [1]\n")
    (tmp_path / "gamma.om").write_bytes(b"GEOM")
    (tmp_path / "empty").mkdir()
    (tmp_path / "two").mkdir()
    (tmp_path / "two" / "a.onnx").write_bytes(b"")
    (tmp_path / "two" / "b.onnx").write_bytes(b"")
    _write(tmp_path / "README.md", "not a model")
    sources, problems = scan(str(tmp_path))
    assert sorted(sources) == ["alpha", "beta", "gamma"]
    assert sources["alpha"].model_path.endswith("whatever.onnx")
    assert sources["alpha"].config_path.endswith("config.yaml")
    assert sources["beta"].config_path.endswith("beta.yaml")
    assert sources["gamma"].config_path is None
    assert "none" in problems["empty"] and "a.onnx, b.onnx" in problems["two"]


def test_model_config_parsing_and_errors() -> None:
    cfg = model_config.parse({"gears": [16, 1, 4], "instances": 2,
                              "dynamic_batching": {"max_queue_delay_ms": 3}}, "c.yaml")
    assert cfg.gears == (1, 4, 16) and cfg.instances == 2 and cfg.max_batch_size == 16
    assert cfg.dynamic_batching.max_queue_delay_ms == 3.0
    assert model_config.parse(None, "c.yaml") == model_config.ModelConfig()
    assert model_config.parse_text('{"gears": [2]}', "p").gears == (2,)
    for values, culprit in [({"gear": [1]}, "gear"), ({"instances": 0}, "instances"),
                            ({"dynamic_batching": {}}, "needs gears"),
                            ({"gears": [2], "dynamic_batching": {"max_batch_size": 4}},
                             "exceeds"),
                            ({"gears": [2], "dynamic_batching": {"delay": 1}}, "delay"),
                            ({"gears": "1,2"}, "list"), ([1], "mapping")]:
        with pytest.raises(InvalidInput, match=culprit) as info:
            model_config.parse(values, "models/m/config.yaml")
        assert "models/m/config.yaml" in str(info.value)


def _wait(repo: ModelRepository, name: str, timeout: float = 30.0) -> ModelState:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        state = {e.name: e.state for e in repo.index()}[name]
        if state is not ModelState.LOADING:
            return state
        time.sleep(0.02)
    raise TimeoutError(name)


def test_repository_loads_serves_reloads_and_unloads(tmp_path: pathlib.Path) -> None:
    model = mlp_onnx(batch="batch", seed=2)
    (tmp_path / "mlp").mkdir()
    onnx.save(model, tmp_path / "mlp" / "model.onnx")
    _write(tmp_path / "mlp" / "config.yaml",
           "gears: [1, 4]\ninstances: 2\ndynamic_batching: {max_queue_delay_ms: 1}\n")
    (tmp_path / "bad.onnx").write_bytes(b"garbage")
    repo = ModelRepository(str(tmp_path), device=None, load_threads=2)
    repo.start()
    assert _wait(repo, "mlp") is ModelState.READY
    assert _wait(repo, "bad") is ModelState.UNAVAILABLE
    bad = {e.name: e for e in repo.index()}["bad"]
    assert "not an ONNX model" in bad.reason
    assert not repo.all_ready() and [e.name for e in repo.index(ready_only=True)] == ["mlp"]
    with pytest.raises(Unavailable, match="UNAVAILABLE: .*ONNX"):
        repo.get("bad")
    with pytest.raises(NotFound):
        repo.get("nope")
    with pytest.raises(NotFound, match="version '2'"):
        repo.get("mlp", "2")

    x = np.random.default_rng(0).standard_normal((3, 16)).astype(np.float32)
    times = StageTimes("ModelInfer")
    with repo.serving("mlp", "1", times) as served:
        out = served.infer({"x": x}, None, None, times)
    np.testing.assert_allclose(out["y"], ort_run(model, {"x": x})["y"], rtol=1e-4, atol=1e-5)
    stats = repo.get("mlp").stats.snapshot()
    assert stats.success.count == 1 and stats.inference_count == 3
    assert stats.execution_count == 1 and list(stats.batches) == [3]
    assert times.model == "mlp" and times.seconds["execute"] > 0
    assert repo.device_bytes > 0 and repo.state_counts()["READY"] == 1

    old = repo.get("mlp")
    repo.load("mlp", '{"gears": [2]}')  # reload with a config given in the request
    assert repo.get("mlp") is not old and repo.get("mlp").config.gears == (2,)
    assert old.session.closed
    with pytest.raises(NotFound):
        repo.load("../etc")
    repo.unload("mlp")
    assert {e.name: e.state for e in repo.index()}["mlp"] is ModelState.UNAVAILABLE
    with pytest.raises(Unavailable, match="unloaded"):
        repo.get("mlp")
    repo.load("mlp")
    assert repo.get("mlp").config.instances == 2  # from its file again
    repo.close()


def test_repository_needs_a_folder(tmp_path: pathlib.Path) -> None:
    with pytest.raises(InvalidInput, match="not a folder"):
        ModelRepository(str(tmp_path / "missing"), device=None)
