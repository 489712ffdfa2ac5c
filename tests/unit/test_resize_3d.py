"""A Resize of a volume [N, C, D, H, W] runs on the device (kernels_resize.cc: a depth axis
beside H and W; trilinear as the blend of two depth slices' bilinear rows). Before, the
device kernel took 4-D tensors only: a 3-D U-Net's trilinear upsamplings ran on the host
between device programs. Plain and between 3-D convolutions (their channels-last or blocked
format), every mode and coordinate mode the kernel has, by scales and by sizes, up and down;
results are ONNX Runtime's."""

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from graphengine.engine.importers import load_model
from graphengine.engine.pipeline import CompileOptions, compile_graph
from graphengine.engine.runtime import LoadedModel

RNG = np.random.default_rng(23)


def _model(shape, mode, coord, scales, sizes, convs, nearest="round_prefer_floor"):
    n, c = shape[:2]
    f = np.float32
    inits = {}
    attrs = {"mode": mode, "coordinate_transformation_mode": coord}
    if mode == "nearest":
        attrs["nearest_mode"] = nearest
    if scales is not None:
        inits["scales"] = np.asarray([1.0, 1.0, *scales], f)
        rin = ["a", "", "scales"]
    else:
        inits["sizes"] = np.asarray([n, c, *sizes], np.int64)
        rin = ["a", "", "", "sizes"]
    nodes = []
    if convs:
        inits["w1"] = RNG.normal(0, 0.3, (c, c, 3, 3, 3)).astype(f)
        inits["w2"] = RNG.normal(0, 0.3, (4, c, 3, 3, 3)).astype(f)
        nodes.append(helper.make_node("Conv", ["x", "w1"], ["a"], pads=[1] * 6))
    else:
        nodes.append(helper.make_node("Identity", ["x"], ["a"]))
    nodes.append(helper.make_node("Resize", rin, ["up"], **attrs))
    if convs:
        nodes.append(helper.make_node("Conv", ["up", "w2"], ["y"], pads=[1] * 6))
    else:
        nodes.append(helper.make_node("Identity", ["up"], ["y"]))
    graph = helper.make_graph(
        nodes, "volume", [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(shape))],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(v, k) for k, v in inits.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=8)


def _check(model, shape, fmt="auto"):
    compiled = compile_graph(load_model(model), CompileOptions(lint=True, layout_format=fmt))
    x = RNG.standard_normal(shape).astype(np.float32)
    got = LoadedModel(compiled).execute({"x": x})["y"]
    want = ort.InferenceSession(model.SerializeToString(),
                                providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    resizes = [p for p in compiled.report.placements if p.op_type == "Resize"]
    assert len(resizes) == 1 and resizes[0].engine == "device", compiled.report.placements
    assert len(compiled.report.partitions) == 1, compiled.report.partitions


@pytest.mark.parametrize("mode,coord,scales,sizes", [
    ("linear", "half_pixel", [2.0, 2.0, 2.0], None),     # a 3-D U-Net's trilinear x2
    ("linear", "align_corners", None, [7, 9, 5]),
    ("linear", "pytorch_half_pixel", [1.0, 1.5, 2.0], None),  # depth kept
    ("linear", "asymmetric", [0.5, 2.0, 1.0], None),     # depth down
    ("nearest", "asymmetric", [2.0, 2.0, 2.0], None),
    ("nearest", "half_pixel", None, [3, 4, 11]),
])
@pytest.mark.parametrize("convs", [False, True])
def test_a_volume_resize_runs_on_the_device(mode, coord, scales, sizes, convs):
    shape = (2, 3, 4, 5, 6)
    _check(_model(shape, mode, coord, scales, sizes, convs), shape)


@pytest.mark.parametrize("fmt", ["nhwc", "nChw16c"])
def test_between_3d_convolutions_in_their_format(fmt):
    shape = (1, 16, 3, 4, 5)
    _check(_model(shape, "linear", "half_pixel", [2.0, 2.0, 2.0], None, True), shape, fmt)


@pytest.mark.parametrize("nearest", ["floor", "ceil", "round_prefer_ceil"])
def test_nearest_modes_pick_the_depth_slice_as_onnx(nearest):
    shape = (1, 2, 5, 3, 4)
    _check(_model(shape, "nearest", "half_pixel", [1.7, 1.0, 0.7], None, False, nearest),
           shape)
