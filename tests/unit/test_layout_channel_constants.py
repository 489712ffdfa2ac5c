"""formats.channel_constants_as_4d: a per-channel constant written [C, 1, 1] (PoolFormer's
and ConvNeXt's layer scale, on either side of the Mul) is read in the convolution region
like [1, C, 1, 1]: no conversion around the Mul, values unchanged."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from graphengine.engine.importers import load_model
from graphengine.engine.pipeline import CompileOptions, compile_graph
from graphengine.engine.runtime import LoadedModel

rng = np.random.default_rng(23)
C = 16


def _model(scale_shape, scale_first):
    inits = [numpy_helper.from_array(rng.normal(0, 0.3, (C, 3, 3, 3)).astype(np.float32), "w1"),
             numpy_helper.from_array(rng.normal(0, 0.3, (8, C, 3, 3)).astype(np.float32), "w2")]
    # a pool between (PoolFormer's token mixer): a Mul right after the Conv folds into it
    nodes = [helper.make_node("Conv", ["x", "w1"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("AveragePool", ["c"], ["h"], kernel_shape=[3, 3],
                              pads=[1, 1, 1, 1], count_include_pad=0)]
    if scale_shape is None:
        nodes.append(helper.make_node("Relu", ["h"], ["s"]))
    else:
        inits.append(numpy_helper.from_array(
            rng.normal(1, 0.5, scale_shape).astype(np.float32), "ls"))
        ins = ["ls", "h"] if scale_first else ["h", "ls"]
        nodes.append(helper.make_node("Mul", ins, ["s"]))
    nodes.append(helper.make_node("Conv", ["s", "w2"], ["y"], pads=[1, 1, 1, 1]))
    g = helper.make_graph(nodes, "ls",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 10, 9])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def _transdata(model, fmt):
    compiled = compile_graph(load_model(model), CompileOptions(lint=True, layout_format=fmt))
    x = rng.standard_normal((2, 3, 10, 9)).astype(np.float32)
    got = LoadedModel(compiled).execute({"x": x})["y"]
    want = ort.InferenceSession(model.SerializeToString(), providers=[
        "CPUExecutionProvider"]).run(None, {"x": x})[0]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    return [p.op_type for p in compiled.report.placements].count("TransData")


@pytest.mark.parametrize("fmt", ["nhwc", "nChw16c"])
@pytest.mark.parametrize("shape,first", [((C, 1, 1), True), ((C, 1, 1), False),
                                         ((1, C, 1, 1), True)])
def test_a_layer_scale_of_fewer_axes_stays_in_the_region(fmt, shape, first):
    assert _transdata(_model(shape, first), fmt) == _transdata(_model(None, False), fmt)
