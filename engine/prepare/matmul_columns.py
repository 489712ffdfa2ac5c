"""A slice of a product's columns is the product of the weight's columns.

A gated MLP exported with one fused gate-and-up weight (transformers' MoE experts:
`linear(x, gate_up_proj).chunk(2, dim=-1)`) multiplies by [K, 2I] and slices the product
into halves: two strided copies of the output a run, and no MatMul for the gated-product
fusion to find. When every reader of a MatMul by a constant 2-D weight is a Slice of its
last axis with constant bounds and step 1, each Slice becomes the MatMul by that slice of the
weight: the same products (each column is the same dot product), no copy, and two
projections of one input that fusion/matmul_mul.py folds together.
"""

from __future__ import annotations

import numpy as np

from ..ir import Graph, Node
from ..ops.value_prop import known_value


def _bounds(node: Node) -> tuple[int, int] | None:
    """(start, end) of a Slice of the last axis by constants, step 1."""
    data = node.input(0)
    if node.op_type != "Slice" or data is None or data.meta is None or not data.meta.is_static:
        return None
    rank = len(data.meta.shape)
    vals = [known_value(node.input(i)) if node.input(i) is not None else None
            for i in range(1, 5)]
    if any(v is None for v in vals[:3]) or any(np.asarray(v).dtype == object
                                               for v in vals if v is not None):
        return None
    starts, ends, axes = (np.asarray(v).reshape(-1) for v in vals[:3])
    steps = np.asarray(vals[3]).reshape(-1) if vals[3] is not None else np.ones(1, np.int64)
    if not (starts.size == ends.size == axes.size == steps.size == 1) or int(steps[0]) != 1:
        return None
    if int(axes[0]) % rank != rank - 1:
        return None
    return int(starts[0]), int(ends[0])


def sliced_product(node: Node) -> bool:
    """A Slice of a MatMul by a constant 2-D weight that only such Slices read."""
    if _bounds(node) is None:
        return False
    mm = node.input(0).producer
    if mm is None or mm.op_type != "MatMul" or mm.input(1) is None \
            or not mm.input(1).is_constant or np.asarray(mm.input(1).const).ndim != 2:
        return False
    out = mm.outputs[0]
    return out not in mm.graph.outputs and all(_bounds(u) is not None for u in out.users)


def as_product_of_columns(graph: Graph, node: Node) -> None:
    mm = node.input(0).producer
    start, end = _bounds(node)
    weight = np.ascontiguousarray(np.asarray(mm.input(1).const)[:, start:end])
    # the routed-rows tags (expert_rows.py) hold for every column
    tags = {k: v for k, v in mm.attrs.items() if k.startswith("_rows")}
    new = graph.add_node("MatMul", [mm.input(0), graph.add_constant(None, weight)], attrs=tags,
                         outputs=0, name=graph.unique_name(f"{mm.name}_cols"), after=node)
    graph.hand_over_outputs(node, [new])
