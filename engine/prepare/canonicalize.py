"""Canonical forms: ops rewritten into the forms the device runs, one row per rewrite.

A 1-D pool over [N, C, L] is the 2-D pool of [N, C, 1, L] (Unsqueeze and Squeeze are views:
no task, no copy); InstanceNormalization and GroupNormalization are a LayerNormalization of
[N, groups, rest] followed by the per-channel scale and bias; an RMSNormalization whose
Scale broadcasts is the steps exporters wrote before opset 23 had it (else the device runs
it whole); a ReduceMean or ReduceMax over H and W of a 4-D
tensor is the global pool; a 2-D Conv one column wide runs along W instead (a view); a
Tile by constant repeats is the device's Expand between two views; ONNX Attention is the
steps the attention fusion takes (`attention_op.py`) and RotaryEmbedding the device's Rope
(`rotary_op.py`); DepthToSpace and SpaceToDepth are a view, a Transpose and a view. The
forms are exact rewrites (up to summation order; ai.onnx.ml.Scaler of float32 is its Sub
and Mul),
so the host runs them as well as the device; the device then needs no kernel of its own for
them (audio encoders' GroupNorm-as-InstanceNorm and byte CNNs' 1-D pools stayed on the host
and cut the device program in two).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from .. import ops
from ..dtypes import DType
from ..ir import Graph, Node, Value
from ..ops.resize import plan
from ..ops.shape_helpers import const_in
from ..ops.spatial import window
from ..passes import PassResult
from .attention_op import as_attention_steps, onnx_attention
from .branches import cheap_if, copy_branch, select_branches
from .col2im import as_permutation, tiling_col2im
from .decompose import (
    as_masked_where,
    as_pairwise_steps,
    as_stable_steps,
    float_logsumexp,
    static_trilu,
    variadic_of_several,
)
from .depth_to_space import as_block_transpose, depth_space_move
from .dft import as_table_product, static_dft
from .einsum import as_matmul_steps, einsum_as_matmul
from .expert_matmul import as_product_by_all_experts, gathered_expert_product
from .group_conv import as_dense_conv, gemm_group_conv
from .loop_scan import as_lifted_ops, scan_loop
from .matmul_columns import as_product_of_columns, sliced_product
from .merged_batch import _ELEMENTWISE as MERGED_ELEMENTWISE
from .merged_batch import lift_merged_batch, merged_batch_op
from .one_hot import _ELEMENTWISE as LOOKUP_ELEMENTWISE
from .one_hot import (
    as_equal_where,
    as_lookup_of_table,
    as_row_lookup,
    elementwise_of_lookups,
    one_hot_product,
    static_one_hot,
)
from .ragged_experts import as_segment_product, ragged_expert_products
from .rotary_op import as_rope, onnx_rotary
from .slice_scatter import as_concat, slice_scatter
from .split_convs import as_one_conv, split_convs
from .steps import chain, replace_outputs
from .views import _FLAT_VIEWS as FLAT_VIEWS
from .views import (
    ROUND_TRIP_VIEWS,
    as_one_view,
    as_parts,
    as_reshape,
    as_source,
    as_transpose,
    identity_gather,
    identity_gather_nd,
    merged_transpose,
    nd_as_reshape,
    split_of_concat,
    view_of_view,
    view_round_trip,
)

_POOLS = ("MaxPool", "AveragePool", "LpPool")
_GLOBAL_POOLS = ("GlobalAveragePool", "GlobalMaxPool", "GlobalLpPool")


def _rank(v: Value | None) -> int | None:
    return v.meta.rank if v is not None and v.meta is not None and v.meta.shape is not None \
        else None


def _pool_1d(node: Node) -> bool:
    return (node.op_type in _POOLS + _GLOBAL_POOLS and _rank(node.input(0)) == 3
            and len(node.outputs) == 1)


def _as_2d(graph: Graph, node: Node) -> None:
    axis = graph.add_constant(None, np.array([2], np.int64))
    x = graph.add_node("Unsqueeze", [node.inputs[0], axis], name=graph.unique_name(
        f"{node.name}_2d"), after=node).outputs[0]
    attrs = dict(node.attrs)
    if node.op_type in _POOLS:
        def widen(key: str, fill: int, per_side: bool = False) -> None:
            if key in attrs:
                v = list(attrs[key])
                attrs[key] = [fill, v[0], fill, v[1]] if per_side else [fill, *v]
        widen("kernel_shape", 1)
        widen("strides", 1)
        widen("dilations", 1)
        widen("pads", 0, per_side=True)
    pooled = graph.add_node(node.op_type, [x], attrs=attrs, name=graph.unique_name(
        node.name), after=x.producer).outputs[0]
    squeezed = graph.add_node("Squeeze", [pooled, axis], name=graph.unique_name(
        f"{node.name}_1d"), after=pooled.producer).outputs[0]
    graph.replace_all_uses(node.outputs[0], squeezed)
    graph.remove_node(node)


def _ceil_average_with_pads(node: Node) -> bool:
    """An AveragePool counting its pads (count_include_pad) in ceil mode, explicit pads."""
    a = node.attrs
    x, y = node.input(0), node.outputs[0] if len(node.outputs) == 1 else None
    return (node.op_type == "AveragePool" and int(a.get("count_include_pad", 0)) == 1
            and int(a.get("ceil_mode", 0)) == 1 and a.get("auto_pad", "NOTSET") == "NOTSET"
            and (_rank(x) or 0) >= 3 and x.meta.is_static and y is not None
            and y.meta is not None and y.meta.is_static)


def _as_pad_then_average(graph: Graph, node: Node) -> None:
    """The pads as a Pad of zeros, then an average over the windows' positions inside the
    padded input (count_include_pad 0, no pads). ONNX divides a window that ceil mode lets
    run past the padded input by its positions inside the padded input; oneDNN's
    include-padding average (the runtime's, with the right padding grown to reach the ceil
    mode's output size) divided it by the whole kernel: the last row and column of such a
    pool were off by kernel / inside (a 3-tap window with 2 inside: 2/3 of ONNX Runtime's)."""
    rank = _rank(node.input(0))
    pads = [int(p) for p in node.attrs.get("pads", [0] * (2 * (rank - 2)))]
    sp = rank - 2
    attrs = dict(node.attrs, count_include_pad=0)
    attrs.pop("pads", None)
    step = chain(graph, node)
    x = node.inputs[0]
    if any(pads):
        full = [0, 0, *pads[:sp], 0, 0, *pads[sp:]]
        x = step("Pad", [x, graph.add_constant(None, np.array(full, np.int64))], mode="constant")
    out = step("AveragePool", [x], **attrs)
    # A window that would start in the end padding is dropped from the original's output;
    # over the padded input it starts inside: cut it off.
    padded = [d + pads[i] + pads[i + sp] for i, d in enumerate(node.input(0).meta.shape[2:])]
    _, sizes = window(None, attrs, attrs["kernel_shape"], padded, ceil_mode=True)
    want = [int(d) for d in node.outputs[0].meta.shape[2:]]
    if list(sizes) != want:
        def const(v):
            return graph.add_constant(None, np.array(v, np.int64))
        out = step("Slice", [out, const([0] * sp), const(want), const(list(range(2, rank)))])
    replace_outputs(graph, node, {0: out})


def _group_norm(node: Node) -> bool:
    x, scale, bias = (node.input(i) for i in range(3))
    return (node.op_type in ("InstanceNormalization", "GroupNormalization") and x is not None
            and x.meta is not None and x.meta.is_static and x.meta.rank >= 3
            and scale is not None and scale.is_constant and bias is not None
            and bias.is_constant)


def _as_layer_norm(graph: Graph, node: Node) -> None:
    """Normalization over groups of channels (InstanceNormalization: one channel a group) is
    a LayerNormalization of [N, groups, rest] then the per-channel scale and bias."""
    x, scale, bias = node.inputs[:3]
    shape = x.meta.shape
    n, c = shape[0], shape[1]
    groups = c if node.op_type == "InstanceNormalization" else int(node.attrs["num_groups"])
    dt = x.meta.dtype.numpy
    rest = int(np.prod(shape[1:])) // groups
    flat = graph.add_node("Reshape", [x, graph.add_constant(None, np.array([n, groups, rest]))],
                          name=graph.unique_name(f"{node.name}_flat"), after=node).outputs[0]
    ones = graph.add_constant(None, np.ones(rest, dt))
    zeros = graph.add_constant(None, np.zeros(rest, dt))
    normed = graph.add_node("LayerNormalization", [flat, ones, zeros], attrs={
        "axis": -1, "epsilon": float(node.attrs.get("epsilon", 1e-5))},
        name=graph.unique_name(f"{node.name}_ln"), after=flat.producer).outputs[0]
    back = graph.add_node("Reshape", [normed, graph.add_constant(None, np.array(shape))],
                          name=graph.unique_name(f"{node.name}_back"),
                          after=normed.producer).outputs[0]
    per_channel = (c,) + (1,) * (len(shape) - 2)

    def channels(v: Value) -> np.ndarray:
        arr = np.asarray(v.const, dt).reshape(-1)
        if arr.size == groups and c != groups:  # GroupNormalization-18: one value a group
            arr = np.repeat(arr, c // groups)
        return arr.reshape(per_channel)

    scaled = graph.add_node("Mul", [back, graph.add_constant(None, channels(scale))],
                            name=graph.unique_name(f"{node.name}_scale"),
                            after=back.producer).outputs[0]
    out = graph.add_node("Add", [scaled, graph.add_constant(None, channels(bias))],
                         name=graph.unique_name(f"{node.name}_bias"),
                         after=scaled.producer).outputs[0]
    graph.replace_all_uses(node.outputs[0], out)
    graph.remove_node(node)


def _rms_norm(node: Node) -> bool:
    """An RMSNormalization the device kernel does not take as it is (a Scale that
    broadcasts, or statistics in another type): its steps."""
    x, scale = node.input(0), node.input(1)
    if not (node.op_type == "RMSNormalization" and x is not None and x.meta is not None
            and x.meta.is_static and x.meta.rank >= 1 and scale is not None
            and x.meta.dtype.numpy == np.float32):
        return False
    axis = int(node.attrs.get("axis", -1))
    axis = axis + x.meta.rank if axis < 0 else axis
    whole = scale.meta is not None and scale.meta.is_static \
        and scale.meta.numel == int(np.prod(x.meta.shape[axis:]))
    return not whole or int(node.attrs.get("stash_type", 1)) != 1


def _as_rms_steps(graph: Graph, node: Node) -> None:
    """RMSNormalization (opset 23) as the steps exporters wrote before it existed:
    x / sqrt(mean(x * x over the trailing axes) + eps) * scale, each a device op."""
    x, scale = node.inputs[:2]
    rank = x.meta.rank
    axis = int(node.attrs.get("axis", -1))
    axis = axis + rank if axis < 0 else axis
    step = chain(graph, node)

    sq = step("Mul", [x, x])
    ms = step("ReduceMean", [sq, graph.add_constant(None, np.arange(axis, rank))], keepdims=1)
    eps = graph.add_constant(None, np.array(float(node.attrs.get("epsilon", 1e-5)),
                                            np.float32))
    rms = step("Sqrt", [step("Add", [ms, eps])])
    out = step("Mul", [step("Div", [x, rms]), scale])
    graph.replace_all_uses(node.outputs[0], out)
    graph.remove_node(node)


_SPATIAL_REDUCE = {"ReduceMean": "GlobalAveragePool", "ReduceMax": "GlobalMaxPool"}


def _reduce_axes(node: Node) -> list[int] | None:
    if "axes" in node.attrs:
        return [int(a) for a in node.attrs["axes"]]
    axes = node.input(1)
    if axes is None or axes.const is None:
        return None
    return [int(a) for a in np.asarray(axes.const).reshape(-1)]


def _spatial_axes(node: Node) -> list[int] | None:
    """The reduced axes, when they are spatial axes of [N, C, spatial...] (rank 3 or 4) and
    every spatial axis left out has size 1: then the reduction is the global pool."""
    x = node.input(0)
    rank = _rank(x)
    if node.op_type not in _SPATIAL_REDUCE or rank not in (3, 4) or len(node.outputs) != 1 \
            or x.meta.dtype.numpy != np.float32 or not x.meta.is_static:
        return None
    axes = _reduce_axes(node)
    if not axes:
        return None
    axes = sorted({a % rank for a in axes})
    if len(axes) != len(_reduce_axes(node)) or axes[0] < 2:
        return None
    if any(x.meta.shape[a] != 1 for a in range(2, rank) if a not in axes):
        return None
    if (rank, axes) != (4, [2, 3]) and not _from_convolution(x):
        return None  # a transformer's [B, S, H] mean is a LayerNorm's, not a pool
    return axes


# What may lie between a convolution and the reduction of its output over time: views and
# per-element ops (a bias, a batch norm, an activation).
_CONV_PASSAGE = {"Squeeze", "Unsqueeze", "Reshape", "Relu", "LeakyRelu", "Clip", "Sigmoid",
                 "Tanh", "Elu", "Gelu", "HardSwish", "HardSigmoid", "Mul", "Add",
                 "BatchNormalization", "Identity"}


def _from_convolution(v: Value | None, steps: int = 6) -> bool:
    """Whether `v` is a convolution's output, through at most `steps` views and per-element
    ops (along their first input)."""
    for _ in range(steps + 1):
        node = v.producer if v is not None else None
        if node is None:
            return False
        if node.op_type in ("Conv", "ConvTranspose"):
            return True
        if node.op_type not in _CONV_PASSAGE:
            return False
        v = node.input(0)
    return False


def _channel_slice(node: Node) -> tuple[Value, int, int] | None:
    """(input, start, end) of a Slice of a convolution's output (`_from_convolution`) along
    the channel axis of a 3-D to 5-D activation: constant bounds on that one axis, step 1."""
    if node.op_type != "Slice" or len(node.inputs) < 3 or not node.outputs:
        return None
    x, bounds = node.input(0), node.inputs[1:]
    if x is None or x.meta is None or not x.meta.is_static or x.meta.rank not in (3, 4, 5) \
            or any(b is not None and not b.is_constant for b in bounds) or bounds[0] is None \
            or bounds[1] is None:
        return None
    starts, ends = (np.asarray(b.const).reshape(-1) for b in bounds[:2])
    axes = np.asarray(bounds[2].const).reshape(-1) if len(bounds) > 2 and bounds[2] is not None \
        else np.arange(len(starts))
    steps = np.asarray(bounds[3].const).reshape(-1) if len(bounds) > 3 and bounds[3] is not None \
        else np.ones(len(starts), np.int64)
    if not (len(starts) == len(ends) == len(axes) == len(steps) == 1) or int(steps[0]) != 1 \
            or int(axes[0]) not in (1, 1 - x.meta.rank) or not _from_convolution(x):
        return None
    d = x.meta.shape[1]
    start, end = (min(max(int(v) + d if int(v) < 0 else int(v), 0), d)
                  for v in (starts[0], ends[0]))
    return (x, start, end) if start < end else None


def _channel_tiling(node: Node) -> list[Node] | None:
    """The Slices of node's input that cut its channels into consecutive pieces, first to last,
    when node is one of them and they cover every channel once (a gated activation's halves:
    WaveNet's tanh(a) * sigmoid(b), a Conformer's GLU)."""
    own = _channel_slice(node)
    if own is None:
        return None
    x = own[0]
    pieces = []
    for user in dict.fromkeys(x.users):  # once each, in order
        cut = _channel_slice(user) if user.op_type == "Slice" and user.input(0) is x else None
        if cut is not None:
            pieces.append((cut[1], cut[2], user))
    pieces.sort(key=lambda p: (p[0], p[1]))
    at = 0
    for start, end, _ in pieces:
        if start != at:
            return None
        at = end
    if len(pieces) < 2 or at != x.meta.shape[1]:
        return None
    return [p[2] for p in pieces]


def _tiles_channels(node: Node) -> bool:
    return _channel_tiling(node) is not None


def _as_split(graph: Graph, node: Node) -> None:
    """The Slices that tile a convolution output's channels are one Split: stored
    channels-last it cuts each pixel's row in place (the layout's CONCAT kind), where each
    Slice of the channel axis ran plain, with a conversion on either side of it (an unseen
    WaveNet: two TransData and two Slices a layer, 30 conversions in all)."""
    slices = _channel_tiling(node)
    x = slices[0].input(0)
    sizes = graph.add_constant(None, np.asarray([s.outputs[0].meta.shape[1] for s in slices],
                                                np.int64))
    first = min(slices, key=graph.nodes.index)
    split = graph.add_node("Split", [x, sizes], attrs={"axis": 1}, outputs=0, after=first,
                           name=graph.unique_name(f"{first.name}_split"))
    for s in slices:  # each piece keeps its value (a graph output keeps its name)
        graph.hand_over_outputs(s, [split])


def _spatial_reduce(node: Node) -> bool:
    return _spatial_axes(node) is not None


def _as_global_pool(graph: Graph, node: Node) -> None:
    """A mean (max) over H and W of [N, C, H, W] is a global pool: a squeeze-excitation's
    squeeze written as ReduceMean(axes=[2, 3]) then runs in the convolutions' format instead
    of converting the whole feature map to NCHW for it. So is one over the time axis of a
    1-D convolution's [N, C, L] (a character CNN's max over time: its six conv outputs went
    from channels-last back to NCHW for a scalar loop each), or over the one spatial axis of
    size above 1."""
    axes_kept = _spatial_axes(node)
    pooled = graph.add_node(_SPATIAL_REDUCE[node.op_type], [node.inputs[0]],
                            name=graph.unique_name(node.name), after=node).outputs[0]
    if not int(node.attrs.get("keepdims", 1)):
        axes = graph.add_constant(None, np.array(axes_kept, np.int64))
        pooled = graph.add_node("Squeeze", [pooled, axes], name=graph.unique_name(
            f"{node.name}_squeeze"), after=pooled.producer).outputs[0]
    graph.replace_all_uses(node.outputs[0], pooled)
    graph.remove_node(node)


# ReduceL2 / ReduceSumSquare / ReduceL1 / ReduceLogSum as an elementwise step, the device's
# ReduceSum, and a step after: ConvNeXt-V2's global response norm (ReduceL2 over H and W) and
# L2-normalized embeddings otherwise leave the device for a numpy reduction. ReduceLogSumExp
# takes its stable form (decompose.py).
_NORM_REDUCE = {"ReduceL2": ("Mul", "Sqrt"), "ReduceSumSquare": ("Mul", None),
                "ReduceL1": ("Abs", None), "ReduceLogSum": (None, "Log")}


def _norm_reduce(node: Node) -> bool:
    x = node.input(0)
    return node.op_type in _NORM_REDUCE and len(node.outputs) == 1 and x is not None \
        and x.meta.dtype.numpy == np.float32


def _as_sum_steps(graph: Graph, node: Node) -> None:
    before, after_op = _NORM_REDUCE[node.op_type]
    x = node.inputs[0]
    step = chain(graph, node)

    if before is not None:
        x = step(before, [x, x] if before == "Mul" else [x])
    attrs = {k: node.attrs[k] for k in ("keepdims", "noop_with_empty_axes") if k in node.attrs}
    ins = [x, *node.inputs[1:]]
    if "axes" in node.attrs:  # the attribute form a pass may still hold
        ins = [x, graph.add_constant(None, np.asarray(node.attrs["axes"], np.int64))]
    out = step("ReduceSum", ins, **attrs)
    if after_op is not None:
        out = step(after_op, [out])
    graph.replace_all_uses(node.outputs[0], out)
    graph.remove_node(node)


def _conv_of_row_view(graph: Graph, node: Node, attrs: dict, w_shape: list[int],
                      x_shape: list[int], suffix: str) -> None:
    """`node` (a Conv) as the Conv with `attrs` of its input viewed as `x_shape` ([N, C, 1,
    W]) and its weights as `w_shape`, its output viewed back to its own shape (the value
    keeps its name and readers)."""
    x, w = node.inputs[0], node.inputs[1]

    def view(v: Value, shape: list[int], after: Node) -> Value:
        target = graph.add_constant(None, np.array(shape, np.int64))
        return graph.add_node("Reshape", [v, target], name=graph.unique_name(
            f"{node.name}_row"), after=after).outputs[0]

    if w.is_constant:
        w2 = graph.add_constant(None, np.ascontiguousarray(w.const.reshape(w_shape)))
    else:
        w2 = view(w, w_shape, node)
    x2 = view(x, x_shape, w2.producer or node)
    conv = graph.add_node("Conv", [x2, w2, *node.inputs[2:]], attrs=attrs,
                          name=graph.unique_name(node.name), after=x2.producer)
    target = graph.add_constant(None, np.array(node.outputs[0].meta.shape, np.int64))
    back = graph.add_node("Reshape", [conv.outputs[0], target], outputs=[],
                          name=graph.unique_name(f"{node.name}_{suffix}"), after=conv)
    graph.hand_over_outputs(node, [back])


def _tall_conv(node: Node) -> bool:
    """A 2-D Conv whose input and kernel are one column wide ([N, C, H, 1], kernel [k, 1]):
    a 1-D convolution laid along H, as TensorFlow-by-way-of-JAX exports write them."""
    x, w = node.input(0), node.input(1)
    y = node.outputs[0] if len(node.outputs) == 1 else None
    if node.op_type != "Conv" or _rank(x) != 4 or _rank(w) != 4 or y is None \
            or y.meta is None or not y.meta.is_static or not x.meta.is_static \
            or not w.meta.is_static \
            or node.attrs.get("auto_pad", "NOTSET") not in ("NOTSET", "VALID"):
        return False
    pads = list(node.attrs.get("pads") or [0, 0, 0, 0])
    # nothing along W at all: one column in, one out, no padding there (a padded column
    # makes more than one output column, which the fuzzer found)
    return (x.meta.shape[3] == 1 and w.meta.shape[3] == 1 and y.meta.shape[3] == 1
            and x.meta.shape[2] > 1 and len(pads) == 4 and pads[1] == 0 and pads[3] == 0)


def _as_wide_conv(graph: Graph, node: Node) -> None:
    """The same convolution along W: [N, C, H, 1] and [N, C, 1, H] are the same bytes (a
    view), and oneDNN's convolutions run a long W far better than a long H (a 256 -> 512
    channel, 5-tap 1-D convolution over 512 steps: 7.2 ms laid along H, 3.3 ms along W)."""
    x, w = node.inputs[0], node.inputs[1]
    n, c, h, _ = x.meta.shape

    def swap(key: str, fill: int) -> None:
        if key in node.attrs:
            attrs[key] = [fill, node.attrs[key][0]]

    attrs = dict(node.attrs)
    swap("kernel_shape", 1)
    swap("strides", 1)
    swap("dilations", 1)
    if "pads" in node.attrs:
        pads = list(node.attrs["pads"])
        attrs["pads"] = [pads[1], pads[0], pads[3], pads[2]]
    o, cg, k, _ = w.meta.shape
    _conv_of_row_view(graph, node, attrs, [o, cg, 1, k], [n, c, 1, h], "tall")


def _conv_1d(node: Node) -> bool:
    """A 1-D Conv ([N, C, W], kernel [k]) with static shapes."""
    x, w = node.input(0), node.input(1)
    y = node.outputs[0] if len(node.outputs) == 1 else None
    return (node.op_type == "Conv" and _rank(x) == 3 and _rank(w) == 3 and y is not None
            and y.meta is not None and y.meta.is_static and x.meta.is_static
            and w.meta.is_static)


def _as_conv_2d(graph: Graph, node: Node) -> None:
    """The 2-D convolution of [N, C, 1, W] (a view): oneDNN's fast convolutions take
    channels-last activations, so a 1-D one on plain [N, C, W] reordered its input and
    output inside every call (a speech encoder's 1 -> 64 channel, 10-tap first layer over
    16000 samples: 205 us; as a 2-D one in the layout region: 26 us), and in the region the
    encoders' Transpose to [N, W, C] around a LayerNorm is a view of its bytes."""
    x, w = node.inputs[0], node.inputs[1]
    n, c, width = x.meta.shape
    o, cg, k = w.meta.shape

    attrs = dict(node.attrs)
    for key, fill in (("kernel_shape", 1), ("strides", 1), ("dilations", 1)):
        if key in attrs:
            attrs[key] = [fill, int(attrs[key][0])]
    if "pads" in attrs:
        pads = list(attrs["pads"])
        attrs["pads"] = [0, int(pads[0]), 0, int(pads[1])]
    _conv_of_row_view(graph, node, attrs, [o, cg, 1, k], [n, c, 1, width], "1d")


def _resize_1d(node: Node) -> bool:
    """A Resize of a signal [N, C, L] (static shapes) along L only, by constant scales or
    sizes, stretched: the device kernel resizes the spatial axes of 4-D and 5-D tensors."""
    x = node.input(0)
    y = node.outputs[0] if len(node.outputs) == 1 else None
    if node.op_type != "Resize" or _rank(x) != 3 or y is None or y.meta is None \
            or not y.meta.is_static or not x.meta.is_static \
            or tuple(y.meta.shape[:2]) != tuple(x.meta.shape[:2]) \
            or node.attrs.get("coordinate_transformation_mode") == "tf_crop_and_resize" \
            or node.attrs.get("keep_aspect_ratio_policy", "stretch") != "stretch":
        return False
    scales, sizes = const_in(node, 2), const_in(node, 3)
    return ((node.input(2) is None or scales is not None)
            and (node.input(3) is None or sizes is not None)
            and (scales is not None and np.size(scales) > 0
                 or sizes is not None and np.size(sizes) > 0))


def _as_resize_2d(graph: Graph, node: Node) -> None:
    """The same Resize of the view [N, C, 1, L], the unit axis kept (scale 1): a 1-D
    Wave-U-Net's linear upsamplings, which ran on the host between device programs (70 ms a
    run against OpenVINO's 2.5 for the whole model). Scales stay scales and sizes sizes, so
    the coordinate transform is the one asked for."""
    x = node.inputs[0]
    scales, sizes = const_in(node, 2), const_in(node, 3)
    if scales is not None and not np.size(scales):
        scales = None
    if sizes is not None and not np.size(sizes):
        sizes = None
    out_sizes, factors, _ = plan(tuple(x.meta.shape), scales, sizes, node.attrs)
    attrs = {k: v for k, v in node.attrs.items() if k != "axes"}
    axis = graph.add_constant(None, np.array([2], np.int64))
    x4 = graph.add_node("Unsqueeze", [x, axis], name=graph.unique_name(f"{node.name}_2d"),
                        after=node).outputs[0]
    if sizes is not None:
        grid = [None, None, graph.add_constant(None, np.array(
            [out_sizes[0], out_sizes[1], 1, out_sizes[2]], np.int64))]
    else:
        grid = [None, graph.add_constant(None, np.array(
            [factors[0], factors[1], 1.0, factors[2]], np.float32))]
    resized = graph.add_node("Resize", [x4, *grid], attrs=attrs,
                             name=graph.unique_name(node.name), after=x4.producer)
    back = graph.add_node("Squeeze", [resized.outputs[0], axis], outputs=[],
                          name=graph.unique_name(f"{node.name}_1d"), after=resized)
    graph.hand_over_outputs(node, [back])


def _scalar_bound(node: Node) -> tuple[Value, float] | None:
    """(x, c) when `node` is Max(x, c) or Min(x, c) of float32 x and a finite one-element
    float32 constant c of rank <= x's (so the result has x's shape)."""
    if node.op_type not in ("Max", "Min") or len(node.inputs) != 2:
        return None
    for i in (0, 1):
        x, c = node.input(i), node.input(1 - i)
        if x is None or c is None or x.is_constant or not c.is_constant:
            continue
        const = np.asarray(c.const)
        if (const.size == 1 and const.dtype == np.float32 and x.meta is not None
                and x.meta.dtype.numpy == np.float32 and x.meta.shape is not None
                and const.ndim <= len(x.meta.shape) and np.isfinite(const).all()):
            return x, float(const.reshape(()))
    return None


def _is_scalar_bound(node: Node) -> bool:
    return _scalar_bound(node) is not None


def _as_clip(graph: Graph, node: Node) -> None:
    """Max(x, c) is Clip(x, c, +inf) and Min(x, c) Clip(x, -inf, c) (TensorFlow's
    `tf.maximum(x, -0.4)` after each LeakyRelu of openWakeWord's embedding net): an
    activation a Conv takes as a post-op and an elementwise chain runs with its neighbours,
    where the Max was a broadcast loop of its own."""
    x, c = _scalar_bound(node)
    bound = graph.add_constant(None, np.asarray(c, np.float32))
    ins = [x, bound] if node.op_type == "Max" else [x, None, bound]
    clip = graph.add_node("Clip", ins, outputs=[], name=graph.unique_name(f"{node.name}_clip"),
                          after=node)
    graph.hand_over_outputs(node, [clip])


def _uniform_prelu(node: Node) -> bool:
    """A float32 PRelu whose constant slope is one value (torch's nn.PReLU() default: one
    parameter for every channel)."""
    x, s = node.input(0), node.input(1)
    if node.op_type != "PRelu" or x is None or x.meta is None \
            or x.meta.dtype is not DType.FLOAT32 or s is None or not s.is_constant \
            or np.size(s.const) == 0:
        return False
    c = np.asarray(s.const, np.float32).reshape(-1)
    return bool(np.isfinite(c[0]) and (c == c[0]).all())


def _as_leaky_relu(graph: Graph, node: Node) -> None:
    """PRelu by one slope is LeakyRelu (x < 0: slope * x): an activation a Conv takes as a
    post-op and an elementwise chain runs with its neighbours (Conv-TasNet's 16 PReLUs were
    host steps splitting its device program)."""
    alpha = float(np.asarray(node.input(1).const, np.float32).reshape(-1)[0])
    leaky = graph.add_node("LeakyRelu", [node.input(0)], outputs=[], attrs={"alpha": alpha},
                           name=graph.unique_name(f"{node.name}_leaky"), after=node)
    graph.hand_over_outputs(node, [leaky])


def _tile_shapes(node: Node) -> tuple[list[int], list[int], list[int]] | None:
    """For a Tile of a static input by constant repeats (some above 1, none 0): the input
    viewed with a unit axis before each repeated one, that view expanded to the repeats,
    and the output shape."""
    x, reps = node.input(0), node.input(1)
    if node.op_type != "Tile" or x is None or reps is None or not reps.is_constant \
            or x.meta is None or x.meta.shape is None or len(node.outputs) != 1:
        return None
    shape, r = list(x.meta.shape), [int(v) for v in np.asarray(reps.const).reshape(-1)]
    if len(r) != len(shape) or not all(isinstance(d, int) and d > 0 for d in shape) \
            or min(r, default=0) < 1 or max(r, default=1) == 1:
        return None
    view, wide = [], []
    for d, k in zip(shape, r):
        if k > 1:
            view.append(1)
            wide.append(k)
        view.append(d)
        wide.append(d)
    return view, wide, [d * k for d, k in zip(shape, r)]


def _static_tile(node: Node) -> bool:
    return _tile_shapes(node) is not None


def _as_expand(graph: Graph, node: Node) -> None:
    """Tile(x, r) of x [d0, d1, ...] is x viewed as [1, d0, 1, d1, ...] (a unit axis before
    each repeated one), expanded to [r0, d0, r1, d1, ...] and viewed as [r0*d0, r1*d1, ...]:
    output element i of an axis reads i mod d. Two views and the device's Expand, where the
    Tile had no device kernel and cut the device program (SwiftFormer's attention: four host
    round trips)."""
    view, wide, shape = _tile_shapes(node)
    step = chain(graph, node)

    def const(v):
        return graph.add_constant(None, np.array(v, np.int64))
    out = step("Reshape", [step("Expand", [step("Reshape", [node.inputs[0], const(view)]),
                                           const(wide)]), const(shape)])
    graph.replace_all_uses(node.outputs[0], out)
    graph.remove_node(node)


def _crop_pads(node: Node) -> tuple[list[int], list[int]] | None:
    """A Pad with constant pads of which some are negative (a crop: torch's ZeroPad2d((0, 0,
    1, -1)), RWKV's token shift) on a tensor of static shape: the pads [begin..., end...] over
    every axis. Only in constant mode, unless every pad is <= 0 (a crop alone: no mode)."""
    x = node.input(0)
    if x is None or x.meta is None or not x.meta.is_static or node.input(1) is None \
            or not node.input(1).is_constant:
        return None
    rank = x.meta.rank
    pads = [int(p) for p in np.asarray(node.input(1).const).reshape(-1)]
    axes = list(range(rank))
    if node.input(3) is not None:
        if not node.input(3).is_constant:
            return None
        axes = [int(a) % rank for a in np.asarray(node.input(3).const).reshape(-1)]
    if len(pads) != 2 * len(axes):
        return None
    full = [0] * (2 * rank)
    for k, ax in enumerate(axes):
        full[ax], full[ax + rank] = pads[k], pads[k + len(axes)]
    if not any(p < 0 for p in full):
        return None
    if any(p > 0 for p in full) and node.attrs.get("mode", "constant") != "constant":
        return None
    shape = x.meta.shape
    if any(-min(full[a], 0) - min(full[a + rank], 0) > shape[a] for a in range(rank)):
        return None  # cropped past empty: the op's own check reports it
    return full[:rank], full[rank:]


def _cropping_pad(node: Node) -> bool:
    return _crop_pads(node) is not None


def _as_slice_and_pad(graph: Graph, node: Node) -> None:
    """Pad with negative pads is a Slice (the crop) then a Pad of the positive ones, if any:
    the device Pad takes no negative pad, and the host Pad it fell to cut RWKV's device
    program in seven (six host round trips, ~0.35 ms of a 0.8 ms run)."""
    begin, end = _crop_pads(node)
    shape = node.input(0).meta.shape
    step = chain(graph, node)

    def const(v):
        return graph.add_constant(None, np.array(v, np.int64))
    axes = [a for a in range(len(shape)) if begin[a] < 0 or end[a] < 0]
    out = step("Slice", [node.input(0), const([-min(begin[a], 0) for a in axes]),
                         const([shape[a] + min(end[a], 0) for a in axes]), const(axes)])
    if any(p > 0 for p in begin + end):
        pads = [max(p, 0) for p in begin + end]
        out = step("Pad", [out, const(pads), node.input(2)], mode="constant")
    replace_outputs(graph, node, {0: out})


def _ml_scaler(node: Node) -> bool:
    x = node.input(0)
    return (node.op_type == "ai.onnx.ml.Scaler" and x is not None and x.meta is not None
            and x.meta.dtype.numpy == np.float32 and len(node.outputs) == 1)


def _as_scale_steps(graph: Graph, node: Node) -> None:
    """ai.onnx.ml.Scaler (scikit-learn's StandardScaler through skl2onnx) of float32 is
    (x - offset) * scale in float32: a Sub and a Mul the device runs, instead of a host
    partition of its own in front of the model."""
    offset = graph.add_constant(None, np.asarray(node.attrs.get("offset") or [0.0], np.float32))
    scale = graph.add_constant(None, np.asarray(node.attrs.get("scale") or [1.0], np.float32))
    centred = graph.add_node("Sub", [node.inputs[0], offset], name=graph.unique_name(
        f"{node.name}_offset"), after=node).outputs[0]
    scaled = graph.add_node("Mul", [centred, scale], outputs=[], name=graph.unique_name(
        f"{node.name}_scale"), after=centred.producer)
    graph.hand_over_outputs(node, [scaled])


# (match, rewrite): the rewrite replaces the node and everything reading its output
def _decided_if(node: Node) -> bool:
    cond = node.input(0)
    return (node.op_type == "If" and cond is not None and cond.is_constant
            and np.size(cond.const) == 1)


def _inline_branch(graph: Graph, node: Node) -> None:
    """An If whose condition is a constant is the branch it takes, written into the
    enclosing graph: exporters guard on shapes (torch's `if x.size(1) == ...`, silero VAD
    nests a dozen of them per LSTM), which fold once the shapes are known, and the branch's
    nodes then compile with the rest (the partition is not cut at the If)."""
    branch = node.attrs["then_branch" if bool(np.asarray(node.input(0).const).reshape(-1)[0])
                        else "else_branch"]
    vmap = copy_branch(graph, node, branch)
    for o, v in zip(node.outputs, branch.outputs):
        graph.replace_all_uses(o, vmap[v])
    graph.remove_node(node)


def _invariant_carries(node: Node) -> list[int]:
    """The Loop's carried values its body hands back unchanged (k: body input 2 + k is
    body output 1 + k)."""
    if node.op_type != "Loop":
        return []
    names = list(node.attrs.get("_outer") or [])
    body = node.attrs.get("body")
    if not isinstance(body, Graph):
        return []
    formals = [v for v in body.inputs if v.name not in names]
    n = len(node.inputs) - len(names) - 2
    if n <= 0 or len(formals) != n + 2 or len(body.outputs) < n + 1:
        return []
    return [k for k in range(n) if body.outputs[1 + k] is formals[2 + k]
            and node.inputs[2 + k] is not None]


def _loop_invariant_state(node: Node) -> bool:
    return bool(_invariant_carries(node))


def _as_enclosing_reads(graph: Graph, node: Node) -> None:
    """State a Loop carries through its body unchanged is a value the body reads from the
    enclosing graph: tf2onnx passes a Keras LSTM's weights through the loop so, and as
    carried state they are inputs of the compiled body (a matrix product packs its weights
    every iteration) where as enclosing constants they are the body's constants. The
    loop's final value of it is the value it started with."""
    keep = set(range(len(node.inputs) - len(node.attrs.get("_outer") or []) - 2)) - \
        set(_invariant_carries(node))
    names = list(node.attrs.get("_outer") or [])
    body = node.attrs["body"].copy()  # bodies are shared with the caller's graph
    formals = [v for v in body.inputs if v.name not in names]
    n = len(formals) - 2
    moved = [k for k in range(n) if k not in keep]
    body.outputs = [body.outputs[0]] + [body.outputs[1 + k] for k in sorted(keep)] + \
        body.outputs[1 + n:]
    # a formal becomes an enclosing read: its name joins _outer, its value is passed last
    body.inputs = formals[:2] + [formals[2 + k] for k in sorted(keep)] + \
        [formals[2 + k] for k in moved] + [v for v in body.inputs if v.name in names]
    ins = list(node.inputs)
    outer_vals = ins[len(ins) - len(names):] if names else []
    new_inputs = ins[:2] + [ins[2 + k] for k in sorted(keep)] + outer_vals + \
        [ins[2 + k] for k in moved]
    attrs = dict(node.attrs, body=body, _outer=names + [formals[2 + k].name for k in moved])
    loop = graph.add_node("Loop", new_inputs, outputs=0, attrs=attrs,
                          name=graph.unique_name(node.name), after=node)
    old_outputs = list(node.outputs)
    for k in moved:
        graph.replace_all_uses(old_outputs[k], ins[2 + k])
    kept = [old_outputs[k] for k in sorted(keep)] + old_outputs[n:]
    for i, out in enumerate(kept):
        spare = graph._new_value(graph.unique_name(f"{out.name}_replaced"), out.kind)
        spare.producer, spare.index = node, node.outputs.index(out)
        node.outputs[spare.index] = spare
        out.producer, out.index = loop, i
        loop.outputs.append(out)
    graph.remove_node(node)


# (match, rewrite, the op types match can accept): a node is offered only to the rows of its
# op type (every match checks its type first; offering each node to all of them was ~40,000
# calls a round on a 1,600-node mixture of experts, a tenth of its compile).
_Row = tuple[Callable[[Node], bool], Callable[[Graph, Node], None], "tuple[str, ...]"]
CANONICAL: list[_Row] = [
    (_pool_1d, _as_2d, _POOLS + _GLOBAL_POOLS),
    (_ceil_average_with_pads, _as_pad_then_average, ("AveragePool",)),
    (_group_norm, _as_layer_norm, ("InstanceNormalization", "GroupNormalization")),
    (_rms_norm, _as_rms_steps, ("RMSNormalization",)),
    (_spatial_reduce, _as_global_pool, tuple(_SPATIAL_REDUCE)),
    (_norm_reduce, _as_sum_steps, tuple(_NORM_REDUCE)),
    (float_logsumexp, as_stable_steps, ("ReduceLogSumExp",)),
    (static_trilu, as_masked_where, ("Trilu",)),
    (variadic_of_several, as_pairwise_steps, ("Sum", "Mean", "Max", "Min")),
    (einsum_as_matmul, as_matmul_steps, ("Einsum",)),
    (static_dft, as_table_product, ("DFT",)),
    (tiling_col2im, as_permutation, ("Col2Im",)),
    (depth_space_move, as_block_transpose, ("DepthToSpace", "SpaceToDepth")),
    (scan_loop, as_lifted_ops, ("Loop",)),
    (split_convs, as_one_conv, ("Concat",)),
    (ragged_expert_products, as_segment_product, ("Concat",)),
    (_tall_conv, _as_wide_conv, ("Conv",)),
    (_conv_1d, _as_conv_2d, ("Conv",)),
    (_resize_1d, _as_resize_2d, ("Resize",)),
    (gemm_group_conv, as_dense_conv, ("Conv",)),
    (_ml_scaler, _as_scale_steps, ("ai.onnx.ml.Scaler",)),
    (_is_scalar_bound, _as_clip, ("Max", "Min")),
    (_uniform_prelu, _as_leaky_relu, ("PRelu",)),
    (_static_tile, _as_expand, ("Tile",)),
    (_cropping_pad, _as_slice_and_pad, ("Pad",)),
    (onnx_rotary, as_rope, ("RotaryEmbedding",)),
    (one_hot_product, as_row_lookup, ("MatMul",)),
    (gathered_expert_product, as_product_by_all_experts, ("MatMul",)),
    (slice_scatter, as_concat, ("ScatterND",)),
    (elementwise_of_lookups, as_lookup_of_table, tuple(LOOKUP_ELEMENTWISE)),
    (static_one_hot, as_equal_where, ("OneHot",)),
    (sliced_product, as_product_of_columns, ("Slice",)),
    (_tiles_channels, _as_split, ("Slice",)),
    (_decided_if, _inline_branch, ("If",)),
    (cheap_if, select_branches, ("If",)),
    (_loop_invariant_state, _as_enclosing_reads, ("Loop",)),
    (identity_gather, as_reshape, ("Gather",)),
    (identity_gather_nd, nd_as_reshape, ("GatherND",)),
    (view_round_trip, as_source, ROUND_TRIP_VIEWS),
    (view_of_view, as_one_view, FLAT_VIEWS),
    (merged_transpose, as_transpose, ("Reshape",)),
    (split_of_concat, as_parts, ("Split",)),
    (merged_batch_op, lift_merged_batch, ("Transpose", "MatMul") + MERGED_ELEMENTWISE),
]
_BY_OP: dict[str, list[_Row]] = {}
for _row in CANONICAL:
    for _op in _row[2]:
        _BY_OP.setdefault(_op, []).append(_row)


def canonicalize(graph: Graph) -> PassResult:
    """One sweep of the rows over the nodes in order. The nodes a rewrite makes are typed
    on the spot (`_type_new`), so a later node of the same sweep whose row looks at its
    inputs' shapes sees them: a chain of rewrites, each enabled by the one before (the
    merged-batch lift walking down a residual stream, one op a step), completes in one
    sweep rather than one prepare round a step. (Eight rounds are all a stage runs:
    MobileViT's lifts outlasted them and left a Reshape, Add and LayerNorm untyped, so on
    the host, between two device programs.)"""
    done = 0
    for node in list(graph.nodes):
        if node.graph is not graph:  # removed by an earlier rewrite of this sweep
            continue
        if node.op_type == "Attention" and onnx_attention(graph, node):
            with graph.recording_additions() as added:
                as_attention_steps(graph, node)
            _type_new(graph, added)
            done += 1
            continue
        for match, rewrite, _ in _BY_OP.get(node.op_type, ()):
            if match(node):
                with graph.recording_additions() as added:
                    rewrite(graph, node)
                _type_new(graph, added)
                done += 1
                break
    return PassResult(graph, done > 0, f"{done} nodes rewritten")


def _type_new(graph: Graph, added: list[Node]) -> None:
    """Infers the outputs of the nodes a rewrite made, in the order made, where every input
    is typed; a node whose inference fails is left untyped for the next shape inference to
    report."""
    for node in added:
        if node.graph is not graph or any(o.meta is not None for o in node.outputs):
            continue
        if any(v is not None and v.meta is None for v in node.inputs):
            continue
        try:
            metas = ops.infer_node(node)
        except Exception:  # infer_shapes raises it, with its context
            continue
        for out, meta in zip(node.outputs, metas):
            out.meta = meta
