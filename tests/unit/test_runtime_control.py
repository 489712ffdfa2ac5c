"""The runtime's control-flow tasks (runtime_ext/src/model_control.cc) on hand-built specs:
labels, switches, gotos, counters and dynamic slices run by a stream's program counter,
and every malformed one refused at load (or, for a slice index, at run time) naming the
task."""

from __future__ import annotations

import numpy as np
import pytest

from graphengine import _runtime as rt
from tests.unit.test_runtime import SpecBuilder


def _task(b: SpecBuilder, kind: str, name: str, inputs=(), outputs=(), label=None,
          stream: int = 0, **attrs) -> None:
    t = {"kind": kind, "name": name, "stream": stream, "inputs": list(inputs),
         "outputs": list(outputs), "attrs": attrs}
    if label is not None:
        t["label"] = label
    b.tasks.append(t)


def _doubling_loop(limit: int = 100, streams: int = 1) -> SpecBuilder:
    """acc = x; for i in range(n): acc = acc * 2 (n an input), with the slices of every
    iteration's acc written into ys[8, 4] at slice i."""
    b = SpecBuilder("loop", num_streams=streams)
    x = b.input("x", "float32", (4,))
    n = b.input("n", "int64", ())
    two = b.const("two", np.array(2.0, np.float32))
    zero = b.const("zero", np.array(0, np.int64))
    i = b.tensor("i", "int64", ())
    acc = b.tensor("acc", "float32", (4,))
    tmp = b.tensor("tmp", "float32", (4,))
    ys = b.tensor("ys", "float32", (8, 4))
    _task(b, "copy", "init_i", [zero], [i])
    _task(b, "copy", "init_acc", [x], [acc])
    _task(b, "label", "top", label=0)
    _task(b, "switch", "exit", [i, n], label=1, test="ge")
    b.kernel("Mul", [acc, two], [tmp], name="double")
    _task(b, "slice_copy", "keep", [tmp, i], [ys], mode="write", axis=0)
    _task(b, "copy", "carry", [tmp], [acc])
    _task(b, "increment", "next", [i], [i])
    _task(b, "goto", "back", label=0, limit=limit)
    _task(b, "label", "end", label=1)
    b.outputs = [acc, ys]
    return b


def _run(m, x, n):
    return m.execute([x, np.array(n, np.int64)])


def test_a_loop_of_labels_and_jumps_runs_on_one_stream():
    m = _doubling_loop().load()
    x = np.arange(4, dtype=np.float32)
    for n in (0, 1, 5, 8):
        acc, ys = _run(m, x, n)
        np.testing.assert_array_equal(acc, x * 2.0 ** n)
        np.testing.assert_array_equal(ys[:n], [x * 2.0 ** (k + 1) for k in range(n)] or
                                      np.zeros((0, 4), np.float32))
    calls = {t["name"]: t["calls"] for t in m.profile()}
    assert calls["double"] == 0 + 1 + 5 + 8


def test_a_slice_index_past_the_end_fails_the_run_naming_the_task_and_the_model_stays_usable():
    m = _doubling_loop().load()
    x = np.ones(4, np.float32)
    with pytest.raises(rt.InvalidArgument, match=r"node 'keep' \(slice_copy\): slice 8 of "
                                                 r"'ys' out of range \[0, 8\)"):
        _run(m, x, 9)
    np.testing.assert_array_equal(_run(m, x, 2)[0], x * 4)


def test_a_backward_goto_jumps_at_most_its_limit_each_iteration_of_a_launch():
    m = _doubling_loop(limit=3).load()
    x = np.ones(4, np.float32)
    np.testing.assert_array_equal(_run(m, x, 3)[0], x * 8)
    with pytest.raises(rt.InvalidArgument, match=r"node 'back' \(goto\): the loop ran past "
                                                 r"its bound of 3 iterations"):
        _run(m, x, 4)
    # sink mode: the count starts again with every iteration of the launch
    outs = m.execute([x, np.array(3, np.int64)], iterations=4, return_all=True)
    assert len(outs) == 4 and all(np.array_equal(o[0], x * 8) for o in outs)


def test_an_if_of_a_bool_predicate_takes_either_branch():
    b = SpecBuilder("if")
    x = b.input("x", "float32", (4,))
    c = b.input("c", "bool", ())
    y = b.tensor("y", "float32", (4,))
    _task(b, "switch", "to_else", [c], label=7, test="false")
    b.kernel("Relu", [x], [y], name="then")
    _task(b, "goto", "to_end", label=8)  # forward: no limit needed
    _task(b, "label", "else", label=7)
    b.kernel("Neg", [x], [y], name="else_kernel")
    _task(b, "label", "end", label=8)
    b.outputs = [y]
    m = b.load()
    x_ = np.array([-1, 2, -3, 4], np.float32)
    np.testing.assert_array_equal(m.execute([x_, np.array(True)])[0], np.maximum(x_, 0))
    np.testing.assert_array_equal(m.execute([x_, np.array(False)])[0], -x_)


