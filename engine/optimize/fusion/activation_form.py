"""Fusion row activation_form: an activation written out in elementwise ops becomes its op.

Exporters spell activations as arithmetic: GPT-2's `gelu_new` is eight nodes (Mul, Pow, Mul,
Add, Mul, Tanh, Add, Mul), SiLU / Swish is `x * Sigmoid(x)` or `x / (1 + Exp(-x))`, QuickGELU
`x * Sigmoid(1.702 x)`, and each exporter orders and factors them its own way. Matching
every spelling by structure is a losing game; instead this row finds the region of analytic
elementwise ops (scalar constants only) that computes one node's output from one tensor `x`
used at least twice, evaluates it with the reference kernels on probe points spanning
[-12, 12] and beyond, and compares the result with each known activation as its op's own
reference kernel computes it (`_forms`): GELU (tanh and erf), Swish with its alpha fitted
from the probe at x = 1. A region that matches within float32 rounding everywhere becomes
one node of that op, which the activation row then folds into the Conv/MatMul/Gemm before
it.

It fires where that fold follows: x comes from a Conv, MatMul or Gemm (or a view of
one) and nothing but the region reads it; and, for GELU, wherever the region has an Erf
(oneDNN has no erf, so the chain row would leave a task per op: HuBERT's GroupNorm -> GELU
took 1 ms in a standalone Erf loop). There the activation costs nothing (oneDNN
applies it as a post-op while the output is in registers); elsewhere the chain row already
runs the spelled-out ops in one pass, and oneDNN's standalone swish is a few float32 steps
less exact than sigmoid-then-multiply (at most 1.4e-6 relative against 2.5e-7, measured over
[-100, 100]), which is nothing for a float model but flips the scale of a
DynamicQuantizeLinear downstream (a quantized OCR model of the zoo: every output moved by a
quantum).

Only analytic ops take part (no Clip, Min, Max, Where, comparisons): two analytic functions
of one variable that agree on a dense set of an interval agree everywhere on it, so the probe
is a check of identity rather than a guess. Regions are small (at most `_MAX_NODES` nodes)
and must not be read from outside but by their last node.
"""

from __future__ import annotations

import functools
import math

import numpy as np

from ... import ops
from ...dtypes import DType
from ...ir import Graph, Node, Value
from ...ops.chain import reference
from .match import VIEWS, Fusion, on_device, producer_through_view, replace_region

_ANALYTIC = {"Add", "Sub", "Mul", "Div", "Pow", "Sqrt", "Tanh", "Erf", "Sigmoid", "Exp", "Neg",
             "Reciprocal"}
_MAX_NODES = 12
_PROBE = np.concatenate([np.linspace(-12.0, 12.0, 961), [-60.0, -30.0, 30.0, 60.0],
                         np.linspace(-1e-3, 1e-3, 11)]).astype(np.float32)


def _swish_alpha(f: np.ndarray) -> float | None:
    """Swish(alpha) has f(1) = sigmoid(alpha): alpha = logit(f(1)), if that is a number."""
    y = float(f[_ONE])
    return math.log(y / (1 - y)) if 0 < y < 1 else None


_ONE = int(np.argmin(np.abs(_PROBE - 1.0)))
_PROBE[_ONE] = 1.0


@functools.cache
def _expected(op_type: str, attrs: tuple) -> np.ndarray:
    """What the node the row would make computes on the probe (the op's reference kernel)."""
    with np.errstate(all="ignore"):  # exp overflows to inf far out: the value is still right
        return reference(op_type, [_PROBE], dict(attrs)).astype(np.float64)


def _forms(f: np.ndarray):
    """(op type, attrs, expected values) of each known activation, for region values f."""
    candidates = [("Gelu", (("approximate", "tanh"),)), ("Gelu", (("approximate", "none"),))]
    alpha = _swish_alpha(f)
    if alpha is not None and 0.05 <= alpha <= 20:
        candidates.append(("Swish", (("alpha", round(alpha, 4)),)))
    for op_type, attrs in candidates:
        yield op_type, dict(attrs), _expected(op_type, attrs)


