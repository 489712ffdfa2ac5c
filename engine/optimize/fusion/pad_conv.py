"""Fusion row pad_conv: a zero Pad of the spatial axes joins the Conv that reads it.

TensorFlow-style "same" padding is exported as an explicit Pad before the Conv (HF's
MobileNetV2 has 52 of them). Standing alone, each Pad is a plain-layout copy, so the
layout pass converts the activation out of the convolutions' blocked format and back
around it: on that MobileNetV2 the Pads and their 101 conversions were 70% of the run.
A Pad of the constant 0 that grows only the spatial axes (non-negatively) is what the
Conv's own `pads` do, so it becomes them.
"""

from __future__ import annotations

import numpy as np

from ...ir import Graph, Node
from .match import Fusion, on_device, sole_producer


def _spatial_pads(pad: Node, rank: int) -> list[int] | None:
    """The Pad's per-axis (begins, ends) when it is a constant-0 Pad of the spatial axes
    only, by non-negative amounts; else None."""
    if pad.attrs.get("mode", "constant") != "constant":
        return None
    p, v, ax = pad.input(1), pad.input(2), pad.input(3)
    if p is None or not p.is_constant or (v is not None and not v.is_constant) \
            or (ax is not None and not ax.is_constant):
        return None
    if v is not None and np.size(v.const) and float(np.asarray(v.const).reshape(-1)[0]) != 0:
        return None
    pads = [int(x) for x in np.asarray(p.const).reshape(-1)]
    axes = list(range(rank)) if ax is None else [
        int(a) + rank if int(a) < 0 else int(a) for a in np.asarray(ax.const).reshape(-1)]
    if len(pads) != 2 * len(axes) or any(not 0 <= a < rank for a in axes):
        return None
    full = [0] * (2 * rank)
    for k, a in enumerate(axes):
        full[a], full[a + rank] = pads[k], pads[k + len(axes)]
    if any(x < 0 for x in full) or any(full[a] or full[a + rank] for a in (0, 1)):
        return None
    return full


def _unit_view(graph: Graph, x) -> Node | None:
    """The Reshape that views a 1-D convolution's [N, C, W] as [N, C, 1, W] (what
    canonicalize makes of it), when it is x's producer and the only reader of its input."""
    view = sole_producer(graph, x, {"Reshape"})
    if view is None or view.input(0) is None or view.input(0).meta is None or x.meta is None \
            or not x.meta.is_static or not view.input(0).meta.is_static:
        return None
    n, c, w = view.input(0).meta.shape if view.input(0).meta.rank == 3 else (None,) * 3
    return view if tuple(x.meta.shape) == (n, c, 1, w) else None


def _match_pad_conv(graph: Graph, conv: Node):
    if conv.op_type != "Conv" or conv.attrs.get("auto_pad", "NOTSET") not in ("NOTSET", "VALID"):
        return None
    x = conv.input(0)
    view = _unit_view(graph, x)
    pad = sole_producer(graph, view.input(0) if view is not None else x, {"Pad"})
    if pad is None or not on_device(pad, conv) or x.meta is None or pad.input(0) is None:
        return None
    src = pad.input(0).meta
    if src is None or src.rank != x.meta.rank - (view is not None) or src.rank < 3:
        return None
    full = _spatial_pads(pad, src.rank)
    if full is None:
        return None
    rank = x.meta.rank
    if view is not None:  # a 1-D pad of [N, C, W] is the 2-D pad of [N, C, 1, W] along W
        full = [0, 0, 0, full[2], 0, 0, 0, full[5]]
    spatial = rank - 2
    own = conv.attrs.get("pads") or [0] * (2 * spatial)
    if conv.attrs.get("auto_pad", "NOTSET") == "VALID":
        own = [0] * (2 * spatial)
    if len(own) != 2 * spatial:
        return None
    joined = [own[i] + full[2 + i] for i in range(spatial)] + \
             [own[spatial + i] + full[rank + 2 + i] for i in range(spatial)]
    return pad, joined, view


def _rewrite_pad_conv(graph: Graph, conv: Node, ctx) -> str:
    pad, joined, view = ctx
    conv.attrs["pads"] = joined
    conv.attrs["auto_pad"] = "NOTSET"
    if view is not None:  # the view of the unpadded input
        n, c, w = pad.input(0).meta.shape
        shape = graph.add_constant(None, np.array([n, c, 1, w], np.int64))
        view.set_inputs([pad.input(0), shape])
        view.outputs[0].meta = type(view.outputs[0].meta)(view.outputs[0].meta.dtype,
                                                          (n, c, 1, w))
    else:
        conv.replace_input(conv.input(0), pad.input(0))
    graph.remove_node(pad)
    conv.meta.fused = conv.meta.fused + (pad.name,)
    return f"Pad+Conv: {conv.name} took {pad.name}'s padding {joined}"


ROW = Fusion("pad_conv", _match_pad_conv, _rewrite_pad_conv)