def test_a_scan_reads_slices_of_any_axis_reversed():
    b = SpecBuilder("scan")
    xs = b.input("xs", "float32", (2, 3, 4))
    zero = b.const("zero", np.array(0, np.int64))
    three = b.const("three", np.array(3, np.int64))
    t = b.tensor("t", "int64", ())
    x_t = b.tensor("x_t", "float32", (2, 4))
    ys = b.tensor("ys", "float32", (2, 3, 4))
    _task(b, "copy", "init", [zero], [t])
    _task(b, "label", "top", label=0)
    _task(b, "switch", "exit", [t, three], label=1, test="ge")
    _task(b, "slice_copy", "read", [xs, t], [x_t], mode="read", axis=1, reverse=1)
    _task(b, "slice_copy", "write", [x_t, t], [ys], mode="write", axis=1)
    _task(b, "increment", "next", [t], [t])
    _task(b, "goto", "back", label=0, limit=3)
    _task(b, "label", "end", label=1)
    b.outputs = [ys]
    x = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    np.testing.assert_array_equal(b.load().execute([x])[0], x[:, ::-1])


def _malformed(edit) -> SpecBuilder:
    b = _doubling_loop()
    edit(b)
    return b


def _find(b: SpecBuilder, name: str) -> dict:
    return next(t for t in b.tasks if t["name"] == name)


@pytest.mark.parametrize("edit,message", [
    (lambda b: _find(b, "back").update(label=5),
     r"node 'back' \(goto\): jumps to label 5, which no task defines"),
    (lambda b: _find(b, "end").update(label=0),
     r"node 'end' \(label\): label 0 is defined twice"),
    (lambda b: _find(b, "back")["attrs"].clear(),
     r"node 'back' \(goto\): a backward goto needs attr 'limit'"),
    (lambda b: _find(b, "back")["attrs"].update(limit=0),
     r"node 'back' \(goto\): limit 0 out of range"),
    (lambda b: _find(b, "exit").update(label=0),
     r"node 'exit' \(switch\): a switch jumps forward; label 0 is behind it"),
    (lambda b: _find(b, "exit").update(inputs=[_find(b, "double")["outputs"][0],
                                               b.inputs[1]]),
     r"node 'exit' \(switch\): counter 'tmp' must be one int64 element, got float32\[4\]"),
    (lambda b: _find(b, "exit")["attrs"].update(test="maybe"),
     r"node 'exit' \(switch\): switch attr 'test' must be"),
    (lambda b: _find(b, "exit").update(inputs=[b.inputs[0]]) or
     _find(b, "exit")["attrs"].update(test="true"),
     r"node 'exit' \(switch\): predicate 'x' must be one bool element, got float32\[4\]"),
    (lambda b: _find(b, "exit").pop("label"),
     r"tasks\[3\]: missing key 'label'"),
    (lambda b: _find(b, "next").update(outputs=[b.inputs[0]]),
     r"node 'next' \(increment\): increment reads and writes one tensor"),
    (lambda b: _find(b, "keep")["attrs"].update(axis=2),
     r"node 'keep' \(slice_copy\): slice_copy axis 2 out of range for 'ys' of rank 2"),
    (lambda b: _find(b, "keep")["attrs"].update(axis=1),
     r"node 'keep' \(slice_copy\): slice_copy: 'tmp' \[4\] is not a slice of 'ys' \[8,4\] "
     r"along axis 1"),
    (lambda b: _find(b, "keep")["attrs"].update(mode="sideways"),
     r"node 'keep' \(slice_copy\): slice_copy attr 'mode' must be"),
    (lambda b: _find(b, "keep").update(inputs=[_find(b, "keep")["inputs"][0], b.inputs[0]]),
     r"node 'keep' \(slice_copy\): slice index 'x' must be one int64 element"),
    (lambda b: _find(b, "keep").update(outputs=[b.tensors.index(
        next(t for t in b.tensors if t["name"] == "two"))]),
     r"node 'keep' \(slice_copy\): output 'two' must be in the arena"),
])
def test_malformed_control_tasks_are_refused_at_load(edit, message):
    with pytest.raises(rt.InvalidArgument, match=message):
        _malformed(edit).load()


def test_a_predicate_of_two_elements_is_refused():
    b = SpecBuilder("if")
    c = b.input("c", "bool", (2,))
    _task(b, "switch", "branch", [c], label=0, test="true")
    _task(b, "label", "there", label=0)
    with pytest.raises(rt.InvalidArgument, match=r"node 'branch' \(switch\): predicate 'c' "
                                                 r"must be one bool element, got bool\[2\]"):
        b.load()


def test_a_jump_across_streams_or_over_an_event_is_refused():
    b = _doubling_loop(streams=2)
    _find(b, "end")["stream"] = 1
    with pytest.raises(rt.InvalidArgument, match=r"node 'exit' \(switch\): jumps to label 1 "
                                                 r"on stream 1 from stream 0"):
        b.load()
    b = _doubling_loop()
    b.num_events = 1
    at = b.tasks.index(_find(b, "double"))
    b.tasks.insert(at, {"kind": "record", "name": "rec", "stream": 0, "event": 0})
    with pytest.raises(rt.InvalidArgument, match=r"a record or wait lies between it and "
                                                 r"label"):
        b.load()
