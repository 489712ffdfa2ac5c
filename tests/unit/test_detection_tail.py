"""A detector's data-dependent tail: NonMaxSuppression and the Gathers of its selection.

The selection is bounded (prepare/bounded_rows.py) and runs with its row-wise tail inside
the device program (kernels_nms.cc); the outputs keep their first `count` rows. Tails that
cannot be bounded stay host steps, run by a plan prepared at load (engine/host_plan.py).
Every answer is held to onnxruntime's, including runs that select no box."""

from __future__ import annotations

import dataclasses

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from graphengine import _runtime
from graphengine.engine import offline
from graphengine.engine.errors import InvalidGraph
from graphengine.engine.importers import load_model
from graphengine.engine.ops.detection import nms_reference, padded_nms
from graphengine.engine.pipeline import compile_graph
from graphengine.engine.runtime import LoadedModel
from tests.unit.test_ops_common import hostile_detections

DEVICE = _runtime.Device(2)
GRID = 64  # 8 x 8 cells of a 16 x 16 image
OUTS = ["selected", "det_boxes", "det_scores", "flat"]


def _const(name: str, value) -> onnx.TensorProto:
    return numpy_helper.from_array(np.asarray(value), name)


def _detector(classes: int = 3, limit: int = 40, score_t: float = 0.6, seed: int = 0,
              tail: str = "rows") -> onnx.ModelProto:
    """Conv -> boxes [1, 64, 4] and class scores [1, C, 64] -> NonMaxSuppression -> the
    selection's class and box columns, the flat (class, box) index, the picked boxes
    (Gather) and scores (GatherND). `tail`: "rows" (row-wise: the device can bound it),
    "sum" (a ReduceSum over the selected rows: it cannot), "masked" (class 0 never
    selected, and a Gather by class - 3, in range for classes 1.. but not for the zero
    padding row)."""
    rng = np.random.default_rng(seed)
    centres = rng.uniform(2, 14, (GRID, 2))
    sizes = rng.uniform(1, 5, (GRID, 2))
    anchors = np.concatenate([centres - sizes / 2, centres + sizes / 2], 1).astype(np.float32)
    inits = [
        _const("w", rng.normal(0, 0.3, (4 + classes, 3, 3, 3)).astype(np.float32)),
        _const("flat_shape", np.array([1, 4 + classes, GRID], np.int64)),
        _const("split", np.array([4, classes], np.int64)),
        _const("anchors", anchors),
        _const("limit", np.array([limit], np.int64)),
        _const("iou", np.array([0.4], np.float32)),
        _const("score_t", np.array([score_t], np.float32)),
        _const("one", np.array(1, np.int64)), _const("two", np.array(2, np.int64)),
        _const("grid", np.array(GRID, np.int64)),
        _const("boxes_shape", np.array([GRID, 4], np.int64)),
    ]
    table = rng.normal(size=(classes - 1, 4)).astype(np.float32)
    if tail == "masked":
        inits += [_const("mask", np.array([0.0] + [1.0] * (classes - 1), np.float32)
                         .reshape(1, -1, 1)),
                  _const("three", np.array(3, np.int64)), _const("table", table)]
    nodes = [
        helper.make_node("Conv", ["images", "w"], ["feat"], pads=[1, 1, 1, 1], strides=[2, 2]),
        helper.make_node("Reshape", ["feat", "flat_shape"], ["flat_feat"]),
        helper.make_node("Split", ["flat_feat", "split"], ["raw", "logits"], axis=1),
        helper.make_node("Transpose", ["raw"], ["raw_t"], perm=[0, 2, 1]),
        helper.make_node("Add", ["raw_t", "anchors"], ["boxes"]),
        helper.make_node("Sigmoid", ["logits"], ["probs"]),
        helper.make_node("Mul", ["probs", "mask"] if tail == "masked" else ["probs", "one_f"],
                         ["scores"]),
        helper.make_node("NonMaxSuppression", ["boxes", "scores", "limit", "iou", "score_t"],
                         ["selected"]),
        helper.make_node("Gather", ["selected", "one"], ["cls"], axis=1),
        helper.make_node("Gather", ["selected", "two"], ["box"], axis=1),
        helper.make_node("Mul", ["cls", "grid"], ["cls_base"]),
        helper.make_node("Add", ["cls_base", "box"], ["flat"]),
        helper.make_node("Reshape", ["boxes", "boxes_shape"], ["box_table"]),
        helper.make_node("Gather", ["box_table", "box"], ["det_boxes"], axis=0),
        helper.make_node("GatherND", ["scores", "selected"], ["det_scores"]),
    ]
    inits.append(_const("one_f", np.array(1.0, np.float32)))
    outputs = list(OUTS)
    if tail == "sum":
        nodes.append(helper.make_node("ReduceSum", ["flat"], ["total"], keepdims=0))
        outputs.append("total")
    if tail in ("view", "count"):
        # torch's `boxes[idx].view(idx.shape[0], -1)` (an SSD head's export): the target
        # from the Shape of the picked indices; "count" also outputs that shape
        nodes += [helper.make_node("Shape", ["box"], ["n_sel"]),
                  helper.make_node("Concat", ["n_sel", "minus_one"], ["view_shape"], axis=0),
                  helper.make_node("Reshape", ["det_boxes", "view_shape"], ["viewed"]),
                  helper.make_node("Reshape", ["box", "n_sel"], ["box_again"])]
        inits.append(_const("minus_one", np.array([-1], np.int64)))
        outputs += ["viewed", "box_again"] + (["n_sel"] if tail == "count" else [])
    if tail == "masked":  # classes 1.. pick rows -2, -1 of the table; zero picks -3
        nodes += [helper.make_node("Sub", ["cls", "three"], ["cls_row"]),
                  helper.make_node("Gather", ["table", "cls_row"], ["cls_feature"], axis=0)]
        outputs.append("cls_feature")
    out_types = {"selected": TensorProto.INT64, "flat": TensorProto.INT64,
                 "total": TensorProto.INT64, "box_again": TensorProto.INT64,
                 "n_sel": TensorProto.INT64}
    graph = helper.make_graph(
        nodes, "detector",
        [helper.make_tensor_value_info("images", TensorProto.FLOAT, [1, 3, 16, 16])],
        [helper.make_tensor_value_info(n, out_types.get(n, TensorProto.FLOAT), None)
         for n in outputs], initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def _images(seed: int) -> dict[str, np.ndarray]:
    return {"images": np.random.default_rng(100 + seed).normal(size=(1, 3, 16, 16))
            .astype(np.float32)}


def _ort(model: onnx.ModelProto, feeds: dict) -> list[np.ndarray]:
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)


