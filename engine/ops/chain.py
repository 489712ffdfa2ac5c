"""EltwiseChain: elementwise ops the compiler fused into one kernel (optimize/fusion/eltwise.py).

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
from . import registry
from .device_helpers import kernel, reject
from .registry import REQUIRED, DeviceKernel, Layout, OpSchema, register, shape_error
from .shape_helpers import FLOATS, check_dtype, out, shape_in

# The ops a chain step may be ("GeluTanh": Gelu with approximate="tanh").
STEP_OPS = frozenset({
    "Add", "Sub", "Mul", "Div", "Relu", "LeakyRelu", "Sigmoid", "Tanh", "Exp", "Log", "Sqrt",
    "Abs", "Neg", "Gelu", "GeluTanh", "Clip", "HardSigmoid", "HardSwish", "Reciprocal",
    "Swish", "Elu"})
BINARY_STEPS = frozenset({"Add", "Sub", "Mul", "Div"})


def _check(node: Node, a: dict[str, Any]) -> None:
    steps = list(a["ops"])
    n = len(steps)
    if not n or len(a["operands"]) != n or len(a["alphas"]) != n or len(a["betas"]) != n:
        raise shape_error(node, "ops, operands, alphas and betas need one entry per step")
    for i, (op, k) in enumerate(zip(steps, a["operands"])):
        if op not in STEP_OPS:
            raise shape_error(node, f"step {i}: unknown op '{op}'")
        if (op in BINARY_STEPS) != (k >= 0) or k >= len(node.inputs):
            raise shape_error(node, f"step {i} ({op}): bad operand index {k}")


def _infer(node: Node, a: dict[str, Any]) -> list[TensorMeta]:
    _check(node, a)
    dt = check_dtype(node, 0, FLOATS, "X")
    return [out(dt, shape_in(node, 0))]


def reference(name: str, ins: list[np.ndarray | None], attrs: dict[str, Any] | None = None
              ) -> np.ndarray:
    """Output 0 of op `name`'s reference kernel on `ins`, its attribute defaults filled in:
    what an unfused node of that op computes."""
    schema = registry.get(name)
    full = {k: spec.default for k, spec in schema.attrs.items() if spec.default is not REQUIRED}
    full.update(attrs or {}, _n_outputs=1)
    return schema.compute(ins, full)[0]


def run_step(op: str, x: np.ndarray, operand: np.ndarray | None, alpha: float,
             beta: float) -> np.ndarray:
    """One step with the step op's own reference kernel (what the unfused node computes)."""
    name, attrs, extra = op, {}, []
    if op == "GeluTanh":
        name, attrs = "Gelu", {"approximate": "tanh"}
    elif op in ("LeakyRelu", "Swish", "Elu"):
        attrs = {"alpha": alpha}
    elif op == "HardSigmoid":
        attrs = {"alpha": alpha, "beta": beta}
    elif op == "Clip":
        extra = [np.asarray(alpha, x.dtype), np.asarray(beta, x.dtype)]
    return reference(name, [x] + ([operand] if operand is not None else []) + extra, attrs)


def _compute(inputs: list[np.ndarray], a: dict[str, Any]) -> list[np.ndarray]:
    y = inputs[0]
    with np.errstate(all="ignore"):
        for op, k, alpha, beta in zip(a["ops"], a["operands"], a["alphas"], a["betas"]):
            y = run_step(op, y, inputs[k] if k >= 0 else None, alpha, beta)
    return [y]


def _device(node: Node, a: dict[str, Any]) -> DeviceKernel | str:
    why = reject(node)
    if why:
        return why
    attrs = {"ops": ",".join(a["ops"]), "operands": [int(k) for k in a["operands"]],
             "alphas": [float(v) for v in a["alphas"]], "betas": [float(v) for v in a["betas"]]}
    return kernel("EltwiseChain", attrs, range(len(node.inputs)))


register(OpSchema("EltwiseChain", 1, -1, _infer, _compute, device=_device, attrs={
    "ops": A.strings(A.REQUIRED), "operands": A.ints(A.REQUIRED),
    "alphas": A.floats(A.REQUIRED), "betas": A.floats(A.REQUIRED)}, layout=Layout.CHAIN))
