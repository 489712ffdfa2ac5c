"""Weight-only quantized MatMuls (Cast of 8-bit weights times a per-column scale, as
onnxruntime's and exporters' weight compression write them) run on the device with the
weights kept 8-bit: MatMulQWeight, its weights decompressed to the folded constant's values."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from graphengine.engine.importers import load_model
from graphengine.engine.model import DeviceProgram
from graphengine.engine.ops.control import run_graph
from graphengine.engine.runtime import load
from tests.unit.device_cases import compile_model, onnxruntime

RNG = np.random.default_rng(11)


def _model(x_shape, w, scale, zero=None, scale_first=False):
    """MatMul(X, Cast(W) [- Z] * S)."""
    inits = {"w": w, "s": scale}
    nodes = [helper.make_node("Cast", ["w"], ["wf"], to=TensorProto.FLOAT)]
    deq = "wf"
    if zero is not None:
        inits["z"] = zero
        nodes.append(helper.make_node("Sub", ["wf", "z"], ["wc"]))
        deq = "wc"
    nodes.append(helper.make_node("Mul", ["s", deq] if scale_first else [deq, "s"], ["wd"]))
    nodes.append(helper.make_node("MatMul", ["x", "wd"], ["y"]))
    graph = helper.make_graph(
        nodes, "wq", [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x_shape))],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(v, k) for k, v in inits.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def _tasks(compiled):
    assert [type(p) for p in compiled.programs] == [DeviceProgram]
    return compiled.programs[0].tasks


def _check(m, x, rtol=2e-6):
    compiled = compile_model(m)
    tasks = _tasks(compiled)
    assert [t.op for t in tasks if t.op in ("MatMul", "MatMulQWeight")] == ["MatMulQWeight"]
    # the weights stay 8-bit: well under the float32 bytes of the matrix
    w = next(i for i in m.graph.initializer if i.name == "w")
    assert compiled.report.memory.weight_bytes < 2 * np.prod(w.dims)
    got = load(compiled).execute({"x": x})["y"]
    want = run_graph(load_model(m), [x], {})[0]
    # the same products as the folded float MatMul, summed in another order
    scale = np.abs(x).sum(axis=-1, keepdims=True).max() * 1e-6
    np.testing.assert_allclose(got, want, rtol=rtol, atol=float(scale))
    np.testing.assert_allclose(got, onnxruntime(m, {"x": x})[0], rtol=rtol, atol=float(scale))
    return got


@pytest.mark.parametrize("rows", [1, 5, 12, 13, 31])
@pytest.mark.parametrize("n", [16, 37, 96])
def test_weight_only_int8_matmul_keeps_the_weights_8_bit(rows, n):
    k = 77  # odd shapes: rows past a 12-row tile, columns past 32
    w = RNG.integers(-128, 128, (k, n)).astype(np.int8)
    s = RNG.uniform(0.001, 0.02, (1, n)).astype(np.float32)  # per column
    x = RNG.standard_normal((2, rows, k)).astype(np.float32)
    _check(_model(x.shape, w, s), x)


@pytest.mark.parametrize("zero_kind", ["one", "per_column"])
def test_uint8_weights_with_zero_points(zero_kind):
    k, n = 40, 50
    w = RNG.integers(0, 256, (k, n)).astype(np.uint8)
    z = (np.array(131, np.float32) if zero_kind == "one"
         else RNG.integers(0, 256, n).astype(np.float32))  # centred values past int8
    s = np.array(0.0123, np.float32)
    x = RNG.standard_normal((3, k)).astype(np.float32)
    _check(_model(x.shape, w, s, zero=z, scale_first=True), x)


def test_the_weights_decompress_to_the_folded_constant_exactly():
    """One row and one column with a single nonzero weight: the product is x * (w * s),
    the folded constant's value, bit for bit."""
    k, n = 64, 33
    w = np.zeros((k, n), np.int8)
    w[5, 32] = -117
    s = RNG.uniform(0.001, 0.02, (1, n)).astype(np.float32)
    x = RNG.standard_normal((1, k)).astype(np.float32)
    m = _model(x.shape, w, s)
    got = load(compile_model(m)).execute({"x": x})["y"]
    np.testing.assert_array_equal(got[0, 32], x[0, 5] * (np.float32(-117) * s[0, 32]))


def test_a_scale_that_is_not_per_column_stays_a_folded_matmul():
    k, n = 8, 6
    w = RNG.integers(-128, 128, (k, n)).astype(np.int8)
    s = RNG.uniform(0.5, 1, (k, 1)).astype(np.float32)  # per row of W: not the kernel's
    x = RNG.standard_normal((2, k)).astype(np.float32)
    m = _model(x.shape, w, s)
    tasks = _tasks(compile_model(m))
    assert "MatMulQWeight" not in [t.op for t in tasks]


@pytest.mark.parametrize("zero", [None, np.array(3, np.float32)])
def test_the_bias_add_joins_the_8_bit_weight_kernel(zero):
    """MatMulQWeight + a constant [N] bias: one task, the bias added after the sums."""
    k, n = 48, 40
    w = RNG.integers(-100, 100, (k, n)).astype(np.int8)
    s = RNG.uniform(0.001, 0.02, (1, n)).astype(np.float32)
    bias = RNG.standard_normal(n).astype(np.float32)
    m = _model((5, k), w, s, zero=zero)
    m.graph.node[-1].output[0] = "p"
    m.graph.node.append(helper.make_node("Add", ["p", "b"], ["y"]))
    m.graph.initializer.append(numpy_helper.from_array(bias, "b"))
    compiled = compile_model(m)
    assert [t.op for t in _tasks(compiled)] == ["MatMulQWeight"]
    assert any("MatMulQWeight+bias" in f for f in compiled.report.fusions), \
        compiled.report.fusions
    x = RNG.standard_normal((5, k)).astype(np.float32)
    got = load(compiled).execute({"x": x})["y"]
    want = run_graph(load_model(m), [x], {})[0]
    np.testing.assert_allclose(got, want, rtol=2e-6, atol=float(np.abs(x).sum(-1).max()) * 1e-6)
