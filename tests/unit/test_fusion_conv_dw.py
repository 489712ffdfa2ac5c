"""Fusion row conv_dw: 1x1 Conv + 3x3 depthwise Conv as one graphengine.ConvDw node (oneDNN
depthwise post-op)."""

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from graphengine import _runtime
from graphengine.engine.importers import load_model
from graphengine.engine.ops.conv_fused import CONV_BLOCK, CONV_DW
from graphengine.engine.pipeline import CompileOptions, compile_graph
from graphengine.engine.runtime import load
from tests.unit.conv_spec import conv_ops, conv_task_spec

RNG = np.random.default_rng(7)
DW = "ConvDw:"


def _model(nodes, x_shape, outputs, inits):
    graph = helper.make_graph(
        nodes, "conv_dw", [helper.make_tensor_value_info("x", TensorProto.FLOAT, x_shape)],
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in outputs],
        [numpy_helper.from_array(np.asarray(v, np.float32), k) for k, v in inits.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def _block(c=8, m=24, stride=1, act1="Clip", act2="Clip", bias=True, dw_bias=True,
           residual=False, project=None, dw_group=None, dw_pads=(1, 1, 1, 1), pw_kernel=1,
           extra_reader=False, intermediate_output=False):
    """x -> 1x1 Conv (c->m) [-> act1] -> 3x3 depthwise Conv [-> act2] [-> project 1x1 (+x)]."""
    inits = {"w1": RNG.normal(0, 0.3, (m, c, pw_kernel, pw_kernel)),
             "w2": RNG.normal(0, 0.3, (m, (m // dw_group) if dw_group else 1, 3, 3)),
             "lo": np.float32(0.0), "hi": np.float32(6.0)}
    if bias:
        inits["b1"] = RNG.normal(0, 0.5, m)
    if dw_bias:
        inits["b2"] = RNG.normal(0, 0.5, m)
    pw_pad = (pw_kernel // 2,) * 4
    nodes = [helper.make_node("Conv", ["x", "w1"] + (["b1"] if bias else []), ["e"],
                              kernel_shape=[pw_kernel, pw_kernel], pads=list(pw_pad))]
    h = "e"
    for act, tag in ((act1, "1"),):
        if act:
            nodes.append(_act(act, h, "a" + tag))
            h = "a" + tag
    nodes.append(helper.make_node("Conv", [h, "w2"] + (["b2"] if dw_bias else []), ["d"],
                                  kernel_shape=[3, 3], pads=list(dw_pads),
                                  strides=[stride, stride], group=dw_group or m))
    out = "d"
    if act2:
        nodes.append(_act(act2, "d", "a2"))
        out = "a2"
    outputs = []
    if project or residual:
        inits["w3"] = RNG.normal(0, 0.3, (c, m, 1, 1))
        nodes.append(helper.make_node("Conv", [out, "w3"], ["p"]))
        out = "p"
        if residual:
            nodes.append(helper.make_node("Add", ["p", "x"], ["r"]))
            out = "r"
    outputs.append(out)
    if extra_reader:  # a second reader of the expanded activation
        nodes.append(helper.make_node("Relu", [h], ["side"]))
        outputs.append("side")
    if intermediate_output:
        outputs.append(h)
    return _model(nodes, None, outputs, inits)


def _act(kind, x, y):
    if kind == "Clip":
        return helper.make_node("Clip", [x, "lo", "hi"], [y])
    return helper.make_node(kind, [x], [y])


def _run(model, x):
    model.graph.input[0].CopyFrom(
        helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x.shape)))
    compiled = compile_graph(load_model(model), CompileOptions(lint=True))
    ours = list(load(compiled).execute({"x": x}).values())
    ref = ort.InferenceSession(model.SerializeToString()).run(None, {"x": x})
    assert len(ours) == len(ref)
    for got, want in zip(ours, ref):
        assert got.shape == want.shape
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    return compiled


def _dw_fusions(compiled):
    return [f for f in compiled.report.fusions if f.startswith(DW)]


@pytest.mark.parametrize("stride", [1, 2])
@pytest.mark.parametrize("acts", [("Clip", "Clip"), ("Relu", None), (None, None),
                                  (None, "Relu")])
def test_pair_fuses_and_matches_onnxruntime(stride, acts):
    x = RNG.normal(size=(2, 8, 9, 10)).astype(np.float32)
    compiled = _run(_block(stride=stride, act1=acts[0], act2=acts[1]), x)
    assert len(_dw_fusions(compiled)) == 1
    assert conv_ops(compiled) == {CONV_DW: 1}
    (task,) = [t for p in compiled.programs for t in getattr(p, "tasks", []) if t.kind == "kernel"
               and t.op != "TransData"]
    assert task.op == "ConvDw" and task.attrs["dw_stride"] == stride
    assert not any(k.startswith("_") or k == "dw" for k in task.attrs)


@pytest.mark.parametrize("shape", [(1, 8, 7, 7), (3, 8, 16, 16), (1, 8, 1, 1), (2, 8, 2, 5)])
@pytest.mark.parametrize("stride", [1, 2])
def test_shapes_and_missing_biases(shape, stride):
    x = RNG.normal(size=shape).astype(np.float32)
    compiled = _run(_block(m=32, stride=stride, bias=False, dw_bias=False), x)
    assert len(_dw_fusions(compiled)) == 1


@pytest.mark.parametrize("stride", [1, 2])
def test_inverted_residual_block(stride):
    # expand -> dw -> project (+ residual when the shapes allow it, as in MobileNetV2)
    residual = stride == 1
    x = RNG.normal(size=(2, 8, 12, 12)).astype(np.float32)
    compiled = _run(_block(stride=stride, project=True, residual=residual), x)
    assert len(_dw_fusions(compiled)) == 1
    # the projection joins too where the block kernel runs (test_fusion_conv_block.py)
    assert conv_ops(compiled) == ({CONV_BLOCK: 1} if _runtime.conv_block_available()
                                  else {CONV_DW: 1, "Conv": 1})
    assert any("residual" in f for f in compiled.report.fusions) == residual


def test_zoo_mobilenetv2_fuses_every_expand_pair():
    from tests.zoo import mobilenetv2, random_inputs

    model = mobilenetv2(batch=1)
    feeds = random_inputs(model, seed=3)
    compiled = compile_graph(load_model(model), CompileOptions(lint=True))
    ours = list(load(compiled).execute(feeds).values())
    ref = ort.InferenceSession(model.SerializeToString()).run(None, feeds)
    np.testing.assert_allclose(ours[0], ref[0], rtol=1e-3, atol=1e-4)
    expands = sum(1 for n in model.graph.node if n.op_type == "Conv"
                  and any(a.name == "group" and a.i > 1 for a in n.attribute))
    # every depthwise conv but the first block's (which has no expand conv) is fused
    assert len(_dw_fusions(compiled)) == expands - 1


@pytest.mark.parametrize("kwargs", [
    {"extra_reader": True},             # the expanded activation has another reader
    {"intermediate_output": True},      # ... or is a graph output
    {"dw_group": 4},                    # grouped, not depthwise
    {"dw_group": 1},                    # a dense 3x3 conv
    {"dw_pads": (0, 0, 0, 0)},          # the post-op pads by 1
    {"dw_pads": (1, 1, 0, 0)},
    {"pw_kernel": 3},                   # the first conv is not 1x1
    {"stride": 3},
])
def test_row_does_not_fire(kwargs):
    x = RNG.normal(size=(1, 8, 10, 10)).astype(np.float32)
    compiled = _run(_block(**kwargs), x)
    assert _dw_fusions(compiled) == []


def test_dw_with_residual_on_the_depthwise_output_is_not_fused():
    # d + x: the depthwise conv takes the residual (sum post-op); no depthwise post-op then
    c = 8
    inits = {"w1": RNG.normal(0, 0.3, (c, c, 1, 1)), "w2": RNG.normal(0, 0.3, (c, 1, 3, 3))}
    nodes = [helper.make_node("Conv", ["x", "w1"], ["e"]),
             helper.make_node("Conv", ["e", "w2"], ["d"], pads=[1, 1, 1, 1], group=c),
             helper.make_node("Add", ["d", "x"], ["y"])]
    x = RNG.normal(size=(1, c, 6, 6)).astype(np.float32)
    compiled = _run(_model(nodes, None, ["y"], inits), x)
    assert _dw_fusions(compiled) == []
    assert any("residual" in f for f in compiled.report.fusions)


def test_fusion_off_gives_the_same_numbers():
    model = _block(stride=2)
    x = RNG.normal(size=(2, 8, 11, 11)).astype(np.float32)
    model.graph.input[0].CopyFrom(
        helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x.shape)))
    g = load_model(model)
    fused = load(compile_graph(g)).execute({"x": x})
    plain = load(compile_graph(g, CompileOptions(fuse=False))).execute({"x": x})
    for a, b in zip(fused.values(), plain.values()):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-4)


