"""Fusion rows: each pattern is rewritten, reported, and gives the same numbers."""

import numpy as np
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

from graphengine.engine.importers import load_model
from graphengine.engine.pipeline import CompileOptions, compile_graph
from graphengine.engine.runtime import load

RNG = np.random.default_rng(0)


def make(nodes, inputs, outputs, inits):
    graph = helper.make_graph(
        nodes, "fusion",
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in inputs],
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in outputs],
        [numpy_helper.from_array(np.asarray(v, np.float32) if np.asarray(v).dtype.kind == "f"
                                 else np.asarray(v), k) for k, v in inits.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def check(model, feeds):
    compiled = compile_graph(load_model(model), CompileOptions(lint=True))
    ours = load(compiled).execute(feeds)
    ref = ort.InferenceSession(model.SerializeToString()).run(None, feeds)
    for got, want in zip(ours.values(), ref):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
    # layout conversions are not fusions: leave them out of the op list
    return compiled.report.fusions, [p.op_type for p in compiled.report.placements
                                     if p.op_type != "TransData"]


def test_decomposed_layernorm_becomes_one_node():
    w = 16
    nodes = [
        helper.make_node("ReduceMean", ["x"], ["mean"], axes=[-1]),
        helper.make_node("Sub", ["x", "mean"], ["d"]),
        helper.make_node("Pow", ["d", "two"], ["sq"]),
        helper.make_node("ReduceMean", ["sq"], ["var"], axes=[-1]),
        helper.make_node("Add", ["var", "eps"], ["ve"]),
        helper.make_node("Sqrt", ["ve"], ["std"]),
        helper.make_node("Div", ["d", "std"], ["n"]),
        helper.make_node("Mul", ["n", "gamma"], ["g"]),
        helper.make_node("Add", ["g", "beta"], ["y"]),
    ]
    model = make(nodes, [("x", [2, 5, w])], [("y", [2, 5, w])],
                 {"two": np.float32(2.0), "eps": np.float32(1e-5),
                  "gamma": RNG.normal(size=w), "beta": RNG.normal(size=w)})
    x = RNG.normal(size=(2, 5, w)).astype(np.float32)
    fusions, ops = check(model, {"x": x})
    assert any(f.startswith("LayerNorm: 9 nodes") for f in fusions), fusions
    assert ops == ["LayerNormalization"]


def test_conv_bn_relu_and_residual():
    c = 4
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c1"], pads=[1, 1, 1, 1]),
        helper.make_node("BatchNormalization", ["c1", "s", "b", "m", "v"], ["bn"]),
        helper.make_node("Add", ["bn", "x"], ["res"]),
        helper.make_node("Relu", ["res"], ["y"]),
    ]
    model = make(nodes, [("x", [1, c, 6, 6])], [("y", [1, c, 6, 6])],
                 {"w": RNG.normal(size=(c, c, 3, 3)), "s": RNG.uniform(0.5, 1.5, c),
                  "b": RNG.normal(size=c), "m": RNG.normal(size=c),
                  "v": RNG.uniform(0.5, 2.0, c)})
    fusions, ops = check(model, {"x": RNG.normal(size=(1, c, 6, 6)).astype(np.float32)})
    assert ops == ["Conv"]
    assert [f.split(":")[0] for f in fusions] == [
        "Conv+BatchNormalization", "Conv+Add(residual)", "Conv+Relu"]


def test_matmul_bias_gelu():
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["mm"]),
        helper.make_node("Add", ["bias", "mm"], ["h"]),
        helper.make_node("Div", ["h", "sqrt2"], ["hd"]),
        helper.make_node("Erf", ["hd"], ["e"]),
        helper.make_node("Add", ["e", "one"], ["e1"]),
        helper.make_node("Mul", ["h", "e1"], ["he"]),
        helper.make_node("Mul", ["he", "half"], ["y"]),
    ]
    model = make(nodes, [("x", [3, 8])], [("y", [3, 6])],
                 {"w": RNG.normal(size=(8, 6)), "bias": RNG.normal(size=6),
                  "sqrt2": np.float32(2 ** 0.5), "one": np.float32(1.0),
                  "half": np.float32(0.5)})
    fusions, ops = check(model, {"x": RNG.normal(size=(3, 8)).astype(np.float32)})
    assert ops == ["MatMul"], ops
    assert [f.split(":")[0] for f in fusions] == ["Erf-GELU", "MatMul+bias", "MatMul+Gelu"]


def test_unfusable_shared_intermediate_is_left_alone():
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c1"]),
        helper.make_node("Relu", ["c1"], ["r"]),
        helper.make_node("Add", ["r", "c1"], ["y"]),  # c1 has two readers: no activation fusion
    ]
    model = make(nodes, [("x", [1, 2, 4, 4])], [("y", [1, 2, 4, 4])],
                 {"w": RNG.normal(size=(2, 2, 1, 1))})
    fusions, ops = check(model, {"x": RNG.normal(size=(1, 2, 4, 4)).astype(np.float32)})
    # the Relu stays out of the Conv (it may join the Add in an elementwise chain)
    assert ("Relu" in ops or "EltwiseChain" in ops) and not any("Conv+Relu" in f for f in fusions)
