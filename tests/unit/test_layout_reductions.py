"""Reductions and spatial gates inside an NHWC convolution region.

A reduction keeping the rank (Layout.REDUCE: coordinate attention's means over W and over
H, CBAM's channel max and mean) reads and writes NHWC; an elementwise region multiplying
the features by gates broadcast over H or W ([N, C, H, 1], [N, C, 1, W]) or by a per-pixel
map reads them as stored; a Transpose moving only unit axes ([N, C, 1, W] to [N, C, W, 1])
is a view. Before, each block left the region twice at full size (into the reductions and
into the gating region) and ran its Transposes as tasks between two conversions."""

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from graphengine.engine.importers import load_model
from graphengine.engine.model import DeviceProgram
from graphengine.engine.pipeline import CompileOptions, compile_graph
from graphengine.engine.runtime import load

RNG = np.random.default_rng(41)


def _model(nodes, inits, batch, hw, name):
    graph = helper.make_graph(
        nodes, name, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, 3, *hw])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(v, k) for k, v in inits.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def _coord_attention(c: int, batch: int, hw=(10, 7)):
    """conv -> [mean over W, mean over H transposed to a column] -> Concat along H -> 1x1
    conv -> ReLU -> Split back (Slice) -> the W half transposed to a row -> two 1x1 convs ->
    x * sigmoid(gate_h) * sigmoid(gate_w) -> conv."""
    h, w = hw
    mid = max(4, c // 4)
    f = np.float32
    inits = {"w1": RNG.normal(0, 0.3, (c, 3, 3, 3)).astype(f),
             "wr": RNG.normal(0, 0.3, (mid, c, 1, 1)).astype(f),
             "wh": RNG.normal(0, 0.3, (c, mid, 1, 1)).astype(f),
             "ww": RNG.normal(0, 0.3, (c, mid, 1, 1)).astype(f),
             "w3": RNG.normal(0, 0.3, (5, c, 3, 3)).astype(f),
             "s0": np.asarray([0], np.int64), "sh": np.asarray([h], np.int64),
             "se": np.asarray([h + w], np.int64), "a2": np.asarray([2], np.int64)}
    nodes = [helper.make_node("Conv", ["x", "w1"], ["a"], pads=[1, 1, 1, 1]),
             helper.make_node("ReduceMean", ["a"], ["mh"], axes=[3]),          # [N, C, H, 1]
             helper.make_node("ReduceMean", ["a"], ["mw"], axes=[2]),          # [N, C, 1, W]
             helper.make_node("Transpose", ["mw"], ["mwt"], perm=[0, 1, 3, 2]),
             helper.make_node("Concat", ["mh", "mwt"], ["cat"], axis=2),
             helper.make_node("Conv", ["cat", "wr"], ["r"]),
             helper.make_node("Relu", ["r"], ["rr"]),
             helper.make_node("Slice", ["rr", "s0", "sh", "a2"], ["th"]),
             helper.make_node("Slice", ["rr", "sh", "se", "a2"], ["tw"]),
             helper.make_node("Transpose", ["tw"], ["twt"], perm=[0, 1, 3, 2]),
             helper.make_node("Conv", ["th", "wh"], ["gh"]),
             helper.make_node("Conv", ["twt", "ww"], ["gw"]),
             helper.make_node("Sigmoid", ["gh"], ["sgh"]),
             helper.make_node("Sigmoid", ["gw"], ["sgw"]),
             helper.make_node("Mul", ["a", "sgw"], ["m1"]),
             helper.make_node("Mul", ["m1", "sgh"], ["m2"]),
             helper.make_node("Conv", ["m2", "w3"], ["y"], pads=[1, 1, 1, 1])]
    return _model(nodes, inits, batch, hw, "coord_attention")


def _cbam_spatial(c: int, batch: int, hw=(9, 8)):
    """conv -> channel max and channel mean ([N, 1, H, W] each) -> Concat -> 7x7 conv ->
    sigmoid -> x * map -> conv."""
    f = np.float32
    inits = {"w1": RNG.normal(0, 0.3, (c, 3, 3, 3)).astype(f),
             "ws": RNG.normal(0, 0.3, (1, 2, 7, 7)).astype(f),
             "w3": RNG.normal(0, 0.3, (5, c, 3, 3)).astype(f)}
    nodes = [helper.make_node("Conv", ["x", "w1"], ["a"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["a"], ["ar"]),
             helper.make_node("ReduceMax", ["ar"], ["cmax"], axes=[1]),
             helper.make_node("ReduceMean", ["ar"], ["cmean"], axes=[1]),
             helper.make_node("Concat", ["cmax", "cmean"], ["cat"], axis=1),
             helper.make_node("Conv", ["cat", "ws"], ["s"], pads=[3, 3, 3, 3]),
             helper.make_node("Sigmoid", ["s"], ["ss"]),
             helper.make_node("Mul", ["ar", "ss"], ["g"]),
             helper.make_node("Conv", ["g", "w3"], ["y"], pads=[1, 1, 1, 1])]
    return _model(nodes, inits, batch, hw, "cbam_spatial")


def _compile_and_check(model, batch: int, hw, fmt: str = "nhwc") -> DeviceProgram:
    compiled = compile_graph(load_model(model), CompileOptions(lint=True, layout_format=fmt))
    x = RNG.standard_normal((batch, 3, *hw)).astype(np.float32)
    ours = load(compiled).execute({"x": x})
    ref = ort.InferenceSession(model.SerializeToString(),
                               providers=["CPUExecutionProvider"]).run(None, {"x": x})
    np.testing.assert_allclose(ours["y"], ref[0], rtol=1e-4, atol=1e-4)
    (prog,) = [p for p in compiled.programs if isinstance(p, DeviceProgram)]
    return prog


def _full_size_conversions(prog: DeviceProgram, c: int) -> list[tuple[int, ...]]:
    """Shapes the TransData tasks convert that have the features' C channels and H x W."""
    shapes = [tuple(prog.tensors[t.inputs[0]].shape) for t in prog.tasks if t.op == "TransData"]
    return [s for s in shapes if s[1] == c and s[2] > 1 and s[3] > 1]


def _formats(prog: DeviceProgram, op: str) -> list[str]:
    return [prog.tensors[i].format for t in prog.tasks if t.op == op
            for i in (t.inputs[0], t.outputs[0])]


@pytest.mark.parametrize("c", [8, 24])
@pytest.mark.parametrize("batch", [1, 3])
def test_coordinate_attention_stays_in_the_region(c, batch):
    """Both means read and write NHWC, the gating region reads the features and both gates
    as stored, the two Transposes are views: no full-size conversion and no Transpose task;
    outputs equal onnxruntime's."""
    prog = _compile_and_check(_coord_attention(c, batch), batch, (10, 7))
    assert _formats(prog, "ReduceMean") == ["nhwc"] * 4
    assert _full_size_conversions(prog, c) == []
    assert not [t.name for t in prog.tasks if t.op == "Transpose"]
    (gate,) = [t for t in prog.tasks if t.op in ("EltwiseGraph", "Mul")
               and prog.tensors[t.outputs[0]].shape[1:] == [c, 10, 7]]
    assert {prog.tensors[i].format for i in gate.inputs} == {"nhwc"}, gate


@pytest.mark.parametrize("batch", [1, 2])
def test_channel_pooling_stays_in_the_region(batch):
    """CBAM's channel max and mean read NHWC (their one-channel outputs are the same bytes
    either way) and the features never leave the region; outputs equal onnxruntime's."""
    prog = _compile_and_check(_cbam_spatial(16, batch), batch, (9, 8))
    assert set(_formats(prog, "ReduceMax")) == {"nhwc"}
    assert _full_size_conversions(prog, 16) == []


def test_reductions_stay_plain_in_a_blocked_region():
    """A blocked region (asked for) keeps the reductions plain, converted around: the
    runtime folds NHWC only; outputs equal onnxruntime's."""
    prog = _compile_and_check(_coord_attention(16, 2), 2, (10, 7), fmt="nChw16c")
    assert set(_formats(prog, "ReduceMean")) <= {"", "nchw"}
