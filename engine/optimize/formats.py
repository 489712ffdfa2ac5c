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
    """Whether formats `a` and `b` lay a tensor of `shape` out identically (NHWC of a 5-D
    tensor is N, D, H, W, C; the blocked formats are 4-D only)."""
    if (a or NCHW) == (b or NCHW):
        return True
    if len(shape) not in (3, 4, 5):
        return False
    c, hw = shape[1], int(np.prod(shape[2:]))

    def like_nchw(f: str) -> bool:
        if f == NCHW:
            return True
        if f == NHWC:
            return c == 1 or hw == 1
        return len(shape) == 4 and hw == 1 and c % BLOCKS[f] == 0  # whole blocks, unpadded

    return like_nchw(a or NCHW) and like_nchw(b or NCHW)


def layout_of(node: Node) -> Layout:
    """What the node's device kernel does with formats (its op schema's `layout`)."""
    return ops.get(node.op_type, node).layout


def spatial_only(node: Node) -> bool:
    """Whether a SPATIAL node's device kernel leaves N and C alone: its "pads" attribute
    ([begin x r, end x r] of a rank-r input, r 3 to 5) is zero on axes 0 and 1, so it runs
    in any format of its rank (runtime_ext/src/host/layout.h, spatial_pads)."""
    schema = ops.get(node.op_type, node)
    kernel = schema.device(node, schema.attrs_of(node)) if schema.device else None
    pads = getattr(kernel, "attrs", {}).get("pads") if kernel is not None else None
    r = len(pads) // 2 if pads is not None else 0
    return (pads is not None and len(pads) == 2 * r and 3 <= r <= 5
            and not any(pads[i] for i in (0, 1, r, r + 1)))


def is_conversion(node: Node) -> bool:
    return layout_of(node) is Layout.CONVERT


def is_act4d(v: Value | None) -> bool:
    return is_act(v) and v.meta.rank == 4


def is_act(v: Value | None) -> bool:
    """A float32 activation of static shape of rank 4 (an image), 5 (a video or volume) or 3
    (a signal [N, C, L]): the layout region stores the last two NHWC (N, D, H, W, C and N, L,
    C), whatever the 4-D format is (rank 3 only in an NHWC region)."""
    return (v is not None and not v.is_constant and v.meta is not None and v.meta.is_static
            and v.meta.rank in (3, 4, 5) and v.meta.dtype is DType.FLOAT32)


def unit_view(node: Node) -> bool:
    """A view (Reshape, Flatten, Squeeze, Unsqueeze) between activations of rank 3 to 5 that
    keeps N and C (axes 0 and 1) and the spatial sizes other than 1, in order: a 1-D
    convolution's [N, C, L] seen as [N, C, 1, L]. Stored NHWC both are the same bytes
    (N, L, C), so in an NHWC region the view stays a view."""
    if node.op_type not in ("Reshape", "Flatten", "Squeeze", "Unsqueeze") or not node.outputs:
        return False
    x, y = node.inputs[0] if node.inputs else None, node.outputs[0]
    if not (is_act(x) and is_act(y)):
        return False
    xs, ys = x.meta.shape, y.meta.shape
    return (tuple(xs[:2]) == tuple(ys[:2]) and xs[1] > 1
            and [d for d in xs[2:] if d != 1] == [d for d in ys[2:] if d != 1])


