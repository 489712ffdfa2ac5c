"""Dead-node and no-op elimination."""

from __future__ import annotations

import numpy as np

from ..ir import Graph
from ..ops import value_prop
from ..ops.variables import WRITES
from ..passes import PassResult

_NO_OPS = {"Identity", "Dropout"}


def eliminate_dead_nodes(graph: Graph) -> PassResult:
    """Remove nodes none of whose outputs reach a graph output (a write to a session
    variable is kept: its effect is the point)."""
    live = set(graph.outputs)
    removed = 0
    for node in reversed(list(graph.nodes)):
        if node.op_type in WRITES or any(o in live or o.users for o in node.outputs):
            live.update(v for v in node.inputs if v is not None)
            continue
        graph.remove_node(node)
        removed += 1
    dropped = graph.remove_unused_constants()
    return PassResult(graph, removed > 0, f"{removed} nodes, {dropped} constants removed")


def _whole_slice(node) -> bool:
    """A Slice whose (static) output has its input's shape with positive steps: n of n
    elements in increasing order are all of them, in order. TensorFlow's strided_slice
    exports write them (magika's [:, :, :, 0:1] of a 1-wide axis before and after its Conv:
    a copy of 4 MB each at batch 8, and a wall between the Conv and its bias and GELU)."""
    if node.op_type != "Slice" or not node.inputs or node.inputs[0] is None:
        return False
    src, out = node.inputs[0], node.outputs[0]
    if (src.meta is None or out.meta is None or not src.meta.is_static
            or not out.meta.is_static or src.meta.shape != out.meta.shape
            or src.meta.dtype != out.meta.dtype):
        return False
    steps = node.input(4) if len(node.inputs) > 4 else None
    if steps is None:
        return True  # absent (or Slice-1's attributes): every step is 1
    return steps.is_constant and bool((np.asarray(steps.const) > 0).all())


def _zero_pad(node) -> bool:
    """A Pad whose pads are all zero (known at compile time): a copy. Encodec's padding
    arithmetic gives its 1x1 convolutions a Pad of 0 each side: a task of its own
    between a conversion out of and one back into the convolutions' format."""
    if node.op_type != "Pad" or len(node.inputs) < 2 or node.inputs[0] is None:
        return False
    pads = node.inputs[1]
    if pads is None:
        return False
    known = pads.const if pads.is_constant else value_prop.known_value(pads)
    return known is not None and np.size(known) > 0 and not np.asarray(known).any()


def _same_type_cast(node) -> bool:
    """A Cast (or CastLike) to the type its input already has: an exporter's leftover
    (torch casts a softmax to float32 after computing it in float32), a copy for nothing."""
    if node.op_type not in ("Cast", "CastLike") or not node.inputs or not node.outputs:
        return False
    src, out = node.inputs[0], node.outputs[0]
    return (src is not None and src.meta is not None and out.meta is not None
            and src.meta.dtype == out.meta.dtype)


def _single_concat(node) -> bool:
    """A Concat of one input: a copy (a KV-cache concat exported with no past: Phi's key
    and value), which would also hide the Transpose before it from the attention fusion."""
    return node.op_type == "Concat" and len(node.inputs) == 1 and node.inputs[0] is not None


def _same_size_resize(node) -> bool:
    """A nearest or linear Resize to the size it has: every output pixel maps onto its own
    input pixel (scale 1 in each coordinate mode but tf_crop_and_resize), so the output is
    the input. SegFormer's all-MLP decoder resizes each stage to the first stage's size,
    that stage's own included (a 32x32 -> 32x32 bilinear pass at batch 8: a quarter of the
    decoder's resizing)."""
    if node.op_type != "Resize" or not node.inputs or not node.outputs:
        return False
    src, out = node.inputs[0], node.outputs[0]
    scales = node.input(2)
    if scales is not None and (not scales.is_constant or (
            np.size(scales.const) and not np.all(np.asarray(scales.const) == 1))):
        return False  # a scale of 1.1 on 4 pixels keeps 4, but maps them by 1.1
    return (src is not None and src.meta is not None and out.meta is not None
            and src.meta.is_static and src.meta == out.meta
            and node.attrs.get("mode", "nearest") in ("nearest", "linear")
            and node.attrs.get("coordinate_transformation_mode", "half_pixel")
            != "tf_crop_and_resize" and not node.attrs.get("antialias", 0))


def _same_shape_view(node) -> bool:
    """A Reshape, Flatten, Squeeze, Unsqueeze, Expand or Tile to the static shape its input has
    (a Tile by ones: GIT tiles its image tokens by batch // images, 1 at batch 1):
    torch's TorchScript export of scaled_dot_product_attention reshapes Q, K, V and the
    result to the shapes they have, which hid the head-split Transposes from the Rope and
    attention rows (Falcon: the output Transpose stayed a task per layer); transformers'
    experts expand their scaled rows to `current_state.shape` before index_add_ (a copy of
    [tokens, hidden] per expert)."""
    if node.op_type not in ("Reshape", "Flatten", "Squeeze", "Unsqueeze", "Expand", "Tile") \
            or not node.inputs:
        return False
    src, out = node.inputs[0], node.outputs[0]
    return (src is not None and src.meta is not None and out.meta is not None
            and src.meta.is_static and out.meta.is_static and src.meta == out.meta)


def eliminate_identities(graph: Graph) -> PassResult:
    """Bypass Identity, inference-mode Dropout (whose mask output is unused), Casts to
    the type their input has, Slices that keep every element, one-input Concats,
    Resizes to the input's own size, views and Expands to the input's own shape and Pads
    of zero width."""
    removed = 0
    for node in list(graph.nodes):
        if node.op_type not in _NO_OPS and not _same_type_cast(node) \
                and not _whole_slice(node) and not _single_concat(node) \
                and not _same_size_resize(node) and not _same_shape_view(node) \
                and not _zero_pad(node):
            continue
        if node.op_type == "Dropout" and (len(node.outputs) > 1 and node.outputs[1].users
                                          or node.input(2) is not None and not _false(node)):
            continue
        out, src = node.outputs[0], node.inputs[0]
        if out in graph.outputs:
            continue  # graph outputs keep their names
        graph.replace_all_uses(out, src)
        if len(node.outputs) > 1 and node.outputs[1] in graph.outputs:
            continue
        graph.remove_node(node)
        removed += 1
    return PassResult(graph, removed > 0, f"{removed} no-op nodes removed")


def _false(node) -> bool:
    """Dropout's training_mode input, when constant and false, keeps it a no-op."""
    mode = node.input(2)
    return mode is not None and mode.is_constant and not bool(mode.const)
