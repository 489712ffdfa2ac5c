"""Batch splitting: memory-bound batch-separable graphs run as cache-sized sub-batches."""

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from graphengine.engine.importers import load_model
from graphengine.engine.optimize import batch_split
from graphengine.engine.pipeline import CompileOptions, compile_graph
from graphengine.engine.runtime import load
from tests import zoo
from tests.unit.conv_spec import conv_ops

RNG = np.random.default_rng(5)


def _compile_and_check(model, feeds, **opts):
    compiled = compile_graph(load_model(model), CompileOptions(lint=True, **opts))
    ours = load(compiled).execute(feeds)
    ref = ort.InferenceSession(model.SerializeToString()).run(None, feeds)
    names = [o.name for o in model.graph.output]
    assert list(ours) == names  # outputs keep their names and order
    for name, want in zip(names, ref):
        assert ours[name].shape == want.shape
        np.testing.assert_allclose(ours[name], want, rtol=1e-3, atol=1e-4)
    return compiled


def _splits(compiled):
    return [f for f in compiled.report.fusions if f.startswith("batch split")]


def _count(compiled, op):
    return sum(1 for p in compiled.report.placements if p.op_type == op)


def _largest_per_sample(model, batch):
    """The largest activation of one sample after fusion (what the pass budgets)."""
    from graphengine.engine.passes import PassManager
    from graphengine.engine.pipeline import bind_shapes, stages

    g = bind_shapes(load_model(model), None)
    pm = PassManager()
    for stage in stages(CompileOptions(batch_split=False, layouts=False)):
        g = pm.run_stage(stage, g)
    return g, max(n.outputs[0].meta.nbytes for n in g.nodes) // batch


@pytest.mark.parametrize("batch,fits,chunks", [(8, 4, 2), (8, 1, 8), (6, 2, 3), (6, 5, 2)])
def test_mobilenet_runs_in_chunks_and_matches_onnxruntime(monkeypatch, batch, fits, chunks):
    model = zoo.mobilenetv2(width_mult=0.35, image=64, classes=10, batch=batch)
    _, largest = _largest_per_sample(model, batch)
    monkeypatch.setattr(batch_split, "CACHE_BYTES", fits * largest)
    feeds = zoo.random_inputs(model, seed=2, batch=batch)
    compiled = _compile_and_check(model, feeds)
    unsplit = compile_graph(load_model(model), CompileOptions(batch_split=False))
    assert _splits(compiled) == [f"batch split: {batch} samples as {chunks} chunks of "
                                 f"{batch // chunks}"]
    # every convolution, fused (ConvBlock) or not, once per chunk
    assert conv_ops(compiled) == {op: chunks * n for op, n in conv_ops(unsplit).items()}
    assert _count(compiled, "Slice") == chunks and _count(compiled, "Concat") == 1
    # the chunks are views of the input (whole samples are contiguous): no Slice task runs,
    # and the runtime binds the caller's array, slices included
    (prog,) = compiled.programs
    assert "Slice" not in {t.op for t in prog.tasks}
    native = load(compiled).natives[prog.index]
    assert native.zero_copy["inputs"] == [model.graph.input[0].name]
    # one chunk's activations at a time: the arena shrinks
    assert compiled.report.memory.arena_bytes < unsplit.report.memory.arena_bytes


def test_several_outputs_and_an_output_read_inside(monkeypatch):
    monkeypatch.setattr(batch_split, "CACHE_BYTES", 4 << 10)
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], group=8, pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["r"]),
             helper.make_node("Add", ["r", "bias"], ["y"]),
             helper.make_node("GlobalAveragePool", ["y"], ["g"]),
             helper.make_node("Flatten", ["g"], ["f"])]
    graph = helper.make_graph(
        nodes, "two_out", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 8, 6, 6])],
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in ("f", "r")],
        [numpy_helper.from_array(RNG.normal(size=(8, 1, 3, 3)).astype(np.float32), "w"),
         numpy_helper.from_array(RNG.normal(size=(1, 8, 1, 1)).astype(np.float32), "bias")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    x = RNG.normal(size=(4, 8, 6, 6)).astype(np.float32)
    compiled = _compile_and_check(model, {"x": x})
    assert len(_splits(compiled)) == 1 and _count(compiled, "Concat") == 2


def _tiny(nodes, inits, x_shape=(4, 8, 6, 6)):
    graph = helper.make_graph(
        nodes, "tiny", [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x_shape))],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(np.asarray(v, np.float32) if np.asarray(v).dtype.kind == "f"
                                 else np.asarray(v), k) for k, v in inits.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


