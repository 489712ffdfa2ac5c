"""Fusion row conv_stride: when every reader of a Conv's output is a 1x1 Conv without pads
and with stride s (ResNet v1's downsampling as Caffe and TF-slim wrote it), the producer
runs with stride s (its residual sum subsampled by a 1x1 MaxPool), and so does the 3x3 Conv
before a 1x1 producer; the readers run with stride 1."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from graphengine.engine.importers import load_model
from graphengine.engine.pipeline import CompileOptions, compile_graph
from graphengine.engine.runtime import LoadedModel

rng = np.random.default_rng(5)


def _w(cout, cin, k):
    return rng.standard_normal((cout, cin, k, k)).astype(np.float32) * (1.0 / (cin * k * k))


def _block_model(hw=(9, 9), c=8, conv3_attrs=None, stride=(2, 2), readers=None,
                 extra_output=False):
    """x -> 1x1 -> Relu -> 3x3 -> Relu -> 1x1 (+ x) -> Relu = v; v read by `readers`
    (1x1 Convs, by default two with `stride`: the next stage's branch and shortcut)."""
    conv3 = conv3_attrs if conv3_attrs is not None else {"pads": [1, 1, 1, 1]}
    readers = readers if readers is not None else [
        {"strides": list(stride)}, {"strides": list(stride)}]
    inits = [numpy_helper.from_array(_w(c // 2, c, 1), "wa"),
             numpy_helper.from_array(_w(c // 2, c // 2, 3), "wb"),
             numpy_helper.from_array(_w(c, c // 2, 1), "wc"),
             numpy_helper.from_array(rng.standard_normal(c).astype(np.float32), "bc")]
    nodes = [helper.make_node("Conv", ["x", "wa"], ["a"], name="conv_a"),
             helper.make_node("Relu", ["a"], ["ar"]),
             helper.make_node("Conv", ["ar", "wb"], ["b"], name="conv_b", **conv3),
             helper.make_node("Relu", ["b"], ["br"]),
             helper.make_node("Conv", ["br", "wc", "bc"], ["c"], name="conv_c"),
             helper.make_node("Add", ["c", "x"], ["s"]),
             helper.make_node("Relu", ["s"], ["v"])]
    outs = []
    for i, attrs in enumerate(readers):
        inits.append(numpy_helper.from_array(_w(2 * c, c, attrs.pop("k", 1)), f"wr{i}"))
        nodes.append(helper.make_node("Conv", ["v", f"wr{i}"], [f"y{i}"], name=f"reader{i}",
                                      **attrs))
        outs.append(f"y{i}")
    if extra_output:
        outs.append("v")
    g = helper.make_graph(
        nodes, "resnet_v1_stage",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, c, *hw])],
        [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in outs], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def _check(model, hw=(9, 9), c=8):
    compiled = compile_graph(load_model(model), CompileOptions())
    x = rng.standard_normal((2, c, *hw)).astype(np.float32)
    got = LoadedModel(compiled).execute({"x": x})
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    names = [o.name for o in sess.get_outputs()]
    for name, want in zip(names, sess.run(None, {"x": x})):
        np.testing.assert_allclose(got[name], want, rtol=1e-4, atol=1e-5)
    ops = [p.op_type for p in compiled.report.placements]
    return [f for f in compiled.report.fusions if "moved up" in f], ops


@pytest.mark.parametrize("hw, conv3, stride", [
    ((9, 9), {"pads": [1, 1, 1, 1]}, (2, 2)),                 # odd sizes: ceil(9 / 2)
    ((8, 10), {"pads": [1, 1, 1, 1]}, (2, 2)),
    ((9, 9), {"auto_pad": "SAME_UPPER"}, (2, 2)),             # TF's "same", written out
    ((8, 8), {"auto_pad": "SAME_LOWER", "kernel_shape": [3, 3]}, (2, 2)),
    ((10, 10), {"pads": [2, 2, 2, 2], "dilations": [2, 2]}, (2, 2)),
    ((7, 12), {"pads": [0, 1, 2, 1]}, (1, 2)),                # uneven pads, one axis
    ((12, 12), {"pads": [1, 1, 1, 1]}, (3, 3)),
])
def test_the_stride_moves_up_through_the_block(hw, conv3, stride):
    fusions, ops = _check(_block_model(hw, conv3_attrs=conv3, stride=stride), hw)
    assert fusions == [f"Conv stride {stride[0]}x{stride[1]} moved up: conv_c, conv_b strided "
                       f"for reader0, reader1"], fusions
    assert ops.count("MaxPool") == 1  # the residual (x), at the kept pixels only


def test_the_strided_convs_compute_the_subsampled_pixels_only():
    model = _block_model((9, 9))
    compiled = compile_graph(load_model(model), CompileOptions())
    (prog,) = compiled.programs
    convs = {t.name: t for t in prog.tasks if t.op == "Conv"}
    shapes = {name: tuple(compiled_shape) for name, compiled_shape in (
        (n, prog.tensors[t.outputs[0]].shape) for n, t in convs.items())}
    assert shapes["conv_b"][2:] == (5, 5) and shapes["conv_c"][2:] == (5, 5)
    assert shapes["conv_a"][2:] == (9, 9)


@pytest.mark.parametrize("kwargs", [
    {"readers": [{"strides": [2, 2]}, {"strides": [1, 1]}]},        # one reads every pixel
    {"readers": [{"strides": [2, 2]}, {"strides": [1, 2]}]},        # different strides
    {"readers": [{"strides": [2, 2]}, {"strides": [2, 2], "pads": [1, 1, 1, 1]}]},  # padded
    {"readers": [{"strides": [2, 2]}, {"strides": [2, 2], "k": 3}]},  # not 1x1
    {"extra_output": True},                                         # v is a graph output
])
def test_no_move_when_a_reader_needs_other_pixels(kwargs):
    fusions, ops = _check(_block_model(**kwargs))
    assert fusions == [] and "MaxPool" not in ops


def test_a_3x3_producer_of_a_1x1_producer_stays_unless_all_its_readers_subsample():
    # conv_b's output also goes out: conv_c takes the stride, conv_b keeps every pixel
    model = _block_model()
    model.graph.output.append(helper.make_tensor_value_info("br", TensorProto.FLOAT, None))
    fusions, _ = _check(model)
    assert fusions == ["Conv stride 2x2 moved up: conv_c strided for reader0, reader1"]
