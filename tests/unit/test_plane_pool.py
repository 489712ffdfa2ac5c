"""Pooling of plain [N, C, H, W] tensors where oneDNN has only its plain-layout reference
(simple_nchw): MaxPool and AveragePool run on the runtime's plane loop (kernels_pool.cc,
PlanePool). Results are ONNX Runtime's over kernel sizes, strides, dilations, pads on either
side, ceil_mode and count_include_pad; the loop's implementation is named."""

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from graphengine.engine.importers import load_model
from graphengine.engine.pipeline import CompileOptions, compile_graph
from graphengine.engine.runtime import LoadedModel

RNG = np.random.default_rng(31)


def _run(op, shape, **attrs):
    node = helper.make_node(op, ["x"], ["y"], name="pool", **attrs)
    graph = helper.make_graph([node], "pool",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)], ir_version=9)
    x = RNG.standard_normal(shape).astype(np.float32)
    loaded = LoadedModel(compile_graph(load_model(model), CompileOptions(lint=True)))
    got = loaded.execute({"x": x})["y"]
    want = ort.InferenceSession(model.SerializeToString(),
                                providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    (row,) = [r for n in loaded.natives.values() for r in n.profile() if r["op"] == op]
    return row["impl"]


@pytest.mark.parametrize("op,include_pad", [("MaxPool", 0), ("AveragePool", 0),
                                            ("AveragePool", 1)])
@pytest.mark.parametrize("kernel,strides,pads,dilations", [
    ([3, 3], [2, 2], [1, 1, 1, 1], [1, 1]),   # an image pyramid's 3x3 stride-2 step
    ([2, 2], [2, 2], [0, 0, 0, 0], [1, 1]),
    ([3, 5], [1, 2], [1, 2, 0, 1], [1, 1]),   # uneven pads, one side only on H
    ([1, 4], [1, 2], [0, 1, 0, 2], [1, 1]),   # a 1-D pool lifted to [N, C, 1, L]
    ([3, 3], [1, 1], [2, 2, 2, 2], [2, 2]),   # dilated
    ([2, 3], [2, 3], [1, 0, 0, 1], [2, 1]),
])
@pytest.mark.parametrize("ceil_mode", [0, 1])
def test_plain_pools_match_onnxruntime(op, include_pad, kernel, strides, pads, dilations,
                                       ceil_mode):
    """ceil_mode with count_include_pad: a window past the padded input divides by its
    positions inside the padded input (canonicalize makes it a Pad, then an average of
    the positions inside); dilated pools run on the device too."""
    attrs = dict(kernel_shape=kernel, strides=strides, pads=pads, dilations=dilations,
                 ceil_mode=ceil_mode)
    if op == "AveragePool":
        attrs["count_include_pad"] = include_pad
    shape = [2, 3, 1 if kernel[0] == 1 else 23, 30]
    impl = _run(op, shape, **attrs)
    assert impl.startswith("plane loop"), impl


@pytest.mark.parametrize("fmt", ["nhwc", "nChw16c"])
@pytest.mark.parametrize("ceil_mode", [0, 1])
def test_average_pools_between_convolutions_count_pads_as_onnx_does(fmt, ceil_mode):
    """The same rule in a convolution region (oneDNN's pooling, NHWC or blocked)."""
    rng = np.random.default_rng(5)
    w1 = numpy_helper.from_array(rng.standard_normal((16, 3, 3, 3)).astype(np.float32), "w1")
    w2 = numpy_helper.from_array(rng.standard_normal((8, 16, 1, 1)).astype(np.float32), "w2")
    nodes = [helper.make_node("Conv", ["x", "w1"], ["h"], pads=[1, 1, 1, 1]),
             helper.make_node("AveragePool", ["h"], ["p"], kernel_shape=[3, 3],
                              strides=[2, 2], pads=[1, 1, 1, 1], ceil_mode=ceil_mode,
                              count_include_pad=1),
             helper.make_node("Conv", ["p", "w2"], ["y"])]
    graph = helper.make_graph(nodes, "region",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                             [2, 3, 14, 14])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                              [w1, w2])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)], ir_version=9)
    x = rng.standard_normal((2, 3, 14, 14)).astype(np.float32)
    compiled = compile_graph(load_model(model), CompileOptions(lint=True, layout_format=fmt))
    got = LoadedModel(compiled).execute({"x": x})["y"]
    want = ort.InferenceSession(model.SerializeToString(),
                                providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    pools = [p for p in compiled.report.placements if p.op_type == "AveragePool"]
    assert len(pools) == 1 and pools[0].engine != "host", pools


def test_a_large_plain_average_pool_shares_its_planes_among_threads():
    # [4, 3, 128, 128]: 196,608 elements (above the threading threshold)
    impl = _run("AveragePool", [4, 3, 128, 128], kernel_shape=[3, 3], strides=[2, 2],
                pads=[1, 1, 1, 1])
    assert impl == "plane loop (average)", impl