W = {"w": RNG.normal(size=(8, 1, 3, 3))}
DW = helper.make_node("Conv", ["x", "w"], ["c"], group=8, pads=[1, 1, 1, 1])


@pytest.mark.parametrize("model", [
    # a reduction over the batch
    _tiny([DW, helper.make_node("ReduceSum", ["c", "ax"], ["y"], keepdims=1)],
          {**W, "ax": np.array([0], np.int64)}),
    # softmax over the batch axis
    _tiny([DW, helper.make_node("Flatten", ["c"], ["f"]),
           helper.make_node("Softmax", ["f"], ["y"], axis=0)], W),
    # a reshape (may move samples)
    _tiny([DW, helper.make_node("Reshape", ["c", "s"], ["y"])],
          {**W, "s": np.array([2, -1], np.int64)}),
    # flatten over the batch axis
    _tiny([DW, helper.make_node("Flatten", ["c"], ["y"], axis=0)], W),
    # a transpose that moves the batch axis
    _tiny([DW, helper.make_node("Transpose", ["c"], ["y"], perm=[1, 0, 2, 3])], W),
])
def test_not_split_when_samples_interact(monkeypatch, model):
    monkeypatch.setattr(batch_split, "CACHE_BYTES", 4 << 10)
    x = RNG.normal(size=(4, 8, 6, 6)).astype(np.float32)
    assert _splits(_compile_and_check(model, {"x": x})) == []


def test_separable_tiny_graph_is_split_and_option_turns_it_off(monkeypatch):
    monkeypatch.setattr(batch_split, "CACHE_BYTES", 4 << 10)
    model = _tiny([DW, helper.make_node("Relu", ["c"], ["y"])], W)
    x = RNG.normal(size=(4, 8, 6, 6)).astype(np.float32)
    assert len(_splits(_compile_and_check(model, {"x": x}))) == 1
    assert _splits(_compile_and_check(model, {"x": x}, batch_split=False)) == []
    assert CompileOptions().batch_split is True  # on unless turned off
    assert len(_splits(compile_graph(load_model(model), CompileOptions()))) == 1


def test_compute_bound_graphs_and_batch_one_are_not_split(monkeypatch):
    # budgets of two samples: the budget is never the reason not to split
    resnet = zoo.resnet(depths=(1, 1, 1, 1), width=64, image=32, classes=10, batch=4)
    monkeypatch.setattr(batch_split, "CACHE_BYTES", 2 * _largest_per_sample(resnet, 4)[1])
    compiled = _compile_and_check(resnet, zoo.random_inputs(resnet, seed=1, batch=4))
    assert _splits(compiled) == []  # dense 3x3 convolutions: compute-bound
    for batch, want in ((1, []), (4, ["batch split: 4 samples as 2 chunks of 2"])):
        mobile = zoo.mobilenetv2(width_mult=0.35, image=32, classes=10, batch=batch)
        budget = 2 * _largest_per_sample(mobile, batch)[1]
        monkeypatch.setattr(batch_split, "CACHE_BYTES", budget)
        compiled = _compile_and_check(mobile, zoo.random_inputs(mobile, seed=1, batch=batch))
        assert _splits(compiled) == want


