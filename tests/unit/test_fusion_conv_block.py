"""Fusion row conv_block: expand -> depthwise -> project (+ residual) as one graphengine.ConvBlock
node, run by the runtime's inverted-residual block kernel (runtime_ext/src/host/conv_block.cc)."""

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from graphengine import _runtime
from graphengine.engine.importers import load_model
from graphengine.engine.ops.conv_fused import CONV_BLOCK, CONV_DW, CONV_HEAD
from graphengine.engine.pipeline import CompileOptions, compile_graph
from graphengine.engine.runtime import default_device, load
from tests.unit.conv_spec import CONV_ATTRS, conv_ops, conv_task_spec
from tests.unit.test_runtime import SpecBuilder

RNG = np.random.default_rng(11)
BLOCK = "ConvBlock:"

# The block kernel needs AVX-512: elsewhere the row must not fire and the graphs run on the
# unfused kernels (same numbers), and a ConvBlock spec is refused.
AVAILABLE = _runtime.conv_block_available()
FUSED = 1 if AVAILABLE else 0
# the block, or else expand+depthwise (ConvDw) and the projection
CONVS = {CONV_BLOCK: 1} if AVAILABLE else {CONV_DW: 1, "Conv": 1}


def _model(nodes, inits, out):
    graph = helper.make_graph(
        nodes, "conv_block", [helper.make_tensor_value_info("x", TensorProto.FLOAT, None)],
        [helper.make_tensor_value_info(out, TensorProto.FLOAT, None)],
        [numpy_helper.from_array(np.asarray(v, np.float32), k) for k, v in inits.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def _act(kind, x, y, nodes):
    if not kind:
        return x
    if kind == "Clip":
        nodes.append(helper.make_node("Clip", [x, "lo", "hi"], [y]))
    elif kind == "LeakyRelu":
        nodes.append(helper.make_node("LeakyRelu", [x], [y], alpha=0.1))
    else:
        nodes.append(helper.make_node(kind, [x], [y]))
    return y


def _block(c=8, m=32, p=None, stride=1, expand=True, acts=("Clip", "Clip", None),
           residual=None, biases=(True, True, True), project_pads=0):
    """x -> [1x1 expand c->m, act] -> 3x3 depthwise (stride), act -> 1x1 project m->p, act
    [+ x]. Without expand the depthwise runs on x (m = c)."""
    p = c if p is None else p
    m = m if expand else c
    residual = (stride == 1 and p == c) if residual is None else residual
    inits = {"lo": np.float32(0.0), "hi": np.float32(6.0),
             "wd": RNG.normal(0, 0.3, (m, 1, 3, 3)), "wp": RNG.normal(0, 0.2, (p, m, 1, 1))}
    nodes, h = [], "x"
    if expand:
        inits["we"] = RNG.normal(0, 0.3, (m, c, 1, 1))
        if biases[0]:
            inits["be"] = RNG.normal(0, 0.5, m)
        nodes.append(helper.make_node("Conv", ["x", "we"] + (["be"] if biases[0] else []), ["e"]))
        h = _act(acts[0], "e", "e_act", nodes)
    if biases[1]:
        inits["bd"] = RNG.normal(0, 0.5, m)
    nodes.append(helper.make_node("Conv", [h, "wd"] + (["bd"] if biases[1] else []), ["d"],
                                  pads=[1, 1, 1, 1], strides=[stride, stride], group=m))
    h = _act(acts[1], "d", "d_act", nodes)
    if biases[2]:
        inits["bp"] = RNG.normal(0, 0.5, p)
    pp = [project_pads] * 4
    nodes.append(helper.make_node("Conv", [h, "wp"] + (["bp"] if biases[2] else []), ["q"],
                                  pads=pp))
    out = _act(acts[2], "q", "q_act", nodes)
    if residual:
        nodes.append(helper.make_node("Add", [out, "x"], ["y"]))
        out = "y"
    return _model(nodes, inits, out)


def _run(model, x, threads=2, **options):
    model.graph.input[0].CopyFrom(
        helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x.shape)))
    compiled = compile_graph(load_model(model), CompileOptions(lint=True, **options))
    got = list(load(compiled, default_device(threads)).execute({"x": x}).values())[0]
    want = ort.InferenceSession(model.SerializeToString()).run(None, {"x": x})[0]
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    return compiled


def _blocks(compiled):
    return [f for f in compiled.report.fusions if f.startswith(BLOCK)]


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("stride", [1, 2])
@pytest.mark.parametrize("shape", [
    (1, 8, 7, 7),     # small image: split by channels over 2 threads
    (1, 8, 24, 21),   # large enough to split by rows
    (3, 8, 9, 10),    # more samples than threads: whole samples per thread
    (1, 8, 1, 1), (1, 8, 2, 5)])
