"""Layout rules that turn a Transpose or a reshape round trip into no task at all: the
bytes an NHWC region stores are already what the graph asks for (see layout.py)."""

from __future__ import annotations

import numpy as np

from .. import ops
from ..ir import Engine, Graph, Node, TensorMeta, Value
from ..ops.registry import AttrKind, AttrSpec, DeviceKernel, Layout, OpSchema
from ..passes import PassResult
from .formats import NCHW, NHWC, is_act, is_act4d, layout_of, reads_own_layout

# A Transpose between NHWC-ordered data and the layout region moves no byte: NHWC data
# permuted to logical NCHW ([0, 3, 1, 2], a TensorFlow model's way into its convolutions)
# stored NHWC is the same bytes, and so is an NHWC-stored tensor permuted back ([0, 2, 3, 1],
# its way out) stored plain. Such a Transpose becomes a TransposeView: an alias (no task) of
# its input under the permuted shape and the other format. So does a vision transformer's
# patch embedding out of the region: [N, C, H, W] stored NHWC, flattened to [N, C, H*W] and
# transposed to [N, H*W, C], is the NHWC bytes as they are.
_INTO_REGION, _OUT_OF_REGION = [0, 3, 1, 2], [0, 2, 3, 1]


def _transpose_view_infer(node: Node, attrs):
    m = node.inputs[0].meta
    shape = attrs.get("shape") or [m.shape[p] for p in attrs["perm"]]
    return [type(m)(m.dtype, tuple(shape))]


def _transpose_view(ins, a):
    out = np.transpose(ins[0], a["perm"])
    return [out.reshape(a["shape"]) if a.get("shape") else out]


if not ops.has("TransposeView"):
    ops.register(OpSchema(
        "TransposeView", 1, 1, _transpose_view_infer, _transpose_view,
        attrs={"perm": AttrSpec(AttrKind.INTS, None), "shape": AttrSpec(AttrKind.INTS, None),
               "src_format": AttrSpec(AttrKind.STRING, NCHW),
               "dst_format": AttrSpec(AttrKind.STRING, NHWC)},
        device=lambda node, attrs: DeviceKernel("Copy", {}, (0,)), alias={0: 0},
        layout=Layout.CONVERT))


def _transpose_perm(node: Node) -> list[int] | None:
    """A device Transpose's permutation, of 4-D activations or, [0, 2, 1], 3-D ones (a
    signal [N, C, L] stored NHWC is the bytes of [N, L, C], so that Transpose is a view both
    into and out of an NHWC region)."""
    if node.op_type != "Transpose" or node.meta.engine is not Engine.DEVICE:
        return None
    x, y = node.inputs[0], node.outputs[0]
    perm = node.attrs.get("perm")
    if perm is not None and is_act(x) and is_act(y) and x.meta.rank == 3 \
            and [int(p) % 3 for p in perm] == [0, 2, 1]:
        return [0, 2, 1]
    if not (is_act4d(x) and is_act4d(y)):
        return None
    return None if perm is None else [int(p) % 4 for p in perm]


def _flattened_region_value(node: Node, outputs: set[Value]) -> tuple[Value, Node] | None:
    """For a device Transpose [0, 2, 1] of a Flatten/Reshape of an NHWC-stored [N, C, H, W]
    into [N, C, H*W] (a vision transformer's patch embedding: Conv, flatten, transpose):
    (the NHWC value, the flattening node), whose [N, H*W, C] result is the NHWC bytes."""
    if node.op_type != "Transpose" or node.meta.engine is not Engine.DEVICE:
        return None
    perm = node.attrs.get("perm")
    r = node.inputs[0]
    flat = r.producer if r is not None else None
    if perm is None or [int(p) % 3 for p in perm] != [0, 2, 1] or flat is None \
            or flat.op_type not in ("Reshape", "Flatten", "Squeeze") \
            or flat.meta.engine is not Engine.DEVICE \
            or flat.meta.partition != node.meta.partition or r in outputs or r.users != [node]:
        return None
    x = flat.inputs[0]
    if not is_act4d(x) or x.format != NHWC or r.meta is None or not r.meta.is_static \
            or not _made_in(x, node):
        return None
    n, c, h, w = x.meta.shape
    return (x, flat) if tuple(r.meta.shape) == (n, c, h * w) else None


def _made_in(x: Value, reader: Node) -> bool:
    """Whether x is made in the reader's partition: a value read in another one reaches it
    plain (`_plain_partition_outputs` converts it at the edge, after the views are made), so
    only there do its region format's bytes stand (a detector's flattened feature map read
    past a host GridSample as NHWC bytes: 4.3 off)."""
    return x.producer is not None and x.producer.meta.partition == reader.meta.partition


