"""Fusion row activation_affine: a scalar Mul or Add after a Conv's activation joins it.

PP-LCNetV3 (PP-OCRv4/v5's detectors and recognizers) follows each activation with a
learnable affine block, `s * act(x) + b` with scalars s and b: two more nodes after every
Conv, which the chain row ran as a pass of their own over the activation (with a
Clip-spelled hardswish: 27 chains, ~14% of ppocrv4_det at batch 8). After the activation
it cannot fold into the weights (act is not linear), but oneDNN applies it as one more
post-op, a linear eltwise, while the output is in registers: the Conv's
`_activation_scale` / `_activation_shift` (runtime: `activation_scale` /
`activation_shift`, after the activation). Only the plain Conv kernel takes them (the
block kernels apply Relu or Clip themselves), so the row runs after the rows that merge
Convs into ConvDw, ConvBlock and ConvHead.
"""

from __future__ import annotations

import numpy as np

from ...ir import Graph, Node
from .match import Fusion, absorb, on_device, sole_producer


def _scalar(node: Node, i: int) -> float | None:
    v = node.input(i)
    if v is None or not v.is_constant or v.const.size != 1 or v.const.dtype != np.float32:
        return None
    out = node.outputs[0].meta
    # a scalar that widens nothing: the output has the Conv output's shape
    if out is None or v.const.ndim > (out.rank or 0):
        return None
    return float(v.const.reshape(()))


def _match_affine(graph: Graph, node: Node):
    if node.op_type not in ("Mul", "Add", "Sub") or len(node.outputs) != 1:
        return None
    for i in ((0,) if node.op_type == "Sub" else (0, 1)):  # c - y is not y + c
        conv = sole_producer(graph, node.input(i), {"Conv"})
        c = _scalar(node, 1 - i)
        # (a second activation comes after the first: the affine would have to follow it)
        if conv is None or c is None or not conv.attrs.get("_activation") \
                or conv.attrs.get("_activation2") \
                or not on_device(conv, node) or node.input(1 - i) is node.input(i):
            continue
        if conv.outputs[0].meta is None or node.outputs[0].meta != conv.outputs[0].meta:
            continue
        scale = float(conv.attrs.get("_activation_scale", 1.0))
        shift = float(conv.attrs.get("_activation_shift", 0.0))
        if node.op_type == "Mul":
            scale, shift = scale * c, shift * c
        else:
            shift = shift + (c if node.op_type == "Add" else -c)
        # the post-op computes in float32: keep what the separate ops would round to
        return conv, float(np.float32(scale)), float(np.float32(shift))
    return None


def _rewrite_affine(graph: Graph, node: Node, ctx) -> str:
    conv, scale, shift = ctx
    conv.attrs["_activation_scale"] = scale
    conv.attrs["_activation_shift"] = shift
    absorb(graph, conv, node)
    act = conv.attrs["_activation"]
    return f"Conv+{node.op_type}(after {act}): {conv.name} absorbed {node.name}"


ROW = Fusion("activation_affine", _match_affine, _rewrite_affine,
             requires=lambda target: target.epilogues)
