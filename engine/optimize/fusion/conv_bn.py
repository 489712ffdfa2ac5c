"""Conv or ConvTranspose + BatchNormalization: the normalization folded into the weights and
bias (a text detector's upsampling head: ConvTranspose -> BatchNormalization -> Relu, whose
normalization on the plain [1, 24, 160, 160] map took oneDNN's generic 0.59 ms).

Also through a view that keeps the batch and channel axes: a 1-D convolution runs as a 2-D one
of [N, C, 1, T] reshaped back to [N, C, T] (canonicalize), and a BatchNorm1d after it (a
Conformer's depthwise Conv1d -> BatchNorm -> activation) normalizes that view's axis 1, the
Conv's own output channels. Folded, the activation after it joins the Conv as a post-op too
(before: a BatchNormalization task and an activation task, each with a layout conversion
around it, per conv module)."""

from __future__ import annotations

import numpy as np

from ...codegen.memory import aligned_empty
from ...ir import Graph, Node
from .match import Fusion, absorb_through_view, on_device, producer_through_view


def _keeps_channels(conv: Node, view: Node | None) -> bool:
    """Whether `view` (None: no view) of conv's output keeps its batch and channel axes, so
    that axis 1 of what the normalization reads is the Conv's output channel."""
    if view is None:
        return True
    out, seen = conv.outputs[0].meta, view.outputs[0].meta
    if out is None or seen is None or not out.is_static or not seen.is_static:
        return False
    return len(seen.shape) >= 2 and tuple(seen.shape[:2]) == tuple(out.shape[:2])


def _match_conv_bn(graph: Graph, bn: Node):
    if bn.op_type != "BatchNormalization" or len(bn.outputs) != 1:
        return None
    found = producer_through_view(graph, bn.input(0), {"Conv", "ConvTranspose"})
    if found is None:
        return None
    conv, view = found
    if not on_device(conv, bn) or conv.attrs.get("_activation") or not _keeps_channels(conv, view):
        return None
    params = [bn.input(i) for i in range(1, 5)]
    if not all(p is not None and p.is_constant for p in params):
        return None
    w, b = conv.input(1), conv.input(2)
    if w is None or not w.is_constant or (b is not None and not b.is_constant):
        return None
    return conv, view


def scale_output_channels(conv: Node, w: np.ndarray, factor: np.ndarray) -> np.ndarray:
    """The weights of `conv` (a Conv: [M, C/g, k...]; a ConvTranspose: [C, M/g, k...]) with
    output channel m's scaled by factor[m]: the per-channel factor in float64, the product
    in float32 for float32 weights (one rounding, like the unfused Conv then the scaling; a
    float64 pass over every weight took a fifth of resnet18's compile). Written into an
    aligned array the runtime takes in place (one copy of the weights fewer at load)."""
    wide = np.float32 if w.dtype == np.float32 else np.float64
    factor = np.asarray(factor).astype(wide)
    new_w = aligned_empty(w.shape, w.dtype)
    if conv.op_type == "ConvTranspose":
        g = int(conv.attrs.get("group", 1))
        grouped = w.reshape((g, w.shape[0] // g) + w.shape[1:])
        f = factor.reshape((g, 1, w.shape[1]) + (1,) * (w.ndim - 2))
        np.multiply(grouped.astype(wide, copy=False), f, out=new_w.reshape(grouped.shape),
                    casting="same_kind")
    else:
        np.multiply(w.astype(wide, copy=False), factor.reshape((-1,) + (1,) * (w.ndim - 1)),
                    out=new_w, casting="same_kind")
    return new_w


def _rewrite_conv_bn(graph: Graph, bn: Node, ctx) -> str:
    conv, view = ctx
    scale, bias, mean, var = (bn.input(i).const.astype(np.float64) for i in range(1, 5))
    eps = float(bn.attrs.get("epsilon", 1e-5))
    w = conv.input(1).const
    factor = scale / np.sqrt(var + eps)
    new_w = scale_output_channels(conv, w, factor)
    old_b = conv.input(2).const.astype(np.float64) if conv.input(2) is not None else 0.0
    new_b = ((old_b - mean) * factor + bias).astype(w.dtype)
    inputs = [conv.input(0), graph.add_constant(None, new_w), graph.add_constant(None, new_b)]
    conv.set_inputs(inputs)
    absorb_through_view(graph, conv, view, bn)
    through = f" (through {view.op_type} {view.name})" if view is not None else ""
    return f"{conv.op_type}+BatchNormalization: {conv.name} absorbed {bn.name}{through}"


ROW = Fusion("conv_bn", _match_conv_bn, _rewrite_conv_bn)
