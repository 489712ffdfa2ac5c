"""Blocked layouts (nChw8c / nChw16c, padded when channels are not a multiple of the block)."""

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from graphengine import _runtime
from graphengine.engine.errors import InvalidInput
from graphengine.engine.importers import load_model
from graphengine.engine.ops.conv_fused import CONV_BLOCK, CONV_DW, CONV_HEAD
from graphengine.engine.optimize import layout
from graphengine.engine.passes import PassManager
from graphengine.engine.pipeline import CompileOptions, bind_shapes, compile_graph, stages
from graphengine.engine.runtime import load
from tests import zoo

RNG = np.random.default_rng(11)


def optimized(model, fmt):
    g = bind_shapes(load_model(model), None)
    pm = PassManager(lint=True)
    for stage in stages(CompileOptions(lint=True, layout_format=fmt)):
        g = pm.run_stage(stage, g)
    return g


def run_both(model, feeds, fmt, rtol=1e-4, atol=1e-4):
    compiled = compile_graph(load_model(model), CompileOptions(lint=True, layout_format=fmt))
    ours = list(load(compiled).execute(feeds).values())
    ref = ort.InferenceSession(model.SerializeToString()).run(None, feeds)
    assert len(ours) == len(ref)
    for got, want in zip(ours, ref):
        np.testing.assert_allclose(got, want, rtol=rtol, atol=atol)
    return compiled


def _model(nodes, x_shape, outputs, inits):
    graph = helper.make_graph(
        nodes, "blocked", [helper.make_tensor_value_info("x", TensorProto.FLOAT, x_shape)],
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in outputs],
        [numpy_helper.from_array(np.asarray(v, np.float32), k) for k, v in inits.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def _w(*shape):
    return RNG.normal(0, 0.3, shape)


@pytest.mark.parametrize("fmt", ["nChw16c", "nChw8c", "nhwc"])
@pytest.mark.parametrize("batch", [1, 3])
def test_mobilenetv2_matches_onnxruntime_in_every_region_format(fmt, batch):
    model = zoo.mobilenetv2(width_mult=0.35, image=64, classes=10, batch=batch)
    run_both(model, zoo.random_inputs(model, seed=batch, batch=batch), fmt, rtol=1e-3)


@pytest.mark.parametrize("fmt", ["nChw16c", "nChw8c"])
def test_resnet_matches_onnxruntime_blocked(fmt):
    model = zoo.resnet(depths=(1, 1, 1, 1), width=8, image=32, classes=10, batch=2)
    run_both(model, zoo.random_inputs(model, seed=1, batch=2), fmt, rtol=1e-3)


def test_blocked_region_keeps_transdata_at_the_edges_only():
    g = optimized(zoo.mobilenetv2(width_mult=0.35, image=32, classes=10), "nChw16c")
    # the image is read plain by the first conv; the pooled [N,C,1,1] tensor before the
    # flatten has whole channel blocks, so its conversion is a FormatView (no task); with
    # the head fused (conv_head) the head reads the region's format and writes [N, classes]
    assert not any(n.op_type == "TransData" for n in g.nodes)
    views = [n for n in g.nodes if n.op_type == "FormatView"]
    heads = [n for n in g.nodes if n.op_type == CONV_HEAD]
    if _runtime.conv_block_available():
        assert views == [] and len(heads) == 1
        assert heads[0].inputs[0].format == "nChw16c" and not heads[0].outputs[0].format
    else:
        (view,) = views
        assert view.attrs == {"src_format": "nChw16c", "dst_format": "nchw"} and heads == []
    first = next(n for n in g.nodes if n.op_type == "Conv")
    assert first.inputs[0] in g.inputs
    convs = [n for n in g.nodes if n.op_type in ("Conv", CONV_DW, CONV_BLOCK)]
    assert len(convs) > 1
    assert all(c.outputs[0].format == "nChw16c" for c in convs)
    padded = [c.outputs[0] for c in convs if c.outputs[0].meta.shape[1] % 16]
    assert padded, "the model should have channel counts that are not multiples of 16"


def test_padded_value_read_by_a_non_conv_is_nhwc():
    # conv (24 channels) -> MaxPool: the pool may not see a padded tensor
    nodes = [helper.make_node("Conv", ["x", "w1"], ["c1"], pads=[1, 1, 1, 1]),
             helper.make_node("MaxPool", ["c1"], ["p"], kernel_shape=[2, 2], strides=[2, 2]),
             helper.make_node("Conv", ["p", "w2"], ["c2"]),
             helper.make_node("Conv", ["c2", "w3"], ["y"], group=32, pads=[1, 1, 1, 1])]
    model = _model(nodes, [2, 16, 8, 8], ["y"],
                   {"w1": _w(24, 16, 3, 3), "w2": _w(32, 24, 1, 1), "w3": _w(32, 1, 3, 3)})
    x = RNG.normal(size=(2, 16, 8, 8)).astype(np.float32)
    run_both(model, {"x": x}, "nChw16c")
    g = optimized(model, "nChw16c")
    fmts = {n.op_type: n.outputs[0].format for n in g.nodes if n.op_type != "TransData"}
    assert fmts["MaxPool"] == "nhwc"
    c1 = next(n for n in g.nodes if n.op_type == "Conv").outputs[0]
    assert c1.format == "nhwc"


@pytest.mark.parametrize("channels", [24, 8, 40])
def test_padded_values_between_convs_with_residual(channels):
    # x -> conv(c) -> conv(c) + residual -> conv(16) with c not a multiple of 16
    c = channels
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["a"]),
             helper.make_node("Relu", ["a"], ["ar"]),
             helper.make_node("Conv", ["ar", "w2"], ["b"], pads=[1, 1, 1, 1]),
             helper.make_node("Add", ["b", "ar"], ["r"]),
             helper.make_node("Conv", ["r", "w3"], ["y"], pads=[1, 1, 1, 1], group=c)]
    model = _model(nodes, [2, 16, 7, 9], ["y"],
                   {"w1": _w(c, 16, 1, 1), "b1": _w(c), "w2": _w(c, c, 3, 3),
                    "w3": _w(c, 1, 3, 3)})
    x = RNG.normal(size=(2, 16, 7, 9)).astype(np.float32)
    compiled = run_both(model, {"x": x}, "nChw16c")
    g = optimized(model, "nChw16c")
    padded = [v for v in g.values.values() if v.format == "nChw16c" and v.meta.shape[1] % 16]
    assert padded
    # the planner reserved whole blocks for the padded tensors
    slots = {t.name: t for p in compiled.programs for t in getattr(p, "tensors", [])}
    for v in padded:
        assert layout.storage_nbytes(v) == v.meta.nbytes // c * ((c + 15) // 16 * 16)
        assert slots[v.name].format == "nChw16c"


