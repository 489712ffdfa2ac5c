"""Fusion row conv_dw: a 1x1 Conv followed by a 3x3 depthwise Conv becomes one ConvDw node.

The pair is the expand -> depthwise half of an inverted-residual block (MobileNetV2,
EfficientNet, ...). The runtime runs it as one oneDNN convolution with a depthwise post-op,
so the expanded activation (the widest tensor of the block) never goes to memory.

The 1x1 node becomes a graphengine.ConvDw (ops/conv_fused.py) in place and absorbs the
depthwise node: inputs X, W, B (None when absent), the depthwise weights [M,1,3,3] and bias
[M] (zeros when absent); attribute `dw_stride` (1 or 2); the 1x1's epilogue activation as
`activation[_alpha|_beta]` (applied before the depthwise stage), the depthwise node's as
`dw_activation[_alpha|_beta]`. The row runs after the activation row, so both convolutions
carry their activations already.

It fires only for what the runtime's post-op computes exactly: a 1x1 Conv with stride 1,
no padding, group 1, no residual; then a Conv of group C = channels with weights
[C,1,3,3], pads 1 on every side, dilation 1 and equal strides of 1 or 2, no residual; both
float32 with constant weights and biases, static 4-D shapes, on the device in one
partition, and the intermediate read by the depthwise node only; and where the target has
the ConvDw kernel.
"""

from __future__ import annotations

import numpy as np

from ... import ops
from ...dtypes import DType
from ...ir import Graph, Node
from ...ops.conv_fused import CONV_DW
from .match import Fusion, absorb, become, on_device, sole_producer

_EPILOGUE = ("_activation", "_activation_alpha", "_activation_beta")


def stage_activation(node: Node, to: str) -> dict:
    """A Conv's epilogue activation (activation row) as the attributes of the fused node's
    stage `to` ("activation", "dw_activation", "pw_activation")."""
    return {to + key[len("_activation"):]: node.attrs[key] for key in _EPILOGUE
            if key in node.attrs}


def _attrs(node: Node) -> dict:
    a = ops.get("Conv", node).attrs_of(node)
    return {
        "auto_pad": a.get("auto_pad", "NOTSET"),
        "group": int(a.get("group", 1)),
        "strides": [int(v) for v in (a.get("strides") or [1, 1])],
        "pads": [int(v) for v in (a.get("pads") or [0, 0, 0, 0])],
        "dilations": [int(v) for v in (a.get("dilations") or [1, 1])],
    }


def _plain_conv(node: Node) -> bool:
    """Float32 2-D Conv with constant weights (and bias), no residual."""
    x, w, b = node.input(0), node.input(1), node.input(2)
    if node.op_type != "Conv" or len(node.inputs) > 3 or node.attrs.get("_sum") \
            or len(node.outputs) != 1:
        return False
    out = node.outputs[0].meta
    return (x is not None and x.meta is not None and x.meta.is_static and x.meta.rank == 4
            and x.meta.dtype is DType.FLOAT32 and w is not None and w.is_constant
            and w.const.ndim == 4 and w.const.dtype == np.float32
            and (b is None or (b.is_constant and b.const.dtype == np.float32))
            and out is not None and out.is_static)


def _is_pointwise(node: Node) -> bool:
    if not _plain_conv(node):
        return False
    a = _attrs(node)
    w = node.input(1).const
    return (w.shape[2:] == (1, 1) and a["group"] == 1 and a["strides"] == [1, 1]
            and a["pads"] == [0, 0, 0, 0] and a["dilations"] == [1, 1]
            and a["auto_pad"] in ("NOTSET", "VALID"))


def _depthwise_stride(node: Node) -> int | None:
    """The stride of a fusable 3x3 depthwise Conv, or None."""
    if not _plain_conv(node):
        return None
    a = _attrs(node)
    c = node.input(0).meta.shape[1]
    w = node.input(1).const
    s = a["strides"]
    if (a["group"] != c or w.shape != (c, 1, 3, 3) or a["pads"] != [1, 1, 1, 1]
            or a["dilations"] != [1, 1] or a["auto_pad"] != "NOTSET" or s[0] != s[1]
            or s[0] not in (1, 2)):
        return None
    return s[0]


def match_conv_dw(graph: Graph, dw: Node):
    stride = _depthwise_stride(dw)
    if stride is None:
        return None
    pw = sole_producer(graph, dw.input(0), {"Conv"})
    if pw is None or not on_device(pw, dw) or not _is_pointwise(pw):
        return None
    if pw.input(1).const.shape[0] != dw.input(1).const.shape[0]:
        return None
    return pw, stride


def rewrite_conv_dw(graph: Graph, dw: Node, ctx) -> str:
    pw, stride = ctx
    channels = dw.input(1).const.shape[0]
    dw_b = dw.input(2)
    if dw_b is None:
        dw_b = graph.add_constant(None, np.zeros(channels, np.float32))
    attrs = {"dw_stride": stride, **stage_activation(pw, "activation"),
             **stage_activation(dw, "dw_activation")}
    become(pw, CONV_DW, [pw.input(0), pw.input(1), pw.input(2), dw.input(1), dw_b], attrs)
    absorb(graph, pw, dw)
    return f"ConvDw: {pw.name} absorbed {dw.name}"


__all__ = ["match_conv_dw", "rewrite_conv_dw", "stage_activation"]


ROW = Fusion("conv_dw", match_conv_dw, rewrite_conv_dw,
             produces=("ConvDw",))
