"""Fusion rows: each pattern is rewritten, reported, and gives the same numbers."""

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from graphengine.engine.importers import load_model
from graphengine.engine.pipeline import CompileOptions, compile_graph
from graphengine.engine.runtime import load

RNG = np.random.default_rng(0)


def make(nodes, inputs, outputs, inits):
    graph = helper.make_graph(
        nodes, "fusion",
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in inputs],
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in outputs],
        [numpy_helper.from_array(np.asarray(v, np.float32) if np.asarray(v).dtype.kind == "f"
                                 else np.asarray(v), k) for k, v in inits.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def check(model, feeds):
    compiled = compile_graph(load_model(model), CompileOptions(lint=True))
    ours = load(compiled).execute(feeds)
    ref = ort.InferenceSession(model.SerializeToString()).run(None, feeds)
    for got, want in zip(ours.values(), ref):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
    # layout conversions are not fusions: leave them out of the op list
    return compiled.report.fusions, [p.op_type for p in compiled.report.placements
                                     if p.op_type != "TransData"]


def test_decomposed_layernorm_becomes_one_node():
    w = 16
    nodes = [
        helper.make_node("ReduceMean", ["x"], ["mean"], axes=[-1]),
        helper.make_node("Sub", ["x", "mean"], ["d"]),
        helper.make_node("Pow", ["d", "two"], ["sq"]),
        helper.make_node("ReduceMean", ["sq"], ["var"], axes=[-1]),
        helper.make_node("Add", ["var", "eps"], ["ve"]),
        helper.make_node("Sqrt", ["ve"], ["std"]),
        helper.make_node("Div", ["d", "std"], ["n"]),
        helper.make_node("Mul", ["n", "gamma"], ["g"]),
        helper.make_node("Add", ["g", "beta"], ["y"]),
    ]
    model = make(nodes, [("x", [2, 5, w])], [("y", [2, 5, w])],
                 {"two": np.float32(2.0), "eps": np.float32(1e-5),
                  "gamma": RNG.normal(size=w), "beta": RNG.normal(size=w)})
    x = RNG.normal(size=(2, 5, w)).astype(np.float32)
    fusions, ops = check(model, {"x": x})
    assert any(f.startswith("LayerNorm: 9 nodes") for f in fusions), fusions
    assert ops == ["LayerNormalization"]


def test_conv_bn_relu_and_residual():
    c = 4
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c1"], pads=[1, 1, 1, 1]),
        helper.make_node("BatchNormalization", ["c1", "s", "b", "m", "v"], ["bn"]),
        helper.make_node("Add", ["bn", "x"], ["res"]),
        helper.make_node("Relu", ["res"], ["y"]),
    ]
    model = make(nodes, [("x", [1, c, 6, 6])], [("y", [1, c, 6, 6])],
                 {"w": RNG.normal(size=(c, c, 3, 3)), "s": RNG.uniform(0.5, 1.5, c),
                  "b": RNG.normal(size=c), "m": RNG.normal(size=c),
                  "v": RNG.uniform(0.5, 2.0, c)})
    fusions, ops = check(model, {"x": RNG.normal(size=(1, c, 6, 6)).astype(np.float32)})
    assert ops == ["Conv"]
    # x + Conv(x): the identity is the centre tap of each channel's own input added to the
    # weights (parallel_convs), not a residual read
    assert [f.split(":")[0] for f in fusions] == [
        "Conv+BatchNormalization", "parallel convolutions", "Conv+Relu"]


