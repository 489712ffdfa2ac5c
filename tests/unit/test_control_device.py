"""Control flow on the device (engine/codegen/control.py, runtime_ext/src/model_control.cc):
If, Loop and Scan whose bodies run on the device are labels, switches and jumps inside one
device program, checked against ONNX Runtime; those that need the host fall back whole,
saying why."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from graphengine.engine import offline
from graphengine.engine.codegen.control import MAX_DEVICE_TRIPS
from graphengine.engine.model import DeviceProgram
from graphengine.engine.runtime import load
from tests.unit.device_cases import compile_model, onnxruntime, randn

F, I64, B = TensorProto.FLOAT, TensorProto.INT64, TensorProto.BOOL


def _model(nodes, inputs, outputs, inits=(), opset=17):
    graph = helper.make_graph(nodes, "g", inputs, outputs,
                              [numpy_helper.from_array(v, k) for k, v in dict(inits).items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)],
                             ir_version=8)


def _vi(name, elem, shape):
    return helper.make_tensor_value_info(name, elem, shape)


def _check(m, compiled, feeds, rtol=1e-5, atol=1e-5, loaded=None):
    got = (loaded or load(compiled)).execute(feeds)
    want = onnxruntime(m, feeds)
    assert len(got) == len(want)
    for (name, a), b in zip(got.items(), want):
        assert a.shape == b.shape and a.dtype == b.dtype, (name, a.shape, b.shape)
        scale = max(1.0, float(np.abs(b).max())) if b.size and b.dtype.kind == "f" else 1.0
        np.testing.assert_allclose(a, b, rtol=rtol, atol=atol * scale, err_msg=name)
    return got


def _placed(compiled, op):
    (p,) = [p for p in compiled.report.placements if p.op_type == op]
    return p


def _one_device_program(compiled):
    assert [type(p) for p in compiled.programs] == [DeviceProgram], compiled.report.render()
    assert [p.engine for p in compiled.report.partitions] == ["device"]


# ---- If ------------------------------------------------------------------------------------
def _conv_branch(name, w, act):
    return helper.make_graph(
        [helper.make_node("Conv", ["r", f"{name}_w"], [f"{name}_c"], pads=[1, 1, 1, 1]),
         helper.make_node(act, [f"{name}_c"], [f"{name}_y"])], name, [],
        [_vi(f"{name}_y", F, None)], [numpy_helper.from_array(w, f"{name}_w")])


def _if_in_region():
    """Conv -> Relu -> If(sum > 0: Conv+Relu, else Conv+Sigmoid) -> Mul: each branch 1.3
    MFLOP (too much to run both, prepare/branches.py), the predicate from the data."""
    return _model(
        [helper.make_node("Conv", ["x", "w0"], ["c0"], pads=[1, 1, 1, 1]),
         helper.make_node("Relu", ["c0"], ["r"]),
         helper.make_node("ReduceSum", ["x"], ["s"], keepdims=0),
         helper.make_node("Greater", ["s", "zero"], ["c"]),
         helper.make_node("If", ["c"], ["y"],
                          then_branch=_conv_branch("then", randn(24, 8, 3, 3), "Relu"),
                          else_branch=_conv_branch("else", randn(24, 8, 3, 3), "Sigmoid")),
         helper.make_node("Mul", ["y", "two"], ["z"])],
        [_vi("x", F, [1, 3, 32, 32])], [_vi("z", F, None)],
        {"w0": randn(8, 3, 3, 3), "zero": np.array(0, np.float32),
         "two": np.array(2, np.float32)})


def test_an_if_inside_a_device_region_no_longer_splits_it():
    m = _if_in_region()
    compiled = compile_model(m)
    _one_device_program(compiled)
    assert _placed(compiled, "If").engine == "device"
    assert [(b.body, b.compiled) for b in compiled.report.bodies] == [
        ("then_branch", True), ("else_branch", True)]
    assert all("on the device" in b.detail for b in compiled.report.bodies)
    kinds = {t.kind for t in compiled.programs[0].tasks}
    assert {"switch", "goto", "label"} <= kinds
    # each branch's Conv writes the If's output itself: no copy after it
    assert "copy" not in kinds, [t.kind for t in compiled.programs[0].tasks]
    for sign in (1.0, -1.0):  # each branch, the data deciding
        _check(m, compiled, {"x": np.abs(randn(1, 3, 32, 32)) * sign}, rtol=1e-4)


def test_an_if_whose_branch_returns_an_enclosing_value_or_a_constant():
    """then: the enclosing x itself; else: a constant; neither branch runs a kernel."""
    then = helper.make_graph([helper.make_node("Identity", ["x"], ["t"])], "then", [],
                             [_vi("t", F, [4])])
    other = helper.make_graph([], "else", [], [_vi("k", F, [4])],
                              [numpy_helper.from_array(np.arange(4, dtype=np.float32), "k")])
    m = _model([helper.make_node("Relu", ["x0"], ["x"]),
                helper.make_node("If", ["c"], ["y"], then_branch=then, else_branch=other),
                helper.make_node("Neg", ["y"], ["z"])],
               [_vi("x0", F, [4]), _vi("c", B, [])], [_vi("z", F, None)])
    compiled = compile_model(m)
    _one_device_program(compiled)
    for c in (True, False):
        _check(m, compiled, {"x0": randn(4), "c": np.array(c)})


def test_an_if_branch_giving_one_value_twice_writes_it_once_and_copies_it_once():
    """then: (a, a viewed again); else: two values of its own. 300K elements a branch, too
    many to compute both (prepare/branches.py)."""
    then = helper.make_graph([helper.make_node("Relu", ["x"], ["a"]),
                              helper.make_node("Identity", ["a"], ["b"])], "then", [],
                             [_vi("a", F, [600, 512]), _vi("b", F, [600, 512])])
    other = helper.make_graph([helper.make_node("Neg", ["x"], ["e"]),
                               helper.make_node("Abs", ["x"], ["d"])], "else", [],
                              [_vi("e", F, [600, 512]), _vi("d", F, [600, 512])])
    m = _model([helper.make_node("Tanh", ["x0"], ["x"]),
                helper.make_node("If", ["c"], ["y", "z"], then_branch=then,
                                 else_branch=other)],
               [_vi("x0", F, [600, 512]), _vi("c", B, [])],
               [_vi("y", F, None), _vi("z", F, None)])
    compiled = compile_model(m)
    _one_device_program(compiled)
    copies = [t for t in compiled.programs[0].tasks if t.kind == "copy"]
    assert len(copies) == 1, copies  # then's second output, from its first
    for c in (True, False):
        _check(m, compiled, {"x0": randn(600, 512), "c": np.array(c)})


# ---- Loop ----------------------------------------------------------------------------------
def _while_loop():
    """h = tanh(h @ W + x), acc += i, while acc < thr and fewer than m iterations: the
    trip count and the condition both from the run."""
    body = helper.make_graph(
        [helper.make_node("MatMul", ["h_in", "W"], ["hw"]),
         helper.make_node("Add", ["hw", "x"], ["pre"]),
         helper.make_node("Tanh", ["pre"], ["h_out"]),
         helper.make_node("Cast", ["i"], ["fi"], to=F),
         helper.make_node("Add", ["acc_in", "fi"], ["acc_out"]),
         helper.make_node("Less", ["acc_out", "thr"], ["cond_out"])], "body",
        [_vi("i", I64, []), _vi("cond_in", B, []), _vi("h_in", F, [1, 16]),
         _vi("acc_in", F, [])],
        [_vi("cond_out", B, []), _vi("h_out", F, [1, 16]), _vi("acc_out", F, [])])
    return _model(
        [helper.make_node("Loop", ["m", "c0", "h0", "a0"], ["h", "acc"], body=body)],
        [_vi("m", I64, []), _vi("c0", B, []), _vi("h0", F, [1, 16]), _vi("x", F, [1, 16]),
         _vi("thr", F, [])],
        [_vi("h", F, None), _vi("acc", F, None)],
        {"W": randn(16, 16) * 0.3, "a0": np.array(0, np.float32)})


def test_a_loop_with_a_run_time_trip_count_and_condition_runs_on_the_device():
    m = _while_loop()
    compiled = compile_model(m)
    _one_device_program(compiled)
    assert _placed(compiled, "Loop").engine == "device"
    loaded = load(compiled)
    sums = []  # acc: the sum of the iteration numbers run
    for trips, c0, thr in [(0, True, 1e9), (1, True, 1e9), (7, True, 1e9), (7, False, 1e9),
                           (50, True, 10.0), (-3, True, 1e9)]:
        feeds = {"m": np.array(trips, np.int64), "c0": np.array(c0), "h0": randn(1, 16),
                 "x": randn(1, 16), "thr": np.array(thr, np.float32)}
        sums.append(float(_check(m, compiled, feeds, loaded=loaded)["acc"]))
    # 7 iterations, none (the first condition false), and 5 (0+1+2+3+4 reaches 10)
    assert sums == [0.0, 0.0, 21.0, 0.0, 10.0, 0.0], sums


def _fixed_loop(trips: int, scan: bool = True):
    """acc = acc * w + x for `trips` (a constant) iterations; the running tanh(acc) and the
    iteration number as scan outputs; an enclosing value read each iteration."""
    body = helper.make_graph(
        [helper.make_node("Mul", ["acc_in", "w"], ["scaled"]),
         helper.make_node("Add", ["scaled", "x"], ["acc_out"]),
         helper.make_node("Identity", ["cond_in"], ["cond_out"]),
         helper.make_node("Tanh", ["acc_out"], ["t"]),
         helper.make_node("Identity", ["i"], ["it"])], "body",
        [_vi("i", I64, []), _vi("cond_in", B, []), _vi("acc_in", F, [6])],
        [_vi("cond_out", B, []), _vi("acc_out", F, [6])]
        + ([_vi("t", F, [6]), _vi("it", I64, [])] if scan else []),
        [numpy_helper.from_array(np.full(6, 0.5, np.float32), "w")])
    outs = ["acc"] + (["ts", "its"] if scan else [])
    return _model(
        [helper.make_node("Relu", ["x0"], ["x"]),
         helper.make_node("Loop", ["m", "", "a0"], outs, body=body)],
        [_vi("a0", F, [6]), _vi("x0", F, [6])], [_vi(o, F if o != "its" else I64, None)
                                                 for o in outs],
        {"m": np.array(trips, np.int64)})


@pytest.mark.parametrize("trips", [0, 1, 5])
def test_a_loop_of_a_constant_trip_count_writes_its_scan_outputs_on_the_device(trips):
    m = _fixed_loop(trips)
    compiled = compile_model(m)
    _one_device_program(compiled)
    got = _check(m, compiled, {"a0": randn(6), "x0": randn(6)})
    assert got["ts"].shape == (trips, 6)
    np.testing.assert_array_equal(got["its"], np.arange(trips))


def test_a_loop_of_1000_iterations_runs_on_the_device_with_no_host_step():
    m = _fixed_loop(1000, scan=False)
    compiled = compile_model(m)
    _one_device_program(compiled)
    loaded = load(compiled)
    _check(m, compiled, {"a0": randn(6) * 0.1, "x0": randn(6) * 0.1}, loaded=loaded)
    (native,) = loaded.natives.values()
    profile = {t["name"]: t["calls"] for t in native.profile()}
    # the body's kernels ran 1000 times in the one launch
    body = [calls for name, calls in profile.items() if name.startswith("loop_1/body/")]
    assert body and set(body) == {1000}, profile


def test_a_loop_whose_scan_length_is_known_only_at_run_time_falls_back_to_the_host():
    m = _fixed_loop(3)
    m.graph.initializer.pop()  # m becomes an input: the scan outputs' length is the run's
    m.graph.input.append(_vi("m", I64, []))
    compiled = compile_model(m)
    loop = _placed(compiled, "Loop")
    assert loop.engine == "host"
    assert any("has no static shape" in r for r in loop.rejections), loop.rejections
    _check(m, compiled, {"a0": randn(6), "x0": randn(6), "m": np.array(4, np.int64)})


def test_a_body_that_needs_the_host_keeps_the_whole_loop_there():
    body = helper.make_graph(
        [helper.make_node("Add", ["acc_in", "x"], ["acc_out"]),
         helper.make_node("Identity", ["cond_in"], ["cond_out"]),
         # three operands: no matrix product (prepare/einsum.py), the host's numpy einsum
         helper.make_node("Einsum", ["acc_out", "acc_out", "x"], ["e"], equation="i,i,i->")],
        "body", [_vi("i", I64, []), _vi("cond_in", B, []), _vi("acc_in", F, [6])],
        [_vi("cond_out", B, []), _vi("acc_out", F, [6]), _vi("e", F, [])])
    m = _model([helper.make_node("Loop", ["m", "", "a0"], ["acc", "es"], body=body)],
               [_vi("a0", F, [6]), _vi("x", F, [6])],
               [_vi("acc", F, None), _vi("es", F, None)], {"m": np.array(3, np.int64)})
    compiled = compile_model(m)
    loop = _placed(compiled, "Loop")
    assert loop.engine == "host"
    assert any("needs the host for Einsum" in r for r in loop.rejections), loop.rejections
    (record,) = compiled.report.bodies
    assert "on the device" not in record.detail  # the host step's body, as before
    _check(m, compiled, {"a0": randn(6), "x": randn(6)})


def test_state_exchanged_between_iterations_keeps_the_loop_on_the_host():
    """(a, b) -> (b, a + b): the body hands its state back permuted, which copies made one
    after the other would get wrong."""
    body = helper.make_graph(
        [helper.make_node("Add", ["a_in", "b_in"], ["s"]),
         helper.make_node("Identity", ["cond_in"], ["cond_out"]),
         helper.make_node("Identity", ["b_in"], ["a_out"])], "body",
        [_vi("i", I64, []), _vi("cond_in", B, []), _vi("a_in", F, [3]), _vi("b_in", F, [3])],
        [_vi("cond_out", B, []), _vi("a_out", F, [3]), _vi("s", F, [3])])
    m = _model([helper.make_node("Loop", ["m", "", "a0", "b0"], ["a", "b"], body=body)],
               [_vi("a0", F, [3]), _vi("b0", F, [3])], [_vi("a", F, None), _vi("b", F, None)],
               {"m": np.array(6, np.int64)})
    compiled = compile_model(m)
    loop = _placed(compiled, "Loop")
    assert loop.engine == "host" and any("exchanged" in r for r in loop.rejections)
    _check(m, compiled, {"a0": randn(3), "b0": randn(3)})


# ---- Scan ----------------------------------------------------------------------------------
@pytest.mark.parametrize("in_dir,out_dir,in_axis,out_axis", [
    (0, 0, 0, 0), (1, 0, 1, 0), (0, 1, 0, 1), (1, 1, 1, -1)])
def test_a_scan_runs_on_the_device_in_each_direction(in_dir, out_dir, in_axis, out_axis):
    body = helper.make_graph(
        [helper.make_node("Add", ["s_in", "x_t"], ["sum"]),
         helper.make_node("Tanh", ["sum"], ["s_out"]),
         helper.make_node("Mul", ["s_out", "u_t"], ["y_t"])], "body",
        [_vi("s_in", F, [3]), _vi("x_t", F, [3]), _vi("u_t", F, [3])],
        [_vi("s_out", F, [3]), _vi("y_t", F, [3])])
    shape = [5, 3] if in_axis == 0 else [3, 5]
    m = _model(
        [helper.make_node("Scan", ["s0", "xs", "us"], ["s", "ys"], body=body,
                          num_scan_inputs=2, scan_input_axes=[in_axis, 0],
                          scan_input_directions=[in_dir, 0], scan_output_axes=[out_axis],
                          scan_output_directions=[out_dir])],
        [_vi("s0", F, [3]), _vi("xs", F, shape), _vi("us", F, [5, 3])],
        [_vi("s", F, None), _vi("ys", F, None)])
    compiled = compile_model(m)
    _one_device_program(compiled)
    assert _placed(compiled, "Scan").engine == "device"
    _check(m, compiled, {"s0": randn(3), "xs": randn(*shape), "us": randn(5, 3)})


# ---- nesting -------------------------------------------------------------------------------
def test_an_if_and_a_loop_nested_in_a_loop_run_on_the_device():
    """Outer Loop (4 iterations): an If on the iteration number (i < 2) picks Add or Sub,
    then an inner Loop (3 iterations) doubles; the inner goto's bound is 4 x 3."""
    then = helper.make_graph([helper.make_node("Add", ["v_in", "x"], ["t"])], "then", [],
                             [_vi("t", F, [4])])
    other = helper.make_graph([helper.make_node("Sub", ["v_in", "x"], ["e"])], "else", [],
                              [_vi("e", F, [4])])
    inner = helper.make_graph(
        [helper.make_node("Add", ["w_in", "w_in"], ["w_out"]),
         helper.make_node("Identity", ["ci"], ["co"])], "inner",
        [_vi("j", I64, []), _vi("ci", B, []), _vi("w_in", F, [4])],
        [_vi("co", B, []), _vi("w_out", F, [4])])
    outer = helper.make_graph(
        [helper.make_node("Less", ["i", "two"], ["early"]),
         helper.make_node("If", ["early"], ["v_if"], then_branch=then, else_branch=other),
         helper.make_node("Loop", ["three", "", "v_if"], ["v_out"], body=inner),
         helper.make_node("Identity", ["cond_in"], ["cond_out"])], "outer",
        [_vi("i", I64, []), _vi("cond_in", B, []), _vi("v_in", F, [4])],
        [_vi("cond_out", B, []), _vi("v_out", F, [4])],
        [numpy_helper.from_array(np.array(2, np.int64), "two"),
         numpy_helper.from_array(np.array(3, np.int64), "three")])
    m = _model([helper.make_node("Loop", ["m", "", "v0"], ["v"], body=outer)],
               [_vi("v0", F, [4]), _vi("x", F, [4])], [_vi("v", F, None)],
               {"m": np.array(4, np.int64)})
    compiled = compile_model(m)
    _one_device_program(compiled)
    tasks = compiled.programs[0].tasks
    limits = sorted(t.attrs["limit"] for t in tasks if t.kind == "goto" and "limit" in t.attrs)
    assert limits == [4, 12], limits
    _check(m, compiled, {"v0": randn(4) * 0.01, "x": randn(4) * 0.01})


