"""A Triton-layout model repository (`name/<version>/model.onnx` + `config.pbtxt`) served by
a real server process, driven by the unmodified `tritonclient.grpc` and `tritonclient.http`
(in a process of their own: triton_steps.py): versions, explicit load and unload, a poll
picking up a new version and a removal while requests keep coming.

Every model is x -> (y = x + c, z = x * c) with c its version number (ge_models.offset_onnx),
and the inputs are x[i, :] = i, so each answer says which version computed it.
"""

from __future__ import annotations

import importlib.util
import json
import pathlib
import subprocess
import sys

import onnx
import pytest

from graphengine.server.rest.routes import HTTP_STATUS

from .ge_models import mlp_onnx, offset_onnx

assert importlib.util.find_spec("tritonclient"), "tritonclient missing: pip install '.[test]'"
STEPS = pathlib.Path(__file__).with_name("triton_steps.py")

ADD_CONFIG = """
name: "add"
backend: "onnxruntime"
max_batch_size: 8
input [ { name: "x" data_type: TYPE_FP32 dims: [ 4 ] } ]
output [ { name: "y" data_type: TYPE_FP32 dims: [ 4 ] } ]
dynamic_batching { max_queue_delay_microseconds: 500 }
instance_group [ { count: 2 kind: KIND_CPU } ]
version_policy: { all { } }
"""


def _version(root: pathlib.Path, name: str, version: int) -> None:
    (root / name / str(version)).mkdir(parents=True)
    onnx.save(offset_onnx(version), root / name / str(version) / "model.onnx")


def _drive(protocol: str, steps: list[dict], tmp: pathlib.Path, proc) -> list[dict]:
    address = proc.address if protocol == "grpc" else proc.http_address
    (tmp / "steps.json").write_text(json.dumps(steps))
    done = subprocess.run([sys.executable, str(STEPS), protocol, address, str(tmp / "steps.json"),
                           str(tmp / "results.json")], capture_output=True, text=True,
                          timeout=600, check=False)
    assert done.returncode == 0, done.stderr + proc.logs()
    results = json.loads((tmp / "results.json").read_text())
    assert len(results) == len(steps)
    return results


def _failed(result: dict, code: str) -> str:
    """The error's message, once its status is `code` (gRPC's name, or HTTP's number)."""
    assert "error" in result, result
    assert result["error"]["status"] in (f"StatusCode.{code}", str(HTTP_STATUS[code])), result
    return result["error"]["message"]


def _ints(values) -> list[int]:
    return [int(v) for v in values]


def _ok(result: dict):
    assert "ok" in result, result
    return result["ok"]


def _rows(rows: int, offset: float, features: int = 4) -> list[list[float]]:
    return [[float(i + offset)] * features for i in range(rows)]


@pytest.fixture
def repository(tmp_path: pathlib.Path) -> pathlib.Path:
    root = tmp_path / "models"
    for v in (1, 2):
        _version(root, "add", v)
    (root / "add" / "config.pbtxt").write_text(ADD_CONFIG)
    for v in (1, 2, 3):
        _version(root, "latest", v)  # no config: Triton's defaults (latest 1, from the model)
    _version(root, "bad", 1)
    (root / "bad" / "config.pbtxt").write_text(
        'max_batch_size: 4\ninput [ { name: "x" data_type: TYPE_FP32 dims: [4] }\n')
    _version(root, "gpu", 1)
    (root / "gpu" / "config.pbtxt").write_text("instance_group [ { kind: KIND_GPU } ]\n")
    onnx.save(mlp_onnx(batch="batch"), root / "mlp.onnx")  # the YAML form, beside
    (root / "mlp.yaml").write_text("gears: [1, 4]\n")
    return root


