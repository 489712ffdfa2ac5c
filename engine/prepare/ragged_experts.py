"""Rows split by computed sizes, one constant linear map per part, joined again: one
SegmentMatMul (each segment of rows through its own matrix, the sizes read at each run).

JetMoE's and Granite-MoE's `ParallelExperts` sort the routed rows by expert, split them by
each expert's count (`inputs.split(expert_size)`) and run expert i's Linear on part i:

    parts = Split(X [R, K], sizes [E], axis=0)      # sizes computed from the routing
    Y = Concat(Gemm(parts[0], W0), ..., Gemm(parts[E-1], W{E-1}), axis=0)

The parts' shapes depend on the data, so every node from the Split to the Concat (and
whatever read them) had no static shape and ran on the host, each layer's experts a numpy
detour (an unseen JetMoE: ten device programs, 2.9 of its 3.4 ms outside them). The
rewrite makes the whole a SegmentMatMul(X, sizes, W [E, K, N], bias [E, N]) of static shape
[R, N] (ops/segment_matmul.py): the device multiplies each segment's rows by its expert in
blocks, the routed work (a product by every expert and a pick of each row's, tried first,
ran E times the multiplications: JetMoE 2.0 ms against OpenVINO's 1.0). Sizes that are
negative or do not add up to R fail the run naming them, as the Split refused them.
"""

from __future__ import annotations

import numpy as np

from ..dtypes import DType
from ..ir import Graph, Node, Value
from .steps import chain, replace_outputs

MAX_PARTS = 64
MAX_WEIGHT_ELEMENTS = 1 << 26  # all the maps' weights together


def _map_of(y: Value) -> tuple[Node, Value, np.ndarray, np.ndarray | None] | None:
    """(node, data input, weight as [K, N], bias [N] or None) of a Gemm / MatMul by a
    constant weight producing y."""
    node = y.producer
    if node is None or len(node.outputs) != 1:
        return None
    if node.op_type == "MatMul" and len(node.inputs) == 2 and node.input(1) is not None \
            and node.input(1).is_constant:
        w = np.asarray(node.input(1).const)
        return (node, node.inputs[0], w, None) if w.ndim == 2 else None
    if node.op_type != "Gemm" or node.input(1) is None or not node.input(1).is_constant:
        return None
    a = node.attrs
    if int(a.get("transA", 0)) or float(a.get("alpha", 1.0)) != 1.0:
        return None
    w = np.asarray(node.input(1).const)
    if w.ndim != 2:
        return None
    w = w.T if int(a.get("transB", 0)) else w
    c = node.input(2) if len(node.inputs) > 2 else None
    if c is None:
        return node, node.inputs[0], w, None
    if not c.is_constant or float(a.get("beta", 1.0)) != 1.0:
        return None
    b = np.asarray(c.const)
    if b.size not in (1, w.shape[1]) or (b.ndim == 2 and b.shape[0] != 1) or b.ndim > 2:
        return None
    return node, node.inputs[0], w, np.broadcast_to(b.reshape(-1), (w.shape[1],))


def _parts(node: Node):
    """The Split and the maps of a Concat of ragged parts, or None."""
    if node.op_type != "Concat" or int(node.attrs.get("axis", 0)) != 0 or len(node.outputs) != 1 \
            or not 2 <= len(node.inputs) <= MAX_PARTS:
        return None
    maps = [_map_of(v) if v is not None else None for v in node.inputs]
    if any(m is None for m in maps):
        return None
    split = maps[0][1].producer
    if split is None or split.op_type != "Split" or int(split.attrs.get("axis", 0)) != 0 \
            or len(split.outputs) != len(maps):
        return None
    x, sizes = split.input(0), split.input(1) if len(split.inputs) > 1 else None
    if x is None or sizes is None or sizes.is_constant or x.meta is None or not x.meta.is_static \
            or x.meta.rank != 2 or x.meta.dtype is not DType.FLOAT32 or sizes.meta is None \
            or sizes.meta.dtype is not DType.INT64 or tuple(sizes.meta.shape or ()) != (len(maps),):
        return None
    k = x.meta.shape[1]
    shapes = {m[2].shape for m in maps}
    if len(shapes) != 1 or next(iter(shapes))[0] != k \
            or any(m[2].dtype != np.float32 for m in maps):
        return None
    for i, (gemm, data, _, _) in enumerate(maps):
        if data is not split.outputs[i] or data.users != [gemm] or gemm.outputs[0].users != [node] \
                or gemm.outputs[0] in node.graph.outputs:
            return None
    if len(maps) * maps[0][2].size > MAX_WEIGHT_ELEMENTS:
        return None
    return split, maps


def ragged_expert_products(node: Node) -> bool:
    return _parts(node) is not None


def as_segment_product(graph: Graph, node: Node) -> None:
    split, maps = _parts(node)
    x, sizes = split.inputs[0], split.inputs[1]
    n = maps[0][2].shape[1]

    def const(v):
        return graph.add_constant(None, np.ascontiguousarray(v))
    ins = [x, sizes, const(np.stack([m[2] for m in maps]).astype(np.float32))]
    if any(m[3] is not None for m in maps):
        ins.append(const(np.stack([m[3] if m[3] is not None else np.zeros(n, np.float32)
                                   for m in maps]).astype(np.float32)))
    out = chain(graph, node)("SegmentMatMul", ins)
    replace_outputs(graph, node, {0: out})
    for gemm, _, _, _ in maps:
        graph.remove_node(gemm)
    graph.remove_node(split)
