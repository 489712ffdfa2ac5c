"""Activation formats and what each device op does with them: the facts the layout pass
(layout.py) and its view rules (layout_views.py) share."""

from __future__ import annotations

import numpy as np

from .. import ops
from ..dtypes import DType
from ..ir import Graph, Node, Value
from ..ops.registry import Layout

NCHW, NHWC = "nchw", "nhwc"
BLOCKS = {"nChw8c": 8, "nChw16c": 16}


def same_bytes(shape, a: str, b: str) -> bool:
    """Whether formats `a` and `b` lay a tensor of `shape` out identically."""
    if (a or NCHW) == (b or NCHW):
        return True
    if len(shape) != 4:
        return False
    c, hw = shape[1], shape[2] * shape[3]

    def like_nchw(f: str) -> bool:
        if f == NCHW:
            return True
        if f == NHWC:
            return c == 1 or hw == 1
        return hw == 1 and c % BLOCKS[f] == 0  # whole blocks, nothing padded

    return like_nchw(a or NCHW) and like_nchw(b or NCHW)


def layout_of(node: Node) -> Layout:
    """What the node's device kernel does with formats (its op schema's `layout`)."""
    return ops.get(node.op_type, node).layout


def spatial_only(node: Node) -> bool:
    """Whether a SPATIAL node's device kernel leaves N and C alone: its "pads" attribute
    ([begin x4, end x4] of a 4-D input) is zero on axes 0 and 1, so it runs in any format
    (runtime_ext/src/host/layout.h, spatial_pads)."""
    schema = ops.get(node.op_type, node)
    kernel = schema.device(node, schema.attrs_of(node)) if schema.device else None
    pads = getattr(kernel, "attrs", {}).get("pads") if kernel is not None else None
    return (pads is not None and len(pads) == 8
            and not any(pads[i] for i in (0, 1, 4, 5)))


def is_conversion(node: Node) -> bool:
    return layout_of(node) is Layout.CONVERT


def is_act4d(v: Value | None) -> bool:
    return (v is not None and not v.is_constant and v.meta is not None and v.meta.is_static
            and v.meta.rank == 4 and v.meta.dtype is DType.FLOAT32)


def per_channel(v: Value, out: Value) -> bool:
    """Whether v is a per-channel operand [N|1, C, 1, 1] of out [N, C, H, W] (H*W > 1): a
    squeeze-excitation's scale. Plain, its bytes are the same in NHWC and blocked formats
    (runtime_ext/src/host/layout.h, per_channel_of)."""
    if not is_act4d(v) and not (v.is_constant and v.meta is not None and v.meta.rank == 4):
        return False
    s, y = v.meta.shape, out.meta.shape
    return (y[2] * y[3] > 1 and s[1] == y[1] and s[2] == 1 and s[3] == 1
            and s[0] in (1, y[0]))


def pixel_map(v: Value, out: Value) -> bool:
    """Whether v is a per-pixel map [N|1, 1, H, W] of out [N, C, H, W] (C > 1): a decoder's
    spatial attention gating its features. One channel: the same bytes plain and NHWC, which
    the runtime reads broadcast over an NHWC output's stored channels
    (runtime_ext/src/host/layout.h, pixel_map_of)."""
    if not is_act4d(v):
        return False
    s, y = v.meta.shape, out.meta.shape
    return y[1] > 1 and s[1] == 1 and s[2:] == y[2:] and s[0] in (1, y[0])


def channel_constants_as_4d(graph: Graph) -> int:
    """A constant per-channel operand of a CHANNEL op's 4-D activation written with fewer
    axes ([C, 1, 1]: PoolFormer's and ConvNeXt's layer scale) becomes the [1, C, 1, 1] it
    broadcasts as, the form the region's per-channel rule (and the runtime's) reads; the
    values are the same. Returns how many operands changed."""
    changed = 0
    for node in graph.nodes:
        out = node.outputs[0] if node.outputs else None
        if layout_of(node) is not Layout.CHANNEL or not is_act4d(out):
            continue
        inputs = list(node.inputs)
        for i, v in enumerate(inputs):
            if v is None or not v.is_constant or v.meta is None or not 1 <= v.meta.rank < 4:
                continue
            shape = (1,) * (4 - v.meta.rank) + tuple(v.meta.shape)
            if shape[1:] == (out.meta.shape[1], 1, 1) and out.meta.shape[2] * out.meta.shape[3] > 1:
                inputs[i] = graph.add_constant(None, np.asarray(v.const).reshape(shape))
                changed += 1
        if inputs != list(node.inputs):
            node.set_inputs(inputs)
    return changed


def reads_own_layout(node: Node, index: int) -> bool:
    """Whether input `index` of an agnostic node is read in the node's own layout."""
    if layout_of(node) in (Layout.CONV, Layout.UNIFORM, Layout.SPATIAL):
        return index == 0 or index == residual(node)
    if layout_of(node) is Layout.CHANNEL:
        v = node.inputs[index]
        return v is None or not per_channel(v, node.outputs[0])
    return True


def residual(node: Node) -> int | None:
    """The input a node adds to its output (a Conv's fused `_sum`, ConvBlock's R)."""
    if node.attrs.get("_sum"):
        return node.attrs["_sum_input"]
    return ops.get(node.op_type, node).residual
