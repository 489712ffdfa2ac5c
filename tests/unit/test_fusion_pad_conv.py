"""Fusion row pad_conv: a constant-zero Pad of the spatial axes becomes the Conv's pads
(TensorFlow-style "same" padding exported as a Pad before each Conv)."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from graphengine.engine.importers import load_model
from graphengine.engine.pipeline import CompileOptions, compile_graph
from graphengine.engine.runtime import LoadedModel

rng = np.random.default_rng(2)


def _model(x_shape, pads, conv_attrs=None, mode="constant", value=None, axes=None,
           opset=18, channels=None):
    rank = len(x_shape)
    c = channels or x_shape[1]
    w = rng.standard_normal((6, c, *([3] * (rank - 2)))).astype(np.float32) * 0.3
    inits = [numpy_helper.from_array(w, "w"),
             numpy_helper.from_array(np.array(pads, np.int64), "pads")]
    pad_in = ["x", "pads"]
    if value is not None or axes is not None:
        inits.append(numpy_helper.from_array(np.array(value or 0, np.float32), "value"))
        pad_in.append("value")
    if axes is not None:
        inits.append(numpy_helper.from_array(np.array(axes, np.int64), "axes"))
        pad_in.append("axes")
    nodes = [helper.make_node("Pad", pad_in, ["p"], mode=mode, name="pad"),
             helper.make_node("Conv", ["p", "w"], ["y"], name="conv", **(conv_attrs or {}))]
    g = helper.make_graph(nodes, "padconv",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, x_shape)],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])


def _check(model, x_shape):
    compiled = compile_graph(load_model(model), CompileOptions())
    x = rng.standard_normal(x_shape).astype(np.float32)
    got = LoadedModel(compiled).execute({"x": x})["y"]
    want = ort.InferenceSession(model.SerializeToString(), providers=[
        "CPUExecutionProvider"]).run(None, {"x": x})[0]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
    ops = [p.op_type for p in compiled.report.placements]
    return compiled.report.fusions, ops


@pytest.mark.parametrize("x_shape, pads, conv_attrs", [
    ((1, 8, 9, 9), [0, 0, 1, 1, 0, 0, 1, 1], {}),                          # "same", 3x3
    ((1, 8, 10, 10), [0, 0, 0, 0, 0, 0, 1, 1], {"strides": [2, 2]}),        # TF stride 2
    ((1, 8, 9, 9), [0, 0, 1, 2, 0, 0, 2, 1], {"pads": [1, 0, 0, 1]}),       # added to its own
    ((1, 8, 9, 9), [0, 0, 1, 1, 0, 0, 1, 1], {"group": 8}),                 # depthwise
    ((2, 4, 20), [0, 0, 2, 0, 0, 1], {}),                                   # 1-D
])
def test_a_spatial_zero_pad_becomes_the_convs_pads(x_shape, pads, conv_attrs):
    if conv_attrs.get("group") == 8:
        conv_attrs = dict(conv_attrs)
        model = _model(x_shape, pads, conv_attrs)
        w = rng.standard_normal((8, 1, 3, 3)).astype(np.float32)
        model.graph.initializer[0].CopyFrom(numpy_helper.from_array(w, "w"))
    else:
        model = _model(x_shape, pads, conv_attrs)
    fusions, ops = _check(model, x_shape)
    assert any(f.startswith("Pad+Conv") for f in fusions), fusions
    assert "Pad" not in ops


def test_pad_with_axes_and_an_explicit_zero_value():
    fusions, ops = _check(_model((1, 4, 7, 7), [1, 1, 1, 1], value=0.0, axes=[2, 3]),
                          (1, 4, 7, 7))
    assert any(f.startswith("Pad+Conv") for f in fusions) and "Pad" not in ops


@pytest.mark.parametrize("kwargs", [
    {"pads": [0, 0, 1, 1, 0, 0, 1, 1], "value": 0.5},               # not zero
    {"pads": [0, 0, 1, 1, 0, 0, 1, 1], "mode": "reflect"},          # not constant
    {"pads": [0, 1, 1, 1, 0, 0, 1, 1], "channels": 5},              # grows the channels
])
def test_other_pads_stay_pads(kwargs):
    pads = kwargs.pop("pads")
    fusions, ops = _check(_model((1, 4, 7, 7), pads, **kwargs), (1, 4, 7, 7))
    assert not any(f.startswith("Pad+Conv") for f in fusions) and "Pad" in ops


def test_a_crop_is_no_conv_padding():
    """A negative pad crops: a Slice before the Conv (prepare/canonicalize.py), not its pads."""
    fusions, ops = _check(_model((1, 4, 7, 7), [0, 0, -1, 0, 0, 0, 0, 0]), (1, 4, 7, 7))
    assert not any(f.startswith("Pad+Conv") for f in fusions) and "Pad" not in ops
    assert "Slice" in ops, ops
