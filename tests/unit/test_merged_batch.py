"""Attention written with bmm over a merged [B*H] axis (BLOOM's ALiBi baddbmm) is lifted back
to [B, H] and fused; the lifting rows (Transpose, MatMul, elementwise ops of a merge view)
are exact against ONNX Runtime and leave what they cannot lift as it is."""

import numpy as np
from onnx import TensorProto, helper, numpy_helper

from graphengine.engine.importers import load_model
from graphengine.engine.pipeline import CompileOptions, compile_graph
from tests.unit.test_fusion_rope import run_against_ort

RNG = np.random.default_rng(3)
B, H, S, D = 2, 4, 6, 8
F = TensorProto.FLOAT


def _const(name, value):
    return numpy_helper.from_array(np.asarray(value), name)


def _bmm_attention():
    """BLOOM's attention core: Q, K, V [B, H, S, D] merged to [B*H, S, D]; scores =
    (Q Kᵀ) * scale + alibi [B*H, 1, S]; split to [B, H, S, S] for the mask and Softmax;
    merged again for P·V; split and the heads merged back."""
    inits = [_const("m3", np.array([B * H, S, D], np.int64)),
             _const("s4", np.array([B, H, S, S], np.int64)),
             _const("p3", np.array([B * H, S, S], np.int64)),
             _const("y4", np.array([B, H, S, D], np.int64)),
             _const("scale", np.float32(D ** -0.5))]
    nodes = [helper.make_node("Reshape", ["q", "m3"], ["q3"]),
             helper.make_node("Reshape", ["k", "m3"], ["k3"]),
             helper.make_node("Transpose", ["k3"], ["kt3"], perm=[0, 2, 1]),
             helper.make_node("Reshape", ["v", "m3"], ["v3"]),
             helper.make_node("MatMul", ["q3", "kt3"], ["qk"]),
             helper.make_node("Mul", ["qk", "scale"], ["scaled"]),
             helper.make_node("Add", ["scaled", "alibi"], ["biased"]),
             helper.make_node("Reshape", ["biased", "s4"], ["s"]),
             helper.make_node("Add", ["s", "mask"], ["masked"]),
             helper.make_node("Softmax", ["masked"], ["p"], axis=-1),
             helper.make_node("Reshape", ["p", "p3"], ["p3v"]),
             helper.make_node("MatMul", ["p3v", "v3"], ["ctx3"]),
             helper.make_node("Reshape", ["ctx3", "y4"], ["ctx"]),
             helper.make_node("Transpose", ["ctx"], ["y"], perm=[0, 2, 1, 3])]
    inputs = [helper.make_tensor_value_info(n, F, [B, H, S, D]) for n in "qkv"]
    inputs += [helper.make_tensor_value_info("alibi", F, [B * H, 1, S]),
               helper.make_tensor_value_info("mask", F, [B, 1, S, S])]
    graph = helper.make_graph(nodes, "bmm_attention", inputs,
                              [helper.make_tensor_value_info("y", F, None)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)],
                              ir_version=8)
    feeds = {n: RNG.standard_normal((B, H, S, D)).astype(np.float32) for n in "qkv"}
    feeds["alibi"] = RNG.standard_normal((B * H, 1, S)).astype(np.float32)
    feeds["mask"] = np.where(RNG.random((B, 1, S, S)) < 0.8, 0, -1e9).astype(np.float32)
    return model, feeds


def test_bmm_attention_over_merged_heads_is_one_fused_attention():
    _, kinds = run_against_ort(*_bmm_attention())
    assert sorted(kinds) == ["Add", "FusedAttention"], kinds  # the Add sums alibi and mask


def _lifts(nodes, inputs, inits, feeds):
    """y against ONNX Runtime; the device kernels; and each op's output shape after stage 1."""
    graph = helper.make_graph(nodes, "lift", inputs,
                              [helper.make_tensor_value_info("y", F, None)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)],
                              ir_version=8)
    got, kinds = run_against_ort(model, feeds)
    prepared = {}

    def seen(stage, g):
        if stage == "prepare":
            prepared.update((n.op_type, n.outputs[0].meta.shape) for n in g.nodes)
    compile_graph(load_model(model), CompileOptions(lint=True), on_stage=seen)
    return got, kinds, prepared


