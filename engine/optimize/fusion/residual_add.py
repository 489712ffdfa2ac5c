"""A residual Add into the Conv or MatMul that makes one side (oneDNN's sum post-op), also
where that side is a view of a Conv's output that only adds or drops unit axes: a 1-D
convolution runs as a 2-D one on [N, C, 1, L] and is viewed back to [N, C, L] before the
Add (vocoders' and TCNs' residual stacks). The other side is then viewed as the Conv's
output (an alias, in any format: both views keep the element order) and read as its sum."""

from __future__ import annotations

import numpy as np

from ...ir import Graph, Node
from .match import Fusion, absorb_through_view, on_device, producer_through_view


def _unit_view(a: tuple, b: tuple) -> bool:
    """Whether shapes a and b differ only in axes of extent 1."""
    return [d for d in a if d != 1] == [d for d in b if d != 1]


def _match_residual(graph: Graph, add: Node):
    if add.op_type != "Add":
        return None
    for i in (0, 1):
        found = producer_through_view(graph, add.input(i), {"Conv", "Gemm", "MatMul"})
        other = add.input(1 - i)
        if found is None or other is None or other.is_constant or other.meta is None:
            continue
        conv, view = found
        out = conv.outputs[0].meta
        if not on_device(conv, add) or conv.attrs.get("_activation") or conv.attrs.get("_sum") \
                or out is None:
            continue
        if view is None and other.meta == out:
            return conv, other, None
        if view is not None and conv.op_type == "Conv" and other.meta == view.outputs[0].meta \
                and other.meta.dtype == out.dtype and _unit_view(tuple(out.shape),
                                                                 tuple(other.meta.shape)):
            return conv, other, view
    return None


def _rewrite_residual(graph: Graph, add: Node, ctx) -> str:
    conv, other, view = ctx
    if view is not None:  # the other side viewed as the Conv's output, read before it
        shape = graph.add_constant(None, np.array(conv.outputs[0].meta.shape, np.int64))
        as_out = graph.add_node("Reshape", [other, shape], after=conv,
                                name=graph.unique_name(f"{add.name}_residual"))
        graph.nodes.remove(as_out)
        graph.nodes.insert(graph.nodes.index(conv), as_out)
        as_out.meta.engine, as_out.meta.partition = conv.meta.engine, conv.meta.partition
        as_out.outputs[0].meta = conv.outputs[0].meta
        # where the other side is computed after the Conv in the node order, the pass
        # manager's sort after this pass puts it (and the view) first (a sort per rewrite
        # took 22 of WaveNet's ~70 ms compile)
        other = as_out.outputs[0]
    inputs = list(conv.inputs)
    if conv.op_type in ("Conv", "Gemm"):  # input 2 is their optional bias: keep its slot
        inputs += [None] * (3 - len(inputs))
    conv.attrs["_sum"] = 1
    conv.attrs["_sum_input"] = len(inputs)
    conv.set_inputs(inputs + [other])
    absorb_through_view(graph, conv, view, add)
    through = f" (through {view.op_type} {view.name})" if view is not None else ""
    return f"{conv.op_type}+Add(residual): {conv.name} absorbed {add.name}{through}"


ROW = Fusion("residual_add", _match_residual, _rewrite_residual,
             requires=lambda target: target.epilogues)