def per_channel(v: Value, out: Value) -> bool:
    """Whether v is a per-channel operand [N|1, C, 1, 1] of out [N, C, H, W] (H*W > 1), or
    [N|1, C, 1] / [N|1, C, 1, 1, 1] of a 3-D / 5-D out: a squeeze-excitation's scale.
    Plain, its bytes are the same in NHWC and blocked formats (runtime_ext/src/host/layout.h,
    per_channel_of)."""
    y = out.meta.shape
    if v.meta is None or v.meta.rank != len(y) or not (
            is_act(v) or v.is_constant and v.meta.rank in (3, 4, 5)):
        return False
    s = v.meta.shape
    return (int(np.prod(y[2:])) > 1 and s[1] == y[1] and all(d == 1 for d in s[2:])
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


def broadcast_runs(shape: tuple[int, ...], domain: tuple[int, ...]) -> int | None:
    """How many runs an input of `shape` is to the EltwiseGraph kernel against `domain`:
    groups of the domain's non-unit axes it has, apart where it broadcasts over one between
    them (0: one element); None when it does not broadcast, or its runs are not one, or two of
    which the second ends at the last axis (the kernel's rule)."""
    if len(shape) > len(domain):
        return None
    padded = (1,) * (len(domain) - len(shape)) + tuple(shape)
    if any(d != 1 and d != y for d, y in zip(padded, domain)):
        return None
    runs, gap, last = 0, True, False
    for d, y in zip(padded, domain):
        if y == 1:
            continue
        if d != 1:
            runs += gap
            gap, last = False, True
        else:
            gap, last = True, False
    return runs if runs <= 1 or (runs == 2 and last) else None


def nhwc_order(shape) -> tuple[int, ...]:
    """A shape of rank 3 to 5 in the order NHWC stores it: C last."""
    return (shape[0], *shape[2:], shape[1])


def stored_broadcast(v: Value, out: Value) -> bool:
    """Whether activation v broadcasts over some of out's axes in a way the EltwiseGraph
    kernel reads both plain against a plain domain and stored NHWC against an NHWC one (runs
    of the stored order, runtime_ext/src/host/kernels_eltwise_graph.cc stored_like_domain):
    out's channels with some spatial axes broadcast (coordinate attention's [N, C, H, 1] and
    [N, C, 1, W] gates), or a per-pixel map [N|1, 1, H, W]. A per-channel operand is not one
    (`per_channel`: read plain in every format)."""
    if not is_act(v) or v.meta.rank != out.meta.rank or per_channel(v, out):
        return False
    s, y = tuple(v.meta.shape), tuple(out.meta.shape)
    if s == y or s[1] not in (1, y[1]) or (s[1] == 1 and y[1] == 1):
        return False
    return (broadcast_runs(s, y) is not None
            and broadcast_runs(nhwc_order(s), nhwc_order(y)) is not None)


def channel_constants_as_4d(graph: Graph) -> int:
    """A constant per-channel operand of a CHANNEL op's or an elementwise chain's activation
    (rank 3 to 5) written with fewer axes ([C, 1, 1]: PoolFormer's and ConvNeXt's layer
    scale) becomes the [1, C, 1, 1] it broadcasts as, the form the region's per-channel rule
    (and the runtime's) reads; the values are the same. Returns how many operands changed."""
    changed = 0
    for node in graph.nodes:
        out = node.outputs[0] if node.outputs else None
        if layout_of(node) not in (Layout.CHANNEL, Layout.CHAIN) or not is_act(out):
            continue
        rank = out.meta.rank
        inputs = list(node.inputs)
        for i, v in enumerate(inputs):
            if v is None or not v.is_constant or v.meta is None or not 1 <= v.meta.rank < rank:
                continue
            shape = (1,) * (rank - v.meta.rank) + tuple(v.meta.shape)
            if (shape[1:] == (out.meta.shape[1],) + (1,) * (rank - 2)
                    and int(np.prod(out.meta.shape[2:])) > 1):
                inputs[i] = graph.add_constant(None, np.asarray(v.const).reshape(shape))
                changed += 1
        if inputs != list(node.inputs):
            node.set_inputs(inputs)
    return changed


def reads_own_layout(node: Node, index: int) -> bool:
    """Whether input `index` of an agnostic node is read in the node's own layout."""
    if layout_of(node) in (Layout.CONV, Layout.UNIFORM, Layout.SPATIAL, Layout.REDUCE):
        return index == 0 or index == residual(node)
    if layout_of(node) in (Layout.CHANNEL, Layout.CHAIN):  # a per-channel operand: plain
        v = node.inputs[index]
        return v is None or not per_channel(v, node.outputs[0])
    return True


def residual(node: Node) -> int | None:
    """The input a node adds to its output (a Conv's fused `_sum`, ConvBlock's R)."""
    if node.attrs.get("_sum"):
        return node.attrs["_sum_input"]
    return ops.get(node.op_type, node).residual
