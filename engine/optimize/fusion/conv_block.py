"""Fusion row conv_block: an inverted-residual block becomes one ConvBlock node.

MobileNetV2's block is a 1x1 expand Conv, a 3x3 depthwise Conv and a 1x1 project Conv
(plus the residual Add when shapes allow). After the conv_dw row has joined the first two
into a ConvDw, this row joins the projection: the ConvDw node becomes a
graphengine.ConvBlock (ops/conv_fused.py) in place, with inputs X, the expansion's W_E and
B_E, the depthwise DW_W and DW_B, the projection's weights PW_W [P,M,1,1] and bias PW_B [P]
(zeros when absent) and its residual R (the projection's `_sum` input, if any); the
projection's activation (after the residual) becomes `pw_activation[_alpha|_beta]`. The
runtime runs it with its own block kernel (runtime_ext/src/host/conv_block.cc), which keeps the
expanded tensor in the core's cache: on this machine the 17 blocks of MobileNetV2 at batch 1
took 3.5 ms as oneDNN primitives (two or three each) and 2.1 ms with it (per-block harness,
2 threads); the whole model 3.49 vs 3.90 ms.

The first block of MobileNetV2 has no expansion: a depthwise Conv then the projection; the
row takes that pair too (a ConvBlock without W_E and B_E; the depthwise Conv's activation is
the `dw_activation`, its absent bias zeros).

It fires only where the block kernel runs (the target's `conv_blocks`: AVX-512 here) and
for what it computes: activations Relu or Clip on every stage; a projection with stride 1,
no padding, group 1 and constant float32 weights; a residual of the output's shape; a
depthwise-only start needs channels in whole blocks of 16.
"""

from __future__ import annotations

import numpy as np

from ...dtypes import DType
from ...ir import Graph, Node
from ...ops.conv_fused import BLOCK_ACTIVATIONS, CONV_BLOCK, CONV_DW
from .conv_dw import _attrs, _depthwise_stride, stage_activation
from .match import Fusion, absorb, become, on_device, sole_producer

_ACTS = BLOCK_ACTIVATIONS


def pointwise(node: Node) -> bool:
    """A 1x1 Conv of a static 4-D float32 input with constant float32 weights (and bias),
    stride 1, no padding, group 1, Relu or Clip or no activation: what the block kernels
    compute as a GEMM."""
    if node.op_type != "Conv" or node.attrs.get("_activation") not in _ACTS \
            or len(node.outputs) != 1:
        return False
    x, w, b = node.input(0), node.input(1), node.input(2)
    if x is None or x.meta is None or not x.meta.is_static or x.meta.rank != 4 \
            or x.meta.dtype is not DType.FLOAT32:
        return False
    if w is None or not w.is_constant or w.const.dtype != np.float32 or w.const.ndim != 4 \
            or w.const.shape[2:] != (1, 1):
        return False
    if b is not None and (not b.is_constant or b.const.dtype != np.float32):
        return False
    a = _attrs(node)
    return (a["group"] == 1 and a["strides"] == [1, 1] and a["pads"] == [0, 0, 0, 0]
            and a["dilations"] == [1, 1] and a["auto_pad"] in ("NOTSET", "VALID"))


def _projection(node: Node) -> bool:
    """A 1x1 Conv the block kernel can end with (residual allowed)."""
    if not pointwise(node):
        return False
    out = node.outputs[0].meta
    if out is None or not out.is_static:
        return False
    n_data = 3 + bool(node.attrs.get("_sum"))
    if len(node.inputs) > n_data:
        return False
    if node.attrs.get("_sum"):
        r = node.input(node.attrs["_sum_input"])
        if r is None or r.meta != out:
            return False
    return True


def _start(node: Node) -> bool:
    """The ConvDw node of conv_dw, or a depthwise Conv, that can take a projection."""
    if len(node.outputs) != 1:
        return False
    if node.op_type == CONV_DW:
        return node.attrs.get("activation") in _ACTS and node.attrs.get("dw_activation") in _ACTS
    if node.attrs.get("_sum") or node.attrs.get("_activation") not in _ACTS:
        return False
    if _depthwise_stride(node) is None:
        return False
    return node.input(0).meta.shape[1] % 16 == 0


def match_conv_block(graph: Graph, proj: Node):
    if not _projection(proj):
        return None
    start = sole_producer(graph, proj.input(0), {"Conv", CONV_DW})
    if start is None or not on_device(start, proj) or not _start(start):
        return None
    if proj.attrs.get("_sum"):  # the fused node reads the residual: it must exist by then
        made = proj.input(proj.attrs["_sum_input"]).producer
        if made is not None and graph.nodes.index(made) > graph.nodes.index(start):
            return None
    return start


def _zeros_if_none(graph: Graph, b, channels: int):
    return b if b is not None else graph.add_constant(None, np.zeros(channels, np.float32))


def rewrite_conv_block(graph: Graph, proj: Node, start: Node) -> str:
    w = proj.input(1)
    pw_b = _zeros_if_none(graph, proj.input(2), w.const.shape[0])
    if start.op_type == CONV_DW:  # X, W_E, B_E, DW_W, DW_B
        inputs = list(start.inputs)
        attrs = dict(start.attrs)
    else:  # a depthwise Conv: no expansion
        dw_w = start.input(1)
        inputs = [start.input(0), None, None, dw_w,
                  _zeros_if_none(graph, start.input(2), dw_w.const.shape[0])]
        attrs = {"dw_stride": _depthwise_stride(start),
                 **stage_activation(start, "dw_activation")}
    inputs += [w, pw_b]
    if proj.attrs.get("_sum"):
        inputs.append(proj.input(proj.attrs["_sum_input"]))
    attrs.update(stage_activation(proj, "pw_activation"))
    become(start, CONV_BLOCK, inputs, attrs)
    absorb(graph, start, proj)
    return f"ConvBlock: {start.name} absorbed {proj.name}"


__all__ = ["match_conv_block", "rewrite_conv_block"]


ROW = Fusion("conv_block", match_conv_block, rewrite_conv_block,
             requires=lambda target: target.conv_blocks, produces=("ConvBlock",))