def test_matmul_bias_gelu():
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["mm"]),
        helper.make_node("Add", ["bias", "mm"], ["h"]),
        helper.make_node("Div", ["h", "sqrt2"], ["hd"]),
        helper.make_node("Erf", ["hd"], ["e"]),
        helper.make_node("Add", ["e", "one"], ["e1"]),
        helper.make_node("Mul", ["h", "e1"], ["he"]),
        helper.make_node("Mul", ["he", "half"], ["y"]),
    ]
    model = make(nodes, [("x", [3, 8])], [("y", [3, 6])],
                 {"w": RNG.normal(size=(8, 6)), "bias": RNG.normal(size=6),
                  "sqrt2": np.float32(2 ** 0.5), "one": np.float32(1.0),
                  "half": np.float32(0.5)})
    fusions, ops = check(model, {"x": RNG.normal(size=(3, 8)).astype(np.float32)})
    assert ops == ["MatMul"], ops
    assert [f.split(":")[0] for f in fusions] == ["Erf-GELU", "MatMul+bias", "MatMul+Gelu"]


def test_unfusable_shared_intermediate_is_left_alone():
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c1"]),
        helper.make_node("Relu", ["c1"], ["r"]),
        helper.make_node("Add", ["r", "c1"], ["y"]),  # c1 has two readers: no activation fusion
    ]
    model = make(nodes, [("x", [1, 2, 4, 4])], [("y", [1, 2, 4, 4])],
                 {"w": RNG.normal(size=(2, 2, 1, 1))})
    fusions, ops = check(model, {"x": RNG.normal(size=(1, 2, 4, 4)).astype(np.float32)})
    assert not any("Conv+Relu" in f for f in fusions)
    # Relu then Add (with c1 as its operand) still run as one elementwise chain.
    assert ops == ["Conv", "EltwiseChain"], ops
    assert [f.split(":")[0] for f in fusions] == ["EltwiseChain(Relu+Add)"]


def _tf_style_conv1d_stack(bias_shape):
    """Two 1-D convolutions as tf2onnx writes Keras' Conv1D: each the 2-D Conv of an
    Unsqueeze, Squeezed back, its bias an Add on the 3-D view, then Relu."""
    c, k = 8, 3
    nodes, inits = [], {"axes": np.array([2], np.int64)}
    src = "x"
    for i in range(2):
        inits[f"w{i}"] = RNG.normal(size=(c, c, 1, k)) * 0.3
        inits[f"b{i}"] = RNG.normal(size=bias_shape)
        nodes += [helper.make_node("Unsqueeze", [src, "axes"], [f"u{i}"]),
                  helper.make_node("Conv", [f"u{i}", f"w{i}"], [f"c{i}"], pads=[0, 1, 0, 1]),
                  helper.make_node("Squeeze", [f"c{i}", "axes"], [f"s{i}"]),
                  helper.make_node("Add", [f"s{i}", f"b{i}"], [f"a{i}"]),
                  helper.make_node("Relu", [f"a{i}"], [f"r{i}" if i == 0 else "y"])]
        src = f"r{i}"
    return make(nodes, [("x", [2, c, 40])], [("y", [2, c, 40])], inits)


@pytest.mark.parametrize("bias_shape", [(8, 1), (1, 8, 1), (1,)])
def test_a_bias_add_on_a_1d_view_joins_its_conv(bias_shape):
    """The Squeeze/Unsqueeze round trip between the convolutions goes (with the bias on the
    3-D view reshaped for the 4-D value) and the bias Add joins the Conv's bias: two Convs
    with their Relu, no Add and no reshape left."""
    model = _tf_style_conv1d_stack(bias_shape)
    fusions, ops = check(model, {"x": RNG.normal(size=(2, 8, 40)).astype(np.float32)})
    assert [f.split(":")[0] for f in fusions].count("Conv+bias") == 2, fusions
    assert "Add" not in ops and ops.count("Conv") == 2, ops


def test_a_bias_add_that_varies_along_width_stays_an_add():
    """A constant that is not per channel is not a bias: the Add stays, the result is right."""
    model = _tf_style_conv1d_stack((1, 40))
    fusions, ops = check(model, {"x": RNG.normal(size=(2, 8, 40)).astype(np.float32)})
    assert not any(f.startswith("Conv+bias") for f in fusions), fusions
    assert "Add" in ops, ops


