"""Weight-only quantized MatMuls (Cast of 8-bit weights times a per-column scale, as
onnxruntime's and exporters' weight compression write them) run on the device with the
weights kept 8-bit: MatMulQWeight, its weights decompressed to the folded constant's values."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from graphengine.engine.errors import InvalidInput
from graphengine.engine.importers import load_model
from graphengine.engine.model import DeviceProgram
from graphengine.engine.ops.control import run_graph
from graphengine.engine.pipeline import CompileOptions
from graphengine.engine.runtime import load
from tests.unit.device_cases import compile_model, native_bf16, onnxruntime

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


def _check(m, x, rtol=2e-6, ort_optimize=True):
    # float32 activations (the opt-out of the bf16 products, tested below)
    compiled = compile_model(m, weight_only_products="float32")
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
    np.testing.assert_allclose(got, onnxruntime(m, {"x": x}, ort_optimize)[0], rtol=rtol,
                               atol=float(scale))
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


def _bf16(a: np.ndarray) -> np.ndarray:
    """a rounded to bfloat16 (nearest even), as float32."""
    bits = np.asarray(a, np.float32).view(np.uint32).astype(np.uint64)
    bits = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16 << 16
    return bits.astype(np.uint32).view(np.float32)


def _qweight_run(m, x, **options):
    """(output, the MatMulQWeight task's attrs, its kernel's impl) of `m` compiled and run."""
    compiled = compile_model(m, **options)
    (task,) = [t for t in _tasks(compiled) if t.op == "MatMulQWeight"]
    loaded = load(compiled)
    got = loaded.execute({"x": x})["y"]
    (impl,) = [p["impl"] for nat in loaded.natives.values() for p in nat.profile()
               if p["name"] == task.name]
    return got, task.attrs, impl


def _bias_model(x_shape, w, s, zero=None):
    """MatMul(X, (Cast(W) [- Z]) * S) + B, B float32 [N] (the bias joins the task)."""
    m = _model(x_shape, w, s, zero=zero)
    m.graph.node[-1].output[0] = "p"
    m.graph.node.append(helper.make_node("Add", ["p", "b"], ["y"]))
    bias = RNG.standard_normal(w.shape[1]).astype(np.float32)
    m.graph.initializer.append(numpy_helper.from_array(bias, "b"))
    return m, bias


def _error_scale(x, wd, bias):
    """(the exact product, sum_k |x w| (the scale of X's rounding error), float32 slack)."""
    exact = x.astype(np.float64) @ wd + bias
    term_sum = np.abs(x.astype(np.float64)) @ np.abs(wd)
    return exact, term_sum, 2e-6 * term_sum + 1e-6 * np.abs(bias)


@pytest.mark.parametrize("products", ["bf16x2", "bf16"])
@pytest.mark.parametrize("kind", ["int8", "uint8_zero_points"])
def test_weight_only_matmul_multiplies_in_bfloat16_where_the_cpu_does(kind, products):
    """By default (`weight_only_products` bf16x2) MatMulQWeight is marked
    `bf16_activations` 2; with 64 rows on a CPU with AMX or AVX512_BF16 its kernel is
    oneDNN's bf16 matmul: the centred weights exact in bf16, X as hi = bf16(x) and
    lo = bf16(x - hi) (bf16: hi alone), float32 sums, then the scale and the bias in
    float32. So the result is numpy's product of hi (+ lo) and the exact weights, to float32
    summation error, and within 2^-18 (2^-9) per term of the exact product."""
    rows, k, n = 64, 96, 80
    if kind == "int8":
        w = RNG.integers(-128, 128, (k, n)).astype(np.int8)
        z = None
    else:  # centred values up to +-255: still exact in bf16 (8 significant bits)
        w = RNG.integers(0, 256, (k, n)).astype(np.uint8)
        w[:, 0], w[:, 1] = 0, 255
        z = RNG.integers(0, 256, n).astype(np.float32)
        z[0], z[1] = 255, 0
    s = RNG.uniform(0.001, 0.02, (1, n)).astype(np.float32)
    m, bias = _bias_model((rows, k), w, s, zero=z)
    x = RNG.standard_normal((rows, k)).astype(np.float32)
    options = {} if products == "bf16x2" else {"weight_only_products": products}
    got, attrs, impl = _qweight_run(m, x, **options)
    terms = 2 if products == "bf16x2" else 1
    assert attrs.get("bf16_activations") == terms
    centred = w.astype(np.float64) - (0 if z is None else z.astype(np.float64))
    wd = centred * s.astype(np.float64)
    exact, term_sum, slack = _error_scale(x, wd, bias)
    if native_bf16():
        assert impl.endswith(" " + products) and "wq int" not in impl, impl
        hi = _bf16(x)
        xs = hi.astype(np.float64) + (_bf16(x - hi) if terms == 2 else 0)
        assert np.all(np.abs(got - (xs @ wd + bias)) <= slack)
        bound = 2.0 ** -18 if terms == 2 else 2.0 ** -9
        assert np.all(np.abs(got - exact) <= bound * term_sum + slack)
        if terms == 1:  # X was rounded: well past float32's error
            assert np.any(np.abs(got - exact) > 100 * slack)
    else:
        # this CPU has no native bf16 (no amx_bf16 / avx512_bf16 in /proc/cpuinfo): emulated
        # bf16 would be slower than the float32 kernel, which runs instead
        assert impl.startswith("wq int"), impl
        assert np.all(np.abs(got - exact) <= slack)


def test_the_opt_out_keeps_float32_activations():
    """weight_only_products=float32: no mark, the 8-bit float32 kernel, the float32
    product."""
    rows, k, n = 64, 96, 80
    w = RNG.integers(-128, 128, (k, n)).astype(np.int8)
    s = RNG.uniform(0.001, 0.02, (1, n)).astype(np.float32)
    m, bias = _bias_model((rows, k), w, s)
    x = RNG.standard_normal((rows, k)).astype(np.float32)
    got, attrs, impl = _qweight_run(m, x, weight_only_products="float32")
    assert "bf16_activations" not in attrs
    assert impl == "wq int8 avx512", impl
    exact, _, slack = _error_scale(x, w.astype(np.float64) * s.astype(np.float64), bias)
    assert np.all(np.abs(got - exact) <= slack)


def test_an_unknown_product_kind_is_refused():
    with pytest.raises(InvalidInput, match="weight_only_products"):
        CompileOptions.from_mapping({"weight_only_products": "int4"})


@pytest.mark.parametrize("rows", [1, 7])
def test_a_few_rows_keep_the_8_bit_kernel(rows):
    """Below 8 rows (a gemv) the product is bound by reading the weights: the kernel keeps
    them 1 byte each (float32 products) rather than 2 in bf16."""
    k, n = 96, 80
    w = RNG.integers(-128, 128, (k, n)).astype(np.int8)
    s = RNG.uniform(0.001, 0.02, (1, n)).astype(np.float32)
    m, _ = _bias_model((rows, k), w, s)
    x = RNG.standard_normal((rows, k)).astype(np.float32)
    _, attrs, impl = _qweight_run(m, x)
    assert attrs.get("bf16_activations") == 2 and impl == "wq int8 avx512", impl


def _dequantize_model(x_shape, w, scale, zero=None, axis=1):
    """MatMul(X, DequantizeLinear(W, S[, Z], axis))."""
    inits = [numpy_helper.from_array(w, "w"), numpy_helper.from_array(scale, "s")]
    ins = ["w", "s"]
    if zero is not None:
        inits.append(numpy_helper.from_array(zero, "z"))
        ins.append("z")
    nodes = [helper.make_node("DequantizeLinear", ins, ["wd"], axis=axis),
             helper.make_node("MatMul", ["x", "wd"], ["y"])]
    graph = helper.make_graph(
        nodes, "dq", [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x_shape))],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)


