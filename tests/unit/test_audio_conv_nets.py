"""Convolution nets over audio features and bytes (openWakeWord's embedding net, magika):
a clamp after a Conv's LeakyRelu as its second activation, Slices that keep everything,
epilogues through chains of views, [1, .., 1, N] MatMul biases, one-hot products as row
lookups. Each compiled graph is checked against ONNX Runtime and for its structure."""

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from graphengine.engine.importers import load_model
from graphengine.engine.pipeline import CompileOptions, compile_graph
from graphengine.engine.runtime import LoadedModel

RNG = np.random.default_rng(19)


def _model(nodes, inputs, inits, opset=17):
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info(
        name, TensorProto.INT32 if x.dtype == np.int32 else TensorProto.FLOAT, list(x.shape))
        for name, x in inputs.items()], [helper.make_tensor_value_info(
            "y", TensorProto.FLOAT, None)], [numpy_helper.from_array(v, k)
                                             for k, v in inits.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)],
                             ir_version=8)


def _run(nodes, inputs, inits, atol=1e-5):
    """(the compiled model, its kernel tasks' ops); its result matches ONNX Runtime's."""
    model = _model(nodes, inputs, inits)
    compiled = compile_graph(load_model(model), CompileOptions(lint=True))
    assert {p.engine for p in compiled.report.placements} == {"device"}, compiled.report.render()
    got = LoadedModel(compiled).execute(inputs)["y"]
    want = ort.InferenceSession(model.SerializeToString(),
                                providers=["CPUExecutionProvider"]).run(None, inputs)[0]
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=atol)
    ops = [t.op for p in compiled.programs for t in getattr(p, "tasks", []) if t.kind == "kernel"]
    return compiled, ops


def _compute(ops):
    """The tasks that compute (the layout conversions at a region's edges left out)."""
    return [op for op in ops if op != "TransData"]


def _conv_tasks(compiled):
    return [t for p in compiled.programs for t in getattr(p, "tasks", [])
            if t.kind == "kernel" and t.op == "Conv"]


@pytest.mark.parametrize("bound,value", [("Max", -0.4), ("Min", 0.3)])
def test_a_clamp_after_the_activation_is_the_convs_second_activation(bound, value):
    """openWakeWord's Conv -> LeakyRelu -> Max(x, -0.4) runs as one Conv task whose
    post-ops are the LeakyRelu and a Clip (before: a Max task after every Conv)."""
    x = RNG.standard_normal((2, 8, 12, 10)).astype(np.float32)
    inits = {"w": RNG.standard_normal((16, 8, 3, 1)).astype(np.float32) * 0.3,
             "b": RNG.standard_normal(16).astype(np.float32),
             "c": np.full((1, 1, 1, 1), value, np.float32)}
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["h"], pads=[1, 0, 1, 0]),
             helper.make_node("LeakyRelu", ["h"], ["a"], alpha=0.2),
             # the constant first: the bound is found on either side
             helper.make_node(bound, ["c", "a"], ["y"])]
    compiled, ops = _run(nodes, {"x": x}, inits)
    assert _compute(ops) == ["Conv"], compiled.report.render()
    (conv,) = _conv_tasks(compiled)
    assert conv.attrs["activation"] == "LeakyRelu" and conv.attrs["activation2"] == "Clip"
    lo, hi = conv.attrs["activation2_alpha"], conv.attrs["activation2_beta"]
    assert (lo, hi) == ((pytest.approx(value), float("inf")) if bound == "Max"
                        else (float("-inf"), pytest.approx(value)))


def test_a_scalar_max_after_a_plain_conv_is_its_clip():
    """Max(Conv(x), c) with no activation before it is the Conv's Clip activation; a Max
    whose constant has more axes than x (it widens the output) is left alone."""
    x = RNG.standard_normal((1, 4, 6, 6)).astype(np.float32)
    inits = {"w": RNG.standard_normal((8, 4, 3, 3)).astype(np.float32),
             "c": np.full((1,), 0.5, np.float32)}
    compiled, ops = _run([helper.make_node("Conv", ["x", "w"], ["h"], pads=[1, 1, 1, 1]),
                          helper.make_node("Max", ["h", "c"], ["y"])], {"x": x}, inits)
    assert _compute(ops) == ["Conv"]
    assert _conv_tasks(compiled)[0].attrs["activation"] == "Clip"
    inits["c"] = np.full((1, 1, 1, 1, 1), 0.5, np.float32)
    _, ops = _run([helper.make_node("Conv", ["x", "w"], ["h"], pads=[1, 1, 1, 1]),
                   helper.make_node("Max", ["h", "c"], ["y"])], {"x": x}, inits)
    assert _compute(ops) == ["Conv", "Max"]