def _conv1d(i, src, c=8, k=3):
    """tf2onnx's Conv1D without bias: Unsqueeze, 2-D Conv, Squeeze (its weight w{i})."""
    return [helper.make_node("Unsqueeze", [src, "axes"], [f"u{i}"]),
            helper.make_node("Conv", [f"u{i}", f"w{i}"], [f"c{i}"], pads=[0, 1, 0, 1]),
            helper.make_node("Squeeze", [f"c{i}", "axes"], [f"s{i}"])], \
        {f"w{i}": RNG.normal(size=(c, c, 1, k)) * 0.3}


def test_a_batch_norm_between_1d_convs_keeps_its_channel_parameters():
    """torch's Conv1d, BatchNorm1d, ReLU, MaxPool1d, Conv1d: the convolutions and the pool
    become 2-D ones of [N, C, 1, W] with reshapes between; the BatchNormalization's [C]
    parameters belong to axis 1 at any rank and are not broadcast like an Add's operand
    (which, with as many steps as channels, would have fit the last axis)."""
    c = 8
    nodes = [helper.make_node("Conv", ["x", "w0"], ["c0"], pads=[1, 1]),
             helper.make_node("BatchNormalization", ["c0", "g", "b", "m", "v"], ["bn"]),
             helper.make_node("Relu", ["bn"], ["r"]),
             helper.make_node("MaxPool", ["r"], ["p"], kernel_shape=[2], strides=[2]),
             helper.make_node("Conv", ["p", "w1"], ["y"], pads=[1, 1])]
    inits = {"w0": RNG.normal(size=(c, c, 3)) * 0.3, "w1": RNG.normal(size=(c, c, 3)) * 0.3,
             "g": RNG.uniform(0.5, 1.5, c), "b": RNG.normal(size=c), "m": RNG.normal(size=c),
             "v": RNG.uniform(0.5, 2, c)}
    model = make(nodes, [("x", [2, c, c])], [("y", [2, c, c // 2])], inits)
    check(model, {"x": RNG.normal(size=(2, c, c)).astype(np.float32)})


def test_a_round_trip_whose_value_has_another_reader_stays():
    """The activation between two 1-D convolutions also feeds a residual Add on the 3-D
    view: it must keep its 3-D shape for that reader."""
    c = 8
    n0, w0 = _conv1d(0, "x")
    n1, w1 = _conv1d(1, "r")
    nodes = n0 + [helper.make_node("Relu", ["s0"], ["r"])] + n1 \
        + [helper.make_node("Add", ["s1", "r"], ["y"])]
    inits = {"axes": np.array([2], np.int64), **w0, **w1}
    model = make(nodes, [("x", [2, c, 40])], [("y", [2, c, 40])], inits)
    check(model, {"x": RNG.normal(size=(2, c, 40)).astype(np.float32)})


def _rms_inverse(spelling):
    """Nodes computing `inv` (or `y` directly for "div") from `v` = mean square + eps."""
    if spelling == "div":
        return [helper.make_node("Sqrt", ["v"], ["r"]), helper.make_node("Div", ["x", "r"], ["y"])]
    if spelling == "reciprocal":
        tail = [helper.make_node("Sqrt", ["v"], ["r"]),
                helper.make_node("Reciprocal", ["r"], ["inv"])]
    elif spelling == "one_over":
        tail = [helper.make_node("Sqrt", ["v"], ["r"]),
                helper.make_node("Div", ["one", "r"], ["inv"])]
    else:  # pow
        tail = [helper.make_node("Pow", ["v", "minus_half"], ["inv"])]
    return tail + [helper.make_node("Mul", ["inv", "x"], ["y"])]


@pytest.mark.parametrize("spelling", ["div", "reciprocal", "one_over", "pow"])
@pytest.mark.parametrize("square, weight", [("Pow", "right"), ("Mul", "left"), ("Mul", None)])
def test_decomposed_rms_norm_becomes_one_node(spelling, square, weight):
    """LLaMA's and T5's norm as exporters spell it: one RMSNormalization node (with the
    weight Mul on either side absorbed), equal to ONNX Runtime's steps."""
    w = 64
    sq = helper.make_node("Pow", ["x", "two"], ["sq"]) if square == "Pow" \
        else helper.make_node("Mul", ["x", "x"], ["sq"])
    nodes = [sq, helper.make_node("ReduceMean", ["sq", "axes"], ["ms"], keepdims=1),
             helper.make_node("Add", ["ms", "eps"], ["v"])] + _rms_inverse(spelling)
    out = "y"
    if weight:
        ins = ["y", "g"] if weight == "right" else ["g", "y"]
        nodes.append(helper.make_node("Mul", ins, ["z"]))
        out = "z"
    inits = {"two": np.float32(2.0), "eps": np.float32(1e-6), "one": np.float32(1.0),
             "minus_half": np.float32(-0.5), "g": RNG.normal(size=w),
             "axes": np.array([-1], np.int64)}
    model = make(nodes, [("x", [2, 7, w])], [(out, [2, 7, w])], inits)
    model.opset_import[0].version = 18
    fusions, ops = check(model, {"x": RNG.normal(size=(2, 7, w)).astype(np.float32)})
    assert ops == ["RMSNormalization"], (ops, fusions)
    assert any(f.startswith("RMSNorm: ") for f in fusions), fusions


def test_rms_norm_steps_with_a_shared_intermediate_stay_steps():
    """The mean square also read elsewhere: not a norm to fuse; the numbers still agree."""
    w = 16
    nodes = [helper.make_node("Mul", ["x", "x"], ["sq"]),
             helper.make_node("ReduceMean", ["sq", "axes"], ["ms"], keepdims=1),
             helper.make_node("Add", ["ms", "eps"], ["v"]), helper.make_node("Sqrt", ["v"], ["r"]),
             helper.make_node("Div", ["x", "r"], ["y"]),
             helper.make_node("Add", ["y", "ms"], ["z"])]
    model = make(nodes, [("x", [3, w])], [("z", [3, w])],
                 {"eps": np.float32(1e-6), "axes": np.array([-1], np.int64)})
    model.opset_import[0].version = 18
    fusions, ops = check(model, {"x": RNG.normal(size=(3, w)).astype(np.float32)})
    assert "RMSNormalization" not in ops and not any(f.startswith("RMSNorm") for f in fusions)


@pytest.mark.parametrize("shift_op", ["Add", "Sub"])
def test_a_batch_norm_written_as_mul_and_add_folds_into_its_conv(shift_op):
    """Keras 3's batch norm after a Conv is a per-channel Mul and Add (or Sub): the Mul
    scales the Conv's weights and bias, the Add joins the bias; one Conv with its Relu."""
    c = 6
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["y0"], pads=[1, 1, 1, 1]),
             helper.make_node("Mul", ["s", "y0"], ["y1"]),
             helper.make_node(shift_op, ["y1", "t"], ["y2"]),
             helper.make_node("Relu", ["y2"], ["y"])]
    model = make(nodes, [("x", [2, 3, 9, 9])], [("y", [2, c, 9, 9])],
                 {"w": RNG.normal(size=(c, 3, 3, 3)), "b": RNG.normal(size=c),
                  "s": RNG.uniform(0.5, 2.0, (1, c, 1, 1)), "t": RNG.normal(size=(c, 1, 1))})
    fusions, ops = check(model, {"x": RNG.normal(size=(2, 3, 9, 9)).astype(np.float32)})
    assert ops == ["Conv"], ops
    assert [f.split(":")[0] for f in fusions][:2] == ["Conv+scale", "Conv+bias"], fusions


def test_a_constant_minus_a_conv_is_not_a_bias():
    """c - conv stays a Sub, and runs: in the NHWC region it failed to load (oneDNN
    broadcasts only a Sub's second operand), so it stays plain."""
    c = 4
    nodes = [helper.make_node("Conv", ["x", "w"], ["y0"]),
             helper.make_node("Sub", ["t", "y0"], ["y"])]
    model = make(nodes, [("x", [1, 2, 5, 5])], [("y", [1, c, 5, 5])],
                 {"w": RNG.normal(size=(c, 2, 1, 1)), "t": RNG.normal(size=(1, c, 1, 1))})
    fusions, ops = check(model, {"x": RNG.normal(size=(1, 2, 5, 5)).astype(np.float32)})
    assert "Sub" in ops and not any(f.startswith("Conv+bias") for f in fusions), fusions


@pytest.mark.parametrize("group", [1, 2])
@pytest.mark.parametrize("then", ["BatchNormalization", "Mul"])
def test_a_conv_transpose_takes_its_batch_norm_or_scale(group, then):
    """A text detector's upsampling head: ConvTranspose, then a BatchNormalization (or a
    per-channel Mul) and Relu: the scaling folds into the ConvTranspose's weights, whose
    output channels are split over the groups."""
    cin, cout = 4, 6
    nodes = [helper.make_node("ConvTranspose", ["x", "w", "b"], ["u"], strides=[2, 2],
                              kernel_shape=[2, 2], group=group)]
    inits = {"w": RNG.normal(size=(cin, cout // group, 2, 2)), "b": RNG.normal(size=cout)}
    if then == "BatchNormalization":
        nodes.append(helper.make_node("BatchNormalization", ["u", "s", "t", "m", "v"], ["n"]))
        inits.update({"s": RNG.uniform(0.5, 1.5, cout), "t": RNG.normal(size=cout),
                      "m": RNG.normal(size=cout), "v": RNG.uniform(0.5, 2, cout)})
    else:
        nodes.append(helper.make_node("Mul", ["u", "s"], ["n"]))
        inits["s"] = RNG.uniform(0.5, 1.5, (cout, 1, 1))
    nodes.append(helper.make_node("Relu", ["n"], ["y"]))
    model = make(nodes, [("x", [1, cin, 5, 5])], [("y", [1, cout, 10, 10])], inits)
    fusions, ops = check(model, {"x": RNG.normal(size=(1, cin, 5, 5)).astype(np.float32)})
    assert ops == ["ConvTranspose"], (ops, fusions)


@pytest.mark.parametrize("then,fused", [("Relu", True), ("Sigmoid", False)])
@pytest.mark.parametrize("batch,c", [(1, 5), (3, 16)])
def test_a_pre_activation_batch_norm_takes_its_relu(then, fused, batch, c):
    """DenseNet's layer: Concat -> BatchNormalization -> Relu -> Conv. The Relu runs inside
    the normalization's pass (oneDNN's fuse_norm_relu); other activations stay apart."""
    nodes = [
        helper.make_node("Conv", ["x", "w1"], ["a"], pads=[1, 1, 1, 1]),
        helper.make_node("Concat", ["a", "x"], ["cat"], axis=1),
        helper.make_node("BatchNormalization", ["cat", "s", "b", "m", "v"], ["bn"]),
        helper.make_node(then, ["bn"], ["act"]),
        helper.make_node("Conv", ["act", "w2"], ["y"], pads=[1, 1, 1, 1]),
    ]
    k = 2 * c
    model = make(nodes, [("x", [batch, c, 6, 7])], [("y", None)],
                 {"w1": RNG.normal(size=(c, c, 3, 3)), "w2": RNG.normal(size=(4, k, 3, 3)),
                  "s": RNG.uniform(0.5, 1.5, k), "b": RNG.normal(size=k),
                  "m": RNG.normal(size=k), "v": RNG.uniform(0.5, 2.0, k)})
    fusions, ops = check(model, {"x": RNG.normal(size=(batch, c, 6, 7)).astype(np.float32)})
    assert ("BatchNormalization+Relu" in [f.split(":")[0] for f in fusions]) == fused, fusions
    assert (then in ops) != fused, ops


@pytest.mark.parametrize("shape", [(50, 24), (7, 1), (3, 24, 5)])
@pytest.mark.parametrize("relu", [True, False])
def test_a_batch_norm_of_a_plain_row_tensor_reads_rows_of_channels(shape, relu):
    """BatchNorm1d's [N, C] input (no spatial axes) runs a row of C channels at a time, not
    one element a row; [N, C, L] keeps its planes. Outputs equal onnxruntime's."""
    c = shape[1]
    nodes = [helper.make_node("BatchNormalization", ["x", "s", "b", "m", "v"], ["bn"],
                              epsilon=1e-3)]
    nodes += [helper.make_node("Relu", ["bn"], ["y"])] if relu else \
        [helper.make_node("Identity", ["bn"], ["y"])]
    model = make(nodes, [("x", list(shape))], [("y", None)],
                 {"s": RNG.uniform(0.5, 1.5, c), "b": RNG.normal(size=c),
                  "m": RNG.normal(size=c), "v": RNG.uniform(0.5, 2.0, c)})
    loaded = load(compile_graph(load_model(model), CompileOptions(lint=True)))
    impls = [t["impl"] for n in loaded.natives.values() for t in n.profile()]
    rows_of_c = len(shape) == 2 and c > 1
    assert ("channel affine loop, rows of channels" in impls) == rows_of_c, impls
    x = RNG.normal(size=shape).astype(np.float32)
    got = loaded.execute({"x": x})["y"]
    want = ort.InferenceSession(model.SerializeToString()).run(None, {"x": x})[0]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("fmt,c", [("nhwc", 5), ("nChw8c", 8), ("nChw16c", 16), ("nhwc", 20)])
@pytest.mark.parametrize("relu", [True, False])
@pytest.mark.parametrize("batch", [1, 3])
def test_a_batch_norm_of_constants_runs_as_a_channel_affine_loop(fmt, c, relu, batch):
    """A standalone inference BatchNormalization (constant parameters) is y = x * a[c] + b[c]
    folded at load, run by the runtime's own loop in every format (oneDNN's took AVX2/SSE4.1
    code on NHWC with channels off 16); its outputs equal onnxruntime's."""
    nodes = [helper.make_node("Conv", ["x", "w1"], ["a"], pads=[1, 1, 1, 1]),
             helper.make_node("Concat", ["a", "x"], ["cat"], axis=1),
             helper.make_node("BatchNormalization", ["cat", "s", "b", "m", "v"], ["bn"],
                              epsilon=1e-3)]
    nodes += [helper.make_node("Relu", ["bn"], ["act"])] if relu else []
    nodes += [helper.make_node("Conv", ["act" if relu else "bn", "w2"], ["y"])]
    k = 2 * c
    model = make(nodes, [("x", [batch, c, 5, 6])], [("y", None)],
                 {"w1": RNG.normal(size=(c, c, 3, 3)), "w2": RNG.normal(size=(3, k, 1, 1)),
                  "s": RNG.uniform(0.5, 1.5, k), "b": RNG.normal(size=k),
                  "m": RNG.normal(size=k), "v": RNG.uniform(0.5, 2.0, k)})
    compiled = compile_graph(load_model(model), CompileOptions(lint=True, layout_format=fmt))
    loaded = load(compiled)
    impls = {t["name"]: t["impl"] for n in loaded.natives.values() for t in n.profile()}
    (bn,) = [name for name in impls if "batchnormalization" in name.lower()]
    assert impls[bn] == "channel affine loop", impls
    x = RNG.normal(size=(batch, c, 5, 6)).astype(np.float32)
    got = loaded.execute({"x": x})["y"]
    want = ort.InferenceSession(model.SerializeToString()).run(None, {"x": x})[0]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
