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


def test_products_of_symbols_are_canonical_and_divide_exactly():
    from graphengine.engine.ops import symdims

    assert symdims.mul("b", 4) == symdims.mul(2, "b", 2) == "4*b"
    assert symdims.mul("s", "b") == symdims.mul("b", "s") == "b*s"
    assert symdims.mul("b", 0) == 0 and symdims.mul(3, 5) == 15
    assert symdims.div("4*b", 4) == "b" and symdims.div("b*s", "s") == "b"
    assert symdims.div("4*b", 3) is None and symdims.div("b", "s") is None


def test_a_window_partition_and_reverse_keep_the_batch():
    # swin: [b, 8, 8, C] -> [-1, 4, 4, C] windows (4*b of them) -> back to [-1, 8, 8, C]
    nodes = [helper.make_node("Reshape", ["x", "win"], ["w"]),
             helper.make_node("Relu", ["w"], ["r"]),
             helper.make_node("Reshape", ["r", "back"], ["y"])]
    inits = {"win": np.array([-1, 4, 4, 3], np.int64), "back": np.array([-1, 8, 8, 3], np.int64)}
    assert _outputs(nodes, [("x", ["b", 8, 8, 3])], inits) == ("b", 8, 8, 3)


def test_torch_expand_pattern_keeps_the_batch():
    # torch's expand(b, s): Where(Equal(shape, -1), ones * -1 ... , shape) around a shape of
    # symbols, then Expand; and arange(b) (Range) makes b positions
    nodes = [helper.make_node("Shape", ["x"], ["s"]),
             helper.make_node("ConstantOfShape", ["two"], ["ones"],
                              value=numpy_helper.from_array(np.array([1], np.int64))),
             helper.make_node("Mul", ["ones", "minus1"], ["neg"]),
             helper.make_node("Equal", ["s", "neg"], ["eq"]),
             helper.make_node("Where", ["eq", "ones", "s"], ["target"]),
             helper.make_node("Gather", ["s", "zero"], ["b"], axis=0),
             helper.make_node("Range", ["zero", "b", "one"], ["pos"]),
             helper.make_node("Unsqueeze", ["pos", "one1"], ["pos2"]),
             helper.make_node("Cast", ["pos2"], ["posf"], to=TensorProto.FLOAT),
             helper.make_node("Expand", ["posf", "target"], ["e"]),
             helper.make_node("Add", ["e", "x"], ["y"])]
    inits = {"two": np.array([2], np.int64), "minus1": np.array(-1, np.int64),
             "zero": np.array(0, np.int64), "one": np.array(1, np.int64),
             "one1": np.array([1], np.int64)}
    assert _outputs(nodes, [("x", ["b", 5])], inits) == ("b", 5)


def test_zero_padding_keeps_a_symbolic_dim():
    nodes = [helper.make_node("Pad", ["x", "pads"], ["y"], mode="reflect")]
    inits = {"pads": np.array([0, 0, 1, 1, 0, 0, 1, 1], np.int64)}
    assert _outputs(nodes, [("x", ["n", 3, 8, 8])], inits) == ("n", 3, 10, 10)


def test_pads_computed_through_a_transpose_keep_the_batch():
    # torch's F.pad: pads = Cast(Reshape(Transpose(Slice(Reshape(Concat(...), [-1, 2])))))
    nodes = [helper.make_node("Reshape", ["flat", "m2"], ["pairs"]),
             helper.make_node("Transpose", ["pairs"], ["t"], perm=[1, 0]),
             helper.make_node("Reshape", ["t", "m1"], ["pads"]),
             helper.make_node("Pad", ["x", "pads"], ["y"])]
    inits = {"flat": np.array([0, 0, 0, 0, 1, 1, 2, 2], np.int64),
             "m2": np.array([-1, 2], np.int64), "m1": np.array([-1], np.int64)}
    assert _outputs(nodes, [("x", ["n", 3, 8, 8])], inits) == ("n", 3, 10, 12)


@pytest.mark.parametrize("op", ["AveragePool", "MaxPool"])
def test_a_ceil_mode_window_larger_than_the_input_is_one_clipped_window(op):
    import onnxruntime as ort

    from graphengine import Session

    # HF EfficientNet's pooler: AvgPool2d(640, ceil_mode=True) over a 4x4 map
    node = helper.make_node(op, ["x"], ["y"], kernel_shape=[9, 9], strides=[9, 9],
                            ceil_mode=1, **({"count_include_pad": 1} if op == "AveragePool"
                                            else {}))
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info(
        "x", TensorProto.FLOAT, [2, 3, 4, 5])], [helper.make_tensor_value_info(
            "y", TensorProto.FLOAT, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=8)
    x = np.random.default_rng(0).standard_normal((2, 3, 4, 5)).astype(np.float32)
    want = ort.InferenceSession(model.SerializeToString(),
                                providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    with Session() as sess:
        got = sess.run_graph(sess.add_graph(model), {"x": x})["y"]
    assert got.shape == want.shape == (2, 3, 1, 1)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def _unfold_nodes():
    """A mobile ViT's unfold: the map is padded to whole patches, its size computed as
    ceil(h / p) * p through float arithmetic (Cast, Div, Ceil, Mul, Cast), then reshaped."""
    return [helper.make_node("Shape", ["x"], ["s"]),
            helper.make_node("Gather", ["s", "i2"], ["h"], axis=0),
            helper.make_node("Cast", ["h"], ["hf"], to=TensorProto.FLOAT),
            helper.make_node("Div", ["hf", "p"], ["q"]),
            helper.make_node("Ceil", ["q"], ["c"]),
            helper.make_node("Mul", ["c", "p"], ["hp"]),
            helper.make_node("Cast", ["hp"], ["hi"], to=TensorProto.INT64),
            helper.make_node("Unsqueeze", ["hi", "zero"], ["hu"]),
            helper.make_node("Concat", ["neg", "hu"], ["target"], axis=0),
            helper.make_node("Reshape", ["x", "target"], ["y"])]


_UNFOLD_INITS = {"i2": np.array(2, np.int64), "p": np.array(4.0, np.float32),
                 "zero": np.array([0], np.int64), "neg": np.array([-1], np.int64)}


def test_shape_arithmetic_through_ceil_is_known():
    # Any op constant folding evaluates is evaluated on known shape values: without Ceil
    # the target was unknown and the Reshape's output a fresh symbol.
    assert _outputs(_unfold_nodes(), [("x", ["batch", 4, 8, 8])], _UNFOLD_INITS) == \
        ("32*batch", 8)


def test_shape_arithmetic_through_ceil_needs_no_second_prepare_round():
    from graphengine.engine.pipeline import compile_graph

    graph = helper.make_graph(
        _unfold_nodes() + [helper.make_node("Shape", ["y"], ["ys"]),
                           helper.make_node("Reshape", ["y", "ys"], ["z"])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4, 8, 8])],
        [helper.make_tensor_value_info("z", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(v, k) for k, v in _UNFOLD_INITS.items()])
    g = load_model(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)],
                                     ir_version=8))
    compiled = compile_graph(g, input_shapes={"x": (2, 4, 8, 8)})
    assert compiled.outputs[0].shape == (64, 8)
    folds = [p for p in compiled.report.passes
             if p.stage == "prepare" and p.name == "fold_constants"]
    # the first fold takes the whole chain, the Shape of the Reshape's output too (it is
    # static once inference knows the target); the second round finds nothing left
    assert [p.changed for p in folds] == [True, False]
