"""A one-hot matrix product is a row lookup: Cast(Equal(x[..., 1], c0 + arange(K))) @ W.

JAX and TensorFlow write an embedding as `one_hot(x, K) @ W` (`jax.nn.one_hot`: an Equal of
the ids against a constant range, a Cast to float32, a MatMul): magika's byte embedding
builds a [N, 2048, 257] float32 one-hot (17 MB at batch 8) and multiplies it by a [257, 64]
table — an Equal, a Cast and a MatMul that together took as long as its convolution's
bias, GELU and pooling. Each row of the product is W[x - c0] when 0 <= x - c0 < K and zero
otherwise (exactly: the one 1.0 times a finite weight plus zeros), so the node becomes

    Gather(concat(W, zeros[1, M]), Min(Max(Reshape(x) - c0, -1), K))

where the row K of zeros answers every id outside the range (-1 wraps to it as well).
Only a finite W qualifies (0 * inf is NaN in the product, nothing in the lookup).

An elementwise op of such lookups (the same ids) and constants along the rows is a lookup
of the op applied to the table: the bias and GELU after the embedding fold into it, when
the table is no larger than the op's output.
"""

from __future__ import annotations

import numpy as np

from .. import ops
from ..ir import Graph, Node, Value

_MAX_ROWS = 1 << 20  # a larger "vocabulary" is no one-hot an exporter writes


def _static(v: Value | None) -> tuple[int, ...] | None:
    return tuple(v.meta.shape) if v is not None and v.meta is not None and v.meta.is_static \
        else None


def _ids_against_range(eq: Node) -> tuple[Value, int] | None:
    """(x, c0) when `eq` is Equal(x, c) or Equal(c, x) of integers, x static [..., 1] and
    c the constant c0 + arange(K) along the last axis of eq's output (other axes 1)."""
    out = _static(eq.outputs[0])
    if eq.op_type != "Equal" or len(eq.inputs) != 2 or out is None or not out:
        return None
    for i in (0, 1):
        x, c = eq.input(i), eq.input(1 - i)
        xs = _static(x)
        if x is None or c is None or x.is_constant or not c.is_constant or xs is None:
            continue
        const = np.asarray(c.const)
        if const.dtype.kind not in "iu" or x.meta.dtype.numpy != const.dtype \
                or len(xs) != len(out) or xs[-1] != 1 or xs[:-1] != out[:-1] \
                or const.ndim > len(out) or const.ndim == 0 or const.shape[-1] != out[-1] \
                or any(d != 1 for d in const.shape[:-1]) or not 1 <= out[-1] <= _MAX_ROWS:
            continue
        row = const.reshape(-1).astype(np.int64)
        info = np.iinfo(const.dtype)  # c0 - 1 and c0 + K must be ids too
        if np.array_equal(row, row[0] + np.arange(row.size, dtype=np.int64)) \
                and info.min < row[0] - 1 and row[-1] + 1 < info.max:
            return x, int(row[0])
    return None


def one_hot_product(node: Node) -> bool:
    return _match(node) is not None


def _match(node: Node) -> tuple[Value, int, np.ndarray] | None:
    """(x, c0, W) when `node` is MatMul(Cast(Equal(x, c0 + arange(K))) to float32, W) with
    W a finite float32 [K, M] constant."""
    if node.op_type != "MatMul" or len(node.inputs) != 2 or len(node.outputs) != 1:
        return None
    a, w = node.input(0), node.input(1)
    if a is None or w is None or not w.is_constant or a.producer is None \
            or a.producer.op_type != "Cast" or _static(node.outputs[0]) is None:
        return None
    table = np.asarray(w.const)
    cast = a.producer
    if table.dtype != np.float32 or table.ndim != 2 or a.meta is None \
            or a.meta.dtype.numpy != np.float32 or cast.input(0) is None \
            or cast.input(0).producer is None:
        return None
    found = _ids_against_range(cast.input(0).producer)
    a_shape = _static(a)
    # the table's scan last: only for a product that is a one-hot's
    if found is None or a_shape is None or a_shape[-1] != table.shape[0] \
            or not np.isfinite(table).all():
        return None
    return found[0], found[1], table


