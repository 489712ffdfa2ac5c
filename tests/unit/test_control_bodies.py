"""Control flow compiled: If/Loop/Scan bodies as device models of their own, an If whose
condition folds written into the enclosing graph, and the device Slice of negative steps
(silero VAD's and Keras LSTMs' bodies ran node by node in numpy: 2-3 ms a run)."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from graphengine.engine import offline
from graphengine.engine.importers import load_model
from graphengine.engine.model import DeviceProgram, HostProgram
from graphengine.engine.pipeline import CompileOptions, compile_graph
from graphengine.engine.runtime import load
from tests.unit.device_cases import compile_model, onnxruntime, randn

F = TensorProto.FLOAT


def _model(nodes, inputs, outputs, inits=(), opset=17):
    graph = helper.make_graph(nodes, "g", inputs, outputs,
                              [numpy_helper.from_array(v, k) for k, v in dict(inits).items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)],
                             ir_version=8)


def _conv_branch(name: str, w: np.ndarray, act: str, pad: int = 1) -> object:
    """A branch reading the enclosing x: Conv then `act` (a device partition)."""
    return helper.make_graph(
        [helper.make_node("Conv", ["x", f"{name}_w"], [f"{name}_c"], pads=[pad] * 4),
         helper.make_node(act, [f"{name}_c"], [f"{name}_y"])], name, [],
        [helper.make_tensor_value_info(f"{name}_y", F, None)],
        [numpy_helper.from_array(w, f"{name}_w")])


def _data_if(channels: int = 24, size: int = 32, else_pad: int = 0):
    """y = If(sum(x) > 0) then Relu(Conv(x)) else Sigmoid(Conv(x)): the data decides. At
    the default size each branch is 1.3 MFLOP, too much to run both for one's result (see
    prepare/branches.py): the If stays and its branches are compiled bodies. The else
    branch's Conv is unpadded: the branches' outputs differ in shape, so the If's output
    has none fixed and the If is a host step (with the same shapes it runs on the device,
    test_control_device.py)."""
    return _model(
        [helper.make_node("ReduceSum", ["x"], ["s"], keepdims=0),
         helper.make_node("Greater", ["s", "zero"], ["c"]),
         helper.make_node("If", ["c"], ["y"],
                          then_branch=_conv_branch("then", randn(channels, 3, 3, 3), "Relu"),
                          else_branch=_conv_branch("else", randn(channels, 3, 3, 3),
                                                   "Sigmoid", else_pad))],
        [helper.make_tensor_value_info("x", F, [1, 3, size, size])],
        [helper.make_tensor_value_info("y", F, None)], {"zero": np.array(0, np.float32)})


def test_an_if_on_data_left_on_the_host_runs_each_branch_compiled_for_the_device():
    m = _data_if()
    compiled = compile_model(m)
    records = list(compiled.report.bodies)
    assert [(r.body, r.compiled) for r in records] == [("then_branch", True),
                                                       ("else_branch", True)], records
    (step,) = [s for p in compiled.programs if isinstance(p, HostProgram) for s in p.steps]
    for body in step.bodies.values():  # each branch is one device program
        assert [type(p) for p in body.programs] == [DeviceProgram]
    loaded = load(compiled)
    assert loaded.device_bytes > sum(p.arena_bytes + p.weight_bytes for p in compiled.programs
                                     if isinstance(p, DeviceProgram))
    for sign in (1.0, -1.0):  # both branches
        x = np.abs(randn(1, 3, 32, 32)) * sign
        (want,) = onnxruntime(m, {"x": x})
        np.testing.assert_allclose(loaded.execute({"x": x})["y"], want, rtol=1e-4, atol=1e-5)


def test_a_small_if_on_data_is_both_branches_and_a_where():
    """Branches of a few pure ops (here 14 kFLOP each): both are computed on the device and
    a Where picks one, instead of a host step cutting the program in two."""
    m = _data_if(channels=4, size=8, else_pad=1)
    compiled = compile_model(m)
    assert [type(p) for p in compiled.programs] == [DeviceProgram]
    assert not compiled.report.bodies
    kernels = [p.op_type for p in compiled.report.placements]
    assert "If" not in kernels and "Where" in kernels, kernels
    loaded = load(compiled)
    for sign in (1.0, -1.0):
        x = np.abs(randn(1, 3, 8, 8)) * sign
        (want,) = onnxruntime(m, {"x": x})
        np.testing.assert_allclose(loaded.execute({"x": x})["y"], want, rtol=1e-4, atol=1e-5)


def test_the_branch_not_taken_may_compute_garbage_and_a_graph_output_keeps_its_name():
    """y = If(c) then x / d else x * 2 with d = 0 on the rows the else branch serves: the
    then branch's infinities never reach the result; y stays y."""
    branch = {
        "then": helper.make_graph([helper.make_node("Div", ["x", "d"], ["t"])], "then", [],
                                  [helper.make_tensor_value_info("t", F, [4])]),
        "else": helper.make_graph([helper.make_node("Mul", ["x", "two"], ["e"])], "else", [],
                                  [helper.make_tensor_value_info("e", F, [4])]),
    }
    m = _model([helper.make_node("Greater", ["d", "zero"], ["c"]),
                helper.make_node("If", ["c"], ["y"], then_branch=branch["then"],
                                 else_branch=branch["else"])],
               [helper.make_tensor_value_info("x", F, [4]),
                helper.make_tensor_value_info("d", F, [])],
               [helper.make_tensor_value_info("y", F, [4])],
               {"zero": np.array(0, np.float32), "two": np.array(2, np.float32)})
    compiled = compile_model(m)
    assert [type(p) for p in compiled.programs] == [DeviceProgram]
    loaded = load(compiled)
    x = randn(4)
    for d in (0.0, 4.0):
        got = loaded.execute({"x": x, "d": np.array(d, np.float32)})
        assert list(got) == ["y"]
        np.testing.assert_allclose(got["y"], x / d if d > 0 else x * 2, rtol=1e-6)


