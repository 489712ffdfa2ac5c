"""Each TensorFlow op the importer maps, in a GraphDef written with our own proto, run
through graphengine.Session and compared with a numpy reference."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest

import graphengine
from graphengine.engine.importers import import_tf
from tests.unit.tf_graphs import (
    TfGraph,
    conv_backprop_input,
    conv_nhwc,
    pool_nhwc,
    same_pads,
)

RNG = np.random.default_rng(7)


def rand(*shape: int) -> np.ndarray:
    return RNG.standard_normal(shape).astype(np.float32)


@pytest.fixture(scope="module")
def sess() -> Iterator[graphengine.Session]:
    with graphengine.Session() as s:
        yield s


def run(sess: graphengine.Session, g: TfGraph, **feeds: np.ndarray) -> dict[str, np.ndarray]:
    return sess.run_graph(sess.add_graph(g.bytes()), feeds)


def conv_graph(x_shape, f: np.ndarray, **attrs) -> TfGraph:
    g = TfGraph()
    g.placeholder("x", x_shape)
    g.const("f", f)
    g.node("Conv2D", "y", ["x", "f"], **attrs)
    return g


@pytest.mark.parametrize("padding,strides,dilations", [
    ("SAME", 1, 1), ("SAME", 2, 1), ("VALID", 2, 1), ("SAME", 1, 2), ("EXPLICIT", 2, 1)])
def test_conv2d(sess, padding: str, strides: int, dilations: int) -> None:
    x, f = rand(2, 9, 10, 3), rand(3, 3, 3, 5)
    attrs = dict(strides=[1, strides, strides, 1], dilations=[1, dilations, dilations, 1],
                 padding=padding)
    if padding == "SAME":
        pads = (same_pads(9, 3, strides, dilations), same_pads(10, 3, strides, dilations))
    elif padding == "EXPLICIT":
        attrs["explicit_paddings"] = [0, 0, 1, 2, 0, 1, 0, 0]
        pads = ((1, 2), (0, 1))
    else:
        pads = ((0, 0), (0, 0))
    got = run(sess, conv_graph([-1, 9, 10, 3], f, **attrs), x=x)["y"]
    want = conv_nhwc(x, f, (strides,) * 2, (dilations,) * 2, pads)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_conv2d_bias_relu6_and_nchw_data_format(sess) -> None:
    x, f, b = rand(1, 6, 6, 4), rand(1, 1, 4, 8), rand(8)
    g = conv_graph([1, 6, 6, 4], f, strides=[1, 1, 1, 1], padding="VALID")
    g.const("b", b)
    g.node("BiasAdd", "ba", ["y", "b"])
    g.node("Relu6", "r6", ["ba"])
    g.node("Transpose", "t", ["r6", g.const("perm", [0, 3, 1, 2], np.int32)])
    g.node("BiasAdd", "out", ["t", "b"], data_format="NCHW")
    want = np.clip(conv_nhwc(x, f) + b, 0, 6).transpose(0, 3, 1, 2) + b.reshape(8, 1, 1)
    np.testing.assert_allclose(run(sess, g, x=x)["out"], want, rtol=1e-4, atol=1e-4)


def test_depthwise_conv_with_a_channel_multiplier(sess) -> None:
    x, f = rand(2, 8, 7, 3), rand(3, 3, 3, 2)
    g = TfGraph()
    g.placeholder("x", [2, 8, 7, 3])
    g.const("f", f)
    g.node("DepthwiseConv2dNative", "y", ["x", "f"], strides=[1, 2, 2, 1], padding="SAME")
    want = conv_nhwc(x, f, (2, 2), pads=(same_pads(8, 3, 2), same_pads(7, 3, 2)),
                     depthwise=True)
    np.testing.assert_allclose(run(sess, g, x=x)["y"], want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("padding", ["SAME", "VALID"])
def test_conv2d_backprop_input(sess, padding: str) -> None:
    out_hw = (8, 8) if padding == "SAME" else (9, 9)
    dy, f = rand(1, 4, 4, 5), rand(3, 3, 2, 5)
    g = TfGraph()
    g.placeholder("dy", [1, 4, 4, 5])
    g.const("sizes", [1, *out_hw, 2], np.int32)
    g.const("f", f)
    g.node("Conv2DBackpropInput", "y", ["sizes", "f", "dy"], strides=[1, 2, 2, 1],
           padding=padding)
    want = conv_backprop_input(dy, f, out_hw, (2, 2), padding)
    np.testing.assert_allclose(run(sess, g, dy=dy)["y"], want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("op,padding", [("MaxPool", "SAME"), ("AvgPool", "SAME"),
                                        ("MaxPool", "VALID"), ("AvgPool", "VALID")])
def test_pools(sess, op: str, padding: str) -> None:
    x = rand(2, 7, 6, 3)
    g = TfGraph()
    g.placeholder("x", [2, 7, 6, 3])
    g.node(op, "y", ["x"], ksize=[1, 3, 3, 1], strides=[1, 2, 2, 1], padding=padding)
    pads = (same_pads(7, 3, 2), same_pads(6, 3, 2)) if padding == "SAME" else ((0, 0),) * 2
    want = pool_nhwc(x, (3, 3), (2, 2), pads, "max" if op == "MaxPool" else "avg")
    np.testing.assert_allclose(run(sess, g, x=x)["y"], want, rtol=1e-5, atol=1e-5)


def test_fused_batch_norm(sess) -> None:
    x, scale, offset, mean, var = rand(2, 4, 4, 3), rand(3), rand(3), rand(3), \
        np.abs(rand(3)) + 0.5
    g = TfGraph()
    g.placeholder("x", [2, 4, 4, 3])
    for name, v in dict(scale=scale, offset=offset, mean=mean, var=var).items():
        g.const(name, v)
    g.node("FusedBatchNormV3", "y", ["x", "scale", "offset", "mean", "var"], epsilon=1e-3,
           is_training=False)
    want = (x - mean) / np.sqrt(var + 1e-3) * scale + offset
    np.testing.assert_allclose(run(sess, g, x=x)["y"], want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("ta,tb", [(False, False), (True, False), (False, True), (True, True)])
def test_matmul_transposes(sess, ta: bool, tb: bool) -> None:
    a, b = rand(4, 6), rand(6, 3)
    g = TfGraph()
    g.placeholder("a", [6, 4] if ta else [4, 6])
    g.const("b", b.T if tb else b)
    g.node("MatMul", "y", ["a", "b"], transpose_a=ta, transpose_b=tb)
    got = run(sess, g, a=a.T.copy() if ta else a)["y"]
    np.testing.assert_allclose(got, a @ b, rtol=1e-4, atol=1e-4)


def test_batch_matmul_adjoints(sess) -> None:
    a, b = rand(2, 3, 5, 4), rand(2, 3, 6, 5)
    g = TfGraph()
    g.placeholder("a", [2, 3, 5, 4])
    g.placeholder("b", [2, 3, 6, 5])
    g.node("BatchMatMulV2", "y", ["a", "b"], adj_x=True, adj_y=True)
    want = np.swapaxes(a, -1, -2) @ np.swapaxes(b, -1, -2)
    np.testing.assert_allclose(run(sess, g, a=a, b=b)["y"], want, rtol=1e-4, atol=1e-4)


UNARY = {"Relu": lambda x: np.maximum(x, 0), "Relu6": lambda x: np.clip(x, 0, 6),
         "Sigmoid": lambda x: 1 / (1 + np.exp(-x)), "Tanh": np.tanh,
         "Rsqrt": lambda x: 1 / np.sqrt(np.abs(x) + 0.1), "Square": np.square}


@pytest.mark.parametrize("op", sorted(UNARY))
def test_unary_after_a_convolution(sess, op: str) -> None:
    """Each op on a value held as NCHW (a convolution's) and on a plain one."""
    x, f = rand(1, 5, 5, 2), rand(1, 1, 2, 3)
    g = conv_graph([1, 5, 5, 2], f, strides=[1, 1, 1, 1], padding="VALID")
    src = "y"
    if op == "Rsqrt":
        g.node("Abs", "abs", ["y"])
        src = g.node("AddV2", "pos", ["abs", g.const("eps", 0.1)])
    g.node(op, "out", [src])
    g.node(op, "plain", ["x"] if op != "Rsqrt" else [g.const("c", [4.0])])
    got = run(sess, g, x=x)
    np.testing.assert_allclose(got["out"], UNARY[op](conv_nhwc(x, f)), rtol=1e-5, atol=1e-5)
    assert got["plain"].shape == ((1, 5, 5, 2) if op != "Rsqrt" else (1,))


BINARY = {"Add": np.add, "AddV2": np.add, "Sub": np.subtract, "Mul": np.multiply,
          "RealDiv": np.divide, "Maximum": np.maximum, "Minimum": np.minimum,
          "SquaredDifference": lambda a, b: (a - b) ** 2}


@pytest.mark.parametrize("op", sorted(BINARY))
@pytest.mark.parametrize("other", ["channel", "scalar", "row", "image", "input"])
def test_binary_against_each_operand_kind(sess, op: str, other: str) -> None:
    """A convolution's output (held as NCHW) with a per-channel constant, a scalar, a
    [W, C] constant, an NHWC image constant and another input."""
    x, f = rand(2, 4, 5, 3), rand(1, 1, 3, 3)
    b = {"channel": rand(3), "scalar": np.float32(1.5), "row": rand(5, 3),
         "image": rand(1, 4, 5, 3), "input": rand(2, 4, 5, 3)}[other]
    if op == "RealDiv":
        b = np.abs(b) + 0.5
    g = conv_graph([2, 4, 5, 3], f, strides=[1, 1, 1, 1], padding="VALID")
    feeds = {"x": x}
    if other == "input":
        g.placeholder("b", [2, 4, 5, 3])
        feeds["b"] = b
    else:
        g.const("b", b)
    g.node(op, "out", ["y", "b"])
    want = BINARY[op](conv_nhwc(x, f), b)
    np.testing.assert_allclose(run(sess, g, **feeds)["out"], want, rtol=1e-4, atol=1e-4)


def test_softmax_and_cast(sess) -> None:
    x = rand(3, 7)
    g = TfGraph()
    g.placeholder("x", [3, 7])
    g.node("Softmax", "s", ["x"])
    g.node("Cast", "i", ["x"], DstT=np.dtype(np.int32), SrcT=np.dtype(np.float32))
    got = run(sess, g, x=x)
    e = np.exp(x - x.max(-1, keepdims=True))
    np.testing.assert_allclose(got["s"], e / e.sum(-1, keepdims=True), rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(got["i"], x.astype(np.int32))


@pytest.mark.parametrize("op", ["Mean", "Sum", "Max"])
@pytest.mark.parametrize("axes,keep", [([1, 2], False), ([1, 2], True), ([3], False),
                                       ([0], False), ([-1, 1], True)])
def test_reductions_of_nchw_and_plain_values(sess, op: str, axes, keep: bool) -> None:
    x, f = rand(2, 4, 5, 3), rand(1, 1, 3, 6)
    g = conv_graph([2, 4, 5, 3], f, strides=[1, 1, 1, 1], padding="VALID")
    g.const("axes", axes, np.int32)
    g.node(op, "out", ["y", "axes"], keep_dims=keep)
    g.node(op, "plain", ["x", "axes"], keep_dims=keep)
    ref = {"Mean": np.mean, "Sum": np.sum, "Max": np.max}[op]
    got = run(sess, g, x=x)
    np.testing.assert_allclose(got["out"], ref(conv_nhwc(x, f), axis=tuple(axes),
                                                keepdims=keep), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(got["plain"], ref(x, axis=tuple(axes), keepdims=keep),
                               rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("axis", [3, -1, 1])
def test_concat(sess, axis: int) -> None:
    x, f, c = rand(1, 4, 4, 2), rand(1, 1, 2, 3), rand(1, 4, 4, 3)
    g = conv_graph([1, 4, 4, 2], f, strides=[1, 1, 1, 1], padding="VALID")
    g.const("c", c)
    g.node("ConcatV2", "out", ["y", "c", "x" if axis != 1 else "y",
                               g.const("axis", axis, np.int32)], N=3)
    y = conv_nhwc(x, f)
    want = np.concatenate([y, c, x if axis != 1 else y], axis=axis)
    np.testing.assert_allclose(run(sess, g, x=x)["out"], want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("op", ["Pad", "PadV2", "MirrorPad"])
def test_pads(sess, op: str) -> None:
    x, f = rand(1, 4, 5, 2), rand(1, 1, 2, 2)
    paddings = [[0, 0], [1, 2], [2, 1], [0, 0]]
    g = conv_graph([1, 4, 5, 2], f, strides=[1, 1, 1, 1], padding="VALID")
    inputs = ["y", g.const("p", paddings, np.int32)]
    attrs = {}
    if op == "PadV2":
        inputs.append(g.const("v", 0.5))
    if op == "MirrorPad":
        attrs["mode"] = "REFLECT"
    g.node(op, "out", inputs, **attrs)
    y = conv_nhwc(x, f)
    want = np.pad(y, paddings, mode="reflect") if op == "MirrorPad" else \
        np.pad(y, paddings, constant_values=0.5 if op == "PadV2" else 0.0)
    np.testing.assert_allclose(run(sess, g, x=x)["out"], want, rtol=1e-4, atol=1e-4)


def test_flatten_as_keras_writes_it(sess) -> None:
    """Reshape to [batch, -1] with the batch read by Shape -> StridedSlice -> Pack, on a
    symbolic batch."""
    x, f = rand(3, 4, 4, 2), rand(1, 1, 2, 3)
    g = conv_graph([-1, 4, 4, 2], f, strides=[1, 1, 1, 1], padding="VALID")
    g.node("Shape", "shape", ["y"])
    g.node("StridedSlice", "batch", ["shape", g.const("b0", [0], np.int32),
                                     g.const("b1", [1], np.int32),
                                     g.const("s1", [1], np.int32)], shrink_axis_mask=1)
    g.node("Pack", "target", ["batch", g.const("m1", -1, np.int32)], axis=0)
    g.node("Reshape", "out", ["y", "target"])
    got = run(sess, g, x=x)["out"]
    np.testing.assert_allclose(got, conv_nhwc(x, f).reshape(3, -1), rtol=1e-4, atol=1e-4)


def test_squeeze_expand_dims_transpose(sess) -> None:
    x = rand(2, 1, 3, 1)
    g = TfGraph()
    g.placeholder("x", [2, 1, 3, 1])
    g.node("Squeeze", "sq", ["x"], squeeze_dims=[1])
    g.node("Squeeze", "sq_all", ["x"])
    g.node("ExpandDims", "ex", ["sq_all", g.const("d", -1, np.int32)])
    g.node("Transpose", "tr", ["ex", g.const("perm", [2, 0, 1], np.int32)])
    got = run(sess, g, x=x)
    np.testing.assert_array_equal(got["sq"], x[:, 0])
    np.testing.assert_array_equal(got["tr"], x.reshape(2, 3)[..., None].transpose(2, 0, 1))


def test_transpose_into_nchw_adds_no_node() -> None:
    f = rand(1, 1, 2, 3)
    g = conv_graph([1, 4, 4, 2], f, strides=[1, 1, 1, 1], padding="VALID")
    g.node("Transpose", "out", ["y", g.const("perm", [0, 3, 1, 2], np.int32)])
    graph = import_tf(g.gd)
    assert [n.op_type for n in graph.nodes].count("Transpose") == 1  # the input's


SLICES = [
    # begin, end, strides, masks, numpy index
    ([1, 0], [3, 2], [1, 1], {}, np.s_[1:3, 0:2]),
    ([0, -1], [0, 0], [1, -1], {"begin_mask": 1, "end_mask": 3}, np.s_[:, ::-1]),
    ([1], [2], [1], {"shrink_axis_mask": 1}, np.s_[1]),
    ([0, -1], [0, 0], [1, 1], {"begin_mask": 1, "end_mask": 1, "shrink_axis_mask": 2},
     np.s_[:, -1]),
    ([0, 1], [0, 3], [1, 2], {"ellipsis_mask": 1}, np.s_[..., 1:3:2]),
    ([0, 0], [0, 0], [1, 1], {"new_axis_mask": 1, "begin_mask": 2, "end_mask": 2},
     np.s_[None, :]),
    ([-3], [0], [1], {"end_mask": 1}, np.s_[-3:]),
]


@pytest.mark.parametrize("begin,end,strides,masks,index", SLICES)
def test_strided_slice(sess, begin, end, strides, masks, index) -> None:
    x = rand(4, 5, 6)
    g = TfGraph()
    g.placeholder("x", [4, 5, 6])
    g.node("StridedSlice", "y", ["x", g.const("b", begin, np.int32),
                                 g.const("e", end, np.int32),
                                 g.const("s", strides, np.int32)], **masks)
    np.testing.assert_array_equal(run(sess, g, x=x)["y"], x[index])


def test_pack_shape_and_identity(sess) -> None:
    a, b = rand(2, 3), rand(2, 3)
    g = TfGraph()
    g.placeholder("a", [2, 3])
    g.placeholder("b", [2, 3])
    g.node("Pack", "p", ["a", "b"], axis=-1, N=2)
    g.node("Identity", "i", ["p"])
    g.node("Shape", "s", ["a"], out_type=np.dtype(np.int32))
    got = run(sess, g, a=a, b=b)
    np.testing.assert_array_equal(got["i"], np.stack([a, b], -1))
    assert got["s"].dtype == np.int32 and got["s"].tolist() == [2, 3]