def _load(model: onnx.ModelProto):
    compiled = compile_graph(load_model(model), input_shapes={"images": (1, 3, 16, 16)})
    return compiled, LoadedModel(compiled, DEVICE)


def _same(got: dict, want: list[np.ndarray], names: list[str]) -> None:
    for name, w in zip(names, want):
        g = got[name]
        assert g.dtype == w.dtype and g.shape == w.shape, (name, g.dtype, g.shape, w.shape)
        if g.dtype.kind == "f":
            np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5, err_msg=name)
        else:
            np.testing.assert_array_equal(g, w, err_msg=name)


def test_the_selection_and_its_row_wise_tail_run_in_one_device_program() -> None:
    model = _detector()
    compiled, loaded = _load(model)
    kinds = [p.engine for p in compiled.report.partitions]
    assert kinds == ["device"], compiled.report.render()
    ops_ = {p.op_type: p.engine for p in compiled.report.placements}
    assert ops_["graphengine.PaddedNonMaxSuppression"] == "device"
    assert "NonMaxSuppression" not in ops_
    # the public signature: the selection's rows are the data's, no count output shown
    assert [s.name for s in compiled.outputs] == OUTS
    assert isinstance(compiled.outputs[0].shape[0], str)
    assert set(compiled.row_counts) == set(OUTS)
    assert loaded.direct is not None  # one native call a run
    counts = set()
    for seed in range(6):
        feeds = _images(seed)
        got = loaded.run(feeds)
        assert sorted(got) == sorted(OUTS)
        _same(got, _ort(model, feeds), OUTS)
        counts.add(len(got["selected"]))
    assert len(counts) > 1  # the data decided different counts


@pytest.mark.parametrize("score_t", [0.999, 2.0])
def test_no_selected_box_gives_empty_outputs(score_t: float) -> None:
    model = _detector(score_t=score_t)
    compiled, loaded = _load(model)
    assert [p.engine for p in compiled.report.partitions] == ["device"]
    feeds = _images(0)
    got = loaded.run(feeds)
    assert got["selected"].shape == (0, 3) and got["det_boxes"].shape == (0, 4)
    _same(got, _ort(model, feeds), OUTS)


def test_general_path_and_selected_outputs_are_trimmed_too() -> None:
    """A request the one-call path does not take (a Fortran-ordered image: converted), a
    choice of outputs, sink mode: each cuts the rows the same way."""
    model = _detector(seed=3, limit=7)
    _, loaded = _load(model)
    feeds = _images(1)
    want = _ort(model, feeds)
    _same(loaded.run({"images": np.asfortranarray(feeds["images"])}), want, OUTS)
    picked = loaded.run(feeds, ["det_scores", "selected"])
    assert list(picked) == ["det_scores", "selected"]
    _same(picked, [want[2], want[0]], ["det_scores", "selected"])
    runs = loaded.execute(feeds, iterations=2, return_all=True)
    for got in runs:
        _same(got, want, OUTS)


def test_a_saved_model_trims_its_rows_after_loading() -> None:
    model = _detector(seed=2)
    compiled, _ = _load(model)
    again = offline.load(offline.save(compiled))
    assert again.row_counts == compiled.row_counts
    feeds = _images(2)
    _same(LoadedModel(again, DEVICE).run(feeds), _ort(model, feeds), OUTS)
    # a file whose row count names a tensor nothing makes, or an output it does not have,
    # is refused at load, naming it
    for bad in ({"selected": "nowhere"}, {"not_an_output": compiled.row_counts["selected"]}):
        broken = dataclasses.replace(compiled, row_counts=bad)
        with pytest.raises(InvalidGraph, match="nowhere|not_an_output"):
            LoadedModel(broken, DEVICE)