def test_padded_graph_output_leaves_through_transdata():
    nodes = [helper.make_node("Conv", ["x", "w1"], ["a"]),
             helper.make_node("Conv", ["a", "w2"], ["y"], group=24, pads=[1, 1, 1, 1])]
    model = _model(nodes, [1, 16, 5, 5], ["a", "y"], {"w1": _w(24, 16, 1, 1),
                                                      "w2": _w(24, 1, 3, 3)})
    x = RNG.normal(size=(1, 16, 5, 5)).astype(np.float32)
    run_both(model, {"x": x}, "nChw16c")
    g = optimized(model, "nChw16c")
    assert all(v.format in ("", "nchw") for v in g.outputs)


def test_storage_nbytes():
    g = optimized(zoo.mobilenetv2(width_mult=0.35, image=32, classes=10), "nChw16c")
    for v in g.values.values():
        if v.meta is None or v.is_constant:
            continue
        n = layout.storage_nbytes(v)
        if v.format in layout.BLOCKS and v.meta.shape[1] % layout.BLOCKS[v.format]:
            b = layout.BLOCKS[v.format]
            c = v.meta.shape[1]
            assert n == v.meta.nbytes // c * ((c + b - 1) // b * b) > v.meta.nbytes
        else:
            assert n == v.meta.nbytes


def test_auto_is_nhwc_and_the_blocked_format_is_asked_for():
    """"auto" stores a depthwise network NHWC like any other (the blocked format measured
    slower on most graphs it used to be picked for: layout.py); asked for, the CPU's
    blocked format holds the convolutions' outputs."""
    blocked = _runtime.blocked_format()
    assert blocked in ("", "nChw8c", "nChw16c")
    net = zoo.mobilenetv2(width_mult=0.35, image=32, classes=10)
    resnet = optimized(zoo.resnet(depths=(1, 1, 1, 1), width=8, image=32, classes=10), "auto")

    def conv_formats(g):  # not ConvHead's [N, classes]
        return {n.outputs[0].format for n in g.nodes if n.op_type in ("Conv", CONV_DW, CONV_BLOCK)}

    assert conv_formats(optimized(net, "auto")) == {"nhwc"}
    assert {n.outputs[0].format for n in resnet.nodes if n.op_type == "Conv"} == {"nhwc"}
    if blocked:
        assert conv_formats(optimized(net, blocked)) == {blocked}


