"""An activation as the epilogue of the Conv, MatMul or Gemm before it."""

from __future__ import annotations

from ...ir import Graph, Node
from .match import Fusion, absorb, on_device, sole_producer

_ACTIVATIONS = {"Relu", "Clip", "Sigmoid", "Tanh", "Gelu", "LeakyRelu", "HardSwish"}


def _match_activation(graph: Graph, act: Node):
    if act.op_type not in _ACTIVATIONS:
        return None
    prod = sole_producer(graph, act.input(0), {"Conv", "Gemm", "MatMul"})
    if prod is None or not on_device(prod, act) or prod.attrs.get("_activation"):
        return None
    attrs: dict = {"_activation": act.op_type}
    if act.op_type == "Clip":
        lo, hi = act.input(1), act.input(2)
        if (lo is not None and not lo.is_constant) or (hi is not None and not hi.is_constant):
            return None
        attrs["_activation_alpha"] = float(lo.const) if lo is not None else float("-inf")
        attrs["_activation_beta"] = float(hi.const) if hi is not None else float("inf")
    elif act.op_type == "LeakyRelu":
        attrs["_activation_alpha"] = float(act.attrs.get("alpha", 0.01))
    elif act.op_type == "Gelu":
        if act.attrs.get("approximate", "none") == "tanh":
            attrs["_activation"] = "GeluTanh"
    return prod, attrs


def _rewrite_activation(graph: Graph, act: Node, ctx) -> str:
    prod, attrs = ctx
    prod.attrs.update(attrs)
    absorb(graph, prod, act)
    return f"{prod.op_type}+{act.op_type}: {prod.name} absorbed {act.name}"


ROW = Fusion("activation", _match_activation, _rewrite_activation,
             requires=lambda target: target.epilogues)