def test_a_batch_that_fits_is_not_split(monkeypatch):
    mobile = zoo.mobilenetv2(width_mult=0.35, image=32, classes=10, batch=4)
    monkeypatch.setattr(batch_split, "CACHE_BYTES", 4 * _largest_per_sample(mobile, 4)[1])
    compiled = _compile_and_check(mobile, zoo.random_inputs(mobile, seed=1, batch=4))
    assert _splits(compiled) == []


def test_chunk_is_the_largest_divisor_that_fits(monkeypatch):
    model = zoo.mobilenetv2(width_mult=0.35, image=64, classes=10, batch=12)
    g, largest = _largest_per_sample(model, 12)
    for fits, want in ((5, (12, 4)), (6, (12, 6)), (11, (12, 6)), (1, (12, 1)), (12, None)):
        monkeypatch.setattr(batch_split, "CACHE_BYTES", fits * largest)
        assert batch_split.plan_chunk(g) == want
    monkeypatch.setattr(batch_split, "CACHE_BYTES", largest - 1)
    assert batch_split.plan_chunk(g) is None  # not even one sample fits
    monkeypatch.setattr(batch_split, "MAX_CHUNKS", 4)
    monkeypatch.setattr(batch_split, "CACHE_BYTES", largest)
    assert batch_split.plan_chunk(g) is None  # 12 chunks would be too many


def test_a_huge_batch_is_planned_from_its_divisors(monkeypatch):
    """A batch of 2**31 - 1 (prime) rows: found by the fuzz harness, the plan counted down
    from n one candidate at a time, minutes of a compile worker's time. Divisors are now
    found in pairs up to sqrt(n); the range is counted to show it."""
    from onnx import TensorProto, helper

    n = (1 << 31) - 1
    model = helper.make_model(helper.make_graph(
        [helper.make_node("Softmax", ["x"], ["y"], axis=-1)],
        "wide", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [n, 2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [n, 2])]),
        opset_imports=[helper.make_opsetid("", 17)])
    g, largest = _largest_per_sample(model, n)
    assert largest == 8
    steps = []
    real_range = range
    monkeypatch.setattr(batch_split, "range", lambda *a: steps.append(a) or real_range(*a),
                        raising=False)
    assert batch_split.plan_chunk(g) is None  # 1 and n: n chunks of one row are too many
    assert steps == [(1, 46341)]  # isqrt(n) + 1, not n - 1 candidates
    monkeypatch.setattr(batch_split, "MAX_CHUNKS", 1 << 31)
    assert batch_split.plan_chunk(g) == (n, 1)


def test_leading_slices_are_views_others_are_tasks():
    """Task generation: a Slice of whole samples (axis 0, step 1) aliases its input at an
    offset; other slices (inner axis, step 2) stay kernels. Results match onnxruntime."""
    x = RNG.normal(size=(6, 4, 5)).astype(np.float32)

    def model(axes, steps, start, end):
        inits = [numpy_helper.from_array(np.array(v, np.int64), n) for n, v in
                 (("s", [start]), ("e", [end]), ("a", axes), ("t", steps))]
        nodes = [helper.make_node("Relu", ["x"], ["r"]),
                 helper.make_node("Slice", ["r", "s", "e", "a", "t"], ["c"]),
                 helper.make_node("Sigmoid", ["c"], ["y"])]
        g = helper.make_graph(nodes, "slice", [helper.make_tensor_value_info(
            "x", TensorProto.FLOAT, list(x.shape))], [helper.make_tensor_value_info(
                "y", TensorProto.FLOAT, None)], inits)
        return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)

    for axes, steps, start, end, view in [([0], [1], 2, 5, True), ([0], [1], -3, 100, True),
                                          ([1], [1], 1, 3, False), ([0], [2], 0, 6, False)]:
        compiled = _compile_and_check(model(axes, steps, start, end), {"x": x})
        (prog,) = compiled.programs
        assert ("Slice" not in {t.op for t in prog.tasks}) is view
        if view:
            slots = {t.name: t for t in prog.tensors}
            first = start % 6
            assert slots["c"].offset == slots["r"].offset + first * 4 * 5 * 4