def _magika_like(batch=2, steps=160, ch=16, out=32):
    """Bytes -> one-hot (Equal, Cast) @ table + [1, 1, C] bias -> Reshape [N, steps, ch] ->
    Unsqueeze -> whole Slice -> Transpose [0, 2, 1, 3] -> Conv (5, 1) -> whole Slice ->
    Squeeze -> bias Add -> GlobalMaxPool over time, as jax2tf writes magika."""
    ids = RNG.integers(-3, 260, size=(batch, steps * 2)).astype(np.int32)
    inits = {
        "shape1": np.asarray([-1, steps * 2, 1], np.int64),
        "range": np.arange(257, dtype=np.int32).reshape(1, 1, 257),
        "table": RNG.standard_normal((257, ch // 2)).astype(np.float32),
        "bias0": RNG.standard_normal((1, 1, ch // 2)).astype(np.float32),
        "shape2": np.asarray([-1, steps, ch], np.int64),
        "ax3": np.asarray([3], np.int64),
        "s0": np.zeros(4, np.int64), "s1": np.full(4, 1 << 30, np.int64),
        "axes": np.asarray([0, 2, 1, 3], np.int64), "steps": np.ones(4, np.int64),
        "w": RNG.standard_normal((out, ch, 5, 1)).astype(np.float32) * 0.2,
        "bias1": RNG.standard_normal((1, out, 1)).astype(np.float32),
        "ax2": np.asarray([2], np.int64),
    }
    nodes = [
        helper.make_node("Reshape", ["ids", "shape1"], ["col"]),
        helper.make_node("Equal", ["col", "range"], ["hot"]),
        helper.make_node("Cast", ["hot"], ["hotf"], to=TensorProto.FLOAT),
        helper.make_node("MatMul", ["hotf", "table"], ["emb"]),
        helper.make_node("Add", ["emb", "bias0"], ["embb"]),
        helper.make_node("Reshape", ["embb", "shape2"], ["seq"]),
        helper.make_node("Unsqueeze", ["seq", "ax3"], ["seq4"]),
        helper.make_node("Slice", ["seq4", "s0", "s1", "axes", "steps"], ["whole"]),
        helper.make_node("Transpose", ["whole"], ["nchw"], perm=[0, 2, 1, 3]),
        helper.make_node("Conv", ["nchw", "w"], ["conv"], kernel_shape=[5, 1]),
        helper.make_node("Slice", ["conv", "s0", "s1", "axes", "steps"], ["conv2"]),
        helper.make_node("Squeeze", ["conv2", "ax3"], ["conv3"]),
        helper.make_node("Add", ["conv3", "bias1"], ["act"]),
        helper.make_node("GlobalMaxPool", ["act"], ["pool"]),
        helper.make_node("Squeeze", ["pool", "ax2"], ["y"]),
    ]
    return nodes, {"ids": ids}, inits


def test_a_one_hot_product_is_a_row_lookup_and_the_conv_reads_a_view():
    """The one-hot MatMul becomes a Gather (ids outside the range give zero rows), the
    Slices that keep everything are gone, the Transpose into the Conv is a view, the
    Conv's bias comes through its Reshape back to [N, C, H, 1] and the Squeeze, and the pool
    reads the Conv's output as it is: no Equal, Cast, MatMul, Slice, Transpose or TransData
    task is left, nor the Add of the embedding's bias (folded into the table)."""
    compiled, ops = _run(*_magika_like())
    assert "Gather" in ops and "Conv" in ops
    for gone in ("Equal", "Cast", "MatMul", "Slice", "Transpose", "TransData"):
        assert gone not in ops, (gone, ops)
    (conv,) = _conv_tasks(compiled)
    assert len(conv.inputs) == 3  # the bias Add after the Squeeze is the Conv's bias
    assert "Add" not in ops  # the embedding's bias is in the looked-up table


@pytest.mark.parametrize("first", [0, 5])
def test_one_hot_lookup_matches_the_product_for_ids_outside_the_range(first):
    """Ids below and above c0 + arange(K) (and at its ends) give the product's zero rows;
    an offset range is a lookup of x - c0."""
    k = 11
    ids = np.asarray([[first - 7, first - 1, first, first + 3, first + k - 1, first + k,
                       first + 400, np.iinfo(np.int32).min]], np.int32)
    inits = {"shape1": np.asarray([1, ids.shape[1], 1], np.int64),
             "range": (first + np.arange(k, dtype=np.int32)).reshape(1, 1, k),
             "table": RNG.standard_normal((k, 6)).astype(np.float32)}
    nodes = [helper.make_node("Reshape", ["ids", "shape1"], ["col"]),
             helper.make_node("Equal", ["range", "col"], ["hot"]),
             helper.make_node("Cast", ["hot"], ["hotf"], to=TensorProto.FLOAT),
             helper.make_node("MatMul", ["hotf", "table"], ["y"])]
    compiled, ops = _run(nodes, {"ids": ids}, inits)
    assert "Gather" in ops and "MatMul" not in ops and "Equal" not in ops
    # a range with a gap is no one-hot of a range: left as it was
    inits["range"] = np.asarray([0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 12], np.int32).reshape(1, 1, k)
    _, ops = _run(nodes, {"ids": ids}, inits)
    assert "MatMul" in ops and "Gather" not in ops


def test_a_matmul_bias_written_with_unit_axes_joins_the_matmul():
    x = RNG.standard_normal((2, 7, 12)).astype(np.float32)
    inits = {"w": RNG.standard_normal((12, 10)).astype(np.float32),
             "b": RNG.standard_normal((1, 1, 10)).astype(np.float32)}
    compiled, ops = _run([helper.make_node("MatMul", ["x", "w"], ["m"]),
                          helper.make_node("Add", ["m", "b"], ["y"])], {"x": x}, inits)
    assert ops == ["MatMul"] and any("MatMul+bias" in f for f in compiled.report.fusions)
    inits["b"] = RNG.standard_normal((2, 1, 10)).astype(np.float32)  # per sample: not a bias
    _, ops = _run([helper.make_node("MatMul", ["x", "w"], ["m"]),
                   helper.make_node("Add", ["m", "b"], ["y"])], {"x": x}, inits)
    assert ops == ["MatMul", "Add"]


def test_a_slice_that_keeps_everything_is_no_task_but_a_reversing_one_is():
    x = RNG.standard_normal((2, 3, 4)).astype(np.float32)
    inits = {"s": np.asarray([0, 0], np.int64), "e": np.asarray([2, 100], np.int64),
             "a": np.asarray([0, 2], np.int64), "st": np.asarray([1, 1], np.int64)}
    nodes = [helper.make_node("Slice", ["x", "s", "e", "a", "st"], ["t"]),
             helper.make_node("Relu", ["t"], ["y"])]
    _, ops = _run(nodes, {"x": x}, inits)
    assert "Slice" not in ops
    inits.update(s=np.asarray([1, -1], np.int64), e=np.asarray([-3, -100], np.int64),
                 st=np.asarray([-1, -1], np.int64))  # the same shape, reversed
    _, ops = _run(nodes, {"x": x}, inits)
    assert "Slice" in ops


def test_elementwise_ops_of_a_lookup_are_a_lookup_of_their_table():
    """tanh(g * g + bias) of g = Gather(T, ids) is one Gather of tanh(T * T + bias); a
    constant that varies along the ids' axes (per position) is not folded."""
    ids = RNG.integers(0, 9, size=(3, 20)).astype(np.int32)
    inits = {"t": RNG.standard_normal((9, 5)).astype(np.float32),
             "b": RNG.standard_normal((1, 1, 5)).astype(np.float32)}
    nodes = [helper.make_node("Gather", ["t", "ids"], ["g"]),
             helper.make_node("Mul", ["g", "g"], ["sq"]),
             helper.make_node("Add", ["sq", "b"], ["z"]),
             helper.make_node("Tanh", ["z"], ["y"])]
    _, ops = _run(nodes, {"ids": ids}, inits)
    assert ops == ["Gather"]
    inits["b"] = RNG.standard_normal((1, 20, 5)).astype(np.float32)
    _, ops = _run(nodes, {"ids": ids}, inits)
    # not folded into the table: the elementwise ops run after the lookup (one region, g read
    # twice)
    assert ops == ["Gather", "EltwiseGraph"], ops


@pytest.mark.parametrize("bound", ["Max", "Min"])
def test_a_scalar_bound_of_any_value_is_a_clip(bound):
    """Max/Min of a value and a one-element float constant runs as Clip (an elementwise
    chain with its neighbours: one task here), infinities included."""
    x = RNG.standard_normal((3, 40)).astype(np.float32)
    x[0, :3] = [np.inf, -np.inf, 0.25]
    inits = {"c": np.asarray([0.25], np.float32)}
    compiled, ops = _run([helper.make_node("Neg", ["x"], ["n"]),
                          helper.make_node(bound, ["n", "c"], ["y"])], {"x": x}, inits)
    assert len(ops) == 1 and any("Clip" in f for f in compiled.report.fusions), ops


def _conv_impls(loaded):
    return [t["impl"] for native in loaded.natives.values() for t in native.profile()
            if t["op"] == "Conv"]


@pytest.mark.parametrize("activation", ["Relu", "Sigmoid"])
def test_a_long_1d_conv_with_an_activation_is_not_a_brgemm_convolution(activation):
    """A speech encoder's 1-D convolution over a long row with its activation as a post-op
    runs on oneDNN's direct JIT kernel: the brgemm one generates the post-op's code for every
    output of the row at load (64 channels, 1599 outputs: 19-46 ms with GELU, against ~0.5
    ms), and the narrow kernel set pays it again. Same result as ONNX Runtime. 96 channels:
    at most 64 the runtime's own 1-D kernel runs it (test_conv1d_kernel.py)."""
    x = RNG.standard_normal((1, 96, 1001)).astype(np.float32)
    inits = {"w": RNG.standard_normal((96, 96, 3)).astype(np.float32) * 0.1}
    nodes = [helper.make_node("Conv", ["x", "w"], ["h"], strides=[2]),
             helper.make_node(activation, ["h"], ["y"])]
    compiled, ops = _run(nodes, {"x": x}, inits)
    assert _compute(ops) == ["Conv"]
    loaded = LoadedModel(compiled)
    loaded.execute({"x": x})
    (impl,) = _conv_impls(loaded)
    if "avx2" not in impl and "avx512" not in impl:
        pytest.skip(f"this CPU's convolution is {impl}: no brgemm kernel to avoid")
    assert impl.startswith("oneDNN jit:"), impl


@pytest.mark.parametrize("group", [1, 16])
def test_a_batch_norm_after_a_1d_conv_folds_into_it_through_its_view(group):
    """A Conformer's conv module: depthwise Conv1d -> BatchNorm1d -> activation. The 1-D
    convolution runs as a 2-D one reshaped back to [N, C, T]; the normalization on that view
    (axis 1 still the Conv's channels) folds into the Conv's weights and bias, and the
    activation after it becomes the Conv's post-op: one Conv task (before: Conv,
    BatchNormalization and Relu tasks, with layout conversions between)."""
    c = 16
    x = RNG.standard_normal((2, c, 40)).astype(np.float32)
    inits = {"w": RNG.standard_normal((c, c // group, 15)).astype(np.float32) * 0.2,
             "b": RNG.standard_normal(c).astype(np.float32),
             "scale": RNG.uniform(0.5, 1.5, c).astype(np.float32),
             "shift": RNG.standard_normal(c).astype(np.float32),
             "mean": RNG.standard_normal(c).astype(np.float32),
             "var": RNG.uniform(0.5, 2.0, c).astype(np.float32)}
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["h"], pads=[7, 7], group=group),
             helper.make_node("BatchNormalization", ["h", "scale", "shift", "mean", "var"],
                              ["n"], epsilon=1e-3),
             helper.make_node("Relu", ["n"], ["y"])]
    compiled, ops = _run(nodes, {"x": x}, inits, atol=1e-4)
    assert _compute(ops) == ["Conv"], compiled.report.render()
    (conv,) = _conv_tasks(compiled)
    assert conv.attrs["activation"] == "Relu"
    assert any(line.startswith("Conv+BatchNormalization") and "through Reshape" in line
               for line in compiled.report.fusions), compiled.report.fusions


def test_a_batch_norm_on_a_view_that_moves_the_channels_stays():
    """A view of the Conv's output whose axis 1 is not the Conv's channels (8 channels of 6
    steps read as 4 of 12): the normalization's channels are not the Conv's, it stays."""
    x = RNG.standard_normal((2, 4, 8)).astype(np.float32)
    inits = {"w": RNG.standard_normal((8, 4, 3)).astype(np.float32),
             "shape": np.asarray([2, 4, 12], np.int64),
             "scale": RNG.uniform(0.5, 1.5, 4).astype(np.float32),
             "shift": RNG.standard_normal(4).astype(np.float32),
             "mean": RNG.standard_normal(4).astype(np.float32),
             "var": RNG.uniform(0.5, 2.0, 4).astype(np.float32)}
    nodes = [helper.make_node("Conv", ["x", "w"], ["h"]),
             helper.make_node("Reshape", ["h", "shape"], ["v"]),
             helper.make_node("BatchNormalization", ["v", "scale", "shift", "mean", "var"],
                              ["y"])]
    compiled, ops = _run(nodes, {"x": x}, inits, atol=1e-4)
    assert "BatchNormalization" in _compute(ops), compiled.report.render()
    assert not any(line.startswith("Conv+BatchNormalization")
                   for line in compiled.report.fusions)


def _gated_layer(cuts, last_axis=False):
    """Conv1d (16 -> 32 channels) -> Slices by `cuts` -> tanh(first) * sigmoid(second) ->
    Conv1d: WaveNet's gated activation (`last_axis`: the Slices cut the time axis instead)."""
    axis = 2 if last_axis else 1
    nodes = [helper.make_node("Conv", ["x", "w0"], ["h"], pads=[1, 1])]
    for k in range(len(cuts)):
        nodes.append(helper.make_node("Slice", ["h", f"s{k}", f"e{k}", "ax"], [f"p{k}"]))
    nodes += [helper.make_node("Tanh", ["p0"], ["t"]), helper.make_node("Sigmoid", ["p1"], ["g"]),
              helper.make_node("Mul", ["t", "g"], ["z"]),
              helper.make_node("Conv", ["z", "w1"], ["y"])]
    inits = {"w0": RNG.standard_normal((32, 16, 3)).astype(np.float32) * 0.2,
             "w1": RNG.standard_normal((8, min(cuts[0][1], 32) - cuts[0][0], 1)
                                       ).astype(np.float32) * 0.2,
             "ax": np.asarray([axis], np.int64)}
    for k, (a, b) in enumerate(cuts):
        inits[f"s{k}"], inits[f"e{k}"] = np.asarray([a], np.int64), np.asarray([b], np.int64)
    if last_axis:
        inits["w1"] = RNG.standard_normal((8, 32, 1)).astype(np.float32) * 0.2
    return nodes, inits


def test_slices_that_cut_a_convs_channels_in_pieces_are_one_split():
    """The halves of a convolution's channels (a gated activation) are one Split, which cuts
    channels-last rows in place: no Slice and no layout conversion between the convolutions
    (an unseen WaveNet had two conversions and two Slices a layer)."""
    x = RNG.standard_normal((2, 16, 300)).astype(np.float32)
    for cuts in ([(0, 16), (16, 32)], [(16, 32), (0, 16)], [(0, 16), (16, 2**62)]):
        nodes, inits = _gated_layer(cuts)
        _, ops = _run(nodes, {"x": x}, inits)
        assert "Split" in ops and "Slice" not in ops and "TransData" not in ops[1:-1], ops


def test_slices_that_do_not_tile_the_channels_stay_slices():
    """Overlapping or incomplete pieces, or pieces of another axis, are left as Slices."""
    x = RNG.standard_normal((1, 16, 300)).astype(np.float32)
    for cuts, last in (([(0, 16), (8, 24)], False), ([(0, 15), (16, 31)], False),
                       ([(0, 150), (150, 300)], True)):
        nodes, inits = _gated_layer(cuts, last_axis=last)
        _, ops = _run(nodes, {"x": x}, inits)
        assert "Split" not in ops and ops.count("Slice") == 2, ops


def test_channel_pieces_that_are_graph_outputs_keep_their_names():
    """The Split takes over the Slices' own values: a piece that is a graph output is still
    that output, by name."""
    x = RNG.standard_normal((1, 16, 50)).astype(np.float32)
    inits = {"w0": RNG.standard_normal((32, 16, 3)).astype(np.float32) * 0.2,
             "ax": np.asarray([1], np.int64), "s0": np.asarray([0], np.int64),
             "e0": np.asarray([12], np.int64), "s1": np.asarray([12], np.int64),
             "e1": np.asarray([32], np.int64)}
    nodes = [helper.make_node("Conv", ["x", "w0"], ["h"], pads=[1, 1]),
             helper.make_node("Slice", ["h", "s0", "e0", "ax"], ["y"]),
             helper.make_node("Slice", ["h", "s1", "e1", "ax"], ["p1"]),
             helper.make_node("Tanh", ["p1"], ["z"])]
    model = _model(nodes, {"x": x}, inits)
    model.graph.output.append(helper.make_tensor_value_info("z", TensorProto.FLOAT, None))
    compiled = compile_graph(load_model(model), CompileOptions(lint=True))
    ops = [t.op for p in compiled.programs for t in getattr(p, "tasks", []) if t.kind == "kernel"]
    assert "Split" in ops and "Slice" not in ops, ops
    got = LoadedModel(compiled).execute({"x": x})
    want = dict(zip(["y", "z"], ort.InferenceSession(model.SerializeToString(), providers=[
        "CPUExecutionProvider"]).run(["y", "z"], {"x": x})))
    assert set(got) == {"y", "z"}
    for name in ("y", "z"):
        np.testing.assert_allclose(got[name], want[name], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("late", [False, True])
def test_a_residual_add_after_a_1d_convs_view_is_its_sum(late):
    """A 1-D convolution runs as a 2-D one on [N, C, 1, L], viewed back to [N, C, L] before
    the residual Add (HiFi-GAN's and WaveNet's residual stacks): the Add is the Conv's sum
    post-op through that view, the other side viewed as the Conv's output (before: an
    EltwiseChain task after each such Conv). `late`: the other side is computed after the
    Conv in the node order, and the graph is reordered for the Conv to read it."""
    x = RNG.standard_normal((2, 12, 50)).astype(np.float32)
    inits = {"w": RNG.standard_normal((12, 12, 5)).astype(np.float32) * 0.2,
             "w2": RNG.standard_normal((12, 12, 3)).astype(np.float32) * 0.2}
    first = [helper.make_node("Conv", ["x", "w2"], ["h"], pads=[1, 1])]
    conv = helper.make_node("Conv", ["h", "w"], ["c"], pads=[4, 4], dilations=[2])
    other = helper.make_node("Tanh", ["h"], ["t"])
    nodes = first + ([conv, other] if late else [other, conv]) + [
        helper.make_node("Add", ["c", "t"], ["s"]),
        helper.make_node("LeakyRelu", ["s"], ["a"], alpha=0.1),
        helper.make_node("Conv", ["a", "w2"], ["y"], pads=[1, 1])]
    compiled, ops = _run(nodes, {"x": x}, inits, atol=1e-4)
    assert "Add" not in _compute(ops) and "EltwiseChain" not in _compute(ops), ops
    summed = [t for t in _conv_tasks(compiled) if t.attrs.get("sum") == 1]
    assert len(summed) == 1 and summed[0].attrs["activation"] == "LeakyRelu"
    assert any("Add(residual)" in line and "through Reshape" in line
               for line in compiled.report.fusions), compiled.report.fusions


def test_a_residual_add_after_a_view_that_moves_elements_stays():
    """A view of the Conv's output that is not a unit-axis view ([N, 8, 1, 6] read as
    [N, 4, 12]): the Add stays an Add."""
    x = RNG.standard_normal((2, 4, 8)).astype(np.float32)
    inits = {"w": RNG.standard_normal((8, 4, 3)).astype(np.float32),
             "shape": np.asarray([2, 4, 12], np.int64)}
    r = RNG.standard_normal((2, 4, 12)).astype(np.float32)
    nodes = [helper.make_node("Conv", ["x", "w"], ["h"]),
             helper.make_node("Reshape", ["h", "shape"], ["v"]),
             helper.make_node("Neg", ["r"], ["n"]),
             helper.make_node("Add", ["v", "n"], ["y"])]
    compiled, _ = _run(nodes, {"x": x, "r": r}, inits, atol=1e-4)
    assert not any("Add(residual)" in line for line in compiled.report.fusions)
