"""Decomposed LayerNorm, (x - mean) / sqrt(var + eps) * gamma + beta, becomes one node."""

from __future__ import annotations

import numpy as np

from ...ir import Graph, Node, Value
from .match import Fusion, const_close, on_device, other, replace_region, sole_producer


def _axes_is_last(node: Node, rank: int) -> bool:
    axes = node.input(1)
    if axes is None or not axes.is_constant or not node.attrs.get("keepdims", 1):
        return False
    vals = [int(a) for a in np.asarray(axes.const).reshape(-1)]
    return vals in ([-1], [rank - 1])


def mean_over_last_axis(graph: Graph, v: Value | None) -> Node | None:
    node = v.producer if v is not None else None
    if node is None or node.op_type != "ReduceMean" or node.input(0) is None:
        return None
    meta = node.input(0).meta
    return node if meta is not None and meta.rank and _axes_is_last(node, meta.rank) else None


def _match_layernorm(graph: Graph, div: Node):
    if div.op_type != "Div":
        return None
    d, s = div.input(0), div.input(1)
    sub = d.producer if d is not None else None
    if sub is None or sub.op_type != "Sub" or len(set(d.users)) != 2:
        return None
    x, mean = sub.input(0), mean_over_last_axis(graph, sub.input(1))
    if mean is None or mean.input(0) is not x:
        return None
    sqrt = sole_producer(graph, s, {"Sqrt"})
    add = sole_producer(graph, sqrt.input(0), {"Add"}) if sqrt else None
    if add is None:
        return None
    var_v, eps_v = add.input(0), add.input(1)
    if eps_v is None or not eps_v.is_constant:
        var_v, eps_v = eps_v, var_v
    var = mean_over_last_axis(graph, var_v)
    if var is None or eps_v is None or not eps_v.is_constant or len(var_v.users) != 1:
        return None
    sq = sole_producer(graph, var.input(0), {"Pow", "Mul"})
    if sq is None or sq.input(0) is not d or not (
            (sq.op_type == "Pow" and const_close(sq.input(1), 2.0))
            or (sq.op_type == "Mul" and sq.input(1) is d)):
        return None
    nodes = [mean, sub, sq, var, add, sqrt, div]
    if len(mean.outputs[0].users) != 1 or not on_device(*nodes):
        return None
    eps = float(np.asarray(eps_v.const).reshape(-1)[0])
    return x, eps, nodes


def _rewrite_layernorm(graph: Graph, div: Node, ctx) -> str:
    x, eps, nodes = ctx
    width = int(x.meta.shape[-1])
    out = div.outputs[0]
    scale = graph.add_constant(None, np.ones(width, np.float32))
    bias = graph.add_constant(None, np.zeros(width, np.float32))
    # absorb a following affine Mul(gamma) + Add(beta) when present
    tail, absorbed = div, []
    mul = out.users[0] if len(out.users) == 1 and out not in graph.outputs else None
    if mul is not None and mul.op_type == "Mul":
        gamma = other(mul, out)
        if gamma is not None and gamma.is_constant and gamma.const.shape == (width,):
            scale, tail, absorbed = gamma, mul, [mul]
            o = mul.outputs[0]
            plus = o.users[0] if len(o.users) == 1 and o not in graph.outputs else None
            beta = other(plus, o) if plus is not None and plus.op_type == "Add" else None
            if beta is not None and beta.is_constant and beta.const.shape == (width,):
                bias, tail, absorbed = beta, plus, [mul, plus]
    ln = replace_region(graph, tail, nodes + absorbed, "LayerNormalization", [x, scale, bias],
                        {"axis": -1, "epsilon": eps})
    return f"LayerNorm: {len(nodes) + len(absorbed)} nodes -> {ln.name}"


ROW = Fusion("layernorm", _match_layernorm, _rewrite_layernorm,
             produces=("LayerNormalization",))
