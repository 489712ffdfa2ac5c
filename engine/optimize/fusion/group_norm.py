"""Fusion row group_norm: a group normalization's steps become one graphengine.GroupNorm.

GroupNormalization and InstanceNormalization are canonicalized to a LayerNormalization of
[N, G, rest] between two Reshapes, then the per-channel scale and bias (a Mul and an Add);
torch exports nn.GroupNorm as those same steps (Reshape -> InstanceNormalization of [N, G,
rest] -> Reshape -> Mul -> Add). The Reshapes leave the convolution region (every GroupNorm
between NHWC convolutions cost two TransData: an unseen BiT at batch 8, 26 TransData 1.42 ms
of 9.96) and the affine and the activation after it ran as tasks of their own. The row takes

    x [N, C, spatial...] -> Reshape [N, G, rest] -> LayerNormalization (axis -1)
      -> Reshape back to x's shape -> per-channel or scalar constant Mul / Add / Sub ...
      -> an activation (an activation op, or x * Sigmoid(alpha x) spelled out: SiLU, QuickGELU)

(either Reshape absent when x already has that shape: an InstanceNormalization of a rank-3
x) and makes GroupNorm(x, scale, bias) with the activation as its attribute. The
LayerNormalization's own scale and bias must repeat with the channel, that is be constant
over each channel's positions (an identity, as canonicalize and torch write it); they fold
into the per-channel scale and bias with the constants after it (in float64, rounded once).
"""

from __future__ import annotations

import numpy as np

from ...ir import Graph, Node, Value
from ...ops.group_norm import ACTIVATIONS, GROUP_NORM
from .activation import _epilogue
from .match import VIEWS, Fusion, on_device, other, replace_region, sole_producer

_AFFINE = ("Mul", "Add", "Sub")


def _reader(graph: Graph, v: Value) -> Node | None:
    """The only reader of v, when v is not a graph output."""
    if len(v.users) != 1 or v in graph.outputs:
        return None
    return v.users[0]


def _within_group(v: Value | None, rest: int, per_group: int) -> np.ndarray | None:
    """The LayerNormalization's scale or bias as one value per channel of a group: the
    constant broadcast over [rest] must hold one value along each channel's positions."""
    if v is None or not v.is_constant:
        return None
    arr = np.asarray(v.const)
    if arr.ndim > 1 or arr.size not in (1, rest):
        return None
    flat = arr.reshape(-1)
    if flat.size > 1 and (flat == flat[0]).all():  # one value (the ones and zeros canonicalize
        # and the sample norm write, C * L long): no per-position check
        return np.full(per_group, float(flat[0]))
    arr = arr.astype(np.float64)
    per_position = np.broadcast_to(arr.reshape(-1), (rest,)).reshape(per_group, -1)
    if not np.all(per_position == per_position[:, :1]):
        return None
    return per_position[:, 0]


def _per_channel(node: Node, v: Value, shape: tuple[int, ...]) -> np.ndarray | None:
    """The other operand of an affine step on a value of `shape`, as [C] when it is a scalar
    or per-channel float32 constant ([C, 1, ...], [1, C, 1, ...]) that does not widen it."""
    c = next((u for u in node.inputs if u is not v), None)
    if c is None or not c.is_constant or len(node.inputs) != 2:
        return None
    if node.op_type == "Sub" and node.input(0) is not v:  # c - x is no affine step of x
        return None
    arr = np.asarray(c.const)
    if arr.dtype != np.float32 or arr.ndim > len(shape):
        return None
    full = arr.reshape((1,) * (len(shape) - arr.ndim) + arr.shape)
    if full.shape[0] != 1 or any(d != 1 for d in full.shape[2:]) \
            or full.shape[1] not in (1, shape[1]):
        return None
    return np.broadcast_to(full.reshape(-1).astype(np.float64), (shape[1],))


def _match(graph: Graph, ln: Node):
    if ln.op_type != "LayerNormalization" or ln.input(0) is None \
            or any(o.users or o in graph.outputs for o in ln.outputs[1:]):
        return None
    flat = ln.inputs[0]
    if flat.meta is None or not flat.meta.is_static or flat.meta.rank != 3 \
            or flat.meta.dtype.numpy != np.float32 \
            or int(ln.attrs.get("axis", -1)) not in (-1, 2):
        return None
    n, groups, rest = (int(d) for d in flat.meta.shape)
    # the views after it (a canonical Reshape back, torch's Reshape to x's shape): the last
    # one's shape is what the affine and activation see, [N, C, spatial...]
    nodes = [ln]
    v = ln.outputs[0]
    while (back := _reader(graph, v)) is not None and back.op_type in VIEWS \
            and back.outputs[0].meta is not None and back.outputs[0].meta.is_static:
        nodes.append(back)
        v = back.outputs[0]
    shape = tuple(int(d) for d in v.meta.shape)
    if len(shape) < 3 or shape[0] != n or shape[1] % groups \
            or int(np.prod(shape[1:])) != groups * rest:
        return None
    # the views before it, up to the first value that has those channels
    x = flat
    while not _same_channels(x, shape):
        first = sole_producer(graph, x, set(VIEWS))
        if first is None:
            return None
        nodes.insert(0, first)
        x = first.inputs[0]
    per_group = shape[1] // groups
    w = _within_group(ln.input(1), rest, per_group)
    b = _within_group(ln.input(2), rest, per_group) if ln.input(2) is not None \
        else np.zeros(per_group)
    if w is None or b is None:
        return None
    scale, shift = np.tile(w, groups), np.tile(b, groups)
    attrs: dict = {"num_groups": groups, "epsilon": float(ln.attrs.get("epsilon", 1e-5))}
    while (nxt := _reader(graph, v)) is not None or (swish := _swish(graph, v)) is not None:
        if nxt is None:  # x * Sigmoid(alpha x): a diffusion UNet's SiLU after its GroupNorm
            attrs.update(activation="Swish", activation_alpha=swish[1])
            nodes += swish[0]
            v = swish[0][-1].outputs[0]
            break
        if nxt.op_type in _AFFINE and nxt.outputs[0].meta is not None \
                and tuple(nxt.outputs[0].meta.shape or ()) == shape:
            c = _per_channel(nxt, v, shape)
            if c is None:
                break
            if nxt.op_type == "Mul":
                scale, shift = scale * c, shift * c
            else:
                shift = shift + (c if nxt.op_type == "Add" else -c)
        else:
            act = _epilogue(nxt)
            if act is None or act[0] is not v or act[1] not in ACTIVATIONS:
                break
            kind = act[2][""]
            if kind not in ACTIVATIONS:
                break
            attrs["activation"] = kind
            attrs.update({f"activation{k}": val for k, val in act[2].items() if k})
            nodes.append(nxt)
            v = nxt.outputs[0]
            break
        nodes.append(nxt)
        v = nxt.outputs[0]
    found = _through_views(graph, x, v, shape)
    if found is None:
        return None
    source, ups, down = found
    nodes = ups + nodes + down
    # a LayerNormalization alone (a transformer's over [B, L, H] with an identity affine is
    # one of L groups) stays what it is: nothing joins it
    if len(nodes) == 1 or not on_device(*nodes):
        return None
    return source, nodes, scale.astype(np.float32), shift.astype(np.float32), attrs


