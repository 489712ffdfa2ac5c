"""Canonical views: a Gather that picks every row in order, and a view of a view.

Transformers' mask code (`masking_utils`, traced through vmap) flattens the [N, S] attention
mask to [N * S, 1], gathers it back with the constant indices arange(N * S) shaped
[N, 1, 1, S] and reshapes twice: four nodes that only reshape the mask, and whose middle
shapes mix the batch with the sequence, so the graph did not look batch-separable to the
data-parallel split (engine/optimize/batch_split.py) and no encoder or decoder of the zoo
split at batch 8. A Gather along axis 0 whose constant indices are 0, 1, ..., rows - 1 in
order is a Reshape of its data to indices.shape + data.shape[1:] (a GatherND listing every
position of data's leading axes in order, LLaMA's form of the same code, likewise), and a
Reshape or Flatten of a Reshape or Flatten (read by nothing else) is one Reshape of the
first one's input to the last one's shape: the chain above becomes one Reshape
[N, S] -> [N, 1, 1, S]. Both are exact (the same bytes in the same order) and views on the
device (no task).

A Transpose between a Reshape merging leading axes and one splitting them back is one
Transpose of the original (torch's dynamo export writes scaled_dot_product_attention's Kᵀ
as [B, H, S, D] -> [B*H, S, D] -> Transpose [0, 2, 1] -> [B, H, D, S]; the attention
fusion reads a 4-D Transpose as the kernel's strided operand, and the 3-D one hid it).

A Split that cuts a Concat (or a Transpose of one) back into the parts it joined is the
parts: a mixture of experts' padded selection (prepare/expert_rows.py) is the Concat of its
slot and token rows, which the exporter's Transpose and Split then take apart again, three
tasks per expert. A part that only moves unit axes under the Transpose is a Reshape.
"""

from __future__ import annotations

import numpy as np

from ..ir import Graph, Node, Value

_FLAT_VIEWS = ("Reshape", "Flatten")
MAX_INDEX_CHECK = 1 << 24  # indices compared against arange at compile time, at most


def _static(v: Value | None) -> bool:
    return v is not None and v.meta is not None and v.meta.shape is not None \
        and v.meta.is_static


def identity_gather(node: Node) -> bool:
    """Gather(data, arange(rows) in any shape, axis=0) on a computed data tensor."""
    if node.op_type != "Gather" or len(node.outputs) != 1:
        return False
    data, idx = node.input(0), node.input(1)
    if not _static(data) or data.is_constant or data.meta.rank < 1 or idx is None \
            or not idx.is_constant:
        return False
    if int(node.attrs.get("axis", 0)) % data.meta.rank != 0:
        return False
    c = np.asarray(idx.const)
    rows = data.meta.shape[0]
    if c.dtype.kind not in "iu" or c.size != rows or c.size > MAX_INDEX_CHECK:
        return False
    return bool(np.array_equal(c.reshape(-1), np.arange(rows)))


def identity_gather_nd(node: Node) -> bool:
    """GatherND(data, indices, batch_dims=0) whose constant index tuples (the last axis, k
    long) list every position of data's first k axes in order: [N, 1, 1, S, 2] of (n, s)."""
    if node.op_type != "GatherND" or len(node.outputs) != 1 or node.attrs.get("batch_dims", 0):
        return False
    data, idx = node.input(0), node.input(1)
    if not _static(data) or data.is_constant or idx is None or not idx.is_constant:
        return False
    c = np.asarray(idx.const)
    if c.dtype.kind not in "iu" or c.ndim < 1 or not 1 <= c.shape[-1] <= data.meta.rank \
            or c.size > MAX_INDEX_CHECK:
        return False
    lead = tuple(data.meta.shape[:c.shape[-1]])
    if c.size // c.shape[-1] != int(np.prod(lead, dtype=np.int64)):
        return False
    every = np.indices(lead).reshape(len(lead), -1).T
    return bool(np.array_equal(c.reshape(-1, c.shape[-1]), every))


