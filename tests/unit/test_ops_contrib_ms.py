"""com.microsoft operators that quantized models ship with, against ONNX Runtime."""

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import graphengine
from graphengine.engine.errors import InvalidGraph


def _lstm_model(direction: str, seq=7, batch=2, inp=12, hidden=16, seed=0):
    rng = np.random.default_rng(seed)
    dirs = 2 if direction == "bidirectional" else 1
    w = (rng.standard_normal((dirs, 4 * hidden, inp)) * 0.3).astype(np.float32)
    r = (rng.standard_normal((dirs, 4 * hidden, hidden)) * 0.3).astype(np.float32)
    b = (rng.standard_normal((dirs, 8 * hidden)) * 0.1).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("LSTM", ["x", "w", "r", "b"], ["y", "yh", "yc"],
                          hidden_size=hidden, direction=direction)], "lstm",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [seq, batch, inp])],
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in ("y", "yh", "yc")],
        [numpy_helper.from_array(v, k) for k, v in (("w", w), ("r", r), ("b", b))])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)


@pytest.mark.parametrize("direction", ["forward", "reverse", "bidirectional"])
def test_dynamic_quantize_lstm_matches_onnxruntime(tmp_path, direction):
    from onnxruntime.quantization import QuantType, quantize_dynamic

    src, dst = tmp_path / "lstm.onnx", tmp_path / "lstm_q.onnx"
    onnx.save(_lstm_model(direction), src)
    quantize_dynamic(str(src), str(dst), weight_type=QuantType.QInt8, op_types_to_quantize=[
        "LSTM"])
    model = onnx.load(str(dst))
    assert [n.op_type for n in model.graph.node] == ["DynamicQuantizeLSTM"]
    x = np.random.default_rng(1).standard_normal((7, 2, 12)).astype(np.float32)
    want = ort.InferenceSession(str(dst), providers=["CPUExecutionProvider"]).run(None,
                                                                                  {"x": x})
    with graphengine.Session() as sess:
        got = sess.run_graph(sess.add_graph(str(dst)), {"x": x})
    for name, ref in zip(("y", "yh", "yc"), want):
        # the same integer arithmetic: float rounding apart, not quantization error apart
        np.testing.assert_allclose(got[name], ref, rtol=1e-5, atol=1e-5, err_msg=name)
    float_lstm = ort.InferenceSession(str(src), providers=["CPUExecutionProvider"]).run(
        None, {"x": x})[0]
    assert np.abs(float_lstm - want[0]).max() > 1e-4  # quantization is visible: the test
    # would not pass with a float LSTM


def test_dynamic_quantize_lstm_without_scales_is_refused():
    graph = helper.make_graph(
        [helper.make_node("DynamicQuantizeLSTM", ["x", "w", "r"], ["y"], domain="com.microsoft",
                          hidden_size=4, name="dq")], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 1, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(np.zeros((1, 3, 16), np.int8), "w"),
         numpy_helper.from_array(np.zeros((1, 4, 16), np.int8), "r")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13),
                                                    helper.make_opsetid("com.microsoft", 1)])
    with graphengine.Session() as sess, pytest.raises(InvalidGraph, match="'dq'.*W_scale"):
        sess.add_graph(model)
