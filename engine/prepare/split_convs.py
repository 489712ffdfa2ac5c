"""Convolutions over the channel groups of a Split, concatenated back, as one convolution
(a canonicalize row).

MixNet-style blocks write a grouped convolution by hand: Split(x, channels) -> one Conv per
part -> Concat(channels). Its pointwise convolutions (two equal halves, each a dense 1x1)
and its mixed depthwise convolution (3x3, 5x5, 7x7, ... kernels, one per part) became
2-5 tasks each plus a Split and a Concat that kept the tensors out of the blocked layout:
an unseen MixNet ran 215 tasks (OpenVINO 111), 0.76x of OpenVINO at batch 1.

- Dense parts of one shape (equal input and output channels, the same kernel, pads, strides
  and dilations): the convolution with `group` = the number of parts, weights stacked
  along the output channels. The same products and sums.
- Depthwise parts (each part's group is its channels, the same channel multiplier, strides
  and dilations, each "same"-padded: odd kernel, pads dilation*(k-1)/2 on both sides): one
  depthwise convolution with the largest kernel, each part's kernel centred in it and
  zero elsewhere, pads for the largest. A zero weight adds 0 * x = 0 to a sum (x finite),
  so every output is its part's sum; the work grows to the largest kernel's (bounded).

Both need constant weights (and biases, if any: absent ones are zeros), each part's Conv read
only by the Concat, and the Split's parts read only by those convolutions, in order.
"""

from __future__ import annotations

import numpy as np

from ..ir import Graph, Node
from .steps import replace_outputs

MAX_GROWTH = 4.0  # the merged kernel's work over the parts' own, at most
VECTOR = 16  # channels a vector holds (float32, AVX-512)


def _conv_parts(node: Node) -> tuple[Node, list[Node]] | None:
    """(Split, the convolutions in order) when `node` is the Concat this rewrite takes."""
    if node.op_type != "Concat" or len(node.inputs) < 2 or len(node.outputs) != 1:
        return None
    out = node.outputs[0]
    if out.meta is None or out.meta.shape is None or len(out.meta.shape) != 4 \
            or int(node.attrs.get("axis", 0)) % 4 != 1:
        return None
    convs = []
    for v in node.inputs:
        c = v.producer if v is not None else None
        if c is None or c.op_type != "Conv" or v.users != [node] or v in node.graph.outputs:
            return None
        convs.append(c)
    split = convs[0].input(0).producer if convs[0].input(0) is not None else None
    if split is None or split.op_type != "Split" or len(split.outputs) != len(convs) \
            or int(split.attrs.get("axis", 0)) % 4 != 1:
        return None
    for k, c in enumerate(convs):
        part = split.outputs[k]
        if c.input(0) is not part or part.users != [c] or part in node.graph.outputs:
            return None
        w = c.input(1)
        b = c.input(2) if len(c.inputs) > 2 else None
        if w is None or not w.is_constant or np.ndim(w.const) != 4 \
                or (b is not None and not b.is_constant) \
                or c.attrs.get("auto_pad", "NOTSET") not in ("NOTSET", "") \
                or part.meta is None or part.meta.shape is None \
                or not all(isinstance(d, int) for d in part.meta.shape):
            return None
    return split, convs


def _attr(c: Node, key: str, default: list[int]) -> list[int]:
    return [int(v) for v in (c.attrs.get(key) or default)]


