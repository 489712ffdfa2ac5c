"""Fusion row rope: the rotate-half rotary embedding becomes one Rope node.

LLaMA-style decoders (LLaMA, Qwen2, Mistral, GPT-NeoX, Phi) rotate every query and key by
its position, and exporters write it out as

    Y = X * cos + concat(-X[..., h:], X[..., :h]) * sin          (h: half the last axis)

seven nodes (two Slices, a Neg, a Concat, two Muls, an Add) per tensor per layer: small
copies that each cost a task (on a two-layer decoder at batch 8, the Slices and Concats
alone were 12% of the run). The row matches the Add and takes the region when each piece
reads what the pattern says; cos and sin may be constants or computed (positions gathered
from a table), and either operand order of the Muls and the Add is the same thing.
"""

from __future__ import annotations

import numpy as np

from ...ir import Graph, Node, Value
from ...ops.attention import ROPE
from .match import Fusion, on_device, other, replace_region, sole_producer


def _slice_bounds(node: Node, d: int) -> tuple[int, int] | None:
    """(start, end) of a Slice along the last axis of a tensor whose last axis has d
    elements, step 1; None for any other Slice."""
    x = node.input(0)
    ins = [node.input(i) for i in range(1, 5)]
    if x is None or x.meta is None or x.meta.rank is None or any(
            v is not None and not v.is_constant for v in ins) or ins[0] is None or ins[1] is None:
        return None
    rank = x.meta.rank
    starts, ends = (np.asarray(v.const).reshape(-1) for v in ins[:2])
    axes = np.asarray(ins[2].const).reshape(-1) if ins[2] is not None else np.arange(len(starts))
    steps = np.asarray(ins[3].const).reshape(-1) if ins[3] is not None else np.ones(len(starts))
    if len(starts) != 1 or len(ends) != 1 or len(axes) != 1 or len(steps) != 1 \
            or int(axes[0]) % rank != rank - 1 or int(steps[0]) != 1:
        return None
    start, end = int(starts[0]), int(ends[0])
    start = start + d if start < 0 else start
    end = end + d if end < 0 else min(end, d)
    return (start, end) if 0 <= start <= end <= d else None


def _rotate_half_of(graph: Graph, r: Value) -> Value | None:
    """X when r = concat(-X[..., h:], X[..., :h]) along the last axis, else None."""
    cat = sole_producer(graph, r, {"Concat"})
    if cat is None or len(cat.inputs) != 2 or r.meta is None or r.meta.rank is None \
            or int(cat.attrs.get("axis", 0)) % r.meta.rank != r.meta.rank - 1:
        return None
    d = r.meta.shape[-1]
    if not isinstance(d, int) or d % 2:
        return None
    neg = sole_producer(graph, cat.inputs[0], {"Neg"})
    upper = sole_producer(graph, neg.inputs[0], {"Slice"}) if neg is not None else None
    lower = sole_producer(graph, cat.inputs[1], {"Slice"})
    if upper is None or lower is None or upper.inputs[0] is not lower.inputs[0]:
        return None
    if _slice_bounds(upper, d) != (d // 2, d) or _slice_bounds(lower, d) != (0, d // 2):
        return None
    if not on_device(cat, neg, upper, lower):
        return None
    return upper.inputs[0]


def _match_rope(graph: Graph, add: Node):
    if add.op_type != "Add" or len(add.inputs) != 2:
        return None
    y = add.outputs[0]
    for first, second in ((0, 1), (1, 0)):
        direct = sole_producer(graph, add.inputs[first], {"Mul"})
        turned = sole_producer(graph, add.inputs[second], {"Mul"})
        if direct is None or turned is None or not on_device(add, direct, turned):
            continue
        for r in turned.inputs:
            x = _rotate_half_of(graph, r)
            if x is None or x not in direct.inputs:
                continue
            cos, sin = other(direct, x), other(turned, r)
            if cos is None or sin is None or x.meta is None or y.meta is None \
                    or x.meta != y.meta or cos.meta is None or sin.meta is None \
                    or cos.meta.shape != sin.meta.shape or not cos.meta.shape \
                    or cos.meta.shape[-1] != x.meta.shape[-1]:
                continue
            cat = r.producer
            neg = cat.inputs[0].producer
            nodes = [neg.inputs[0].producer, cat.inputs[1].producer, neg, cat, turned, direct,
                     add]
            return x, cos, sin, nodes
    return None


def _rewrite_rope(graph: Graph, add: Node, ctx) -> str:
    x, cos, sin, nodes = ctx
    node = replace_region(graph, add, nodes, ROPE, [x, cos, sin], {})
    return f"Rope: {node.name} took {', '.join(n.name for n in nodes)}"


ROW = Fusion("rope", _match_rope, _rewrite_rope, produces=("Rope",))