@pytest.mark.parametrize("kind", ["per_column_uint8", "per_tensor_int8"])
def test_dequantize_linear_weights_keep_8_bit(kind):
    """MatMul(X, DequantizeLinear(W, S, Z)) of constant 8-bit W, per column (axis 1) or per
    tensor: the same MatMulQWeight (QDQ exports' weight-only form), the folded values'
    products in float32 with the opt-out. (ONNX Runtime's optimizer makes this form a
    MatMulNBits that quantizes X to 8 bits: compared with its rewrites off.)"""
    k, n = 70, 45
    if kind == "per_column_uint8":
        w = RNG.integers(0, 256, (k, n)).astype(np.uint8)
        s = RNG.uniform(0.001, 0.02, n).astype(np.float32)
        z = RNG.integers(0, 256, n).astype(np.uint8)
    else:
        w = RNG.integers(-128, 128, (k, n)).astype(np.int8)
        s, z = np.array(0.013, np.float32), np.array(-3, np.int8)
    m = _dequantize_model((6, k), w, s, z)
    _check(m, RNG.standard_normal((6, k)).astype(np.float32), ort_optimize=False)


def test_a_dequantize_along_k_stays_folded():
    """A scale per row of W (axis 0) is not the kernel's per-column form: folded."""
    k, n = 12, 9
    w = RNG.integers(-128, 128, (k, n)).astype(np.int8)
    m = _dequantize_model((2, k), w, RNG.uniform(0.5, 1, k).astype(np.float32), axis=0)
    assert "MatMulQWeight" not in [t.op for t in _tasks(compile_model(m))]
