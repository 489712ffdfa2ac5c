"""Decomposed RMSNorm, x * rsqrt(mean(x * x over the last axis) + eps) [* weight], becomes
one RMSNormalization node (LLaMA's, Qwen's, Mistral's and T5's norm as exporters write it).

The reciprocal square root comes spelled four ways: x / Sqrt(v), x * Reciprocal(Sqrt(v)),
x * (1 / Sqrt(v)) and x * Pow(v, -0.5); the square as Pow(x, 2) or Mul(x, x); the weight
as a Mul on either side."""

from __future__ import annotations

import numpy as np

from ...ir import Graph, Node, Value
from .layernorm import mean_over_last_axis
from .match import Fusion, const_close, on_device, other, replace_region, sole_producer


def _inverse_sqrt(graph: Graph, v: Value | None) -> tuple[Value, list[Node]] | None:
    """(the value under the root, the nodes) when v = 1 / sqrt(that) with no other reader."""
    node = sole_producer(graph, v, {"Reciprocal", "Div", "Pow"})
    if node is None:
        return None
    if node.op_type == "Pow":
        return (node.input(0), [node]) if const_close(node.input(1), -0.5) else None
    if node.op_type == "Div" and not const_close(node.input(0), 1.0):
        return None
    root = sole_producer(graph, node.input(node.op_type == "Div"), {"Sqrt"})
    return (root.input(0), [root, node]) if root is not None else None


def _match_rms(graph: Graph, node: Node):
    if node.op_type not in ("Div", "Mul") or len(node.outputs) != 1:
        return None
    if node.op_type == "Div":
        root = sole_producer(graph, node.input(1), {"Sqrt"})
        found = [(node.input(0), (root.input(0), [root]))] if root is not None else []
    else:
        found = [(node.input(i), _inverse_sqrt(graph, node.input(1 - i))) for i in (0, 1)]
    for x, inv in found:
        if x is None or inv is None or x.meta is None or not x.meta.is_static \
                or x.meta.dtype.numpy != np.float32 or not x.meta.rank:
            continue
        under, tail = inv
        add = sole_producer(graph, under, {"Add"})
        if add is None:
            continue
        ms_v, eps_v = add.input(0), add.input(1)
        if eps_v is None or not eps_v.is_constant:
            ms_v, eps_v = eps_v, ms_v
        mean = mean_over_last_axis(graph, ms_v)
        if mean is None or eps_v is None or not eps_v.is_constant or np.size(eps_v.const) != 1 \
                or len(ms_v.users) != 1 or ms_v in graph.outputs:
            continue
        sq = sole_producer(graph, mean.input(0), {"Pow", "Mul"})
        if sq is None or sq.input(0) is not x or not (
                (sq.op_type == "Pow" and const_close(sq.input(1), 2.0))
                or (sq.op_type == "Mul" and sq.input(1) is x)):
            continue
        nodes = [sq, mean, add, *tail, node]
        if not on_device(*nodes):
            continue
        eps = float(np.asarray(eps_v.const).reshape(-1)[0])
        if not np.isfinite(eps) or eps < 0:
            continue
        return x, eps, nodes
    return None


def _rewrite_rms(graph: Graph, node: Node, ctx) -> str:
    x, eps, nodes = ctx
    width = int(x.meta.shape[-1])
    out = node.outputs[0]
    scale = None
    tail, absorbed = node, []
    mul = out.users[0] if len(out.users) == 1 and out not in graph.outputs else None
    if mul is not None and mul.op_type == "Mul" and on_device(node, mul):
        w = other(mul, out)
        if w is not None and w.is_constant and w.const.dtype == np.float32 \
                and w.const.size == width and w.const.shape[-1:] == (width,) \
                and w.const.ndim <= x.meta.rank:
            scale = graph.add_constant(None, np.ascontiguousarray(w.const.reshape(width)))
            tail, absorbed = mul, [mul]
    if scale is None:
        scale = graph.add_constant(None, np.ones(width, np.float32))
    rms = replace_region(graph, tail, nodes + absorbed, "RMSNormalization", [x, scale],
                         {"axis": -1, "epsilon": eps})
    return f"RMSNorm: {len(nodes) + len(absorbed)} nodes -> {rms.name}"


ROW = Fusion("rms_norm", _match_rms, _rewrite_rms, produces=("RMSNormalization",))
