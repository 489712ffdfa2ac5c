"""Conv + per-channel constant Add, Sub or Mul: the constant joins the Conv's bias (Add,
Sub) or scales its output channels' weights and bias (Mul).

Exporters that write the bias as its own Add (TensorFlow's BiasAdd through tf2onnx when a
Squeeze stood between, a 1-D convolution's bias on its 3-D view) or a batch norm as a Mul
and an Add (Keras 3) leave passes over the output that the Conv does for free."""

from __future__ import annotations

import numpy as np

from ...ir import Graph, Node
from ..layout_views import lifted_constant, unit_lift
from .conv_bn import scale_output_channels
from .match import Fusion, absorb_through_view, on_device, producer_through_view

_CONVS = {"Conv", "ConvTranspose"}


def _channel_vector(a: np.ndarray, out_shape: tuple, channels: int) -> np.ndarray | None:
    """a's values as a [channels] vector when a is float32, varies (if at all) only along
    axis 1 of out_shape and broadcasts to it without widening it."""
    if a.dtype != np.float32:
        return None
    rank = len(out_shape)
    if a.ndim > rank:
        return None
    full = (1,) * (rank - a.ndim) + a.shape
    if any(d != 1 for i, d in enumerate(full) if i != 1) or full[1] not in (1, channels):
        return None
    return np.broadcast_to(a.reshape(-1), (channels,))


def _match_conv_bias(graph: Graph, add: Node):
    if add.op_type not in ("Add", "Sub", "Mul") or len(add.outputs) != 1:
        return None
    for i in ((0,) if add.op_type == "Sub" else (0, 1)):  # c - conv is not a bias
        found = producer_through_view(graph, add.input(i), _CONVS)
        if found is None:
            continue
        conv, view = found
        if not on_device(conv, add) or conv.attrs.get("_activation") or conv.attrs.get("_sum"):
            continue
        w, b = conv.input(1), conv.input(2)
        out = conv.outputs[0].meta
        seen = add.input(i).meta
        if w is None or not w.is_constant or w.const.dtype != np.float32 \
                or (b is not None and not b.is_constant) or out is None or not out.is_static \
                or len(out.shape) < 3 or seen is None or not seen.is_static \
                or add.outputs[0].meta is None \
                or tuple(add.outputs[0].meta.shape) != tuple(seen.shape):
            continue
        c = add.input(1 - i)
        if c is None or not c.is_constant:
            continue
        const = np.asarray(c.const)
        if view is not None:  # the bias on a view that only drops or adds unit axes
            lift = unit_lift(tuple(seen.shape), tuple(out.shape))
            if lift is not None:
                const = lifted_constant(const, tuple(seen.shape), lift, len(out.shape))
            if lift is None or const is None:
                continue
        vec = _channel_vector(const, tuple(out.shape), int(out.shape[1]))
        if vec is not None:
            return conv, view, vec
    return None


def _rewrite_conv_bias(graph: Graph, add: Node, ctx) -> str:
    conv, view, vec = ctx
    old = conv.input(2)
    w = conv.input(1)
    if add.op_type == "Mul":  # y * s: each output channel's weights and bias times s
        w = graph.add_constant(None, scale_output_channels(conv, w.const, vec))
        bias = None if old is None else (old.const * vec).astype(np.float32)
        kind = "scale"
    else:
        vec = -vec if add.op_type == "Sub" else vec
        bias = vec.astype(np.float32) if old is None else (old.const + vec).astype(np.float32)
        kind = "bias"
    conv.set_inputs([conv.input(0), w] + ([graph.add_constant(None, bias)] if bias is not None
                                          else []))
    absorb_through_view(graph, conv, view, add)
    return f"{conv.op_type}+{kind}: {conv.name} absorbed {add.name}"


ROW = Fusion("conv_bias", _match_conv_bias, _rewrite_conv_bias)
