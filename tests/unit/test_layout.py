"""Layout assignment: NHWC between convolutions, TransData only at the edges."""

import numpy as np
import onnxruntime as ort
import pytest

from graphengine import _runtime
from graphengine.engine.importers import load_model
from graphengine.engine.model import DeviceProgram
from graphengine.engine.ops.conv_fused import CONV_HEAD
from graphengine.engine.optimize import layout
from graphengine.engine.passes import PassManager
from graphengine.engine.pipeline import CompileOptions, bind_shapes, compile_graph, stages
from graphengine.engine.runtime import LoadedModel
from tests import zoo


def optimized(model, monkeypatch):
    monkeypatch.setattr(layout, "_has_transdata", lambda target: True)
    g = bind_shapes(load_model(model), None)
    pm = PassManager(lint=True)
    for stage in stages(CompileOptions(lint=True, layout_format="nhwc")):
        g = pm.run_stage(stage, g)
    return g


def test_resnet_is_nhwc_inside_with_transdata_at_the_boundary_only(monkeypatch):
    g = optimized(zoo.resnet(depths=(1, 1, 1, 1), width=8, image=32, classes=10), monkeypatch)
    tds = [n for n in g.nodes if n.op_type == "TransData"]
    assert len(tds) == 1, [n.name for n in tds]
    assert tds[0].inputs[0] in g.inputs and tds[0].attrs["dst_format"] == "nhwc"
    # The pooled [N,C,1,1] tensor has the same bytes in both formats: a view, no task.
    (view,) = [n for n in g.nodes if n.op_type == "FormatView"]
    assert view.attrs["dst_format"] == "nchw" and view.inputs[0].meta.shape[2:] == (1, 1)
    assert view.outputs[0].users[0].op_type == "Flatten"
    convs = [n for n in g.nodes if n.op_type == "Conv"]
    assert convs and all(c.outputs[0].format == "nhwc" for c in convs)


def test_mobilenet_has_no_inverse_pairs(monkeypatch):
    g = optimized(zoo.mobilenetv2(width_mult=0.35, image=32, classes=10), monkeypatch)
    for n in g.nodes:
        if n.op_type == "TransData":
            producer = n.inputs[0].producer
            assert producer is None or producer.op_type != "TransData"
    assert sum(n.op_type == "TransData" for n in g.nodes) == 1
    # the pool's [N,C,1,1] -> Flatten is a FormatView, unless the conv_head row took the
    # head (Conv, pool, Flatten, Gemm: one node reading the region's format)
    heads = sum(n.op_type == CONV_HEAD for n in g.nodes)
    assert heads == int(_runtime.conv_block_available())
    assert sum(n.op_type == "FormatView" for n in g.nodes) == 1 - heads


def test_format_views_run_no_task_and_give_the_same_outputs():
    model = zoo.resnet(depths=(1, 1, 1, 1), width=8, image=32, classes=10)
    compiled = compile_graph(load_model(model))
    (prog,) = [p for p in compiled.programs if isinstance(p, DeviceProgram)]
    assert sum(t.op == "TransData" for t in prog.tasks) == 1
    assert not any("formatview" in t.name for t in prog.tasks)
    x = np.random.default_rng(3).standard_normal((1, 3, 32, 32)).astype(np.float32)
    got = list(LoadedModel(compiled).execute({compiled.inputs[0].name: x}).values())
    want = ort.InferenceSession(model.SerializeToString(), providers=[
        "CPUExecutionProvider"]).run(None, {compiled.inputs[0].name: x})
    for a, b in zip(got, want):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-4)


def test_graph_without_convolutions_keeps_plain_layouts(monkeypatch):
    g = optimized(zoo.mlp(sizes=(8, 16, 4)), monkeypatch)
    assert not any(n.op_type == "TransData" for n in g.nodes)
    assert all(v.format == "" for v in g.values.values())


