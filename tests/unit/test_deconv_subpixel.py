"""ConvTranspose in its sub-pixel form (kernels_deconv.cc): one convolution to stride x M
channels whose channels-last output, read in order, is the transposed convolution's. Each
case is checked against ONNX Runtime, with the kernel the runtime chose."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from graphengine.engine.importers import load_model
from graphengine.engine.pipeline import CompileOptions, compile_graph
from graphengine.engine.runtime import load

RNG = np.random.default_rng(7)


def deconv_model(x_shape, w_shape, attrs, bias=True, around=False):
    """X -> [Conv 1x1 ->] ConvTranspose(W, B) [-> Conv 1x1] -> Y. `around`: convolutions on
    both sides, so the layout pass may hand the transposed convolution channels-last tensors."""
    c_in, m = w_shape[0], w_shape[1] * attrs.get("group", 1)
    rank = len(x_shape)
    inits = [numpy_helper.from_array(RNG.standard_normal(w_shape).astype(np.float32), "w")]
    names = ["t", "w"]
    if bias:
        inits.append(numpy_helper.from_array(RNG.standard_normal(m).astype(np.float32), "b"))
        names.append("b")
    nodes = []
    src = "x"
    if around:
        inits.append(numpy_helper.from_array(
            RNG.standard_normal([c_in, x_shape[1]] + [1] * (rank - 2)).astype(np.float32), "w0"))
        inits.append(numpy_helper.from_array(
            RNG.standard_normal([5, m] + [1] * (rank - 2)).astype(np.float32), "w2"))
        nodes.append(helper.make_node("Conv", ["x", "w0"], ["t"]))
        src = "t"
    names[0] = src
    nodes.append(helper.make_node("ConvTranspose", names, ["d" if around else "y"], **attrs))
    if around:
        nodes.append(helper.make_node("Conv", ["d", "w2"], ["y"]))
    graph = helper.make_graph(nodes, "deconv",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, x_shape)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def run_both(model, x):
    compiled = compile_graph(load_model(model), CompileOptions(lint=True))
    loaded = load(compiled)
    got = loaded.execute({"x": x})["y"]
    want = ort.InferenceSession(model.SerializeToString(),
                                providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    impls = [t["impl"] for n in loaded.natives.values() for t in n.profile()
             if t["op"] == "ConvTranspose"]
    return got, want, impls


CASES = [
    # (x shape, W shape, attrs): k a multiple of s or not, pads, output_padding, stride 1
    ([1, 6, 37], [6, 1, 16], {"strides": [8]}),                      # Conv-TasNet's decoder
    ([2, 5, 20], [5, 3, 4], {"strides": [2], "pads": [1, 1]}),
    ([1, 4, 17], [4, 6, 7], {"strides": [3], "pads": [2, 3]}),
    ([1, 4, 9], [4, 2, 5], {"strides": [2], "output_padding": [1]}),
    ([1, 3, 11], [3, 4, 3], {"strides": [1], "pads": [1, 1]}),
    ([1, 8, 25], [8, 4, 10], {"strides": [5], "pads": [3, 2], "output_padding": [2]}),
    ([1, 16, 12], [16, 8, 16], {"strides": [8], "pads": [4, 4]}),     # a vocoder's upsampler
    ([2, 4, 1, 13], [4, 3, 1, 6], {"strides": [1, 3], "pads": [0, 1, 0, 2]}),  # [N, C, 1, L]
    # 2-D with fewer than 16 output channels (oneDNN's deconvolution pads them to 16)
    ([2, 6, 7, 9], [6, 4, 2, 2], {"strides": [2, 2]}),               # a detector's 2x upsampling
    ([1, 5, 6, 5], [5, 3, 4, 4], {"strides": [2, 2], "pads": [1, 1, 1, 1]}),
    ([1, 3, 5, 7], [3, 2, 3, 4], {"strides": [1, 2], "pads": [0, 1, 1, 0],
                                  "output_padding": [0, 1]}),
    ([1, 4, 6, 6], [4, 1, 3, 3], {"strides": [2, 2], "output_padding": [1, 1]}),
    ([1, 4, 5, 6], [4, 2, 3, 2], {"strides": [1, 2]}),              # row taps, no row stride
]

@pytest.mark.parametrize("around", [False, True])
@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("x_shape,w_shape,attrs", CASES)
def test_subpixel_matches_onnxruntime(x_shape, w_shape, attrs, bias, around):
    model = deconv_model(x_shape, w_shape, attrs, bias=bias, around=around)
    got, want, impls = run_both(model, RNG.standard_normal(x_shape).astype(np.float32))
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    assert impls and all("sub-pixel" in i for i in impls), impls
    # k a multiple of s, no pads, Y channels-last between convolutions: the convolution
    # writes Y itself (no pass over the output)
    if around and attrs == {"strides": [8]}:
        assert all("into Y" in i for i in impls), impls
    if attrs.get("pads", [0])[0] > 0:  # the begin pad crops: Y is a part of the output
        assert not any("into Y" in i for i in impls), impls


@pytest.mark.parametrize("x_shape,w_shape,attrs", [
    # 2-D with 16 or more output channels: the phases interleave across rows (an extra pass
    # over the output, slower there than the deconvolution)
    ([1, 8, 6, 6], [8, 16, 2, 2], {"strides": [2, 2]}),
    ([1, 4, 5, 5], [4, 20, 3, 3], {"strides": [2, 1], "pads": [1, 1, 1, 1]}),
    ([1, 4, 10], [4, 3, 3], {"strides": [2], "dilations": [2]}),     # dilated
    ([1, 4, 10], [4, 3, 4], {"strides": [2], "group": 2}),           # grouped
    ([1, 4, 10], [4, 3, 2], {"strides": [8]}),                       # k << s: mostly zero taps
])
def test_other_forms_stay_deconvolutions(x_shape, w_shape, attrs):
    model = deconv_model(x_shape, w_shape, attrs)
    got, want, impls = run_both(model, RNG.standard_normal(x_shape).astype(np.float32))
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    assert impls and not any("sub-pixel" in i for i in impls), impls


def test_wide_1d_takes_the_form_writing_y_or_reading_y_out_of_z():
    """16 or more output channels in 1-D: the convolution writes Y itself where it can (no
    pads, k a multiple of s, Y channels-last), else Y is read out of its output."""
    for x_shape, w_shape, attrs, want in [
            ([1, 8, 40], [8, 16, 4], {"strides": [2]}, "into Y"),
            ([1, 8, 30], [8, 16, 4], {"strides": [2], "pads": [1, 1]}, "(sub-pixel)"),
            ([1, 8, 600], [8, 24, 8], {"strides": [4], "pads": [2, 2]}, "(sub-pixel)")]:
        model = deconv_model(x_shape, w_shape, attrs, around=True)
        got, want_y, impls = run_both(model, RNG.standard_normal(x_shape).astype(np.float32))
        np.testing.assert_allclose(got, want_y, rtol=1e-4, atol=1e-4)
        assert impls and all(want in i for i in impls), impls
