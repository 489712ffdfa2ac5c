"""Fusion row conv_head: a classifier head becomes one ConvHead node.

A CNN's head is often a 1x1 Conv (with its activation), a GlobalAveragePool, a Flatten (or
a Reshape to [N, C]) and a fully connected Gemm (MobileNetV2, EfficientNet, ...). At batch
1 the Gemm reads every weight once: MobileNetV2's 1280x1000 layer is 5 MB, which came from
DRAM in the network on this machine (the gemv task: 128-156 us, 28 us with the weights
hot), while the Conv before it is compute bound. The runtime's head kernel (block::Head in
runtime_ext/src/host/conv_block.cc) runs the four as one: the Conv's output channels in chunks
of 64, each pooled and multiplied into the classes at once, and each chunk's GEMM tiles
prefetch the next chunk's weights, so the DRAM reads hide under the FMAs.

The Conv node becomes a graphengine.ConvHead (ops/conv_fused.py) in place: inputs X, W and
B (zeros when absent), the Gemm's weight FC and bias FC_B (zeros when absent, [classes]);
attributes `trans_b` (the Gemm's transB) and the Conv's activation as
`activation[_alpha|_beta]`; its output is the Gemm's.

It fires only where the kernel runs (the target's `conv_blocks`: AVX-512 here) and for
what it computes: a 1x1 Conv (stride 1, no padding, group 1, constant float32 weights, no
other fused stage, Relu or Clip or no activation); a Gemm with alpha 1, beta 1, no
transposed A, a constant float32 weight and a constant bias of one value per class; a
batch of at most 4 (beyond that the unfused kernels are the better GEMMs).
"""

from __future__ import annotations

import numpy as np

from ...ir import Graph, Node
from ...ops.conv_fused import CONV_HEAD
from .conv_block import pointwise
from .conv_dw import stage_activation
from .match import Fusion, absorb, become, on_device, sole_producer

MAX_ROWS = 4  # block::HeadSpec::kMaxRows


def _conv(node: Node) -> bool:
    return pointwise(node) and len(node.inputs) <= 3 and not node.attrs.get("_sum")


def _flatten(node: Node) -> bool:
    """Flatten at axis 1, or a Reshape, of [N, C, 1, 1] into [N, C]."""
    x, out = node.input(0), node.outputs[0].meta
    if x is None or x.meta is None or not x.meta.is_static or x.meta.rank != 4 \
            or out is None or not out.is_static:
        return False
    n, c = x.meta.shape[:2]
    if node.op_type == "Flatten" and node.attrs.get("axis", 1) != 1:
        return False
    return tuple(x.meta.shape[2:]) == (1, 1) and tuple(out.shape) == (n, c)


def _gemm(node: Node) -> bool:
    scale = (float(node.attrs.get("alpha", 1.0)), float(node.attrs.get("beta", 1.0)))
    if node.op_type != "Gemm" or len(node.outputs) != 1 or node.attrs.get("transA", 0) \
            or scale != (1.0, 1.0) or any(k.startswith("_") for k in node.attrs):
        return False
    w, c, out = node.input(1), node.input(2), node.outputs[0].meta
    if out is None or not out.is_static or out.rank != 2 or not 1 <= out.shape[0] <= MAX_ROWS:
        return False
    if w is None or not w.is_constant or w.const.dtype != np.float32 or w.const.ndim != 2:
        return False
    classes = out.shape[1]
    return c is None or (c.is_constant and c.const.dtype == np.float32
                         and c.const.shape in ((classes,), (1, classes)))


def match_conv_head(graph: Graph, gemm: Node):
    if not _gemm(gemm):
        return None
    flat = sole_producer(graph, gemm.input(0), {"Flatten", "Reshape"})
    if flat is None or not _flatten(flat):
        return None
    gap = sole_producer(graph, flat.input(0), {"GlobalAveragePool"})
    if gap is None:
        return None
    conv = sole_producer(graph, gap.input(0), {"Conv"})
    if conv is None or not _conv(conv) or not on_device(conv, gap, flat, gemm):
        return None
    fc_k = gemm.input(1).const.shape[1 if gemm.attrs.get("transB", 0) else 0]
    if fc_k != conv.input(1).const.shape[0]:
        return None
    return conv, gap, flat


def rewrite_conv_head(graph: Graph, gemm: Node, ctx) -> str:
    conv, gap, flat = ctx
    w, fc = conv.input(1), gemm.input(1)
    b = conv.input(2)
    if b is None:
        b = graph.add_constant(None, np.zeros(w.const.shape[0], np.float32))
    classes = gemm.outputs[0].meta.shape[1]
    c = gemm.input(2)
    if c is None:
        fc_b = graph.add_constant(None, np.zeros(classes, np.float32))
    elif c.const.shape == (classes,):
        fc_b = c
    else:
        fc_b = graph.add_constant(None, c.const.reshape(classes))
    attrs = {"trans_b": int(gemm.attrs.get("transB", 0)), **stage_activation(conv, "activation")}
    become(conv, CONV_HEAD, [conv.input(0), w, b, fc, fc_b], attrs)
    for gone in (gap, flat, gemm):
        absorb(graph, conv, gone)
    return f"ConvHead: {conv.name} absorbed {gap.name}, {flat.name}, {gemm.name}"


__all__ = ["match_conv_head", "rewrite_conv_head"]


ROW = Fusion("conv_head", match_conv_head, rewrite_conv_head,
             requires=lambda target: target.conv_blocks, produces=("ConvHead",))
