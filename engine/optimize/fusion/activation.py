"""An activation as the epilogue of the Conv, ConvTranspose, MatMul or Gemm before it (or a
Relu of a BatchNormalization's), directly or through a view of its output (an elementwise
function commutes with a Reshape)."""

from __future__ import annotations

from ...ir import Graph, Node
from .match import Fusion, absorb_through_view, on_device, producer_through_view

_ACTIVATIONS = {"Relu", "Clip", "Sigmoid", "Tanh", "Gelu", "LeakyRelu", "HardSwish", "Swish"}
# oneDNN's deconvolution applies a post-op over its output channels padded to the vector
# width: a transcendental one on a 1-channel map cost 16 times its work (a text detector's
# final ConvTranspose -> Sigmoid: 555 -> 888 us fused; apart, the Sigmoid is a small task).
_PIECEWISE_LINEAR = {"Relu", "Clip", "LeakyRelu"}


def _match_activation(graph: Graph, act: Node):
    if act.op_type not in _ACTIVATIONS:
        return None
    found = producer_through_view(graph, act.input(0), {"Conv", "ConvTranspose", "Gemm",
                                                        "MatMul", "BatchNormalization"})
    if found is None:
        return None
    prod, view = found
    # oneDNN's batch normalization fuses a Relu only (fuse_norm_relu): a pre-activation
    # network's BatchNormalization -> Relu before each Conv (DenseNet's after every Concat)
    if prod.op_type == "BatchNormalization" and act.op_type != "Relu":
        return None
    if prod.op_type == "ConvTranspose" and act.op_type not in _PIECEWISE_LINEAR:
        return None
    if not on_device(prod, act) or prod.attrs.get("_activation"):
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
    elif act.op_type == "Swish":
        attrs["_activation_alpha"] = float(act.attrs.get("alpha", 1.0))
    elif act.op_type == "Gelu":
        if act.attrs.get("approximate", "none") == "tanh":
            attrs["_activation"] = "GeluTanh"
    return prod, view, attrs


def _rewrite_activation(graph: Graph, act: Node, ctx) -> str:
    prod, view, attrs = ctx
    prod.attrs.update(attrs)
    absorb_through_view(graph, prod, view, act)
    through = f" (through {view.op_type} {view.name})" if view is not None else ""
    return f"{prod.op_type}+{act.op_type}: {prod.name} absorbed {act.name}{through}"


ROW = Fusion("activation", _match_activation, _rewrite_activation,
             requires=lambda target: target.epilogues)