def test_block_matches_onnxruntime(threads, stride, shape):
    x = RNG.normal(size=shape).astype(np.float32)
    compiled = _run(_block(stride=stride), x, threads=threads)
    assert len(_blocks(compiled)) == FUSED
    assert conv_ops(compiled) == CONVS
    assert any("residual" in f for f in compiled.report.fusions) == (stride == 1)


@pytest.mark.parametrize("layout", [{"layout_format": "nhwc"}, {"layout_format": "nChw16c"},
                                    {"layouts": False}])
@pytest.mark.parametrize("channels", [(8, 32, 8), (24, 144, 24), (16, 40, 12), (5, 48, 20)])
def test_formats_and_channel_tails(layout, channels):
    # NHWC with channels not in whole blocks (masked tails), nChw16c padded, plain NCHW
    # (staged through nChw16c copies)
    c, m, p = channels
    x = RNG.normal(size=(1, c, 13, 11)).astype(np.float32)
    compiled = _run(_block(c=c, m=m, p=p), x, **layout)
    assert len(_blocks(compiled)) == FUSED


@pytest.mark.parametrize("acts", [("Relu", "Relu", None), (None, None, None),
                                  ("Clip", "Relu", "Relu"), (None, "Clip", "Clip")])
@pytest.mark.parametrize("biases", [(True, True, True), (False, False, False)])
def test_activations_and_missing_biases(acts, biases):
    x = RNG.normal(size=(2, 8, 10, 10)).astype(np.float32)
    compiled = _run(_block(acts=acts, biases=biases, p=16), x)
    assert len(_blocks(compiled)) == FUSED


@pytest.mark.parametrize("stride", [1, 2])
@pytest.mark.parametrize("threads", [1, 2])
def test_block_without_expand(stride, threads):
    # MobileNetV2's first block: depthwise -> project
    x = RNG.normal(size=(1, 32, 15, 15)).astype(np.float32)
    compiled = _run(_block(c=32, p=16, stride=stride, expand=False), x, threads=threads)
    assert len(_blocks(compiled)) == FUSED
    assert conv_ops(compiled) == ({CONV_BLOCK: 1} if AVAILABLE else {"Conv": 2})


@pytest.mark.parametrize("kwargs", [
    {"acts": ("LeakyRelu", "Clip", None)},   # the block kernel applies Relu / Clip only
    {"acts": ("Clip", "Clip", "Sigmoid")},
    {"project_pads": 1, "residual": False},  # not a pointwise projection
    {"expand": False, "c": 8},               # a depthwise start needs whole blocks of 16
])
def test_row_does_not_fire(kwargs):
    x = RNG.normal(size=(1, kwargs.get("c", 8), 9, 9)).astype(np.float32)
    compiled = _run(_block(**kwargs), x)
    assert _blocks(compiled) == []


def test_zoo_mobilenetv2_is_one_kernel_per_block():
    from tests.zoo import mobilenetv2, random_inputs

    model = mobilenetv2(batch=2)
    feeds = random_inputs(model, seed=5)
    compiled = compile_graph(load_model(model), CompileOptions(lint=True))
    ours = list(load(compiled).execute(feeds).values())
    ref = ort.InferenceSession(model.SerializeToString()).run(None, feeds)
    np.testing.assert_allclose(ours[0], ref[0], rtol=1e-3, atol=1e-4)
    depthwise = sum(1 for n in model.graph.node if n.op_type == "Conv"
                    and any(a.name == "group" and a.i > 1 for a in n.attribute))
    assert len(_blocks(compiled)) == depthwise * FUSED  # every block, the first one included
    # and its head (1x1 Conv, pool, Flatten, Gemm: fusion_conv_head)
    assert sum(f.startswith("ConvHead:") for f in compiled.report.fusions) == FUSED
    if AVAILABLE:  # the first convolution (of the image) stays a Conv
        assert conv_ops(compiled) == {"Conv": 1, CONV_BLOCK: depthwise, CONV_HEAD: 1}


# ---- the runtime kernel's checks (bad specs give InvalidArgument naming the node) ------
def _spec(pw_shape=(8, 16, 1, 1), pb_shape=(8,), y_shape=(1, 8, 6, 6), attrs=None,
          pw_region="weight", residual_shape=None):
    shapes = {"x": [1, 8, 6, 6], "we": [16, 8, 1, 1], "be": [16], "wd": [16, 1, 3, 3],
              "bd": [16], "wp": list(pw_shape), "bp": list(pb_shape), "y": list(y_shape)}
    if residual_shape:
        shapes["r"] = list(residual_shape)
    arena = {"x", "y", "r"} | ({"wp"} if pw_region == "arena" else set())
    task_attrs = {"expand": 1, "dw_stride": 1, **({"sum": 1} if residual_shape else {}),
                  **(attrs or {})}
    inputs = [0, 1, 2, 3, 4, 5, 6] + ([8] if residual_shape else [])
    return conv_task_spec(shapes, arena, inputs, 7, task_attrs, "fused_block", op="ConvBlock")


