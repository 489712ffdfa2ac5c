"""Erf-form GELU, x * 0.5 * (1 + erf(x / sqrt(2))), becomes one Gelu node."""

from __future__ import annotations

from ...ir import Graph, Node
from .match import Fusion, const_close, on_device, other, replace_region, sole_producer


def _match_gelu(graph: Graph, last: Node):
    # last = Mul(Mul(x, Add(Erf(Div(x, sqrt2)), 1)), 0.5) or Mul(x, Mul(Add(...), 0.5)) etc.
    if last.op_type != "Mul":
        return None
    for inner_v, half in ((last.input(0), last.input(1)), (last.input(1), last.input(0))):
        if not const_close(half, 0.5):
            continue
        mul = sole_producer(graph, inner_v, {"Mul"})
        if mul is None:
            continue
        for add_v in (mul.input(0), mul.input(1)):
            add = sole_producer(graph, add_v, {"Add"})
            if add is None:
                continue
            x = other(mul, add_v)
            for erf_v in (add.input(0), add.input(1)):
                erf = sole_producer(graph, erf_v, {"Erf"})
                if erf is None or not const_close(other(add, erf_v), 1.0):
                    continue
                div = sole_producer(graph, erf.input(0), {"Div", "Mul"})
                if div is None or div.input(0) is not x:
                    continue
                scale = 2 ** 0.5 if div.op_type == "Div" else 2 ** -0.5
                if const_close(div.input(1), scale):
                    nodes = [div, erf, add, mul, last]
                    if on_device(*nodes) and x is not None:
                        return x, nodes
    return None


def _rewrite_gelu(graph: Graph, last: Node, ctx) -> str:
    x, nodes = ctx
    gelu = replace_region(graph, last, nodes, "Gelu", [x], {"approximate": "none"})
    return f"Erf-GELU: {len(nodes)} nodes -> {gelu.name}"


ROW = Fusion("erf_gelu", _match_gelu, _rewrite_gelu, produces=("Gelu",))
