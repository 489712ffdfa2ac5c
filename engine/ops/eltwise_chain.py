"""EltwiseChain: a chain of elementwise ops applied to one tensor, as one node.

Made by the compiler's eltwise_chain fusion (optimize/fusion_eltwise.py); the device runs it
as one oneDNN eltwise or binary primitive with the rest of the chain as post-ops, so the
intermediates never go to memory.

Input 0 is the chain's value X; inputs 1.. are the other operands of its binary steps, each
of which broadcasts to X's shape (a scalar, a per-channel vector, a full tensor...). The
output has X's shape and dtype. Attributes, one entry per step:

  steps     op names: unary Relu Sigmoid Tanh Exp Log Sqrt Abs Neg Gelu GeluTanh LeakyRelu
            Clip HardSigmoid HardSwish Reciprocal Pow (a constant exponent), binary Add Sub
            Mul Div
  operands  for a binary step the input index of its other operand (>= 1), else -1
  reversed  1 when the chain value is a binary step's right operand (Sub(c, x), Div(c, x))
  alphas    LeakyRelu alpha, Clip min, HardSigmoid alpha, Pow exponent (else 0)
  betas     Clip max, HardSigmoid beta (else 0)

The numpy reference runs each step with the step op's own reference kernel, so a chain on
the host computes exactly what the unfused ops would.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..dtypes import DType
from ..ir import Node, TensorMeta
from . import attrs as A
from .device_helpers import kernel, reject
from .registry import REQUIRED, OpSchema, get, register, shape_error

UNARY_STEPS = {"Relu", "Sigmoid", "Tanh", "Exp", "Log", "Sqrt", "Abs", "Neg", "Gelu",
               "GeluTanh", "LeakyRelu", "Clip", "HardSigmoid", "HardSwish", "Reciprocal",
               "Pow"}
BINARY_STEPS = {"Add", "Sub", "Mul", "Div"}

CHAIN_ATTRS = {"steps": A.strings(REQUIRED), "operands": A.ints(REQUIRED),
               "reversed": A.ints(REQUIRED), "alphas": A.floats(REQUIRED),
               "betas": A.floats(REQUIRED)}


def check_steps(a: dict[str, Any], n_inputs: int) -> str | None:
    """Why the attributes do not describe a chain over `n_inputs` inputs, or None."""
    steps = list(a["steps"])
    if not steps:
        return "a chain needs at least one step"
    for key in ("operands", "reversed", "alphas", "betas"):
        if len(a[key]) != len(steps):
            return f"'{key}' has {len(a[key])} entries for {len(steps)} steps"
    used = set()
    for i, (step, operand) in enumerate(zip(steps, a["operands"])):
        if step in BINARY_STEPS:
            if not 1 <= operand < n_inputs:
                return f"step {i} ({step}): operand input {operand} out of range [1, {n_inputs})"
            used.add(operand)
        elif step in UNARY_STEPS:
            if operand != -1:
                return f"step {i} ({step}) is unary but names operand input {operand}"
        else:
            return f"step {i}: unknown op '{step}'"
    if used != set(range(1, n_inputs)):
        return f"inputs {sorted(set(range(1, n_inputs)) - used)} are not used by any step"
    return None


def _infer(node: Node, a: dict[str, Any]) -> list[TensorMeta]:
    why = check_steps(a, len(node.inputs))
    if why:
        raise shape_error(node, why)
    x = node.inputs[0].meta if node.inputs and node.inputs[0] is not None else None
    if x is None:
        raise shape_error(node, "input 0 has no inferred type yet")
    for i, v in enumerate(node.inputs[1:], 1):
        if v is None or v.meta is None:
            raise shape_error(node, f"input {i} has no inferred type yet")
        if v.meta.dtype is not x.dtype:
            raise shape_error(node, f"input {i} is {v.meta.dtype.value}, X is {x.dtype.value}")
        if x.is_static and v.meta.is_static:
            try:
                b = np.broadcast_shapes(tuple(x.shape), tuple(v.meta.shape))
            except ValueError:
                b = None
            if b != tuple(x.shape):
                raise shape_error(node, f"input {i} of shape {list(v.meta.shape)} does not "
                                        f"broadcast to X's {list(x.shape)}")
    return [TensorMeta(x.dtype, x.shape)]


def _defaults(op: str) -> dict[str, Any]:
    return {k: s.default for k, s in get(op).attrs.items()
            if s.default is not None and s.default is not REQUIRED}


def run_step(step: str, x: np.ndarray, other: np.ndarray | None, rev: bool, alpha: float,
             beta: float) -> np.ndarray:
    """One step with the step op's reference kernel."""
    f = x.dtype.type
    if step in BINARY_STEPS:
        ins = [other, x] if rev else [x, other]
        return get(step).compute(ins, _defaults(step))[0]
    if step in ("Gelu", "GeluTanh"):
        a = _defaults("Gelu") | {"approximate": "tanh" if step == "GeluTanh" else "none"}
        return get("Gelu").compute([x], a)[0]
    if step == "Clip":
        return get("Clip").compute([x, f(alpha), f(beta)], _defaults("Clip"))[0]
    if step == "Pow":
        return get("Pow").compute([x, f(alpha)], _defaults("Pow"))[0]
    a = _defaults(step)
    if step == "LeakyRelu":
        a["alpha"] = alpha
    elif step == "HardSigmoid":
        a["alpha"], a["beta"] = alpha, beta
    return get(step).compute([x], a)[0]


def _compute(ins: list[Any], a: dict[str, Any]) -> list[np.ndarray]:
    x = np.asarray(ins[0])
    for step, operand, rev, alpha, beta in zip(a["steps"], a["operands"], a["reversed"],
                                               a["alphas"], a["betas"]):
        other = np.asarray(ins[operand]) if operand >= 1 else None
        x = np.asarray(run_step(step, x, other, bool(rev), float(alpha), float(beta)))
    return [x.astype(np.asarray(ins[0]).dtype, copy=False)]


def _device(node: Node, a: dict[str, Any]):
    why = reject(node, frozenset({DType.FLOAT32}))
    if why:
        return why
    attrs = {k: list(a[k]) for k in CHAIN_ATTRS}
    attrs["steps"] = ",".join(a["steps"])  # the runtime spec has no string lists
    return kernel("EltwiseChain", attrs, tuple(range(len(node.inputs))))


register(OpSchema("EltwiseChain", 1, -1, _infer, _compute, attrs=CHAIN_ATTRS, device=_device))