_POINTWISE = (Layout.UNIFORM, Layout.ELEMENTWISE, Layout.CHANNEL, Layout.CHAIN)
# Pointwise ops whose other operands broadcast numpy-style against the data (a
# BatchNormalization's [C] parameters, by contrast, belong to axis 1 at any rank).
_BROADCASTING = frozenset({"Add", "Sub", "Mul", "Div", "Pow", "Max", "Min", "PRelu"})


def _pointwise_step(e: Node, v: Value, lift: tuple[int, ...] | None = None,
                    rank: int = 0) -> bool:
    """e computes elementwise from v alone (other operands constant scalars): it gives the
    same values on a permuted v, permuted. With `lift` (v's shape is that of a value of
    `rank` with unit axes dropped: unit_lift), other constants may also broadcast to v."""
    def other_ok(w: Value | None) -> bool:
        if w is None or not w.is_constant:
            return False
        if np.size(w.const) == 1:
            return True
        return (lift is not None and e.op_type in _BROADCASTING
                and lifted_constant(w.const, v.meta.shape, lift, rank) is not None)

    return (e.meta.engine is Engine.DEVICE and len(e.outputs) == 1 and layout_of(e) in _POINTWISE
            and all(w is v or other_ok(w) for w in e.inputs)
            and sum(w is v for w in e.inputs) == 1)


def unit_lift(short: tuple[int, ...], long: tuple[int, ...]) -> tuple[int, ...] | None:
    """For a `long` shape that is `short` with unit axes added: the axis of `long` each axis
    of `short` is (in order), else None."""
    where: list[int] = []
    j = 0
    for d in short:
        while j < len(long) and long[j] != d:
            if long[j] != 1:
                return None
            j += 1
        if j == len(long):
            return None
        where.append(j)
        j += 1
    if any(long[k] != 1 for k in range(j, len(long))):
        return None
    return tuple(where)


def lifted_constant(c: np.ndarray, short: tuple[int, ...], lift: tuple[int, ...],
                    rank: int) -> np.ndarray | None:
    """A constant that broadcasts to `short`, reshaped to broadcast the same way to the
    long shape (`lift` from unit_lift); None when it does not broadcast to `short` or
    would widen it."""
    c = np.asarray(c)
    if c.ndim > len(short):
        return None
    full = (1,) * (len(short) - c.ndim) + tuple(c.shape)
    if any(a != 1 and a != b for a, b in zip(full, short)):
        return None
    shape = [1] * rank
    for axis, d in zip(lift, full):
        shape[axis] = d
    return c.reshape(shape)


def _pointwise_chain(v: Value, partition: int | None, outputs: set[Value],
                     lift: tuple[int, ...] | None = None, rank: int = 0
                     ) -> tuple[list[Node], Value]:
    """The pointwise nodes that compute v from one value, each the only reader of what it
    reads (nearest v first), and that value."""
    chain: list[Node] = []
    while v.producer is not None and len(chain) < 8:
        e = v.producer
        src = next((w for w in e.inputs if w is not None and not w.is_constant), None)
        if src is None or not _pointwise_step(e, src, lift, rank) or src.users != [e] \
                or src in outputs or e.meta.partition != partition \
                or (lift is not None and src.meta.shape != v.meta.shape):
            break
        chain.append(e)
        v = src
    return chain, v


def _retarget(chain: list[Node], source: Value, graph: Graph | None = None,
              lift: tuple[int, ...] | None = None) -> Value:
    """The chain (nearest its end first) computes from `source` instead, at its shape; with
    `lift`, its non-scalar constants are reshaped for it (new constants of `graph`)."""
    first = source
    rank = len(source.meta.shape)
    for e in reversed(chain):
        short = tuple(e.outputs[0].meta.shape)
        ins: list[Value | None] = []
        for w in e.inputs:
            if w is not None and not w.is_constant:
                ins.append(first)
            elif w is None or lift is None or np.size(w.const) == 1:
                ins.append(w)
            else:
                ins.append(graph.add_constant(None, lifted_constant(w.const, short, lift, rank)))
        e.set_inputs(ins)
        e.outputs[0].meta = TensorMeta(e.outputs[0].meta.dtype, tuple(source.meta.shape))
        first = e.outputs[0]
    return first


