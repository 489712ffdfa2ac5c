"""Validation: the graph is a DAG of known ops with well-formed attributes."""

from __future__ import annotations

from .. import ops
from ..errors import InvalidGraph
from ..ir import Graph
from ..passes import PassResult


def validate(graph: Graph) -> PassResult:
    graph.toposort()  # raises on a cycle, naming the nodes on it
    for node in graph.nodes:
        schema = ops.get(node.op_type, node)
        schema.check_arity(node)
        schema.attrs_of(node)
        _check_attr_types(node, schema)
    if not graph.outputs:
        raise InvalidGraph("the graph has no outputs", graph=graph.name)
    for v in graph.outputs:
        if v.producer is None and v not in graph.inputs and not v.is_constant:
            raise InvalidGraph(f"graph output '{v.name}' is produced by no node",
                               graph=graph.name, tensor=v.name)
    return PassResult(graph, False, f"{len(graph.nodes)} nodes")


_PY_TYPES = {
    ops.AttrKind.INT: (int,),
    ops.AttrKind.FLOAT: (float, int),
    ops.AttrKind.STRING: (str,),
    ops.AttrKind.INTS: (list, tuple),
    ops.AttrKind.FLOATS: (list, tuple),
    ops.AttrKind.STRINGS: (list, tuple),
}


def _check_attr_types(node, schema) -> None:
    for key, value in node.attrs.items():
        spec = schema.attrs.get(key)
        if spec is None:
            continue
        want = _PY_TYPES.get(spec.kind)
        if want is None:
            continue
        ok = isinstance(value, want)
        if spec.kind is ops.AttrKind.INT and isinstance(value, bool):
            ok = False
        if ok and spec.kind is ops.AttrKind.INTS:
            ok = all(isinstance(x, int) for x in value)
        if ok and spec.kind is ops.AttrKind.FLOATS:
            ok = all(isinstance(x, (int, float)) for x in value)
        if not ok:
            raise InvalidGraph(f"node '{node.name}' ({node.op_type}): attribute '{key}' must be "
                               f"{spec.kind.value}, got {type(value).__name__} {value!r:.60}",
                               node=node.name)
        if spec.choices is not None and value not in spec.choices:
            raise InvalidGraph(f"node '{node.name}' ({node.op_type}): attribute '{key}' is "
                               f"{value!r:.60}, expected one of {list(spec.choices)}",
                               node=node.name)
