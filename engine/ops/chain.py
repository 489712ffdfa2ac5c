"""EltwiseChain: elementwise ops the compiler fused into one kernel (optimize/fusion_eltwise).

Input 0 is the chain's start; `ops` lists the steps in order, `operands[i]` is the input
index of step i's second operand (-1 for a unary step; the running value is always the
first operand), `alphas`/`betas` carry each step's parameters (LeakyRelu's alpha, Clip's
bounds, HardSigmoid's alpha and beta). The output has input 0's shape and dtype.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..ir import Node, TensorMeta
from . import attrs as A
from .device_helpers import kernel, reject
from .kernel_utils import widen
from .mathfn import erf
from .registry import DeviceKernel, OpSchema, register, shape_error
from .shape_helpers import FLOATS, check_dtype, out, shape_in

_SQRT1_2 = 0.7071067811865476


def _gelu_tanh(x: np.ndarray) -> np.ndarray:
    return 0.5 * x * (1.0 + np.tanh(0.7978845608028654 * (x + 0.044715 * x ** 3)))


# step name -> f(value, operand, alpha, beta)
STEPS: dict[str, Any] = {
    "Add": lambda x, o, a, b: x + o,
    "Sub": lambda x, o, a, b: x - o,
    "Mul": lambda x, o, a, b: x * o,
    "Div": lambda x, o, a, b: x / o,
    "Relu": lambda x, o, a, b: np.maximum(x, 0),
    "LeakyRelu": lambda x, o, a, b: np.where(x >= 0, x, a * x),
    "Sigmoid": lambda x, o, a, b: 1.0 / (1.0 + np.exp(-x)),
    "Tanh": lambda x, o, a, b: np.tanh(x),
    "Exp": lambda x, o, a, b: np.exp(x),
    "Log": lambda x, o, a, b: np.log(x),
    "Sqrt": lambda x, o, a, b: np.sqrt(x),
    "Abs": lambda x, o, a, b: np.abs(x),
    "Neg": lambda x, o, a, b: -x,
    "Gelu": lambda x, o, a, b: 0.5 * x * (1.0 + erf(x * _SQRT1_2)),
    "GeluTanh": lambda x, o, a, b: _gelu_tanh(x),
    "Clip": lambda x, o, a, b: np.minimum(np.maximum(x, a), b),
    "HardSigmoid": lambda x, o, a, b: np.clip(a * x + b, 0, 1),
    "HardSwish": lambda x, o, a, b: x * np.clip(x / 6.0 + 0.5, 0, 1),
    "Reciprocal": lambda x, o, a, b: 1.0 / x,
}
BINARY_STEPS = frozenset({"Add", "Sub", "Mul", "Div"})


def _check(node: Node, a: dict[str, Any]) -> None:
    steps = list(a["ops"])
    n = len(steps)
    if not n or len(a["operands"]) != n or len(a["alphas"]) != n or len(a["betas"]) != n:
        raise shape_error(node, "ops, operands, alphas and betas need one entry per step")
    for i, (op, k) in enumerate(zip(steps, a["operands"])):
        if op not in STEPS:
            raise shape_error(node, f"step {i}: unknown op '{op}'")
        if (op in BINARY_STEPS) != (k >= 0) or k >= len(node.inputs):
            raise shape_error(node, f"step {i} ({op}): bad operand index {k}")


def _infer(node: Node, a: dict[str, Any]) -> list[TensorMeta]:
    _check(node, a)
    dt = check_dtype(node, 0, FLOATS, "X")
    return [out(dt, shape_in(node, 0))]


def _compute(inputs: list[np.ndarray], a: dict[str, Any]) -> list[np.ndarray]:
    x = inputs[0]
    with np.errstate(all="ignore"):
        y = widen(x)
        for op, k, alpha, beta in zip(a["ops"], a["operands"], a["alphas"], a["betas"]):
            y = STEPS[op](y, widen(inputs[k]) if k >= 0 else None, alpha, beta)
    return [np.asarray(y).astype(x.dtype, copy=False).reshape(x.shape)]


def _device(node: Node, a: dict[str, Any]) -> DeviceKernel | str:
    why = reject(node)
    if why:
        return why
    attrs = {"ops": ",".join(a["ops"]), "operands": [int(k) for k in a["operands"]],
             "alphas": [float(v) for v in a["alphas"]], "betas": [float(v) for v in a["betas"]]}
    return kernel("EltwiseChain", attrs, range(len(node.inputs)))


register(OpSchema("EltwiseChain", 1, -1, _infer, _compute, device=_device, attrs={
    "ops": A.strings(A.REQUIRED), "operands": A.ints(A.REQUIRED),
    "alphas": A.floats(A.REQUIRED), "betas": A.floats(A.REQUIRED)}))
