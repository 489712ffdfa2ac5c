"""Graphs of the newly device-run ops between convolutions: one device partition, the
layout pass converting to plain NCHW around the ops that need it, results as ORT's."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from graphengine.engine.model import DeviceProgram, HostProgram
from graphengine.engine.runtime import load
from tests.unit.device_cases import compile_model, onnxruntime, randn


def _conv_resize_conv(tail: bool) -> onnx.ModelProto:
    """Conv -> Resize(nearest 2x) -> Conv, and with `tail` -> Split(C) -> Concat(C)."""
    inits = {"w1": randn(8, 3, 3, 3), "b1": randn(8), "w2": randn(16, 8, 3, 3),
             "scales": np.array([1, 1, 2, 2], np.float32)}
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
             helper.make_node("Resize", ["c1", "", "scales"], ["r"], mode="nearest"),
             helper.make_node("Conv", ["r", "w2"], ["c2"], pads=[1, 1, 1, 1])]
    out = "c2"
    if tail:
        inits["split"] = np.array([4, 12], np.int64)
        nodes += [helper.make_node("Split", ["c2", "split"], ["s0", "s1"], axis=1),
                  helper.make_node("Concat", ["s1", "s0"], ["y"], axis=1)]
        out = "y"
    graph = helper.make_graph(
        nodes, "conv_resize", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                             [2, 3, 10, 12])],
        [helper.make_tensor_value_info(out, TensorProto.FLOAT, None)],
        [numpy_helper.from_array(v, k) for k, v in inits.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=8)


@pytest.mark.parametrize("fmt", ["nhwc", "nChw16c", "nChw8c"])
@pytest.mark.parametrize("tail", [False, True])
def test_conv_resize_conv_in_every_region_format(fmt, tail):
    m = _conv_resize_conv(tail)
    compiled = compile_model(m, layout_format=fmt)
    (prog,) = compiled.programs  # one device partition, no host step
    assert isinstance(prog, DeviceProgram)
    slots = prog.tensors
    for task in prog.tasks:
        if task.op in ("Resize", "Split"):  # in the region's format (NHWC where the split
            # parts do not fill whole blocks), one format for all their operands
            formats = {slots[i].format for i in task.inputs + task.outputs}
            assert len(formats) == 1 and formats != {"nchw"}, task
    convs = [t for t in prog.tasks if t.op == "Conv"]
    assert any(slots[t.outputs[0]].format == fmt for t in convs)
    feeds = {"x": randn(2, 3, 10, 12)}
    got = list(load(compiled).execute(feeds).values())
    (want,) = onnxruntime(m, feeds)
    np.testing.assert_allclose(got[0], want, rtol=1e-4, atol=1e-4)


def test_conv_resize_conv_split_concat_is_one_device_partition():
    compiled = compile_model(_conv_resize_conv(tail=True))
    assert {p.engine for p in compiled.report.placements} == {"device"}
    assert len(compiled.programs) == 1 and not any(
        isinstance(p, HostProgram) for p in compiled.programs)
    ops = [t.op for t in compiled.programs[0].tasks if t.kind == "kernel"]
    for op in ("Conv", "Resize", "Split", "Concat"):
        assert op in ops
