"""Canonical forms: 1-D pools as 2-D pools of a view, InstanceNormalization as LayerNorm;
each exact against ONNX Runtime and placed on the device."""

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from graphengine.engine.importers import load_model
from graphengine.engine.pipeline import CompileOptions, compile_graph
from graphengine.engine.runtime import LoadedModel


def _check(node, x, inits=(), opset=17, device=True):
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info(
        "x", TensorProto.FLOAT, list(x.shape))], [helper.make_tensor_value_info(
            "y", TensorProto.FLOAT, None)], list(inits))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)],
                              ir_version=8)
    compiled = compile_graph(load_model(model), CompileOptions(lint=True))
    if device:
        assert {p.engine for p in compiled.report.placements} == {"device"}, \
            compiled.report.render()
    got = LoadedModel(compiled).execute({"x": x})["y"]
    want = ort.InferenceSession(model.SerializeToString(),
                                providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


X3 = np.random.default_rng(0).standard_normal((2, 5, 23)).astype(np.float32)


@pytest.mark.parametrize("op,attrs", [
    ("MaxPool", dict(kernel_shape=[3], strides=[2], pads=[1, 1])),
    ("MaxPool", dict(kernel_shape=[4], strides=[3], ceil_mode=1)),
    ("MaxPool", dict(kernel_shape=[3], dilations=[2])),  # the host's: no dilated device pool
    ("AveragePool", dict(kernel_shape=[5], strides=[2], pads=[2, 1], count_include_pad=1)),
    ("AveragePool", dict(kernel_shape=[5], strides=[2], pads=[2, 1], count_include_pad=0)),
    ("GlobalAveragePool", {}),
    ("GlobalMaxPool", {}),
])
def test_one_dimensional_pools_run_as_two_dimensional_ones(op, attrs):
    _check(helper.make_node(op, ["x"], ["y"], **attrs), X3, device="dilations" not in attrs)


@pytest.mark.parametrize("shape", [(2, 4, 19), (1, 3, 6, 7)])
def test_instance_normalization_runs_as_layer_normalization(shape):
    rng = np.random.default_rng(1)
    x = (rng.standard_normal(shape) * 3 + 1).astype(np.float32)
    c = shape[1]
    inits = [numpy_helper.from_array(rng.uniform(0.5, 1.5, c).astype(np.float32), "s"),
             numpy_helper.from_array(rng.standard_normal(c).astype(np.float32), "b")]
    _check(helper.make_node("InstanceNormalization", ["x", "s", "b"], ["y"], epsilon=1e-3),
           x, inits)
