"""Arithmetic of a graph: the floating-point operations of its convolutions and matrix
products (a multiply-add counts as two), from inferred static shapes.

The compile report carries the count of the prepared graph (after shape inference and
constant folding, before fusion), so that a run's time can be read as a rate and compared
with the machine's FMA peak (`_runtime.fma_peak`). Other ops (elementwise, normalization,
softmax, pooling) are not counted: they are memory-bound and their share of the
arithmetic is small in the models where a rate matters.
"""

from __future__ import annotations

import numpy as np

from .ir import Graph, Node

COUNTED = ("Conv", "MatMul", "Gemm")


def node_flops(node: Node) -> float:
    """FLOPs of one Conv / MatMul / Gemm node with static shapes; 0.0 for anything else.

    Also counts the convolutions fused into one Conv node that carry their own marks (the
    depthwise stage of `_dw`: 9 taps per output)."""
    if node.op_type not in COUNTED or not node.outputs:
        return 0.0
    out = node.outputs[0].meta
    if out is None or not out.is_static:
        return 0.0
    if node.op_type == "Conv":
        w = node.input(1)
        if w is None or w.meta is None or not w.meta.is_static:
            return 0.0
        flops = 2.0 * out.numel * float(np.prod(w.meta.shape[1:]))
        if node.attrs.get("_dw"):
            flops += 18.0 * out.numel
        return flops
    a = node.input(0)
    if a is None or a.meta is None or not a.meta.is_static or not a.meta.shape:
        return 0.0
    k = a.meta.shape[0] if node.op_type == "Gemm" and node.attrs.get("transA") else \
        a.meta.shape[-1]
    return 2.0 * out.numel * float(k)


def graph_flops(graph: Graph) -> float:
    """The sum of node_flops over the graph."""
    return sum(node_flops(n) for n in graph.nodes)


__all__ = ["COUNTED", "graph_flops", "node_flops"]