def test_kernel_runs_a_valid_spec():
    if not AVAILABLE:
        with pytest.raises(_runtime.InvalidArgument, match="needs AVX-512"):
            _runtime.Model(_runtime.Device(1), _spec())
        return
    model = _runtime.Model(_runtime.Device(1), _spec())
    out = model.execute([np.ones((1, 8, 6, 6), np.float32)])
    assert out[0].shape == (1, 8, 6, 6)
    np.testing.assert_array_equal(out[0], 0)  # zero weights and biases
    assert model.profile()[0]["impl"] == "block avx512"


@pytest.mark.parametrize("kwargs,message", [
    ({"pw_shape": (8, 12, 1, 1)}, "projection weight shape"),
    ({"pw_shape": (8, 16, 3, 3)}, "projection weight shape"),
    ({"pb_shape": (4,)}, "projection bias shape"),
    ({"y_shape": (1, 8, 5, 5)}, "does not match computed"),
    ({"pw_region": "arena"}, "projection weight must be a constant"),
    ({"attrs": {"pw_activation": "Sigmoid"}}, "Relu or Clip only"),
    ({"attrs": {"activation": "LeakyRelu", "activation_alpha": 0.1}}, "Relu or Clip only"),
    ({"residual_shape": (1, 8, 3, 3)}, "residual shape"),
    ({"attrs": {"dw_stride": 3}}, "dw_stride must be 1 or 2"),
])
def test_kernel_rejects_bad_specs(kwargs, message):
    with pytest.raises(_runtime.InvalidArgument,
                       match=message if AVAILABLE else "needs AVX-512") as err:
        _runtime.Model(_runtime.Device(1), _spec(**kwargs))
    assert "fused_block" in str(err.value)


@pytest.mark.parametrize("x_format,channels", [("nhwc", 24), ("nhwc", 32), ("nchw", 24)])
def test_kernel_block_without_expand_reads_whole_channel_blocks(x_format, channels):
    # depthwise -> project reads the input's channels in blocks of 16: NHWC with a partial
    # last block is refused (the compiler never emits it: fusion_conv_block asks for whole
    # blocks); a plain input is staged as a padded nChw16c copy and runs
    c = channels
    b = SpecBuilder()
    x = b.input("x", "float32", [1, c, 6, 6])
    xt = b.tensor("xt", "float32", [1, c, 6, 6])
    b.tensors[xt]["format"] = x_format
    b.kernel("TransData", [x], [xt], src_format="nchw", dst_format=x_format)
    ws = [b.const(n, np.zeros(s, np.float32)) for n, s in
          [("wd", [c, 1, 3, 3]), ("bd", [c]), ("wp", [8, c, 1, 1]), ("bp", [8])]]
    y = b.tensor("y", "float32", [1, 8, 6, 6])
    b.outputs.append(y)
    b.kernel("ConvBlock", [xt, *ws], [y], name="fused_block",
             **{**CONV_ATTRS, "group": c, "pads": [1, 1, 1, 1]})
    spec = b.spec()
    if not AVAILABLE:
        with pytest.raises(_runtime.InvalidArgument, match="needs AVX-512"):
            _runtime.Model(_runtime.Device(1), spec)
        return
    if x_format == "nhwc" and c % 16:
        with pytest.raises(_runtime.InvalidArgument, match="whole channel blocks") as err:
            _runtime.Model(_runtime.Device(1), spec)
        assert "fused_block" in str(err.value)
        return
    out = _runtime.Model(_runtime.Device(1), spec).execute([np.ones((1, c, 6, 6), np.float32)])
    np.testing.assert_array_equal(out[0], 0)  # zero weights and biases


def test_results_do_not_depend_on_the_team_size():
    # Under concurrent callers a model runs on one-thread lanes (narrow launches), alone on
    # two: the block and head kernels sum in the same order either way (a small image's
    # projection in two fixed groups of channels, on one thread or two; the head adds its
    # chunks' parts in chunk order), so a caller gets the same bits whatever the load
    from tests.zoo import mobilenetv2, random_inputs

    model = mobilenetv2(batch=1)
    feeds = random_inputs(model, seed=9)
    compiled = compile_graph(load_model(model), CompileOptions())
    one, two = (list(load(compiled, default_device(t)).execute(feeds).values())[0] for t in (1, 2))
    np.testing.assert_array_equal(one, two)
