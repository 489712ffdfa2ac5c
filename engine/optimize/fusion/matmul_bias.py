"""MatMul + bias Add: the bias becomes the MatMul's third input (MatMulQWeight's fifth)."""

from __future__ import annotations

import numpy as np

from ...ir import Graph, Node
from .match import Fusion, absorb, on_device, sole_producer


def _bias_of(graph: Graph, add: Node, op: str, taken) -> tuple[Node, object] | None:
    """(the `op` node, the constant float32 [N] bias: its value, or an array for one written
    [1, .., 1, N]) when `add` adds one to the sole output of an `op` node that `taken(node)`
    says has no epilogue yet."""
    if add.op_type != "Add":
        return None
    for i in (0, 1):
        mm = sole_producer(graph, add.input(i), {op})
        bias = add.input(1 - i)
        if mm is None or not on_device(mm, add) or taken(mm):
            continue
        out = mm.outputs[0].meta
        if (bias is None or not bias.is_constant or out is None or not out.shape
                or bias.const.dtype != np.float32):
            continue
        const = np.asarray(bias.const)
        if const.ndim == 1 and const.shape[0] == out.shape[-1]:
            return mm, bias
        # [1, .., 1, N] (TensorFlow and JAX exports broadcast the bias explicitly): its
        # [N] values, if it does not widen the output
        if 1 < const.ndim <= len(out.shape) and const.shape[-1] == out.shape[-1] \
                and all(d == 1 for d in const.shape[:-1]):
            return mm, const.reshape(-1)
    return None


def _bias_input(graph: Graph, bias):
    """The [N] bias as a value of the graph (a new constant for a reshaped one)."""
    return graph.add_constant(None, bias) if isinstance(bias, np.ndarray) else bias


def _match_bias(graph: Graph, add: Node):
    return _bias_of(graph, add, "MatMul", lambda mm: mm.attrs.get("_has_bias") or
                    mm.attrs.get("_activation") or mm.attrs.get("_sum"))


def _rewrite_bias(graph: Graph, add: Node, ctx) -> str:
    mm, bias = ctx
    mm.set_inputs([mm.input(0), mm.input(1), _bias_input(graph, bias)])
    mm.attrs["_has_bias"] = 1
    absorb(graph, mm, add)
    return f"MatMul+bias: {mm.name} absorbed {add.name}"


ROW = Fusion("matmul_bias", _match_bias, _rewrite_bias,
             requires=lambda target: target.epilogues)


def _match_qweight_bias(graph: Graph, add: Node):
    """MatMulQWeight (prepare/weight_only.py) + a constant float32 [N] bias."""
    return _bias_of(graph, add, "MatMulQWeight", lambda mm: len(mm.inputs) > 4)


def _rewrite_qweight_bias(graph: Graph, add: Node, ctx) -> str:
    mm, bias = ctx
    zero = mm.input(3) if len(mm.inputs) > 3 else None
    mm.set_inputs([mm.input(0), mm.input(1), mm.input(2), zero, _bias_input(graph, bias)])
    absorb(graph, mm, add)
    return f"MatMulQWeight+bias: {mm.name} absorbed {add.name}"


QWEIGHT_ROW = Fusion("qweight_bias", _match_qweight_bias, _rewrite_qweight_bias,
                     requires=lambda target: target.epilogues)
