"""Fusion row parallel_convs: a re-parameterizable layer exported in its train-time form
(parallel k x k and 1 x 1 convolutions with their BatchNormalizations, and a
BatchNormalization of the input, summed) is one convolution; held to ONNX Runtime."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from graphengine.engine.importers import load_model
from graphengine.engine.model import DeviceProgram
from graphengine.engine.pipeline import CompileOptions, compile_graph
from graphengine.engine.runtime import load


def _bn(rng, name, c, inits):
    for part, vals in (("g", rng.uniform(0.5, 1.5, c)), ("b", rng.uniform(-0.2, 0.2, c)),
                       ("m", rng.uniform(-0.2, 0.2, c)), ("v", rng.uniform(0.5, 1.5, c))):
        inits.append(numpy_helper.from_array(vals.astype(np.float32), f"{name}_{part}"))
    return [f"{name}_{p}" for p in "gbmv"]


def _repvgg(c=16, out=16, group=1, stride=1, identity=True, tap_branch=False):
    """Relu(BN(Conv3x3(x)) + BN(Conv1x1(x)) [+ BN(x)]); `tap_branch`: the 1x1 branch's
    output is also a graph output (the row must leave it alone)."""
    rng = np.random.default_rng(3)
    inits = [numpy_helper.from_array((rng.standard_normal((out, c // group, k, k)) * 0.3)
                                     .astype(np.float32), f"w{k}") for k in (3, 1)]
    nodes = [helper.make_node("Conv", ["x", "w3"], ["c3"], pads=[1] * 4, group=group,
                              strides=[stride] * 2),
             helper.make_node("BatchNormalization", ["c3", *_bn(rng, "n3", out, inits)], ["b3"]),
             helper.make_node("Conv", ["x", "w1"], ["c1"], group=group, strides=[stride] * 2),
             helper.make_node("BatchNormalization", ["c1", *_bn(rng, "n1", out, inits)], ["b1"]),
             helper.make_node("Add", ["b3", "b1"], ["s"])]
    last = "s"
    if identity:
        nodes += [helper.make_node("BatchNormalization", ["x", *_bn(rng, "ni", c, inits)],
                                   ["bi"]),
                  helper.make_node("Add", ["s", "bi"], ["s2"])]
        last = "s2"
    nodes.append(helper.make_node("Relu", [last], ["y"]))
    outputs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)]
    if tap_branch:
        outputs.append(helper.make_tensor_value_info("b1", TensorProto.FLOAT, None))
    return helper.make_model(helper.make_graph(
        nodes, "repvgg", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, c, 9, 9])],
        outputs, inits), opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def _convs(model, feeds):
    compiled = compile_graph(load_model(model), CompileOptions(lint=True))
    ops = [t.op for p in compiled.programs if isinstance(p, DeviceProgram) for t in p.tasks
           if t.kind == "kernel" and t.op not in ("TransData",)]
    got = load(compiled).execute(feeds)
    want = ort.InferenceSession(model.SerializeToString(), providers=[
        "CPUExecutionProvider"]).run(None, feeds)
    for g, w in zip(got.values(), want):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-4)
    return ops


@pytest.mark.parametrize("group,stride,identity", [
    (1, 1, True), (16, 1, True), (4, 1, True), (1, 2, False), (16, 2, False)])
def test_parallel_branches_are_one_convolution(group, stride, identity):
    feeds = {"x": np.random.default_rng(1).standard_normal((2, 16, 9, 9)).astype(np.float32)}
    ops = _convs(_repvgg(group=group, stride=stride, identity=identity), feeds)
    assert ops == ["Conv"], ops  # one convolution, its Relu a post-op


def test_a_branch_read_elsewhere_stays():
    feeds = {"x": np.random.default_rng(2).standard_normal((2, 16, 9, 9)).astype(np.float32)}
    ops = _convs(_repvgg(tap_branch=True), feeds)
    assert ops.count("Conv") == 2, ops


def test_branches_with_more_channels_out_than_in_merge():
    """16 in, 24 out (no identity branch can exist then): the two convolutions' sum is one."""
    feeds = {"x": np.random.default_rng(3).standard_normal((2, 16, 9, 9)).astype(np.float32)}
    ops = _convs(_repvgg(out=24, identity=False), feeds)
    assert ops == ["Conv"], ops


def test_a_branch_added_to_itself_stays():
    """Add(c, c) of one convolution: no two branches to merge (the row must not take the
    convolution twice)."""
    rng = np.random.default_rng(4)
    w = numpy_helper.from_array((rng.standard_normal((8, 8, 3, 3)) * 0.3).astype(np.float32), "w")
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1] * 4),
             helper.make_node("Add", ["c", "c"], ["y"])]
    model = helper.make_model(helper.make_graph(
        nodes, "twice", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 6, 6])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], [w]),
        opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    ops = _convs(model, {"x": rng.standard_normal((1, 8, 6, 6)).astype(np.float32)})
    assert ops.count("Conv") == 1, ops