def _region(graph: Graph, last: Node, x: Value) -> list[Node] | None:
    """The nodes that compute last's output from x and scalar constants, in graph order, or
    None when it needs anything else."""
    found: dict[Node, None] = {}
    stack = [last]
    while stack:
        n = stack.pop()
        if n in found:
            continue
        if n.op_type not in _ANALYTIC or len(n.outputs) != 1 or not on_device(n, last):
            return None
        found[n] = None
        if len(found) > _MAX_NODES:
            return None
        for v in n.inputs:
            if v is None:
                return None
            if v is x:
                continue
            if v.is_constant:
                if np.asarray(v.const).size != 1:
                    return None
                continue
            if v.producer is None:
                return None
            stack.append(v.producer)
    nodes: list[Node] = []  # in dependency order, from the region alone (not a graph scan)

    def place(n: Node) -> None:
        if n in nodes:
            return
        for v in n.inputs:
            if v is not None and v.producer in found:
                place(v.producer)
        nodes.append(n)
    place(last)
    inside = set(nodes)
    for n in nodes:  # nothing outside reads a value of the region but its result
        if n is not last and (n.outputs[0] in graph.outputs
                              or any(u not in inside for u in n.outputs[0].users)):
            return None
    return nodes


def _evaluate(nodes: list[Node], x: Value) -> np.ndarray | None:
    env: dict[Value, np.ndarray] = {x: _PROBE}
    with np.errstate(all="ignore"):
        for n in nodes:
            args = [env[v] if v in env else np.asarray(v.const, np.float32).reshape(())
                    for v in n.inputs]
            try:
                env[n.outputs[0]] = np.asarray(
                    ops.get(n.op_type, n).compute(args, dict(n.attrs, _n_outputs=1))[0])
            except Exception:
                return None
    return env[nodes[-1].outputs[0]]


def _same(f: np.ndarray, g: np.ndarray) -> bool:
    if f.shape != g.shape or not np.all(np.isfinite(f) == np.isfinite(g)):
        return False
    ok = np.isfinite(g)
    return bool(np.all(np.abs(f[ok] - g[ok]) <= 2e-5 * (1 + np.abs(g[ok]))))


def _epilogue_source(graph: Graph, x: Value, nodes: list[Node]) -> bool:
    """x is a Conv/MatMul/Gemm output (or a chain of views of one) read only by the
    region."""
    region = set(nodes)
    if x in graph.outputs or any(u not in region for u in x.users):
        return False
    ops = {"Conv", "Gemm", "MatMul"}
    p = x.producer
    if p is not None and p.op_type in VIEWS and p.input(0) is not None:
        found = producer_through_view(graph, p.input(0), ops)
        p = found[0] if found is not None else None
    return p is not None and p.op_type in ops and on_device(p, nodes[-1])


def match_activation_form(graph: Graph, last: Node):
    if last.op_type not in ("Mul", "Div") or len(last.outputs) != 1:
        return None
    out = last.outputs[0]
    if out.meta is None or out.meta.dtype is not DType.FLOAT32:
        return None
    # x: a value the region reads twice (every form is x * g(x)), of the output's shape
    seen: dict[Value, int] = {}
    stack, visited = [last], set()
    while stack and len(visited) <= _MAX_NODES:
        n = stack.pop()
        if n in visited or n.op_type not in _ANALYTIC:
            continue
        visited.add(n)
        for v in n.inputs:
            if v is None or v.is_constant:
                continue
            seen[v] = seen.get(v, 0) + 1
            if v.producer is not None:
                stack.append(v.producer)
    for x, uses in seen.items():
        if uses < 2 or x.meta is None or tuple(x.meta.shape) != tuple(out.meta.shape) \
                or x.meta.dtype is not DType.FLOAT32:
            continue
        nodes = _region(graph, last, x)
        if nodes is None or len(nodes) < 2:
            continue
        epilogue = _epilogue_source(graph, x, nodes)
        # an Erf the chain row cannot run in its pass (oneDNN has no erf): the region would
        # be a task per op, so a GELU it spells is worth its own op anywhere
        if not epilogue and not any(n.op_type == "Erf" for n in nodes):
            continue
        f = _evaluate(nodes, x)
        if f is None:
            continue
        for op_type, attrs, g in _forms(f):
            if (epilogue or op_type == "Gelu") and _same(f.astype(np.float64), g):
                return x, nodes, op_type, attrs
    return None


def rewrite_activation_form(graph: Graph, last: Node, ctx) -> str:
    x, nodes, op_type, attrs = ctx
    node = replace_region(graph, last, nodes, op_type, [x], attrs)
    detail = ",".join(f"{k}={v}" for k, v in attrs.items())
    return f"{op_type}({detail}) written out: {len(nodes)} nodes -> {node.name}"


__all__ = ["match_activation_form", "rewrite_activation_form"]

ROW = Fusion("activation_form", match_activation_form, rewrite_activation_form,
             produces=("Gelu", "Swish"))
