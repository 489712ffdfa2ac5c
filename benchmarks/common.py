"""Shared benchmark helpers: model cache location, random inputs, ONNX Runtime runs.

This module is torch-free (numpy + onnx, and onnxruntime only when ``ort_run`` or
``ort_latency`` is called) so it can be imported by anything that needs model inputs.
"""

from __future__ import annotations

import os
import statistics
import time
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto

MODEL_NAMES = ("mlp", "resnet18", "mobilenetv2", "bert_mini", "minilm6", "branchy")

# Ops through which an integer input keeps meaning "token ids" on its way to a Gather.
_PASS_THROUGH = {"Cast", "Reshape", "Flatten", "Unsqueeze", "Squeeze", "Identity", "Expand"}

_NP_TYPES = {
    TensorProto.FLOAT: np.float32,
    TensorProto.DOUBLE: np.float64,
    TensorProto.FLOAT16: np.float16,
    TensorProto.INT64: np.int64,
    TensorProto.INT32: np.int32,
    TensorProto.INT8: np.int8,
    TensorProto.UINT8: np.uint8,
    TensorProto.BOOL: np.bool_,
}

DEFAULT_DYNAMIC_DIM = 128  # value used for a symbolic non-batch dimension (e.g. sequence)


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


def _gather_vocab(graph: onnx.GraphProto, name: str) -> int | None:
    """First dim of the Gather table that ``name`` indexes (following shape-only ops)."""
    tables = {init.name: list(init.dims) for init in graph.initializer}
    for node in graph.node:
        if node.op_type == "Constant" and node.attribute:
            attr = node.attribute[0]
            if attr.name == "value":
                tables[node.output[0]] = list(attr.t.dims)
    consumers: dict[str, list[onnx.NodeProto]] = {}
    for node in graph.node:
        for inp in node.input:
            consumers.setdefault(inp, []).append(node)
    seen, frontier = {name}, [name]
    while frontier:
        cur = frontier.pop()
        for node in consumers.get(cur, []):
            if node.op_type == "Gather" and len(node.input) > 1 and node.input[1] == cur:
                dims = tables.get(node.input[0])
                axis = next((a.i for a in node.attribute if a.name == "axis"), 0)
                if dims and axis == 0:
                    return int(dims[0])
            elif node.op_type in _PASS_THROUGH and node.input[0] == cur:
                for out in node.output:
                    if out not in seen:
                        seen.add(out)
                        frontier.append(out)
    return None


def _concrete_shape(vi: onnx.ValueInfoProto, batch: int, dims: dict | None) -> list[int]:
    shape = []
    for i, d in enumerate(vi.type.tensor_type.shape.dim):
        if d.HasField("dim_value") and d.dim_value > 0:
            shape.append(int(d.dim_value))
        elif dims and d.dim_param in dims:
            shape.append(int(dims[d.dim_param]))
        elif i == 0:
            shape.append(batch)
        else:
            shape.append(DEFAULT_DYNAMIC_DIM)
    return shape


def make_random_inputs(
    model: onnx.ModelProto, batch: int = 1, seed: int = 0, dims: dict | None = None
) -> dict[str, np.ndarray]:
    """Valid random inputs for ``model``'s graph inputs (initializers excluded).

    float: standard normal. Integer inputs feeding a Gather: ids in ``[0, vocab)``. Inputs named
    like an attention mask: ones with a few trailing zeros per row. Other integers: 0 or 1.
    Symbolic dims: the first is ``batch``; others come from ``dims`` by name, else 128.
    """
    rng = np.random.default_rng(seed)
    graph = model.graph
    inits = {i.name for i in graph.initializer}
    out: dict[str, np.ndarray] = {}
    for vi in graph.input:
        if vi.name in inits:
            continue
        elem = vi.type.tensor_type.elem_type
        dtype = _NP_TYPES.get(elem)
        if dtype is None:
            raise ValueError(f"input {vi.name}: unsupported element type {elem}")
        shape = _concrete_shape(vi, batch, dims)
        if np.issubdtype(dtype, np.floating):
            out[vi.name] = rng.standard_normal(shape).astype(dtype)
        elif dtype is np.bool_:
            out[vi.name] = np.ones(shape, dtype=np.bool_)
        elif "mask" in vi.name.lower():
            mask = np.ones(shape, dtype=dtype)
            if len(shape) >= 2 and shape[-1] > 1:
                flat = mask.reshape(-1, shape[-1])
                for row in range(flat.shape[0]):
                    zeros = int(rng.integers(1, max(2, shape[-1] // 8) + 1))
                    zeros = min(zeros, shape[-1] - 1)
                    flat[row, shape[-1] - zeros :] = 0
            out[vi.name] = mask
        else:
            vocab = _gather_vocab(graph, vi.name)
            high = vocab if vocab else 2
            out[vi.name] = rng.integers(0, high, size=shape).astype(dtype)
    return out


def random_inputs(
    name_or_path, batch: int = 1, seed: int = 0, dims: dict | None = None
) -> dict[str, np.ndarray]:
    """Random inputs for a model given by name (cache), path, or ModelProto."""
    return make_random_inputs(_load(name_or_path), batch=batch, seed=seed, dims=dims)


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
