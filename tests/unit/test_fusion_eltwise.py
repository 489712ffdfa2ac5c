"""Chains of elementwise ops fused into one EltwiseChain kernel (optimize/fusion_eltwise)."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from graphengine.engine.importers import load_model
from graphengine.engine.ir import Engine
from graphengine.engine.optimize.fusion.eltwise import match_chain
from graphengine.engine.pipeline import CompileOptions, compile_graph
from graphengine.engine.prepare.infer_shapes import infer_shapes
from graphengine.engine.runtime import LoadedModel

RNG = np.random.default_rng(11)


def _model(nodes, shape, inits=None, outputs=("y",)):
    graph = helper.make_graph(
        nodes, "chain", [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
        [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in outputs],
        initializer=[numpy_helper.from_array(np.asarray(v, np.float32), k)
                     for k, v in (inits or {}).items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def _run(model, shape):
    compiled = compile_graph(load_model(model), CompileOptions(lint=True))
    x = RNG.standard_normal(shape).astype(np.float32)
    got = LoadedModel(compiled).execute({"x": x})
    want = ort.InferenceSession(model.SerializeToString(), providers=[
        "CPUExecutionProvider"]).run(None, {"x": x})
    for g, w in zip(got.values(), want):
        np.testing.assert_allclose(g, w, rtol=2e-5, atol=2e-6)
    ops = [p.op_type for p in compiled.report.placements]
    return compiled.report.fusions, ops


@pytest.mark.parametrize("shape", [[7], [2, 3, 5], [1, 8, 4, 4], [3, 1]])
def test_swish_scale_shift_tanh_chain_is_one_kernel(shape):
    nodes = [helper.make_node("Sigmoid", ["x"], ["s"]),
             helper.make_node("Mul", ["x", "s"], ["m"]),            # swish: x * sigmoid(x)
             helper.make_node("Mul", ["half", "m"], ["h"]),         # scalar, on the left
             helper.make_node("Add", ["h", "w"], ["a"]),            # full-shape constant
             helper.make_node("Tanh", ["a"], ["t"]),
             helper.make_node("Div", ["t", "two"], ["d"]),
             helper.make_node("Sub", ["d", "x"], ["y"])]            # the chain's input again
    fusions, ops = _run(_model(nodes, shape, {"half": 0.5, "two": 2.0,
                                              "w": RNG.standard_normal(shape)}), shape)
    assert ops == ["EltwiseChain"], ops
    assert fusions == ["EltwiseChain(Sigmoid+Mul+Mul+Add+Tanh+Div+Sub): 7 nodes -> "
                       + fusions[0].rsplit(" ", 1)[-1]]


def test_parameterised_unary_steps_match_onnxruntime():
    nodes = [helper.make_node("LeakyRelu", ["x"], ["l"], alpha=0.2),
             helper.make_node("Clip", ["l", "lo", "hi"], ["c"]),
             helper.make_node("HardSigmoid", ["c"], ["h"], alpha=0.3, beta=0.4),
             helper.make_node("Gelu", ["h"], ["g"], approximate="tanh"),
             helper.make_node("Abs", ["g"], ["a"]),
             helper.make_node("Sqrt", ["a"], ["q"]),
             helper.make_node("Reciprocal", ["q"], ["r"]),
             helper.make_node("Neg", ["r"], ["n"]),
             helper.make_node("Exp", ["n"], ["e"]),
             helper.make_node("HardSwish", ["e"], ["y"])]
    model = helper.make_model(helper.make_graph(
        nodes, "chain", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 6])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        initializer=[numpy_helper.from_array(np.float32(-0.5), "lo"),
                     numpy_helper.from_array(np.float32(0.7), "hi")]),
        opset_imports=[helper.make_opsetid("", 20)])
    model.ir_version = 9
    fusions, ops = _run(model, [4, 6])
    assert ops == ["EltwiseChain"] and len(fusions) == 1, (ops, fusions)


def _on_device(graph):
    """The imported graph as the fusion rows see it: shapes inferred, every node on the
    device, in one partition."""
    infer_shapes(graph)
    for n in graph.nodes:
        n.meta.engine, n.meta.partition = Engine.DEVICE, 0
    return graph


def test_chain_stops_at_shared_values_graph_outputs_and_broadcasts():
    """The chain row's own matching: a chain ends where its value is read twice, at a graph
    output and before a broadcast operand. The compiler then fuses the whole region (a DAG:
    r read twice, two outputs) as one EltwiseGraph instead."""
    nodes = [helper.make_node("Relu", ["x"], ["r"]),
             helper.make_node("Tanh", ["r"], ["t"]),      # r also read below: chain ends at r
             helper.make_node("Mul", ["r", "t"], ["m"]),  # Tanh -> Mul: a chain (r operand)
             helper.make_node("Exp", ["m"], ["out1"]),    # graph output: the chain ends here
             helper.make_node("Add", ["out1", "row"], ["b"]),  # row [1,5] broadcasts: no step
             helper.make_node("Sigmoid", ["b"], ["y"])]
    model = _model(nodes, [3, 5], {"row": RNG.standard_normal((1, 5))}, outputs=("out1", "y"))
    graph = _on_device(load_model(model))
    exp = next(n for n in graph.nodes if n.op_type == "Exp")
    chain_nodes, steps = match_chain(graph, exp)
    assert [n.op_type for n in chain_nodes] == ["Tanh", "Mul", "Exp"]
    assert match_chain(graph, next(n for n in graph.nodes if n.op_type == "Sigmoid")) is None
    fusions, ops = _run(model, [3, 5])
    assert [f.split(" ->")[0] for f in fusions] == ["EltwiseGraph(6 ops, 2 inputs, 2 outputs)"]
    assert ops == ["EltwiseGraph"], ops


def test_per_channel_steps_and_gelu_after_a_normalization_are_one_chain():
    """A per-channel [C, 1] Mul and Add of a rank-3 output, then GELU: one pass. (After a
    LayerNormalization whose scale varies along the positions, so no group norm: that one
    with its affine and activation is a GroupNorm, test_fusion_group_norm.py.) A 4-D output's
    per-channel steps stay apart (they run in a convolution region's format)."""
    nodes = [helper.make_node("LayerNormalization", ["x", "s", "z"], ["n"], axis=-1),
             helper.make_node("Mul", ["n", "w"], ["m"]),
             helper.make_node("Add", ["m", "b"], ["a"]),
             helper.make_node("Gelu", ["a"], ["y"], domain="")]
    inits = {"s": RNG.standard_normal(40), "z": np.zeros(40), "w": RNG.standard_normal((6, 1)),
             "b": RNG.standard_normal((6, 1))}
    model = _model(nodes, [2, 6, 40], inits)
    model.opset_import[0].version = 20  # Gelu
    fusions, ops = _run(model, [2, 6, 40])
    assert any(f.startswith("EltwiseChain(Mul+Add+Gelu)") for f in fusions), fusions
    assert [op for op in ops if op != "Reshape"] == ["LayerNormalization", "EltwiseChain"], ops

    nodes = [helper.make_node("Mul", ["x", "w4"], ["m"]),
             helper.make_node("Relu", ["m"], ["y"])]
    fusions, ops = _run(_model(nodes, [2, 6, 5, 5], {"w4": RNG.standard_normal((6, 1, 1))}),
                        [2, 6, 5, 5])
    assert not any(f.startswith("EltwiseChain") for f in fusions), fusions


def test_a_chain_that_starts_at_a_lower_rank_operand_of_equal_size():
    """Found by the fuzz harness: Add(c[1], x[1,1,1]) starting a chain took the constant
    (the first of two one-element inputs) as its running value, whose shape is not the
    output's; the chain then had no first step and fusion crashed (INTERNAL)."""
    nodes = [helper.make_node("Add", ["c", "x"], ["a"]),
             helper.make_node("Relu", ["a"], ["y"])]
    fusions, ops = _run(_model(nodes, [1, 1, 1], {"c": [0.25]}), [1, 1, 1])
    assert fusions and fusions[0].startswith("EltwiseChain(Add+Relu)"), fusions
    assert ops[-1] == "EltwiseChain", ops


def test_sub_with_the_running_value_on_the_right_is_not_a_step():
    nodes = [helper.make_node("Relu", ["x"], ["r"]),
             helper.make_node("Sub", ["one", "r"], ["y"])]  # 1 - r: not dst - src1
    model = _model(nodes, [2, 3], {"one": 1.0})
    graph = _on_device(load_model(model))
    assert match_chain(graph, graph.nodes[-1]) is None  # no chain: Relu alone is one step
    fusions, ops = _run(model, [2, 3])
    # the elementwise region takes what the chain cannot
    assert [f.split(" ->")[0] for f in fusions] == ["EltwiseGraph(2 ops, 2 inputs, 1 outputs)"]
    assert ops == ["EltwiseGraph"], ops


def test_nchw_chain_between_convolutions_stays_channels_last():
    w = RNG.standard_normal((4, 4, 3, 3)).astype(np.float32) * 0.2
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("Sigmoid", ["c"], ["s"]),
             helper.make_node("Mul", ["c", "s"], ["m"]),
             helper.make_node("Mul", ["m", "m"], ["z"]),  # not a scalar: not the Conv's
             helper.make_node("Add", ["z", "k"], ["z2"]),
             helper.make_node("Conv", ["z2", "w"], ["y"], pads=[1, 1, 1, 1])]
    model = _model(nodes, [1, 4, 6, 6], {"w": w, "k": 1.5})
    compiled = compile_graph(load_model(model))
    fusions, ops = _run(model, [1, 4, 6, 6])
    assert ops.count("EltwiseChain") == 1
    assert sum(op == "TransData" for op in ops) == 2  # graph input and output only
    # x * sigmoid(x) is the Conv's Swish epilogue; the square and shift are one chain
    assert any(f.startswith("Conv+Swish") for f in compiled.report.fusions)
    assert any(f.startswith("EltwiseChain(Mul+Add)") for f in compiled.report.fusions)


def test_a_lone_scalar_binary_between_convolutions_keeps_their_layout():
    """Mul by a scalar constant is layout-agnostic (the scalar broadcasts alike in every
    format), as the runtime's elementwise rule says: no conversion around it. (The residual
    sum keeps the Mul from folding into the Conv's weights; without an activation it is no
    linear step after one either.)"""
    w = RNG.standard_normal((4, 4, 3, 3)).astype(np.float32) * 0.2
    nodes = [helper.make_node("Conv", ["x", "w"], ["c0"], pads=[1, 1, 1, 1]),
             helper.make_node("Add", ["c0", "x"], ["c"]),
             helper.make_node("Mul", ["c", "k"], ["z"]),
             helper.make_node("Conv", ["z", "w"], ["y"], pads=[1, 1, 1, 1])]
    fusions, ops = _run(_model(nodes, [1, 4, 6, 6], {"w": w, "k": 1.5}), [1, 4, 6, 6])
    assert ops == ["TransData", "Conv", "Mul", "Conv", "TransData"], ops