def drop_reshape_round_trips(graph: Graph, outputs: set[Value]) -> int:
    """A 4-D value reshaped away and back to its own shape with only pointwise nodes between
    (a 1-D convolution made 2-D, its bias and activation on the 3-D view, the next one's 2-D
    view): the pointwise nodes run on the 4-D value, so the convolutions meet (and fuse with
    what follows them) instead of going through two reshapes. Constants other than scalars
    come along when the reshape only drops unit axes (a [C, 1] bias becomes [C, 1, 1])."""
    count = 0
    for node in list(graph.nodes):
        if node.graph is None or node.op_type not in ("Reshape", "Unsqueeze") \
                or node.meta.engine is not Engine.DEVICE:
            continue
        y = node.outputs[0]
        x = node.inputs[0]
        if not is_act4d(y) or not y.meta.is_static or y in outputs or x is None \
                or x.meta is None or not x.meta.is_static or x.users != [node]:
            continue  # (another reader of x would see the chain change shape)
        lift = unit_lift(tuple(x.meta.shape), tuple(y.meta.shape))
        chain, q = _pointwise_chain(x, node.meta.partition, outputs, lift, len(y.meta.shape))
        backs = _views_back_to(q, y, chain[-1] if chain else node, outputs)
        if not backs:
            continue
        result = _retarget(chain, backs[-1].inputs[0], graph, lift)
        graph.replace_all_uses(y, result)
        graph.remove_node(node)
        for back in backs:
            graph.remove_node(back)
        count += 1
    return count


def unit_transposes_as_views(graph: Graph) -> int:
    """A device Transpose of an activation (rank 3 to 5) that keeps N and C and moves only
    unit axes among the others (coordinate attention's [N, C, 1, W] turned [N, C, W, 1]) is
    the same bytes plain, and stored NHWC too ([N, 1, W, C] and [N, W, 1, C]): it becomes a
    Reshape, a view in either format (`unit_view`), instead of a task between two conversions
    out of the region and back. Returns how many."""
    count = 0
    for node in list(graph.nodes):
        if node.op_type != "Transpose" or node.meta.engine is not Engine.DEVICE:
            continue
        x, y = node.inputs[0], node.outputs[0]
        perm = node.attrs.get("perm")
        if perm is None or not (is_act(x) and is_act(y)) or x.meta.rank != y.meta.rank:
            continue
        rank = x.meta.rank
        perm = [int(p) % rank for p in perm]
        moved = [p for p in perm if x.meta.shape[p] != 1]
        if perm[:2] != [0, 1] or moved != sorted(moved):
            continue
        target = graph.add_constant(None, np.asarray(y.meta.shape, np.int64))
        view = graph.add_node("Reshape", [x, target], outputs=[], after=node,
                              name=graph.unique_name(f"{node.name}_view"))
        view.meta.engine, view.meta.partition = node.meta.engine, node.meta.partition
        view.meta.stream = node.meta.stream
        graph.hand_over_outputs(node, [view])  # y keeps its name, readers and meta
        count += 1
    return count


_BACK_VIEWS = ("Reshape", "Squeeze", "Flatten", "Unsqueeze")
_MAX_BACK_VIEWS = 4


def _views_back_to(q: Value, y: Value, reader: Node, outputs: set[Value]) -> list[Node]:
    """The views (last first) that made q from a value shaped like y, each read only by the
    next (a Conv run along W reshaped back to [N, C, H, 1], then squeezed: two views), or
    [] when q is not such a chain's end."""
    backs: list[Node] = []
    for _ in range(_MAX_BACK_VIEWS):
        back = q.producer
        if back is None or back.op_type not in _BACK_VIEWS \
                or back.meta.engine is not Engine.DEVICE \
                or back.meta.partition != reader.meta.partition or q in outputs \
                or q.users != [reader]:
            return []
        backs.append(back)
        z = back.inputs[0]
        if z is None or z.meta is None:
            return []
        if z.meta == y.meta:
            return backs
        q, reader = z, back
    return []


def reshape_round_trips(graph: Graph) -> PassResult:
    """The pass form of drop_reshape_round_trips, before fusion (what it exposes fuses)."""
    n = drop_reshape_round_trips(graph, set(graph.outputs))
    if n:
        graph.remove_unused_constants()
    return PassResult(graph, n > 0, f"{n} reshape round trips dropped")


