"""MatMul + bias Add: the bias becomes the MatMul's third input."""

from __future__ import annotations

import numpy as np

from ...ir import Graph, Node
from .match import Fusion, absorb, on_device, sole_producer


def _match_bias(graph: Graph, add: Node):
    if add.op_type != "Add":
        return None
    for i in (0, 1):
        mm = sole_producer(graph, add.input(i), {"MatMul"})
        bias = add.input(1 - i)
        if (mm is None or not on_device(mm, add) or mm.attrs.get("_has_bias")
                or mm.attrs.get("_activation") or mm.attrs.get("_sum")):
            continue
        out = mm.outputs[0].meta
        if (bias is not None and bias.is_constant and bias.const.ndim == 1 and out is not None
                and out.shape and bias.const.shape[0] == out.shape[-1]
                and bias.const.dtype == np.float32):
            return mm, bias
    return None


def _rewrite_bias(graph: Graph, add: Node, ctx) -> str:
    mm, bias = ctx
    mm.set_inputs([mm.input(0), mm.input(1), bias])
    mm.attrs["_has_bias"] = 1
    absorb(graph, mm, add)
    return f"MatMul+bias: {mm.name} absorbed {add.name}"


ROW = Fusion("matmul_bias", _match_bias, _rewrite_bias,
             requires=lambda target: target.epilogues)
