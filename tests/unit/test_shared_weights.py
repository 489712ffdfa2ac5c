"""Weights held once across a graph's input signatures (engine/codegen/shared_weights.py and
the runtime's device-wide index of prepared weights, host/dnnl_util.h PreparedRegistry): the
programs compiled from one graph for batch 1 and batch 8 hand the runtime the same weight
segments, the second model finds the first's reordered weights, both give ONNX Runtime's
answers, and nothing is kept alive once the models are gone."""

from __future__ import annotations

import gc
import weakref

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from graphengine.engine.codegen.shared_weights import share_segments
from graphengine.engine.importers import load_model
from graphengine.engine.model import DeviceProgram
from graphengine.engine.pipeline import compile_graph
from graphengine.engine.runtime import LoadedModel, default_device

RNG = np.random.default_rng(5)


def _conv_net():
    """Conv + BatchNorm (folded at compile: new arrays each compile) + Relu, twice, and a
    wide Conv head (a segment of its own) with a global pool."""
    c = 64
    init = {"w1": RNG.standard_normal((c, 3, 3, 3)), "w2": RNG.standard_normal((c, c, 3, 3)),
            "w3": RNG.standard_normal((512, c, 3, 3)) * 0.05}
    for i in (1, 2):
        init |= {f"s{i}": RNG.uniform(0.5, 1.5, c), f"o{i}": RNG.standard_normal(c),
                 f"m{i}": RNG.standard_normal(c), f"v{i}": RNG.uniform(0.5, 2, c)}
    nodes = [helper.make_node("Conv", ["x", "w1"], ["c1"], pads=[1, 1, 1, 1]),
             helper.make_node("BatchNormalization", ["c1", "s1", "o1", "m1", "v1"], ["n1"]),
             helper.make_node("Relu", ["n1"], ["r1"]),
             helper.make_node("Conv", ["r1", "w2"], ["c2"], pads=[1, 1, 1, 1], strides=[2, 2]),
             helper.make_node("BatchNormalization", ["c2", "s2", "o2", "m2", "v2"], ["n2"]),
             helper.make_node("Relu", ["n2"], ["r2"]),
             helper.make_node("Conv", ["r2", "w3"], ["c3"], pads=[1, 1, 1, 1]),
             helper.make_node("GlobalAveragePool", ["c3"], ["y"])]
    graph = helper.make_graph(
        nodes, "shared", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 3, 16, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(v.astype(np.float32), k) for k, v in init.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def _segments(compiled) -> list[np.ndarray]:
    return [w for p in compiled.programs if isinstance(p, DeviceProgram) for w in p.weights]


def test_two_signatures_of_a_graph_share_their_weight_segments_and_prepared_weights():
    model = _conv_net()
    graph = load_model(model)
    c1 = compile_graph(graph, input_shapes={"x": (1, 3, 16, 16)})
    c8 = compile_graph(graph, input_shapes={"x": (8, 3, 16, 16)})
    s1, s8 = _segments(c1), _segments(c8)
    # every segment of the batch-8 program that has the batch-1 program's bytes is its array
    same = [a for a in s8 if any(a is b for b in s1)]
    assert sum(a.nbytes for a in same) >= 0.9 * sum(a.nbytes for a in s1)
    device = default_device(2)
    m1, m8 = LoadedModel(c1, device), LoadedModel(c8, device)
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    for m, n in ((m1, 1), (m8, 8)):
        x = RNG.standard_normal((n, 3, 16, 16)).astype(np.float32)
        np.testing.assert_allclose(m.execute({"x": x})["y"], sess.run(None, {"x": x})[0],
                                   rtol=1e-3, atol=1e-3)
    st1, st8 = m1.stats(), m8.stats()
    assert st1.prepared_borrowed_bytes == 0
    # the batch-8 model took the batch-1 model's reordered weights of those bytes
    assert st8.prepared_borrowed_bytes > 0.5 * st8.prepared_bytes > 0


def test_a_graph_compiled_apart_keeps_its_own_weights():
    """Another graph object (another session's import of the same file) shares nothing."""
    model = _conv_net()
    a = compile_graph(load_model(model), input_shapes={"x": (1, 3, 16, 16)})
    b = compile_graph(load_model(model), input_shapes={"x": (1, 3, 16, 16)})
    ids = {id(w) for w in _segments(a)}
    assert not any(id(w) in ids for w in _segments(b) if w.nbytes > 4096)


def test_equal_size_but_other_bytes_are_not_shared():
    graph = load_model(_conv_net())
    c1 = compile_graph(graph, input_shapes={"x": (1, 3, 16, 16)})
    other = compile_graph(graph, input_shapes={"x": (2, 3, 16, 16)})
    (prog,) = [p for p in other.programs if isinstance(p, DeviceProgram)]
    changed = [w.copy() for w in prog.weights]
    changed[0][-1] ^= 1  # one bit off in the last byte
    prog.weights = changed
    share_segments(graph, [prog])
    assert prog.weights[0] is changed[0]
    assert all(w is not changed[0] for w in _segments(c1))


def test_the_index_keeps_no_segment_alive():
    graph = load_model(_conv_net())
    compiled = compile_graph(graph, input_shapes={"x": (1, 3, 16, 16)})
    refs = [weakref.ref(w) for w in _segments(compiled)]
    del compiled
    gc.collect()
    assert all(r() is None for r in refs)


@pytest.mark.parametrize("first", [1, 8])
def test_a_model_outlives_the_one_whose_weights_it_borrowed(first):
    """The model that prepared the weights is freed first; the other still answers right."""
    model = _conv_net()
    graph = load_model(model)
    device = default_device(2)
    other = 9 - first
    a = LoadedModel(compile_graph(graph, input_shapes={"x": (first, 3, 16, 16)}), device)
    b = LoadedModel(compile_graph(graph, input_shapes={"x": (other, 3, 16, 16)}), device)
    assert b.stats().prepared_borrowed_bytes > 0
    del a
    gc.collect()
    x = RNG.standard_normal((other, 3, 16, 16)).astype(np.float32)
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    np.testing.assert_allclose(b.execute({"x": x})["y"], sess.run(None, {"x": x})[0],
                               rtol=1e-3, atol=1e-3)


def test_many_loads_and_unloads_keep_the_index_right():
    """Models loaded and freed many times on one device (the index sweeps the entries of gone
    models every 1024 insertions): a pair loaded after still shares and answers right."""
    model = _conv_net()
    graph = load_model(model)
    device = default_device(2)
    compiled = [compile_graph(graph, input_shapes={"x": (n, 3, 16, 16)}) for n in (1, 2)]
    for _ in range(400):  # 3 reordered weights a model: 1200 insertions
        m = LoadedModel(compiled[0], device)
        del m
    a, b = (LoadedModel(c, device) for c in compiled)
    assert b.stats().prepared_borrowed_bytes > 0
    x = RNG.standard_normal((2, 3, 16, 16)).astype(np.float32)
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    np.testing.assert_allclose(b.execute({"x": x})["y"], sess.run(None, {"x": x})[0],
                               rtol=1e-3, atol=1e-3)
    del a
