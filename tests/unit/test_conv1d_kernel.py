"""The runtime's own 1-D convolution of few channels (Conv1dKernel in kernels_conv.cc): a Conv
over [N, C, 1, W] rows stored channels-last, at most 64 input and output channels (128
outputs from at most 16 inputs), group 1 or groups that do not fill 16-channel vectors.
Vocoders and speech encoders stack dozens of them with distinct lengths and dilations;
oneDNN made a kernel for each at load (1-5 ms apiece, HiFi-GAN's load 90 ms), these sums
have nothing to make. Each case is a chain of three convolutions (the middle one's input and
output are channels-last inside the layout region), checked against ONNX Runtime on both ISA
paths (`isa`: the runtime's AVX-512 kernels allowed, then forbidden, when oneDNN runs the
rows), with the middle convolution's implementation named."""

import subprocess
import sys

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from graphengine import _runtime
from graphengine.engine.importers import load_model
from graphengine.engine.pipeline import CompileOptions, compile_graph
from graphengine.engine.runtime import LoadedModel

RNG = np.random.default_rng(23)
IMPL = "conv 1-D channels-last avx512"


def _ran_on(impl: str, isa: str) -> bool:
    """Whether the row ran where it should: the 1-D kernel on the AVX-512 path, oneDNN's
    convolution on the other."""
    return impl == IMPL if isa == "avx512" else impl.startswith("oneDNN")


