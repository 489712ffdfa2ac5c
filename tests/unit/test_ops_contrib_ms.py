"""com.microsoft operators that quantized models ship with, against ONNX Runtime."""

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import graphengine
from graphengine.engine.errors import InvalidGraph
from graphengine.engine.importers import load_model
from graphengine.engine.ops.contrib_ms import _dq_lstm
from graphengine.engine.pipeline import CompileOptions, compile_graph
from graphengine.engine.runtime import LoadedModel


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


def _quantized(tmp_path, direction, seq, batch, inp, hidden, per_channel=False):
    from onnxruntime.quantization import QuantType, quantize_dynamic

    src, dst = tmp_path / "lstm.onnx", tmp_path / "lstm_q.onnx"
    onnx.save(_lstm_model(direction, seq, batch, inp, hidden), src)
    quantize_dynamic(str(src), str(dst), weight_type=QuantType.QInt8, per_channel=per_channel,
                     op_types_to_quantize=["LSTM"])
    return onnx.load(str(dst))


def _host_reference(model, x):
    node = model.graph.node[0]
    values = {t.name: onnx.numpy_helper.to_array(t) for t in model.graph.initializer}
    values["x"] = x
    attrs = {"direction": "forward", "input_forget": 0, "clip": None}
    attrs.update({a.name: helper.get_attribute_value(a) for a in node.attribute})
    attrs["direction"] = attrs["direction"].decode() if isinstance(attrs["direction"], bytes) \
        else attrs["direction"]
    return _dq_lstm([values.get(n) if n else None for n in node.input], attrs)


@pytest.mark.parametrize("direction", ["forward", "reverse", "bidirectional"])
@pytest.mark.parametrize("batch,inp,hidden,per_channel", [(1, 12, 16, False), (3, 13, 20, False),
                                                          (4, 33, 36, True)])
def test_dynamic_quantize_lstm_runs_on_the_device(tmp_path, isa, direction, batch, inp, hidden,
                                                  per_channel):
    """The device kernel (rows of a batch sharing each step's product, each with its own
    quantization; input and hidden sizes off the 4-byte groups and 16-column panels) against
    ONNX Runtime and the host reference."""
    model = _quantized(tmp_path, direction, 6, batch, inp, hidden, per_channel)
    compiled = compile_graph(load_model(model), CompileOptions(lint=True))
    assert {p.engine for p in compiled.report.placements} == {"device"}
    loaded = LoadedModel(compiled)
    impls = [t["impl"] for native in loaded.natives.values() for t in native.profile()]
    assert any(i == "dq-lstm plain" for i in impls) == (isa == "fallback"), impls
    x = np.random.default_rng(2).standard_normal((6, batch, inp)).astype(np.float32)
    got = loaded.execute({"x": x})
    # ONNX Runtime quantizes the hidden states of ceil(batch / threads) rows together (at
    # hidden <= 256): one thread per row makes that each row alone, as the reference does
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = batch
    want = ort.InferenceSession(model.SerializeToString(), opts, providers=[
        "CPUExecutionProvider"]).run(None, {"x": x})
    ref = _host_reference(model, x)
    for name, w, r in zip(("y", "yh", "yc"), want, ref):
        np.testing.assert_allclose(got[name], w, rtol=1e-5, atol=1e-5, err_msg=name)
        # the same integer sums and float steps; only the activations' last bits differ
        np.testing.assert_allclose(got[name], r, rtol=1e-6, atol=1e-6, err_msg=name)


def test_dynamic_quantize_lstm_refuses_short_sequences_at_run_time(tmp_path):
    model = _quantized(tmp_path, "forward", 4, 2, 8, 16)
    node = model.graph.node[0]
    while len(node.input) < 12:  # pragma: no cover - quantize_dynamic writes all twelve
        node.input.append("")
    node.input[4] = "lens"
    model.graph.initializer.append(numpy_helper.from_array(np.array([4, 2], np.int32), "lens"))
    loaded = LoadedModel(compile_graph(load_model(model)))
    x = np.zeros((4, 2, 8), np.float32)
    with pytest.raises(Exception, match=r"sequence_lens\[1\] = 2.*whole sequences"):
        loaded.execute({"x": x})


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