def into_region_views(graph: Graph, own: dict[Node, str], outputs: set[Value]) -> int:
    """A plain [N, L, C] transposed to [N, C, L] (through pointwise nodes), then reshaped to
    the [N, C, H, W] (H * W = L) a region node reads NHWC: those NHWC bytes are the [N, L, C]
    ones, so the pointwise nodes run before the transpose and it becomes a TransposeView (a
    speech encoder's LayerNorm over channels, on its way into the next convolution)."""
    count = 0
    for node in list(graph.nodes):
        if node.op_type not in ("Reshape", "Unsqueeze") or node.meta.engine is not Engine.DEVICE:
            continue
        y, r = node.outputs[0], node.inputs[0]
        if not is_act4d(y) or y.format or y in outputs or not y.meta.is_static or r is None \
                or r.users != [node] or r in outputs or not y.users:
            continue
        if not all(own.get(u) == NHWC and u.meta.partition == node.meta.partition
                   and all(reads_own_layout(u, i) for i, w in enumerate(u.inputs) if w is y)
                   for u in y.users):
            continue
        chain, v = _pointwise_chain(r, node.meta.partition, outputs)
        t = v.producer
        if t is None or t.op_type != "Transpose" or t.meta.engine is not Engine.DEVICE \
                or t.meta.partition != node.meta.partition or v in outputs:
            continue
        p = t.inputs[0]
        perm = t.attrs.get("perm")
        unit = _unit_axis_view(p, t, outputs)
        if unit is not None and perm is not None and [int(q) % 4 for q in perm] == [0, 2, 1, 3]:
            p, perm = unit.inputs[0], [0, 2, 1]  # the transpose of [N, L, C] unsqueezed at 3
        if p is None or p.format or p.meta is None or not p.meta.is_static or p.meta.rank != 3 \
                or perm is None or [int(q) % 3 for q in perm] != [0, 2, 1]:
            continue
        n, c, h, w = y.meta.shape
        if tuple(p.meta.shape) != (n, h * w, c):
            continue
        # the pointwise nodes now compute on [N, L, C]; the transpose reads their result
        t.set_inputs([_retarget(chain, p)])
        if unit is not None and p is unit.inputs[0]:
            graph.remove_node(unit)
        graph.nodes.remove(t)
        graph.nodes.insert(graph.nodes.index(node), t)
        t.op_type = "TransposeView"
        t.attrs = {"perm": [0, 2, 1], "shape": [n, c, h, w], "src_format": NCHW,
                   "dst_format": NHWC}
        out = t.outputs[0]
        out.meta, out.format = y.meta, NHWC
        graph.replace_all_uses(y, out)
        graph.remove_node(node)
        count += 1
    return count


def _unit_axis_view(p: Value | None, reader: Node, outputs: set[Value]) -> Node | None:
    """The Unsqueeze/Reshape that made the static 4-D p = [N, L, C, 1] from [N, L, C], when
    only `reader` reads p (magika's Unsqueeze before its Transpose [0, 2, 1, 3])."""
    if p is None or p.producer is None or p.producer.op_type not in ("Unsqueeze", "Reshape") \
            or p.users != [reader] or p in outputs or p.meta is None or not p.meta.is_static \
            or p.meta.rank != 4 or p.meta.shape[3] != 1:
        return None
    q = p.producer.inputs[0]
    if q is None or q.meta is None or tuple(q.meta.shape) != tuple(p.meta.shape[:3]) \
            or p.producer.meta.partition != reader.meta.partition:
        return None
    return p.producer


def transpose_views(graph: Graph, own: dict[Node, str]) -> int:
    """Transposes that only change the format become TransposeViews (see above); formats
    of the region are already set. Returns how many."""
    outputs = set(graph.outputs)
    count = 0
    for node in list(graph.nodes):
        flattened = _flattened_region_value(node, outputs)
        if flattened is not None and not node.outputs[0].format:
            x, flat = flattened
            n, c, h, w = x.meta.shape
            node.set_inputs([x])
            graph.remove_node(flat)
            node.op_type = "TransposeView"
            node.attrs = {"perm": _OUT_OF_REGION, "shape": [n, h * w, c],
                          "src_format": NHWC, "dst_format": NCHW}
            count += 1
            continue
        perm = _transpose_perm(node)
        if perm is None:
            continue
        x, y = node.inputs[0], node.outputs[0]
        if perm in (_INTO_REGION, [0, 2, 1]) and not x.format and y not in outputs:
            # into the region: worth it when a region node reads y in NHWC; y must not leave
            # the partition (a partition's edges are plain)
            read_nhwc = any(own.get(u) == NHWC and any(
                w is y and reads_own_layout(u, i) for i, w in enumerate(u.inputs))
                for u in y.users)
            if not read_nhwc or any(u.meta.partition != node.meta.partition for u in y.users):
                continue
            fmt = (NCHW, NHWC)
        elif perm in (_OUT_OF_REGION, [0, 2, 1]) and x.format == NHWC and not y.format \
                and _made_in(x, node):
            fmt = (NHWC, NCHW)
        else:
            continue
        node.op_type = "TransposeView"
        node.attrs = {"perm": perm, "src_format": fmt[0], "dst_format": fmt[1]}
        y.format = NHWC if fmt[1] == NHWC else ""
        count += 1
    return count
