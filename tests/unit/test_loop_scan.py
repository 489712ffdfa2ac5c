"""A Loop of independent iterations (torch's export of nn.EmbeddingBag: one bag per
iteration, stacked) runs as the same ops over all iterations at once, on the device: an
unseen DLRM was 0.10x of ONNX Runtime at batch 8 with the Loop run by the interpreter per
bag. Exact against ONNX Runtime; Loops the lifting cannot express (ragged bags, carried
state, a condition that may turn false) stay Loops and stay correct."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from graphengine.engine.importers import load_model
from graphengine.engine.pipeline import CompileOptions, compile_graph
from graphengine.engine.runtime import LoadedModel

I64, F32 = TensorProto.INT64, TensorProto.FLOAT
RNG = np.random.default_rng(6)
V, D = 50, 8


def _c(name, value):
    return numpy_helper.from_array(np.asarray(value), name)


def _bag_body(weighted: bool, reduce: str = "ReduceSum"):
    """torch's EmbeddingBag body: the bag's [start, end) slice of the flat indices, the
    rows, times the per-sample weights, summed (or averaged) over the bag."""
    nodes = [helper.make_node("Gather", ["starts", "i"], ["s0"], axis=0),
             helper.make_node("Gather", ["ends", "i"], ["e0"], axis=0),
             helper.make_node("Unsqueeze", ["s0", "zero"], ["s"]),
             helper.make_node("Unsqueeze", ["e0", "zero"], ["e"]),
             helper.make_node("Slice", ["idx", "s", "e", "zero"], ["bag"]),
             helper.make_node("Gather", ["table", "bag"], ["rows"], axis=0)]
    last = "rows"
    if weighted:
        nodes += [helper.make_node("Slice", ["psw", "s", "e", "zero"], ["w"]),
                  helper.make_node("Unsqueeze", ["w", "one"], ["w1"]),
                  helper.make_node("Mul", ["rows", "w1"], ["rw"])]
        last = "rw"
    if reduce == "ReduceSum":
        nodes.append(helper.make_node("ReduceSum", [last, "zero"], ["out"], keepdims=0))
    else:
        nodes.append(helper.make_node(reduce, [last], ["out"], axes=[0], keepdims=0))
    nodes.append(helper.make_node("Identity", ["cond_in"], ["cond_out"]))
    inits = [_c("zero", np.array([0], np.int64)), _c("one", np.array([1], np.int64)),
             _c("table", RNG.standard_normal((V, D)).astype(np.float32))]
    return helper.make_graph(
        nodes, "body", [helper.make_tensor_value_info("i", I64, []),
                        helper.make_tensor_value_info("cond_in", TensorProto.BOOL, [])],
        [helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
         helper.make_tensor_value_info("out", F32, [D])], inits)


def _model(bags: int, offsets: np.ndarray, weighted=True, reduce="ReduceSum",
           trips_from_shape=False, offsets_input=False):
    total = int(offsets[-1])
    nodes = [helper.make_node("Slice", ["offsets", "z", "m1", "z"], ["starts"]),
             helper.make_node("Slice", ["offsets", "o1", "big", "z"], ["ends"])]
    inits = [_c("z", np.array([0], np.int64)),
             _c("o1", np.array([1], np.int64)), _c("m1", np.array([-1], np.int64)),
             _c("big", np.array([1 << 30], np.int64)), _c("true", np.array(True))]
    if not offsets_input:
        inits.append(_c("offsets", offsets.astype(np.int64)))
    if trips_from_shape:  # the trip count as torch computes it: the starts' length
        nodes += [helper.make_node("Shape", ["starts"], ["sh"]),
                  helper.make_node("Gather", ["sh", "z0"], ["trips"], axis=0)]
        inits.append(_c("z0", np.array(0, np.int64)))
    else:
        inits.append(_c("trips", np.array(bags, np.int64)))
    nodes.append(helper.make_node("Loop", ["trips", "true"], ["pooled"],
                                  body=_bag_body(weighted, reduce)))
    nodes.append(helper.make_node("Identity", ["pooled"], ["y"]))  # NaN and 0 differ here
    inputs = [helper.make_tensor_value_info("idx", I64, [total])]
    if weighted:
        inputs.append(helper.make_tensor_value_info("psw", F32, [total]))
    if offsets_input:
        inputs.append(helper.make_tensor_value_info("offsets", I64, [len(offsets)]))
    graph = helper.make_graph(nodes, "bags", inputs,
                              [helper.make_tensor_value_info("y", F32, None)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    feeds = {"idx": RNG.integers(0, V, total).astype(np.int64)}
    if weighted:
        feeds["psw"] = RNG.random(total).astype(np.float32)
    if offsets_input:
        feeds["offsets"] = offsets.astype(np.int64)
    return model, feeds


def _check(model, feeds):
    compiled = compile_graph(load_model(model), CompileOptions(lint=True))
    got = LoadedModel(compiled).execute(feeds)["y"]
    want = ort.InferenceSession(model.SerializeToString(), providers=[
        "CPUExecutionProvider"]).run(None, feeds)[0]
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)
    return compiled.report.placements


def _hosted(placements) -> list[str]:
    return [p.op_type for p in placements if p.engine != "device"]


def _loops(placements) -> list[str]:
    return [p.op_type for p in placements if p.op_type == "Loop"]


@pytest.mark.parametrize("weighted", [True, False])
@pytest.mark.parametrize("trips_from_shape", [False, True])
def test_equal_bags_run_on_the_device_without_the_loop(weighted, trips_from_shape):
    bags, size = 6, 5
    model, feeds = _model(bags, np.arange(0, bags * size + 1, size), weighted,
                          trips_from_shape=trips_from_shape)
    placements = _check(model, feeds)
    assert _hosted(placements) == [] and _loops(placements) == []


def test_a_mean_by_the_attribute_form_and_many_bags():
    bags, size = 300, 3
    model, feeds = _model(bags, np.arange(0, bags * size + 1, size), reduce="ReduceMean")
    placements = _check(model, feeds)
    assert _hosted(placements) == [] and _loops(placements) == []


@pytest.mark.parametrize("offsets_input", [False, True])
@pytest.mark.parametrize("reduce,weighted", [("ReduceSum", True), ("ReduceSum", False),
                                             ("ReduceMean", False)])
def test_ragged_bags_are_a_mask_times_the_rows(offsets_input, reduce, weighted):
    """Bags of different lengths, their bounds constant or an input only the run knows
    (DLRM's offsets), an empty bag among them (its mean is 0, as ONNX Runtime's)."""
    offsets = np.array([0, 2, 7, 7, 9, 16])
    model, feeds = _model(5, offsets, weighted, reduce, trips_from_shape=True,
                          offsets_input=offsets_input)
    placements = _check(model, feeds)
    assert _hosted(placements) == [] and _loops(placements) == []
    if offsets_input:  # other bags through the same compiled model
        compiled = compile_graph(load_model(model), CompileOptions())
        feeds["offsets"] = np.array([0, 0, 1, 8, 15, 16], np.int64)
        got = LoadedModel(compiled).execute(feeds)["y"]
        want = ort.InferenceSession(model.SerializeToString(), providers=[
            "CPUExecutionProvider"]).run(None, feeds)[0]
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)


def test_a_condition_that_turns_false_keeps_the_loop():
    """cond_out = i < 2: the loop stops after three iterations of the five it may run, and
    the scan output has three rows, not five."""
    body = helper.make_graph(
        [helper.make_node("Less", ["i", "two"], ["cond_out"]),
         helper.make_node("Cast", ["i"], ["f"], to=F32),
         helper.make_node("Mul", ["f", "x"], ["out"])],
        "body", [helper.make_tensor_value_info("i", I64, []),
                 helper.make_tensor_value_info("cond_in", TensorProto.BOOL, [])],
        [helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
         helper.make_tensor_value_info("out", F32, [4])], [_c("two", np.array(2, np.int64))])
    graph = helper.make_graph(
        [helper.make_node("Loop", ["trips", "true"], ["y"], body=body)], "early",
        [helper.make_tensor_value_info("x", F32, [4])],
        [helper.make_tensor_value_info("y", F32, None)],
        [_c("trips", np.array(5, np.int64)), _c("true", np.array(True))])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    placements = _check(model, {"x": RNG.standard_normal(4).astype(np.float32)})
    assert _loops(placements) == ["Loop"]


def test_a_lifted_scalar_times_an_invariant_row_keeps_the_iteration_axis_first():
    """out_i = float(i) * x (x [4], four iterations): the lifted [T] scalar is viewed as
    [T, 1] before the product; as [T] it broadcast against x's axis and gave x * [0..3]
    in every row, wrong and the right shape when T equals x's length."""
    body = helper.make_graph(
        [helper.make_node("Identity", ["cond_in"], ["cond_out"]),
         helper.make_node("Cast", ["i"], ["f"], to=F32),
         helper.make_node("Mul", ["f", "x"], ["out"])],
        "body", [helper.make_tensor_value_info("i", I64, []),
                 helper.make_tensor_value_info("cond_in", TensorProto.BOOL, [])],
        [helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
         helper.make_tensor_value_info("out", F32, [4])])
    graph = helper.make_graph(
        [helper.make_node("Loop", ["trips", "true"], ["y"], body=body)], "rows",
        [helper.make_tensor_value_info("x", F32, [4])],
        [helper.make_tensor_value_info("y", F32, None)],
        [_c("trips", np.array(4, np.int64)), _c("true", np.array(True))])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    placements = _check(model, {"x": np.arange(1, 5, dtype=np.float32)})
    assert _loops(placements) == []  # lifted, not left to the Loop
