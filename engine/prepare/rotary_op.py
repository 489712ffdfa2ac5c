"""ONNX RotaryEmbedding (opset 23) as the device's Rope.

RotaryEmbedding had only the host's reference, so a model that wrote its rotary embedding
as the standard op ran it in numpy between two device programs. Rope (`ops/attention.py`,
the rope fusion row's node) computes the same product on rows of X: x * cos + rotate(x) * sin
on the first `rotary_dim` elements of the last axis, the halves or (`interleaved`) the
neighbouring pairs turned, the rest copied. What differs is the tables' form:

- RotaryEmbedding's cos/sin caches hold one value per pair, [B, S, r/2] (or [max_pos, r/2]
  gathered by position_ids [B, S]); Rope's span r: the halves' table is concat(c, c), the
  pairs' each value twice (a Reshape, an Expand and a Reshape);
- X is [B, H, S, D] (the tables get a unit head axis) or [B, S, H*D] with num_heads (X is
  viewed as [B, S, H, D] and the tables get the unit head axis after S).

Exact: the same products and sums per element as the reference.
"""

from __future__ import annotations

import numpy as np

from ..dtypes import DType
from ..ir import Graph, Node, Value
from ..ops.attention import ROPE
from .steps import chain, replace_outputs


def onnx_rotary(node: Node) -> bool:
    """A RotaryEmbedding of float32 with static shapes whose rotated part is even and fits."""
    if node.op_type != "RotaryEmbedding":
        return False
    x, cos, sin, pos = (node.input(i) for i in range(4))
    if any(v is None or v.meta is None or not v.meta.is_static for v in (x, cos, sin)) \
            or (pos is not None and (pos.meta is None or not pos.meta.is_static)):
        return False
    if x.meta.dtype is not DType.FLOAT32 or cos.meta.dtype is not DType.FLOAT32 \
            or sin.meta.dtype is not DType.FLOAT32 or cos.meta.shape != sin.meta.shape:
        return False
    d = _head_dim(node)
    r = int(node.attrs.get("rotary_embedding_dim", 0) or 0) or d
    if d is None or r % 2 or r > d or cos.meta.shape[-1] != r // 2:
        return False
    b, s = x.meta.shape[0], (x.meta.shape[2] if x.meta.rank == 4 else x.meta.shape[1])
    want = (b, s) if pos is None else tuple(pos.meta.shape)
    if pos is None:
        return cos.meta.rank == 3 and tuple(cos.meta.shape[:2]) == want
    return cos.meta.rank == 2 and want == (b, s)


def _head_dim(node: Node) -> int | None:
    x = node.input(0)
    if x.meta.rank == 4:
        return x.meta.shape[3]
    heads = node.attrs.get("num_heads")
    if x.meta.rank != 3 or heads is None or int(heads) < 1 or x.meta.shape[2] % int(heads):
        return None
    return x.meta.shape[2] // int(heads)


def as_rope(graph: Graph, node: Node) -> None:
    x, cos, sin, pos = (node.input(i) for i in range(4))
    step = chain(graph, node)
    d = _head_dim(node)
    r = int(node.attrs.get("rotary_embedding_dim", 0) or 0) or d
    interleaved = int(node.attrs.get("interleaved", 0) or 0)
    b = x.meta.shape[0]
    s = x.meta.shape[2] if x.meta.rank == 4 else x.meta.shape[1]

    def const(v) -> Value:
        return graph.add_constant(None, np.asarray(v, np.int64))

    def table(t: Value) -> Value:
        if pos is not None:  # [max_pos, r/2] at the positions: [B, S, r/2]
            t = step("Gather", [t, pos], axis=0)
        if interleaved:  # each value for both of its pair
            t = step("Reshape", [step("Expand", [
                step("Unsqueeze", [t, const([3])]), const([b, s, r // 2, 2])]),
                const([b, s, r])])
        else:
            t = step("Concat", [t, t], axis=-1)
        # the unit head axis: [B, 1, S, r] for X [B, H, S, D], [B, S, 1, r] for [B, S, H, D]
        return step("Unsqueeze", [t, const([1 if x.meta.rank == 4 else 2])])

    c, sn = table(cos), table(sin)
    attrs = {"interleaved": 1} if interleaved else {}
    if r < d:
        attrs["rotary_dim"] = r
    if x.meta.rank == 4:
        y = step(ROPE, [x, c, sn], **attrs)
    else:
        heads = x.meta.shape[2] // d
        y = step("Reshape", [step(ROPE, [
            step("Reshape", [x, const([b, s, heads, d])]), c, sn], **attrs),
            const(list(x.meta.shape))])
    replace_outputs(graph, node, {0: y})
