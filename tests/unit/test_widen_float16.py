"""float16 models compute in float32 on the device (engine/prepare/widen.py)."""

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from graphengine.engine.importers import load_model
from graphengine.engine.pipeline import CompileOptions, compile_graph
from graphengine.engine.prepare import infer_shapes, widen_float16
from graphengine.engine.runtime import load

LINT = CompileOptions(lint=True)
F16, F32 = TensorProto.FLOAT16, TensorProto.FLOAT


def _model(nodes, inputs, outputs, inits=(), opset=17):
    g = helper.make_graph(nodes, "half", inputs, outputs,
                          [numpy_helper.from_array(a, n) for n, a in inits])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8
    onnx.checker.check_model(m)
    return m


def _conv_net(rng):
    """A half-precision 1-D CNN as tf2onnx writes Keras's: Conv, bias Add, Relu, Softmax."""
    w1 = (rng.standard_normal((16, 8, 3)) * 0.3).astype(np.float16)
    b1 = rng.standard_normal((1, 16, 1)).astype(np.float16)
    w2 = (rng.standard_normal((5, 16, 1)) * 0.3).astype(np.float16)
    nodes = [helper.make_node("Conv", ["x", "w1"], ["c1"], pads=[1, 1]),
             helper.make_node("Add", ["c1", "b1"], ["a1"]),
             helper.make_node("Relu", ["a1"], ["r1"]),
             helper.make_node("Conv", ["r1", "w2"], ["c2"]),
             helper.make_node("Transpose", ["c2"], ["t"], perm=[0, 2, 1]),
             helper.make_node("Softmax", ["t"], ["y"], axis=-1)]
    return _model(nodes, [helper.make_tensor_value_info("x", F16, [2, 8, 12])],
                  [helper.make_tensor_value_info("y", F16, [2, 12, 5])],
                  [("w1", w1), ("b1", b1), ("w2", w2)])


def _ort(model, feeds):
    s = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return s.run(None, feeds)


def test_half_cnn_runs_on_the_device_and_agrees_with_onnxruntime():
    rng = np.random.default_rng(0)
    model = _conv_net(rng)
    x = rng.standard_normal((2, 8, 12)).astype(np.float16)
    compiled = compile_graph(load_model(model), LINT)
    assert [p.engine for p in compiled.report.partitions] == ["device"]
    y = load(compiled).execute({"x": x})["y"]
    assert y.dtype == np.float16 and y.shape == (2, 12, 5)
    (ref,) = _ort(model, {"x": x})
    # one float16 rounding at the end: within a float16 step of the float32 computation
    np.testing.assert_allclose(y.astype(np.float32), ref.astype(np.float32), rtol=2e-3,
                               atol=1e-3)


def test_option_keeps_half_precision_on_the_host():
    model = _conv_net(np.random.default_rng(1))
    compiled = compile_graph(load_model(model), CompileOptions(widen_float16=False))
    assert "host" in {p.engine for p in compiled.report.partitions}


def test_an_explicit_narrowing_cast_still_rounds():
    # x (float32) -> Cast to float16 -> Mul by 1 (float16) -> Cast to float32: the result is
    # x rounded to float16, exactly, though the Mul now computes in float32
    nodes = [helper.make_node("Cast", ["x"], ["h"], to=F16),
             helper.make_node("Mul", ["h", "one"], ["m"]),
             helper.make_node("Cast", ["m"], ["y"], to=F32)]
    model = _model(nodes, [helper.make_tensor_value_info("x", F32, [64])],
                   [helper.make_tensor_value_info("y", F32, [64])],
                   [("one", np.ones(1, np.float16))])
    x = (np.random.default_rng(2).standard_normal(64) * 3 + 1e-3).astype(np.float32)
    compiled = compile_graph(load_model(model), LINT)
    assert [p.engine for p in compiled.report.partitions] == ["device"]
    y = load(compiled).execute({"x": x})["y"]
    np.testing.assert_array_equal(y, x.astype(np.float16).astype(np.float32))


def test_inputs_outputs_and_attribute_tensors_keep_their_types():
    # a float16 input that is also an output, an output computed from it, and a
    # ConstantOfShape whose value is a float16 tensor
    fill = numpy_helper.from_array(np.array([0.5], np.float16), "v")
    nodes = [helper.make_node("ConstantOfShape", ["shape"], ["c"], value=fill),
             helper.make_node("Add", ["x", "c"], ["y"])]
    model = _model(nodes, [helper.make_tensor_value_info("x", F16, [3, 4])],
                   [helper.make_tensor_value_info("x", F16, [3, 4]),
                    helper.make_tensor_value_info("y", F16, [3, 4])],
                   [("shape", np.array([3, 4], np.int64))])
    x = np.arange(12, dtype=np.float16).reshape(3, 4) / np.float16(7)
    compiled = compile_graph(load_model(model), LINT)
    out = load(compiled).execute({"x": x})
    assert out["x"].dtype == np.float16 and out["y"].dtype == np.float16
    np.testing.assert_array_equal(out["x"], x)
    np.testing.assert_array_equal(out["y"], (x.astype(np.float32) + 0.5).astype(np.float16))


def test_the_pass_settles_in_one_run():
    graph = load_model(_conv_net(np.random.default_rng(3)))
    infer_shapes(graph)
    assert widen_float16(graph).changed
    graph.lint()
    again = widen_float16(graph)
    assert not again.changed and again.detail == "no float16 to widen"
    halves = [v.name for v in graph.values.values() if v.meta.dtype.value == "float16"]
    assert halves == ["x", "y"]  # the input and the output, nothing between them


@pytest.mark.parametrize("op", ["If"])
def test_graphs_with_bodies_are_left_alone(op):
    branch = helper.make_graph([helper.make_node("Identity", ["x"], ["o"])], "b", [],
                               [helper.make_tensor_value_info("o", F16, [2])])
    nodes = [helper.make_node(op, ["c"], ["y"], then_branch=branch, else_branch=branch)]
    model = _model(nodes, [helper.make_tensor_value_info("c", TensorProto.BOOL, []),
                           helper.make_tensor_value_info("x", F16, [2])],
                   [helper.make_tensor_value_info("y", F16, [2])])
    graph = load_model(model)
    infer_shapes(graph)
    result = widen_float16(graph)
    assert not result.changed and "has a body" in result.detail
