"""Split -> one Conv per channel part -> Concat (MixNet's mixed depthwise kernels and its
grouped pointwise convolutions) is one convolution; held to ONNX Runtime, and the forms it
cannot merge stay as they are and stay correct."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from graphengine.engine.importers import load_model
from graphengine.engine.pipeline import CompileOptions, compile_graph
from graphengine.engine.runtime import DeviceProgram, LoadedModel

RNG = np.random.default_rng(12)
F = TensorProto.FLOAT


def _model(parts, channels, hw=12, bias=True, extra_reader=False):
    """x [1, C, hw, hw] split into `parts` (out, in, k, group, pads, strides) convs."""
    split = [p[1] for p in parts]
    inits = [numpy_helper.from_array(np.array(split, np.int64), "split")]
    nodes = [helper.make_node("Split", ["x", "split"], [f"p{i}" for i in range(len(parts))],
                              axis=1)]
    for i, (m, c, k, group, pads, strides) in enumerate(parts):
        w = (RNG.standard_normal((m, c // group, k, k)) * 0.3).astype(np.float32)
        ins = [f"p{i}", f"w{i}"]
        inits.append(numpy_helper.from_array(w, f"w{i}"))
        if bias:
            inits.append(numpy_helper.from_array(RNG.standard_normal(m).astype(np.float32),
                                                 f"b{i}"))
            ins.append(f"b{i}")
        nodes.append(helper.make_node("Conv", ins, [f"c{i}"], kernel_shape=[k, k], group=group,
                                      pads=pads, strides=strides))
    nodes.append(helper.make_node("Concat", [f"c{i}" for i in range(len(parts))], ["cat"],
                                  axis=1))
    nodes.append(helper.make_node("Relu", ["cat"], ["y"]))
    outputs = [helper.make_tensor_value_info("y", F, None)]
    if extra_reader:
        nodes.append(helper.make_node("Neg", ["c0"], ["z"]))
        outputs.append(helper.make_tensor_value_info("z", F, None))
    graph = helper.make_graph(nodes, "split_convs", [helper.make_tensor_value_info(
        "x", F, [1, channels, hw, hw])], outputs, inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    return model, {"x": RNG.standard_normal((1, channels, hw, hw)).astype(np.float32)}


def _run(model, feeds):
    compiled = compile_graph(load_model(model), CompileOptions(lint=True))
    got = LoadedModel(compiled).execute(feeds)
    want = ort.InferenceSession(model.SerializeToString(), providers=[
        "CPUExecutionProvider"]).run(None, feeds)
    for name, w in zip([o.name for o in model.graph.output], want):
        np.testing.assert_allclose(got[name], w, rtol=1e-5, atol=1e-5)
    return [t.op for p in compiled.programs if isinstance(p, DeviceProgram) for t in p.tasks
            if t.kind == "kernel"]


@pytest.mark.parametrize("width", [8, 16])  # per part: block-diagonal dense / grouped
def test_equal_dense_parts_are_one_convolution(width):
    same = [0, 0, 0, 0]
    kinds = _run(*_model([(2 * width, width, 1, 1, same, [1, 1])] * 2, 2 * width))
    assert "Split" not in kinds and "Concat" not in kinds and kinds.count("Conv") <= 1, kinds


@pytest.mark.parametrize("stride", [1, 2])
@pytest.mark.parametrize("bias", [True, False])
def test_mixed_depthwise_kernels_are_one_depthwise_convolution(stride, bias):
    parts = [(c, c, k, c, [k // 2] * 4, [stride, stride])
             for c, k in ((8, 3), (6, 5), (10, 7), (4, 9))]
    kinds = _run(*_model(parts, 28, hw=15, bias=bias))
    assert "Split" not in kinds and "Concat" not in kinds, kinds


@pytest.mark.parametrize("case", ["unequal_dense", "valid_padding", "read_elsewhere",
                                  "growth"])
def test_what_it_cannot_merge_stays_and_is_correct(case):
    same = [0, 0, 0, 0]
    if case == "unequal_dense":
        model = _model([(8, 8, 1, 1, same, [1, 1]), (8, 4, 1, 1, same, [1, 1])], 12)
    elif case == "valid_padding":  # not "same": the merged kernel would shift the windows
        model = _model([(8, 8, 3, 8, same, [1, 1]), (8, 8, 5, 8, [1] * 4, [1, 1])], 16)
    elif case == "read_elsewhere":
        model = _model([(8, 8, 1, 1, same, [1, 1])] * 2, 16, extra_reader=True)
    else:  # a 1x1 part beside a 9x9 one: 81 times its work
        model = _model([(16, 16, 1, 16, same, [1, 1]), (2, 2, 9, 2, [4] * 4, [1, 1])], 18)
    kinds = _run(*model)
    assert "Concat" in kinds or kinds.count("Conv") > 1, kinds
