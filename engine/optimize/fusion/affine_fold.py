"""Fusion row affine_fold: a run of constant Muls and Adds is one Mul and one Add.

`x * a + b` then `* c + d` (each constant broadcasting to x's shape without widening it) is
`x * (a c) + (b c + d)`: at most two passes over the activation, or one, or none when the
folded scale is all ones and the shift all zeros. Exporters write such runs where an op's own
affine meets a model's: torch writes GroupNorm(C, C) (wav2vec2's and HuBERT's first feature
layer) as InstanceNormalization with scale ones and bias zeros followed by the layer's own
per-channel Mul and Add; `canonicalize` makes the InstanceNormalization a LayerNormalization
and its (identity) scale and bias a Mul and an Add, so four passes of 6.5 MB each ran after
the normalization of a one-second clip. A Sub of a constant is an Add of its negation
(exact); a Div is left alone (1 / c is not exact). Like the BatchNormalization folds, the
rewrite reassociates float32 products (x * a * c as x * (a c), (x + b) * c as x c + b c).

The row runs after the rows that read such constants themselves (a Conv's bias and scale, the
LayerNorm pattern's gamma and beta, the activation epilogues) and before the elementwise chain
row, so it only takes what no kernel absorbed.
"""

from __future__ import annotations

import numpy as np

from ...ir import Graph, Node, Value
from .match import Fusion, on_device, rename_output, sole_producer

_OPS = {"Mul", "Add", "Sub"}


def _step(node: Node) -> tuple[Value, str, np.ndarray] | None:
    """(running value, op, constant) when `node` is a float32 Mul/Add/Sub of an activation
    and a constant that does not widen it; Sub as an Add of the negation."""
    if node.op_type not in _OPS or len(node.inputs) != 2 or len(node.outputs) != 1:
        return None
    out = node.outputs[0].meta
    if out is None or not out.is_static or out.dtype.numpy != np.float32:
        return None
    for i in ((0,) if node.op_type == "Sub" else (0, 1)):  # c - x is no affine step of x
        x, c = node.input(i), node.input(1 - i)
        if x is None or c is None or x.is_constant or not c.is_constant or x.meta is None \
                or tuple(x.meta.shape or ()) != tuple(out.shape):
            continue
        const = np.asarray(c.const)
        if const.dtype != np.float32 or const.ndim > len(out.shape):
            continue
        if node.op_type == "Sub":
            return x, "Add", -const
        return x, node.op_type, const
    return None


def _match(graph: Graph, node: Node):
    last = _step(node)
    if last is None:
        return None
    out = node.outputs[0]
    if len(out.users) == 1 and out not in graph.outputs:  # fold the run at its end
        reader = out.users[0]
        if _step(reader) is not None and _step(reader)[0] is out and on_device(node, reader):
            return None
    steps, nodes = [last], [node]
    while True:
        prev = sole_producer(graph, steps[0][0], _OPS)
        step = _step(prev) if prev is not None else None
        if step is None or not on_device(prev, node):
            break
        steps.insert(0, step)
        nodes.insert(0, prev)
    if len(steps) < 2:
        return None
    scale = np.ones((), np.float64)
    shift = np.zeros((), np.float64)
    for _, op, c in steps:
        if op == "Mul":
            scale, shift = scale * c, shift * c
        else:
            shift = shift + c
    shape = tuple(out.meta.shape)
    if np.broadcast_shapes(shape, scale.shape, shift.shape) != shape:
        return None
    scale, shift = scale.astype(np.float32), shift.astype(np.float32)
    keep = [(op, c) for op, c in (("Mul", scale), ("Add", shift))
            if not np.all(c == (1 if op == "Mul" else 0))]
    if len(keep) >= len(steps) or (not keep and out in graph.outputs):
        return None
    return steps[0][0], nodes, keep


def _rewrite(graph: Graph, node: Node, ctx) -> str:
    x, nodes, keep = ctx
    final = node.outputs[0]
    running, after = x, node
    for op, c in keep:
        made = graph.add_node(op, [running, graph.add_constant(None, _compact(c))],
                              name=graph.unique_name(f"{node.name}_{op.lower()}"), after=after)
        made.meta.engine, made.meta.partition = node.meta.engine, node.meta.partition
        made.outputs[0].meta = final.meta
        running, after = made.outputs[0], made
    if running is not x:  # the report's record: the last node computes what the run did
        after.meta.fused = tuple(name for n in nodes for name in (n.name, *n.meta.fused))
    graph.replace_all_uses(final, running)
    for n in reversed(nodes):
        graph.remove_node(n)
    if running is not x:
        rename_output(graph, running, final.name)
    folded = "*".join(op for op, _ in keep) or "nothing"
    return f"Affine fold: {len(nodes)} constant Mul/Add nodes -> {folded} ({node.name})"


def _compact(c: np.ndarray) -> np.ndarray:
    """A constant that holds one value along every axis is that value (a scalar operand)."""
    flat = c.reshape(-1)
    return flat[:1].reshape(()) if flat.size > 1 and np.all(flat == flat[0]) else c


ROW = Fusion("affine_fold", _match, _rewrite)
