"""A Resize of a 1-D signal [N, C, L] runs on the device as the Resize of its view [N, C, 1,
L] (prepare/canonicalize.py, `_as_resize_2d`). Before, the device kernel took 4-D tensors
only: each of a Wave-U-Net's linear upsamplings ran on the host and cut the graph into 11
partitions (70 ms a run, against 2.5 ms for OpenVINO on the whole model)."""

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from graphengine.engine.importers import load_model
from graphengine.engine.model import DeviceProgram
from graphengine.engine.pipeline import CompileOptions, compile_graph
from graphengine.engine.runtime import load

RNG = np.random.default_rng(17)


def _upsampler(batch: int, length: int, mode: str, coord: str, scale: float | None,
               size: int | None, axes: bool):
    """Conv1d -> Resize of L (by scale or to size; with the opset-18 axes attribute if
    `axes`) -> Concat with a Conv1d of the resized input's twin -> Conv1d."""
    c = 6
    f = np.float32
    inits = {"w1": RNG.normal(0, 0.3, (c, 2, 5)).astype(f),
             "w2": RNG.normal(0, 0.3, (3, 2 * c, 3)).astype(f)}
    attrs = {"mode": mode, "coordinate_transformation_mode": coord}
    if axes:
        attrs["axes"] = [2]
    if scale is not None:
        inits["scales"] = np.asarray([scale] if axes else [1.0, 1.0, scale], f)
        resize_inputs = ["a", "", "scales"]
    else:
        inits["sizes"] = np.asarray([size] if axes else [batch, c, size], np.int64)
        resize_inputs = ["a", "", "", "sizes"]
    out_len = int(np.floor(length * scale)) if scale is not None else size
    nodes = [helper.make_node("Conv", ["x", "w1"], ["a"], pads=[2, 2]),
             helper.make_node("Resize", resize_inputs, ["up"], **attrs),
             helper.make_node("Concat", ["up", "up"], ["cat"], axis=1),
             helper.make_node("Conv", ["cat", "w2"], ["y"], pads=[1, 1])]
    graph = helper.make_graph(
        nodes, "upsampler", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                           [batch, 2, length])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, 3, out_len])],
        [numpy_helper.from_array(v, k) for k, v in inits.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=8)


@pytest.mark.parametrize("mode,coord,scale,size", [
    ("linear", "align_corners", None, 37),       # Wave-U-Net: to the skip's length
    ("linear", "half_pixel", 2.0, None),
    ("linear", "pytorch_half_pixel", 1.5, None),
    ("nearest", "asymmetric", 3.0, None),
    ("nearest", "half_pixel", None, 11),          # downsampling
])
@pytest.mark.parametrize("axes", [False, True])
@pytest.mark.parametrize("batch", [1, 3])
def test_a_signal_resize_runs_on_the_device(mode, coord, scale, size, axes, batch):
    model = _upsampler(batch, 19, mode, coord, scale, size, axes)
    compiled = compile_graph(load_model(model), CompileOptions(lint=True))
    assert all(isinstance(p, DeviceProgram) for p in compiled.programs), \
        [type(p).__name__ for p in compiled.programs]
    x = RNG.standard_normal((batch, 2, 19)).astype(np.float32)
    ours = load(compiled).execute({"x": x})["y"]
    (want,) = ort.InferenceSession(model.SerializeToString(),
                                   providers=["CPUExecutionProvider"]).run(None, {"x": x})
    np.testing.assert_allclose(ours, want, rtol=1e-4, atol=1e-5)
