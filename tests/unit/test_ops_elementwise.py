"""Elementwise, binary, variadic, activation and softmax-family ops against onnxruntime."""

from __future__ import annotations

import numpy as np
import pytest

from graphengine.engine.dtypes import DType
from graphengine.engine.errors import ShapeError
from tests.unit.test_ops_common import check, rand, symbolic

UNARY_FLOAT = ["Relu", "Sqrt", "Erf", "Tanh", "Sigmoid", "Neg", "Exp", "Log", "Abs", "Floor",
               "Ceil", "Reciprocal", "Sin", "Cos", "Tan", "Atan", "Sinh", "Cosh", "Asinh",
               "Softsign", "Softplus", "HardSwish", "Sign", "Round", "Identity"]


@pytest.mark.parametrize("op", UNARY_FLOAT)
def test_unary_float(op: str) -> None:
    x = rand(3, 4, 5) * 3
    if op in ("Sqrt", "Log"):
        x = np.abs(x) + 0.1
    check(op, [("x", x)])


@pytest.mark.parametrize("op", ["Asin", "Acos", "Atanh"])
def test_unary_bounded_domain(op: str) -> None:
    check(op, [("x", np.linspace(-0.9, 0.9, 12, dtype=np.float32).reshape(3, 4))])


def test_acosh_and_float64() -> None:
    check("Acosh", [("x", np.linspace(1.1, 5, 8, dtype=np.float32))])
    check("Exp", [("x", rand(4, dtype=np.float64))])


def test_erf_accuracy_wide_range() -> None:
    x = np.concatenate([np.linspace(-6, 6, 2001), np.logspace(-9, 0.5, 50)]).astype(np.float32)
    check("Erf", [("x", x)], rtol=2e-6, atol=1e-7)


@pytest.mark.parametrize("op,dtype", [("Abs", np.int32), ("Neg", np.int64),
                                      ("Relu", np.int8), ("Sign", np.int64)])
def test_unary_int(op: str, dtype: type) -> None:
    check(op, [("x", np.arange(-6, 6, dtype=dtype).reshape(3, 4))])


def test_float16_unary() -> None:
    check("Sigmoid", [("x", rand(2, 3, dtype=np.float16))], rtol=1e-3, atol=1e-3)


def test_logical_and_predicates() -> None:
    b = np.array([[True, False], [False, True]])
    check("Not", [("x", b)])
    check("And", [("a", b), ("b", np.array([True, False]))])
    check("Or", [("a", b), ("b", np.array([[False], [True]]))])
    check("Xor", [("a", b), ("b", b.T)])
    x = np.array([1.0, np.nan, np.inf, -np.inf], np.float32)
    check("IsNaN", [("x", x)])
    check("IsInf", [("x", x)], {"detect_negative": 0})


@pytest.mark.parametrize("op", ["Add", "Sub", "Mul", "Div", "Pow", "Max", "Min"])
def test_binary_broadcasting(op: str) -> None:
    a = np.abs(rand(2, 3, 4)) + 0.5
    b = np.abs(rand(3, 1, seed=1)) + 0.5
    check(op, [("a", a), ("b", b)])


@pytest.mark.parametrize("op", ["Add", "Sub", "Mul", "Div", "Mod"])
def test_binary_int(op: str) -> None:
    a = np.array([[7, -7, 5], [9, -3, 8]], np.int64)
    b = np.array([2, 3, -4], np.int64)
    check(op, [("a", a), ("b", b)])


def test_mod_fmod_and_pow_mixed_types() -> None:
    a = np.array([5.5, -5.5, 4.0], np.float32)
    check("Mod", [("a", a), ("b", np.array([2.0, 2.0, -3.0], np.float32))], {"fmod": 1})
    check("Pow", [("x", rand(2, 3)), ("y", np.array([2, 3, 1], np.int64))])
    check("Pow", [("x", np.array([1, 2, 3], np.int32)), ("y", np.array([2.0], np.float32))])


@pytest.mark.parametrize("op", ["Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual"])
def test_comparisons(op: str) -> None:
    check(op, [("a", np.array([[1, 2, 3], [4, 5, 6]], np.float32)),
               ("b", np.array([2, 2, 7], np.float32))])