def test_compiled_branches_survive_an_offline_round_trip():
    m = _data_if()
    compiled = offline.load(offline.save(compile_model(m)))
    (step,) = [s for p in compiled.programs if isinstance(p, HostProgram) for s in p.steps]
    assert sorted(step.bodies) == ["else_branch", "then_branch"]
    x = -np.abs(randn(1, 3, 32, 32))
    (want,) = onnxruntime(m, {"x": x})
    np.testing.assert_allclose(load(compiled).execute({"x": x})["y"], want, rtol=1e-4,
                               atol=1e-5)


def test_an_if_on_a_static_shape_is_the_branch_it_takes():
    """torch's `if x.size(2) == 8:` exports as If(Equal(Gather(Shape(x)), 8)): once shapes
    are known the condition folds and the taken branch joins the device partition."""
    m = _model(
        [helper.make_node("Shape", ["x"], ["shp"]),
         helper.make_node("Gather", ["shp", "two"], ["h"]),
         helper.make_node("Equal", ["h", "eight"], ["c"]),
         helper.make_node("If", ["c"], ["y"],
                          then_branch=_conv_branch("then", randn(4, 3, 3, 3), "Relu"),
                          else_branch=_conv_branch("else", randn(4, 3, 3, 3), "Sigmoid"))],
        [helper.make_tensor_value_info("x", F, [1, 3, "h", 8])],
        [helper.make_tensor_value_info("y", F, None)],
        {"two": np.array(2, np.int64), "eight": np.array(8, np.int64)})
    for h in (8, 6):
        x = randn(1, 3, h, 8)
        compiled = compile_graph(load_model(m), CompileOptions(lint=True),
                                 input_shapes={"x": x.shape})
        assert [type(p) for p in compiled.programs] == [DeviceProgram]
        assert "If" not in {p.op_type for p in compiled.report.placements}
        assert not compiled.report.bodies
        (want,) = onnxruntime(m, {"x": x})
        np.testing.assert_allclose(load(compiled).execute({"x": x})["y"], want, rtol=1e-4,
                                   atol=1e-5)


