"""Batched matrix products over merged leading axes, lifted back to the unmerged ones.

Attention written with `bmm` (BLOOM's ALiBi `baddbmm`, hand-written and older torch code)
merges batch and heads into one axis, [B, H, S, D] -> [B*H, S, D], runs the products and the
scaling on 3-D tensors and splits the axis again around the Softmax:

    Reshape(Q4) [B*H,S,D] ──┐
    Reshape(K4) ─ Transpose [0,2,1] ─ MatMul ─ Mul ─ Add(alibi [B*H,1,S]) ─ Reshape [B,H,S,S] ─ ...

The attention fusion reads 4-D operands, so none of it fused (more_bloom: 54 tasks at batch
8), and the merged axis mixes the batch with the heads, so the data-parallel split could not
cut it either. These rows move the merge view down past each op that treats the merged axis
as a plain batch axis, leaving the op on the 4-D tensors:

- Transpose(merge(x), perm keeping axis 0) = merge(Transpose(x, perm on the unmerged axes));
- MatMul(merge(a), merge(b)) with a and b sharing [B, H] = merge(MatMul(a, b));
- an elementwise Add/Sub/Mul/Div of merge(x) and y = merge(op(x, y')), y' being y viewed with
  the two axes where y had the merged one (or y itself when it broadcasts over it).

A merge view the lifted ops leave before a split back to the same axes is a view of a view
(`views.view_of_view`), one Reshape to the shape it had, which `eliminate_identities` drops.
Exact: the same elements in the same order, the same operations on each.
"""

from __future__ import annotations

import numpy as np

from ..ir import Graph, Node, Value
from .steps import replace_outputs

_ELEMENTWISE = ("Add", "Sub", "Mul", "Div")


def _static(v: Value | None) -> bool:
    return v is not None and v.meta is not None and v.meta.shape is not None \
        and v.meta.is_static and 0 not in v.meta.shape


def merged_from(v: Value | None) -> Value | None:
    """x when v = Reshape(x) merges the first two axes of a 4-D x, the second not a unit axis
    (bmm's [B*H, S, D]), into one and keeps the rest, else None. (A unit second axis is a
    squeeze, not a merge: grouped-query attention's repeat_kv of one K/V head reshapes
    [B, 1, G, S, D] to [B, G, S, D], which must stay what the attention row reads.)"""
    node = v.producer if v is not None else None
    if node is None or node.op_type != "Reshape" or not _static(v) or v.meta.rank != 3:
        return None
    x = node.input(0)
    if not _static(x) or x.is_constant or x.meta.rank != 4:
        return None
    xs, vs = x.meta.shape, v.meta.shape
    if xs[1] == 1 or vs[0] != xs[0] * xs[1] or tuple(vs[1:]) != tuple(xs[2:]):
        return None
    return x


def _merge(graph: Graph, after: Node, x: Value, shape, name: str) -> Value:
    """x viewed as `shape` (a new Reshape after `after`)."""
    target = graph.add_constant(None, np.asarray(shape, np.int64))
    return graph.add_node("Reshape", [x, target], name=graph.unique_name(name),
                          after=after).outputs[0]


def _lift_transpose(node: Node) -> tuple | None:
    if node.op_type != "Transpose" or not _static(node.outputs[0]):
        return None
    x = merged_from(node.input(0))
    perm = [int(p) for p in node.attrs.get("perm", ())]
    if x is None or len(perm) != x.meta.rank - 1 or not perm or perm[0] != 0:
        return None
    return x, [0, 1] + [p + 1 for p in perm[1:]]


def _lift_matmul(node: Node) -> tuple | None:
    if node.op_type != "MatMul" or not _static(node.outputs[0]):
        return None
    a, b = merged_from(node.input(0)), merged_from(node.input(1))
    if a is None or b is None or a.meta.rank != b.meta.rank \
            or tuple(a.meta.shape[:2]) != tuple(b.meta.shape[:2]):
        return None
    return a, b


def _other_shape(y: Value, x: Value, out_rank: int) -> tuple | None:
    """y's shape with the merged axis split as x's (None: y broadcasts over it as it is;
    False: it cannot be lifted)."""
    ys = tuple(y.meta.shape)
    if len(ys) < out_rank:
        return None  # aligned from the right: it never reaches the merged axis
    if len(ys) > out_rank:
        return False
    lead = ys[0]
    if lead == 1:
        return (1, 1, *ys[1:])
    if lead == x.meta.shape[0] * x.meta.shape[1]:
        return (x.meta.shape[0], x.meta.shape[1], *ys[1:])
    return False


def _lift_elementwise(node: Node) -> tuple | None:
    if node.op_type not in _ELEMENTWISE or len(node.inputs) != 2 \
            or not _static(node.outputs[0]):
        return None
    for i in (0, 1):
        x = merged_from(node.input(i))
        y = node.input(1 - i)
        if x is None or not _static(y) \
                or node.outputs[0].meta.shape != node.input(i).meta.shape:
            continue  # (y widening the result is not this case)
        y4 = merged_from(y)
        if y4 is not None:  # both merged: alike, or y is left as it is
            if tuple(y4.meta.shape[:2]) == tuple(x.meta.shape[:2]):
                return i, x, y4, None
            continue
        shape = _other_shape(y, x, node.outputs[0].meta.rank)
        if shape is False:
            continue
        return i, x, y, shape
    return None


def merged_batch_op(node: Node) -> bool:
    return (_lift_transpose(node) or _lift_matmul(node) or _lift_elementwise(node)) is not None


def lift_merged_batch(graph: Graph, node: Node) -> None:
    out = node.outputs[0]
    if (t := _lift_transpose(node)) is not None:
        x, perm = t
        new = graph.add_node("Transpose", [x], attrs={"perm": perm},
                             name=graph.unique_name(node.name), after=node).outputs[0]
    elif (m := _lift_matmul(node)) is not None:
        new = graph.add_node("MatMul", list(m), name=graph.unique_name(node.name),
                             after=node).outputs[0]
    else:
        i, x, y, shape = _lift_elementwise(node)
        anchor = node
        if shape is not None:
            y = _merge(graph, anchor, y, shape, f"{node.name}_operand")
            anchor = y.producer
        ins = [x, y] if i == 0 else [y, x]
        new = graph.add_node(node.op_type, ins, name=graph.unique_name(node.name),
                             after=anchor).outputs[0]
    merged = _merge(graph, new.producer, new, out.meta.shape, f"{node.name}_merged")
    replace_outputs(graph, node, {0: merged})