@pytest.mark.parametrize("protocol", ["grpc", "http"])
def test_a_triton_repository_serves(server_process, repository, tmp_path, protocol) -> None:
    proc = server_process("--model-repository", str(repository))
    steps = [
        {"do": "wait_ready", "model": "add", "version": "1"},
        {"do": "wait_ready", "model": "add", "version": "2"},
        {"do": "wait_ready", "model": "latest"},
        {"do": "wait_ready", "model": "mlp"},
        {"do": "infer", "model": "add", "rows": 3},
        {"do": "infer", "model": "add", "version": "1", "rows": 3},
        {"do": "infer", "model": "add", "rows": 9},
        {"do": "infer", "model": "latest", "rows": 2},
        {"do": "infer", "model": "latest", "version": "1"},
        {"do": "infer", "model": "mlp", "rows": 2, "features": 16},
        {"do": "metadata", "model": "add"},
        {"do": "config", "model": "add"},
        {"do": "statistics", "model": "add"},
        {"do": "index"},
        {"do": "infer", "model": "gpu"},
    ]
    r = _drive(protocol, steps, tmp_path, proc)
    assert all(_ok(x) is True for x in r[:4])
    latest = _ok(r[4])  # no version asked: the highest ready one; the declared output only
    assert latest == {"version": "2", "outputs": {"y": _rows(3, 2)}}
    assert _ok(r[5]) == {"version": "1", "outputs": {"y": _rows(3, 1)}}
    assert "batch of 9 rows exceeds its max_batch_size of 8" in _failed(r[6], "INVALID_ARGUMENT")
    assert _ok(r[7]) == {"version": "3", "outputs": {"y": _rows(2, 3), "z": [[0.0] * 4,
                                                                              [3.0] * 4]}}
    assert "no version '1'" in _failed(r[8], "NOT_FOUND")  # latest 1: only 3 is served
    assert _ok(r[9])["version"] == "1" and len(_ok(r[9])["outputs"]["y"]) == 2

    meta = _ok(r[10])
    assert meta["versions"] == ["1", "2"] and meta["platform"] == "onnxruntime_onnx"
    (x,) = meta["inputs"]
    assert (x["name"], x["datatype"], _ints(x["shape"])) == ("x", "FP32", [-1, 4])
    config = _ok(r[11])
    assert int(config["max_batch_size"]) == 8 and "all" in config["version_policy"]
    (x,) = config["input"]
    assert (x["name"], x["data_type"], _ints(x["dims"])) == ("x", "TYPE_FP32", [4])
    assert int(config["instance_group"][0]["count"]) == 2
    assert int(config["dynamic_batching"]["max_queue_delay_microseconds"]) == 500
    stats = {s["version"]: s for s in _ok(r[12])["model_stats"]}
    assert sorted(stats) == ["1", "2"]
    assert int(stats["1"]["inference_stats"]["success"]["count"]) == 1

    index = {(m["name"], m.get("version", "")): m for m in _ok(r[13])}
    assert {k: m.get("state") for k, m in index.items()} == {
        ("add", "1"): "READY", ("add", "2"): "READY", ("latest", "3"): "READY",
        ("mlp", "1"): "READY", ("bad", ""): "UNAVAILABLE", ("gpu", ""): "UNAVAILABLE"}
    bad = index[("bad", "")]["reason"]
    assert f"{repository / 'bad' / 'config.pbtxt'}:3:1: model 'bad'" in bad
    assert "instance_group[0].kind: KIND_GPU" in index[("gpu", "")]["reason"]
    assert "KIND_GPU" in _failed(r[14], "UNAVAILABLE")
    assert proc.terminate() == 0