# ---- the runtime kernel's checks (bad specs give InvalidArgument naming the node) ------
def _spec(dw_w_shape=(16, 1, 3, 3), dw_b_shape=(16,), stride=1, y_hw=6, pw=(16, 8, 1, 1),
          attrs=None, dw_w_region="weight", sum_=False):
    shapes = {"x": [1, 8, 6, 6], "w": list(pw), "b": [pw[0]], "dww": list(dw_w_shape),
              "dwb": list(dw_b_shape), "y": [1, pw[0], y_hw, y_hw]}
    arena = {"x", "y"} | ({"dww"} if dw_w_region == "arena" else set())
    task_attrs = {"dw_stride": stride, **({"sum": 1} if sum_ else {}), **(attrs or {})}
    return conv_task_spec(shapes, arena, [0, 1, 2, 3, 4] + ([0] if sum_ else []), 5, task_attrs,
                          "fused_conv", op="ConvDw")


def test_kernel_runs_a_valid_spec():
    model = _runtime.Model(_runtime.Device(1), _spec())
    out = model.execute([np.ones((1, 8, 6, 6), np.float32)])
    assert out[0].shape == (1, 16, 6, 6)
    np.testing.assert_array_equal(out[0], 0)  # zero weights and biases


@pytest.mark.parametrize("kwargs,message", [
    ({"dw_w_shape": (16, 1, 5, 5)}, "depthwise weight shape"),
    ({"dw_w_shape": (8, 1, 3, 3)}, "depthwise weight shape"),
    ({"dw_b_shape": (8,)}, "depthwise bias shape"),
    ({"stride": 3}, "dw_stride must be 1 or 2"),
    ({"y_hw": 5}, "does not match computed"),
    ({"stride": 2}, "does not match computed"),
    ({"pw": (16, 8, 3, 3), "attrs": {"pads": [1, 1, 1, 1]}}, "needs a 1x1 convolution"),
    ({"attrs": {"strides": [2, 2]}}, "needs strides 1"),
    ({"attrs": {"dw_activation": "Bogus"}}, "unknown dw_activation 'Bogus'"),
    ({"dw_w_region": "arena"}, "must be constants"),
    ({"sum_": True}, "cannot be combined with sum=1"),
])
def test_kernel_rejects_bad_specs(kwargs, message):
    with pytest.raises(_runtime.InvalidArgument, match=message) as err:
        _runtime.Model(_runtime.Device(1), _spec(**kwargs))
    assert "fused_conv" in str(err.value)


