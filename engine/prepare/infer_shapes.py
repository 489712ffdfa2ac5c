"""Shape and dtype inference: an interpreter over the graph using each op's infer."""

from __future__ import annotations

from .. import ops
from ..errors import GraphEngineError, ShapeError
from ..ir import Graph
from ..passes import PassResult


def infer_shapes(graph: Graph) -> PassResult:
    changed = 0
    for node in graph.nodes:
        for v in node.inputs:
            if v is not None and v.meta is None:
                raise ShapeError(f"node '{node.name}' ({node.op_type}): input '{v.name}' has "
                                 f"no known type", node=node.name, tensor=v.name)
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
    return PassResult(graph, changed > 0, f"{changed} values updated")