# ---- data-parallel: one chunk per stream, at once ------------------------------------------
def _streams_of_kernels(compiled):
    (prog,) = [p for p in compiled.programs if hasattr(p, "num_streams")]
    return prog, {t.stream for t in prog.tasks if t.kind == "kernel"}


def test_bert_batch_runs_as_one_chunk_per_stream_bit_identical(monkeypatch):
    monkeypatch.setattr(batch_split, "MIN_PARALLEL_FLOPS", 1e6)
    model = zoo.bert(layers=2, hidden=64, heads=4, intermediate=128, vocab=100, seq=16, batch=4)
    feeds = zoo.random_inputs(model, seed=3, batch=4)
    compiled = _compile_and_check(model, feeds, data_parallel=2)
    assert _splits(compiled) == ["batch split: 4 samples as 2 chunks of 2 on 2 streams at once"]
    prog, streams = _streams_of_kernels(compiled)
    assert prog.num_streams == 2 and streams == {0, 1}
    assert _count(compiled, "FusedAttention") == 2 * 2  # each layer's, per chunk
    whole = load(compile_graph(load_model(model), CompileOptions(data_parallel=0))).execute(feeds)
    split = load(compiled).execute(feeds)
    for name in whole:  # every sample computed by the same kernels in the same order
        assert np.array_equal(whole[name], split[name]), name
    # each chunk on its own stream (the outputs' Concats wait for both)
    for i in (0, 1):
        tasks = [t for t in prog.tasks if t.kind == "kernel" and f"_chunk{i}_" in t.name]
        assert tasks and {t.stream for t in tasks} == {i}
    assert {t.kind for t in prog.tasks} >= {"record", "wait"}


def test_a_small_transformer_at_batch_8_splits_over_two_threads():
    # ~0.2 GFLOP at batch 8, like the small encoders and decoders of the zoo (hf_roberta,
    # more_olmo, more_squeezebert: 0.06-0.3): below the old 2e8 per chunk it ran as one
    # two-thread team whose barriers after every 5-50 us task cost it the scaling that two
    # one-thread chunks get. Now each chunk of 4 runs on its own stream.
    from graphengine.engine.flops import node_flops

    model = zoo.bert(layers=2, hidden=128, heads=4, intermediate=512, vocab=100, seq=32, batch=8)
    g, _ = _largest_per_sample(model, 8)
    flops = sum(node_flops(n) for n in g.nodes)
    assert 2 * batch_split.MIN_PARALLEL_FLOPS <= flops < 2 * 2e8
    feeds = zoo.random_inputs(model, seed=6, batch=8)
    compiled = _compile_and_check(model, feeds, data_parallel=2)
    assert _splits(compiled) == ["batch split: 8 samples as 2 chunks of 4 on 2 streams at once"]
    prog, streams = _streams_of_kernels(compiled)
    assert prog.num_streams == 2 and streams == {0, 1}


def test_data_parallel_needs_work_a_divisible_batch_and_separable_nodes(monkeypatch):
    model = zoo.bert(layers=1, hidden=32, heads=2, intermediate=64, vocab=50, seq=8, batch=4)
    feeds = zoo.random_inputs(model, seed=4, batch=4)
    assert _splits(_compile_and_check(model, feeds, data_parallel=2)) == []  # too little work
    monkeypatch.setattr(batch_split, "MIN_PARALLEL_FLOPS", 1e3)
    assert len(_splits(_compile_and_check(model, feeds, data_parallel=2))) == 1
    assert _splits(_compile_and_check(model, feeds, data_parallel=3)) == []  # 4 % 3
    assert _splits(_compile_and_check(model, feeds, data_parallel=2,
                                      batch_split=False)) == []  # the pass is off
    odd = zoo.bert(layers=1, hidden=32, heads=2, intermediate=64, vocab=50, seq=8, batch=3)
    assert _splits(_compile_and_check(odd, zoo.random_inputs(odd, seed=4, batch=3),
                                      data_parallel=2)) == []
    # a softmax over the batch mixes samples: never split
    x = RNG.normal(size=(4, 8, 6, 6)).astype(np.float32)
    mixing = _tiny([DW, helper.make_node("Flatten", ["c"], ["f"]),
                    helper.make_node("Softmax", ["f"], ["y"], axis=0)], W)
    assert _splits(_compile_and_check(mixing, {"x": x}, data_parallel=2)) == []
    separable = _tiny([DW, helper.make_node("Relu", ["c"], ["y"])], W)
    assert _splits(_compile_and_check(separable, {"x": x}, data_parallel=2)) == [
        "batch split: 4 samples as 2 chunks of 2 on 2 streams at once"]


