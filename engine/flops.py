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
from .ops.conv_fused import CONV_BLOCK, CONV_DW, CONV_HEAD

# MatMulInteger's multiply-adds count as a MatMul's: it ran as one (the exact float
# rewrite) before the int8 kernel, and the batch split and the rates read the same counts.
COUNTED = ("Conv", "MatMul", "Gemm", "MatMulInteger", CONV_DW, CONV_BLOCK, CONV_HEAD)
_MATRIX = ("MatMul", "Gemm", "MatMulInteger")


def node_flops(node: Node) -> float:
    """FLOPs of one Conv / MatMul / Gemm node with static shapes; 0.0 for anything else.

    A fused convolution (ConvDw, ConvBlock, ConvHead) counts what it counted as a Conv node
    with private attributes, before it was an op of its own: its first convolution's weights
    over the output's elements, plus 9 taps per output for a depthwise stage after an
    expansion. That undercounts (a block's projection, a stride-2 expansion and a head's
    classifier are missed) and is kept on purpose: the batch split decides on these counts
    (optimize/batch_split.py), and the same graphs must split as they did."""
    if node.op_type not in COUNTED or not node.outputs:
        return 0.0
    out = node.outputs[0].meta
    if out is None or not out.is_static:
        return 0.0
    if node.op_type not in _MATRIX:
        block = node.op_type == CONV_BLOCK
        expands = node.op_type == CONV_DW or (block and node.input(1) is not None)
        w = node.input(3) if block and not expands else node.input(1)
        if w is None or w.meta is None or not w.meta.is_static:
            return 0.0
        flops = 2.0 * out.numel * float(np.prod(w.meta.shape[1:]))
        if expands:
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
