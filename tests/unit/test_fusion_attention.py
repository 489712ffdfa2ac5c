"""Attention fusion: MatMul, scale, mask, Softmax, MatMul and the head Transposes become one
FusedAttention node that computes what onnxruntime computes for the unfused graph."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from graphengine.engine.importers import load_model
from graphengine.engine.ir import Engine
from graphengine.engine.partition import placement
from graphengine.engine.pipeline import CompileOptions, compile_graph
from graphengine.engine.runtime import load

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from tests import zoo  # noqa: E402

RNG = np.random.default_rng(7)


class _Builder:
    """Nodes and initializers of an ONNX graph under construction."""

    def __init__(self):
        self.nodes, self.inits = [], {}

    def init(self, name, value):
        self.inits[name] = np.asarray(value)
        return name

    def node(self, op, ins, out, **attrs):
        self.nodes.append(helper.make_node(op, ins, [out], name=out, **attrs))
        return out

    def model(self, name, inputs, outputs) -> onnx.ModelProto:
        graph = helper.make_graph(self.nodes, name, inputs, outputs,
                                  [numpy_helper.from_array(v, k) for k, v in self.inits.items()])
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)],
                                  ir_version=8)
        onnx.checker.check_model(model)
        return model


def attention_model(b, s, h, d, *, mask=None, scale="div", sk=None, extra_output=None,
                    k_transpose=(0, 2, 3, 1)) -> onnx.ModelProto:
    """One attention block laid out the way torch exports BERT's self-attention.

    x [b,s,h*d] -> Q/K/V MatMul -> Reshape [b,s,h,d] -> Transpose -> MatMul(Q, K^T) -> scale
    -> [Add mask] -> Softmax -> MatMul(P, V) -> Transpose -> Reshape [b,s,h*d] -> y.
    With `sk`, K and V come from a second input "m" [b,sk,h*d] (cross-attention).
    mask: None | "input" (int64 attention_mask [b,sk] turned into -10000 * (1 - mask), as BERT
    does) | "causal" (constant [1,1,s,sk]) | "full" (float input [b,h,s,sk]).
    scale: "div" | "mul" (Mul by 1/sqrt(d), constant first) | "qk" (sqrt of it on Q and on K^T,
    as scaled_dot_product_attention exports) | "none".
    """
    sk = sk or s
    hd = h * d
    gb = _Builder()
    init, node = gb.init, gb.node
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [b, s, hd])]
    kv_src = "x"
    if sk != s:
        inputs.append(helper.make_tensor_value_info("m", TensorProto.FLOAT, [b, sk, hd]))
        kv_src = "m"

    for p, src, n in (("q", "x", s), ("k", kv_src, sk), ("v", kv_src, sk)):
        w = init(f"w{p}", RNG.normal(0, 1 / math.sqrt(hd), (hd, hd)).astype(np.float32))
        mm = node("MatMul", [src, w], f"{p}_proj")
        node("Reshape", [mm, init(f"shape_{p}", np.array([b, n, h, d], np.int64))], f"{p}_heads")
    q = node("Transpose", ["q_heads"], "q_t", perm=[0, 2, 1, 3])
    k = node("Transpose", ["k_heads"], "k_t", perm=list(k_transpose))
    v = node("Transpose", ["v_heads"], "v_t", perm=[0, 2, 1, 3])
    if tuple(k_transpose) == (0, 2, 1, 3):
        k = node("Transpose", [k], "k_tt", perm=[0, 1, 3, 2])
    if scale == "qk":
        root = init("root", np.float32(d ** -0.25))
        q = node("Mul", [q, root], "q_scaled")
        k = node("Mul", [root, k], "k_scaled")
    scores = node("MatMul", [q, k], "scores")
    if scale == "div":
        scores = node("Div", [scores, init("sqrt_d", np.float32(math.sqrt(d)))], "scaled")
    elif scale == "mul":
        scores = node("Mul", [init("inv_sqrt_d", np.float32(1 / math.sqrt(d))), scores],
                      "scaled")
    if mask == "input":
        inputs.append(helper.make_tensor_value_info("attention_mask", TensorProto.INT64,
                                                    [b, sk]))
        m = node("Unsqueeze", ["attention_mask", init("ax1", np.array([1], np.int64))], "m1")
        m = node("Unsqueeze", [m, init("ax2", np.array([2], np.int64))], "m2")
        m = node("Cast", [m], "m3", to=TensorProto.FLOAT)
        m = node("Sub", [init("one", np.float32(1)), m], "m4")
        m = node("Mul", [m, init("neg", np.float32(-10000))], "ext_mask")
        scores = node("Add", [scores, m], "masked")
    elif mask == "causal":
        c = np.triu(np.full((s, sk), -1e4, np.float32), k=1 + sk - s)[None, None]
        scores = node("Add", [init("causal", c), scores], "masked")
    elif mask == "full":
        inputs.append(helper.make_tensor_value_info("bias", TensorProto.FLOAT, [b, h, s, sk]))
        scores = node("Add", [scores, "bias"], "masked")
    probs = node("Softmax", [scores], "probs", axis=-1)
    ctx = node("MatMul", [probs, v], "ctx")
    ctx = node("Transpose", [ctx], "ctx_t", perm=[0, 2, 1, 3])
    node("Reshape", [ctx, init("shape_y", np.array([b, s, hd], np.int64))], "y")
    outputs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, [b, s, hd])]
    if extra_output:
        shape = {"k_t": [b, h, d, sk], "ctx_t": [b, s, h, d]}.get(extra_output, [b, h, s, sk])
        outputs.append(helper.make_tensor_value_info(extra_output, TensorProto.FLOAT, shape))
    return gb.model("attention", inputs, outputs)


def feeds_for(model: onnx.ModelProto) -> dict[str, np.ndarray]:
    feeds = {}
    for vi in model.graph.input:
        shape = [dim.dim_value for dim in vi.type.tensor_type.shape.dim]
        if vi.type.tensor_type.elem_type == TensorProto.INT64:  # a 0/1 mask, never all 0
            m = (RNG.random(shape) > 0.3).astype(np.int64)
            m[..., 0] = 1
            feeds[vi.name] = m
        else:
            feeds[vi.name] = RNG.normal(size=shape).astype(np.float32)
    return feeds


def ort_run(model: onnx.ModelProto, feeds) -> list[np.ndarray]:
    return ort.InferenceSession(model.SerializeToString(),
                                providers=["CPUExecutionProvider"]).run(None, feeds)


def compile_and_run(model, feeds):
    compiled = compile_graph(load_model(model), CompileOptions(lint=True))
    outs = load(compiled).execute(feeds)
    ops = [p.op_type for p in compiled.report.placements]
    return compiled, list(outs.values()), ops


def assert_matches_ort(model, feeds, outs) -> None:
    for got, want in zip(outs, ort_run(model, feeds), strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=2e-5)


def attention_lines(compiled) -> list[str]:
    return [f for f in compiled.report.fusions if f.startswith("Attention")]


# ---- the pattern is found and computes the same numbers ---------------------------------
@pytest.mark.parametrize("b,s,h,d", [(1, 16, 4, 8), (2, 7, 3, 5), (3, 1, 2, 4), (1, 33, 1, 17)])
@pytest.mark.parametrize("mask", [None, "input"])
def test_bert_style_attention_becomes_one_node(b, s, h, d, mask):
    model = attention_model(b, s, h, d, mask=mask)
    feeds = feeds_for(model)
    compiled, outs, ops = compile_and_run(model, feeds)
    assert_matches_ort(model, feeds, outs)
    lines = attention_lines(compiled)
    assert len(lines) == 1, compiled.report.fusions
    n_nodes = 9 if mask else 8
    assert lines[0].startswith(
        f"Attention(MatMul+Div{'+Add' if mask else ''}+Softmax+MatMul, 4 Transposes): "
        f"{n_nodes} nodes -> "), lines
    assert f"scale {1 / math.sqrt(d):.6g}" in lines[0]
    assert ("mask ext_mask" in lines[0]) == bool(mask)
    assert ops.count("FusedAttention") == 1
    for gone in ("Transpose", "Softmax", "Div"):
        assert gone not in ops
    assert ops.count("MatMul") == 3  # the projections only
    node = next(p for p in compiled.report.placements if p.op_type == "FusedAttention")
    assert node.engine == Engine.DEVICE.value


@pytest.mark.parametrize("scale,mask", [("mul", "causal"), ("qk", "full"), ("none", None),
                                        ("qk", "causal")])
def test_scale_and_mask_variants(scale, mask):
    model = attention_model(2, 6, 3, 4, mask=mask, scale=scale)
    feeds = feeds_for(model)
    compiled, outs, ops = compile_and_run(model, feeds)
    assert_matches_ort(model, feeds, outs)
    (line,) = attention_lines(compiled)
    want = {"div": 0.5, "mul": 0.5, "qk": 0.5, "none": 1.0}[scale]
    assert f"scale {want:.6g}" in line
    assert ops.count("FusedAttention") == 1 and "Mul" not in ops and "Softmax" not in ops


def test_cross_attention_with_other_key_length_and_split_key_transpose():
    # K as Transpose(0,2,1,3) then Transpose(0,1,3,2): both are absorbed (composed)
    model = attention_model(2, 5, 2, 3, sk=9, mask="input", k_transpose=(0, 2, 1, 3))
    feeds = feeds_for(model)
    compiled, outs, ops = compile_and_run(model, feeds)
    assert_matches_ort(model, feeds, outs)
    (line,) = attention_lines(compiled)
    assert "5 Transposes" in line
    assert "Transpose" not in ops


# ---- the pattern is left alone ----------------------------------------------------------
@pytest.mark.parametrize("reader", ["probs", "scaled", "masked", "scores"])
def test_not_fused_when_an_intermediate_has_another_reader(reader):
    model = attention_model(1, 8, 2, 4, mask="input", extra_output=reader)
    feeds = feeds_for(model)
    compiled, outs, ops = compile_and_run(model, feeds)
    assert_matches_ort(model, feeds, outs)
    assert attention_lines(compiled) == []
    assert "FusedAttention" not in ops and "Softmax" in ops


def test_operand_transpose_with_another_reader_stays():
    # k_t is also a graph output: the fused node reads it instead of absorbing its Transpose
    model = attention_model(1, 8, 2, 4, mask="input", extra_output="k_t")
    feeds = feeds_for(model)
    compiled, outs, ops = compile_and_run(model, feeds)
    assert_matches_ort(model, feeds, outs)
    (line,) = attention_lines(compiled)
    assert "3 Transposes" in line
    assert ops.count("Transpose") == 1 and ops.count("FusedAttention") == 1


def test_fused_output_may_be_a_graph_output_and_a_view_source():
    # ctx_t (the absorbed output Transpose) is a graph output and the Reshape's input
    model = attention_model(2, 5, 3, 4, mask="input", extra_output="ctx_t")
    feeds = feeds_for(model)
    compiled, outs, ops = compile_and_run(model, feeds)
    assert_matches_ort(model, feeds, outs)
    (line,) = attention_lines(compiled)
    assert "4 Transposes" in line and ops.count("FusedAttention") == 1
    assert [s.name for s in compiled.outputs] == ["y", "ctx_t"]


def keep_on_host(monkeypatch, name: str) -> None:
    def device(node):
        return "kept on the host by the test" if node.name == name \
            else placement.device_accepts(node)

    monkeypatch.setattr(placement, "ENGINES", [(Engine.DEVICE, device),
                                               (Engine.HOST, placement.host_accepts)])


@pytest.mark.parametrize("host_node", ["probs", "scores", "masked"])
def test_not_fused_when_a_core_node_runs_on_the_host(monkeypatch, host_node):
    keep_on_host(monkeypatch, host_node)
    model = attention_model(2, 6, 2, 4, mask="input")
    feeds = feeds_for(model)
    compiled, outs, ops = compile_and_run(model, feeds)
    assert_matches_ort(model, feeds, outs)
    assert attention_lines(compiled) == []
    assert "FusedAttention" not in ops
    (placed,) = [p for p in compiled.report.placements if p.node == host_node]
    assert placed.engine == Engine.HOST.value


@pytest.mark.parametrize("host_node,absorbed", [("ctx_t", 3), ("q_t", 1)])
def test_transposes_outside_the_partition_are_not_absorbed(monkeypatch, host_node, absorbed):
    # ctx_t on the host: the other three Transposes are absorbed. q_t on the host: the
    # MatMul reading it starts a new device partition, so the K and V Transposes (left in
    # the first one) stay as well and only the output Transpose is absorbed.
    keep_on_host(monkeypatch, host_node)
    model = attention_model(2, 6, 2, 4, mask="input")
    feeds = feeds_for(model)
    compiled, outs, ops = compile_and_run(model, feeds)
    assert_matches_ort(model, feeds, outs)
    (line,) = attention_lines(compiled)
    assert f"{absorbed} Transpose{'s' * (absorbed > 1)})" in line, line
    assert ops.count("Transpose") == 4 - absorbed
    (placed,) = [p for p in compiled.report.placements if p.node == host_node]
    assert placed.engine == Engine.HOST.value


def test_not_fused_without_fusion():
    model = attention_model(1, 4, 2, 2)
    feeds = feeds_for(model)
    compiled = compile_graph(load_model(model), CompileOptions(fuse=False))
    assert_matches_ort(model, feeds, list(load(compiled).execute(feeds).values()))
    assert attention_lines(compiled) == []


# ---- the op itself: schema, numpy reference (host) and device agree ---------------------
def fused_model(b, s, h, d, *, mask: bool) -> onnx.ModelProto:
    """A graph holding a FusedAttention node itself (Q, K, V as [b,s,h,d] inputs)."""
    names = ["q", "k", "v"] + (["mask"] if mask else [])
    inputs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, [b, s, h, d])
              for n in names[:3]]
    if mask:
        inputs.append(helper.make_tensor_value_info("mask", TensorProto.FLOAT, [b, 1, 1, s]))
    node = helper.make_node("FusedAttention", names, ["y"], scale=0.25, q_perm=[0, 2, 1, 3],
                            k_perm=[0, 2, 3, 1], v_perm=[0, 2, 1, 3], out_perm=[0, 2, 1, 3])
    graph = helper.make_graph([node], "fused", inputs,
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT,
                                                             [b, s, h, d])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def reference(q, k, v, mask, scale):
    qt, kt, vt = (np.transpose(x, (0, 2, 1, 3)).astype(np.float64) for x in (q, k, v))
    s = qt @ np.swapaxes(kt, -1, -2) * scale + (0 if mask is None else mask)
    p = np.exp(s - s.max(-1, keepdims=True))
    return np.transpose((p / p.sum(-1, keepdims=True)) @ vt, (0, 2, 1, 3))


@pytest.mark.parametrize("mask", [False, True])
@pytest.mark.parametrize("on_host", [False, True])
def test_fused_attention_op_on_device_and_host(monkeypatch, mask, on_host):
    if on_host:
        def device(node):
            return "no" if node.op_type == "FusedAttention" else placement.device_accepts(node)

        monkeypatch.setattr(placement, "ENGINES", [(Engine.DEVICE, device),
                                                   (Engine.HOST, placement.host_accepts)])
    model = fused_model(2, 5, 3, 4, mask=mask)
    feeds = feeds_for(model)
    compiled, outs, ops = compile_and_run(model, feeds)
    assert ops == ["FusedAttention"]
    (placed,) = compiled.report.placements
    assert placed.engine == (Engine.HOST if on_host else Engine.DEVICE).value
    want = reference(feeds["q"], feeds["k"], feeds["v"], feeds.get("mask"), 0.25)
    np.testing.assert_allclose(outs[0], want, rtol=1e-4, atol=1e-5)


def test_fused_attention_schema_rejects_bad_operands():
    from graphengine.engine.errors import GraphEngineError

    model = fused_model(1, 4, 2, 3, mask=False)
    q_perm = next(a for a in model.graph.node[0].attribute if a.name == "q_perm")
    q_perm.ints[:] = [0, 2, 1, 1]  # not a permutation
    with pytest.raises(GraphEngineError, match="q_perm.*permutation"):
        compile_graph(load_model(model))
    model = fused_model(1, 4, 2, 3, mask=True)
    model.graph.input[3].type.tensor_type.shape.dim[3].dim_value = 3  # mask [1,1,1,3]
    with pytest.raises(GraphEngineError, match="mask"):
        compile_graph(load_model(model))


# ---- whole models ------------------------------------------------------------------------
@pytest.mark.parametrize("batch,seq", [(1, 16), (2, 9)])
def test_zoo_bert_fuses_every_layer_and_matches_onnxruntime(batch, seq):
    model = zoo.bert(layers=2, hidden=64, heads=4, intermediate=128, vocab=500, seq=seq,
                     batch=batch)
    feeds = zoo.random_inputs(model, seed=3, batch=batch)
    compiled, outs, ops = compile_and_run(model, feeds)
    assert_matches_ort(model, feeds, outs)
    lines = attention_lines(compiled)
    assert len(lines) == 2 and all("4 Transposes" in f and "mask" in f for f in lines), lines
    assert ops.count("FusedAttention") == 2
    assert "Transpose" not in ops and "Softmax" not in ops


# ---- several additive terms: T5's position bias and mask ---------------------------------
def biased_attention_model(b, s, h, d, *, layers=2, bias="const") -> onnx.ModelProto:
    """`layers` attention blocks laid out the way T5 exports them: no scale, the scores plus
    a relative-position bias [1,h,s,s] (block 0's, shared by every layer: "const" random,
    "zeros" as T5's cross-attention, "input" a computed float input) and then the extended
    mask [b,1,1,s] made from an int64 attention_mask input."""
    hd = h * d
    gb = _Builder()
    init, node = gb.init, gb.node
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [b, s, hd]),
              helper.make_tensor_value_info("attention_mask", TensorProto.INT64, [b, s])]

    if bias == "input":
        inputs.append(helper.make_tensor_value_info("pos_bias", TensorProto.FLOAT,
                                                    [1, h, s, s]))
    else:
        init("pos_bias", np.zeros((1, h, s, s), np.float32) if bias == "zeros"
             else RNG.normal(size=(1, h, s, s)).astype(np.float32))
    m = node("Unsqueeze", ["attention_mask", init("axes", np.array([1, 2], np.int64))], "m1")
    m = node("Cast", [m], "m2", to=TensorProto.FLOAT)
    m = node("Sub", [init("one", np.float32(1)), m], "m3")
    node("Mul", [m, init("neg", np.float32(-1e9))], "ext_mask")
    x = "x"
    for i in range(layers):
        for p in "qkv":
            w = init(f"w{p}{i}", RNG.normal(0, 1 / math.sqrt(hd), (hd, hd)).astype(np.float32))
            mm = node("MatMul", [x, w], f"{p}_proj{i}")
            node("Reshape", [mm, init(f"heads{i}{p}", np.array([b, s, h, d], np.int64))],
                 f"{p}_heads{i}")
        q = node("Transpose", [f"q_heads{i}"], f"q_t{i}", perm=[0, 2, 1, 3])
        k = node("Transpose", [f"k_heads{i}"], f"k_t{i}", perm=[0, 2, 3, 1])
        v = node("Transpose", [f"v_heads{i}"], f"v_t{i}", perm=[0, 2, 1, 3])
        scores = node("MatMul", [q, k], f"scores{i}")
        scores = node("Add", [scores, "pos_bias"], f"biased{i}")
        scores = node("Add", [scores, "ext_mask"], f"masked{i}")
        probs = node("Softmax", [scores], f"probs{i}", axis=-1)
        ctx = node("MatMul", [probs, v], f"ctx{i}")
        ctx = node("Transpose", [ctx], f"ctx_t{i}", perm=[0, 2, 1, 3])
        x = node("Reshape", [ctx, init(f"merge{i}", np.array([b, s, hd], np.int64))],
                 f"y{i}")
    return gb.model("t5_attention", inputs,
                    [helper.make_tensor_value_info(x, TensorProto.FLOAT, [b, s, hd])])


def test_position_bias_and_mask_become_one_shared_mask():
    # T5's encoder: every layer adds the same bias and mask; the fused nodes read one sum of
    # the two, computed by one Add for both layers
    model = biased_attention_model(2, 6, 3, 4)
    feeds = feeds_for(model)
    compiled, outs, ops = compile_and_run(model, feeds)
    assert_matches_ort(model, feeds, outs)
    lines = attention_lines(compiled)
    assert len(lines) == 2, compiled.report.fusions
    for line in lines:
        assert line.startswith("Attention(MatMul+Add+Add+Softmax+MatMul, 4 Transposes)"), line
        assert "mask pos_bias + ext_mask as attention_mask" in line, line
    assert ops.count("FusedAttention") == 2 and "Softmax" not in ops
    assert ops.count("Add") == 1  # the shared bias + mask
    assert "Transpose" not in ops


def test_a_zero_position_bias_is_dropped():
    # T5's cross-attention adds a bias of zeros: the mask alone is the kernel's mask
    model = biased_attention_model(2, 5, 2, 4, layers=1, bias="zeros")
    feeds = feeds_for(model)
    compiled, outs, ops = compile_and_run(model, feeds)
    assert_matches_ort(model, feeds, outs)
    (line,) = attention_lines(compiled)
    assert line.endswith("(scale 1, mask pos_bias + ext_mask as ext_mask)"), line
    assert "Add" not in ops and ops.count("FusedAttention") == 1


def test_a_computed_position_bias_is_added_at_run_time():
    model = biased_attention_model(1, 7, 2, 3, layers=2, bias="input")
    feeds = feeds_for(model)
    compiled, outs, ops = compile_and_run(model, feeds)
    assert_matches_ort(model, feeds, outs)
    assert len(attention_lines(compiled)) == 2
    assert ops.count("Add") == 1 and ops.count("FusedAttention") == 2


def test_constant_terms_are_summed_once_at_compile_time():
    # a decoder's causal mask and its bias, both constant: one constant for both layers
    model = biased_attention_model(2, 4, 2, 4)
    for n in model.graph.node:  # the mask: -1e9 * a constant causal pattern
        if n.name == "ext_mask":
            n.input[0] = "causal"
    c = np.triu(np.ones((4, 4), np.float32), k=1)[None, None]
    model.graph.initializer.append(numpy_helper.from_array(c, "causal"))
    for n in list(model.graph.node):
        if n.output[0] in ("m1", "m2", "m3"):
            model.graph.node.remove(n)
    del model.graph.input[1]  # attention_mask is no longer read
    feeds = feeds_for(model)
    compiled, outs, ops = compile_and_run(model, feeds)
    assert_matches_ort(model, feeds, outs)
    lines = attention_lines(compiled)
    assert len(lines) == 2 and all("as attention_mask(" in line for line in lines), lines
    assert len({line.rsplit(" as ", 1)[1] for line in lines}) == 1  # one shared constant
    assert "Add" not in ops and ops.count("FusedAttention") == 2


# ---- grouped-query attention: repeat_kv absorbed ------------------------------------------
def gqa_model(b, s, h, hkv, d, *, extra_output=None) -> onnx.ModelProto:
    """A decoder's grouped-query attention the way transformers exports it: K and V with hkv
    heads, repeated to h by repeat_kv (Unsqueeze at 2, Expand [b,hkv,h/hkv,s,d], Reshape
    [b,h,s,d]), a causal mask, the scale on the scores."""
    gb = _Builder()
    init, node = gb.init, gb.node
    g = h // hkv
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [b, s, h * d])]
    for p, n in (("q", h), ("k", hkv), ("v", hkv)):
        w = init(f"w{p}", RNG.normal(0, 1 / math.sqrt(h * d), (h * d, n * d)).astype(np.float32))
        mm = node("MatMul", ["x", w], f"{p}_proj")
        node("Reshape", [mm, init(f"heads_{p}", np.array([b, s, n, d], np.int64))], f"{p}_heads")
        node("Transpose", [f"{p}_heads"], f"{p}_t", perm=[0, 2, 1, 3])
    for p in "kv":
        u = node("Unsqueeze", [f"{p}_t", init("ax2", np.array([2], np.int64))], f"{p}_u")
        e = node("Expand", [u, init("rep", np.array([b, hkv, g, s, d], np.int64))], f"{p}_e")
        node("Reshape", [e, init("merged", np.array([b, h, s, d], np.int64))], f"{p}_rep")
    k = node("Transpose", ["k_rep"], "k_tt", perm=[0, 1, 3, 2])
    scores = node("MatMul", ["q_t", k], "scores")
    scores = node("Mul", [scores, init("scale", np.float32(d ** -0.5))], "scaled")
    c = np.triu(np.full((s, s), -1e9, np.float32), k=1)[None, None]
    scores = node("Add", [scores, init("causal", c)], "masked")
    probs = node("Softmax", [scores], "probs", axis=-1)
    ctx = node("MatMul", [probs, "v_rep"], "ctx")
    ctx = node("Transpose", [ctx], "ctx_t", perm=[0, 2, 1, 3])
    node("Reshape", [ctx, init("shape_y", np.array([b, s, h * d], np.int64))], "y")
    outputs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, [b, s, h * d])]
    if extra_output:
        outputs.append(helper.make_tensor_value_info(extra_output, TensorProto.FLOAT,
                                                     [b, h, s, d]))
    return gb.model("gqa", inputs, outputs)


@pytest.mark.parametrize("b,s,h,hkv,d", [(2, 6, 4, 2, 8), (1, 5, 6, 1, 4), (3, 4, 8, 2, 16)])
def test_grouped_query_attention_reads_the_key_value_heads_in_place(b, s, h, hkv, d):
    model = gqa_model(b, s, h, hkv, d)
    feeds = feeds_for(model)
    compiled, outs, ops = compile_and_run(model, feeds)
    assert_matches_ort(model, feeds, outs)
    (line,) = attention_lines(compiled)
    assert line.startswith(f"Attention(MatMul+Mul+Add+Softmax+MatMul, 5 Transposes, K and V "
                           f"repeated {h // hkv}x): 16 nodes"), line
    assert ops.count("FusedAttention") == 1
    for gone in ("Expand", "Unsqueeze", "Transpose"):
        assert gone not in ops, ops


def test_a_repeat_with_another_reader_is_not_absorbed():
    # V's repeated heads are a graph output: V's repeat stays, so K's stays too (the kernel
    # reads K and V with the same number of heads)
    model = gqa_model(2, 5, 4, 2, 4, extra_output="v_rep")
    feeds = feeds_for(model)
    compiled, outs, ops = compile_and_run(model, feeds)
    assert_matches_ort(model, feeds, outs)
    (line,) = attention_lines(compiled)
    assert "repeated" not in line, line
    assert ops.count("Expand") == 2 and ops.count("FusedAttention") == 1


@pytest.mark.parametrize("on_host", [False, True])
def test_fused_attention_op_with_fewer_key_value_heads(monkeypatch, on_host):
    if on_host:
        def device(node):
            return "no" if node.op_type == "FusedAttention" else placement.device_accepts(node)

        monkeypatch.setattr(placement, "ENGINES", [(Engine.DEVICE, device),
                                                   (Engine.HOST, placement.host_accepts)])
    b, s, h, hkv, d = 2, 5, 6, 2, 4
    inputs = [helper.make_tensor_value_info("q", TensorProto.FLOAT, [b, s, h, d]),
              helper.make_tensor_value_info("k", TensorProto.FLOAT, [b, s, hkv, d]),
              helper.make_tensor_value_info("v", TensorProto.FLOAT, [b, s, hkv, d]),
              helper.make_tensor_value_info("mask", TensorProto.FLOAT, [b, 1, s, s])]
    node = helper.make_node("FusedAttention", ["q", "k", "v", "mask"], ["y"], scale=0.5,
                            q_perm=[0, 2, 1, 3], k_perm=[0, 2, 3, 1], v_perm=[0, 2, 1, 3],
                            out_perm=[0, 2, 1, 3])
    graph = helper.make_graph([node], "gqa_fused", inputs, [
        helper.make_tensor_value_info("y", TensorProto.FLOAT, [b, s, h, d])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    feeds = feeds_for(model)
    compiled, outs, ops = compile_and_run(model, feeds)
    (placed,) = compiled.report.placements
    assert placed.engine == (Engine.HOST if on_host else Engine.DEVICE).value
    rep = {x: np.repeat(feeds[x], h // hkv, axis=2) for x in "kv"}
    want = reference(feeds["q"], rep["k"], rep["v"], feeds["mask"], 0.5)
    np.testing.assert_allclose(outs[0], want, rtol=1e-4, atol=1e-5)
    k3 = helper.make_tensor_value_info("k", TensorProto.FLOAT, [b, s, 4, d])  # 4 does not
    model.graph.input[1].CopyFrom(k3)                                        # divide 6
    from graphengine.engine.errors import GraphEngineError
    with pytest.raises(GraphEngineError, match="K's heads"):
        compile_graph(load_model(model))