def _plan(node: Node) -> tuple[str, list[Node], tuple[int, int] | None] | None:
    """("dense" | "depthwise", the convolutions, the depthwise kernel's (kh, kw))."""
    found = _conv_parts(node)
    if found is None:
        return None
    _, convs = found
    strides = {tuple(_attr(c, "strides", [1, 1])) for c in convs}
    dilations = {tuple(_attr(c, "dilations", [1, 1])) for c in convs}
    if len(strides) != 1 or len(dilations) != 1:
        return None
    shapes = [np.shape(c.input(1).const) for c in convs]
    chans = [c.input(0).meta.shape[1] for c in convs]
    groups = [int(c.attrs.get("group", 1)) for c in convs]
    if all(g == 1 for g in groups):
        same = len(set(shapes)) == 1 and len(set(chans)) == 1 \
            and len({tuple(_attr(c, "pads", [0] * 4)) for c in convs}) == 1
        if not same or shapes[0][1] != chans[0]:
            return None
        whole = shapes[0][0] % VECTOR == 0 and chans[0] % VECTOR == 0
        return ("dense", convs, None) if whole or len(convs) <= MAX_GROWTH else None
    if any(g != ch for g, ch in zip(groups, chans)) or any(s[1] != 1 for s in shapes):
        return None
    if len({s[0] // ch for s, ch in zip(shapes, chans)}) != 1 \
            or any(s[0] % ch for s, ch in zip(shapes, chans)):
        return None  # one channel multiplier for all parts
    dil = next(iter(dilations))
    for c, s in zip(convs, shapes):
        kh, kw = s[2], s[3]
        if kh % 2 == 0 or kw % 2 == 0:
            return None
        if _attr(c, "pads", [0] * 4) != [dil[0] * (kh - 1) // 2, dil[1] * (kw - 1) // 2] * 2:
            return None
    kh = max(s[2] for s in shapes)
    kw = max(s[3] for s in shapes)
    work = sum(s[0] * s[2] * s[3] for s in shapes)
    if sum(s[0] for s in shapes) * kh * kw > MAX_GROWTH * work:
        return None
    return "depthwise", convs, (kh, kw)


def split_convs(node: Node) -> bool:
    return _plan(node) is not None


def as_one_conv(graph: Graph, node: Node) -> None:
    kind, convs, kernel = _plan(node)
    split = convs[0].input(0).producer
    x = split.inputs[0]
    weights, biases = [], []
    for c in convs:
        w = np.asarray(c.input(1).const, np.float32)
        b = c.input(2) if len(c.inputs) > 2 else None
        biases.append(np.zeros(w.shape[0], np.float32) if b is None
                      else np.asarray(b.const, np.float32).reshape(-1))
        weights.append(w)
    first = convs[0]
    attrs = {"strides": _attr(first, "strides", [1, 1]),
             "dilations": _attr(first, "dilations", [1, 1])}
    if kind == "dense":
        attrs.update(pads=_attr(first, "pads", [0] * 4), kernel_shape=list(weights[0].shape[2:]))
        m, c = weights[0].shape[:2]
        if m % VECTOR == 0 and c % VECTOR == 0:
            attrs["group"] = len(convs)
            w = np.concatenate(weights, axis=0)
        else:  # oneDNN's grouped kernels want whole vectors of channels a group: dense,
            # each part's weights on the diagonal and zero elsewhere
            w = np.zeros((m * len(convs), c * len(convs), *weights[0].shape[2:]), np.float32)
            for k, part in enumerate(weights):
                w[k * m:(k + 1) * m, k * c:(k + 1) * c] = part
    else:
        kh, kw = kernel
        padded = []
        for w in weights:
            top, left = (kh - w.shape[2]) // 2, (kw - w.shape[3]) // 2
            big = np.zeros((w.shape[0], 1, kh, kw), np.float32)
            big[:, :, top:top + w.shape[2], left:left + w.shape[3]] = w
            padded.append(big)
        w = np.concatenate(padded, axis=0)
        dil = attrs["dilations"]
        attrs.update(group=int(x.meta.shape[1]), kernel_shape=[kh, kw],
                     pads=[dil[0] * (kh - 1) // 2, dil[1] * (kw - 1) // 2] * 2)
    wv = graph.add_constant(None, w)
    bv = graph.add_constant(None, np.concatenate(biases))
    conv = graph.add_node("Conv", [x, wv, bv], attrs=attrs,
                          name=graph.unique_name(f"{first.name}_merged"), after=node)
    replace_outputs(graph, node, {0: conv.outputs[0]})
    for c in convs:
        graph.remove_node(c)
    if not any(o.users or o in graph.outputs for o in split.outputs):
        graph.remove_node(split)
