"""Fusion row rope: the rotary embedding becomes one Rope node.

LLaMA-style decoders (LLaMA, Qwen2, Mistral, GPT-NeoX, Phi) rotate every query and key by
its position, and exporters write it out as

    Y = X * cos + concat(-X[..., h:], X[..., :h]) * sin          (h: half the last axis)

seven nodes (two Slices, a Neg, a Concat, two Muls, an Add) per tensor per layer: small
copies that each cost a task (on a two-layer decoder at batch 8, the Slices and Concats
alone were 12% of the run). GPT-J and CodeGen turn neighbouring pairs instead
(rotate_every_two):

    Y = X * cos + flatten(stack([-X[..., 1::2], X[..., 0::2]], -1)) * sin

two strided Slices, a Neg, two Unsqueezes, a Concat and a Reshape before the Muls: one Rope
with attribute `interleaved`. The row matches the Add and takes the region when each piece
reads what the pattern says; cos and sin may be constants or computed (positions gathered
from a table), and either operand order of the Muls and the Add is the same thing.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from ...ir import Graph, Node, Value
from ...ops.attention import ROPE
from .match import Fusion, on_device, other, rename_output, replace_region, sole_producer


def _slice_bounds(node: Node, d: int, step: int = 1) -> tuple[int, int] | None:
    """(start, end) of a Slice along the last axis of a tensor whose last axis has d
    elements, with this step; None for any other Slice."""
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
            or int(axes[0]) % rank != rank - 1 or int(steps[0]) != step:
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


def _through_views(graph: Graph, v: Value, negated: bool) -> tuple[Node | None, list[Node]]:
    """The Slice under v through views (Unsqueeze/Reshape) and, when `negated`, exactly one
    Neg, in any order; and the nodes passed. (None, []) when v is something else."""
    passed: list[Node] = []
    negs = 0
    for _ in range(4):
        node = sole_producer(graph, v, {"Unsqueeze", "Reshape", "Neg", "Slice"})
        if node is None:
            break
        if node.op_type == "Slice":
            return (node, passed) if negs == int(negated) else (None, [])
        negs += node.op_type == "Neg"
        passed.append(node)
        v = node.input(0)
    return None, []


def _rotate_pairs_of(graph: Graph, r: Value) -> tuple[Value, list[Node]] | None:
    """(X, its nodes) when r = flatten(stack([-X[..., 1::2], X[..., 0::2]], axis=-1)): the
    interleaved rotation (a Concat of two [..., d/2, 1] halves, viewed back to [..., d])."""
    view = sole_producer(graph, r, {"Reshape", "Flatten"})
    cat = sole_producer(graph, view.input(0), {"Concat"}) if view is not None else None
    if cat is None or len(cat.inputs) != 2 or r.meta is None or r.meta.rank is None:
        return None
    c = cat.outputs[0].meta
    d = r.meta.shape[-1]
    if c is None or c.rank != r.meta.rank + 1 or not isinstance(d, int) or d % 2 \
            or tuple(c.shape) != (*r.meta.shape[:-1], d // 2, 2) \
            or int(cat.attrs.get("axis", 0)) % c.rank != c.rank - 1:
        return None
    odd, odd_nodes = _through_views(graph, cat.inputs[0], negated=True)
    even, even_nodes = _through_views(graph, cat.inputs[1], negated=False)
    if odd is None or even is None or odd.input(0) is not even.input(0) \
            or _slice_bounds(odd, d, 2) != (1, d) or _slice_bounds(even, d, 2) != (0, d):
        return None
    nodes = [odd, even, *reversed(odd_nodes), *reversed(even_nodes), cat, view]  # in order
    if not on_device(*nodes):
        return None
    return odd.input(0), nodes


def _rotation_of(graph: Graph, r: Value) -> tuple[Value, list[Node], dict] | None:
    """(X, the nodes computing r from it, the Rope's attributes) when r is X turned by
    halves or by neighbouring pairs; else None."""
    x = _rotate_half_of(graph, r)
    if x is not None:
        cat = r.producer
        neg = cat.inputs[0].producer
        return x, [neg.inputs[0].producer, cat.inputs[1].producer, neg, cat], {}
    pairs = _rotate_pairs_of(graph, r)
    return (pairs[0], pairs[1], {"interleaved": 1}) if pairs is not None else None


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
            found = _rotation_of(graph, r)
            if found is None or found[0] not in direct.inputs:
                continue
            x, rotation, attrs = found
            cos, sin = other(direct, x), other(turned, r)
            if cos is None or sin is None or x.meta is None or y.meta is None \
                    or x.meta != y.meta or cos.meta is None or sin.meta is None \
                    or cos.meta.shape != sin.meta.shape or not cos.meta.shape \
                    or cos.meta.shape[-1] != x.meta.shape[-1]:
                continue
            return x, cos, sin, [*rotation, turned, direct, add], attrs
    return None


def _match_partial(graph: Graph, cat: Node):
    """concat(Rope(X[..., :r]), X[..., r:]) along the last axis: the partial rotary of Phi
    and GPT-NeoX, one Rope of X with rotary_dim r (the kernel copies the rest)."""
    y = cat.outputs[0]
    if len(cat.inputs) != 2 or y.meta is None or y.meta.rank is None \
            or int(cat.attrs.get("axis", 0)) % y.meta.rank != y.meta.rank - 1:
        return None
    rope = sole_producer(graph, cat.inputs[0], {ROPE})
    rest = sole_producer(graph, cat.inputs[1], {"Slice"})
    head = sole_producer(graph, rope.input(0), {"Slice"}) if rope is not None else None
    if head is None or rest is None or rope.attrs.get("rotary_dim", 0) \
            or head.input(0) is not rest.input(0) or not on_device(cat, rope, head, rest):
        return None
    x = head.input(0)
    d = x.meta.shape[-1] if x.meta is not None and x.meta.rank else None
    if not isinstance(d, int) or x.meta != y.meta:
        return None
    r = _slice_bounds(head, d)
    if r is None or r[0] != 0 or _slice_bounds(rest, d) != (r[1], d) or r[1] % 2:
        return None
    return x, rope.input(1), rope.input(2), [head, rest, rope, cat], \
        {**rope.attrs, "rotary_dim": r[1]}


def _match(graph: Graph, node: Node):
    if node.op_type == "Concat":
        return _match_partial(graph, node)
    return _match_rope(graph, node)


def _rewrite_rope(graph: Graph, last: Node, ctx) -> str:
    x, cos, sin, nodes, attrs = ctx
    node = replace_region(graph, last, nodes, ROPE, [x, cos, sin], attrs)
    how = ", ".join([*(["interleaved"] if attrs.get("interleaved") else []),
                     *([f"partial, rotary_dim {attrs['rotary_dim']}"]
                       if attrs.get("rotary_dim") else [])])
    return f"Rope{f'({how})' if how else ''}: {node.name} took {', '.join(n.name for n in nodes)}"


ROW = Fusion("rope", _match, _rewrite_rope, produces=("Rope",))


# ---- the head-split Transpose after the Rope -------------------------------------------------
def _permuted_table(graph: Graph, t: Value, rank: int, inv: tuple[int, ...],
                    before: Node) -> Value | None:
    """cos or sin (leading axes padded to `rank`) with its axes permuted by `inv`: a view
    (Reshape) when only unit axes move, a new constant when it is one, else None."""
    shape = (1,) * (rank - t.meta.rank) + tuple(t.meta.shape)
    moved = tuple(shape[i] for i in inv)
    if t.is_constant:
        return graph.add_constant(None, np.ascontiguousarray(
            np.transpose(np.asarray(t.const).reshape(shape), inv)))
    big = [i for i in inv if shape[i] != 1]
    if big != sorted(big):
        return None
    target = graph.add_constant(None, np.asarray(moved, np.int64))
    view = graph.add_node("Reshape", [t, target], name=graph.unique_name("rope_table_view"),
                          after=before)
    view.meta.engine, view.meta.partition = before.meta.engine, before.meta.partition
    view.outputs[0].meta = dataclasses.replace(t.meta, shape=moved)
    return view.outputs[0]


def _match_transposed(graph: Graph, rope: Node):
    """Rope(Transpose(X, perm)) with perm keeping the last axis: the head split of the
    projections ([B, S, H, D] -> [B, H, S, D]) before the rotary embedding."""
    if rope.op_type != ROPE:
        return None
    t = sole_producer(graph, rope.input(0), {"Transpose"})
    x = t.input(0) if t is not None else None
    cos, sin = rope.input(1), rope.input(2)
    if x is None or not on_device(rope, t) or x.meta is None or not x.meta.is_static \
            or any(v.meta is None or not v.meta.is_static for v in (cos, sin)):
        return None
    rank = x.meta.rank
    perm = tuple(int(p) for p in t.attrs.get("perm", range(rank - 1, -1, -1)))
    if len(perm) != rank or perm[-1] != rank - 1 or cos.meta.rank > rank \
            or sin.meta.rank > rank:
        return None
    inv = tuple(int(i) for i in np.argsort(perm))
    for v in (cos, sin):
        shape = (1,) * (rank - v.meta.rank) + tuple(v.meta.shape)
        if not v.is_constant and [i for i in inv if shape[i] != 1] != \
                sorted(i for i in inv if shape[i] != 1):
            return None
    return t, x, perm, inv


def _rewrite_transposed(graph: Graph, rope: Node, ctx) -> str:
    t, x, perm, inv = ctx
    before = graph.nodes[graph.nodes.index(rope) - 1]
    tables = []
    for v in (rope.input(1), rope.input(2)):
        table = _permuted_table(graph, v, x.meta.rank, inv, before)
        if table.producer is not None:
            before = table.producer
        tables.append(table)
    node = graph.add_node(ROPE, [x, *tables], attrs=dict(rope.attrs),
                          name=graph.unique_name("graphengine.rope"), after=rope)
    node.meta.engine, node.meta.partition = rope.meta.engine, rope.meta.partition
    node.outputs[0].meta = x.meta
    out = rope.outputs[0]
    turn = graph.add_node("Transpose", [node.outputs[0]], attrs={"perm": list(perm)},
                          name=graph.unique_name(t.name), after=node)
    turn.meta.engine, turn.meta.partition = t.meta.engine, t.meta.partition
    turn.outputs[0].meta = out.meta
    graph.replace_all_uses(out, turn.outputs[0])
    graph.remove_node(rope)
    graph.remove_node(t)
    rename_output(graph, turn.outputs[0], out.name)
    node.meta.fused = (rope.name, *rope.meta.fused)
    return f"Rope before its Transpose: {node.name} reads {x.name}, {turn.name} {list(perm)} after"


# After `rope`, before `attention`: the Transpose then meets the attention, which reads it as
# a perm (the kernel's strided operand), so the head split costs no copy.
TRANSPOSED_ROW = Fusion("rope_transpose", _match_transposed, _rewrite_transposed,
                        after=("rope",), produces=("Rope",))