def as_row_lookup(graph: Graph, node: Node) -> None:
    """The MatMul as the Gather of its table's rows (the module's docstring)."""
    x, c0, table = _match(node)
    k, m = table.shape
    out = _static(node.outputs[0])
    dtype = x.meta.dtype.numpy
    name = node.name
    ids = graph.add_node("Reshape", [x, graph.add_constant(None, np.asarray(out[:-1], np.int64))],
                         name=graph.unique_name(f"{name}_ids"), after=node).outputs[0]
    last = ids.producer
    if c0:
        ids = graph.add_node("Sub", [ids, graph.add_constant(None, np.asarray(c0, dtype))],
                             name=graph.unique_name(f"{name}_offset"), after=last).outputs[0]
        last = ids.producer
    ids = graph.add_node("Max", [ids, graph.add_constant(None, np.asarray(-1, dtype))],
                         name=graph.unique_name(f"{name}_below"), after=last).outputs[0]
    ids = graph.add_node("Min", [ids, graph.add_constant(None, np.asarray(k, dtype))],
                         name=graph.unique_name(f"{name}_above"), after=ids.producer).outputs[0]
    rows = graph.add_constant(None, np.concatenate([table, np.zeros((1, m), np.float32)]))
    gather = graph.add_node("Gather", [rows, ids], outputs=[], attrs={"axis": 0},
                            name=graph.unique_name(f"{name}_rows"), after=ids.producer)
    graph.hand_over_outputs(node, [gather])


# Elementwise ops whose value at an element depends on that element only (and constants):
# f(Gather(T, ids)) = Gather(f(T), ids).
_ELEMENTWISE = {"Add", "Sub", "Mul", "Div", "Pow", "Tanh", "Sigmoid", "Exp", "Erf", "Relu",
                "LeakyRelu", "Sqrt", "Neg", "Reciprocal", "Abs", "Softplus"}


def _lookup_operands(node: Node) -> tuple[Value, list[np.ndarray | None], tuple] | None:
    """(ids, per input: the table it gathers from or None for a constant, the output shape)
    when `node` is elementwise over row lookups of float constant tables (axis 0, all by
    the same ids, tables of one shape) and constants that vary only along the tables' row
    axes, and the tables are no larger than the output."""
    if node.op_type not in _ELEMENTWISE or len(node.outputs) != 1 or not node.inputs:
        return None
    out = _static(node.outputs[0])
    ids = None
    tables: list[np.ndarray | None] = []
    for v in node.inputs:
        if v is None:
            return None
        g = v.producer
        if v.is_constant:
            tables.append(None)
            continue
        if g is None or g.op_type != "Gather" or int(g.attrs.get("axis", 0)) != 0 \
                or g.input(0) is None or not g.input(0).is_constant or g.input(1) is None:
            return None
        if ids is not None and g.input(1) is not ids:
            return None
        ids = g.input(1)
        tables.append(np.asarray(g.input(0).const))
    found = [t for t in tables if t is not None]
    if ids is None or out is None or _static(ids) is None:
        return None
    shape = found[0].shape
    if any(t.shape != shape or t.dtype.kind != "f" for t in found) \
            or out != _static(ids) + shape[1:] or found[0].size > max(int(np.prod(out)), 1):
        return None
    row_axes = len(out) - (len(shape) - 1)  # the axes the ids make
    for v, t in zip(node.inputs, tables):
        if t is None:
            c = np.asarray(v.const)
            full = (1,) * (len(out) - c.ndim) + c.shape
            if c.ndim > len(out) or any(d != 1 for d in full[:row_axes]) \
                    or any(d not in (1, s) for d, s in zip(full[row_axes:], shape[1:])):
                return None
    return ids, tables, shape


def elementwise_of_lookups(node: Node) -> bool:
    return _lookup_operands(node) is not None


