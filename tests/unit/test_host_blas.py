"""numpy's BLAS runs host steps on the calling thread (engine/host_blas.py): its own pool of
spinning threads took the device team's cores (a small Mixtral's host expert matmuls: 163 ms
a run against 5.6 ms). The BLAS is found and asked here independently of the engine's code,
through the library numpy mapped."""

from __future__ import annotations

import ctypes

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from graphengine.engine.importers import load_model
from graphengine.engine.pipeline import CompileOptions, compile_graph
from graphengine.engine.runtime import LoadedModel


def _openblas():
    """numpy's OpenBLAS (path, get, set), read from the process's own mappings."""
    for line in open("/proc/self/maps"):
        path = line.rsplit(None, 1)[-1]
        if "openblas" in path.lower() and path.startswith("/"):
            lib = ctypes.CDLL(path)
            for suffix in ("scipy_openblas_{}_num_threads64_", "openblas_{}_num_threads64_",
                           "openblas_{}_num_threads"):
                get = getattr(lib, suffix.format("get"), None)
                if get is not None:
                    return path, get, getattr(lib, suffix.format("set"))
    return None


@pytest.fixture
def blas_threads():
    """numpy's OpenBLAS set to two threads (as numpy starts on a 2-core machine); yields its
    get-threads entry point."""
    blas = _openblas()
    if blas is None:
        pytest.skip("this numpy is built on another BLAS than OpenBLAS (PyPI's wheels, which "
                    "the project installs, carry OpenBLAS): no OpenBLAS pool to check")
    _, get, set_ = blas
    set_(ctypes.c_int(2))
    assert get() == 2
    return get


def _host_matmul_model():
    """A MatMul after a NonZero: its rows are data-dependent, so it runs on the host."""
    w = np.random.default_rng(3).standard_normal((8, 16)).astype(np.float32)
    nodes = [helper.make_node("NonZero", ["m"], ["nz"]),
             helper.make_node("Reshape", ["nz", "flat"], ["rows"]),
             helper.make_node("Gather", ["x", "rows"], ["picked"], axis=0),
             helper.make_node("MatMul", ["picked", "w"], ["y"])]
    graph = helper.make_graph(
        nodes, "host_matmul",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [6, 8]),
         helper.make_tensor_value_info("m", TensorProto.BOOL, [6])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(w, "w"),
         numpy_helper.from_array(np.array([-1], np.int64), "flat")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), w


def test_a_model_with_host_steps_runs_numpys_blas_on_one_thread(blas_threads):
    model, w = _host_matmul_model()
    compiled = compile_graph(load_model(model), CompileOptions(lint=True))
    assert {p.engine for p in compiled.report.placements if p.op_type == "MatMul"} == {"host"}
    loaded = LoadedModel(compiled)
    assert blas_threads() == 1
    x = np.random.default_rng(4).standard_normal((6, 8)).astype(np.float32)
    m = np.array([1, 0, 1, 1, 0, 1], bool)
    np.testing.assert_allclose(loaded.execute({"x": x, "m": m})["y"], x[m] @ w, rtol=1e-5,
                               atol=1e-5)


def test_compiling_a_graph_runs_numpys_blas_on_one_thread(blas_threads):
    """Constant folding multiplies in numpy: OpenBLAS's woken pool spun on into the first
    run (a fresh process's first run of a 0.3 ms model stalled 77-94 ms in 6 of 8)."""
    a = np.random.default_rng(5).standard_normal((64, 64)).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["a", "a"], ["aa"]),
         helper.make_node("Add", ["x", "aa"], ["y"])],
        "folded", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [64, 64])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(a, "a")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    compiled = compile_graph(load_model(model), CompileOptions(lint=True))
    assert blas_threads() == 1
    assert [p.op_type for p in compiled.report.placements] == ["Add"]  # the MatMul folded
    x = np.ones((64, 64), np.float32)
    np.testing.assert_allclose(LoadedModel(compiled).execute({"x": x})["y"], x + a @ a,
                               rtol=1e-4, atol=1e-4)