def _loop(grow: bool):
    """acc = acc * w + x over m iterations (a recurrence the body runs on the device), and
    the running values as scan outputs; with `grow` the carried state gets longer every
    iteration (Concat), so no one signature fits the body."""
    nodes = [helper.make_node("Mul", ["acc_in", "w"], ["scaled"]),
             helper.make_node("Add", ["scaled", "x"], ["acc_out"]),
             helper.make_node("Identity", ["cond_in"], ["cond_out"]),
             helper.make_node("Tanh", ["acc_out"], ["scan"])]
    acc_shape = [None] if grow else [6]
    if grow:
        nodes[1] = helper.make_node("Concat", ["scaled", "x"], ["acc_out"], axis=0)
        nodes[3] = helper.make_node("ReduceSum", ["acc_out"], ["scan"], keepdims=0)
    body = helper.make_graph(
        nodes, "body",
        [helper.make_tensor_value_info("i", TensorProto.INT64, []),
         helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []),
         helper.make_tensor_value_info("acc_in", F, acc_shape)],
        [helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
         helper.make_tensor_value_info("acc_out", F, acc_shape),
         helper.make_tensor_value_info("scan", F, None)],
        [numpy_helper.from_array(np.float32(0.5) + np.zeros(1 if grow else 6, np.float32),
                                 "w")])
    return _model(
        [helper.make_node("Loop", ["m", "", "a0"], ["acc", "scans"], body=body)],
        [helper.make_tensor_value_info("m", TensorProto.INT64, []),
         helper.make_tensor_value_info("a0", F, [6]),
         helper.make_tensor_value_info("x", F, [6])],
        [helper.make_tensor_value_info("acc", F, None),
         helper.make_tensor_value_info("scans", F, None)])


@pytest.mark.parametrize("grow", [False, True])
def test_a_loop_body_is_compiled_when_its_state_keeps_one_type(grow):
    m = _loop(grow)
    compiled = compile_model(m)
    (record,) = compiled.report.bodies
    assert record.compiled is not grow, record
    if grow:
        assert "changes type" in record.detail or "no single static" in record.detail
    loaded = load(compiled)
    for trips in (0, 1, 5):
        feeds = {"m": np.array(trips, np.int64), "a0": randn(6), "x": randn(6)}
        got = loaded.execute(feeds)
        want = onnxruntime(m, feeds)
        for a, b in zip(got.values(), want):
            assert a.shape == b.shape
            np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


def test_a_scan_body_is_compiled():
    body = helper.make_graph(
        [helper.make_node("Add", ["s_in", "x_t"], ["sum"]),
         helper.make_node("Tanh", ["sum"], ["s_out"]),
         helper.make_node("Mul", ["s_out", "x_t"], ["y_t"])], "body",
        [helper.make_tensor_value_info("s_in", F, [3]),
         helper.make_tensor_value_info("x_t", F, [3])],
        [helper.make_tensor_value_info("s_out", F, [3]),
         helper.make_tensor_value_info("y_t", F, [3])])
    m = _model(
        [helper.make_node("Scan", ["s0", "xs"], ["s", "ys"], body=body, num_scan_inputs=1,
                          scan_input_axes=[1], scan_input_directions=[1])],
        [helper.make_tensor_value_info("s0", F, [3]),
         helper.make_tensor_value_info("xs", F, [3, 5])],
        [helper.make_tensor_value_info("s", F, None),
         helper.make_tensor_value_info("ys", F, None)])
    compiled = compile_model(m)
    assert [r.compiled for r in compiled.report.bodies] == [True]
    feeds = {"s0": randn(3), "xs": randn(3, 5)}
    got = load(compiled).execute(feeds)
    for a, b in zip(got.values(), onnxruntime(m, feeds)):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("start,end,step", [(3, 0, -1), (-1, -100, -1), (100, 1, -2),
                                            (5, -1, -3), (-2, -7, -2), (0, 5, -1)])
