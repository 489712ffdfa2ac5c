"""A ScatterND writing one contiguous slice of the last axis (torch's export of
`k[..., a:b] = u`) is a Concat of data's Slices and the updates (prepare/slice_scatter.py);
any other index pattern stays a scatter. Held to ONNX Runtime."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from graphengine.engine.importers import load_model
from graphengine.engine.model import DeviceProgram
from graphengine.engine.pipeline import CompileOptions, compile_graph
from graphengine.engine.runtime import load


def _scatter(indices: np.ndarray, upd_shape):
    nodes = [helper.make_node("Relu", ["x"], ["d"]),
             helper.make_node("ScatterND", ["d", "idx", "u"], ["y"])]
    return helper.make_model(helper.make_graph(nodes, "slice_assign", [
        helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 8]),
        helper.make_tensor_value_info("u", TensorProto.FLOAT, list(upd_shape))],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(indices.astype(np.int64), "idx")]),
        opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def _grid(a: int, b: int) -> np.ndarray:
    g = np.indices((2, 3, b - a))
    g[-1] += a
    return np.moveaxis(g, 0, -1)


def _run(model, upd_shape):
    rng = np.random.default_rng(0)
    feeds = {"x": rng.standard_normal((2, 3, 8)).astype(np.float32),
             "u": rng.standard_normal(upd_shape).astype(np.float32)}
    compiled = compile_graph(load_model(model), CompileOptions(lint=True))
    ops = [t.op for p in compiled.programs if isinstance(p, DeviceProgram) for t in p.tasks
           if t.kind == "kernel"]
    got = load(compiled).execute(feeds)["y"]
    want = ort.InferenceSession(model.SerializeToString(), providers=[
        "CPUExecutionProvider"]).run(None, feeds)[0]
    np.testing.assert_array_equal(got, want)
    return ops


@pytest.mark.parametrize("a,b", [(0, 5), (5, 8), (2, 6), (0, 8)])
def test_a_slice_assignment_is_a_concat(a, b):
    ops = _run(_scatter(_grid(a, b), (2, 3, b - a)), (2, 3, b - a))
    assert "ScatterND" not in ops, ops


def test_other_index_patterns_stay_scatters():
    g = _grid(2, 6)
    g[0, 0, 0, -1], g[0, 0, 1, -1] = g[0, 0, 1, -1], g[0, 0, 0, -1]  # two columns swapped
    ops = _run(_scatter(g, (2, 3, 4)), (2, 3, 4))
    assert "ScatterND" in ops, ops
