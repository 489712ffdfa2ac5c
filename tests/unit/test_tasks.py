"""Stage 4, task generation (engine/codegen/tasks.py): the invariants every device program
keeps, checked on a graph with independent branches compiled for one and for two streams."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from graphengine.engine.importers import load_model
from graphengine.engine.model import DeviceProgram
from graphengine.engine.pipeline import CompileOptions, compile_graph
from graphengine.engine.runtime import LoadedModel


def _branches():
    """Two MatMul branches of one input, joined by an Add."""
    rng = np.random.default_rng(0)
    w = [numpy_helper.from_array(rng.standard_normal((64, 64)).astype(np.float32), f"w{i}")
         for i in range(4)]
    nodes = [helper.make_node("MatMul", ["x", "w0"], ["a0"]),
             helper.make_node("Tanh", ["a0"], ["a1"]),
             helper.make_node("MatMul", ["a1", "w1"], ["a2"]),
             helper.make_node("MatMul", ["x", "w2"], ["b0"]),
             helper.make_node("Sigmoid", ["b0"], ["b1"]),
             helper.make_node("MatMul", ["b1", "w3"], ["b2"]),
             helper.make_node("Add", ["a2", "b2"], ["y"])]
    graph = helper.make_graph(nodes, "branches",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [8, 64])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], w)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


@pytest.mark.parametrize("streams", [1, 2])
def test_device_program_invariants(streams: int) -> None:
    model = _branches()
    compiled = compile_graph(load_model(model), CompileOptions(max_streams=streams))
    (prog,) = [p for p in compiled.programs if isinstance(p, DeviceProgram)]
    assert prog.num_streams == streams
    slots = prog.tensors
    written: set[int] = set(prog.inputs) | {i for i, t in enumerate(slots)
                                            if t.region == "weight"}
    recorded: dict[int, int] = {}  # event -> stream that records it
    waited: dict[int, set[int]] = {}
    for task in prog.tasks:
        assert 0 <= task.stream < prog.num_streams, task
        if task.kind == "record":
            assert 0 <= task.event < prog.num_events and task.event not in recorded
            recorded[task.event] = task.stream
        elif task.kind == "wait":
            # The record is issued earlier in program order, on another stream.
            assert task.event in recorded and recorded[task.event] != task.stream, task
            waited.setdefault(task.event, set()).add(task.stream)
        else:
            # Every slot a kernel reads was written before it (in program order; the events
            # order it across streams) and lies inside its region.
            for i in task.inputs:
                assert i in written, (task.name, slots[i].name)
            written.update(task.outputs)
        for i in (*task.inputs, *task.outputs):
            t = slots[i]
            size = int(np.prod(t.shape)) * np.dtype(t.dtype).itemsize
            limit = prog.arena_bytes if t.region == "arena" else prog.weight_bytes
            assert 0 <= t.offset and t.offset + size <= limit, t
    assert set(prog.outputs) <= written
    assert set(recorded) == set(waited)  # no event recorded for nobody
    if streams == 2:
        assert len({t.stream for t in prog.tasks if t.kind == "kernel"}) == 2
        assert prog.num_events >= 1
    x = np.random.default_rng(1).standard_normal((8, 64)).astype(np.float32)
    got = LoadedModel(compiled).execute({"x": x})["y"]
    w = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    want = np.tanh(x @ w["w0"]) @ w["w1"] + (1 / (1 + np.exp(-(x @ w["w2"])))) @ w["w3"]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("max_segments", [1, 2, 3, 8])
def test_every_weight_slot_reads_its_bytes_from_the_segments(max_segments: int) -> None:
    """Segment layout (tasks._Layout.segments): large aligned arrays in place, the rest packed
    (64 KiB arrays apart from the small ones when there is room); every slot's offset into the
    concatenated segments holds its array's bytes, a small array starting at a large in-place
    array's address (a view of its head) and the same array under two slots included."""
    from graphengine.engine.codegen.memory import ALIGN, align, aligned_empty
    from graphengine.engine.codegen.tasks import _Layout
    from graphengine.engine.ir import Value, ValueKind

    rng = np.random.default_rng(3)
    arrays = []
    for shape in ((1 << 19,), (3 << 18,), (300, 100), (70,), (5, 7)):
        a = aligned_empty(shape, np.float32)
        a[...] = rng.standard_normal(shape)
        arrays.append(a)
    arrays += [arrays[0][:10], arrays[1], rng.standard_normal(20000).astype(np.float32)]
    layout = _Layout(max_segments=max_segments)
    slots = [layout.weight(Value(f"w{i}", ValueKind.CONSTANT, const=a))
             for i, a in enumerate(arrays)]
    segments = layout.segments()
    assert len(segments) <= max(max_segments, 1)
    region = np.concatenate([np.pad(s, (0, align(s.nbytes) - s.nbytes)) for s in segments])
    for slot, a in zip(slots, arrays):
        at = layout.slots[slot].offset
        assert at >= 0 and at % ALIGN == 0
        np.testing.assert_array_equal(region[at:at + a.nbytes], a.view(np.uint8).reshape(-1))
