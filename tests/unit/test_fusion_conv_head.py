"""Fusion row conv_head: 1x1 Conv -> GlobalAveragePool -> Flatten -> Gemm as one
graphengine.ConvHead node, run by the runtime's head kernel (block::Head in
runtime_ext/src/host/conv_block.cc)."""

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from graphengine import _runtime
from graphengine.engine.importers import load_model
from graphengine.engine.pipeline import CompileOptions, compile_graph
from graphengine.engine.runtime import default_device, load
from tests.unit.conv_spec import conv_task_spec

RNG = np.random.default_rng(17)
HEAD = "ConvHead:"

# The head kernel needs AVX-512: elsewhere the row must not fire and the graphs run on the
# unfused kernels (same numbers), and a ConvHead spec is refused.
AVAILABLE = _runtime.conv_block_available()
FUSED = 1 if AVAILABLE else 0


def _head(c=24, m=80, classes=37, act="Clip", conv_bias=True, fc_bias=(37,), trans_b=1,
          flatten="Flatten", alpha=1.0, stride=1, spatial_pool="GlobalAveragePool"):
    """x -> 1x1 Conv c->m [act] -> pool -> Flatten/Reshape -> Gemm m->classes."""
    inits = {"lo": np.float32(0.0), "hi": np.float32(6.0), "w": RNG.normal(0, 0.2, (m, c, 1, 1)),
             "fc": RNG.normal(0, 0.1, (classes, m) if trans_b else (m, classes))}
    if flatten == "Reshape":
        inits["shape"] = np.array([0, -1], np.int64)
    if conv_bias:
        inits["b"] = RNG.normal(0, 0.5, m)
    if fc_bias:
        inits["fcb"] = RNG.normal(0, 0.5, fc_bias)
    nodes = [helper.make_node("Conv", ["x", "w"] + (["b"] if conv_bias else []), ["c"],
                              strides=[stride, stride])]
    h = "c"
    if act == "Clip":
        nodes.append(helper.make_node("Clip", ["c", "lo", "hi"], ["a"]))
        h = "a"
    elif act:
        nodes.append(helper.make_node(act, ["c"], ["a"]))
        h = "a"
    nodes.append(helper.make_node(spatial_pool, [h], ["p"]))
    if flatten == "Flatten":
        nodes.append(helper.make_node("Flatten", ["p"], ["f"], axis=1))
    else:
        nodes.append(helper.make_node("Reshape", ["p", "shape"], ["f"]))
    nodes.append(helper.make_node("Gemm", ["f", "fc"] + (["fcb"] if fc_bias else []), ["y"],
                                  transB=trans_b, alpha=alpha))
    graph = helper.make_graph(
        nodes, "conv_head", [helper.make_tensor_value_info("x", TensorProto.FLOAT, None)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(np.asarray(v, np.int64 if k == "shape" else np.float32), k)
         for k, v in inits.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def _run(model, x, threads=2, **options):
    model.graph.input[0].CopyFrom(
        helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x.shape)))
    compiled = compile_graph(load_model(model), CompileOptions(lint=True, **options))
    loaded = load(compiled, default_device(threads))
    got = loaded.execute({"x": x})["y"]
    want = ort.InferenceSession(model.SerializeToString()).run(None, {"x": x})[0]
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    return compiled, loaded


def _heads(compiled):
    return [f for f in compiled.report.fusions if f.startswith(HEAD)]


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("shape,m,classes", [
    ((1, 24, 7, 7), 80, 37),      # chunks of 64 channels: one whole, one of 16
    ((1, 24, 7, 7), 128, 1000),   # whole chunks; many classes
    ((2, 16, 5, 3), 72, 10),      # 2 samples; a channel tail of 8 (72 = 4.5 blocks)
    ((4, 8, 1, 1), 40, 5),        # 1x1 image, the largest batch it takes
    ((1, 3, 9, 4), 20, 17),       # one chunk: a second thread has nothing to do
])
def test_head_matches_onnxruntime(threads, shape, m, classes):
    x = RNG.normal(size=shape).astype(np.float32)
    compiled, loaded = _run(_head(c=shape[1], m=m, classes=classes, fc_bias=(classes,)), x,
                            threads=threads)
    assert len(_heads(compiled)) == FUSED
    tasks = [t for native in loaded.natives.values() for t in native.profile()]
    assert ("head avx512" in [t["impl"] for t in tasks]) == AVAILABLE
    ops = sorted(t["op"] for t in tasks if t["op"] != "TransData")  # the input into NHWC
    assert ops == (["ConvHead"] if AVAILABLE else ["Conv", "Gemm", "GlobalAveragePool"])


@pytest.mark.parametrize("layout", [{"layout_format": "nhwc"}, {"layout_format": "nChw16c"},
                                    {"layouts": False}])
