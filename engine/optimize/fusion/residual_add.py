"""A residual Add into the Conv or MatMul that makes one side (oneDNN's sum post-op)."""

from __future__ import annotations

from ...ir import Graph, Node
from .match import Fusion, absorb, on_device, sole_producer


def _match_residual(graph: Graph, add: Node):
    if add.op_type != "Add":
        return None
    for i in (0, 1):
        conv = sole_producer(graph, add.input(i), {"Conv", "Gemm", "MatMul"})
        other = add.input(1 - i)
        if conv is None or not on_device(conv, add) or conv.attrs.get("_activation") \
                or conv.attrs.get("_sum") or other is None or other.is_constant:
            continue
        if other.meta == conv.outputs[0].meta and other.meta is not None:
            return conv, other
    return None


def _rewrite_residual(graph: Graph, add: Node, ctx) -> str:
    conv, other = ctx
    inputs = list(conv.inputs)
    if conv.op_type in ("Conv", "Gemm"):  # input 2 is their optional bias: keep its slot
        inputs += [None] * (3 - len(inputs))
    conv.attrs["_sum"] = 1
    conv.attrs["_sum_input"] = len(inputs)
    conv.set_inputs(inputs + [other])
    absorb(graph, conv, add)
    return f"{conv.op_type}+Add(residual): {conv.name} absorbed {add.name}"


ROW = Fusion("residual_add", _match_residual, _rewrite_residual,
             requires=lambda target: target.epilogues)