def _chain(batch, cin, cout, length, k, dilation=1, stride=1, pads=None, bias=True,
           residual=False, activation=None, alpha=0.1, group=1):
    """x -> Conv(cin) -> [Conv under test: cin -> cout] -> Conv(cout) -> y; the first and
    last convolutions keep the row's length and put the middle one in the NHWC region."""
    pads = pads if pads is not None else [(k - 1) * dilation // 2] * 2
    inits = {"w0": RNG.standard_normal((cin, cin, 3)).astype(np.float32) * 0.3,
             "w1": (RNG.standard_normal((cout, cin // group, k))
                    / np.sqrt(cin // group * k)).astype(np.float32),
             "b1": RNG.standard_normal(cout).astype(np.float32),
             "w2": RNG.standard_normal((cout, cout, 3)).astype(np.float32) * 0.3}
    nodes = [helper.make_node("Conv", ["x", "w0"], ["h0"], pads=[1, 1]),
             helper.make_node("Conv", ["h0", "w1"] + (["b1"] if bias else []), ["h1"],
                              name="middle", pads=pads, dilations=[dilation], strides=[stride],
                              group=group)]
    cur = "h1"
    if residual:  # the output keeps the input's shape: the Add is the Conv's sum post-op
        nodes.append(helper.make_node("Add", [cur, "h0"], ["s"]))
        cur = "s"
    if activation is not None:
        attrs = {"alpha": alpha} if activation == "LeakyRelu" else {}
        if activation == "Clip":
            inits["lo"], inits["hi"] = np.float32(-0.5), np.float32(0.7)
            nodes.append(helper.make_node("Clip", [cur, "lo", "hi"], ["a"]))
        else:
            nodes.append(helper.make_node(activation, [cur], ["a"], **attrs))
        cur = "a"
    nodes.append(helper.make_node("Conv", [cur, "w2"], ["y"], pads=[1, 1]))
    x_info = helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, cin, length])
    graph = helper.make_graph(
        nodes, "chain", [x_info], [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(np.asarray(v), name) for name, v in inits.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    return model, RNG.standard_normal((batch, cin, length)).astype(np.float32)


def _check(model, x, rtol=1e-4, atol=1e-4):
    """The middle convolution's task (its attributes, its implementation); the result is ONNX
    Runtime's."""
    compiled = compile_graph(load_model(model), CompileOptions(lint=True))
    loaded = LoadedModel(compiled)
    got = loaded.execute({"x": x})["y"]
    want = ort.InferenceSession(model.SerializeToString(),
                                providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=rtol, atol=atol)
    (task,) = [t for p in compiled.programs for t in getattr(p, "tasks", [])
               if t.kind == "kernel" and t.op == "Conv" and t.name.startswith("middle")]
    (row,) = [r for n in loaded.natives.values() for r in n.profile() if r["name"] == task.name]
    return task, row["impl"]


@pytest.mark.parametrize("cin,cout", [(4, 4), (8, 8), (12, 12), (16, 16), (8, 24), (24, 40),
                                      (48, 48), (64, 64), (12, 1), (3, 64), (64, 17)])
@pytest.mark.parametrize("k,dilation", [(3, 1), (7, 3), (11, 5)])
def test_channel_counts_taps_and_dilations(cin, cout, k, dilation, isa):
    """Every channel count up to 64 (8-wide and 16-wide vectors, partly filled last ones),
    taps and dilations of a vocoder's residual stacks; batch 2."""
    model, x = _chain(2, cin, cout, 97, k, dilation)
    _, impl = _check(model, x)
    assert _ran_on(impl, isa), impl


@pytest.mark.parametrize("stride,pads,length", [(2, [3, 3], 200), (3, [0, 5], 50), (1, [0, 0], 9),
                                                (4, [6, 1], 31), (1, [9, 2], 40)])
def test_strides_and_uneven_pads(stride, pads, length, isa):
    """Strided rows and pads on one side only or none: the outputs whose taps reach into the
    padding sum from a zero-padded copy of their span, the others from the row."""
    model, x = _chain(1, 24, 24, length, 7, 1, stride, pads)
    _, impl = _check(model, x)
    assert _ran_on(impl, isa), impl


def test_one_output_whose_kernel_spans_the_padded_row(isa):
    """Kernel extent equal to the padded input: one output, every tap partly in the padding."""
    model, x = _chain(3, 8, 16, 10, 5, 3, 1, [2, 1])
    _, impl = _check(model, x)
    assert _ran_on(impl, isa), impl


def test_a_span_too_long_for_the_copy_sums_each_edge_output_alone(isa):
    """64 channels, 65 taps at dilation 2: an edge block's span (134 positions x 64 floats)
    is more than the padded copy holds; those outputs sum only their taps inside the row."""
    model, x = _chain(2, 64, 64, 300, 65, 2)
    _, impl = _check(model, x, atol=2e-4)
    assert _ran_on(impl, isa), impl


@pytest.mark.parametrize("cout", [8, 24, 32])
@pytest.mark.parametrize("activation", [None, "Relu", "LeakyRelu", "Clip", "Sigmoid", "Tanh"])
def test_residual_and_activations(cout, activation, isa):
    """The residual Add (the Conv's sum post-op) and the activation after it: Relu,
    LeakyRelu and Clip applied as the sums are stored, Sigmoid and Tanh as eltwise primitives
    after them."""
    model, x = _chain(2, cout, cout, 150, 7, 2, residual=True, activation=activation)
    task, impl = _check(model, x)
    assert _ran_on(impl, isa), impl
    assert task.attrs.get("sum") == 1
    if activation is not None:
        assert task.attrs.get("activation") == activation


def test_without_bias_at_batch_one_and_many(isa):
    for batch in (1, 5):
        model, x = _chain(batch, 16, 40, 333, 3, 1, bias=False)
        _, impl = _check(model, x)
        assert _ran_on(impl, isa), impl


@pytest.mark.parametrize("cin,cout,k", [(65, 65, 3), (17, 80, 3), (16, 129, 3), (16, 16, 1)])
def test_wider_rows_and_pointwise_rows_stay_on_onednn(cin, cout, k):
    """65 channels, more than 64 outputs from more than 16 inputs, more than 128 outputs, or
    one tap (a matrix product, which oneDNN's 1x1 kernel runs faster and creates in
    microseconds): oneDNN's convolution."""
    model, x = _chain(2, cin, cout, 64, k)
    _, impl = _check(model, x)
    assert impl.startswith("oneDNN"), impl


@pytest.mark.parametrize("cin,cout,k,stride,length", [
    (1, 80, 201, 1, 700),   # a learnable front end's filterbank over a waveform
    (1, 128, 10, 5, 999),   # a waveform encoder's first layer
    (8, 100, 11, 1, 301),   # 7 vectors, the last partly filled
    (16, 72, 5, 2, 200),
    (3, 128, 7, 1, 97),
])
def test_up_to_128_outputs_from_few_inputs(cin, cout, k, stride, length, isa):
    """65-128 output channels (5-8 vectors of 16) from at most 16 input channels run on the
    1-D kernel (oneDNN ran a 1 -> 80 filterbank on its gemm convolution, ~3x slower)."""
    model, x = _chain(2, cin, cout, length, k, stride=stride)
    _, impl = _check(model, x, atol=2e-4)
    assert _ran_on(impl, isa), impl


def test_the_narrow_fma_gain_is_measured_once():
    """How many 8-wide FMAs a thread completes per 16-wide one: between the one-unit (2) and
    two-unit (1) cores' values, with margin for a noisy measurement; the same value on every
    call (measured once per process). A process whose first call comes while the AVX-512
    kernels are forbidden still measures the CPU (the value is cached for the process and the
    kernels may be allowed again): a measurement, never the exact 1 of a CPU without them."""
    gain = _runtime.narrow_fma_gain()
    assert 0.5 < gain < 4
    assert _runtime.narrow_fma_gain() == gain
    code = ("from graphengine import _runtime as r; r.set_avx512_allowed(False); "
            "print(repr(r.narrow_fma_gain()))")
    first = float(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                                 check=True).stdout)
    assert (first != 1.0) == _runtime.cpu_supports_avx512(), first


@pytest.mark.parametrize("length,k,pads,own", [
    (16, 64, [31, 32], False),   # CREPE's last layers: a row shorter than its kernel
    (8, 64, [31, 32], False),
    (128, 64, [31, 32], True),   # most taps inside the row: the 1-D kernel
    (40, 9, [4, 4], True),
])
def test_rows_mostly_padding_run_on_onednn(length, k, pads, own, isa):
    """Where fewer than half of the taps the sums take fall inside the row (the kernel sums
    an edge block over a zero-padded copy), oneDNN's convolution runs the row; results are
    ONNX Runtime's either way."""
    model, x = _chain(2, 16, 32, length, k, pads=pads)
    _, impl = _check(model, x)
    assert _ran_on(impl, isa) if own else impl.startswith("oneDNN"), impl


@pytest.mark.parametrize("cin,cout,group,k,stride,dilation,length", [
    (16, 64, 4, 41, 4, 1, 400),    # a MelGAN discriminator's grouped downsampling layers
    (64, 128, 16, 41, 4, 1, 200),
    (128, 256, 64, 41, 4, 1, 120),
    (8, 12, 2, 5, 1, 3, 97),       # dilated, partly filled 8-wide vectors
    (24, 48, 3, 7, 2, 1, 150),
])
def test_grouped_rows_whose_groups_do_not_fill_vectors(cin, cout, group, k, stride, dilation,
                                                       length, isa):
    """Groups of channels that are not whole 16-channel vectors (oneDNN ran them on its
    GEMM convolution): each group a row sum of its own, reading its channels of every
    input pixel and writing its channels of every output pixel; edges through the padded
    copy of the group's channels."""
    model, x = _chain(2, cin, cout, length, k, dilation, stride, group=group)
    _, impl = _check(model, x, atol=2e-4)
    assert _ran_on(impl, isa), impl


@pytest.mark.parametrize("cin,cout,group", [(32, 32, 32), (32, 64, 2)])
def test_depthwise_and_vector_filling_groups_stay_on_onednn(cin, cout, group):
    """A depthwise row (oneDNN's depthwise kernel) and groups of 16 channels (its grouped
    jit kernel): oneDNN's convolution."""
    model, x = _chain(2, cin, cout, 64, 5, group=group)
    _, impl = _check(model, x)
    assert impl.startswith("oneDNN"), impl
