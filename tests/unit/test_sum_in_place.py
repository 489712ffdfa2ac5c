"""A Conv / MatMul with a fused residual writes into the residual's bytes when it is their last
reader (engine/codegen/tasks.py, _sum_in_place): the runtime then skips copying the residual
into the output. Checked on the plan (the two slots share an offset, or not where the residual
is still needed) and on the results against ONNX Runtime, on one stream and on several (where
another branch reading the residual must finish before it is overwritten)."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from graphengine.engine.importers import load_model
from graphengine.engine.model import DeviceProgram
from graphengine.engine.pipeline import CompileOptions, compile_graph
from graphengine.engine.runtime import LoadedModel

RNG = np.random.default_rng(11)


def _model(nodes, x_shape, weights, outputs=("y",)):
    inits = [numpy_helper.from_array(w.astype(np.float32), name) for name, w in weights.items()]
    graph = helper.make_graph(
        nodes, "sums", [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x_shape))],
        [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in outputs], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


_POOL = {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]}  # a side reader of the same shape


def _conv_blocks(blocks: int, side_reader: bool, side_first: bool = False):
    """r0 = Relu(Conv(x)); r_i = Relu(Conv(Relu(Conv(r_{i-1}))) + r_{i-1}): ResNet's basic
    blocks. `side_reader`: each residual is also read by a pooling branch summed at the end,
    listed after the block (`side_first`: before it, so the block's sum is the last reader in
    program order while the pool may run on another stream). The side op is no elementwise
    one: those would join the sums at the end in one elementwise region."""
    c = 16
    w = {f"w{i}": RNG.standard_normal((c, c, 3, 3)) * 0.1 for i in range(2 * blocks + 1)}
    nodes = [helper.make_node("Conv", ["x", "w0"], ["c0"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c0"], ["r0"])]
    sides = []
    for i in range(blocks):
        a, b = f"w{2 * i + 1}", f"w{2 * i + 2}"
        if side_reader and side_first:
            nodes.append(helper.make_node("AveragePool", [f"r{i}"], [f"g{i}"], **_POOL))
            sides.append(f"g{i}")
        nodes += [helper.make_node("Conv", [f"r{i}", a], [f"p{i}"], pads=[1, 1, 1, 1]),
                  helper.make_node("Relu", [f"p{i}"], [f"q{i}"]),
                  helper.make_node("Conv", [f"q{i}", b], [f"s{i}"], pads=[1, 1, 1, 1]),
                  helper.make_node("Add", [f"s{i}", f"r{i}"], [f"t{i}"]),
                  helper.make_node("Relu", [f"t{i}"], [f"r{i + 1}"])]
        if side_reader and not side_first:
            nodes.append(helper.make_node("AveragePool", [f"r{i}"], [f"g{i}"], **_POOL))
            sides.append(f"g{i}")
    last = f"r{blocks}"
    for j, g in enumerate(sides):
        nodes.append(helper.make_node("Add", [last, g], [f"acc{j}"]))
        last = f"acc{j}"
    nodes.append(helper.make_node("Identity", [last], ["y"]))
    return _model(nodes, (2, c, 12, 12), w)


def _program(model, streams: int) -> DeviceProgram:
    compiled = compile_graph(load_model(model), CompileOptions(max_streams=streams))
    (prog,) = [p for p in compiled.programs if isinstance(p, DeviceProgram)]
    return prog


def _sum_tasks(prog: DeviceProgram):
    """(task, residual slot, output slot) of every kernel task with a fused residual."""
    return [(t, t.inputs[-1], t.outputs[0]) for t in prog.tasks
            if t.kind == "kernel" and t.attrs.get("sum")]


def _check(model, streams: int):
    x = RNG.standard_normal((2, 16, 12, 12)).astype(np.float32)
    got = LoadedModel(compile_graph(load_model(model),
                                    CompileOptions(max_streams=streams))).execute({"x": x})
    want = ort.InferenceSession(model.SerializeToString(),
                                providers=["CPUExecutionProvider"]).run(None, {"x": x})
    np.testing.assert_allclose(got["y"], want[0], rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("streams", [1, 3])
def test_a_residual_read_last_by_its_sum_is_overwritten_in_place(streams):
    model = _conv_blocks(3, side_reader=False)
    prog = _program(model, streams)
    sums = _sum_tasks(prog)
    assert len(sums) == 3
    for task, r, y in sums:
        assert prog.tensors[r].offset == prog.tensors[y].offset, task.name
    _check(model, streams)


@pytest.mark.parametrize("streams", [1, 3])
def test_a_residual_read_after_its_sum_keeps_its_bytes(streams):
    model = _conv_blocks(3, side_reader=True)
    prog = _program(model, streams)
    sums = _sum_tasks(prog)
    assert len(sums) == 3
    order = {id(t): i for i, t in enumerate(prog.tasks)}
    readers = {}  # slot -> positions of the kernel tasks that read it
    for i, t in enumerate(prog.tasks):
        if t.kind == "kernel":
            for s in t.inputs:
                readers.setdefault(s, []).append(i)
    for task, r, y in sums:
        later = [i for i in readers[r] if i > order[id(task)]]
        # a reader after the sum in program order: the bytes are kept
        assert not later or prog.tensors[r].offset != prog.tensors[y].offset, task.name
    _check(model, streams)


def test_a_residual_that_is_also_the_products_input_is_not_overwritten():
    """MatMul(x1, W) + x1: the product reads x1 while it writes; no sharing."""
    w = {"w": RNG.standard_normal((32, 32)) * 0.1}
    nodes = [helper.make_node("Tanh", ["x"], ["x1"]),
             helper.make_node("MatMul", ["x1", "w"], ["m"]),
             helper.make_node("Add", ["m", "x1"], ["y"])]
    model = _model(nodes, (24, 32), w)
    prog = _program(model, 1)
    (task, r, y), = _sum_tasks(prog)
    assert prog.tensors[r].offset != prog.tensors[y].offset
    x = RNG.standard_normal((24, 32)).astype(np.float32)
    got = LoadedModel(compile_graph(load_model(model))).execute({"x": x})["y"]
    x1 = np.tanh(x)
    np.testing.assert_allclose(got, x1 @ w["w"].astype(np.float32) + x1, rtol=1e-4, atol=1e-5)


def test_transformer_residuals_are_summed_in_place():
    """x + MatMul(Gelu(MatMul(LN(x)))) twice: the second product's residual is the first
    block's output, read last by that product."""
    d = 32
    w = {"w1": RNG.standard_normal((d, 4 * d)) * 0.1, "w2": RNG.standard_normal((4 * d, d)) * 0.1,
         "w3": RNG.standard_normal((d, 4 * d)) * 0.1, "w4": RNG.standard_normal((4 * d, d)) * 0.1,
         "w0": RNG.standard_normal((d, d)) * 0.1}
    nodes = [helper.make_node("MatMul", ["x", "w0"], ["h0"])]
    for i, (a, b) in enumerate((("w1", "w2"), ("w3", "w4"))):
        nodes += [helper.make_node("MatMul", [f"h{i}", a], [f"u{i}"]),
                  helper.make_node("Relu", [f"u{i}"], [f"v{i}"]),
                  helper.make_node("MatMul", [f"v{i}", b], [f"z{i}"]),
                  helper.make_node("Add", [f"h{i}", f"z{i}"], [f"h{i + 1}"])]
    nodes.append(helper.make_node("Identity", ["h2"], ["y"]))
    model = _model(nodes, (40, d), w)
    prog = _program(model, 1)
    sums = _sum_tasks(prog)
    assert len(sums) == 2
    for task, r, y in sums:
        assert prog.tensors[r].offset == prog.tensors[y].offset, task.name
    x = RNG.standard_normal((40, d)).astype(np.float32)
    got = LoadedModel(compile_graph(load_model(model))).execute({"x": x})["y"]
    want = ort.InferenceSession(model.SerializeToString(),
                                providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_a_reader_on_another_stream_finishes_before_the_residual_is_overwritten():
    """The pool reading each residual comes first; on three streams it may run beside the
    block's convolutions, so a sum that overwrites the residual waits for it (an event
    recorded after it, waited for before the sum). A sum that is not the residual's last
    reader in program order keeps its own bytes."""
    model = _conv_blocks(3, side_reader=True, side_first=True)
    prog = _program(model, 3)
    sums = _sum_tasks(prog)
    assert len(sums) == 3 and prog.num_streams > 1
    crossed = 0
    for task, r, y in sums:
        at = prog.tasks.index(task)
        readers = [i for i, t in enumerate(prog.tasks) if t.kind == "kernel" and r in t.inputs]
        if max(readers) > at:
            assert prog.tensors[r].offset != prog.tensors[y].offset, task.name
            continue
        assert prog.tensors[r].offset == prog.tensors[y].offset, task.name
        for i in readers:
            other = prog.tasks[i]
            if i == at or other.stream == task.stream:
                continue
            recorded = {t.event for t in prog.tasks[i + 1:at]
                        if t.kind == "record" and t.stream == other.stream}
            waited = {t.event for t in prog.tasks[i + 1:at]
                      if t.kind == "wait" and t.stream == task.stream}
            assert recorded & waited, (other.name, task.name)
            crossed += 1
    assert crossed  # the case this test is for: a reader on another stream
    _check(model, 3)
