"""The zoo's fast subset (torch-free models built with onnx.helper) through `make zoo`'s own
runner: built into a fresh model cache, each model checked in a subprocess of its own at two
batch sizes, with and without gears, against ONNX Runtime."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
ZOO = ROOT / "benchmarks" / "zoo"
sys.path.insert(0, str(ZOO))
import catalog  # noqa: E402
import models  # noqa: E402,F401  (registers every builder)

FAST = sorted(n for n, e in catalog.REGISTRY.items() if e.fast)


@pytest.fixture(scope="module")
def results(tmp_path_factory) -> dict[str, dict]:
    cache = tmp_path_factory.mktemp("models")
    env = {**os.environ, "GE_MODEL_CACHE": str(cache)}
    build = subprocess.run([sys.executable, str(ZOO / "build.py"), "--fast"], env=env,
                           capture_output=True, text=True, timeout=300)
    assert build.returncode == 0, build.stdout + build.stderr
    out = cache / "zoo.json"
    subprocess.run([sys.executable, str(ZOO / "run.py"), "--fast", "--timeout", "120",
                    "--out", str(out)], env=env, capture_output=True, text=True, timeout=900)
    return {r["name"]: r for r in json.loads(out.read_text())["results"]}


def test_the_fast_subset_is_at_least_ten_models_of_several_families():
    assert len(FAST) >= 10
    assert {catalog.REGISTRY[n].family for n in FAST} >= {"vision", "text", "audio",
                                                           "segmentation", "detection"}


@pytest.mark.parametrize("name", FAST)
def test_zoo_model_matches_onnxruntime(results, name):
    r = results[name]
    assert r["verdict"] == "pass", json.dumps(r, indent=1)[:3000]
    plain = r["plain"]
    assert plain["max_diff"] < 1e-3 and set(plain["batches"]) == (
        {"1", "3"} if catalog.REGISTRY[name].batched else {"1"})
    if catalog.REGISTRY[name].batched:  # every output follows the batch: gears apply
        assert r["gears"]["verdict"] == "pass", r["gears"]
