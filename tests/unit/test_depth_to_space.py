"""DepthToSpace (both modes) and SpaceToDepth run on the device as view, Transpose, view
(Swin2SR's PixelShuffle upsampler was a host step between two device programs), exact
against ONNX Runtime."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from graphengine.engine.importers import load_model
from graphengine.engine.pipeline import CompileOptions, compile_graph
from graphengine.engine.runtime import DeviceProgram, LoadedModel


def _check(op: str, shape: list[int], **attrs) -> list[str]:
    node = helper.make_node(op, ["x"], ["y"], **attrs)
    graph = helper.make_graph(
        [helper.make_node("Relu", ["x0"], ["x"]), node], "d2s",
        [helper.make_tensor_value_info("x0", TensorProto.FLOAT, shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    feeds = {"x0": np.random.default_rng(2).standard_normal(shape).astype(np.float32)}
    compiled = compile_graph(load_model(model), CompileOptions(lint=True))
    assert [type(p).__name__ for p in compiled.programs] == ["DeviceProgram"]
    got = LoadedModel(compiled).execute(feeds)["y"]
    want = ort.InferenceSession(model.SerializeToString(), providers=[
        "CPUExecutionProvider"]).run(None, feeds)[0]
    np.testing.assert_array_equal(got, want)
    return [t.op for p in compiled.programs if isinstance(p, DeviceProgram) for t in p.tasks
            if t.kind == "kernel"]


@pytest.mark.parametrize("mode", ["DCR", "CRD"])
@pytest.mark.parametrize("b,shape", [(2, [2, 12, 5, 7]), (3, [1, 18, 4, 4]), (1, [1, 3, 2, 2])])
def test_depth_to_space_both_modes(mode, b, shape):
    kinds = _check("DepthToSpace", shape, blocksize=b, mode=mode)
    assert "DepthToSpace" not in kinds, kinds


@pytest.mark.parametrize("b,shape", [(2, [2, 3, 8, 6]), (4, [1, 5, 8, 12])])
def test_space_to_depth(b, shape):
    kinds = _check("SpaceToDepth", shape, blocksize=b)
    assert "SpaceToDepth" not in kinds, kinds
