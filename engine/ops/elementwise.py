"""Elementwise unary ops: math functions, rounding, predicates (IsNaN, Not...)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ..dtypes import DType
from ..ir import Node, TensorMeta
from . import attrs as A
from .device_helpers import kernel, reject, view
from .eltwise_graph import single
from .kernel_utils import widen
from .mathfn import erf
from .registry import AttrSpec, DeviceKernel, Layout, OpSchema, register
from .shape_helpers import FLOATS, INTS, NUMERIC, SIGNED_INTS, check_dtype, out, shape_in

Fn = Callable[[np.ndarray, dict[str, Any]], np.ndarray]


def unary_device(op: str, attr_names: tuple[str, ...] = ()) -> Callable[..., DeviceKernel | str]:
    def device(node: Node, attrs: dict[str, Any]) -> DeviceKernel | str:
        why = reject(node)
        if why:
            return why
        return kernel(op, {k: attrs[k] for k in attr_names}, (0,))
    return device


def unary(name: str, fn: Fn, dtypes: frozenset[DType] = FLOATS, *,
          attrs: dict[str, AttrSpec] | None = None, out_dtype: DType | None = None,
          device: Any = None, alias: dict[int, int] | None = None,
          float_math: bool = True, layout: Layout = Layout.UNIFORM) -> None:
    """Register an elementwise unary op; float math runs in float32+ and is cast back.
    Its kernel maps each element to itself, so it runs on any format (`layout`)."""

    def infer(node: Node, a: dict[str, Any]) -> list[TensorMeta]:
        dt = check_dtype(node, 0, dtypes, "X")
        return [out(out_dtype or dt, shape_in(node, 0))]

    def compute(ins: list[np.ndarray | None], a: dict[str, Any]) -> list[np.ndarray]:
        x = np.asarray(ins[0])
        y = fn(widen(x) if float_math else x, a)
        return [np.asarray(y).astype(out_dtype.numpy if out_dtype else x.dtype, copy=False)]

    register(OpSchema(name, 1, 1, infer, compute, attrs=attrs or {}, device=device,
                      alias=alias or {}, layout=layout))


def _sign_neg(x: np.ndarray, a: dict[str, Any]) -> np.ndarray:
    return np.negative(x)


def _isinf(x: np.ndarray, a: dict[str, Any]) -> np.ndarray:
    pos = np.isposinf(x) if a["detect_positive"] else np.zeros(x.shape, bool)
    neg = np.isneginf(x) if a["detect_negative"] else np.zeros(x.shape, bool)
    return pos | neg


def _round(x: np.ndarray, a: dict[str, Any]) -> np.ndarray:
    return np.round(x)  # half to even, as ONNX specifies


_SIMPLE: dict[str, Fn] = {
    "Sqrt": lambda x, a: np.sqrt(x),
    "Exp": lambda x, a: np.exp(x),
    "Log": lambda x, a: np.log(x),
    "Reciprocal": lambda x, a: np.reciprocal(x),
    "Tanh": lambda x, a: np.tanh(x),
    "Sigmoid": lambda x, a: np.where(x >= 0, 1 / (1 + np.exp(-np.abs(x))),
                                     np.exp(-np.abs(x)) / (1 + np.exp(-np.abs(x)))),
    "Erf": lambda x, a: erf(x),
    "Floor": lambda x, a: np.floor(x),
    "Ceil": lambda x, a: np.ceil(x),
    "Sin": lambda x, a: np.sin(x), "Cos": lambda x, a: np.cos(x),
    "Tan": lambda x, a: np.tan(x), "Asin": lambda x, a: np.arcsin(x),
    "Acos": lambda x, a: np.arccos(x), "Atan": lambda x, a: np.arctan(x),
    "Sinh": lambda x, a: np.sinh(x), "Cosh": lambda x, a: np.cosh(x),
    "Asinh": lambda x, a: np.arcsinh(x), "Acosh": lambda x, a: np.arccosh(x),
    "Atanh": lambda x, a: np.arctanh(x),
    "Softsign": lambda x, a: x / (1 + np.abs(x)),
    "Softplus": lambda x, a: np.logaddexp(0, x),
    "Mish": lambda x, a: x * np.tanh(np.logaddexp(0, x)),
    "HardSwish": lambda x, a: x * np.clip(x / 6 + 0.5, 0, 1),
}
_DEVICE_UNARY = {"Sqrt", "Exp", "Log", "Reciprocal", "Tanh", "Sigmoid", "Erf", "Floor", "Ceil",
                 "HardSwish", "Sin", "Cos"}
# Softplus and Mish run as a one-instruction EltwiseGraph (its own exp and log1p): oneDNN's
# soft_relu is off by ~1% relative for x < -5, beyond the ONNX tolerance (test_mish_expanded).
_GRAPH_UNARY = {"Softplus", "Mish", "Softsign"}

for _name, _fn in _SIMPLE.items():
    unary(_name, _fn, device=unary_device(_name) if _name in _DEVICE_UNARY
          else single(_name) if _name in _GRAPH_UNARY else None)

unary("Round", _round, device=single("Round"))
unary("Abs", lambda x, a: np.abs(x), NUMERIC, device=unary_device("Abs"), float_math=False)
unary("Neg", _sign_neg, FLOATS | SIGNED_INTS, device=unary_device("Neg"), float_math=False)
unary("Sign", lambda x, a: np.sign(x), NUMERIC, float_math=False, device=single("Sign"))
unary("Relu", lambda x, a: np.maximum(x, np.zeros((), x.dtype)), FLOATS | SIGNED_INTS,
      device=unary_device("Relu"), float_math=False)
unary("Not", lambda x, a: np.logical_not(x), frozenset({DType.BOOL}), device=unary_device("Not"),
      float_math=False)
unary("BitwiseNot", lambda x, a: np.invert(x), INTS, float_math=False)
# Plain: their bool outputs take no part in a convolution region's format.
unary("IsNaN", lambda x, a: np.isnan(x), FLOATS, out_dtype=DType.BOOL,
      device=unary_device("IsNaN"), layout=Layout.PLAIN)
unary("IsInf", _isinf, FLOATS, out_dtype=DType.BOOL,
      attrs={"detect_negative": A.i(1), "detect_positive": A.i(1)},
      device=unary_device("IsInf", ("detect_negative", "detect_positive")), layout=Layout.PLAIN)

_ALL = frozenset(DType)
# A view: its alias reads the input's bytes as plain.
unary("Identity", lambda x, a: x, _ALL, device=view, alias={0: 0}, float_math=False,
      layout=Layout.PLAIN)
