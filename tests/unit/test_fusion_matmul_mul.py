"""A gated MLP's product (SwiGLU, GeGLU) becomes the multiplier of the MatMul that makes one
factor: the kernel applies it after the bias, residual and activation; the numbers are what
onnxruntime computes for the unfused graph."""

from __future__ import annotations

import math

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from graphengine import _runtime as rt
from graphengine.engine.importers import load_model
from graphengine.engine.pipeline import CompileOptions, compile_graph
from graphengine.engine.runtime import load
from tests.unit.test_runtime import Const, load_op, run_op

RNG = np.random.default_rng(11)


def gated_mlp(b, s, d, f, *, act="silu", gate_first=True, after=None) -> onnx.ModelProto:
    """x [b,s,d] -> act(x W_gate) * (x W_up) -> [after] -> W_down, a residual around it.
    act: "silu" (x * Sigmoid(x), LLaMA) | "gelu" (the Gelu op, Gemma's GeGLU) | "none".
    gate_first: the gate's MatMul comes first in the graph (else the up projection does)."""
    inits, nodes = {}, []

    def init(name, value):
        inits[name] = np.asarray(value, np.float32)
        return name

    def node(op, ins, out, **attrs):
        nodes.append(helper.make_node(op, ins, [out], name=out, **attrs))
        return out

    mms = [("gate", "w_gate"), ("up", "w_up")]
    for name, w in (mms if gate_first else mms[::-1]):
        node("MatMul", ["x", init(w, RNG.normal(0, 1 / math.sqrt(d), (d, f)))], name)
    g = "gate"
    if act == "silu":
        g = node("Mul", ["gate", node("Sigmoid", ["gate"], "sig")], "silu")
    elif act == "gelu":
        g = node("Gelu", ["gate"], "gelu")
    h = node("Mul", [g, "up"], "h")
    if after == "relu":
        h = node("Relu", [h], "h_relu")
    down = node("MatMul", [h, init("w_down", RNG.normal(0, 1 / math.sqrt(f), (f, d)))], "down")
    node("Add", ["x", down], "y")
    graph = helper.make_graph(
        nodes, "gated_mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [b, s, d])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [b, s, d])],
        [numpy_helper.from_array(v, k) for k, v in inits.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)], ir_version=9)
    onnx.checker.check_model(model)
    return model


def run_both(model):
    x = RNG.normal(size=[d.dim_value for d in
                         model.graph.input[0].type.tensor_type.shape.dim]).astype(np.float32)
    compiled = compile_graph(load_model(model), CompileOptions(lint=True))
    got = list(load(compiled).execute({"x": x}).values())[0]
    want = ort.InferenceSession(model.SerializeToString(),
                                providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=5e-5)
    ops = [p.op_type for p in compiled.report.placements]
    return compiled, ops


def gate_lines(compiled) -> list[str]:
    return [f for f in compiled.report.fusions if f.startswith("MatMul+Mul(gate)")]


@pytest.mark.parametrize("b,s", [(2, 16), (1, 1), (1, 2)])  # (1, 1), (1, 2): the GEMV kernel
@pytest.mark.parametrize("gate_first", [True, False])
def test_swiglu_product_joins_the_later_projection(b, s, gate_first):
    compiled, ops = run_both(gated_mlp(b, s, 32, 48, gate_first=gate_first))
    (line,) = gate_lines(compiled)
    # the later MatMul in the graph absorbs the Mul, reading the earlier one's output
    assert line == f"MatMul+Mul(gate): {'up' if gate_first else 'gate'} absorbed h", line
    assert "Mul" not in ops and ops.count("MatMul") == 3


def test_geglu_multiplies_after_the_gelu():
    # the Gelu (erf) runs after oneDNN's primitive on AVX-512: the product must follow it
    compiled, ops = run_both(gated_mlp(2, 8, 32, 64, act="gelu", gate_first=False))
    (line,) = gate_lines(compiled)
    assert line == "MatMul+Mul(gate): gate absorbed h", line
    assert "Gelu" not in ops and "Mul" not in ops


def test_an_activation_after_the_product_stays_after_it():
    compiled, ops = run_both(gated_mlp(2, 4, 16, 24, act="none", after="relu"))
    assert len(gate_lines(compiled)) == 1 and "Relu" in ops


# ---- the runtime's MatMul with mul=1 --------------------------------------------------
@pytest.mark.parametrize("m,n,path", [(6, 40, "post-op"), (1, 5, "gemv")])
def test_matmul_multiplier_after_bias_residual_and_activation(m, n, path):
    # 6x40: oneDNN's matmul with a binary post-op; 1 row: the GEMV kernel, then the product
    a = RNG.normal(size=(m, 8)).astype(np.float32)
    w = RNG.normal(size=(8, n)).astype(np.float32)
    bias = RNG.normal(size=n).astype(np.float32)
    r = RNG.normal(size=(m, n)).astype(np.float32)
    g = RNG.normal(size=(m, n)).astype(np.float32)
    model, feeds = load_op("MatMul", [a, Const(w), Const(bias), r, g], [m, n], has_bias=1,
                           sum=1, activation="Relu", mul=1)
    out = model.execute(feeds)[0]
    np.testing.assert_allclose(out, np.maximum(a @ w + bias + r, 0) * g, rtol=1e-5, atol=1e-5)
    (impl,) = [t["impl"] for t in model.profile()]
    assert impl.endswith(" + mul") == (path == "gemv"), impl


def test_matmul_multiplier_has_the_output_shape_or_one_factor_a_row():
    """The output's shape, or [.., rows, 1]: one factor a row (a mixture's routing weight on
    its down projection, fused only for routed products), by the kernel's loop; anything
    else is refused."""
    a = RNG.normal(size=(4, 8)).astype(np.float32)
    w = RNG.normal(size=(8, 5)).astype(np.float32)
    m = RNG.normal(size=(4, 1)).astype(np.float32)
    y = run_op("MatMul", [a, Const(w), m], [4, 5], mul=1)
    np.testing.assert_allclose(y, (a @ w) * m, rtol=1e-5, atol=1e-5)
    a40 = RNG.normal(size=(40, 8)).astype(np.float32)  # the many-row (dot product) kernel
    m40 = RNG.normal(size=(40, 1)).astype(np.float32)
    y = run_op("MatMul", [a40, Const(w), m40], [40, 5], mul=1)
    np.testing.assert_allclose(y, (a40 @ w) * m40, rtol=1e-5, atol=1e-5)
    for bad in ((1, 5), (4, 2)):
        with pytest.raises(rt.InvalidArgument, match=r"multiplier shape .* does not match"):
            run_op("MatMul", [a, Const(w), np.ones(bad, np.float32)], [4, 5], mul=1)
