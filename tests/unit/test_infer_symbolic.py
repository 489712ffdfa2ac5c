"""Symbolic shape inference keeps the batch through what exporters write around it.

Each case is a pattern a real exporter produced that lost the batch symbol (the output got a
fresh one, so gears could not prove the output follows the batch and were refused).
"""

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from graphengine.engine.importers import load_model
from graphengine.engine.pipeline import analyze


def _outputs(nodes, inputs, inits, opset=17):
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in inputs],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(v, k) for k, v in inits.items()])
    g = load_model(helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)],
                                     ir_version=8))
    analyze(g)
    return g.outputs[0].meta.shape


def test_resize_to_sizes_built_from_the_input_shape_keeps_the_batch():
    # torch's F.interpolate(size=...): sizes = Concat(Shape(x)[0:2], Cast([H, W]))
    nodes = [helper.make_node("Shape", ["x"], ["s"]),
             helper.make_node("Slice", ["s", "zero", "two", "zero"], ["nc"]),
             helper.make_node("Cast", ["hw32"], ["hw"], to=TensorProto.INT64),
             helper.make_node("Concat", ["nc", "hw"], ["sizes"], axis=0),
             helper.make_node("Resize", ["x", "", "", "sizes"], ["y"], mode="linear",
                              coordinate_transformation_mode="align_corners")]
    inits = {"zero": np.array([0], np.int64), "two": np.array([2], np.int64),
             "hw32": np.array([16, 24], np.int32)}
    assert _outputs(nodes, [("x", ["batch", 4, 8, 8])], inits) == ("batch", 4, 16, 24)


def test_cast_between_integer_types_keeps_symbolic_dims():
    nodes = [helper.make_node("Shape", ["x"], ["s"]),
             helper.make_node("Cast", ["s"], ["s32"], to=TensorProto.INT32),
             helper.make_node("Cast", ["s32"], ["s64"], to=TensorProto.INT64),
             helper.make_node("Reshape", ["z", "s64"], ["y"])]
    inputs = [("x", ["n", 6]), ("z", ["n", 2, 3])]
    assert _outputs(nodes, inputs, {}) == ("n", 6)


@pytest.mark.parametrize("start,end,step", [
    (0, 10**9, 1),             # tf2onnx's strided_slice with a begin/end mask
    (0, 2**31 - 1, 1),
    (0, 2**63 - 1, 1),
    (-1, -(2**63), -1),        # a whole axis reversed
])
def test_a_slice_of_a_whole_symbolic_axis_keeps_it(start, end, step):
    nodes = [helper.make_node("Slice", ["x", "st", "en", "ax", "sp"], ["y"])]
    inits = {"st": np.array([start, 0], np.int64), "en": np.array([end, 2], np.int64),
             "ax": np.array([0, 1], np.int64), "sp": np.array([step, 1], np.int64)}
    assert _outputs(nodes, [("x", ["unk__214", 5])], inits) == ("unk__214", 2)


def test_a_partial_slice_of_a_symbolic_axis_is_a_new_symbol():
    nodes = [helper.make_node("Slice", ["x", "st", "en", "ax"], ["y"])]
    inits = {"st": np.array([1], np.int64), "en": np.array([10**9], np.int64),
             "ax": np.array([0], np.int64)}
    dim = _outputs(nodes, [("x", ["b", 5])], inits)[0]
    assert isinstance(dim, str) and dim != "b"