def test_sessions_split_over_their_device_threads():
    from graphengine.api.types import SessionOptions

    assert SessionOptions().compile_options(2).data_parallel == 2
    assert SessionOptions().compile_options(1).data_parallel == 0
    assert SessionOptions().compile_options().data_parallel == 0
    assert SessionOptions(options={"data_parallel": "0"}).compile_options(2).data_parallel == 0


def test_each_chunk_converts_its_own_part_of_an_nhwc_output(monkeypatch):
    # Conv towers (channels-last inside) split over two streams: the output's conversion back
    # to NCHW runs per chunk on the chunk's stream, before the join, not once for the whole
    # batch on one stream after it.
    monkeypatch.setattr(batch_split, "MIN_PARALLEL_FLOPS", 1e5)
    model = zoo.branchy(towers=2, channels=16, size=8, batch=4, depth=1)
    feeds = {"input": RNG.standard_normal((4, 16, 8, 8)).astype(np.float32)}
    compiled = _compile_and_check(model, feeds, data_parallel=2)
    assert _splits(compiled) == ["batch split: 4 samples as 2 chunks of 2 on 2 streams at once"]
    (prog,) = [p for p in compiled.programs if hasattr(p, "num_streams")]
    kernels = [t for t in prog.tasks if t.kind == "kernel"]
    to_nchw = [t for t in kernels if t.op == "TransData" and "nchw" in t.name]
    assert sorted(t.stream for t in to_nchw) == [0, 1]
    (join,) = [t for t in kernels if t.op == "Concat" and t.name.startswith("output")]
    assert kernels.index(join) > max(kernels.index(t) for t in to_nchw)


def _op(op, ins, **attrs):
    return helper.make_node(op, ins, ["y"], **attrs)


def _i64(*v):
    return np.array(v, np.int64)