def _swish(graph: Graph, v: Value) -> tuple[list[Node], float] | None:
    """(its nodes, alpha) when v's only readers compute v * Sigmoid(alpha v): torch's SiLU
    export (Sigmoid reads v, alpha 1) or QuickGELU's (Sigmoid of Mul(v, 1.702), a float32
    scalar constant the Sigmoid alone reads)."""
    if len(v.users) != 2 or v in graph.outputs:
        return None
    scaled, alpha, sig = None, 1.0, next((u for u in v.users if u.op_type == "Sigmoid"), None)
    if sig is None:
        scaled = next((u for u in v.users if u.op_type == "Mul" and len(u.inputs) == 2
                       and other(u, v) is not None and other(u, v).is_constant), None)
        k = other(scaled, v).const if scaled is not None else None
        if k is None or k.size != 1 or k.dtype != np.float32 or k.ndim > len(v.meta.shape or ()) \
                or not np.isfinite(k).all():
            return None
        alpha = float(k.reshape(()))
        sig = _reader(graph, scaled.outputs[0])
        if sig is None or sig.op_type != "Sigmoid":
            return None
    if len(sig.outputs) != 1:
        return None
    mul = _reader(graph, sig.outputs[0])
    first = scaled if scaled is not None else sig
    if mul is None or mul.op_type != "Mul" or {id(u) for u in v.users} != {id(first), id(mul)} \
            or len(mul.inputs) != 2 or {id(i) for i in mul.inputs} != {id(v), id(sig.outputs[0])}:
        return None
    return ([scaled] if scaled is not None else []) + [sig, mul], alpha


def _same_channels(v: Value, shape: tuple[int, ...]) -> bool:
    """Whether v holds a value of `shape` as [N, C, other spatial axes] (a view that only
    regroups the spatial positions: a 1-D Conv's [N, C, 1, L] for [N, C, L])."""
    m = v.meta
    return (m is not None and m.is_static and m.rank >= 3 and m.dtype.numpy == np.float32
            and tuple(int(d) for d in m.shape[:2]) == shape[:2]
            and int(np.prod(m.shape[2:])) == int(np.prod(shape[2:])))


def _through_views(graph: Graph, x: Value, tail: Value, shape: tuple[int, ...]
                   ) -> tuple[Value, list[Node], list[Node]] | None:
    """(the value the GroupNorm reads, the views before and after it that it replaces), or
    None when its output would not have the shape its readers take.

    A speech encoder's 1-D convolutions run as 2-D ones of [N, C, 1, L] (canonicalize), and
    the group norm between two of them reads and writes [N, C, L] views of those. When views
    of the same channels and positions lead from such a value to x and from the result back
    to that value's shape, the GroupNorm reads and writes it directly: no view is left
    between the convolutions to force the plain layout."""
    sources = [(x, [])]
    ups: list[Node] = []
    src = x
    while (view := sole_producer(graph, src, set(VIEWS))) is not None \
            and _same_channels(view.inputs[0], shape):
        ups = [view, *ups]
        src = view.inputs[0]
        sources.append((src, ups))
    downs: dict[tuple, list[Node]] = {shape: []}
    down: list[Node] = []
    v = tail
    while (view := _reader(graph, v)) is not None and view.op_type in VIEWS \
            and _same_channels(view.outputs[0], shape):
        down = [*down, view]
        v = view.outputs[0]
        downs.setdefault(tuple(int(d) for d in v.meta.shape), down)
    for src, ups in reversed(sources):  # the furthest up first
        found = downs.get(tuple(int(d) for d in src.meta.shape))
        if found is not None:
            return src, ups, found
    return None


def _rewrite(graph: Graph, ln: Node, ctx) -> str:
    x, nodes, scale, shift, attrs = ctx
    node = replace_region(graph, nodes[-1], nodes, GROUP_NORM,
                          [x, graph.add_constant(None, scale), graph.add_constant(None, shift)],
                          attrs)
    act = f" + {attrs['activation']}" if "activation" in attrs else ""
    return (f"GroupNorm: {len(nodes)} nodes -> {node.name} ({attrs['num_groups']} groups"
            f"{act})")


ROW = Fusion("group_norm", _match, _rewrite, produces=("GroupNorm",))
