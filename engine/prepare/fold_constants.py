"""Constant folding: evaluate nodes whose inputs are all known, with the numpy kernels."""

from __future__ import annotations

import numpy as np

from .. import ops
from ..ir import Graph
from ..passes import PassResult

# Folding must not blow a small graph up into a huge one (e.g. ConstantOfShape).
MAX_FOLDED_ELEMENTS = 1 << 24

_SHAPE_OPS = {"Shape", "Size"}
# Inputs only whose dtype matters: CastLike(bound, x), what the opset-10 Clip/Pad upgrade
# makes of a bound attribute (its bound stayed a node, and the device takes only constants).
_TYPE_ONLY = {"CastLike": (1,)}


def fold_constants(graph: Graph) -> PassResult:
    folded = 0
    for node in list(graph.nodes):
        schema = ops.get(node.op_type, node)
        if not schema.foldable:
            continue
        if node.op_type in _SHAPE_OPS:
            src = node.input(0)
            if src is None or src.meta is None or not src.meta.is_static:
                continue
            # Only the shape matters: a zero-strided stand-in costs no memory.
            inputs = [src.const if src.is_constant else
                      np.broadcast_to(np.zeros((), np.int8), src.meta.shape)]
        elif node.op_type in _TYPE_ONLY:
            typed = _TYPE_ONLY[node.op_type]
            if any(v is None or (not v.is_constant and (i not in typed or v.meta is None))
                   for i, v in enumerate(node.inputs)):
                continue
            inputs = [v.const if v.is_constant else np.zeros((), v.meta.dtype.numpy)
                      for v in node.inputs]
        else:
            if any(v is not None and not v.is_constant for v in node.inputs):
                continue
            if not node.inputs and node.op_type not in ("Constant", "ConstantOfShape", "EyeLike"):
                continue
            inputs = [v.const if v is not None else None for v in node.inputs]
        if any(o.meta is None or not o.meta.is_static or o.meta.numel > MAX_FOLDED_ELEMENTS
               for o in node.outputs):
            continue
        results = ops.run_node(node, inputs)
        for out, arr in zip(node.outputs, results):
            arr = np.asarray(arr)
            if out.meta is not None and arr.dtype != out.meta.dtype.numpy:
                arr = arr.astype(out.meta.dtype.numpy)
            const = graph.add_constant(None, arr)
            graph.replace_all_uses(out, const)
        _drop(graph, node)
        folded += 1
    removed = graph.remove_unused_constants()
    return PassResult(graph, folded > 0, f"{folded} nodes folded, {removed} constants dropped")


def _drop(graph: Graph, node) -> None:
    if all(not o.users and o not in graph.outputs for o in node.outputs):
        graph.remove_node(node)