# Ops between convolutions that leave the batch axis alone: a TF export's NHWC -> NCHW
# Transpose, a feature pyramid's Resize (by scales, or by sizes that the chunks rewrite), a
# fused elementwise chain, a spatial Pad, a channel Slice, a reduction over C, H, W, a
# Squeeze of a unit axis, a ConvTranspose. Each blocked the data-parallel split of whole
# conv nets (opennsfw and capspot_siamese: the input Transpose; ppocrv4_det: Resize and
# ConvTranspose; more_bit: Pad; shufflenetv2: Slice and Squeeze; more_convnextv2: ReduceSum).
SEPARABLE = {
    "transpose": (_tiny([helper.make_node("Transpose", ["x"], ["t"], perm=[0, 3, 1, 2]),
                         helper.make_node("Conv", ["t", "w"], ["y"], group=8, pads=[1, 1, 1, 1])],
                        W, x_shape=(4, 6, 6, 8)), "TransposeView"),  # a view per chunk
    "resize_scales": (_tiny([DW, _op("Resize", ["c", "", "s"], mode="linear")],
                            {**W, "s": np.array([1, 1, 2, 2], np.float32)}), "Resize"),
    "resize_sizes": (_tiny([DW, _op("Resize", ["c", "", "", "z"], mode="nearest")],
                           {**W, "z": _i64(4, 8, 12, 12)}), "Resize"),
    "eltwise_chain": (_tiny([DW, helper.make_node("Exp", ["c"], ["e"]),
                             helper.make_node("Tanh", ["e"], ["t"]), _op("Sub", ["t", "c"])], W),
                      "EltwiseChain"),
    "pad": (_tiny([DW, _op("Pad", ["c", "p"], mode="reflect")],
                  {**W, "p": _i64(0, 0, 1, 2, 0, 0, 2, 1)}), "Pad"),
    "slice": (_tiny([DW, _op("Slice", ["c", "b", "e", "a"])],
                    {**W, "b": _i64(2), "e": _i64(6), "a": _i64(1)}), "Slice"),
    "reduce_axes_input": (_tiny([DW, _op("ReduceSum", ["c", "a"], keepdims=1)],
                                {**W, "a": _i64(2, 3)}), "ReduceSum"),
    "reduce_axes_attr": (_tiny([DW, _op("ReduceMean", ["c"], axes=[1, 2, 3], keepdims=0)], W),
                         "ReduceMean"),
    "squeeze": (_tiny([DW, helper.make_node("ReduceMax", ["c"], ["r"], axes=[3], keepdims=1),
                       _op("Squeeze", ["r", "q"])], {**W, "q": _i64(3)}), "Squeeze"),
    "conv_transpose": (_tiny([DW, _op("ConvTranspose", ["c", "v"], strides=[2, 2])],
                             {**W, "v": RNG.normal(size=(8, 4, 2, 2))}), "ConvTranspose"),
    # a constant part with one row per sample (a ViT's class token, expanded and folded):
    # each chunk's Concat reads its own rows of it
    "concat_batch_constant": (_tiny([DW, _op("Concat", ["c", "k"], axis=1)],
                                    {**W, "k": RNG.normal(size=(4, 2, 6, 6))}), "Concat"),
}


@pytest.mark.parametrize("case", sorted(SEPARABLE))
def test_ops_that_keep_the_batch_axis_split_the_graph(monkeypatch, case):
    monkeypatch.setattr(batch_split, "MIN_PARALLEL_FLOPS", 1e3)
    model, op = SEPARABLE[case]
    shape = [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim]
    x = RNG.normal(size=shape).astype(np.float32)
    compiled = _compile_and_check(model, {"x": x}, data_parallel=2)
    assert _splits(compiled) == ["batch split: 4 samples as 2 chunks of 2 on 2 streams at once"]
    # one per chunk (and the two Slices that cut the input into chunks, the Concat that
    # joins them)
    assert _count(compiled, op) == 2 + 2 * (op == "Slice") + (op == "Concat")


@pytest.mark.parametrize("model", [
    _tiny([DW, _op("Resize", ["c", "", "s"], mode="nearest")],
          {**W, "s": np.array([2, 1, 1, 1], np.float32)}),  # doubles the batch
    _tiny([DW, _op("Pad", ["c", "p"])], {**W, "p": _i64(1, 0, 0, 0, 0, 0, 0, 0)}),
    _tiny([DW, _op("Slice", ["c", "b", "e", "a"])],
          {**W, "b": _i64(0), "e": _i64(2), "a": _i64(0)}),
    _tiny([DW, _op("Slice", ["c", "b", "e"])], {**W, "b": _i64(0, 2), "e": _i64(2, 6)}),
    _tiny([DW, _op("ReduceMean", ["c"], keepdims=1)], W),  # over every axis
    _tiny([DW, _op("ReduceMean", ["c"], axes=[0, 1], keepdims=1)], W),
])
def test_ops_that_touch_the_batch_axis_keep_the_graph_whole(monkeypatch, model):
    monkeypatch.setattr(batch_split, "MIN_PARALLEL_FLOPS", 1e3)
    x = RNG.normal(size=(4, 8, 6, 6)).astype(np.float32)
    assert _splits(_compile_and_check(model, {"x": x}, data_parallel=2)) == []


