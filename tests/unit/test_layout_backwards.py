"""The layout region grows backwards through an upsampling Resize (and chains of them) whose
only readers are in the region: a dense-prediction decoder (GLPN, SegFormer-style heads)
gates its map with a [N, 1, H, W] attention (a broadcasting Mul, plain NCHW), upsamples it
twice and convolves it. The conversion into the region then runs on the small map before the
Resizes instead of on the full-resolution one after them."""

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from graphengine.engine.model import DeviceProgram
from tests.unit.test_layout_pad import _compile_and_check

RNG = np.random.default_rng(11)


def _gated_decoder(channels: int, batch: int, scale: float, rows: bool = True, size: int = 8):
    """conv -> conv to 2 maps -> sigmoid -> Slice the first (-> its mean over H: a
    [N, 1, 1, W] gate, which a Mul broadcasts plain only, if `rows`) -> Mul (broadcast over
    channels) -> Resize(scale) -> Resize(scale) -> conv head."""
    c = channels
    inits = [numpy_helper.from_array(RNG.normal(0, 0.3, s).astype(np.float32), n)
             for n, s in (("w1", (c, 3, 3, 3)), ("wa", (2, c, 3, 3)), ("w3", (4, c, 3, 3)))]
    inits += [numpy_helper.from_array(np.asarray([1, 1, scale, scale], np.float32), "scales"),
              numpy_helper.from_array(np.asarray([0], np.int64), "s0"),
              numpy_helper.from_array(np.asarray([1], np.int64), "s1"),
              numpy_helper.from_array(np.asarray([1], np.int64), "ax")]
    kw = {"mode": "linear", "coordinate_transformation_mode": "half_pixel"}
    nodes = [helper.make_node("Conv", ["x", "w1"], ["a"], pads=[1, 1, 1, 1]),
             helper.make_node("Conv", ["a", "wa"], ["att"], pads=[1, 1, 1, 1]),
             helper.make_node("Sigmoid", ["att"], ["sig"]),
             helper.make_node("Slice", ["sig", "s0", "s1", "ax"], ["gate"]),
             helper.make_node("ReduceMean", ["gate"], ["gate_rows"], axes=[2]),
             helper.make_node("Mul", ["a", "gate_rows" if rows else "gate"], ["g"]),
             helper.make_node("Resize", ["g", "", "scales"], ["u1"], **kw),
             helper.make_node("Resize", ["u1", "", "scales"], ["u2"], **kw),
             helper.make_node("Conv", ["u2", "w3"], ["y"], pads=[1, 1, 1, 1])]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, 3, size, size])
    graph = helper.make_graph(nodes, "gated_decoder", [x], [
        helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def _into_region(prog: DeviceProgram) -> list[tuple[int, ...]]:
    """Shapes of the values the TransData tasks convert out of plain NCHW, but the image."""
    return [tuple(prog.tensors[t.inputs[0]].shape) for t in prog.tasks if t.op == "TransData"
            and prog.tensors[t.inputs[0]].format in ("", "nchw")
            and prog.tensors[t.inputs[0]].shape[1] != 3]


@pytest.mark.parametrize("fmt,channels", [("nhwc", 5), ("nhwc", 16), ("nChw16c", 16),
                                          ("nChw8c", 12)])
@pytest.mark.parametrize("batch", [1, 3])
def test_upsampling_resizes_join_the_region_of_their_reader(fmt, channels, batch):
    """Both Resizes run in a region format; the gated map enters the region once, at its
    small size (8x8), not after the x4 upsampling; outputs equal onnxruntime's."""
    prog = _compile_and_check(_gated_decoder(channels, batch, 2.0), fmt, batch, hw=(8, 8))
    formats = [prog.tensors[t.outputs[0]].format for t in prog.tasks if t.op == "Resize"]
    assert len(formats) == 2 and all(f not in ("", "nchw") for f in formats), formats
    assert _into_region(prog) == [(batch, channels, 8, 8)], _into_region(prog)



def _gated_concat(channels: int, batch: int, rows: bool = True):
    """Two gated maps (broadcasting Muls, plain if `rows`: the gates' means over H), the
    second upsampled x2 (the first is at the target size), joined by a Concat over channels
    and fused by a 1x1 conv: an all-MLP decoder's upsample + Concat + fuse."""
    c = channels
    inits = [numpy_helper.from_array(RNG.normal(0, 0.3, s).astype(np.float32), n)
             for n, s in (("w1", (c, 3, 3, 3)), ("w2", (c, c, 3, 3)), ("wa", (1, c, 3, 3)),
                          ("wf", (4, 2 * c, 1, 1)))]
    inits += [numpy_helper.from_array(np.asarray([1, 1, 2, 2], np.float32), "scales")]
    kw = {"mode": "linear", "coordinate_transformation_mode": "half_pixel"}
    nodes = [helper.make_node("Conv", ["x", "w1"], ["a"], pads=[1, 1, 1, 1]),
             helper.make_node("Conv", ["a", "wa"], ["att"], pads=[1, 1, 1, 1]),
             helper.make_node("Sigmoid", ["att"], ["gate"]),
             helper.make_node("MaxPool", ["gate"], ["gp"], kernel_shape=[2, 2], strides=[2, 2]),
             helper.make_node("ReduceMean", ["gate"], ["gate_r"], axes=[2]),
             helper.make_node("ReduceMean", ["gp"], ["gp_r"], axes=[2]),
             helper.make_node("Mul", ["a", "gate_r" if rows else "gate"], ["g1"]),
             helper.make_node("Conv", ["a", "w2"], ["b"], pads=[1, 1, 1, 1], strides=[2, 2]),
             helper.make_node("Mul", ["b", "gp_r" if rows else "gp"], ["g2"]),
             helper.make_node("Resize", ["g2", "", "scales"], ["u2"], **kw),
             helper.make_node("Concat", ["g1", "u2"], ["cat"], axis=1),
             helper.make_node("Conv", ["cat", "wf"], ["y"])]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, 3, 8, 8])
    graph = helper.make_graph(nodes, "gated_concat", [x], [
        helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


@pytest.mark.parametrize("fmt,channels", [("nhwc", 5), ("nChw16c", 16), ("nChw8c", 12)])
@pytest.mark.parametrize("batch", [1, 2])
def test_concat_of_upsampled_maps_joins_the_region(fmt, channels, batch):
    """The Concat into the fuse conv and the Resize before it run in a region format; the
    maps enter the region where they are made (the second before its upsampling), not as
    the joined full-size map; outputs equal onnxruntime's."""
    prog = _compile_and_check(_gated_concat(channels, batch), fmt, batch, hw=(8, 8))
    formats = [prog.tensors[t.outputs[0]].format for t in prog.tasks
               if t.op in ("Resize", "Concat")]
    assert len(formats) == 2 and all(f not in ("", "nchw") for f in formats), formats
    assert sorted(_into_region(prog)) == [(batch, channels, 4, 4), (batch, channels, 8, 8)], \
        _into_region(prog)