def test_a_sub_with_a_per_item_operand_keeps_its_order_when_lifted():
    """c - merge(x) with c [B*H, 1, 1]: the Sub runs on [B, H, S, D] with c viewed as
    [B, H, 1, 1], its operands in their order."""
    c = RNG.standard_normal((B * H, 1, 1)).astype(np.float32)
    inits = [_const("m3", np.array([B * H, S, D], np.int64)), _const("c", c)]
    nodes = [helper.make_node("Reshape", ["x", "m3"], ["x3"]),
             helper.make_node("Sub", ["c", "x3"], ["d"]),
             helper.make_node("Relu", ["d"], ["y"])]
    feeds = {"x": RNG.standard_normal((B, H, S, D)).astype(np.float32)}
    got, _, prepared = _lifts(nodes, [helper.make_tensor_value_info("x", F, [B, H, S, D])],
                              inits, feeds)
    np.testing.assert_allclose(got, np.maximum(c - feeds["x"].reshape(B * H, S, D), 0),
                               rtol=1e-6)
    assert prepared["Sub"] == (B, H, S, D), prepared


def test_merged_operands_of_different_items_are_not_lifted():
    """A [2, 3, ...] and B [3, 2, ...] both merge to 6, but item i of one is not item i of
    the other's [B, H]: the MatMul stays 3-D (and exact)."""
    inits = [_const("m3", np.array([6, 4, 4], np.int64))]
    nodes = [helper.make_node("Reshape", ["a", "m3"], ["a3"]),
             helper.make_node("Reshape", ["b", "m3"], ["b3"]),
             helper.make_node("MatMul", ["a3", "b3"], ["y"])]
    inputs = [helper.make_tensor_value_info("a", F, [2, 3, 4, 4]),
              helper.make_tensor_value_info("b", F, [3, 2, 4, 4])]
    feeds = {"a": RNG.standard_normal((2, 3, 4, 4)).astype(np.float32),
             "b": RNG.standard_normal((3, 2, 4, 4)).astype(np.float32)}
    got, kinds, prepared = _lifts(nodes, inputs, inits, feeds)
    assert got.shape == (6, 4, 4) and prepared["MatMul"] == (6, 4, 4), prepared


def test_a_long_chain_of_lifts_completes_and_stays_on_the_device():
    """A residual stream over a merged axis, twelve Adds long (MobileViT's transformer
    layers): each lift enables the next, and the rewrite types what it makes, so the chain
    lifts in one sweep. Lifted one prepare round a step, it outlasted the stage's eight
    rounds and left the last ops untyped: placed on the host between two device programs."""
    n = 12
    inits = [_const("m3", np.array([B * H, S, D], np.int64)),
             _const("y4", np.array([B, H, S, D], np.int64))]
    inits += [_const(f"c{i}", RNG.standard_normal((B * H, 1, D)).astype(np.float32))
              for i in range(n)]
    nodes = [helper.make_node("Reshape", ["x", "m3"], ["h0"])]
    nodes += [helper.make_node("Add", [f"h{i}", f"c{i}"], [f"h{i + 1}"]) for i in range(n)]
    nodes += [helper.make_node("Reshape", [f"h{n}", "y4"], ["r"]),
              helper.make_node("LayerNormalization", ["r", "gamma"], ["y"], axis=-1)]
    inits.append(_const("gamma", np.ones(D, np.float32)))
    feeds = {"x": RNG.standard_normal((B, H, S, D)).astype(np.float32)}
    model = helper.make_model(
        helper.make_graph(nodes, "lift_chain",
                          [helper.make_tensor_value_info("x", F, [B, H, S, D])],
                          [helper.make_tensor_value_info("y", F, None)], inits),
        opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    run_against_ort(model, feeds)
    compiled = compile_graph(load_model(model), CompileOptions(lint=True))
    hosted = [p.node for p in compiled.report.placements if p.engine != "device"]
    assert hosted == [], hosted
    assert [type(p).__name__ for p in compiled.programs] == ["DeviceProgram"]
    rounds = [p for p in compiled.report.passes
              if p.stage == "prepare" and p.name == "canonicalize" and p.changed]
    assert len(rounds) == 1, [p.detail for p in rounds]
