"""A Conv whose only reader is a Split along its output channels: one Conv per part.

YOLO's C2f and CSP blocks write cv1 -> Split(channels) -> bottlenecks -> Concat. The
device's Split reads plain NCHW, so in an NHWC region the Conv's output was converted to
NCHW, split, and each part converted back: three TransData and a Split per block (24 of
yolov8n's 33 TransData). A Conv of each part's output channels (its rows of the weights
and bias, the same epilogue) writes the part itself, in the region's format; the parts'
Convs read the same input the one Conv read.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from ...ir import Graph, Node
from .match import Fusion, on_device, sole_producer


def _match(graph: Graph, split: Node):
    if split.op_type != "Split" or len(split.outputs) < 2:
        return None
    conv = sole_producer(graph, split.input(0), {"Conv"})
    if conv is None or not on_device(conv, split) or conv.attrs.get("group", 1) != 1 \
            or conv.attrs.get("_sum") or conv.attrs.get("_sum_input") is not None:
        return None
    w, b = conv.input(1), conv.input(2)
    out = conv.outputs[0].meta
    if w is None or not w.is_constant or np.asarray(w.const).dtype != np.float32 \
            or (b is not None and not b.is_constant) or len(conv.inputs) > 3 \
            or out is None or not out.is_static or len(out.shape) != 4:
        return None
    axis = split.attrs.get("axis", 0)
    if (axis + 4 if axis < 0 else axis) != 1:
        return None
    sizes = []
    for v in split.outputs:
        if v.meta is None or not v.meta.is_static or len(v.meta.shape) != 4:
            return None
        sizes.append(int(v.meta.shape[1]))
    if sum(sizes) != out.shape[1] or min(sizes) < 1 or np.asarray(w.const).shape[0] != sum(sizes):
        return None
    return conv, sizes


def _rewrite(graph: Graph, split: Node, ctx) -> str:
    conv, sizes = ctx
    w = np.asarray(conv.input(1).const)
    b = conv.input(2)
    bias = None if b is None else np.asarray(b.const)
    parts, begin = [], 0
    for k, size in enumerate(sizes):
        end = begin + size
        ins = [conv.input(0), graph.add_constant(None, np.ascontiguousarray(w[begin:end]))]
        if bias is not None:
            ins.append(graph.add_constant(None, np.ascontiguousarray(bias[begin:end])))
        part = graph.add_node("Conv", ins, outputs=0, attrs=dict(conv.attrs),
                              name=graph.unique_name(f"{conv.name}_part{k}"), after=conv)
        part.meta = dataclasses.replace(conv.meta, fused=(*conv.meta.fused, split.name))
        parts.append(part)
        begin = end
    graph.hand_over_outputs(split, parts)  # each part keeps its Split output's name, readers
    graph.remove_node(conv)
    return f"Conv+Split: {conv.name} as {len(parts)} Convs of {sizes} output channels"


ROW = Fusion("conv_split", _match, _rewrite)
