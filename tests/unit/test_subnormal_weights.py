"""Subnormal weights are flushed to zero before fusion folds them (and again after): a
trained network's dead channels (weights below float32's smallest normal, scaled up by a
BatchNormalization) made one convolution of a text recogniser 20x slower than its
neighbours. Values stay those of the reference; constants read elsewhere keep theirs."""

import numpy as np
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

from graphengine.engine.importers import load_model
from graphengine.engine.optimize.subnormals import has_subnormal, subnormal_mask
from graphengine.engine.pipeline import CompileOptions, compile_graph
from graphengine.engine.runtime import load

RNG = np.random.default_rng(3)
TINY = np.finfo(np.float32).tiny


def _model(nodes, inputs, outputs, inits):
    graph = helper.make_graph(
        nodes, "subnormals",
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in inputs],
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in outputs],
        [numpy_helper.from_array(v, k) for k, v in inits.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def _compile(model):
    seen = {}
    compiled = compile_graph(load_model(model), CompileOptions(lint=True),
                             on_stage=lambda stage, graph: seen.__setitem__(stage, graph))
    return compiled, seen["optimize"]


def _reference(model, feeds):
    return ort.InferenceSession(model.SerializeToString()).run(None, feeds)


def test_subnormal_mask_finds_only_subnormals() -> None:
    a = np.array([0.0, -0.0, TINY, -TINY, TINY / 2, -TINY / 4, 1e-45, 1.0, np.inf, -np.inf,
                  np.nan, np.finfo(np.float32).max], np.float32)
    hit = subnormal_mask(a)
    assert hit is not None
    assert hit.tolist() == [False, False, False, False, True, True, True, False, False, False,
                            False, False]
    d = np.array([0.0, 2.2250738585072014e-308 / 8, 1e-300, 5e-324], np.float64)
    assert subnormal_mask(d).tolist() == [False, True, False, True]
    assert subnormal_mask(np.ones(8, np.float32)) is None
    assert subnormal_mask(np.arange(8, dtype=np.int32)) is None
    big = np.ones(100_003, np.float32)  # the chunked scan finds one in its last chunk
    assert not has_subnormal(big) and not has_subnormal(big)  # (the second: known clean)
    big2 = big.copy()
    big2[-1] = TINY / 2
    assert has_subnormal(big2) and has_subnormal(-big2)


def test_dead_channels_folded_by_batchnorm_become_zero() -> None:
    c, m = 16, 24
    w = RNG.normal(size=(m, c, 1, 1)).astype(np.float32) * 0.1
    dead = np.arange(m) % 3 == 0  # a third of the output channels decayed below normal
    w[dead] = (RNG.uniform(0.1, 1.0, size=(dead.sum(), c, 1, 1)) * TINY / 2).astype(np.float32)
    w[dead] *= np.where(RNG.random(size=(dead.sum(), c, 1, 1)) < 0.5, -1, 1).astype(np.float32)
    assert subnormal_mask(w) is not None
    scale = np.where(dead, 1e8, 1.0).astype(np.float32)  # folding makes them 1e-31: normal
    bn = {"scale": scale, "bias": RNG.normal(size=m).astype(np.float32),
          "mean": RNG.normal(size=m).astype(np.float32),
          "var": RNG.uniform(0.5, 2.0, size=m).astype(np.float32)}
    model = _model(
        [helper.make_node("Conv", ["x", "w"], ["c"], kernel_shape=[1, 1]),
         helper.make_node("BatchNormalization", ["c", "scale", "bias", "mean", "var"], ["y"])],
        [("x", [2, c, 5, 7])], [("y", [2, m, 5, 7])], {"w": w, **bn})
    compiled, graph = _compile(model)
    (conv,) = [n for n in graph.nodes if n.op_type == "Conv"]
    folded = np.asarray(conv.input(1).const)
    assert conv.meta.fused, "the BatchNormalization was folded into the convolution"
    assert np.all(folded[dead] == 0), "dead channels' weights are exactly zero after folding"
    assert np.array_equal(folded[~dead] != 0, w[~dead] != 0)
    assert subnormal_mask(folded) is None
    assert any(p.name == "flush_subnormal_weights" and p.changed
               for p in compiled.report.passes)
    x = RNG.normal(size=(2, c, 5, 7)).astype(np.float32)
    ours = load(compiled).execute({"x": x})["y"]
    np.testing.assert_allclose(ours, _reference(model, {"x": x})[0], rtol=1e-5, atol=1e-5)


def test_a_constant_read_elsewhere_keeps_its_subnormals() -> None:
    k, n = 8, 6
    w = RNG.normal(size=(k, n)).astype(np.float32)
    w[::2] = TINY / 3  # subnormal rows
    model = _model(
        [helper.make_node("MatMul", ["x", "w"], ["y"]),
         helper.make_node("Add", ["x2", "w"], ["z"])],
        [("x", [3, k]), ("x2", [k, n])], [("y", [3, n]), ("z", [k, n])], {"w": w})
    compiled, graph = _compile(model)
    (matmul,) = [nd for nd in graph.nodes if nd.op_type == "MatMul"]
    assert subnormal_mask(np.asarray(matmul.input(1).const)) is None
    x = RNG.normal(size=(3, k)).astype(np.float32)
    x2 = np.zeros((k, n), np.float32)  # z = w: the Add's reader sees every subnormal
    got = load(compiled).execute({"x": x, "x2": x2})
    np.testing.assert_array_equal(got["z"], w)
    np.testing.assert_allclose(got["y"], _reference(model, {"x": x, "x2": x2})[0],
                               rtol=1e-5, atol=1e-6)