def as_lookup_of_table(graph: Graph, node: Node) -> None:
    """f(Gather(T, ids), c) as Gather(f(T, c'), ids), f computed on the table now with the
    reference kernel (c' is c without the ids' axes): the bias and GELU after magika's
    byte lookup cost nothing per run."""
    ids, tables, shape = _lookup_operands(node)
    args = []
    for v, t in zip(node.inputs, tables):
        if t is not None:
            args.append(t)
            continue
        c = np.asarray(v.const)
        trailing = c.shape[max(c.ndim - (len(shape) - 1), 0):]
        args.append(c.reshape((1,) * (len(shape) - len(trailing)) + trailing))
    (table,) = ops.run_node(node, args)
    table = np.asarray(table).astype(node.outputs[0].meta.dtype.numpy, copy=False)
    if table.shape != shape:  # (the checks above make it the tables' own shape)
        return
    gather = graph.add_node("Gather", [graph.add_constant(None, table), ids], outputs=[],
                            attrs={"axis": 0}, name=graph.unique_name(f"{node.name}_rows"),
                            after=node)
    graph.hand_over_outputs(node, [gather])


__all__ = ["as_lookup_of_table", "as_row_lookup", "elementwise_of_lookups", "one_hot_product"]


# ---- OneHot as the device's Equal and Where ------------------------------------------------
_MAX_DEPTH = 1 << 16


def static_one_hot(node: Node) -> bool:
    """OneHot of static integer ids by a constant depth and constant values: a mixture of
    experts' router mask (`one_hot(top_k_index, num_experts)`), which the device has no
    kernel for and which cut its program before the experts."""
    if node.op_type != "OneHot" or len(node.outputs) != 1 or _static(node.input(0)) is None:
        return False
    depth, values = node.input(1), node.input(2)
    if not (depth is not None and depth.is_constant and values is not None
            and values.is_constant and np.asarray(values.const).size == 2
            and node.input(0).meta.dtype.value in ("int32", "int64")):
        return False
    d = np.asarray(depth.const).reshape(-1)
    return d.size == 1 and 0 < int(d[0]) <= _MAX_DEPTH


def as_equal_where(graph: Graph, node: Node) -> None:
    """Where(Equal(Unsqueeze(ids, axis), arange(depth) along axis), on, off): exact, a
    negative id counting from the end as OneHot's does, any other out-of-range id all off."""
    from .routing import value_range  # routing reads this module's forms
    ids = node.input(0)
    depth = int(np.asarray(node.input(1).const).reshape(-1)[0])
    off, on = np.asarray(node.input(2).const).reshape(-1)
    rank = len(ids.meta.shape) + 1
    axis = int(node.attrs.get("axis", -1))
    axis = axis + rank if axis < 0 else axis
    base = graph.unique_name(node.name)

    def add(op: str, ins: list, **attrs) -> Value:
        new = graph.add_node(op, ins, attrs=attrs, name=graph.unique_name(f"{base}_{op}"),
                             after=node)
        # typed now, so that the selections after it are bounded in this prepare round
        new.outputs[0].meta = ops.infer_node(new)[0]
        return new.outputs[0]

    known = value_range(ids)
    if ids.meta.dtype.value != "int64":
        ids = add("Cast", [ids], to=7)
    if known is None or known[0] < 0:  # ids from -depth count from the end
        zero = graph.add_constant(None, np.array(0, np.int64))
        wrap = graph.add_constant(None, np.array(depth, np.int64))
        ids = add("Where", [add("Less", [ids, zero]), add("Add", [ids, wrap]), ids])
    ids = add("Unsqueeze", [ids, graph.add_constant(None, np.array([axis], np.int64))])
    line = np.arange(depth, dtype=np.int64).reshape([depth] + [1] * (rank - axis - 1))
    hot = add("Equal", [ids, graph.add_constant(None, line)])
    dtype = node.input(2).const.dtype
    where = graph.add_node("Where", [hot, graph.add_constant(None, np.asarray(on, dtype)),
                                     graph.add_constant(None, np.asarray(off, dtype))],
                           outputs=0, name=graph.unique_name(f"{base}_where"), after=node)
    graph.hand_over_outputs(node, [where])
