"""A Pad of H and W (Layout.SPATIAL) and a Resize (Layout.UNIFORM) run in the layout
region's format: no conversion on either side of a U-Net's reflect / edge pads or a feature
pyramid's upsampling; a Pad of N or C stays plain."""

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from graphengine import _runtime
from graphengine.engine.importers import load_model
from graphengine.engine.model import DeviceProgram
from graphengine.engine.pipeline import CompileOptions, compile_graph
from graphengine.engine.runtime import load

RNG = np.random.default_rng(5)


def _unet_block(channels: int, mode: str, pads, batch: int, pad_output: bool = False):
    """conv -> relu -> Pad(mode) -> conv (no pads) -> Concat with the first relu -> Pad ->
    conv: a U-Net decoder step; optionally the last Pad is also a graph output."""
    c = channels
    inits = {"w1": RNG.normal(0, 0.3, (c, 3, 3, 3)), "w2": RNG.normal(0, 0.3, (c, c, 3, 3)),
             "w3": RNG.normal(0, 0.3, (4, 2 * c, 3, 3)), "pads": np.asarray(pads, np.int64)}
    nodes = [helper.make_node("Conv", ["x", "w1"], ["a"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["a"], ["ar"]),
             helper.make_node("Pad", ["ar", "pads"], ["ap"], mode=mode),
             helper.make_node("Conv", ["ap", "w2"], ["b"]),
             helper.make_node("Relu", ["b"], ["br"]),
             helper.make_node("Concat", ["br", "ar"], ["cat"], axis=1),
             helper.make_node("Pad", ["cat", "pads"], ["cp"], mode=mode),
             helper.make_node("Conv", ["cp", "w3"], ["y"])]
    if mode == "constant":  # the fill value as the optional third input
        inits["value"] = np.asarray(0.5, np.float32)
        for n in nodes:
            if n.op_type == "Pad":
                n.input.append("value")
    outputs = ["y", "cp"] if pad_output else ["y"]
    inits = {k: v if k == "pads" else np.asarray(v, np.float32) for k, v in inits.items()}
    graph = helper.make_graph(
        nodes, "unet_block",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, 3, 9, 11])],
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in outputs],
        [numpy_helper.from_array(v, k) for k, v in inits.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def _compile_and_check(model, fmt: str, batch: int, hw=(9, 11)):
    compiled = compile_graph(load_model(model), CompileOptions(lint=True, layout_format=fmt))
    x = RNG.standard_normal((batch, 3, *hw)).astype(np.float32)
    ours = load(compiled).execute({"x": x})
    ref = ort.InferenceSession(model.SerializeToString(), providers=[
        "CPUExecutionProvider"]).run(None, {"x": x})
    for out, want in zip(compiled.outputs, ref):
        np.testing.assert_allclose(ours[out.name], want, rtol=1e-4, atol=1e-4)
    (prog,) = [p for p in compiled.programs if isinstance(p, DeviceProgram)]
    return prog


def _pad_formats(prog) -> list[str]:
    return [prog.tensors[t.outputs[0]].format for t in prog.tasks if t.op == "Pad"]


@pytest.mark.parametrize("mode,pads", [
    ("reflect", [0, 0, 1, 1, 0, 0, 1, 1]), ("edge", [0, 0, 2, 0, 0, 0, 0, 2]),
    ("constant", [0, 0, 1, 0, 0, 0, 1, 2])])
@pytest.mark.parametrize("fmt,channels", [("nhwc", 5), ("nChw8c", 8), ("nChw16c", 16),
                                          ("nChw8c", 12)])
@pytest.mark.parametrize("batch", [1, 3])
def test_spatial_pads_stay_in_the_region(mode, pads, fmt, channels, batch):
    """The Pads read and write the region's format (blocked where their channels fill whole
    blocks, else NHWC): the only TransData are the one after the input and the one before
    the output; outputs equal onnxruntime's, odd channel counts and batch > 1 included."""
    prog = _compile_and_check(_unet_block(channels, mode, pads, batch), fmt, batch)
    formats = _pad_formats(prog)
    assert len(formats) == 2 and all(f not in ("", "nchw") for f in formats), formats
    transdata = [t.name for t in prog.tasks if t.op == "TransData"]
    assert len(transdata) <= 2, transdata


def test_a_spatial_pad_into_a_graph_output_leaves_plain():
    """A region Pad whose value is also a graph output: the output is converted back to NCHW
    and equals onnxruntime's."""
    prog = _compile_and_check(_unet_block(6, "reflect", [0, 0, 1, 1, 0, 0, 1, 1], 2,
                                          pad_output=True), "nhwc", 2)
    assert _pad_formats(prog)[0] == "nhwc"
    for i in prog.outputs:
        assert prog.tensors[i].format in ("", "nchw"), prog.tensors[i]


def test_a_channel_pad_stays_plain():
    """A Pad of the channel axis cannot run on the stored order of H and W: it stays NCHW."""
    prog = _compile_and_check(_channel_pad_model(), "nhwc", 1)
    assert _pad_formats(prog) in ([""], ["nchw"])


def _channel_pad_model():
    inits = [numpy_helper.from_array(RNG.normal(0, 0.3, (4, 3, 3, 3)).astype(np.float32), "w1"),
             numpy_helper.from_array(RNG.normal(0, 0.3, (2, 6, 3, 3)).astype(np.float32), "w2"),
             numpy_helper.from_array(np.asarray([0, 1, 1, 1, 0, 1, 1, 1], np.int64), "pads")]
    nodes = [helper.make_node("Conv", ["x", "w1"], ["a"], pads=[1, 1, 1, 1]),
             helper.make_node("Pad", ["a", "pads"], ["ap"], mode="edge"),
             helper.make_node("Conv", ["ap", "w2"], ["y"])]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 9, 11])
    graph = helper.make_graph(nodes, "channel_pad", [x], [
        helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def test_kernel_info_offers_the_region_formats_to_a_spatial_pad_only():
    shape = [1, 16, 6, 6]
    spatial = _runtime.kernel_info("Pad", ["float32"], [shape],
                                   {"pads": [0, 0, 1, 1, 0, 0, 1, 1], "mode": "reflect"})
    channel = _runtime.kernel_info("Pad", ["float32"], [shape],
                                   {"pads": [0, 1, 0, 0, 0, 1, 0, 0], "mode": "reflect"})
    assert spatial["supported"] and {"nhwc", "nChw16c"} <= set(spatial["formats"]), spatial
    assert channel["supported"] and channel["formats"] == ["nchw"], channel


def _pyramid(channels: int, batch: int, mode: str, coord: str):
    """conv -> pool -> conv -> Resize x2 -> Add the first conv's map -> conv (a feature
    pyramid's top-down step) plus a Resize to a fixed size feeding the output."""
    c = channels
    inits = [numpy_helper.from_array(RNG.normal(0, 0.3, s).astype(np.float32), n)
             for n, s in (("w1", (c, 3, 3, 3)), ("w2", (c, c, 3, 3)), ("w3", (3, c, 3, 3)))]
    inits += [numpy_helper.from_array(np.asarray([1, 1, 2, 2], np.float32), "scales"),
              numpy_helper.from_array(np.asarray([batch, c, 7, 9], np.int64), "sizes")]
    kw = {"mode": mode, "coordinate_transformation_mode": coord}
    nodes = [helper.make_node("Conv", ["x", "w1"], ["a"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["a"], ["ar"]),
             helper.make_node("MaxPool", ["ar"], ["p"], kernel_shape=[2, 2], strides=[2, 2]),
             helper.make_node("Conv", ["p", "w2"], ["b"], pads=[1, 1, 1, 1]),
             helper.make_node("Resize", ["b", "", "scales"], ["up"], **kw),
             helper.make_node("Add", ["up", "ar"], ["s"]),
             helper.make_node("Resize", ["s", "", "", "sizes"], ["r"], **kw),
             helper.make_node("Conv", ["r", "w3"], ["y"], pads=[1, 1, 1, 1])]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, 3, 8, 12])
    graph = helper.make_graph(nodes, "pyramid", [x], [
        helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


@pytest.mark.parametrize("mode,coord", [("linear", "half_pixel"), ("linear", "align_corners"),
                                        ("nearest", "asymmetric")])
@pytest.mark.parametrize("fmt,channels", [("nhwc", 5), ("nChw8c", 16), ("nChw16c", 16),
                                          ("nChw16c", 12)])
@pytest.mark.parametrize("batch", [1, 2])
def test_resizes_stay_in_the_region(mode, coord, fmt, channels, batch):
    """Both Resizes read and write the region's format: the only TransData are after the
    input and before the output; outputs equal onnxruntime's."""
    prog = _compile_and_check(_pyramid(channels, batch, mode, coord), fmt, batch, hw=(8, 12))
    formats = [prog.tensors[t.outputs[0]].format for t in prog.tasks if t.op == "Resize"]
    assert len(formats) == 2 and all(f not in ("", "nchw") for f in formats), formats
    transdata = [t.name for t in prog.tasks if t.op == "TransData"]
    assert len(transdata) <= 2, transdata


def _decoder(channels: int, batch: int, kernel: int, out_pad: int, group: int):
    """conv -> pool -> conv -> ConvTranspose (stride 2, relu) -> Concat with the first conv ->
    conv: a U-Net's up step."""
    c = channels
    inits = [numpy_helper.from_array(RNG.normal(0, 0.3, s).astype(np.float32), n)
             for n, s in (("w1", (c, 3, 3, 3)), ("w2", (c, c, 3, 3)),
                          ("wt", (c, c // group, kernel, kernel)), ("bt", (c // group * group,)),
                          ("w3", (3, 2 * c, 3, 3)))]
    pad = (kernel - 2 + out_pad) // 2
    nodes = [helper.make_node("Conv", ["x", "w1"], ["a"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["a"], ["ar"]),
             helper.make_node("MaxPool", ["ar"], ["p"], kernel_shape=[2, 2], strides=[2, 2]),
             helper.make_node("Conv", ["p", "w2"], ["b"], pads=[1, 1, 1, 1]),
             helper.make_node("ConvTranspose", ["b", "wt", "bt"], ["u"], strides=[2, 2],
                              pads=[pad, pad, pad, pad], output_padding=[out_pad, out_pad],
                              group=group),
             helper.make_node("Relu", ["u"], ["ur"]),
             helper.make_node("Concat", ["ur", "ar"], ["cat"], axis=1),
             helper.make_node("Conv", ["cat", "w3"], ["y"], pads=[1, 1, 1, 1])]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, 3, 8, 12])
    graph = helper.make_graph(nodes, "decoder", [x], [
        helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


@pytest.mark.parametrize("kernel,out_pad,group", [(2, 0, 1), (3, 1, 1), (4, 0, 1), (3, 1, 2)])
@pytest.mark.parametrize("fmt,channels", [("nhwc", 6), ("nChw8c", 16), ("nChw16c", 16),
                                          ("nChw8c", 12)])
@pytest.mark.parametrize("batch", [1, 3])
def test_conv_transpose_reads_and_writes_the_region(kernel, out_pad, group, fmt, channels,
                                                    batch):
    """The ConvTranspose takes its input and writes its output in the region's format (oneDNN
    converts inside the kernel only where it chose another): no TransData beside the input's
    and the output's; outputs equal onnxruntime's."""
    prog = _compile_and_check(_decoder(channels, batch, kernel, out_pad, group), fmt, batch,
                              hw=(8, 12))
    (task,) = [t for t in prog.tasks if t.op == "ConvTranspose"]
    formats = [prog.tensors[i].format for i in (task.inputs[0], task.outputs[0])]
    assert all(f not in ("", "nchw") for f in formats), formats
    # (with 12 channels in nChw8c the convolution before it writes padded blocks, which the
    # layout pass converts to the ConvTranspose's NHWC: a conversion inside the region)
    to_plain = [t.name for t in prog.tasks if t.op == "TransData" and {"", "nchw"} & {
        prog.tensors[t.inputs[0]].format, prog.tensors[t.outputs[0]].format}]
    assert len(to_plain) <= 2, to_plain


def _csp(sizes, batch: int, part_output: bool, opset: int = 17):
    """conv -> Split along C (sizes) -> conv on the last part -> Concat of every part and the
    conv's -> conv: a CSP / C2f block; optionally the first part is also a graph output."""
    c = sum(sizes)
    inits = [numpy_helper.from_array(RNG.normal(0, 0.3, s).astype(np.float32), n)
             for n, s in (("w1", (c, 3, 3, 3)), ("w2", (sizes[-1], sizes[-1], 3, 3)),
                          ("w3", (4, c + sizes[-1], 1, 1)))]
    inits.append(numpy_helper.from_array(np.asarray(sizes, np.int64), "sizes"))
    parts = [f"s{i}" for i in range(len(sizes))]
    nodes = [helper.make_node("Conv", ["x", "w1"], ["a"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["a"], ["ar"]),
             helper.make_node("Split", ["ar", "sizes"], parts, axis=1),
             helper.make_node("Conv", [parts[-1], "w2"], ["b"], pads=[1, 1, 1, 1]),
             helper.make_node("Concat", [*parts, "b"], ["cat"], axis=1),
             helper.make_node("Conv", ["cat", "w3"], ["y"])]
    outputs = ["y", parts[0]] if part_output else ["y"]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, 3, 8, 12])
    graph = helper.make_graph(nodes, "csp", [x], [
        helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in outputs], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=8)


@pytest.mark.parametrize("fmt,sizes", [("nhwc", [5, 7]), ("nhwc", [3, 4, 6]),
                                       ("nChw8c", [8, 16]), ("nChw16c", [16, 16]),
                                       ("nChw8c", [6, 10])])
@pytest.mark.parametrize("batch", [1, 3])
@pytest.mark.parametrize("part_output", [False, True])
def test_a_channel_split_stays_in_the_region(fmt, sizes, batch, part_output):
    """The Split reads and writes the region's format (blocked when every part fills whole
    blocks, else NHWC): conversions to or from NCHW only at the input and the outputs; a
    part that is also a graph output leaves NCHW; values equal onnxruntime's."""
    prog = _compile_and_check(_csp(sizes, batch, part_output), fmt, batch, hw=(8, 12))
    (task,) = [t for t in prog.tasks if t.op == "Split"]
    formats = {prog.tensors[i].format for i in (*task.inputs[:1], *task.outputs)}
    assert len(formats) == 1 and not formats & {"", "nchw"}, formats
    to_plain = [t.name for t in prog.tasks if t.op == "TransData" and {"", "nchw"} & {
        prog.tensors[t.inputs[0]].format, prog.tensors[t.outputs[0]].format}]
    assert len(to_plain) <= 2 + part_output, to_plain
    for i in prog.outputs:
        assert prog.tensors[i].format in ("", "nchw"), prog.tensors[i]
