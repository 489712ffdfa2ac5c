"""Shape and dtype inference: an interpreter over the graph using each op's infer."""

from __future__ import annotations

import weakref

import numpy as np

from .. import ops
from ..errors import GraphEngineError, ShapeError
from ..ir import Graph, Node
from ..ops import registry, value_prop
from ..passes import PassResult


def infer_shapes(graph: Graph) -> PassResult:
    """Every node's output types from its inputs', in order.

    A repeating stage runs this again after the passes that changed the graph (folding,
    merging), which leave most nodes as they were. A node whose inference read only its
    own inputs (their types and constant arrays, and plain attributes; not a value derived
    further up, see value_prop.looked_upstream) is not inferred again while those and its
    outputs' types are what they were (NodeMeta.inferred): inference is a function of
    exactly them.
    """
    with value_prop.sweep(graph):
        changed = _sweep(graph)
    return PassResult(graph, changed > 0, f"{changed} values updated")


def _sweep(graph: Graph) -> int:
    changed = 0
    for node in graph.nodes:
        for v in node.inputs:
            if v is not None and v.meta is None:
                raise ShapeError(f"node '{node.name}' ({node.op_type}): input '{v.name}' has "
                                 f"no known type", node=node.name, tensor=v.name)
        key = _key(node)
        seen = node.meta.inferred
        if key is not None and seen is not None and _same(seen[0], key) and \
                all(o.meta is m for o, m in zip(node.outputs, seen[1])):
            continue
        upstream = value_prop.looked_upstream
        try:
            metas = ops.infer_node(node)
        except GraphEngineError:
            raise
        except Exception as exc:
            raise ops.shape_error(node, f"shape inference failed: {exc}") from exc
        for out, meta in zip(node.outputs, metas):
            if out.meta != meta:
                out.meta = meta
                changed += 1
        node.meta.inferred = None if key is None or value_prop.looked_upstream != upstream \
            else (key, tuple(o.meta for o in node.outputs))
    return changed


SMALL_CONSTANT = 64  # elements: a constant input this small is part of the key by value


def _key(node: Node) -> tuple | None:
    """What the node's inference reads, or None when that cannot be kept: attributes
    holding more than plain numbers and strings (a body graph, an array), a constant that
    is not an array. Constants by weak reference: an array is never changed, and one
    dropped is not kept alive by this. (Asked of every node in every sweep, ~2 us a node
    once the attributes are taken as tuples rather than a sorted repr.)"""
    attrs = []
    for name, value in node.attrs.items():
        kind = type(value)
        if kind is list or kind is tuple:
            for x in value:
                if type(x) not in _PLAIN:
                    return None
            value = tuple(value)  # a copy: a list changed in place later is told apart
        elif kind not in _PLAIN:
            return None
        attrs.append((name, value))
    consts = []
    for v in node._inputs:
        c = None if v is None else v.const
        if c is None:
            consts.append(None)
        elif type(c) is np.ndarray and c.size <= SMALL_CONSTANT and c.dtype.kind != "O":
            # a shape, axes or a scalar: by value (a round's folding and deduplication make
            # new arrays of the same few numbers: 240 of more_olmoe's 1,159 nodes were
            # inferred again only for that)
            consts.append((c.dtype.str, c.shape, c.tobytes()))
        else:
            try:
                consts.append(weakref.ref(c))
            except TypeError:
                return None
    return (registry.get(node.op_type, node), len(node.outputs), tuple(attrs),
            tuple(None if v is None else v.meta for v in node._inputs), tuple(consts))


# Attribute values a key holds as they are, told by type (ir.plain_attrs's kinds; a numpy
# scalar, a float subclass, leaves the node unkeyed). Keys compare by ==, so 1, 1.0 and
# True are one value there, as they were not in the repr: attributes are schema-checked
# (validate) and no pass changes one's type keeping its value.
_PLAIN = frozenset({str, int, float, bool, type(None)})


def _same(a: tuple, b: tuple) -> bool:
    """Keys equal: the schema and each large constant array by identity, the rest by
    value."""
    return a[0] is b[0] and a[1] == b[1] and a[2] == b[2] and a[3] == b[3] and \
        len(a[4]) == len(b[4]) and all(_same_constant(x, y) for x, y in zip(a[4], b[4]))


def _same_constant(x, y) -> bool:
    if x is None or y is None:
        return x is None and y is None
    if isinstance(x, tuple) or isinstance(y, tuple):  # small ones, by value
        return x == y
    return x() is not None and x() is y()
