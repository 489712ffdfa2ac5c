"""The cyclic garbage collector is paused while a model is imported, compiled and loaded
(engine/gc_pause.py), counted across nested and concurrent compiles."""

from __future__ import annotations

import gc
import threading

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from graphengine.engine import gc_pause
from graphengine.engine.importers import load_model
from graphengine.engine.pipeline import analyze, compile_graph
from graphengine.engine.runtime import LoadedModel


def _conv_net_bytes(blocks: int = 6) -> bytes:
    """A small conv net in ONNX: enough nodes and values for many allocations."""
    rng = np.random.default_rng(0)
    nodes, inits, prev = [], [], "x"
    for i in range(blocks):
        w = numpy_helper.from_array(rng.standard_normal((4, 4, 3, 3)).astype(np.float32),
                                    f"w{i}")
        inits.append(w)
        nodes.append(helper.make_node("Conv", [prev, f"w{i}"], [f"c{i}"], pads=[1, 1, 1, 1],
                                      name=f"conv{i}"))
        nodes.append(helper.make_node("Relu", [f"c{i}"], [f"r{i}"], name=f"relu{i}"))
        prev = f"r{i}"
    graph = helper.make_graph(
        nodes, "convs", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["b", 4, 8, 8])],
        [helper.make_tensor_value_info(prev, TensorProto.FLOAT, None)], initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    return model.SerializeToString()


class Collections:
    """Automatic collections started inside `during(fn, ...)` calls, with the collector set
    to run on every allocation (so any allocation-heavy code left unpaused would be seen)."""

    def __init__(self) -> None:
        self.started: list[str] = []
        self.inside = ""

    def seen(self, phase, info) -> None:
        if phase == "start" and self.inside:
            self.started.append(self.inside)

    def during(self, fn, *args, **kwargs):
        self.inside = fn.__qualname__
        try:
            return fn(*args, **kwargs)
        finally:
            self.inside = ""


@pytest.fixture
def collections():
    watch = Collections()

    threshold = gc.get_threshold()
    was_enabled = gc.isenabled()
    gc.enable()
    gc.set_threshold(1, 1, 1)
    gc.callbacks.append(watch.seen)
    try:
        yield watch
    finally:
        gc.callbacks.remove(watch.seen)
        gc.set_threshold(*threshold)
        if not was_enabled:
            gc.disable()


def test_import_compile_and_load_run_no_collection(collections):
    data = _conv_net_bytes()
    graph = collections.during(load_model, data)
    collections.during(analyze, graph)
    compiled = collections.during(compile_graph, graph, input_shapes={"x": (1, 4, 8, 8)})
    model = collections.during(LoadedModel, compiled)
    # Collecting on every allocation, the unpaused import, compile and load start thousands
    # of collections; paused, only the allocations at each call's edges can (its arguments
    # and instance before the pause begins, its return after it ends): at most two a call.
    for call in ("load_model", "analyze", "compile_graph", "LoadedModel"):
        assert collections.started.count(call) <= 2, collections.started
    assert gc.isenabled()  # resumed after each
    x = np.ones((1, 4, 8, 8), np.float32)
    out = model.execute({"x": x})
    assert next(iter(out.values())).shape == (1, 4, 8, 8)
    model.close()


def test_the_pause_is_counted_and_restores_what_it_found():
    assert gc.isenabled()
    with gc_pause.collection_paused():
        assert not gc.isenabled()
        with gc_pause.collection_paused():  # a body compiled inside its graph's compile
            assert not gc.isenabled()
        assert not gc.isenabled()  # the outer compile is still under way
    assert gc.isenabled()
    gc.disable()  # the application's own choice is kept
    try:
        with gc_pause.collection_paused():
            pass
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_concurrent_compiles_resume_when_the_last_ends():
    inside, release = threading.Event(), threading.Event()

    def other_compile():
        with gc_pause.collection_paused():
            inside.set()
            release.wait(30)

    t = threading.Thread(target=other_compile)
    t.start()
    try:
        assert inside.wait(30)
        with gc_pause.collection_paused():
            pass
        assert not gc.isenabled()  # the other thread's compile still runs
    finally:
        release.set()
        t.join(30)
    assert gc.isenabled()


def test_an_error_inside_resumes_collection():
    data = _conv_net_bytes()
    graph = load_model(data)
    with pytest.raises(Exception, match="does not fit"):
        compile_graph(graph, input_shapes={"x": (1, 3, 8, 8)})
    assert gc.isenabled()


def _cyclic_garbage(fn, *args, **kwargs):
    """What `fn(*args)` leaves that only the collector can free: (its result, the garbage's
    type names)."""
    gc.collect()
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        result = fn(*args, **kwargs)
        gc.collect()
        kinds = [type(o).__name__ for o in gc.garbage]
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
    return result, kinds


def test_analyze_and_compile_leave_no_graph_for_the_collector():
    # The compile's copy of the graph (released once built), the nodes passes removed (no
    # node <-> output cycle left) and analysis (in place, no copy): all freed by reference
    # counting, so the first collection after a compile has nothing of them to walk.
    graph = load_model(_conv_net_bytes(blocks=8))
    _, kinds = _cyclic_garbage(analyze, graph)
    assert not {"Node", "Value", "Graph"} & set(kinds), kinds
    compiled, kinds = _cyclic_garbage(compile_graph, graph, input_shapes={"x": (2, 4, 8, 8)})
    assert not {"Node", "Value", "Graph", "NodeMeta"} & set(kinds), kinds
    model = LoadedModel(compiled)
    try:
        x = np.random.default_rng(1).standard_normal((2, 4, 8, 8)).astype(np.float32)
        # the graph the garbage came from still computes what it should
        want = ort.InferenceSession(_conv_net_bytes(blocks=8), providers=[
            "CPUExecutionProvider"]).run(None, {"x": x})[0]
        np.testing.assert_allclose(next(iter(model.execute({"x": x}).values())), want,
                                   rtol=1e-4, atol=1e-5 * float(np.abs(want).max()))
    finally:
        model.close()
