"""Helpers of the device-coverage tests: one-node ONNX models compiled, placed and run, and
compared with the op's numpy reference (the host engine's kernel) or onnxruntime."""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
from onnx import helper, numpy_helper

from graphengine.engine import ops
from graphengine.engine.importers import load_model
from graphengine.engine.model import CompiledModel
from graphengine.engine.pipeline import CompileOptions, compile_graph
from graphengine.engine.runtime import load

RNG = np.random.default_rng(16)
ONNX_TYPES = {np.dtype(np.float32): 1, np.dtype(np.uint8): 2, np.dtype(np.int8): 3,
              np.dtype(np.int32): 6, np.dtype(np.int64): 7, np.dtype(np.bool_): 9,
              np.dtype(np.float64): 11}


def model(op: str, feeds: dict[str, np.ndarray], consts: dict[str, np.ndarray | None],
          attrs: dict[str, Any] | None = None, n_outputs: int = 1, opset: int = 18):
    """A one-node model: `feeds` are graph inputs, `consts` initializers (None: an omitted
    optional input), in the order feeds then consts."""
    names = list(feeds) + [k if v is not None else "" for k, v in consts.items()]
    outs = [f"y{i}" for i in range(n_outputs)]
    node = helper.make_node(op, names, outs, **(attrs or {}))
    graph = helper.make_graph(
        [node], op.lower(),
        [helper.make_tensor_value_info(k, ONNX_TYPES[v.dtype], list(v.shape))
         for k, v in feeds.items()],
        [onnx.ValueInfoProto(name=o) for o in outs],
        [numpy_helper.from_array(v, k) for k, v in consts.items() if v is not None])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)],
                             ir_version=8)


def engines(compiled: CompiledModel) -> dict[str, str]:
    """op type -> engine of the compiled graph's nodes (the compile report's placements)."""
    return {p.op_type: p.engine for p in compiled.report.placements}


def native_bf16() -> bool:
    """Whether this CPU multiplies bfloat16 natively (AMX or AVX512_BF16), where kernels
    that may multiply in bf16 (integer operands, weight-only 8-bit MatMuls) do."""
    flags = set()
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("flags"):
                flags.update(line.split(":", 1)[1].split())
    return bool({"amx_bf16", "avx512_bf16"} & flags)


def compile_model(m, **options: Any) -> CompiledModel:
    return compile_graph(load_model(m), CompileOptions(lint=True, **options))


def run_device(m, feeds: dict[str, np.ndarray], op: str, **options: Any) -> list[np.ndarray]:
    """Compiles `m`, asserts `op` runs on the device, runs it; the outputs in order."""
    compiled = compile_model(m, **options)
    placed = {p.op_type: p for p in compiled.report.placements}
    assert placed[op].engine == "device", placed[op].rejections
    return list(load(compiled).execute(feeds).values())


def reference(m, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    """The one node's numpy reference kernel (what the host engine runs)."""
    graph = load_model(m)
    (node,) = graph.nodes
    values = [None if v is None else feeds[v.name] if v.name in feeds else v.const
              for v in node.inputs]
    return ops.run_node(node, values)


def onnxruntime(m, feeds: dict[str, np.ndarray], optimize: bool = True) -> list[np.ndarray]:
    """ONNX Runtime's outputs; `optimize=False`: with its graph rewrites off (some, e.g.
    DequantizeLinear -> MatMul as MatMulNBits, change the arithmetic)."""
    so = ort.SessionOptions()
    if not optimize:
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    return ort.InferenceSession(m.SerializeToString(), so,
                                providers=["CPUExecutionProvider"]).run(None, feeds)


def check(op: str, feeds: dict[str, np.ndarray], consts: dict[str, np.ndarray | None] | None = None,
          attrs: dict[str, Any] | None = None, n_outputs: int = 1, exact: bool = False,
          with_ort: bool = True, rtol: float = 1e-5, atol: float = 1e-5, opset: int = 18
          ) -> list[np.ndarray]:
    """Runs the one-node model on the device and compares with the numpy reference and
    (unless `with_ort` is off) onnxruntime: bit for bit when `exact`, else to tolerance."""
    m = model(op, feeds, consts or {}, attrs, n_outputs, opset)
    got = run_device(m, feeds, op)
    refs = [reference(m, feeds)] + ([onnxruntime(m, feeds)] if with_ort else [])
    for want in refs:
        assert len(got) == len(want)
        for g, w in zip(got, want):
            assert g.dtype == w.dtype and g.shape == w.shape, (g.dtype, g.shape, w.dtype, w.shape)
            if exact or g.dtype.kind in "biu":
                np.testing.assert_array_equal(g, w)
            else:
                np.testing.assert_allclose(g, w, rtol=rtol, atol=atol)
    return got


def randn(*shape: int, dtype: Any = np.float32) -> np.ndarray:
    return RNG.standard_normal(shape).astype(dtype)


def randint(lo: int, hi: int, *shape: int, dtype: Any = np.int64) -> np.ndarray:
    return RNG.integers(lo, hi, shape).astype(dtype)
