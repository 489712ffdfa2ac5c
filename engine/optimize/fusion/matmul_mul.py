"""A gated MLP's product into the MatMul that makes one of its factors.

LLaMA-style decoders (SwiGLU: silu(x W_gate) * (x W_up)), Gemma (GeGLU) and T5 v1.1 multiply
two projections of the same input elementwise before the down projection. The Mul becomes
the later MatMul's multiplier: `_mul` / `_mul_input` (the runtime's `mul` attribute), one
binary post-op of oneDNN's matmul applied after its bias, residual sum and activation, so the
product's operands are not read again by a task of their own and the task goes.

Matched at the Mul: one operand is the output of a device MatMul in the same partition that
only the Mul reads, has no multiplier yet and comes after the other operand's producer in
the graph (the MatMul then reads it, so it must exist before the MatMul runs); the other
operand is computed, float32, of the output's shape (no broadcast), or, for a mixture's
routed product, one factor a row (the routing weight, [.., rows, 1]). The row runs after the
epilogue rows (bias, residual, activation): an activation written after the Mul is not the
MatMul's, since oneDNN would apply it before the multiplier.
"""

from __future__ import annotations

from ...dtypes import DType
from ...ir import Graph, Node, Value
from .match import Fusion, absorb, on_device, sole_producer


def _match_mul(graph: Graph, mul: Node) -> tuple[Node, Value] | None:
    if mul.op_type != "Mul":
        return None
    order: dict[Node, int] | None = None
    for i in (1, 0):
        mm = sole_producer(graph, mul.input(i), {"MatMul"})
        other = mul.input(1 - i)
        if mm is None or other is None or other.is_constant or other is mm.outputs[0] \
                or not on_device(mm, mul) or mm.attrs.get("_mul"):
            continue
        out = mm.outputs[0].meta
        if out is None or not out.is_static or out.dtype is not DType.FLOAT32 \
                or mul.outputs[0].meta != out or not (other.meta == out or _per_row(mm, other)):
            continue
        if other.producer is not None:
            order = order or {n: k for k, n in enumerate(graph.nodes)}
            if order[other.producer] > order[mm] and (
                    other.meta == out or _reaches(mm, other.producer, order)):
                continue  # a routing weight computed after the product: moved before it
        return mm, other
    return None


def _reaches(mm: Node, node: Node, order: dict[Node, int]) -> bool:
    """Whether `node` reads mm's output, directly or through others (only nodes after mm in
    the graph's order can)."""
    stack, seen = [node], set()
    while stack:
        n = stack.pop()
        if n is mm:
            return True
        if n in seen or order[n] < order[mm]:
            continue
        seen.add(n)
        stack.extend(v.producer for v in n.inputs if v is not None and v.producer is not None)
    return False


def _per_row(mm: Node, other: Value) -> bool:
    """One factor a row ([.., rows, 1], float32) of a routed product (expert_rows.py's tag):
    a mixture's routing weight on the down projection, multiplied by the kernel's loop over
    the rows it computed."""
    out = mm.outputs[0].meta
    return "_rows_count" in mm.attrs and other.meta is not None and other.meta.is_static \
        and other.meta.dtype is DType.FLOAT32 and out.shape[-1] > 1 \
        and tuple(other.meta.shape) == tuple(out.shape[:-1]) + (1,)


def _rewrite_mul(graph: Graph, mul: Node, ctx: tuple[Node, Value]) -> str:
    mm, other = ctx
    inputs = list(mm.inputs)
    mm.attrs["_mul"] = 1
    mm.attrs["_mul_input"] = len(inputs)
    mm.set_inputs(inputs + [other])
    absorb(graph, mm, mul)
    if other.producer is not None and \
            graph.nodes.index(other.producer) > graph.nodes.index(mm):
        graph.toposort()  # a routing weight computed after the product: now before it
    return f"MatMul+Mul(gate): {mm.name} absorbed {mul.name}"


ROW = Fusion("matmul_mul", _match_mul, _rewrite_mul, requires=lambda target: target.epilogues)