def _reshape(graph: Graph, node: Node, source: Value, shape: tuple[int, ...]) -> None:
    target = graph.add_constant(None, np.asarray(shape, np.int64))
    view = graph.add_node("Reshape", [source, target], outputs=[], after=node,
                          name=graph.unique_name(f"{node.name}_view"))
    graph.hand_over_outputs(node, [view])


def as_reshape(graph: Graph, node: Node) -> None:
    data, idx = node.input(0), node.input(1)
    _reshape(graph, node, data, tuple(np.shape(idx.const)) + tuple(data.meta.shape[1:]))


def nd_as_reshape(graph: Graph, node: Node) -> None:
    data, idx = node.input(0), node.input(1)
    k = np.shape(idx.const)[-1]
    _reshape(graph, node, data, tuple(np.shape(idx.const)[:-1]) + tuple(data.meta.shape[k:]))


def view_of_view(node: Node) -> bool:
    """A Reshape/Flatten (static, no zero-sized dims) of a Reshape/Flatten whose output only
    it reads."""
    if node.op_type not in _FLAT_VIEWS or len(node.outputs) != 1:
        return False
    x, y = node.input(0), node.outputs[0]
    if not _static(y) or 0 in y.meta.shape or x is None or x.is_constant:
        return False
    first = x.producer
    return _collapsible(first, x, node)


ROUND_TRIP_VIEWS = ("Reshape", "Flatten", "Squeeze", "Unsqueeze")


def view_round_trip(node: Node) -> bool:
    """A view of a view back to the first one's input shape, whoever else reads the middle:
    the bytes of the input, unchanged. A 1-D convolution's [N, C, 1, L] output viewed as
    [N, C, L] for an activation and, for the residual branch's convolution, viewed back to
    [N, C, 1, L] (Encodec's shortcut): the round trip kept the shortcut off the
    convolution's own value, a conversion out of its format and one back."""
    if node.op_type not in ROUND_TRIP_VIEWS or len(node.outputs) != 1:
        return False
    x, y = node.input(0), node.outputs[0]
    if not _static(y) or x is None or x.is_constant or y in node.graph.outputs:
        return False
    first = x.producer
    if first is None or first.op_type not in ROUND_TRIP_VIEWS:
        return False
    source = first.input(0)
    return _static(source) and not source.is_constant and source.meta == y.meta


def as_source(graph: Graph, node: Node) -> None:
    graph.replace_all_uses(node.outputs[0], node.input(0).producer.input(0))
    graph.remove_node(node)


def _collapsible(first: Node | None, x: Value, reader: Node) -> bool:
    return (first is not None and first.op_type in _FLAT_VIEWS and x.users == [reader]
            and x not in reader.graph.outputs and _static(first.input(0))
            and not first.input(0).is_constant)


def as_one_view(graph: Graph, node: Node) -> None:
    """The whole chain of such views before `node` (a Gather made a Reshape later in the
    same pass, the Flatten before it visited already) becomes one Reshape."""
    chain = [node.input(0).producer]
    while _collapsible(chain[-1].input(0).producer, chain[-1].input(0), chain[-1]):
        chain.append(chain[-1].input(0).producer)
    _reshape(graph, node, chain[-1].input(0), tuple(node.outputs[0].meta.shape))
    for view in chain:
        graph.remove_node(view)


def _merged_transpose(node: Node) -> tuple[Value, list[int]] | None:
    """(x, perm) when node = Reshape(Transpose(Reshape(x))) is one Transpose of x: the first
    Reshape merges x's leading axes into one, the Transpose keeps that axis first and permutes
    the others, the last Reshape splits it back (torch's export of a 4-D transpose through
    bmm's 3-D one: [B, H, S, D] -> [B*H, S, D] -> [0, 2, 1] -> [B, H, D, S])."""
    if node.op_type != "Reshape" or len(node.outputs) != 1 or not _static(node.outputs[0]):
        return None
    t = node.input(0)
    turn = t.producer if t is not None else None
    if turn is None or turn.op_type != "Transpose" or t.users != [node] \
            or t in node.graph.outputs:
        return None
    m = turn.input(0)
    merge = m.producer if m is not None else None
    if merge is None or merge.op_type not in _FLAT_VIEWS or m.users != [turn] \
            or m in node.graph.outputs or not _static(merge.input(0)) or not _static(m):
        return None
    x = merge.input(0)
    xs, ms, ys = tuple(x.meta.shape), tuple(m.meta.shape), tuple(node.outputs[0].meta.shape)
    perm = [int(a) for a in turn.attrs.get("perm", range(len(ms) - 1, -1, -1))]
    j = len(xs) - len(ms) + 1  # x's leading axes merged into m's first
    if j < 2 or len(perm) != len(ms) or perm[0] != 0 or 0 in xs \
            or ms[1:] != xs[j:] or ms[0] != int(np.prod(xs[:j])):
        return None
    full = list(range(j)) + [j - 1 + perm[i] for i in range(1, len(perm))]
    if ys != tuple(xs[a] for a in full):
        return None
    return x, full


