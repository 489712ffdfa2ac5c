"""A product by per-row gathered experts is one product by all of them, then a row pick.

transformers' `batched_mm` experts (an experts implementation its MoE models take; an export
wants it, since the eager loop visits only the experts the example input hits) gather each
routed token's expert weights and multiply them one token at a time:

    A = Gather(W [E, N, K], idx [B], axis=0)     # [B, N, K]: a copy of a weight per row
    Y = MatMul(A, X [B, K, 1])                   # [B, N, 1]: B products of one column

An unseen Qwen3-MoE (8 experts, top 2, 64 tokens: B = 128) copied 19 MB of weights per
layer for it (two gathers) and ran the batched products on oneDNN's brgemm at one column
each: 3.3 of its 3.9 ms profiled. Every row's product is a row of the product by all experts,

    P = X [B, K] x W' [K, E*N]                   # one GEMM; W' the weight's constant reorder
    Y[b] = P[b, idx[b]]                          # GatherND of (b, idx[b]) from P [B, E, N]

which reads each weight once and runs E times the useful multiplications. Taken where the
rows are at least as many as the experts (B >= E: every expert's weight would be read at
least once by the gathers too) and X is one column per row. The mirrored form, each row
vector times its gathered expert (`MatMul(X [B, 1, K], Gather(W [E, K, N]))`, gpt-oss's
experts: 64 routed rows, 8 experts, 8 MB of gathered copies a layer, 250-277 us a Gather),
is the same with W' = W transposed (1, 0, 2). The GatherND checks each
expert index against E as the Gather did (a negative one counts from the end, as there).
The gather may be a GatherND of indices [B, 1] (batch_dims 0), the same pick of whole
experts: an unseen Qwen3-Next's exported experts (8 of [192, 128], B = 768 at batch 8)
gathered 75 MB a product and ran each in 2.7 + 6.8 ms, half of the model's run.
"""

from __future__ import annotations

import numpy as np

from ..dtypes import DType
from ..ir import Graph, Node
from .steps import chain

MAX_WEIGHT_ELEMENTS = 1 << 28  # the reordered copy of an expert weight, at most


def _form(node: Node) -> str | None:
    """"column" for MatMul(Gather(W [E, N, K]), X [B, K, 1]), "row" for MatMul(X [B, 1, K],
    Gather(W [E, K, N])) (gpt-oss's experts: each routed row times its expert's [K, N]);
    float32, static, B >= E, the gathered weights read by nothing else."""
    if node.op_type != "MatMul" or len(node.inputs) != 2:
        return None
    for form, at in (("column", 0), ("row", 1)):
        a, x = node.input(at), node.input(1 - at)
        gather = a.producer if a is not None else None
        if gather is None or a.users != [node] or a in node.graph.outputs:
            continue
        if gather.op_type == "Gather":
            if int(gather.attrs.get("axis", 0)) != 0:
                continue
            rank = 1  # idx [B]
        elif gather.op_type == "GatherND":  # idx [B, 1]: the same pick of whole experts
            if int(gather.attrs.get("batch_dims", 0)) != 0:
                continue
            rank = 2
        else:
            continue
        w, idx = gather.input(0), gather.input(1)
        if w is None or not w.is_constant or idx is None or idx.meta is None \
                or not idx.meta.is_static or idx.meta.rank != rank \
                or (rank == 2 and idx.meta.shape[1] != 1) \
                or idx.meta.dtype not in (DType.INT64, DType.INT32):
            continue
        c = np.asarray(w.const)
        if c.ndim != 3 or c.dtype != np.float32 or c.size > MAX_WEIGHT_ELEMENTS:
            continue
        e = c.shape[0]
        k = c.shape[2] if form == "column" else c.shape[1]
        b = idx.meta.shape[0]
        want = (b, k, 1) if form == "column" else (b, 1, k)
        if x is not None and x.meta is not None and x.meta.is_static \
                and x.meta.dtype is DType.FLOAT32 and tuple(x.meta.shape) == want and b >= e > 0:
            return form
    return None


def gathered_expert_product(node: Node) -> bool:
    return _form(node) is not None


def as_product_by_all_experts(graph: Graph, node: Node) -> None:
    form = _form(node)
    at = 0 if form == "column" else 1
    gather = node.input(at).producer
    c = np.asarray(gather.input(0).const)
    idx, x = gather.input(1), node.input(1 - at)
    if form == "column":  # W [E, N, K]: W' [K, E*N] = W transposed (2, 0, 1)
        e, n, k = c.shape
        flat = c.transpose(2, 0, 1).reshape(k, e * n)
    else:  # W [E, K, N]: W' [K, E*N] = W transposed (1, 0, 2)
        e, k, n = c.shape
        flat = c.transpose(1, 0, 2).reshape(k, e * n)
    b = idx.meta.shape[0]
    step = chain(graph, node)
    rows = step("Reshape", [x, graph.add_constant(None, np.array([b, k], np.int64))])
    weight = graph.add_constant(None, np.ascontiguousarray(flat))
    every = step("MatMul", [rows, weight])  # [B, E*N]: each row by every expert
    every = step("Reshape", [every, graph.add_constant(None, np.array([b, e, n], np.int64))])
    expert = idx if idx.meta.dtype is DType.INT64 else step("Cast", [idx], to=7)  # int64
    if gather.op_type == "Gather":  # [B] -> [B, 1] (GatherND's are [B, 1] already)
        expert = step("Unsqueeze", [expert, graph.add_constant(None, np.array([1], np.int64))])
    row = graph.add_constant(None, np.arange(b, dtype=np.int64).reshape(b, 1))
    pairs = step("Concat", [row, expert], axis=1)  # [B, 2]: (b, idx[b])
    picked = step("GatherND", [every, pairs])  # [B, N]
    shape = graph.add_constant(None, np.array([b, n, 1] if form == "column" else [b, 1, n],
                                              np.int64))
    out = graph.add_node("Reshape", [picked, shape], outputs=0, after=picked.producer,
                         name=graph.unique_name(f"{node.name}_{form}"))
    graph.hand_over_outputs(node, [out])  # the product's name and readers
    graph.remove_node(gather)
