"""Pad with negative pads (a crop) runs on the device as a Slice and a Pad of the rest
(prepare/canonicalize.py): the device Pad takes no negative pad, and the host Pad it fell to
cut the device program (RWKV's token shift, torch's ZeroPad2d((0, 0, 1, -1)): seven device
programs and six host round trips)."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from graphengine.engine.importers import load_model
from graphengine.engine.pipeline import CompileOptions, compile_graph
from graphengine.engine.runtime import LoadedModel

RNG = np.random.default_rng(41)


def _run(pads, shape, mode="constant", axes=None, value=None):
    inits = [numpy_helper.from_array(np.array(pads, np.int64), "pads")]
    ins = ["h", "pads"]
    if value is not None or axes is not None:
        inits.append(numpy_helper.from_array(np.array(value or 0.0, np.float32), "value"))
        ins.append("value")
    if axes is not None:
        inits.append(numpy_helper.from_array(np.array(axes, np.int64), "axes"))
        ins.append("axes")
    nodes = [helper.make_node("Relu", ["x"], ["h"]),  # device work on both sides
             helper.make_node("Pad", ins, ["y"], mode=mode)]
    graph = helper.make_graph(nodes, "crop",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                              initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=8)
    compiled = compile_graph(load_model(model), CompileOptions(lint=True))
    x = RNG.standard_normal(shape).astype(np.float32)
    got = LoadedModel(compiled).execute({"x": x})
    (want,) = ort.InferenceSession(model.SerializeToString(), providers=[
        "CPUExecutionProvider"]).run(None, {"x": x})
    assert list(got) == ["y"]  # the graph output keeps its name
    np.testing.assert_array_equal(got["y"], want)
    return {p.op_type: p.engine for p in compiled.report.placements}


def test_token_shift_runs_on_the_device():
    """One step later along the sequence, the last step dropped: [1, 24, 128]."""
    engines = _run([0, 1, 0, 0, -1, 0], [1, 24, 128])
    assert set(engines.values()) == {"device"}, engines
    assert "Slice" in engines and "Pad" in engines, engines


@pytest.mark.parametrize("mode", ["reflect", "edge", "constant"])
def test_a_crop_alone_is_a_slice_in_any_mode(mode):
    engines = _run([0, -2, 0, -1, 0, 0, -3, -1], [2, 7, 5, 6], mode=mode)
    assert set(engines.values()) == {"device"} and "Pad" not in engines, engines


def test_pads_over_some_axes_with_a_value():
    engines = _run([-1, 2, 1, -2], [3, 8, 9], axes=[1, 2], value=1.5)
    assert set(engines.values()) == {"device"}, engines


def test_a_reflect_pad_with_a_crop_keeps_its_own_form():
    """Whether the crop or the reflection comes first changes what is reflected: left as it
    was (on the host), and still right."""
    engines = _run([0, 2, 0, -1], [4, 9], mode="reflect")
    assert engines["Pad"] == "host", engines
