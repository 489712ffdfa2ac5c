"""Control flow, recurrent, attention, quantization, signal, string, detection, loss and
sampling ops against onnxruntime / onnx.reference."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from graphengine.engine.importers import import_onnx
from tests.unit.test_ops_common import (
    check,
    hostile_detections,
    infer_graph,
    rand,
    reference,
    run_graph,
)


def i64(*values: int) -> np.ndarray:
    return np.array(values, dtype=np.int64)


# ---- control flow -----------------------------------------------------------------------
def _branch(name: str, op: str, outer: str) -> onnx.GraphProto:
    node = helper.make_node(op, [outer, "k"], [f"{name}_out"])
    k = helper.make_tensor("k", TensorProto.FLOAT, [], [2.0])
    return helper.make_graph([node], name, [], [helper.make_tensor_value_info(
        f"{name}_out", TensorProto.FLOAT, [3])], initializer=[k])


def _run_model(model: onnx.ModelProto, feeds: dict, engine: str = "ort") -> None:
    g = import_onnx(model)
    g.lint()
    infer_graph(g)
    got = run_graph(g, feeds)
    want = reference(model, feeds, engine)
    for value, a, b in zip(g.outputs, got, want):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
        assert value.meta is not None and value.meta.dtype.value == a.dtype.name


@pytest.mark.parametrize("flag", [True, False])
def test_if_reads_outer_scope(flag: bool) -> None:
    node = helper.make_node("If", ["c"], ["y"], then_branch=_branch("then", "Add", "x"),
                            else_branch=_branch("else", "Mul", "x"))
    graph = helper.make_graph([node], "if", [
        helper.make_tensor_value_info("c", TensorProto.BOOL, []),
        helper.make_tensor_value_info("x", TensorProto.FLOAT, [3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    g = import_onnx(model)
    assert g.nodes[0].attrs["_outer"] == ["x"]  # the outer read is a real data edge
    _run_model(model, {"c": np.array(flag), "x": rand(3)})


def test_loop_with_scan_output() -> None:
    body = helper.make_graph(
        [helper.make_node("Add", ["acc_in", "x"], ["acc_out"]),
         helper.make_node("Identity", ["cond_in"], ["cond_out"]),
         helper.make_node("Mul", ["acc_out", "x"], ["scan"])],
        "body",
        [helper.make_tensor_value_info("i", TensorProto.INT64, []),
         helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []),
         helper.make_tensor_value_info("acc_in", TensorProto.FLOAT, [2])],
        [helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
         helper.make_tensor_value_info("acc_out", TensorProto.FLOAT, [2]),
         helper.make_tensor_value_info("scan", TensorProto.FLOAT, [2])])
    node = helper.make_node("Loop", ["m", "", "a0"], ["acc", "scans"], body=body)
    graph = helper.make_graph([node], "loop", [
        helper.make_tensor_value_info("m", TensorProto.INT64, []),
        helper.make_tensor_value_info("a0", TensorProto.FLOAT, [2]),
        helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
        [helper.make_tensor_value_info("acc", TensorProto.FLOAT, [2]),
         helper.make_tensor_value_info("scans", TensorProto.FLOAT, [None, 2])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    _run_model(model, {"m": np.array(4, np.int64), "a0": rand(2), "x": rand(2, seed=1)})


def test_scan_running_sum() -> None:
    body = helper.make_graph(
        [helper.make_node("Add", ["s_in", "x_t"], ["s_out"]),
         helper.make_node("Identity", ["s_out"], ["y_t"])], "body",
        [helper.make_tensor_value_info("s_in", TensorProto.FLOAT, [2]),
         helper.make_tensor_value_info("x_t", TensorProto.FLOAT, [2])],
        [helper.make_tensor_value_info("s_out", TensorProto.FLOAT, [2]),
         helper.make_tensor_value_info("y_t", TensorProto.FLOAT, [2])])
    node = helper.make_node("Scan", ["s0", "xs"], ["s", "ys"], body=body, num_scan_inputs=1,
                            scan_input_directions=[1])
    graph = helper.make_graph([node], "scan", [
        helper.make_tensor_value_info("s0", TensorProto.FLOAT, [2]),
        helper.make_tensor_value_info("xs", TensorProto.FLOAT, [5, 2])],
        [helper.make_tensor_value_info("s", TensorProto.FLOAT, [2]),
         helper.make_tensor_value_info("ys", TensorProto.FLOAT, [5, 2])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    _run_model(model, {"s0": rand(2), "xs": rand(5, 2, seed=1)})


# ---- recurrent --------------------------------------------------------------------------
@pytest.mark.parametrize("op,gates", [("RNN", 1), ("GRU", 3), ("LSTM", 4)])
@pytest.mark.parametrize("direction", ["forward", "bidirectional"])
def test_recurrent(op: str, gates: int, direction: str) -> None:
    dirs, hidden, inp = (2 if direction == "bidirectional" else 1), 3, 4
    ins = [("x", rand(5, 2, inp)), ("w", rand(dirs, gates * hidden, inp, seed=1)),
           ("r", rand(dirs, gates * hidden, hidden, seed=2)),
           ("b", rand(dirs, 2 * gates * hidden, seed=3)), ("l", np.array([5, 3], np.int32))]
    n_out = 3 if op == "LSTM" else 2
    check(op, ins, {"hidden_size": hidden, "direction": direction}, n_outputs=n_out,
          consts=["w", "r", "b"], rtol=1e-4, atol=1e-5)


# ---- attention family -----------------------------------------------------------------
@pytest.mark.parametrize("attrs", [{}, {"is_causal": 1}, {"softcap": 2.0, "scale": 0.3}])
def test_attention_4d_gqa(attrs: dict) -> None:
    q, k, v = rand(2, 4, 3, 8), rand(2, 2, 5, 8, seed=1), rand(2, 2, 5, 6, seed=2)
    mask = rand(3, 5, seed=3)
    check("Attention", [("q", q), ("k", k), ("v", v), ("m", mask)], attrs, opset=23,
          engine="ref", rtol=1e-5, atol=1e-5)


def test_attention_3d_with_past_and_rotary() -> None:
    q, k, v = rand(1, 2, 8), rand(1, 2, 8, seed=1), rand(1, 2, 8, seed=2)
    past_k, past_v = rand(1, 2, 3, 4, seed=3), rand(1, 2, 3, 4, seed=4)
    check("Attention", [("q", q), ("k", k), ("v", v), ("m", None), ("pk", past_k),
                        ("pv", past_v)], {"q_num_heads": 2, "kv_num_heads": 2, "is_causal": 1},
          n_outputs=3, opset=23, engine="ref", rtol=1e-5, atol=1e-5)
    x = rand(1, 3, 2, 4)  # (batch, heads, seq, head_size)
    cos, sin = rand(1, 2, 2, seed=1), rand(1, 2, 2, seed=2)
    check("RotaryEmbedding", [("x", x), ("c", cos), ("s", sin)], opset=23, engine="ref")


# ---- quantization ---------------------------------------------------------------------------
def test_quantize_dequantize() -> None:
    x = rand(2, 4) * 3
    scale, zp = np.array(0.05, np.float32), np.array(10, np.uint8)
    check("QuantizeLinear", [("x", x), ("s", scale), ("z", zp)])
    check("QuantizeLinear", [("x", x), ("s", np.array([0.1, 0.2, 0.05, 0.3], np.float32)),
                             ("z", np.array([0, 1, -2, 3], np.int8))], {"axis": 1})
    check("DequantizeLinear", [("x", np.array([[0, 10, 255]], np.uint8)), ("s", scale),
                               ("z", zp)])
    check("DynamicQuantizeLinear", [("x", x)], n_outputs=3)


def test_integer_matmul_conv() -> None:
    a = np.array([[1, 2, 250], [3, 4, 5]], np.uint8)
    b = np.array([[1, 2], [3, 4], [5, 6]], np.uint8)
    check("MatMulInteger", [("a", a), ("b", b), ("za", np.array(1, np.uint8))])
    check("QLinearMatMul", [("a", a), ("sa", np.array(0.1, np.float32)),
                            ("za", np.array(2, np.uint8)), ("b", b),
                            ("sb", np.array(0.2, np.float32)), ("zb", np.array(1, np.uint8)),
                            ("sy", np.array(0.5, np.float32)), ("zy", np.array(3, np.uint8))])
    check("ConvInteger", [("x", np.arange(18, dtype=np.uint8).reshape(1, 2, 3, 3)),
                          ("w", np.ones((1, 2, 2, 2), np.uint8))])


# ---- signal / strings / detection / losses / sampling -----------------------------------
def test_dft_and_windows() -> None:
    x = rand(2, 8, 1)
    check("DFT", [("x", x)], {"onesided": 1}, opset=17, engine="ref", rtol=1e-4, atol=1e-5)
    check("DFT", [("x", rand(2, 8, 2)), ("n", None), ("a", np.array(1, np.int64))],
          {"inverse": 1}, consts=["a"], opset=20, engine="ref", rtol=1e-4, atol=1e-5)
    for op in ("HannWindow", "HammingWindow", "BlackmanWindow"):
        check(op, [("n", np.array(10, np.int64))], {"periodic": 0}, consts=["n"],
              engine="ref", rtol=1e-5, atol=1e-6)


def test_string_ops() -> None:
    words = np.array(["Monday", "tuesday", "THE", "day"], dtype=object)
    check("StringNormalizer", [("x", words)],
          {"case_change_action": "LOWER", "stopwords": ["the"]}, exact_shapes=False,
          engine="ref")
    check("RegexFullMatch", [("x", words)], {"pattern": "[A-Z].*"}, opset=20, engine="ref")
    check("StringConcat", [("a", words), ("b", np.array(["!"], dtype=object))], opset=20,
          engine="ref")


def test_nms_and_roialign() -> None:
    boxes = np.array([[[0, 0, 1, 1], [0, 0.1, 1, 1.1], [0, 10, 1, 11]]], np.float32)
    scores = np.array([[[0.9, 0.75, 0.6]]], np.float32)
    check("NonMaxSuppression", [("b", boxes), ("s", scores), ("m", i64(2)),
                                ("i", np.array([0.5], np.float32))], exact_shapes=False)
    x = rand(1, 2, 6, 6)
    rois = np.array([[0, 0, 4, 4], [1, 1, 5, 3]], np.float32)
    check("RoiAlign", [("x", x), ("r", rois), ("b", i64(0, 0))],
          {"output_height": 2, "output_width": 3, "sampling_ratio": 2}, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("center, score_t", [(0, None), (1, 0.3), (0, 0.6)])
def test_nms_many_overlapping_boxes_match_onnxruntime(seed: int, center: int, score_t) -> None:
    """Hundreds of boxes in clusters (many suppressions), tied scores (order by index),
    empty boxes, two batches and three classes, a per-class limit: the vectorized greedy
    keeps what onnxruntime keeps, in its order."""
    rng = np.random.default_rng(seed)
    n = 300
    centers = rng.uniform(0, 50, (2, 12, 2))[:, rng.integers(0, 12, n)]
    size = rng.uniform(0.5, 6, (2, n, 2))
    if center:
        boxes = np.concatenate([centers, size], axis=2)
    else:
        lo = centers - size / 2
        boxes = np.concatenate([lo[..., ::-1], (lo + size)[..., ::-1]], axis=2)
        boxes[:, ::7] = boxes[:, ::7, [2, 3, 0, 1]]  # corners given the other way round
    boxes[:, 5, 2:] = boxes[:, 5, :2]  # an empty box
    scores = np.round(rng.uniform(0, 1, (2, 3, n)), 2)  # ties
    inputs = [("b", boxes.astype(np.float32)), ("s", scores.astype(np.float32)),
              ("m", i64(40)), ("i", np.array([0.45], np.float32))]
    if score_t is not None:
        inputs.append(("t", np.array([score_t], np.float32)))
    check("NonMaxSuppression", inputs, {"center_point_box": center}, exact_shapes=False)


@pytest.mark.parametrize("seed", range(6))
def test_native_nms_keeps_what_the_numpy_reference_keeps(seed: int) -> None:
    """The host engine's native NonMaxSuppression against the numpy reference, on what
    onnxruntime is not asked about: NaN coordinates and scores, -inf scores, limit 0 and 1,
    an IoU threshold of 0 and of 1, both box encodings."""
    from graphengine.engine.ops.detection import nms, nms_reference

    rng = np.random.default_rng(seed)
    boxes, scores = hostile_detections(rng, int(rng.integers(1, 120)))
    for limit in (0, 1, 7, 1000):
        for iou in (0.0, 0.3, 1.0):
            for score_t in (None, np.array([0.2], np.float32)):
                ins = [boxes, scores, i64(limit), np.array([iou], np.float32), score_t]
                for center in (0, 1):
                    got = nms(ins, {"center_point_box": center})[0]
                    want = nms_reference(ins, {"center_point_box": center})[0]
                    assert got.dtype == np.int64 and got.shape[1:] == (3,)
                    np.testing.assert_array_equal(got, want)


def test_native_nms_refuses_boxes_and_scores_that_disagree() -> None:
    from graphengine import _runtime

    with pytest.raises(ValueError, match="do not match boxes"):
        _runtime.non_max_suppression(np.zeros((1, 5, 4), np.float32),
                                     np.zeros((1, 2, 6), np.float32), 3, 0.5, None, False)


def test_losses() -> None:
    x = rand(3, 5, 2)
    target = np.array([[0, 4], [1, -1], [2, 3]], np.int64)
    for reduction in ("none", "mean", "sum"):
        check("NegativeLogLikelihoodLoss", [("x", x), ("t", target)],
              {"reduction": reduction, "ignore_index": -1})
    check("SoftmaxCrossEntropyLoss", [("x", x), ("t", np.abs(target)),
                                      ("w", np.abs(rand(5, seed=1)))], n_outputs=2,
          rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("mode", ["linear", "nearest", "cubic"])
@pytest.mark.parametrize("padding", ["zeros", "border", "reflection"])
def test_grid_sample(mode: str, padding: str) -> None:
    grid = np.random.default_rng(1).uniform(-1.2, 1.2, (1, 3, 4, 2)).astype(np.float32)
    # onnx.reference, whose bicubic border handling (clamp the coordinate, then the taps)
    # the backend test data follow; onnxruntime clamps only the taps.
    check("GridSample", [("x", rand(1, 2, 4, 5)), ("g", grid)],
          {"mode": mode, "padding_mode": padding}, opset=20, engine="ref", rtol=1e-4,
          atol=1e-5)


def test_grid_sample_opset16_mode_names_are_upgraded() -> None:
    grid = np.random.default_rng(1).uniform(-1, 1, (1, 3, 4, 2)).astype(np.float32)
    g, _ = check("GridSample", [("x", rand(1, 2, 4, 5)), ("g", grid)], {"mode": "bilinear"},
                 opset=16, rtol=1e-4, atol=1e-5)
    assert g.nodes[0].attrs["mode"] == "linear"


def test_deform_conv_col2im_center_crop() -> None:
    x, w = rand(1, 2, 5, 5), rand(4, 2, 3, 3, seed=1)
    offset = rand(1, 2 * 9, 3, 3, seed=2) * 0.7
    check("DeformConv", [("x", x), ("w", w), ("o", offset)], opset=19, engine="ref",
          rtol=1e-4, atol=1e-5)
    cols = rand(1, 2 * 4, 9)
    check("Col2Im", [("x", cols), ("i", i64(4, 4)), ("b", i64(2, 2))], consts=["i", "b"],
          opset=18, engine="ref")
    check("CenterCropPad", [("x", rand(5, 4, 3)), ("s", i64(3, 6))], {"axes": [0, 1]},
          consts=["s"], opset=18, engine="ref")


def test_affine_grid_and_tensor_scatter() -> None:
    theta = rand(2, 2, 3)
    check("AffineGrid", [("t", theta), ("s", i64(2, 3, 4, 5))], consts=["s"], opset=20,
          engine="ref", rtol=1e-5, atol=1e-6)
    cache, update = rand(2, 3, 6, 4), rand(2, 3, 2, 4, seed=1)
    check("TensorScatter", [("c", cache), ("u", update), ("i", i64(1, 4))],
          {"mode": "circular"}, opset=24, engine="ref")


def test_flex_attention_and_ml_domain() -> None:
    from graphengine.engine import ops

    q, k, v = rand(1, 2, 3, 4), rand(1, 2, 5, 4, seed=1), rand(1, 2, 5, 4, seed=2)
    node = ops.get("ai.onnx.preview.FlexAttention")
    (y,) = node.compute([q, k, v], {"scale": None})
    s = q @ np.swapaxes(k, -1, -2) / 2.0
    p = np.exp(s - s.max(-1, keepdims=True))
    np.testing.assert_allclose(y, (p / p.sum(-1, keepdims=True)) @ v, rtol=1e-5, atol=1e-6)
    enc = ops.get("ai.onnx.ml.LabelEncoder")
    (out,) = enc.compute([np.array(["a", "b", "z"], dtype=object)],
                         {"keys_strings": ["a", "b"], "values_int64s": [5, 6],
                          "default_int64": -1})
    assert out.tolist() == [5, 6, -1] and out.dtype == np.int64


def test_training_optimizer_momentum() -> None:
    from graphengine.engine import ops

    x, g, v = np.array([1.0, 2.0]), np.array([0.5, -1.0]), np.array([0.1, 0.1])
    new_x, new_v = ops.get("ai.onnx.preview.training.Momentum").compute(
        [np.array(0.1), np.array(1), x, g, v],
        {"alpha": 0.9, "beta": 0.5, "mode": "standard", "norm_coefficient": 0.0})
    np.testing.assert_allclose(new_v, 0.9 * v + 0.5 * g)
    np.testing.assert_allclose(new_x, x - 0.1 * new_v)


# ---- TreeEnsemble, Scan-8, seeded Dropout ---------------------------------------------------
def _tree_model(aggregate: int, post: int) -> onnx.ModelProto:
    """Two trees over 3 features, 2 targets: LEQ/GT/MEMBER branches, NaN tracking true."""
    f = TensorProto.FLOAT
    node = helper.make_node(
        "TreeEnsemble", ["X"], ["Y"], domain="ai.onnx.ml", n_targets=2,
        aggregate_function=aggregate, post_transform=post, tree_roots=[0, 2],
        nodes_featureids=[0, 1, 2], nodes_truenodeids=[0, 1, 3], nodes_trueleafs=[1, 1, 1],
        nodes_falsenodeids=[1, 2, 4], nodes_falseleafs=[0, 1, 1],
        nodes_missing_value_tracks_true=[1, 0, 0],
        nodes_modes=helper.make_tensor("m", TensorProto.UINT8, [3], [0, 3, 6]),
        nodes_splits=helper.make_tensor("s", f, [3], [0.5, -1.0, 0.0]),
        membership_values=helper.make_tensor("mv", f, [3], [1.0, 2.0, np.nan]),
        leaf_targetids=[0, 1, 0, 1, 1],
        leaf_weights=helper.make_tensor("w", f, [5], [0.5, -1.5, 2.0, 0.25, -0.75]))
    graph = helper.make_graph([node], "trees", [helper.make_tensor_value_info("X", f, [5, 3])],
                              [helper.make_tensor_value_info("Y", f, [5, 2])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21),
                                                    helper.make_opsetid("ai.onnx.ml", 5)])
    model.ir_version = 10
    return model


@pytest.mark.parametrize("aggregate", [0, 1, 2, 3])
@pytest.mark.parametrize("post", [0, 1, 2, 3, 4])
def test_tree_ensemble(aggregate: int, post: int) -> None:
    """Raw scores against onnxruntime; the post transforms as the spec numbers them
    (onnxruntime swaps SOFTMAX and LOGISTIC and approximates PROBIT; onnx.reference
    ignores post_transform and scores an unreached MIN/MAX target as +-FLT_MAX)."""
    import math

    x = np.array([[0.1, 5.0, 1.0], [0.9, -3.0, 2.0], [np.nan, 0.0, 7.0], [3.0, 2.0, 1.0],
                  [0.5, -1.0, np.nan]], np.float32)
    raw = reference(_tree_model(aggregate, 0), {"X": x}, "ort")[0].astype(np.float64)
    g = import_onnx(_tree_model(aggregate, post))
    infer_graph(g)
    (got,) = run_graph(g, {"X": x})
    assert got.dtype == np.float32 and g.outputs[0].meta.shape == (5, 2)
    if post == 1:
        want = np.exp(raw) / np.exp(raw).sum(axis=1, keepdims=True)
    elif post == 2:
        want = 1 / (1 + np.exp(-raw))
    elif post == 3:
        e = np.where(raw != 0, np.exp(raw), 0)
        want = np.divide(e, e.sum(axis=1, keepdims=True), out=np.zeros_like(e),
                         where=e.sum(axis=1, keepdims=True) > 0)
    elif post == 4:  # probit: erf(y / sqrt 2) == 2 p - 1
        inside = (raw > 0) & (raw < 1)
        erf = np.vectorize(math.erf)(got[inside].astype(np.float64) / math.sqrt(2))
        np.testing.assert_allclose(erf, 2 * raw[inside] - 1, atol=1e-6)
        return
    else:
        want = raw
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_scan_opset8_runs_the_body_per_batch_item() -> None:
    f = TensorProto.FLOAT
    body = helper.make_graph(
        [helper.make_node("Add", ["s_in", "x_t"], ["s_out"]),
         helper.make_node("Identity", ["s_out"], ["y_t"])], "body",
        [helper.make_tensor_value_info("s_in", f, [2]),
         helper.make_tensor_value_info("x_t", f, [2])],
        [helper.make_tensor_value_info("s_out", f, [2]),
         helper.make_tensor_value_info("y_t", f, [2])])
    node = helper.make_node("Scan", ["", "init", "xs"], ["final", "ys"], body=body,
                            num_scan_inputs=1, directions=[1])
    graph = helper.make_graph([node], "scan8", [
        helper.make_tensor_value_info("init", f, [2, 2]),
        helper.make_tensor_value_info("xs", f, [2, 3, 2])], [
        helper.make_tensor_value_info("final", f, [2, 2]),
        helper.make_tensor_value_info("ys", f, [2, 3, 2])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 8)])
    g = import_onnx(model)
    infer_graph(g)
    assert [v.meta.shape for v in g.outputs] == [(2, 2), (2, 3, 2)]
    init, xs = rand(2, 2), rand(2, 3, 2, seed=1)
    final, ys = run_graph(g, {"init": init, "xs": xs})
    running = init[:, None, :] + np.cumsum(xs[:, ::-1], axis=1)  # directions=[1]: reversed
    np.testing.assert_allclose(ys, running, rtol=1e-6)
    np.testing.assert_allclose(final, running[:, -1], rtol=1e-6)


def test_seeded_training_dropout_follows_the_reference_stream() -> None:
    from graphengine.engine import ops

    x = rand(3, 4, 5)
    y, mask = ops.get("Dropout").compute([x, np.float32(0.75), np.bool_(True)],
                                         {"seed": 7, "_n_outputs": 2})
    keep = np.random.RandomState(7).uniform(0, 1, x.shape) >= 0.75
    np.testing.assert_array_equal(mask, keep)
    np.testing.assert_allclose(y, x * keep * 4, rtol=1e-6)


@pytest.mark.parametrize("offset,scale", [([0.5, -1.0, 2.0], [2.0, 0.5, 1.0]), ([1.5], [3.0])])
def test_ml_scaler_matches_onnxruntime(offset, scale) -> None:
    import onnxruntime as ort

    import graphengine

    node = helper.make_node("Scaler", ["X"], ["Y"], domain="ai.onnx.ml", offset=offset,
                            scale=scale)
    graph = helper.make_graph([node], "scaler", [helper.make_tensor_value_info(
        "X", TensorProto.FLOAT, ["n", 3])], [helper.make_tensor_value_info(
            "Y", TensorProto.FLOAT, ["n", 3])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                    helper.make_opsetid("ai.onnx.ml", 1)])
    model.ir_version = 8
    x = np.random.default_rng(0).standard_normal((4, 3)).astype(np.float32)
    want = ort.InferenceSession(model.SerializeToString(),
                                providers=["CPUExecutionProvider"]).run(None, {"X": x})[0]
    with graphengine.Session() as sess:
        got = sess.run_graph(sess.add_graph(model), {"X": x})["Y"]
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7)


def _if_model():
    """y = If(c) then Relu(x) else Squeeze(x, axis 1): the else branch cannot run on x[2, 3],
    like silero VAD's 8 kHz branch on a 16 kHz chunk; only the run's `c` picks a branch."""
    f = TensorProto.FLOAT
    then = helper.make_graph([helper.make_node("Relu", ["x"], ["t"])], "then", [],
                             [helper.make_tensor_value_info("t", f, None)])
    other = helper.make_graph([helper.make_node("Squeeze", ["x", "ax"], ["e"],
                                                name="squeeze_in_else")], "else", [],
                              [helper.make_tensor_value_info("e", f, None)],
                              [numpy_helper.from_array(np.array([1], np.int64), "ax")])
    graph = helper.make_graph(
        [helper.make_node("If", ["c"], ["y"], then_branch=then, else_branch=other)], "g",
        [helper.make_tensor_value_info("x", f, [2, 3]),
         helper.make_tensor_value_info("c", TensorProto.BOOL, [])],
        [helper.make_tensor_value_info("y", f, None)])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def test_if_compiles_when_the_branch_not_taken_cannot_fit_the_shapes() -> None:
    import graphengine
    from graphengine.engine.errors import InvalidInput

    x = np.array([[-1.0, 2.0, -3.0], [4.0, -5.0, 6.0]], np.float32)
    with graphengine.Session() as sess:
        gid = sess.add_graph(_if_model())
        out = sess.run_graph(gid, {"x": x, "c": np.array(True)})["y"]
        np.testing.assert_array_equal(out, np.maximum(x, 0))
        with pytest.raises(InvalidInput, match="squeeze_in_else"):
            sess.run_graph(gid, {"x": x, "c": np.array(False)})