def test_unknown_layout_format_is_invalid_input():
    with pytest.raises(InvalidInput, match="layout_format"):
        CompileOptions(layout_format="nchw8")
    with pytest.raises(InvalidInput, match="layout_format"):
        CompileOptions.from_mapping({"layout_format": "bogus"})
    assert CompileOptions.from_mapping({"layout_format": "nhwc"}).layout_format == "nhwc"


def test_kernel_info_offers_padded_blocked_formats_to_conv_and_transdata_only():
    conv = _runtime.kernel_info("Conv", ["float32", "float32"], [[1, 24, 8, 8], [32, 24, 1, 1]])
    assert "nChw16c" in conv["formats"] and "nChw8c" in conv["formats"]
    td = _runtime.kernel_info("TransData", ["float32"], [[1, 24, 8, 8]],
                              {"src_format": "nchw", "dst_format": "nChw16c"})
    assert "nChw16c" in td["formats"]
    pool = _runtime.kernel_info("MaxPool", ["float32"], [[1, 24, 8, 8]])
    assert pool["formats"] == ["nchw", "nhwc", "nChw8c"]


@pytest.mark.parametrize("fmt,channels,concat_format", [
    ("nhwc", 12, "nhwc"), ("nChw16c", 16, "nChw16c"), ("nChw8c", 12, "nhwc")])
def test_concat_of_conv_towers_stays_in_the_region(fmt, channels, concat_format):
    """Concat joins the towers in the region's format: no TransData around it (blocked only
    when no operand would be padded, else NHWC); outputs match onnxruntime."""
    model = zoo.branchy(towers=3, channels=channels, size=10, batch=2, depth=1)
    feeds = zoo.random_inputs(model, seed=4, batch=2)
    run_both(model, feeds, fmt)
    g = optimized(model, fmt)
    (cat,) = [n for n in g.nodes if n.op_type == "Concat"]
    assert cat.outputs[0].format == concat_format
    # a tower whose channels would be padded writes NHWC itself (a Concat reads it)
    assert all(v.producer.op_type == "Conv" and v.format == concat_format for v in cat.inputs)
    # TransData only at the edges: after the input (unless read plain) and before the output
    assert sum(n.op_type == "TransData" for n in g.nodes) <= 2


def _squeeze_excitation(batch: int, spatial_mean: bool):
    """conv -> SE (squeeze: GlobalAveragePool or ReduceMean over H, W; two 1x1 convs, a
    sigmoid; the per-channel scale multiplies the feature map) -> conv."""
    c = 32
    inits = [numpy_helper.from_array((RNG.standard_normal(s) * 0.3).astype(np.float32), n)
             for n, s in (("w1", (c, 8, 3, 3)), ("f1", (8, c, 1, 1)), ("f2", (c, 8, 1, 1)),
                          ("w2", (16, c, 1, 1)))]
    inits.append(numpy_helper.from_array(np.array([2, 3], np.int64), "hw"))
    squeeze = (helper.make_node("ReduceMean", ["a", "hw"], ["s"], keepdims=1) if spatial_mean
               else helper.make_node("GlobalAveragePool", ["a"], ["s"]))
    nodes = [helper.make_node("Conv", ["x", "w1"], ["a0"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["a0"], ["a"]), squeeze,
             helper.make_node("Conv", ["s", "f1"], ["s1"]),
             helper.make_node("Relu", ["s1"], ["s2"]),
             helper.make_node("Conv", ["s2", "f2"], ["s3"]),
             helper.make_node("Sigmoid", ["s3"], ["scale"]),
             helper.make_node("Mul", ["a", "scale"], ["b"]),
             helper.make_node("Conv", ["b", "w2"], ["y"])]
    graph = helper.make_graph(
        nodes, "se", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                    [batch, 8, 12, 12])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=8)


@pytest.mark.parametrize("fmt", ["nhwc", "nChw8c", "nChw16c"])
@pytest.mark.parametrize("batch", [1, 2])
@pytest.mark.parametrize("spatial_mean", [False, True])
def test_squeeze_excitation_stays_in_the_region(fmt, batch, spatial_mean):
    """The squeeze (a global pool, or the ReduceMean over H, W exporters write for it) and the
    per-channel Mul run in the region's format: the feature map is never converted back to
    NCHW for them (before: a TransData out and one back in around each SE block)."""
    model = _squeeze_excitation(batch, spatial_mean)
    x = RNG.standard_normal((batch, 8, 12, 12)).astype(np.float32)
    compiled = run_both(model, {"x": x}, fmt)
    (prog,) = compiled.programs
    converted = [t for t in prog.tasks if t.op == "TransData"]
    assert len(converted) <= 2, [(t.name, t.attrs) for t in converted]  # the image in, y out
    (mul,) = [t for t in prog.tasks if t.op == "Mul"]
    assert prog.tensors[mul.outputs[0]].format == fmt


