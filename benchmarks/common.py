"""Shared benchmark helpers: model cache location, random inputs, ONNX Runtime runs.

This module is torch-free (numpy + onnx, and onnxruntime only when ``ort_run`` or
``ort_latency`` is called) so it can be imported by anything that needs model inputs.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import onnx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository root
from tests import zoo

MODEL_NAMES = ("mlp", "resnet18", "mobilenetv2", "bert_mini", "minilm6", "branchy")


def model_cache_dir() -> Path:
    """``$GE_MODEL_CACHE`` or ``~/.cache/graphengine/models`` (outside the git tree)."""
    env = os.environ.get("GE_MODEL_CACHE")
    if env:
        return Path(env).expanduser()
    return Path.home() / ".cache" / "graphengine" / "models"


def model_path(name_or_path: str | os.PathLike) -> Path:
    """Resolve a model name (``"resnet18"``) to its cached file, or pass a path through."""
    p = Path(name_or_path)
    if p.suffix == ".onnx" or p.exists():
        return p
    return model_cache_dir() / f"{name_or_path}.onnx"


def _load(model_or_path) -> onnx.ModelProto:
    if isinstance(model_or_path, onnx.ModelProto):
        return model_or_path
    # Weights are not needed for the signature, except the vocab size, which only needs dims.
    return onnx.load(str(model_path(model_or_path)), load_external_data=False)


def random_inputs(
    name_or_path, batch: int = 1, seed: int = 0, dims: dict | None = None
) -> dict[str, np.ndarray]:
    """Random inputs for a model given by name (cache), path, or ModelProto."""
    # One rule for valid random feeds, shared with the tests (tests/zoo.py is torch-free).
    return zoo.random_inputs(_load(name_or_path), seed=seed, batch=batch, dims=dims)


def bench_inputs(model: str, batch: int) -> tuple[Path, dict, dict | None]:
    """(path, batch-1 feeds, batch-N feeds or None when the model has no batch axis) for a
    benchmark model: `zoo/NAME` is a zoo model, whose recorded batch-1 inputs (valid token
    ids, masks, ...) are repeated along the batch axis; anything else random inputs."""
    if model.startswith("zoo/"):
        name = model[4:]
        folder = model_cache_dir() / "zoo" / name
        meta = json.loads((folder / "meta.json").read_text())
        with np.load(folder / "ref_b1.npz") as data:
            small = {k[6:]: data[k] for k in data.files if k.startswith("input:")}
        big = None
        if meta.get("batched") and all(a.ndim and a.shape[0] == 1 for a in small.values()):
            big = {k: np.ascontiguousarray(np.repeat(a, batch, axis=0)) for k, a in small.items()}
        return folder / "model.onnx", small, big
    path = model_path(model)
    return path, random_inputs(path, batch=1, seed=0), random_inputs(path, batch=batch, seed=1)


def ort_session(path, threads: int = 2):
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    so.log_severity_level = 3
    src = path.SerializeToString() if isinstance(path, onnx.ModelProto) else str(model_path(path))
    return ort.InferenceSession(src, so, providers=["CPUExecutionProvider"])


def ort_run(path, inputs: dict[str, np.ndarray], threads: int = 2) -> dict[str, np.ndarray]:
    """Run a model (name, path or ModelProto) once with onnxruntime on CPU."""
    sess = ort_session(path, threads)
    names = [o.name for o in sess.get_outputs()]
    return dict(zip(names, sess.run(names, inputs)))


def ort_latency(
    path, inputs: dict[str, np.ndarray], threads: int = 2, runs: int = 20, warmup: int = 3
) -> float:
    """Median wall-clock latency (seconds) of ``runs`` onnxruntime runs after ``warmup``."""
    sess = ort_session(path, threads)
    for _ in range(warmup):
        sess.run(None, inputs)
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        sess.run(None, inputs)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def op_types(model_or_path) -> list[str]:
    """Sorted set of op types in a model's main graph."""
    model = _load(model_or_path)
    return sorted({n.op_type for n in model.graph.node})
