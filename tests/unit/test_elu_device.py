"""Elu runs on the device: alone (oneDNN's eltwise_elu), as a step of an elementwise chain and
as a Conv's epilogue. It ran as a host step (numpy) and cut a TCN's device program in two:
an unseen temporal convolution net 0.306 -> 0.184 ms at batch 1, with LogSoftmax off
oneDNN's reference loops."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from graphengine.engine.importers import load_model
from graphengine.engine.pipeline import compile_graph
from graphengine.engine.runtime import LoadedModel

RNG = np.random.default_rng(9)


def _run(nodes, x, inits=()):
    graph = helper.make_graph(
        nodes, "elu", [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x.shape))],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(v.astype(np.float32), k) for k, v in inits])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    compiled = compile_graph(load_model(model))
    hosts = [p.node for p in compiled.report.placements if p.engine == "host"]
    got = LoadedModel(compiled).execute({"x": x})["y"]
    want = ort.InferenceSession(model.SerializeToString(),
                                providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    return compiled, hosts


@pytest.mark.parametrize("alpha", [1.0, 0.3, 2.5])
def test_elu_alone_runs_on_the_device(alpha):
    x = (RNG.standard_normal((3, 70)) * 4).astype(np.float32)
    x[0, :3] = [-np.inf, 0.0, -0.0]
    compiled, hosts = _run([helper.make_node("Elu", ["x"], ["y"], alpha=alpha)], x)
    assert hosts == []


def test_elu_is_a_convolutions_epilogue_and_a_chain_step():
    x = RNG.standard_normal((1, 8, 20)).astype(np.float32)
    w = RNG.standard_normal((16, 8, 3)) * 0.5
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[2, 2], dilations=[2]),
             helper.make_node("Elu", ["c"], ["e"], alpha=0.7),
             helper.make_node("Mul", ["e", "k"], ["m"]),
             helper.make_node("Elu", ["m"], ["y"])]
    compiled, hosts = _run(nodes, x, [("w", w), ("k", np.array([1.5]))])
    assert hosts == []
    fusions = compiled.report.fusions
    assert any(f.startswith("Conv+Elu") for f in fusions), fusions
    assert any(f.startswith("EltwiseChain(") and "Elu" in f for f in fusions), fusions