@pytest.mark.parametrize("tail", ["sum", "wrap"])
def test_a_tail_the_padding_would_change_keeps_the_host_step(tail: str) -> None:
    """A ReduceSum over the selected rows would add the padding rows; a Gather whose index
    from a zero padding row is out of range would fail runs the graph does not: both keep
    the NonMaxSuppression on the host, and the host tail still gives ONNX Runtime's
    answer (through the head program's one-call path and the prepared host plan)."""
    model = _detector(tail="masked" if tail == "wrap" else tail, score_t=0.05)
    compiled, loaded = _load(model)
    ops_ = {p.op_type: p.engine for p in compiled.report.placements}
    assert ops_["NonMaxSuppression"] == "host"
    assert not compiled.row_counts
    assert loaded.head is not None  # the network runs by the one-call check
    names = [s.name for s in compiled.outputs]
    for seed in range(3):
        feeds = _images(seed)
        _same(loaded.run(feeds), _ort(model, feeds), names)


def test_padded_selection_reference_pads_with_zero_rows_and_counts() -> None:
    rng = np.random.default_rng(0)
    boxes = rng.uniform(0, 10, (2, 30, 4)).astype(np.float32)
    scores = rng.uniform(0, 1, (2, 3, 30)).astype(np.float32)
    ins = [boxes, scores, np.array([4], np.int64), np.array([0.3], np.float32),
           np.array([0.5], np.float32)]
    want = nms_reference(ins, {"center_point_box": 0})[0]
    y, count = padded_nms(ins, {"center_point_box": 0, "rows": 24})
    assert y.shape == (24, 3) and count.tolist() == [len(want)]
    np.testing.assert_array_equal(y[:len(want)], want)
    assert not y[len(want):].any()


@pytest.mark.parametrize("seed", range(6))
def test_device_selection_keeps_what_the_reference_keeps(seed: int) -> None:
    """The device kernel against the numpy reference on what the detector does not give:
    NaN coordinates and scores, -inf scores, center-point boxes, two batches, a graph
    whose outputs are the selection alone. Seeds 4 and 5 are large enough (hundreds of
    boxes, limits of 10-40) for the (batch, class) pairs to select in parallel, packed in
    order afterwards."""
    rng = np.random.default_rng(seed)
    n = int(rng.integers(5, 80)) if seed < 4 else int(rng.integers(300, 600))
    boxes, scores = hostile_detections(rng, n)
    center = int(seed % 2)
    limit = int(rng.integers(1, 9)) if seed < 4 else int(rng.integers(10, 40))
    iou, score_t = float(rng.uniform(0, 1)), 0.1
    graph = helper.make_graph(
        [helper.make_node("NonMaxSuppression", ["b", "s", "m", "i", "t"], ["y"],
                          center_point_box=center)], "nms",
        [helper.make_tensor_value_info("b", TensorProto.FLOAT, [2, n, 4]),
         helper.make_tensor_value_info("s", TensorProto.FLOAT, [2, 3, n])],
        [helper.make_tensor_value_info("y", TensorProto.INT64, None)],
        initializer=[_const("m", np.array([limit], np.int64)),
                     _const("i", np.array([iou], np.float32)),
                     _const("t", np.array([score_t], np.float32))])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    compiled = compile_graph(load_model(model), input_shapes={"b": boxes.shape, "s": scores.shape})
    assert [p.engine for p in compiled.report.partitions] == ["device"]
    got = LoadedModel(compiled, DEVICE).run({"b": boxes, "s": scores})["y"]
    want = nms_reference([boxes, scores, np.array([limit]), np.array([iou], np.float32),
                          np.array([score_t], np.float32)], {"center_point_box": center})[0]
    np.testing.assert_array_equal(got, want)


def test_a_reshape_by_the_selections_own_shape_stays_in_the_device_program() -> None:
    """A Reshape whose target is the Shape of the picked rows (`view(idx.shape[0], -1)`)
    keeps the rows: the tail is bounded, and the outputs are ONNX Runtime's for every count
    (none selected is left out: ONNX Runtime refuses to reshape [0, 4] to [0, -1])."""
    for score_t in (0.6, 0.05):
        model = _detector(tail="view", score_t=score_t)
        compiled, loaded = _load(model)
        assert [p.engine for p in compiled.report.partitions] == ["device"], \
            compiled.report.render()
        names = [s.name for s in compiled.outputs]
        for seed in range(2):
            feeds = _images(seed)
            _same(loaded.run(feeds), _ort(model, feeds), names)


def test_a_shape_of_the_selection_the_graph_outputs_keeps_the_host_step() -> None:
    """The count itself as an output would read the padded row count: host step."""
    model = _detector(tail="count")
    compiled, loaded = _load(model)
    ops_ = {p.op_type: p.engine for p in compiled.report.placements}
    assert ops_["NonMaxSuppression"] == "host"
    names = [s.name for s in compiled.outputs]
    feeds = _images(1)
    _same(loaded.run(feeds), _ort(model, feeds), names)
