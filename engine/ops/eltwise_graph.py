"""EltwiseGraph: an elementwise region fused into one kernel (fusion/eltwise_graph.py).

Unlike EltwiseChain (one running value), a region is a DAG: values read by several of its
ops, several inputs meeting, several outputs. The node carries a small program: `ops` (one
per instruction), `args` (three slots per instruction, -1 for an unused one; slots
0..n_inputs-1 are the node's inputs, n_inputs + k is instruction k's result, read only by
later instructions), `alphas`/`betas` (each instruction's parameters: LeakyRelu's slope,
Clip's bounds, Pow's constant exponent) and `results` (the slot of each node output). Every
output has the inputs' broadcast shape (the region's domain).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ..dtypes import DType
from ..ir import Node, TensorMeta
from . import attrs as A
from .chain import BINARY_STEPS, STEP_OPS, reference, run_step
from .device_helpers import kernel, reject
from .registry import DeviceKernel, Layout, OpSchema, register, shape_error
from .shape_helpers import broadcast, check_dtype, out, shape_in

# Float32 unary ops the device runs only as instructions of this kernel (alone: a
# one-instruction EltwiseGraph, `single`), each with the instruction's alpha and beta from
# the node's attributes and back: Softplus and Mish (their own exp and log1p: oneDNN's
# soft_relu is ~1% off below -5), and ops oneDNN has no eltwise for, which cut a device
# program in two as host steps (JetMoE's Sign, six of them).
_NO_PARAMS = (lambda a: (0.0, 0.0), lambda al, be: {})
GRAPH_ONLY: dict[str, tuple[Callable[[dict[str, Any]], tuple[float, float]],
                            Callable[[float, float], dict[str, Any]]]] = {
    **{op: _NO_PARAMS for op in ("Softplus", "Mish", "Sign", "Round", "Softsign")},
    "Selu": (lambda a: (a["alpha"], a["gamma"]), lambda al, be: {"alpha": al, "gamma": be}),
    "Celu": (lambda a: (a["alpha"], 0.0), lambda al, be: {"alpha": al}),
    "ThresholdedRelu": (lambda a: (a["alpha"], 0.0), lambda al, be: {"alpha": al}),
    "Shrink": (lambda a: (a["lambd"], a["bias"]), lambda al, be: {"lambd": al, "bias": be}),
}

# Float32 unary ops with a kernel of their own that also run as instructions (the runtime
# calls the Sin kernel's code over a register): a Snake activation, x + sin(a x)^2 / a, is
# one region between an audio codec's convolutions, not Mul, Sin and a region apart.
TRIG = ("Sin", "Cos")

# Instruction op -> number of operands.
ARITY = {**{op: 1 for op in STEP_OPS - BINARY_STEPS}, **{op: 2 for op in BINARY_STEPS},
         "Max": 2, "Min": 2, "Pow": 1, **{op: 1 for op in GRAPH_ONLY}, **{op: 1 for op in TRIG}}
MAX_INSTRUCTIONS = 8192  # the runtime's bounds (kernels_eltwise_graph.cc)
MAX_OUTPUTS = 4096


def _check(node: Node, a: dict[str, Any]) -> None:
    ops, args = list(a["ops"]), list(a["args"])
    n, n_in = len(ops), len(node.inputs)
    if not n or n > MAX_INSTRUCTIONS or len(args) != 3 * n or len(a["alphas"]) != n \
            or len(a["betas"]) != n:
        raise shape_error(node, f"{n} instructions (1 to {MAX_INSTRUCTIONS}) need 3 args and "
                                "one alpha and beta each")
    for k, op in enumerate(ops):
        if op not in ARITY:
            raise shape_error(node, f"instruction {k}: unknown op '{op}'")
        used = args[3 * k:3 * k + 3]
        want = ARITY[op]
        if any(not 0 <= s < n_in + k for s in used[:want]) or any(s != -1 for s in used[want:]):
            raise shape_error(node, f"instruction {k} ({op}): bad argument slots {used}")
    outs = list(a["results"])
    if len(outs) != len(node.outputs) or any(not n_in <= s < n_in + n for s in outs):
        raise shape_error(node, f"outputs {outs} must name one instruction result per output")


def _infer(node: Node, a: dict[str, Any]) -> list[TensorMeta]:
    _check(node, a)
    for i in range(len(node.inputs)):
        check_dtype(node, i, (DType.FLOAT32,), "X")
    shape = broadcast(node, [shape_in(node, i) for i in range(len(node.inputs))])
    return [out(DType.FLOAT32, shape) for _ in node.outputs]


def run_instruction(op: str, x: np.ndarray, y: np.ndarray | None, alpha: float,
                    beta: float) -> np.ndarray:
    """One instruction with the op's own reference kernel (what the unfused node computes)."""
    if op in ("Max", "Min"):
        return reference(op, [x, y])
    if op in GRAPH_ONLY:
        return reference(op, [x], GRAPH_ONLY[op][1](alpha, beta))
    if op in TRIG:
        return reference(op, [x])
    if op == "Pow":
        return reference("Pow", [x, np.asarray(alpha, dtype=x.dtype)])
    return run_step(op, x, y, alpha, beta)


def _compute(inputs: list[np.ndarray], a: dict[str, Any]) -> list[np.ndarray]:
    slots: list[np.ndarray] = [np.asarray(x, np.float32) for x in inputs]
    shape = np.broadcast_shapes(*(x.shape for x in slots))
    args = list(a["args"])
    with np.errstate(all="ignore"):
        for k, (op, alpha, beta) in enumerate(zip(a["ops"], a["alphas"], a["betas"])):
            s0, s1 = args[3 * k], args[3 * k + 1]
            y = run_instruction(op, slots[s0], slots[s1] if s1 >= 0 else None, alpha, beta)
            slots.append(np.asarray(y, np.float32))
    return [np.ascontiguousarray(np.broadcast_to(slots[s], shape)) for s in a["results"]]


def single(op: str) -> Callable[[Node, dict[str, Any]], DeviceKernel | str]:
    """The device function of a float32 unary op the runtime runs only as a one-instruction
    EltwiseGraph (`GRAPH_ONLY`)."""
    def device(node: Node, a: dict[str, Any]) -> DeviceKernel | str:
        why = reject(node)
        if why:
            return why
        if node.inputs[0].meta.dtype is not DType.FLOAT32:
            return f"device {op} is float32 only"
        alpha, beta = GRAPH_ONLY[op][0](a)
        return kernel("EltwiseGraph", {"ops": op, "args": [0, -1, -1], "alphas": [float(alpha)],
                                       "betas": [float(beta)], "results": [1]}, (0,))
    return device


def _device(node: Node, a: dict[str, Any]) -> DeviceKernel | str:
    why = reject(node)
    if why:
        return why
    attrs = {"ops": ",".join(a["ops"]), "args": [int(s) for s in a["args"]],
             "alphas": [float(v) for v in a["alphas"]], "betas": [float(v) for v in a["betas"]],
             "results": [int(s) for s in a["results"]]}
    return kernel("EltwiseGraph", attrs, range(len(node.inputs)))


register(OpSchema("EltwiseGraph", 1, -1, _infer, _compute, device=_device, attrs={
    "ops": A.strings(A.REQUIRED), "args": A.ints(A.REQUIRED),
    "alphas": A.floats(A.REQUIRED), "betas": A.floats(A.REQUIRED),
    "results": A.ints(A.REQUIRED)}, max_outputs=MAX_OUTPUTS, layout=Layout.CHAIN))
