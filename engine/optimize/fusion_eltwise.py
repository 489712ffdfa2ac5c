"""Fusion row eltwise_chain: a chain of elementwise device ops becomes one EltwiseChain node.

A chain is a path of at least two float32 elementwise nodes (ops/eltwise_chain.py lists the
steps: unary activations and math, Clip and Pow with constant bounds/exponent, and Add, Sub,
Mul, Div) where each node's output is read only by the next one and is not a graph output,
and where the chain's value keeps one shape: every binary step's other operand (a constant,
or an activation computed elsewhere) broadcasts to it. All nodes are on the device in one
partition. The node reads the chain's first value and the other operands (each once) and
writes the last node's output, keeping its name. The row runs last, after the rows that fold
elementwise tails into convolutions and matrix products or recognise GELU and LayerNorm.
"""

from __future__ import annotations

import numpy as np

from ..dtypes import DType
from ..ir import Graph, Node, Value
from ..ops.eltwise_chain import BINARY_STEPS
from . import fusion as _fusion

_UNARY = {"Relu", "Sigmoid", "Tanh", "Exp", "Log", "Sqrt", "Abs", "Neg", "Gelu", "LeakyRelu",
          "Clip", "HardSigmoid", "HardSwish", "Reciprocal", "Pow"}


def _f32(v: Value | None) -> bool:
    return v is not None and v.meta is not None and v.meta.is_static \
        and v.meta.dtype is DType.FLOAT32


def _scalar_const(v: Value | None) -> float | None:
    if v is None or not v.is_constant or np.asarray(v.const).size != 1:
        return None
    return float(np.asarray(v.const).reshape(()))


def _step(node: Node) -> tuple[str, float, float] | None:
    """(step name, alpha, beta) for a unary node that a chain can take, else None."""
    op = node.op_type
    if op not in _UNARY or len(node.outputs) != 1 or not _f32(node.input(0)):
        return None
    if op == "Clip":
        bounds = []
        for i, default in ((1, -np.inf), (2, np.inf)):
            v = node.input(i)
            b = default if v is None else _scalar_const(v)
            if b is None or np.isnan(b):
                return None
            bounds.append(b)
        return "Clip", bounds[0], bounds[1]
    if op == "Pow":
        e = _scalar_const(node.input(1))
        return None if e is None else ("Pow", e, 0.0)
    if op == "Gelu":
        approx = node.attrs.get("approximate", "none")
        return ("GeluTanh" if approx == "tanh" else "Gelu", 0.0, 0.0) \
            if approx in ("none", "tanh") else None
    if op == "LeakyRelu":
        return "LeakyRelu", float(node.attrs.get("alpha", 0.01)), 0.0
    if op == "HardSigmoid":
        return "HardSigmoid", float(node.attrs.get("alpha", 0.2)), \
            float(node.attrs.get("beta", 0.5))
    return op, 0.0, 0.0


def _link(node: Node) -> list[tuple[Value, Value | None, bool, tuple[str, float, float]]]:
    """The ways `node` can be a chain step: (chain input, other operand, reversed, step)."""
    out = node.outputs[0] if len(node.outputs) == 1 else None
    if node.meta.engine is None or not _f32(out):
        return []
    if node.op_type in BINARY_STEPS:
        a, b = node.input(0), node.input(1)
        if not (_f32(a) and _f32(b)):
            return []
        ways = []
        for x, other, rev in ((a, b, False), (b, a, True)):
            if x.is_constant or x.meta.shape != out.meta.shape:
                continue  # the chain's value keeps its shape
            try:
                fits = np.broadcast_shapes(tuple(other.meta.shape), out.meta.shape) \
                    == out.meta.shape
            except ValueError:
                fits = False
            if fits:
                ways.append((x, other, rev, (node.op_type, 0.0, 0.0)))
        return ways
    step = _step(node)
    x = node.input(0)
    if step is None or x.is_constant or x.meta.shape != out.meta.shape:
        return []
    return [(x, None, False, step)]


def _chain_before(graph: Graph, node: Node, x: Value) -> Node | None:
    prev = _fusion._sole_producer(graph, x, _UNARY | BINARY_STEPS)
    if prev is None or not _fusion._on_device(prev, node) or not _link(prev):
        return None
    return prev


def match_eltwise_chain(graph: Graph, tail: Node):
    """The chain ending at `tail` (its last node), when there is one of >= 2 nodes."""
    if not _link(tail) or not _fusion._on_device(tail):
        return None
    out = tail.outputs[0]
    nxt = out.users[0] if len(out.users) == 1 and out not in graph.outputs else None
    if nxt is not None and _fusion._on_device(tail, nxt) and _link(nxt) and \
            any(w[0] is out for w in _link(nxt)):
        return None  # not the end: the chain goes on
    steps = []
    node = tail
    while True:
        ways = _link(node)
        # prefer the way whose chain input continues the chain
        prev = None
        for x, other, rev, step in ways:
            prev = _chain_before(graph, node, x)
            if prev is not None:
                steps.append((node, x, other, rev, step))
                break
        if prev is None:
            x, other, rev, step = ways[0]
            steps.append((node, x, other, rev, step))
            break
        node = prev
    if len(steps) < 2:
        return None
    steps.reverse()
    return steps


def rewrite_eltwise_chain(graph: Graph, tail: Node, steps) -> str:
    first_x = steps[0][1]
    inputs: list[Value] = [first_x]
    attrs: dict = {"steps": [], "operands": [], "reversed": [], "alphas": [], "betas": []}
    for _, _, other, rev, (name, alpha, beta) in steps:
        if other is None:
            index = -1
        else:
            if other not in inputs[1:]:
                inputs.append(other)
            index = inputs.index(other, 1)
        attrs["steps"].append(name)
        attrs["operands"].append(index)
        attrs["reversed"].append(int(rev))
        attrs["alphas"].append(float(alpha))
        attrs["betas"].append(float(beta))
    out = tail.outputs[0]
    chain = graph.add_node("EltwiseChain", inputs, attrs=attrs,
                           name=graph.unique_name("eltwise_chain"), after=tail)
    chain.meta.engine, chain.meta.partition = tail.meta.engine, tail.meta.partition
    chain.outputs[0].meta = out.meta
    graph.replace_all_uses(out, chain.outputs[0])
    nodes = [s[0] for s in steps]
    for n in reversed(nodes):
        graph.remove_node(n)
    _fusion._rename_output(graph, chain.outputs[0], out.name)
    chain.meta.fused = tuple(n.name for n in nodes)
    return f"EltwiseChain: {len(nodes)} nodes ({'->'.join(attrs['steps'])}) -> {chain.name}"


__all__ = ["match_eltwise_chain", "rewrite_eltwise_chain"]
