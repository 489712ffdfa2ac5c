"""Fusion row activation_form: activations spelled out in elementwise ops (GPT-2's gelu_new,
SiLU, QuickGELU) become their op, found by evaluating the region rather than by its
spelling; and an activation reaches the MatMul/Gemm/Conv before it through a Reshape."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from graphengine import _runtime
from graphengine.engine.dtypes import DType
from graphengine.engine.importers import load_model
from graphengine.engine.ir import Graph, TensorMeta
from graphengine.engine.pipeline import CompileOptions, compile_graph
from graphengine.engine.runtime import LoadedModel

rng = np.random.default_rng(0)
W = rng.standard_normal((16, 24)).astype(np.float32) * 0.3


def _c(name: str, value: float):
    return numpy_helper.from_array(np.array(value, np.float32), name)


def _model(body, consts, reshape: bool = False):
    """x [4,16] -> MatMul W -> (Reshape [2,2,24]) -> body(h) -> y."""
    nodes = [helper.make_node("MatMul", ["x", "W"], ["mm"], name="mm")]
    h = "mm"
    out_shape = [4, 24]
    inits = [numpy_helper.from_array(W, "W")] + consts
    if reshape:
        inits.append(numpy_helper.from_array(np.array([2, 2, 24], np.int64), "shape"))
        nodes.append(helper.make_node("Reshape", ["mm", "shape"], ["h"], name="view"))
        h, out_shape = "h", [2, 2, 24]
    nodes += body(h)
    g = helper.make_graph(nodes, "act", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                       [4, 16])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, out_shape)],
                          inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def gelu_gpt2(h):  # 0.5*x*(1+tanh(sqrt(2/pi)*(x+0.044715*x^3))), as torch exports gelu_new
    return [helper.make_node("Mul", [h, "half"], ["a"]),
            helper.make_node("Pow", [h, "three"], ["p"]),
            helper.make_node("Mul", ["p", "k"], ["q"]),
            helper.make_node("Add", [h, "q"], ["r"]),
            helper.make_node("Mul", ["r", "s2pi"], ["s"]),
            helper.make_node("Tanh", ["s"], ["t"]),
            helper.make_node("Add", ["t", "one"], ["u"]),
            helper.make_node("Mul", ["a", "u"], ["y"])]


GELU_CONSTS = [_c("half", 0.5), _c("three", 3.0), _c("k", 0.044715),
               _c("s2pi", 0.7978845608028654), _c("one", 1.0)]


def gelu_cubed_factored(h):  # x*x*x instead of Pow, the 0.5 applied last
    return [helper.make_node("Mul", [h, h], ["sq"]),
            helper.make_node("Mul", ["sq", h], ["p"]),
            helper.make_node("Mul", ["k", "p"], ["q"]),
            helper.make_node("Add", ["q", h], ["r"]),
            helper.make_node("Mul", ["s2pi", "r"], ["s"]),
            helper.make_node("Tanh", ["s"], ["t"]),
            helper.make_node("Add", ["one", "t"], ["u"]),
            helper.make_node("Mul", [h, "u"], ["v"]),
            helper.make_node("Mul", ["v", "half"], ["y"])]


def silu(h):
    return [helper.make_node("Sigmoid", [h], ["sg"]), helper.make_node("Mul", [h, "sg"], ["y"])]


def silu_exp(h):  # x / (1 + exp(-x))
    return [helper.make_node("Neg", [h], ["n"]), helper.make_node("Exp", ["n"], ["e"]),
            helper.make_node("Add", ["one", "e"], ["d"]), helper.make_node("Div", [h, "d"], ["y"])]


def quick_gelu(h):  # x * sigmoid(1.702 x)
    return [helper.make_node("Mul", [h, "qk"], ["m"]), helper.make_node("Sigmoid", ["m"], ["sg"]),
            helper.make_node("Mul", [h, "sg"], ["y"])]


def near_gelu(h):  # 0.04 instead of 0.044715: not a GELU, must stay as written
    return gelu_gpt2(h)


def _run(model, **options):
    compiled = compile_graph(load_model(model), CompileOptions(**options))
    x = rng.standard_normal((4, 16)).astype(np.float32) * 3
    got = LoadedModel(compiled).execute({"x": x})["y"]
    want = ort.InferenceSession(model.SerializeToString(), providers=[
        "CPUExecutionProvider"]).run(None, {"x": x})[0]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    return compiled


@pytest.mark.parametrize("body, consts, op, attrs", [
    (gelu_gpt2, GELU_CONSTS, "Gelu", "approximate=tanh"),
    (gelu_cubed_factored, GELU_CONSTS, "Gelu", "approximate=tanh"),
    (silu, [], "Swish", "alpha=1.0"),
    (silu_exp, [_c("one", 1.0)], "Swish", "alpha=1.0"),
    (quick_gelu, [_c("qk", 1.702)], "Swish", "alpha=1.702"),
])
@pytest.mark.parametrize("reshape", [False, True])
def test_a_spelled_out_activation_becomes_the_matmul_epilogue(body, consts, op, attrs, reshape):
    compiled = _run(_model(body, consts, reshape))
    fusions = compiled.report.fusions
    assert any(f.startswith(f"{op}({attrs}) written out") for f in fusions), fusions
    assert any(f.startswith(f"MatMul+{op}:") for f in fusions), fusions
    kernels = [p.op_type for p in compiled.report.placements]
    assert kernels.count("MatMul") == 1 and op not in kernels and "Tanh" not in kernels


def test_an_erf_gelu_after_the_bias_add_reaches_the_matmul():
    """0.5 x (1 + erf(x / sqrt 2)) in a spelling the structural Erf-GELU row does not know,
    on MatMul + bias (Swin's MLP): the bias joins the MatMul first, then the GELU does."""
    bias = numpy_helper.from_array(rng.standard_normal(24).astype(np.float32), "bias")

    def body(h):
        return [helper.make_node("Add", [h, "bias"], ["a"]),
                helper.make_node("Mul", ["a", "half"], ["ha"]),
                helper.make_node("Mul", ["a", "rs2"], ["z"]),
                helper.make_node("Erf", ["z"], ["e"]),
                helper.make_node("Add", ["one", "e"], ["u"]),
                helper.make_node("Mul", ["ha", "u"], ["y"])]
    compiled = _run(_model(body, [bias, _c("half", 0.5), _c("rs2", 0.7071067811865476),
                                  _c("one", 1.0)]))
    fusions = compiled.report.fusions
    assert any(f.startswith("Gelu(approximate=none) written out") for f in fusions), fusions
    assert any(f.startswith("MatMul+Gelu:") for f in fusions), fusions
    assert [p.op_type for p in compiled.report.placements] == ["MatMul"]


def test_an_erf_gelu_no_epilogue_can_take_becomes_one_gelu():
    """(x * 0.5) * (1 + erf(x / sqrt 2)) on a value the MatMul cannot take as an epilogue
    (it is read again: HuBERT's GroupNorm -> GELU is the case): the chain row cannot run
    the Erf (oneDNN has none), so it was a task per op; now it is one Gelu."""
    def body(h):
        return [helper.make_node("Mul", [h, "half"], ["ha"]),
                helper.make_node("Div", [h, "s2"], ["z"]),
                helper.make_node("Erf", ["z"], ["e"]),
                helper.make_node("Add", ["e", "one"], ["u"]),
                helper.make_node("Mul", ["ha", "u"], ["g"]),
                helper.make_node("Add", ["g", h], ["y"])]
    compiled = _run(_model(body, [_c("half", 0.5), _c("s2", 2 ** 0.5), _c("one", 1.0)]))
    fusions = compiled.report.fusions
    assert any(f.startswith("Gelu(approximate=none) written out: 5 nodes") for f in fusions), \
        fusions
    # the Gelu and the residual Add then run as one chain
    assert [p.op_type for p in compiled.report.placements] == ["MatMul", "EltwiseChain"]


def test_a_near_miss_and_a_shared_intermediate_stay_as_written():
    near = [_c("half", 0.5), _c("three", 3.0), _c("k", 0.04), _c("s2pi", 0.7978845608028654),
            _c("one", 1.0)]
    compiled = _run(_model(near_gelu, near))
    assert not any("written out" in f for f in compiled.report.fusions)

    def shared(h):  # the Sigmoid is read outside the region too: SiLU cannot take it
        return [helper.make_node("Sigmoid", [h], ["sg"]), helper.make_node("Mul", [h, "sg"], ["m"]),
                helper.make_node("Add", ["m", "sg"], ["y"])]
    compiled = _run(_model(shared, []))
    assert not any("written out" in f for f in compiled.report.fusions)

    def clipped(h):  # not analytic: x * clip(x) is left alone whatever its values
        return [helper.make_node("Clip", [h, "lo", "hi"], ["c"]),
                helper.make_node("Mul", [h, "c"], ["y"])]
    compiled = _run(_model(clipped, [_c("lo", -1.0), _c("hi", 1.0)]))
    assert not any("written out" in f for f in compiled.report.fusions)


def test_where_no_epilogue_can_take_it_the_spelling_stays_for_the_chain():
    """h is read again after the SiLU, so the MatMul cannot take it as an epilogue: the
    ops stay as written (the chain row runs them), since a standalone swish kernel is a few
    float32 steps less exact than sigmoid-then-multiply and gains nothing over the chain."""
    def swish_plus_input(h):
        return [helper.make_node("Sigmoid", [h], ["sg"]),
                helper.make_node("Mul", [h, "sg"], ["m"]),
                helper.make_node("Add", ["m", h], ["y"])]
    compiled = _run(_model(swish_plus_input, []))
    assert not any("written out" in f for f in compiled.report.fusions), compiled.report.fusions
    assert {p.engine for p in compiled.report.placements} == {"device"}


def test_swish_runs_on_the_device_as_an_op_and_a_chain_step():
    """The Swish op itself (ONNX opset 24's, or what the row makes): a device kernel, a
    chain step and an epilogue, each matching the reference."""

    info = _runtime.kernel_info("Swish", ["float32"], [[2, 3]], {"alpha": 1.5})
    assert info["supported"], info
    g = Graph("swish")
    x = g.add_input("x", TensorMeta(DType.FLOAT32, (3, 5)))
    s = g.add_node("Swish", [x], attrs={"alpha": 1.5}, name="sw").outputs[0]
    k = g.add_constant("k", np.array(0.5, np.float32))
    y = g.add_node("Mul", [s, k], name="scale").outputs[0]
    g.outputs = [y]
    compiled = compile_graph(g, CompileOptions())
    assert {p.engine for p in compiled.report.placements} == {"device"}
    assert any(f.startswith("EltwiseChain(Swish+Mul)") for f in compiled.report.fusions), \
        compiled.report.fusions
    xv = rng.standard_normal((3, 5)).astype(np.float32) * 4
    got = LoadedModel(compiled).execute({"x": xv})[y.name]
    want = 0.5 * xv / (1 + np.exp(-1.5 * xv))
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