def _pyramid(host_op: str):
    """conv -> pool -> conv -> <host op> -> Add with the pooled map -> conv: the pooled map
    crosses from the first device partition to the second, past a host partition (a feature
    pyramid's lateral path around an upsample)."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array((rng.standard_normal(s) * 0.3).astype(np.float32), n)
             for n, s in (("w1", (16, 8, 3, 3)), ("w2", (16, 16, 3, 3)), ("w3", (8, 16, 3, 3)))]
    conv = dict(pads=[1, 1, 1, 1])
    nodes = [helper.make_node("Conv", ["x", "w1"], ["a"], **conv),
             helper.make_node("Relu", ["a"], ["ar"]),
             helper.make_node("MaxPool", ["ar"], ["b"], kernel_shape=[2, 2], strides=[2, 2]),
             helper.make_node("Conv", ["b", "w2"], ["c"], **conv),
             helper.make_node(host_op, ["c"], ["u"]),
             helper.make_node("Add", ["b", "u"], ["s"]),
             helper.make_node("Conv", ["s", "w3"], ["y"], **conv)]
    graph = helper.make_graph(
        nodes, "pyramid", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 16, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


@pytest.mark.parametrize("fmt", ["nhwc", "nChw8c", "nChw16c"])
def test_a_value_crossing_partitions_past_a_host_node_is_plain(fmt):
    model = _pyramid("Atan")  # Atan has no device kernel: it runs on the host between
    compiled = compile_graph(load_model(model), CompileOptions(lint=True, layout_format=fmt))
    engines = [p.engine for p in compiled.report.partitions]
    assert engines == ["device", "host", "device"], engines
    x = np.random.default_rng(1).standard_normal((1, 8, 16, 16)).astype(np.float32)
    got = LoadedModel(compiled).execute({"x": x})["y"]  # the loader refused it before
    want = ort.InferenceSession(model.SerializeToString(), providers=[
        "CPUExecutionProvider"]).run(None, {"x": x})[0]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    for prog in compiled.programs:
        if isinstance(prog, DeviceProgram):
            for i in [*prog.inputs, *prog.outputs]:
                assert prog.tensors[i].format in ("", "nchw"), prog.tensors[i]


def _tf_style(extra_plain_reader: bool, batch: int = 2):
    """A TensorFlow export's convolutions: NHWC input, Transpose [0,3,1,2] in, Conv/Relu,
    Transpose [0,2,3,1] out; optionally the NCHW view is also read by a plain op (a
    ReduceMean over H, W into a second output)."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(2)
    inits = [numpy_helper.from_array((rng.standard_normal(s) * 0.3).astype(np.float32), n)
             for n, s in (("w1", (16, 3, 3, 3)), ("w2", (8, 16, 3, 3)))]
    nodes = [helper.make_node("Transpose", ["x"], ["xt"], perm=[0, 3, 1, 2]),
             helper.make_node("Conv", ["xt", "w1"], ["a"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["a"], ["ar"]),
             helper.make_node("Conv", ["ar", "w2"], ["b"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["b"], ["br"]),
             helper.make_node("Transpose", ["br"], ["y"], perm=[0, 2, 3, 1])]
    outputs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)]
    if extra_plain_reader:
        nodes.append(helper.make_node("Softmax", ["xt"], ["m"], axis=1))
        outputs.append(helper.make_tensor_value_info("m", TensorProto.FLOAT, None))
    graph = helper.make_graph(
        nodes, "tf_style", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                          [batch, 12, 12, 3])], outputs, inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


@pytest.mark.parametrize("extra_plain_reader", [False, True])
def test_nhwc_transposes_around_the_region_become_views(extra_plain_reader):
    """A Transpose that only moves NHWC data into the region's NHWC storage (or back out)
    moves no byte: it is a TransposeView (no task) instead of a Transpose plus a TransData."""
    kinds = _nhwc_kernels_matching_ort(_tf_style(extra_plain_reader), (2, 12, 12, 3))
    assert "Transpose" not in kinds and kinds.count("TransData") == int(extra_plain_reader), kinds