# ---- the program around it ------------------------------------------------------------------
def test_control_flow_on_several_streams_sink_mode_instances_and_an_offline_file():
    m = _if_in_region()
    compiled = compile_model(m, max_streams=2)
    _one_device_program(compiled)
    again = offline.load(offline.save(compiled))
    loaded = load(again, instances=2)
    xs = [np.abs(randn(1, 3, 32, 32)) * s for s in (1.0, -1.0, 1.0)]
    wants = [onnxruntime(m, {"x": x})[0] for x in xs]
    outs = loaded.execute([{"x": x} for x in xs], iterations=3, return_all=True)
    for got, want in zip(outs, wants):
        np.testing.assert_allclose(got["z"], want, rtol=1e-4, atol=1e-4 * np.abs(want).max())


def test_the_bound_of_a_run_time_trip_count_is_stated():
    assert MAX_DEVICE_TRIPS == 1 << 31
    compiled = compile_model(_while_loop())
    (goto,) = [t for t in compiled.programs[0].tasks if t.kind == "goto"]
    assert goto.attrs["limit"] == MAX_DEVICE_TRIPS


def test_control_flow_runs_on_the_ref_backend_whose_memory_is_its_own():
    """The ref device binds nothing in place and reads its predicates and counters through
    copy_to_host: the seam a device with memory of its own (CUDA, Ascend) would use. The
    If's branches write 300K elements each (too many to run both, prepare/branches.py)."""
    then = helper.make_graph([helper.make_node("Relu", ["big"], ["t"])], "then", [],
                             [_vi("t", F, [600, 512])])
    other = helper.make_graph([helper.make_node("Neg", ["big"], ["e"])], "else", [],
                              [_vi("e", F, [600, 512])])
    body = helper.make_graph(
        [helper.make_node("MatMul", ["h_in", "W"], ["hw"]),
         helper.make_node("Add", ["hw", "x"], ["pre"]),
         helper.make_node("Tanh", ["pre"], ["h_out"]),
         helper.make_node("Relu", ["h_out"], ["h_scan"]),
         helper.make_node("Identity", ["cond_in"], ["cond_out"])], "body",
        [_vi("i", I64, []), _vi("cond_in", B, []), _vi("h_in", F, [1, 8])],
        [_vi("cond_out", B, []), _vi("h_out", F, [1, 8]), _vi("h_scan", F, [1, 8])])
    m = _model([helper.make_node("Loop", ["m", "", "h0"], ["h", "hs"], body=body),
                helper.make_node("Tanh", ["v"], ["big"]),
                helper.make_node("If", ["c"], ["y"], then_branch=then, else_branch=other)],
               [_vi("h0", F, [1, 8]), _vi("x", F, [1, 8]), _vi("v", F, [600, 512]),
                _vi("c", B, [])],
               [_vi("y", F, None), _vi("h", F, None), _vi("hs", F, None)],
               {"W": randn(8, 8) * 0.3, "m": np.array(5, np.int64)})
    compiled = compile_model(m, target="ref")
    assert compiled.backend == "ref"
    _one_device_program(compiled)
    for c in (True, False):
        _check(m, compiled, {"h0": randn(1, 8), "x": randn(1, 8), "v": randn(600, 512),
                             "c": np.array(c)})