def test_bitwise() -> None:
    a = np.array([[5, 12], [7, 255]], np.uint8)
    b = np.array([3, 10], np.uint8)
    for op in ("BitwiseAnd", "BitwiseOr", "BitwiseXor"):
        check(op, [("a", a), ("b", b)], opset=18)
    check("BitwiseNot", [("x", a)], opset=18)
    check("BitShift", [("x", np.array([16, 4, 1], np.uint32)),
                       ("y", np.array([1, 2, 3], np.uint32))], {"direction": "RIGHT"})


def test_where_broadcasting() -> None:
    cond = np.array([[True], [False]])
    check("Where", [("c", cond), ("x", rand(2, 3)), ("y", rand(3, seed=1))])
    check("Where", [("c", cond), ("x", np.array([1, 2], np.int64)),
                    ("y", np.array([[7], [8]], np.int64))])


def test_variadic() -> None:
    ins = [("a", rand(2, 3)), ("b", rand(3, seed=1)), ("c", rand(1, 3, seed=2))]
    for op in ("Sum", "Mean", "Max", "Min"):
        check(op, ins)
    check("Max", [("a", rand(2, 2))])


@pytest.mark.parametrize("op,attrs", [
    ("Elu", {"alpha": 0.5}), ("Selu", {}), ("LeakyRelu", {"alpha": 0.2}),
    ("ThresholdedRelu", {"alpha": 0.3}), ("HardSigmoid", {"alpha": 0.3, "beta": 0.4}),
    ("Celu", {"alpha": 2.0}), ("Shrink", {"bias": 0.1, "lambd": 0.4}),
])
def test_parametrized_activations(op: str, attrs: dict) -> None:
    check(op, [("x", rand(4, 5) * 2)], attrs)


def test_mish_and_swish() -> None:
    check("Mish", [("x", rand(4, 5) * 2)], opset=18)
    check("Swish", [("x", rand(4, 5) * 2)], {"alpha": 0.7}, opset=24, engine="ref")


def test_gelu_both_forms() -> None:
    x = rand(3, 7) * 3
    check("Gelu", [("x", x)], opset=20, engine="ref")
    check("Gelu", [("x", x)], {"approximate": "tanh"}, opset=20, engine="ref")


def test_prelu_broadcast_slope() -> None:
    check("PRelu", [("x", rand(2, 3, 4)), ("s", np.array([0.1, 0.2, 0.3, 0.4], np.float32))])


def test_clip_forms() -> None:
    x = rand(3, 4) * 3
    lo, hi = np.array(-1.0, np.float32), np.array(0.5, np.float32)
    check("Clip", [("x", x), ("lo", lo), ("hi", hi)])
    check("Clip", [("x", x), ("lo", None), ("hi", hi)])
    check("Clip", [("x", x)])
    check("Clip", [("x", np.arange(-5, 5, dtype=np.int64)), ("lo", np.array(-2, np.int64))])


@pytest.mark.parametrize("op", ["Softmax", "LogSoftmax", "Hardmax"])
@pytest.mark.parametrize("axis", [-1, 0, 1, -2])
def test_softmax_family_axes(op: str, axis: int) -> None:
    check(op, [("x", rand(2, 3, 4) * 4)], {"axis": axis})


def test_softmax_large_values_stable() -> None:
    _, (y,) = check("Softmax", [("x", np.array([[1000.0, 1001.0, 1002.0]], np.float32))])
    assert np.isfinite(y).all()


def test_symbolic_broadcast_keeps_symbols() -> None:
    x = rand(2, 1, 4)
    (meta,) = symbolic("Add", {"a": ["batch", 1, 4], "b": [3, 1]},
                       [("a", x), ("b", rand(3, 1))])
    assert meta.shape == ("batch", 3, 4) and meta.dtype is DType.FLOAT32
    (meta,) = symbolic("Mul", {"a": ["batch", "seq"], "b": ["batch", 1]},
                       [("a", rand(2, 3)), ("b", rand(2, 1))])
    assert meta.shape == ("batch", "seq")


def test_negative_softmax_axis_out_of_range_is_shape_error() -> None:
    with pytest.raises(ShapeError, match="axis -4 is out of range for rank 3"):
        check("Softmax", [("x", rand(2, 3, 4))], {"axis": -4})