def _depthwise_net(channels):
    """Pointwise Conv to `channels`, depthwise 3x3, pointwise back, twice."""
    nodes, inits, src = [], {}, "x"
    for i in range(2):
        inits[f"p{i}"] = _w(channels, 8 if i == 0 else channels, 1, 1)
        inits[f"d{i}"] = _w(channels, 1, 3, 3)
        nodes += [helper.make_node("Conv", [src, f"p{i}"], [f"a{i}"]),
                  helper.make_node("Relu", [f"a{i}"], [f"r{i}"]),
                  helper.make_node("Conv", [f"r{i}", f"d{i}"], [f"b{i}"], group=channels,
                                   pads=[1, 1, 1, 1]),
                  helper.make_node("Relu", [f"b{i}"], [f"y{i}" if i else "h"])]
        src = "h"
    return _model(nodes, [1, 8, 12, 12], ["y1"], inits)


@pytest.mark.parametrize("channels", [32, 24, 40])
def test_a_blocked_region_keeps_partial_channel_blocks_nhwc(channels):
    """Asked for the blocked format, a depthwise network whose activations fill partial
    channel blocks (24, 40 channels) stores those other ops read NHWC (padded, each would
    pay a conversion); one of whole blocks (32) is all blocked. "auto" is NHWC either way.
    All agree with ONNX Runtime."""
    model = _depthwise_net(channels)
    feeds = {"x": RNG.normal(size=(1, 8, 12, 12)).astype(np.float32)}
    auto = optimized(model, "auto")
    assert {n.outputs[0].format for n in auto.nodes if n.op_type in ("Conv", CONV_DW)} == {"nhwc"}
    run_both(model, feeds, "auto")
    blocked = _runtime.blocked_format()
    if not blocked:
        pytest.skip("this CPU has no blocked activation format (AVX2 or AVX-512 needed)")
    g = optimized(model, blocked)
    formats = {n.outputs[0].format for n in g.nodes if n.op_type in ("Conv", CONV_DW)}
    if channels % layout.BLOCKS[blocked] == 0:
        assert formats == {blocked}, formats
    else:
        assert "nhwc" in formats and formats <= {blocked, "nhwc"}, formats
    run_both(model, feeds, blocked)


def _mix_ffn(tokens_side=8, channels=32, hidden=64):
    """SegFormer's Mix-FFN on x [N, L, C]: fc1, tokens reshaped into an image (Transpose
    [0, 2, 1] + Reshape), a 3x3 depthwise Conv, back to tokens, GELU-free fc2."""
    n_tok = tokens_side * tokens_side
    inits = {"w1": _w(channels, hidden), "dw": _w(hidden, 1, 3, 3), "w2": _w(hidden, channels),
             "img": [1, hidden, tokens_side, tokens_side], "seq": [1, hidden, n_tok]}
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["h"]),
             helper.make_node("Transpose", ["h"], ["ht"], perm=[0, 2, 1]),
             helper.make_node("Reshape", ["ht", "img_i"], ["im"]),
             helper.make_node("Conv", ["im", "dw"], ["c"], group=hidden, pads=[1, 1, 1, 1]),
             helper.make_node("Reshape", ["c", "seq_i"], ["cs"]),
             helper.make_node("Transpose", ["cs"], ["ct"], perm=[0, 2, 1]),
             helper.make_node("Relu", ["ct"], ["r"]),
             helper.make_node("MatMul", ["r", "w2"], ["y"])]
    model = _model(nodes, [1, n_tok, channels], ["y"],
                   {k: v for k, v in inits.items() if k not in ("img", "seq")})
    for k in ("img", "seq"):
        model.graph.initializer.append(numpy_helper.from_array(
            np.asarray(inits[k], np.int64), f"{k}_i"))
    return model, {"x": RNG.normal(size=(1, n_tok, channels)).astype(np.float32)}


def test_auto_keeps_a_vision_transformers_token_convolution_nhwc():
    """A depthwise Conv that reads tokens reshaped into an image (whole channel blocks, so
    the blocked rule alone would pick the blocked format) runs in NHWC, where the tokens'
    bytes are the image's: no Transpose and no TransData task around it. Matches ONNX
    Runtime."""
    model, feeds = _mix_ffn()
    compiled = run_both(model, feeds, "auto")
    ops = [t.op for p in compiled.programs if hasattr(p, "tasks") for t in p.tasks
           if t.kind == "kernel"]
    assert "Transpose" not in ops and "TransData" not in ops, ops
    g = optimized(model, "auto")
    assert {n.outputs[0].format for n in g.nodes if n.op_type == "Conv"} == {"nhwc"}