def _nhwc_kernels_matching_ort(model, shape) -> list[str]:
    """The kernel ops of the model compiled with an NHWC region, after checking its outputs
    against ONNX Runtime's on a random input of `shape` named x."""
    compiled = compile_graph(load_model(model), CompileOptions(lint=True,
                                                               layout_format="nhwc"))
    (prog,) = [p for p in compiled.programs if isinstance(p, DeviceProgram)]
    x = np.random.default_rng(4).standard_normal(shape).astype(np.float32)
    got = LoadedModel(compiled).execute({"x": x})
    want = ort.InferenceSession(model.SerializeToString(), providers=[
        "CPUExecutionProvider"]).run(None, {"x": x})
    for out, ref in zip(compiled.outputs, want):
        np.testing.assert_allclose(got[out.name], ref, rtol=1e-4, atol=1e-4)
    return [t.op for t in prog.tasks if t.kind == "kernel"]


def _patch_embedding(scale_scores: bool):
    """A vision transformer's front: Conv patch embedding, Flatten(2) + Transpose(0,2,1) into
    tokens; with `scale_scores`, an attention score tensor [N, heads, L, L] scaled by a
    constant (layout-agnostic, but no convolution's output reaches it)."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(6)
    inits = [numpy_helper.from_array((rng.standard_normal((32, 3, 4, 4)) * 0.3)
                                     .astype(np.float32), "w"),
             numpy_helper.from_array(np.array([2, 16, 2, 16], np.int64), "heads"),
             numpy_helper.from_array(np.array(0.25, np.float32), "scale")]
    nodes = [helper.make_node("Conv", ["x", "w"], ["p"], strides=[4, 4]),
             helper.make_node("Reshape", ["p", "flat"], ["pf"]),
             helper.make_node("Transpose", ["pf"], ["tokens"], perm=[0, 2, 1])]
    inits.append(numpy_helper.from_array(np.array([2, 32, 16], np.int64), "flat"))
    outputs = [helper.make_tensor_value_info("tokens", TensorProto.FLOAT, None)]
    if scale_scores:
        nodes += [helper.make_node("Reshape", ["tokens", "heads"], ["th"]),
                  helper.make_node("Transpose", ["th"], ["q"], perm=[0, 2, 1, 3]),
                  helper.make_node("Transpose", ["th"], ["k"], perm=[0, 2, 3, 1]),
                  helper.make_node("MatMul", ["q", "k"], ["scores"]),
                  helper.make_node("Mul", ["scores", "scale"], ["scaled"])]
        outputs.append(helper.make_tensor_value_info("scaled", TensorProto.FLOAT, None))
    graph = helper.make_graph(
        nodes, "patches", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                         [2, 3, 16, 16])], outputs, inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


@pytest.mark.parametrize("scale_scores", [False, True])
def test_patch_embedding_tokens_are_a_view_and_unreached_ops_stay_plain(scale_scores):
    kinds = _nhwc_kernels_matching_ort(_patch_embedding(scale_scores), (2, 3, 16, 16))
    # the input's TransData only: the tokens are the NHWC bytes, and the scaled scores (no
    # convolution reaches them) are not sent through NHWC and back
    assert kinds.count("TransData") == 1, kinds
    assert "Transpose" not in kinds[:2], kinds


def _speech_encoder(pad_layer: bool):
    """wav2vec2's feature extractor in small: 1-D Convs, each followed by a LayerNorm over
    channels written as Transpose -> LayerNorm -> Transpose, then GELU; HuBERT's GELU
    straight between Convs; with `pad_layer`, a TF-style explicit zero Pad before a Conv."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(8)
    c = 16
    inits = [numpy_helper.from_array((rng.standard_normal((c, 1, 10)) * 0.3).astype(np.float32),
                                     "w0"),
             numpy_helper.from_array((rng.standard_normal((c, c, 3)) * 0.2).astype(np.float32),
                                     "w1"),
             numpy_helper.from_array((rng.standard_normal((c, c, 3)) * 0.2).astype(np.float32),
                                     "w2"),
             numpy_helper.from_array(rng.standard_normal(c).astype(np.float32), "g"),
             numpy_helper.from_array(rng.standard_normal(c).astype(np.float32), "b"),
             numpy_helper.from_array(np.array([0, 0, 1, 0, 0, 1], np.int64), "pads")]
    nodes = [helper.make_node("Conv", ["x", "w0"], ["c0"], strides=[5]),
             helper.make_node("Transpose", ["c0"], ["t0"], perm=[0, 2, 1]),
             helper.make_node("LayerNormalization", ["t0", "g", "b"], ["n0"]),
             helper.make_node("Transpose", ["n0"], ["u0"], perm=[0, 2, 1]),
             helper.make_node("Gelu", ["u0"], ["a0"]),
             helper.make_node("Conv", ["a0", "w1"], ["c1"], strides=[2]),
             helper.make_node("Gelu", ["c1"], ["a1"])]
    if pad_layer:
        nodes += [helper.make_node("Pad", ["a1", "pads"], ["p1"]),
                  helper.make_node("Conv", ["p1", "w2"], ["y"])]
    else:
        nodes.append(helper.make_node("Conv", ["a1", "w2"], ["y"], pads=[1, 1]))
    graph = helper.make_graph(
        nodes, "speech", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 1, 400])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)], ir_version=9)