def merged_transpose(node: Node) -> bool:
    return _merged_transpose(node) is not None


def as_transpose(graph: Graph, node: Node) -> None:
    x, perm = _merged_transpose(node)
    turn = node.input(0).producer
    merge = turn.input(0).producer
    new = graph.add_node("Transpose", [x], attrs={"perm": perm},
                         name=graph.unique_name(f"{turn.name}_merged"), after=node)
    graph.replace_all_uses(node.outputs[0], new.outputs[0])
    for n in (node, turn, merge):
        graph.remove_node(n)


__all__ = ["as_one_view", "as_reshape", "as_transpose", "identity_gather", "identity_gather_nd",
           "merged_transpose", "nd_as_reshape", "view_of_view"]


# ---- a Split that undoes a Concat ------------------------------------------------------
def _split_parts(node: Node) -> tuple[list[Value], list[int] | None] | None:
    """(the Concat's inputs, the Transpose's perm or None) when node = Split of Concat, or
    of a Transpose (read by nothing else) of one, along the axis the parts were joined on,
    into pieces of exactly the parts' sizes: each piece is a part (transposed)."""
    if node.op_type != "Split" or not node.outputs or any(not _static(o) for o in node.outputs) \
            or any(o in node.graph.outputs for o in node.outputs):
        return None
    x = node.input(0)
    if x is None or not _static(x) or x.producer is None:
        return None
    perm, src = None, x
    if x.producer.op_type == "Transpose" and len(x.users) == 1:
        rank = len(x.meta.shape)
        perm = list(x.producer.attrs.get("perm") or range(rank)[::-1])
        src = x.producer.input(0)
    concat = src.producer if src is not None else None
    if concat is None or concat.op_type != "Concat" or not _static(src) \
            or any(p is None or not _static(p) for p in concat.inputs):
        return None
    rank = len(src.meta.shape)
    axis = int(node.attrs.get("axis", 0))
    axis = axis + rank if axis < 0 else axis
    joined = int(concat.attrs.get("axis", 0))
    joined = joined + rank if joined < 0 else joined
    if (perm[axis] if perm is not None else axis) != joined:
        return None
    pieces = [o.meta.shape[axis] for o in node.outputs]
    if pieces != [p.meta.shape[joined] for p in concat.inputs]:
        return None
    return list(concat.inputs), perm


def split_of_concat(node: Node) -> bool:
    return _split_parts(node) is not None


def as_parts(graph: Graph, node: Node) -> None:
    """Each piece is its part; through a Transpose, the part transposed, a Reshape where only
    unit axes move (a MoE selection's [1, T] rows as [T, 1] columns: no task)."""
    parts, perm = _split_parts(node)
    for out, part in zip(list(node.outputs), parts):
        if perm is None:
            graph.replace_all_uses(out, part)
            continue
        shape = part.meta.shape
        moved = [a for a in perm if shape[a] != 1]
        if moved == sorted(moved):
            target = graph.add_constant(None, np.asarray(out.meta.shape, np.int64))
            new = graph.add_node("Reshape", [part, target], after=node,
                                 name=graph.unique_name(f"{node.name}_part")).outputs[0]
        else:
            new = graph.add_node("Transpose", [part], attrs={"perm": list(perm)}, after=node,
                                 name=graph.unique_name(f"{node.name}_part")).outputs[0]
        new.meta = out.meta
        graph.replace_all_uses(out, new)
