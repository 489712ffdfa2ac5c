"""The repository's Triton layout in process: version folders and policies, config.pbtxt's
declared tensors at load and per request, the model control modes (explicit loads, a poll
picking up new, changed and removed versions and models), and in-flight requests across an
unload. Each model version adds its version number (tests/integration/ge_models.offset_onnx),
so the numbers say which version answered."""

from __future__ import annotations

import os
import pathlib
import shutil
import threading
import time

import numpy as np
import onnx
import pytest

from graphengine.engine.errors import FailedPrecondition, InvalidInput, NotFound, Unavailable
from graphengine.server.core.repository import ControlMode, ModelRepository, ModelState, scan
from graphengine.server.timing import StageTimes
from tests.integration.ge_models import offset_onnx

X = np.arange(12, dtype=np.float32).reshape(3, 4)
POLL_NEVER = 86400.0  # the tests call poll_once themselves


def _version(root: pathlib.Path, name: str, version: int, offset: float | None = None,
             filename: str = "model.onnx") -> None:
    folder = root / name / str(version)
    folder.mkdir(parents=True, exist_ok=True)
    onnx.save(offset_onnx(version if offset is None else offset), folder / filename)


def _config(root: pathlib.Path, name: str, text: str) -> None:
    (root / name).mkdir(parents=True, exist_ok=True)
    (root / name / "config.pbtxt").write_text(text)


def _states(repo: ModelRepository) -> dict[tuple[str, str], str]:
    return {(e.name, e.version): e.state.value for e in repo.index()}


