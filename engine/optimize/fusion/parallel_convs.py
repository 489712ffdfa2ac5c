"""Fusion row parallel_convs: a sum of convolutions of one input is one convolution.

Re-parameterizable nets (RepVGG, MobileOne, ACNet, DBB...) train a layer as parallel
branches of one input — k x k and 1 x 1 convolutions, each with its BatchNormalization, and
a BatchNormalization of the input itself — summed, and fold them into one convolution for
deployment. Exported in the train-time form, every branch ran as a convolution of its own,
summed through the residual post-op (an unseen MobileOne: 57 convolutions and 14
normalization tasks where 28 convolutions compute the same, 0.72x of ONNX Runtime at batch
1). Convolution is linear in its weights, so after conv_bn folded each branch's
normalization:

    Add-tree of  Conv(x, W_i, B_i)  (same stride, group, output channels; odd kernels
                                     padded to stay centred, dilation 1)
              +  BatchNormalization(x) or x itself (stride 1, as many channels out as in)
    = Conv(x, sum of the W_i zero-padded to the largest kernel, centred, plus the
           normalization's per-channel scale at the centre tap of channel o's own input,
           sum of the biases and shifts)

— the same products summed in another order (float64 here, rounded once). The Adds must be
read only by the tree, each branch only by its Add, no branch may carry an activation or a
residual already.
"""

from __future__ import annotations

import numpy as np

from ...ir import Graph, Node, Value
from .match import Fusion, on_device, replace_region

MAX_LEAVES = 16


def _conv_leaf(node: Node, x: Value | None) -> dict | None:
    """A plain 2-D Conv's geometry when it can join: constant weights (and bias), centred
    odd kernels (pads (k - 1) / 2 each side), dilation 1, no epilogue."""
    if node.op_type != "Conv" or len(node.outputs) != 1 or any(
            k.startswith("_") for k in node.attrs):  # an epilogue fused already
        return None
    w, b = node.input(1), node.input(2)
    if node.input(0) is None or (x is not None and node.input(0) is not x) or w is None \
            or not w.is_constant or (b is not None and not b.is_constant):
        return None
    wc = np.asarray(w.const)
    if wc.ndim != 4 or wc.dtype != np.float32 or node.attrs.get("auto_pad", "NOTSET") != "NOTSET":
        return None
    kh, kw = wc.shape[2:]
    pads = [int(p) for p in node.attrs.get("pads", [0, 0, 0, 0])]
    if kh % 2 == 0 or kw % 2 == 0 or pads != [(kh - 1) // 2, (kw - 1) // 2] * 2:
        return None
    if [int(d) for d in node.attrs.get("dilations", [1, 1])] != [1, 1]:
        return None
    return {"strides": [int(s) for s in node.attrs.get("strides", [1, 1])],
            "group": int(node.attrs.get("group", 1)), "out": wc.shape[0], "w": wc,
            "b": None if b is None else np.asarray(b.const)}


def _affine_leaf(node: Node | None, v: Value, x: Value) -> tuple[np.ndarray, np.ndarray] | None:
    """x itself (scale 1) or an inference BatchNormalization of x with constant parameters:
    (scale, shift) per channel."""
    if v is x:
        c = x.meta.shape[1]
        return np.ones(c), np.zeros(c)
    if node is None or node.op_type != "BatchNormalization" or node.input(0) is not x \
            or len(node.outputs) != 1 or node.attrs.get("training_mode", 0):
        return None
    params = [node.input(i) for i in range(1, 5)]
    if any(p is None or not p.is_constant for p in params):
        return None
    gamma, beta, mean, var = (np.asarray(p.const, np.float64).reshape(-1) for p in params)
    scale = gamma / np.sqrt(var + float(node.attrs.get("epsilon", 1e-5)))
    return scale, beta - mean * scale


def _leaves(graph: Graph, root: Node) -> tuple[list[Value], list[Node]] | None:
    """The values the Add-tree under `root` sums, and its Adds (root last)."""
    adds, leaves, stack = [], [], [root]
    while stack:
        add = stack.pop()
        adds.append(add)
        for v in add.inputs:
            p = v.producer if v is not None else None
            if v is None or v.is_constant:
                return None
            if p is not None and p.op_type == "Add" and v.users == [add] \
                    and v not in graph.outputs and len(adds) + len(stack) < MAX_LEAVES:
                stack.append(p)
            else:
                leaves.append(v)
    return (leaves, adds[::-1]) if 2 <= len(leaves) <= MAX_LEAVES else None


def match_parallel_convs(graph: Graph, add: Node):
    if add.op_type != "Add" or len(add.inputs) != 2:
        return None
    out = add.outputs[0]
    if len(out.users) == 1 and out.users[0].op_type == "Add" and out not in graph.outputs:
        return None  # the tree's root is further down
    found = _leaves(graph, add)
    if found is None:
        return None
    leaves, adds = found
    if len(set(leaves)) != len(leaves):  # Add(c, c): each branch once
        return None
    convs = [v.producer for v in leaves if v.producer is not None and v.producer.op_type == "Conv"]
    if not convs:
        return None
    x = convs[0].input(0)
    geo = [_conv_leaf(c, x) for c in convs]
    if x is None or x.meta is None or not x.meta.is_static or x.meta.rank != 4 or any(
            g is None for g in geo):
        return None
    first = geo[0]
    if any(g["strides"] != first["strides"] or g["group"] != first["group"]
           or g["out"] != first["out"] for g in geo):
        return None
    affines, nodes = [], []
    for v in leaves:
        p = v.producer
        if p is not None and p.op_type == "Conv":
            if len(v.users) != 1 or v.users[0] not in adds or v in graph.outputs:
                return None
            nodes.append(p)
            continue
        aff = _affine_leaf(p, v, x)
        if aff is None or first["strides"] != [1, 1] or first["out"] != x.meta.shape[1]:
            return None
        if p is not None:
            if len(v.users) != 1 or v in graph.outputs:
                return None
            nodes.append(p)
        affines.append(aff)
    if not on_device(add, *nodes, *adds):
        return None
    return x, geo, affines, nodes, adds


def rewrite_parallel_convs(graph: Graph, add: Node, ctx) -> str:
    x, geo, affines, nodes, adds = ctx
    first = geo[0]
    m, cin_g = first["out"], first["w"].shape[1]
    kh = max(g["w"].shape[2] for g in geo)
    kw = max(g["w"].shape[3] for g in geo)
    w = np.zeros((m, cin_g, kh, kw))
    b = np.zeros(m)
    for g in geo:
        h, wd = g["w"].shape[2:]
        top, left = (kh - h) // 2, (kw - wd) // 2
        w[:, :, top:top + h, left:left + wd] += g["w"]
        if g["b"] is not None:
            b += g["b"]
    own = np.arange(m) % cin_g  # output channel o's own input, within its group
    for scale, shift in affines:
        w[np.arange(m), own, kh // 2, kw // 2] += scale
        b += shift
    attrs = {"kernel_shape": [kh, kw], "pads": [(kh - 1) // 2, (kw - 1) // 2] * 2,
             "strides": first["strides"], "dilations": [1, 1], "group": first["group"]}
    conv = replace_region(graph, add, nodes + adds, "Conv", [
        x, graph.add_constant(None, w.astype(np.float32)),
        graph.add_constant(None, b.astype(np.float32))], attrs)
    return (f"parallel convolutions: {len(geo)} Conv and {len(affines)} identity branches "
            f"-> {conv.name}")


ROW = Fusion("parallel_convs", match_parallel_convs, rewrite_parallel_convs)