def _folded_heads(back_shape=(4, 2, 6, 3), fold=(8, 6, 8)):
    """DeBERTa's disentangled attention, in small: the heads folded into axis 0 ([N, H, S, D]
    -> [N*H, S, D]), a product with one constant matrix per (sample, head) row and a
    GatherElements by constant indices of N*H rows (its relative positions), unfolded."""
    return _tiny([helper.make_node("Reshape", ["x", "fold"], ["r"]),
                  helper.make_node("MatMul", ["r", "p"], ["m"]),
                  helper.make_node("GatherElements", ["m", "idx"], ["g"], axis=2),
                  helper.make_node("Softmax", ["g"], ["s"], axis=-1),
                  _op("Reshape", ["s", "back"])],
                 {"fold": _i64(*fold), "p": RNG.normal(size=(8, 8, 5)),
                  "idx": RNG.integers(0, 5, size=(8, 6, 3)), "back": _i64(*back_shape)},
                 x_shape=(4, 2, 6, 8))


def test_heads_folded_into_the_batch_axis_split_by_rows(monkeypatch):
    # Sample i is rows [2i, 2i+2) of the folded axis (row-major order keeps its bytes
    # together): each chunk folds its own samples (the targets rewritten to its rows) and
    # reads its own rows of the per-row constants. more_deberta_v2 stayed whole for this.
    monkeypatch.setattr(batch_split, "MIN_PARALLEL_FLOPS", 1e2)
    x = RNG.normal(size=(4, 2, 6, 8)).astype(np.float32)
    compiled = _compile_and_check(_folded_heads(), {"x": x}, data_parallel=2)
    assert _splits(compiled) == ["batch split: 4 samples as 2 chunks of 2 on 2 streams at once"]
    assert _count(compiled, "GatherElements") == 2
    # the rows of a fold that does not keep whole samples on axis 0: whole
    odd = _folded_heads(back_shape=(2, 4, 6, 3))
    assert _splits(_compile_and_check(odd, {"x": x}, data_parallel=2)) == []
    fewer = _tiny([_op("Reshape", ["x", "t"])], {"t": _i64(2, 192)}, x_shape=(4, 2, 6, 8))
    assert _splits(_compile_and_check(fewer, {"x": x}, data_parallel=2)) == []


def test_a_fused_region_with_two_outputs_is_split_per_chunk():
    """An elementwise region read outside at two points is one EltwiseGraph node with two
    outputs; each chunk gets its own copy of it, both outputs sliced to the chunk's rows, and
    its per-sample constant [8, 1] sliced with them."""
    rng = np.random.default_rng(3)
    inits = {"w": rng.standard_normal((1536, 1536)).astype(np.float32) * 0.02,
             "row": rng.standard_normal((8, 1)).astype(np.float32),
             "col": rng.standard_normal(1536).astype(np.float32)}
    nodes = [helper.make_node("MatMul", ["x", "w"], ["h"]),
             helper.make_node("Tanh", ["h"], ["t"]),
             helper.make_node("Mul", ["t", "row"], ["a"]),
             helper.make_node("Add", ["a", "col"], ["b"]),
             helper.make_node("Max", ["b", "t"], ["c"]),
             helper.make_node("MatMul", ["c", "w"], ["p"]),
             helper.make_node("MatMul", ["b", "w"], ["q"]),
             helper.make_node("Add", ["p", "q"], ["y"])]
    graph = helper.make_graph(
        nodes, "region", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [8, 1536])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(v, k) for k, v in inits.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    feeds = {"x": rng.standard_normal((8, 1536)).astype(np.float32)}
    compiled = _compile_and_check(model, feeds, data_parallel=2)
    assert _splits(compiled) == ["batch split: 8 samples as 2 chunks of 4 on 2 streams at once"]
    regions = [p for p in compiled.report.placements if p.op_type == "EltwiseGraph"]
    assert len(regions) == 2, [p.op_type for p in compiled.report.placements]