def test_the_plain_conv_kernel_has_no_fused_variants():
    # The depthwise stage is ConvDw's: a Conv task that asks for it by attribute (as fused
    # Conv nodes once did) is refused, not run as something else
    spec = _spec()
    (task,) = spec["tasks"]
    task["op"], task["attrs"]["dw"] = "Conv", 1
    with pytest.raises(_runtime.InvalidArgument, match="expected 2 or 3 inputs") as err:
        _runtime.Model(_runtime.Device(1), spec)
    assert "fused_conv" in str(err.value)
    info = _runtime.kernel_info("Conv", ["float32"] * 5, [[1, 8, 6, 6], [16, 8, 1, 1], [16],
                                                          [16, 1, 3, 3], [16]], {"dw": 1})
    assert not info["supported"] and "takes 2 to 4 inputs" in info["reason"]


def test_row_needs_the_target_s_convdw_kernel(monkeypatch):
    # a backend without the ConvDw kernel keeps the two Convs (engine/target.py)
    import dataclasses

    from graphengine.engine import target as targets

    host = targets.get("host")
    monkeypatch.setitem(targets._FACTORIES, "no_convdw", lambda: dataclasses.replace(
        host, name="no_convdw", ops=host.ops - {"ConvDw", "ConvBlock"}, conv_blocks=False))
    model = _block()
    x = RNG.normal(size=(1, 8, 6, 6)).astype(np.float32)
    model.graph.input[0].CopyFrom(
        helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x.shape)))
    compiled = compile_graph(load_model(model), CompileOptions(target="no_convdw"))
    assert _dw_fusions(compiled) == [] and conv_ops(compiled) == {"Conv": 2}