@pytest.mark.parametrize("protocol", ["grpc", "http"])
def test_explicit_model_control(server_process, repository, tmp_path, protocol) -> None:
    proc = server_process("--model-repository", str(repository), "--model-control-mode",
                          "explicit", "--load-model", "add")
    steps = [
        {"do": "wait_ready", "model": "add", "version": "2"},
        {"do": "index"},
        {"do": "infer", "model": "latest"},
        {"do": "load", "model": "latest"},
        {"do": "infer", "model": "latest"},
        {"do": "unload", "model": "add"},
        {"do": "ready", "model": "add"},
        {"do": "infer", "model": "add"},
        # a configuration given with the load, in Triton's JSON form
        {"do": "load", "model": "add", "config": json.dumps(
            {"max_batch_size": 2, "version_policy": {"specific": {"versions": [1]}}})},
        {"do": "infer", "model": "add", "rows": 2},
        {"do": "infer", "model": "add", "rows": 3},
        {"do": "load", "model": "gpu"},
        {"do": "load", "model": "nope"},
    ]
    r = _drive(protocol, steps, tmp_path, proc)
    assert _ok(r[0]) is True
    states = {(m["name"], m.get("version", "")): m.get("state") for m in _ok(r[1])}
    assert states[("add", "1")] == states[("add", "2")] == "READY"
    assert states[("latest", "")] == states[("mlp", "")] == "UNAVAILABLE"  # not loaded
    _failed(r[2], "NOT_FOUND")
    assert _ok(r[3]) is True and _ok(r[4])["version"] == "3"
    assert _ok(r[5]) is True and _ok(r[6]) is False
    assert "unloaded" in _failed(r[7], "UNAVAILABLE")
    assert _ok(r[8]) is True
    assert _ok(r[9]) == {"version": "1", "outputs": {"y": _rows(2, 1), "z": _rows(2, 0)}}
    assert "max_batch_size of 2" in _failed(r[10], "INVALID_ARGUMENT")
    assert "KIND_GPU" in _failed(r[11], "INVALID_ARGUMENT")
    _failed(r[12], "NOT_FOUND")
    assert proc.terminate() == 0


def test_poll_picks_up_a_new_version_and_a_removal(server_process, tmp_path) -> None:
    root, staging = tmp_path / "models", tmp_path / "staging"
    _version(root, "m", 1)
    _version(staging, "m", 2)
    _version(staging, "n", 7)
    proc = server_process("--model-repository", str(root), "--model-control-mode", "poll",
                          "--repository-poll-secs", "0.2")
    steps = [
        {"do": "wait_ready", "model": "m", "version": "1"},
        {"do": "move", "src": str(staging / "m" / "2"), "dst": str(root / "m" / "2")},
        # requests keep coming while version 2 loads and version 1 is unloaded
        {"do": "infer_until_ready", "model": "m", "version": "2", "rows": 2},
        {"do": "wait_gone", "model": "m", "version": "1"},
        {"do": "infer", "model": "m", "rows": 2},
        {"do": "remove", "path": str(root / "m" / "2")},
        {"do": "infer_until_ready", "model": "m", "version": "1", "rows": 2},
        {"do": "wait_gone", "model": "m", "version": "2"},
        {"do": "move", "src": str(staging / "n"), "dst": str(root / "n")},
        {"do": "wait_ready", "model": "n", "version": "7"},
        {"do": "remove", "path": str(root / "m")},
        {"do": "wait_gone", "model": "m"},
        {"do": "index"},
        {"do": "unload", "model": "n"},
        {"do": "infer", "model": "n"},
    ]
    r = _drive("grpc", steps, tmp_path, proc)
    assert _ok(r[0]) is True and _ok(r[1]) is True
    during = _ok(r[2])
    assert during["errors"] == [] and set(during["versions"]) <= {"1", "2"}
    assert _ok(r[3]) is True
    assert _ok(r[4]) == {"version": "2", "outputs": {"y": _rows(2, 2), "z": [[0.0] * 4,
                                                                              [2.0] * 4]}}
    back = _ok(r[6])
    assert back["errors"] == [] and set(back["versions"]) <= {"1", "2"}
    assert _ok(r[7]) is True and _ok(r[9]) is True and _ok(r[11]) is True
    assert [(m["name"], m.get("version"), m.get("state")) for m in _ok(r[12])] == [
        ("n", "7", "READY")]
    assert "model control mode is poll" in _failed(r[13], "FAILED_PRECONDITION")
    assert _ok(r[14])["version"] == "7"  # the refused unload changed nothing
    assert proc.terminate() == 0
