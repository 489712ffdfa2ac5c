"""An activation as the epilogue of the Conv, ConvTranspose, MatMul or Gemm before it (or a
Relu of a BatchNormalization's), directly or through a view of its output (an elementwise
function commutes with a Reshape).

Where a plain Conv already has its activation, a piecewise-linear one after it is its
`_activation2` (`SECOND_ROW`: one more eltwise post-op; the runtime's plain Conv kernel
applies it, target.conv_activation2): openWakeWord's embedding net clamps every LeakyRelu at
-0.4 with `tf.maximum` (a Clip since canonicalize), and those 19 Max tasks were a quarter
of its run at batch 8.
"""

from __future__ import annotations

from ...ir import Graph, Node, Value
from .match import Fusion, absorb_through_view, on_device, producer_through_view

_ACTIVATIONS = {"Relu", "Clip", "Sigmoid", "Tanh", "Gelu", "LeakyRelu", "HardSwish", "Swish",
                "Elu"}
# oneDNN's deconvolution applies a post-op over its output channels padded to the vector
# width: a transcendental one on a 1-channel map cost 16 times its work (a text detector's
# final ConvTranspose -> Sigmoid: 555 -> 888 us fused; apart, the Sigmoid is a small task).
_PIECEWISE_LINEAR = {"Relu", "Clip", "LeakyRelu"}


def _epilogue(act: Node) -> tuple[Value, str, dict] | None:
    """(the activation's input, its kind for the kernel, {"": kind, "_alpha": .., "_beta": ..})
    for an activation a Conv/MatMul/Gemm post-op computes, else None."""
    if act.op_type not in _ACTIVATIONS:
        return None
    attrs: dict = {"": act.op_type}
    if act.op_type == "Clip":
        lo, hi = act.input(1), act.input(2)
        if (lo is not None and not lo.is_constant) or (hi is not None and not hi.is_constant):
            return None
        attrs["_alpha"] = float(lo.const) if lo is not None else float("-inf")
        attrs["_beta"] = float(hi.const) if hi is not None else float("inf")
    elif act.op_type == "LeakyRelu":
        attrs["_alpha"] = float(act.attrs.get("alpha", 0.01))
    elif act.op_type in ("Swish", "Elu"):
        attrs["_alpha"] = float(act.attrs.get("alpha", 1.0))
    elif act.op_type == "Gelu":
        if act.attrs.get("approximate", "none") == "tanh":
            attrs[""] = "GeluTanh"
    return act.input(0), act.op_type, attrs


def _match_activation(graph: Graph, act: Node):
    found_act = _epilogue(act)
    if found_act is None:
        return None
    x, kind, attrs = found_act
    found = producer_through_view(graph, x, {"Conv", "ConvTranspose", "Gemm", "MatMul",
                                             "BatchNormalization"})
    if found is None:
        return None
    prod, view = found
    # oneDNN's batch normalization fuses a Relu only (fuse_norm_relu): a pre-activation
    # network's BatchNormalization -> Relu before each Conv (DenseNet's after every Concat)
    if prod.op_type == "BatchNormalization" and kind != "Relu":
        return None
    if prod.op_type == "ConvTranspose" and kind not in _PIECEWISE_LINEAR:
        return None
    if not on_device(prod, act) or prod.attrs.get("_activation"):
        return None
    return prod, view, {"_activation" + k: v for k, v in attrs.items()}


def _rewrite_activation(graph: Graph, act: Node, ctx) -> str:
    prod, view, attrs = ctx
    prod.attrs.update(attrs)
    absorb_through_view(graph, prod, view, act)
    through = f" (through {view.op_type} {view.name})" if view is not None else ""
    return f"{prod.op_type}+{act.op_type}: {prod.name} absorbed {act.name}{through}"


ROW = Fusion("activation", _match_activation, _rewrite_activation,
             requires=lambda target: target.epilogues)


def _match_second(graph: Graph, act: Node):
    """A piecewise-linear activation (or a scalar Max/Min) after a plain Conv that has its
    activation already."""
    found_act = _epilogue(act)
    if found_act is None or found_act[1] not in _PIECEWISE_LINEAR:
        return None
    x, _, attrs = found_act
    found = producer_through_view(graph, x, {"Conv"})
    if found is None:
        return None
    conv, view = found
    # (an affine after the activation would have to come before this one: left alone)
    if not on_device(conv, act) or not conv.attrs.get("_activation") \
            or conv.attrs.get("_activation2") or "_activation_scale" in conv.attrs \
            or "_activation_shift" in conv.attrs:
        return None
    return conv, view, {"_activation2" + k: v for k, v in attrs.items()}


SECOND_ROW = Fusion("activation2", _match_second, _rewrite_activation,
                    requires=lambda target: target.epilogues and target.conv_activation2)