def _settle(repo: ModelRepository, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while any(e.state is ModelState.LOADING for e in repo.index()):
        assert time.monotonic() < deadline, repo.index()
        time.sleep(0.02)


def _infer(repo: ModelRepository, name: str, version: str = "", x: np.ndarray = X,
           outputs=None) -> tuple[str, dict[str, np.ndarray]]:
    times = StageTimes()
    with repo.serving(name, version, times) as model:
        return model.version, model.infer({"x": x}, outputs, None, times)


@pytest.fixture
def repos():
    made: list[ModelRepository] = []

    def make(root: pathlib.Path, **kw) -> ModelRepository:
        repo = ModelRepository(str(root), device=None, **kw)
        made.append(repo)
        repo.start()
        _settle(repo)
        return repo

    yield make
    for repo in made:
        repo.close()


def test_scan_tells_the_layouts_apart(tmp_path: pathlib.Path) -> None:
    _version(tmp_path, "tri", 1)
    _version(tmp_path, "tri", 10)
    (tmp_path / "tri" / "0").mkdir()  # Triton's rule: not a version (leading zero)
    (tmp_path / "tri" / "notes").mkdir()
    _config(tmp_path, "tri", "max_batch_size: 4\n")
    (tmp_path / "flat").mkdir()
    onnx.save(offset_onnx(1), tmp_path / "flat" / "model.onnx")
    (tmp_path / "flat" / "config.pbtxt").write_text("")
    _version(tmp_path, "both", 1)
    (tmp_path / "both" / "config.pbtxt").write_text("")
    (tmp_path / "both" / "config.yaml").write_text("")
    _version(tmp_path, "mixed", 1)
    onnx.save(offset_onnx(1), tmp_path / "mixed" / "model.onnx")
    _config(tmp_path, "nothing", "")
    sources, problems = scan(str(tmp_path))
    assert sorted(sources) == ["flat", "tri"]
    assert sources["tri"].versioned and sources["tri"].config_path.endswith("config.pbtxt")
    assert not sources["flat"].versioned and sources["flat"].model_path.endswith("model.onnx")
    assert "config.yaml and config.pbtxt" in problems["both"]
    assert "version folders (1)" in problems["mixed"]
    assert "0 model files" in problems["nothing"] and "version folders" in problems["nothing"]


def test_versions_are_served_by_policy(tmp_path: pathlib.Path, repos) -> None:
    for v in (1, 2, 3):
        _version(tmp_path, "latest", v)
        _version(tmp_path, "all", v)
        _version(tmp_path, "some", v)
    _config(tmp_path, "all", "version_policy { all { } }")
    _config(tmp_path, "some", "version_policy { specific { versions: [ 1, 3, 7 ] } }")
    _version(tmp_path, "named", 4, filename="net.onnx")
    (tmp_path / "named" / "4" / "other.onnx").write_bytes(b"not a model")  # left alone
    _config(tmp_path, "named", 'default_model_filename: "net.onnx"')
    onnx.save(offset_onnx(1), tmp_path / "plain.onnx")  # the existing forms, side by side
    repo = repos(tmp_path)
    assert _states(repo) == {
        ("all", "1"): "READY", ("all", "2"): "READY", ("all", "3"): "READY",
        ("latest", "3"): "READY", ("named", "4"): "READY", ("plain", "1"): "READY",
        ("some", "1"): "READY", ("some", "3"): "READY", ("some", "7"): "UNAVAILABLE"}
    assert "version folder 7/ does not exist" in {
        (e.name, e.version): e.reason for e in repo.index()}[("some", "7")]
    assert repo.versions("all") == ["1", "2", "3"] and repo.versions("some") == ["1", "3"]
    for name, version, want in [("all", "", 3), ("all", "1", 1), ("all", "2", 2),
                                ("latest", "", 3), ("some", "", 3), ("some", "1", 1),
                                ("named", "", 4), ("plain", "", 1)]:
        served, out = _infer(repo, name, version)
        assert served == str(want)
        np.testing.assert_array_equal(out["y"], X + want)
    with pytest.raises(NotFound, match="model 'latest' has no version '1' .it has '3'."):
        repo.get("latest", "1")
    with pytest.raises(Unavailable, match="version 7 is UNAVAILABLE"):
        repo.get("some", "7")
    with pytest.raises(NotFound, match="no version 'x1'"):
        repo.get("all", "x1")
    assert [m.version for m in repo.models("all")] == ["1", "2", "3"]
    assert [m.version for m in repo.models("all", "2")] == ["2"]


def test_config_pbtxt_declarations_are_checked(tmp_path: pathlib.Path, repos) -> None:
    _version(tmp_path, "good", 1)
    _config(tmp_path, "good", """
        max_batch_size: 4
        input [ { name: "x" data_type: TYPE_FP32 dims: [ 4 ] } ]
        output [ { name: "z" data_type: TYPE_FP32 dims: [ 4 ] } ]
        dynamic_batching { max_queue_delay_microseconds: 100 }
        instance_group [ { count: 2 kind: KIND_CPU } ]""")
    broken = {
        "dtype": ('input [ { name: "x" data_type: TYPE_FP64 dims: [ -1, 4 ] } ]',
                  "input 'x' is declared TYPE_FP64; the model's is float32"),
        "dims": ('max_batch_size: 4 input [ { name: "x" data_type: TYPE_FP32 dims: [ 5 ] } ]',
                 "declared with shape [-1, 5]; the model's is ['batch', 4]"),
        "rank": ('max_batch_size: 4 input [ { name: "x" data_type: TYPE_FP32 dims: [ -1, 4 ] '
                 '} ]', "(with max_batch_size > 0, dims leave out the batch dimension)"),
        "missing": ('input [ { name: "q" data_type: TYPE_FP32 dims: [ 1 ] } ]',
                    "input 'q' is declared but the model has no such input; its inputs are x"),
        "output": ('output [ { name: "w" data_type: TYPE_FP32 dims: [ 1 ] } ]',
                   "output 'w' is declared but the model has no such output"),
    }
    for name, (text, _) in broken.items():
        _version(tmp_path, name, 1)
        _config(tmp_path, name, text)
    (tmp_path / "fixed").mkdir()
    onnx.save(offset_onnx(1, batch=2), tmp_path / "fixed" / "model.onnx")
    (tmp_path / "fixed" / "config.pbtxt").write_text("max_batch_size: 2")
    repo = repos(tmp_path)
    reasons = {e.name: e.reason for e in repo.index()}
    assert _states(repo)[("good", "1")] == "READY"
    for name, (_, words) in broken.items():
        assert _states(repo)[(name, "1")] == "UNAVAILABLE", name
        assert str(tmp_path / name / "config.pbtxt") in reasons[name], reasons[name]
        assert words in reasons[name], reasons[name]
    assert reasons["fixed"].startswith(f"{tmp_path / 'fixed' / 'config.pbtxt'}: model 'fixed': "
                                       f"max_batch_size 2 compiles the model ahead for batch "
                                       f"sizes [1, 2]: ")
    assert "shared symbolic batch dimension" in reasons["fixed"]

    model = repo.get("good")
    assert model.config.instances == 2 and model.batcher is not None
    served, out = _infer(repo, "good")  # no outputs asked for: the declared ones
    assert sorted(out) == ["z"]
    np.testing.assert_array_equal(out["z"], X * 1)
    assert sorted(_infer(repo, "good", outputs=["y"])[1]) == ["y"]
    with pytest.raises(InvalidInput, match="batch of 5 rows exceeds its max_batch_size of 4"):
        _infer(repo, "good", x=np.zeros((5, 4), np.float32))
    with pytest.raises(InvalidInput, match=r"input 'x' has shape \[2, 3\]; the configuration "
                                           r"declares \[-1, 4\]"):
        _infer(repo, "good", x=np.zeros((2, 3), np.float32))


def test_explicit_mode_loads_what_it_is_told(tmp_path: pathlib.Path, repos) -> None:
    for name in ("a", "b", "c"):
        _version(tmp_path, name, 1)
    repo = repos(tmp_path, mode=ControlMode.EXPLICIT, load_models=["a", "ghost"])
    assert _states(repo) == {("a", "1"): "READY", ("b", ""): "UNAVAILABLE",
                             ("c", ""): "UNAVAILABLE", ("ghost", ""): "UNAVAILABLE"}
    reasons = {e.name: e.reason for e in repo.index()}
    assert reasons["b"] == "not loaded" and "'ghost' (--load-model) is not in" in reasons["ghost"]
    with pytest.raises(NotFound):
        repo.get("b")
    repo.load("b")
    assert _infer(repo, "b")[0] == "1"
    repo.unload("a")
    with pytest.raises(Unavailable, match="unloaded"):
        repo.get("a")
    repo.unload("c")  # in the folder, never loaded: nothing to do
    with pytest.raises(NotFound):
        repo.unload("nope")
    every = repos(tmp_path, mode=ControlMode.EXPLICIT, load_models=["*"])
    assert [e.state for e in every.index()] == [ModelState.READY] * 3


def test_poll_picks_up_new_changed_and_removed(tmp_path: pathlib.Path, repos) -> None:
    _version(tmp_path, "m", 1)
    repo = repos(tmp_path, mode=ControlMode.POLL, poll_seconds=POLL_NEVER)
    first = repo.get("m")
    repo.poll_once()  # nothing changed: nothing reloaded
    assert repo.get("m") is first

    _version(tmp_path, "m", 2)  # a new version: it loads, then 1 (no longer latest) unloads
    repo.poll_once()
    assert _states(repo) == {("m", "2"): "READY"} and first.session.closed
    np.testing.assert_array_equal(_infer(repo, "m")[1]["y"], X + 2)

    second = repo.get("m")
    _version(tmp_path, "m", 2, offset=20)  # the same version, changed: reloaded
    os.utime(tmp_path / "m" / "2" / "model.onnx", ns=(1, 1))
    repo.poll_once()
    assert repo.get("m") is not second
    np.testing.assert_array_equal(_infer(repo, "m")[1]["y"], X + 20)

    _config(tmp_path, "m", "version_policy { all { } }")  # a changed config reloads all
    repo.poll_once()
    assert repo.versions("m") == ["1", "2"]

    _config(tmp_path, "m", "version_policy { bogus { } }")  # broken: what serves stays
    repo.poll_once()
    assert repo.versions("m") == ["1", "2"]
    for entry in repo.index():
        assert entry.state is ModelState.READY
        assert entry.reason.startswith("serving, but the model's last change did not load: ")
        assert 'config.pbtxt:1:18: model \'m\': not a valid model configuration' in entry.reason
    (tmp_path / "m" / "config.pbtxt").unlink()

    shutil.rmtree(tmp_path / "m" / "2")  # a removed version unloads; 1 is the latest again
    repo.poll_once()
    assert _states(repo) == {("m", "1"): "READY"}

    _version(tmp_path, "n", 5)  # a new model loads, a removed one goes
    shutil.rmtree(tmp_path / "m")
    repo.poll_once()
    assert _states(repo) == {("n", "5"): "READY"}
    with pytest.raises(NotFound):
        repo.get("m")
    with pytest.raises(FailedPrecondition, match="model control mode is poll"):
        repo.load("n")
    with pytest.raises(FailedPrecondition, match="model control mode is poll"):
        repo.unload("n")


def test_an_unload_waits_for_requests_in_flight(tmp_path: pathlib.Path, repos) -> None:
    _version(tmp_path, "m", 1)
    repo = repos(tmp_path, mode=ControlMode.POLL, poll_seconds=POLL_NEVER)
    times = StageTimes()
    with repo.serving("m", "", times) as model:  # a request holds version 1 ...
        shutil.rmtree(tmp_path / "m" / "1")
        _version(tmp_path, "m", 2)
        poll = threading.Thread(target=repo.poll_once)
        poll.start()  # ... while a poll replaces it with version 2
        deadline = time.monotonic() + 60
        while _states(repo).get(("m", "1")) != "UNLOADING":
            assert time.monotonic() < deadline and poll.is_alive(), _states(repo)
            time.sleep(0.01)
        assert _infer(repo, "m")[0] == "2"  # new requests: the new version
        out = model.infer({"x": X}, None, None, times)  # the held one still runs on 1
        np.testing.assert_array_equal(out["y"], X + 1)
        assert not model.session.closed
    poll.join(timeout=60)
    assert not poll.is_alive() and model.session.closed
    assert _states(repo) == {("m", "2"): "READY"}


def test_offline_model_versions(tmp_path: pathlib.Path, repos) -> None:
    from graphengine.server.core.session import Session

    with Session() as session:  # an offline model compiled for batch sizes 1, 2 and 4
        data = session.export_model(session.add_graph(offset_onnx(3), gears=[1, 2, 4]))
    for name in ("geom", "mismatch"):
        (tmp_path / name / "3").mkdir(parents=True)
        (tmp_path / name / "3" / "model.geom").write_bytes(data)
    _config(tmp_path, "geom", 'platform: "graphengine_offline" max_batch_size: 4\n'
                              'input [ { name: "x" data_type: TYPE_FP32 dims: [ 4 ] } ]')
    _config(tmp_path, "mismatch", 'backend: "graphengine" max_batch_size: 8')
    repo = repos(tmp_path)
    assert _states(repo) == {("geom", "3"): "READY", ("mismatch", "3"): "UNAVAILABLE"}
    served, out = _infer(repo, "geom")
    assert served == "3" and repo.get("geom").config.gears == (1, 2, 4)
    np.testing.assert_array_equal(out["y"], X + 3)
    reason = {e.name: e.reason for e in repo.index()}["mismatch"]
    assert "max_batch_size 8 compiles the model ahead for batch sizes [1, 2, 4, 8]" in reason
    assert "runs the gears it was compiled for ([1, 2, 4])" in reason