def test_a_negative_step_slice_runs_on_the_device(start, end, step):
    m = _model(
        [helper.make_node("Relu", ["x"], ["r"]),
         helper.make_node("Slice", ["r", "starts", "ends", "axes", "steps"], ["y"])],
        [helper.make_tensor_value_info("x", F, [2, 7, 5])],
        [helper.make_tensor_value_info("y", F, None)],
        {"starts": np.array([start], np.int64), "ends": np.array([end], np.int64),
         "axes": np.array([1], np.int64), "steps": np.array([step], np.int64)})
    compiled = compile_model(m)
    assert [type(p) for p in compiled.programs] == [DeviceProgram]
    x = randn(2, 7, 5)
    got = load(compiled).execute({"x": x})["y"]
    # numpy's slices clamp and wrap as ONNX's do
    np.testing.assert_array_equal(got, np.maximum(x, 0)[:, start:end:step])
    (want,) = onnxruntime(m, {"x": x})
    np.testing.assert_array_equal(got, want)


def _keras_loop(limit_from_input: bool):
    """tf2onnx's Keras RNN: a while loop carrying its weights through unchanged and a
    counter, `i < n and counter < n` as its condition, the hidden state as scan output.
    With `limit_from_input` n is a graph input: the trip count is the run's to decide."""
    i64 = TensorProto.INT64
    body = helper.make_graph(
        [helper.make_node("MatMul", ["h_in", "w_in"], ["hw"]),
         helper.make_node("Gather", ["xs", "counter_in"], ["x_t"], axis=0),
         helper.make_node("Add", ["hw", "x_t"], ["pre"]),
         helper.make_node("Tanh", ["pre"], ["h_out"]),
         helper.make_node("Add", ["counter_in", "one"], ["counter_out"]),
         helper.make_node("Less", ["i", "n"], ["c1"]),
         helper.make_node("Less", ["counter_out", "n"], ["c2"]),
         helper.make_node("And", ["c1", "c2"], ["cond_out"]),
         helper.make_node("Identity", ["h_out"], ["h_scan"])], "body",
        [helper.make_tensor_value_info("i", i64, []),
         helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []),
         helper.make_tensor_value_info("counter_in", i64, []),
         helper.make_tensor_value_info("h_in", F, [1, 8]),
         helper.make_tensor_value_info("w_in", F, [8, 8])],
        [helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
         helper.make_tensor_value_info("counter_out", i64, []),
         helper.make_tensor_value_info("h_out", F, [1, 8]),
         helper.make_tensor_value_info("w_in", F, [8, 8]),
         helper.make_tensor_value_info("h_scan", F, [1, 8])],
        [numpy_helper.from_array(np.array(1, np.int64), "one")])
    inputs = [helper.make_tensor_value_info("xs", F, [5, 1, 8])]
    inits = {"w": randn(8, 8) * 0.3, "zero": np.array(0, np.int64),
             "big": np.array(1000, np.int64), "h0": np.zeros((1, 8), np.float32),
             "perm": np.array([1, 0, 2], np.int64)}
    if limit_from_input:
        inputs.append(helper.make_tensor_value_info("n", TensorProto.INT64, []))
    else:
        inits["n"] = np.array(5, np.int64)
    return _model(
        [helper.make_node("Less", ["zero", "n"], ["go"]),
         helper.make_node("Loop", ["big", "go", "zero", "h0", "w"],
                          ["count", "h", "w_final", "hs"], body=body),
         helper.make_node("Transpose", ["hs"], ["y"], perm=[1, 0, 2]),
         helper.make_node("Relu", ["w_final"], ["w_relu"])],
        inputs, [helper.make_tensor_value_info("y", F, None),
                 helper.make_tensor_value_info("w_relu", F, None)], inits)