@pytest.mark.parametrize("c", [16, 20])
def test_formats(layout, c):
    # the input as NHWC (packed), nChw16c (in place, padded when c = 20), plain NCHW
    # (staged through a nChw16c copy)
    x = RNG.normal(size=(1, c, 6, 6)).astype(np.float32)
    compiled, _ = _run(_head(c=c, m=96, classes=30, fc_bias=(30,)), x, **layout)
    assert len(_heads(compiled)) == FUSED


@pytest.mark.parametrize("kwargs", [
    {"act": None}, {"act": "Relu"}, {"conv_bias": False}, {"fc_bias": None},
    {"fc_bias": (1, 37)}, {"trans_b": 0}, {"flatten": "Reshape"},
])
def test_variants(kwargs):
    x = RNG.normal(size=(1, 24, 7, 7)).astype(np.float32)
    compiled, _ = _run(_head(**kwargs), x)
    assert len(_heads(compiled)) == FUSED


@pytest.mark.parametrize("kwargs,shape", [
    ({"act": "Sigmoid"}, (1, 24, 7, 7)),           # an activation the kernel does not apply
    ({"alpha": 0.5}, (1, 24, 7, 7)),               # a scaled Gemm
    ({"stride": 2}, (1, 24, 7, 7)),                # not a stride-1 1x1 Conv
    ({"spatial_pool": "GlobalMaxPool"}, (1, 24, 7, 7)),
    ({}, (5, 24, 7, 7)),                           # a batch beyond 4: the unfused GEMMs
])
def test_row_does_not_fire(kwargs, shape):
    x = RNG.normal(size=shape).astype(np.float32)
    compiled, _ = _run(_head(**kwargs), x)
    assert _heads(compiled) == []


# (MobileNetV2 from the zoo, head included: test_fusion_conv_block.py)


# ---- the runtime kernel's checks (bad specs give InvalidArgument naming the node) ------
def _spec(x_shape=(1, 8, 3, 3), w_shape=(16, 8, 1, 1), fc_shape=(5, 16), fcb_shape=(5,),
          y_shape=(1, 5), attrs=None, fc_region="weight"):
    shapes = {"x": list(x_shape), "w": list(w_shape), "b": [w_shape[0]], "fc": list(fc_shape),
              "fcb": list(fcb_shape), "y": list(y_shape)}
    arena = {"x", "y"} | ({"fc"} if fc_region == "arena" else set())
    return conv_task_spec(shapes, arena, [0, 1, 2, 3, 4], 5, {"trans_b": 1, **(attrs or {})},
                          "fused_head", op="ConvHead")


def test_kernel_runs_a_valid_spec():
    if not AVAILABLE:
        with pytest.raises(_runtime.InvalidArgument, match="needs AVX-512"):
            _runtime.Model(_runtime.Device(1), _spec())
        return
    model = _runtime.Model(_runtime.Device(2), _spec())
    out = model.execute([np.ones((1, 8, 3, 3), np.float32)])
    assert out[0].shape == (1, 5)
    np.testing.assert_array_equal(out[0], 0)  # zero weights and biases
    assert model.profile()[0]["impl"] == "head avx512"


@pytest.mark.parametrize("kwargs,message", [
    ({"fc_shape": (5, 12)}, "fc weight shape"),
    ({"fcb_shape": (4,)}, "fc bias shape"),
    ({"y_shape": (1, 6)}, "output shape"),
    ({"w_shape": (16, 8, 3, 3)}, "1x1 convolution"),
    ({"attrs": {"strides": [2, 2]}}, "1x1 convolution"),
    ({"x_shape": (5, 8, 3, 3), "y_shape": (5, 5)}, "batches of 1 to 4"),
    ({"fc_region": "arena"}, "fc weight must be a constant"),
    ({"attrs": {"activation": "Sigmoid"}}, "Relu or Clip only"),
    ({"attrs": {"sum": 1}}, "takes no residual"),
])
def test_kernel_rejects_bad_specs(kwargs, message):
    with pytest.raises(_runtime.InvalidArgument,
                       match=message if AVAILABLE else "needs AVX-512") as err:
        _runtime.Model(_runtime.Device(1), _spec(**kwargs))
    assert "fused_head" in str(err.value)


def test_a_reshape_of_another_rank_is_left_alone():
    # Gemm(Reshape(x, [1, 6])) with a rank-1 x: not a head (the row must not trip over it)
    w = RNG.normal(size=(5, 6)).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("Reshape", ["x", "shape"], ["f"]),
         helper.make_node("Gemm", ["f", "w"], ["y"], transB=1)], "reshape1",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [6])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(w, "w"),
         numpy_helper.from_array(np.array([1, 6], np.int64), "shape")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    x = RNG.normal(size=(6,)).astype(np.float32)
    compiled, _ = _run(model, x)
    assert _heads(compiled) == []