@pytest.mark.parametrize("pad_layer", [False, True])
def test_a_speech_encoder_s_1d_convolutions_meet_in_the_region(pad_layer):
    """1-D Convs run as 2-D ones of [N, C, 1, W] in the NHWC region; the Transposes around
    the channel LayerNorm are views of the NHWC bytes (the GELU moves before the second), the
    GELU between two Convs runs on the 4-D value (no reshape round trip), and a zero Pad still
    joins its Conv: no TransData and no Transpose between the first Conv and the output."""
    kinds = _nhwc_kernels_matching_ort(_speech_encoder(pad_layer), (2, 1, 400))
    assert kinds.count("Conv") == 3 and "Pad" not in kinds, kinds
    assert "Transpose" not in kinds, kinds
    # the image of one channel is a view into NHWC; the output goes back to plain once
    assert kinds.count("TransData") == 1, kinds


def test_a_flattened_feature_map_read_past_a_host_step_is_not_a_view_of_its_nhwc_bytes():
    """Conv -> Reshape [N, C, H*W] -> Transpose [0, 2, 1] -> MatMul, where the Reshape and
    Transpose land in the device program after a host step (Atan here; a deformable
    detector's GridSample): the convolution's NHWC output reaches that program plain, so
    the Transpose is a real one there. It was made a TransposeView of the NHWC bytes and
    read the plain ones: 4.3 off (an unseen Deformable-DETR, silently)."""
    from onnx import TensorProto, helper, numpy_helper
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array((rng.standard_normal((64, 96, 1, 1)) * 0.1)
                                     .astype(np.float32), "w"),
             numpy_helper.from_array((rng.standard_normal((64, 64)) * 0.1).astype(np.float32),
                                     "m"),
             numpy_helper.from_array(np.array([1, 64, -1], np.int64), "s"),
             numpy_helper.from_array(np.array([-1], np.int64), "ax")]
    nodes = [helper.make_node("Conv", ["x", "w"], ["a"]),
             helper.make_node("Atan", ["g"], ["h"]),
             helper.make_node("ReduceSum", ["h", "ax"], ["r"], keepdims=0),
             helper.make_node("Reshape", ["a", "s"], ["f"]),
             helper.make_node("Transpose", ["f"], ["t"], perm=[0, 2, 1]),
             helper.make_node("MatMul", ["t", "m"], ["y1"]),
             helper.make_node("Add", ["y1", "r"], ["y"])]
    model = helper.make_model(helper.make_graph(nodes, "past_host", [
        helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 96, 8, 8]),
        helper.make_tensor_value_info("g", TensorProto.FLOAT, [1, 64, 64, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits),
        opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    feeds = {"x": rng.standard_normal((1, 96, 8, 8)).astype(np.float32),
             "g": rng.standard_normal((1, 64, 64, 3)).astype(np.float32)}
    compiled = compile_graph(load_model(model), CompileOptions(lint=True))
    devices = [p for p in compiled.programs if isinstance(p, DeviceProgram)]
    assert len(devices) == 2  # the case this test is for: a host step between
    got = LoadedModel(compiled).execute(feeds)["y"]
    want = ort.InferenceSession(model.SerializeToString(), providers=[
        "CPUExecutionProvider"]).run(None, feeds)[0]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def _signal_block(transposes: bool):
    """A 1-D convolution encoder's block: Conv1d -> Elu -> reflect Pad -> Conv1d (k 3) ->
    Conv1d (k 1) plus a 1x1 shortcut -> Add -> a per-channel scale (of 32 channels: at
    least a vector, `layout._scale_of`) -> Elu; with
    `transposes`, a LayerNorm over channels between [N, L, C] Transposes before the last
    convolution (a speech encoder's)."""
    from onnx import TensorProto, helper, numpy_helper
    rng = np.random.default_rng(2)

    def w(name, *s):
        return numpy_helper.from_array((rng.standard_normal(s) * 0.3).astype(np.float32), name)

    inits = [w("w0", 32, 4, 7), w("w1", 16, 32, 3), w("w2", 32, 16, 1), w("ws", 32, 32, 1),
             w("scale", 1, 32, 1), w("w3", 24, 32, 5), w("g", 32), w("b", 32),
             numpy_helper.from_array(np.array([0, 0, 1, 0, 0, 1], np.int64), "pads")]
    nodes = [helper.make_node("Conv", ["x", "w0"], ["c0"], pads=[3, 3]),
             helper.make_node("Elu", ["c0"], ["e0"]),
             helper.make_node("Pad", ["e0", "pads"], ["p0"], mode="reflect"),
             helper.make_node("Conv", ["p0", "w1"], ["c1"]),
             helper.make_node("Conv", ["c1", "w2"], ["c2"]),
             helper.make_node("Conv", ["c0", "ws"], ["sc"]),
             helper.make_node("Add", ["c2", "sc"], ["s"]),
             helper.make_node("Mul", ["s", "scale"], ["m"]),
             helper.make_node("Elu", ["m"], ["e1"])]
    last = "e1"
    if transposes:
        nodes += [helper.make_node("Transpose", ["e1"], ["t0"], perm=[0, 2, 1]),
                  helper.make_node("LayerNormalization", ["t0", "g", "b"], ["ln"], axis=-1),
                  helper.make_node("Transpose", ["ln"], ["t1"], perm=[0, 2, 1])]
        last = "t1"
    nodes.append(helper.make_node("Conv", [last, "w3"], ["y"], strides=[2]))
    return helper.make_model(helper.make_graph(
        nodes, "signal", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4, 50])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits),
        opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


@pytest.mark.parametrize("transposes", [False, True])
def test_signals_between_1d_convolutions_stay_channels_last(transposes):
    """The ops between 1-D convolutions (run as 2-D ones of [N, C, 1, L]) work on the 3-D
    [N, C, L]: in an NHWC region those are stored NHWC too (N, L, C: the bytes of the
    convolution's own output, so the views between stay views) and a Transpose [0, 2, 1]
    into or out of them is a view. Each convolution had a TransData on both sides (an
    unseen Encodec: 27 TransData, 67 tasks; now 3 and 37)."""
    model = _signal_block(transposes)
    compiled = compile_graph(load_model(model), CompileOptions(lint=True))
    (prog,) = [p for p in compiled.programs if isinstance(p, DeviceProgram)]
    ops = [t.op for t in prog.tasks if t.kind == "kernel"]
    assert ops.count("TransData") <= 2, ops  # the input and the output
    assert "Transpose" not in ops, ops
    tensors = prog.spec(compiled.name, [])["tensors"]
    signals = [t for t in tensors if len(t["shape"]) == 3 and t["region"] == "arena"
               and t["name"] not in ("x", "y")]
    assert signals and all(t.get("format") == "nhwc" for t in signals
                           if t["shape"][1] > 1 and not t["name"].startswith("/")
                           and t["name"] not in ("t0", "ln")), signals
    feeds = {"x": np.random.default_rng(4).standard_normal((2, 4, 50)).astype(np.float32)}
    got = LoadedModel(compiled).execute(feeds)["y"]
    want = ort.InferenceSession(model.SerializeToString(), providers=[
        "CPUExecutionProvider"]).run(None, feeds)[0]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