@pytest.mark.parametrize("limit_from_input", [False, True])
def test_a_keras_loop_runs_a_static_count_with_its_weights_as_body_constants(
        limit_from_input):
    m = _keras_loop(limit_from_input)
    compiled = compile_model(m)
    (record,) = compiled.report.bodies
    assert record.compiled, record
    y = compiled.outputs[0]
    placed = {p.op_type: p.engine for p in compiled.report.placements}
    if limit_from_input:  # the run decides how many steps: the scan output's length too
        assert isinstance(y.shape[1], str) and placed["Transpose"] == "host"
        (step,) = [s for p in compiled.programs if isinstance(p, HostProgram)
                   for s in p.steps if s.op_type == "Loop"]
        # the weights the loop carried unchanged are the body's constant, not its input
        assert sorted(s.shape for s in step.bodies["body"].inputs
                      if s.dtype.numpy == np.float32) == [(1, 8), (5, 1, 8)]  # h, xs
    else:  # five iterations, known at compile: the Loop and what reads its scan output
        # run in one device program, the carried weights a constant of its body's tasks
        assert tuple(y.shape) == (1, 5, 8) and placed["Transpose"] == "device"
        assert placed["Loop"] == "device"
        (prog,) = compiled.programs
        assert [s.shape for s in prog.tensors if s.region == "weight" and
                s.name.startswith("loop_") and s.shape == [8, 8]] == [[8, 8]]
    feeds = {"xs": randn(5, 1, 8)}
    if limit_from_input:
        feeds["n"] = np.array(3, np.int64)
    got = load(compiled).execute(feeds)
    for a, b in zip(got.values(), onnxruntime(m, feeds)):
        assert a.shape == b.shape
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


def test_an_onnx_attribute_named_like_the_compilers_own_is_refused():
    """`_outer`, `_bodies` and the fused epilogues' `_`-attributes are the compiler's: a
    file that sets one would steer it (an If told to run a body it does not have)."""
    from graphengine.engine.errors import InvalidGraph

    m = _data_if()
    m.graph.node[2].attribute.append(helper.make_attribute("_bodies", "then_branch"))
    with pytest.raises(InvalidGraph, match="reserved.*_bodies"):
        load_model(m)


def test_a_trip_count_past_the_compile_time_bound_stays_symbolic():
    """The condition's slice runs at compile time only within bounds (node runs in all, not
    only iterations): 10000 iterations of a 13-node slice keep a symbolic length."""
    i64 = TensorProto.INT64
    chain = [helper.make_node("Add", ["i" if k == 0 else f"t{k - 1}", "zero"], [f"t{k}"])
             for k in range(12)]
    body = helper.make_graph(
        chain + [helper.make_node("Less", ["t11", "limit"], ["cond_out"]),
         helper.make_node("Add", ["acc_in", "one"], ["acc_out"]),
         helper.make_node("Identity", ["acc_out"], ["scan"])], "body",
        [helper.make_tensor_value_info("i", i64, []),
         helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []),
         helper.make_tensor_value_info("acc_in", F, [1])],
        [helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
         helper.make_tensor_value_info("acc_out", F, [1]),
         helper.make_tensor_value_info("scan", F, [1])],
        [numpy_helper.from_array(np.array(10000, np.int64), "limit"),
         numpy_helper.from_array(np.array(0, np.int64), "zero"),
         numpy_helper.from_array(np.ones(1, np.float32), "one")])
    m = _model([helper.make_node("Loop", ["", "", "a0"], ["acc", "scans"], body=body)],
               [helper.make_tensor_value_info("a0", F, [1])],
               [helper.make_tensor_value_info("acc", F, None),
                helper.make_tensor_value_info("scans", F, None)])
    compiled = compile_model(m)
    assert isinstance(compiled.outputs[1].shape[0], str)
    (record,) = compiled.report.bodies
    assert record.compiled
