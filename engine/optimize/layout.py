"""Layout assignment: keep 4-D activations in one convolution-friendly format inside
device partitions.

Keeping every activation between convolutions in the format the convolutions run fastest
on avoids a reorder around each kernel; TransData nodes convert at the edges of the region
only (typically the graph's input and the flatten before the classifier), and inverse
TransData pairs are removed. Where both formats order the bytes the same way (one channel
in NHWC, or 1x1 spatial with whole channel blocks: a global pool's [N,C,1,1] output before
the classifier) the conversion is a FormatView instead: the same bytes under the other
format name, which the memory planner aliases and which runs no task. A Transpose that only
turns NHWC-ordered data into the region's NHWC storage or back (a TensorFlow model's
[0, 3, 1, 2] into its convolutions, [0, 2, 3, 1] out of them) becomes such a view too, a
TransposeView. The runtime executes exactly the formats chosen here (tensor slots carry
them).

The region's format (`region_format`): NHWC, or oneDNN's blocked format for the CPU
(nChw16c with AVX-512, nChw8c with AVX2; the target's `blocked_format`). oneDNN's brgemm
convolutions (NHWC) are its default choice, but its direct 1x1 and depthwise kernels on
blocked data are clearly faster on small images and channel counts (MobileNetV2 on two
AVX-512 cores: the convolutions take ~25% less time blocked at batch 1 and 32), and only
they fuse a depthwise convolution into a 1x1 without a round trip through memory (the
conv_dw fusion). "auto" picks the blocked format for graphs with depthwise convolutions and
NHWC otherwise.

A node is layout-agnostic when the device kernel computes the same result in the region's
format; its op schema says which kind it is (`OpSchema.layout`, ops/registry.py `Layout`):
convolutions (CONV), pools, BatchNormalization and unary elementwise ops (UNIFORM), binary
elementwise ops whose inputs are activations of one shape or scalar constants
(ELEMENTWISE), elementwise chains (CHAIN) and Concat of 4-D activations (CONCAT: the kernel
joins the bytes as stored; blocked only when no operand's channels would be padded). Every
other device op (PLAIN) reads and writes plain NCHW: the pass converts its region inputs
back to NCHW.
In a blocked region, a value whose channels are not a multiple of the block is stored
padded (zero channels up to the next block) when only convolutions read it — the runtime
lets no other kernel touch a padded tensor — and NHWC otherwise. A convolution reads a
plain input with fewer channels than a block (the image) as it is: oneDNN's first-layer
kernels take it directly.
"""

from __future__ import annotations

import numpy as np

from .. import ops
from ..dtypes import DType
from ..ir import Engine, Graph, Node, TensorMeta, Value
from ..ops.conv_fused import DEPTHWISE
from ..ops.registry import AttrKind, AttrSpec, DeviceKernel, Layout, OpSchema
from ..passes import PassResult
from ..target import Target
from ..target import get as get_target

NCHW, NHWC = "nchw", "nhwc"
BLOCKS = {"nChw8c": 8, "nChw16c": 16}
REGION_FORMATS = ("auto", NHWC, "nChw8c", "nChw16c")

def _register_conversion(name: str, device, alias: dict[int, int] | None = None) -> None:
    """A format conversion op: logically an identity, only the bytes' order may change."""
    if ops.has(name):
        return

    def infer(node: Node, attrs):
        return [node.inputs[0].meta]

    def compute(inputs, attrs):
        return [inputs[0]]

    ops.register(OpSchema(
        name, 1, 1, infer, compute,
        attrs={"src_format": AttrSpec(AttrKind.STRING, NCHW),
               "dst_format": AttrSpec(AttrKind.STRING, NHWC)},
        device=device, alias=alias or {}, layout=Layout.CONVERT))


_register_conversion("TransData", lambda node, attrs: DeviceKernel(
    "TransData", {"src_format": attrs["src_format"], "dst_format": attrs["dst_format"]}, (0,)))
# Same bytes in both formats: an alias of the input (schema.alias), no task.
_register_conversion("FormatView", lambda node, attrs: DeviceKernel("Copy", {}, (0,)),
                     alias={0: 0})


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
    if node.op_type != "Transpose" or node.meta.engine is not Engine.DEVICE:
        return None
    x, y = node.inputs[0], node.outputs[0]
    if not (_is_act4d(x) and _is_act4d(y)):
        return None
    perm = node.attrs.get("perm")
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
    if not _is_act4d(x) or x.format != NHWC or r.meta is None or not r.meta.is_static:
        return None
    n, c, h, w = x.meta.shape
    return (x, flat) if tuple(r.meta.shape) == (n, c, h * w) else None


_POINTWISE = (Layout.UNIFORM, Layout.ELEMENTWISE, Layout.CHANNEL, Layout.CHAIN)


def _pointwise_step(e: Node, v: Value) -> bool:
    """e computes elementwise from v alone (other operands constant scalars): it gives the
    same values on a permuted v, permuted."""
    return (e.meta.engine is Engine.DEVICE and len(e.outputs) == 1 and layout_of(e) in _POINTWISE
            and all(w is v or (w is not None and w.is_constant and np.size(w.const) == 1)
                    for w in e.inputs)
            and sum(w is v for w in e.inputs) == 1)


def _pointwise_chain(v: Value, partition: int | None, outputs: set[Value]
                     ) -> tuple[list[Node], Value]:
    """The pointwise nodes that compute v from one value, each the only reader of what it
    reads (nearest v first), and that value."""
    chain: list[Node] = []
    while v.producer is not None and len(chain) < 8:
        e = v.producer
        src = next((w for w in e.inputs if w is not None and not w.is_constant), None)
        if src is None or not _pointwise_step(e, src) or src.users != [e] or src in outputs \
                or e.meta.partition != partition:
            break
        chain.append(e)
        v = src
    return chain, v


def _retarget(chain: list[Node], source: Value) -> Value:
    """The chain (nearest its end first) computes from `source` instead, at its shape."""
    first = source
    for e in reversed(chain):
        e.set_inputs([first if (w is not None and not w.is_constant) else w for w in e.inputs])
        e.outputs[0].meta = TensorMeta(e.outputs[0].meta.dtype, tuple(source.meta.shape))
        first = e.outputs[0]
    return first


def _drop_reshape_round_trips(graph: Graph, outputs: set[Value]) -> int:
    """A 4-D value reshaped away and back to its own shape with only pointwise nodes between
    (a 1-D convolution made 2-D, its activation on the 3-D view, the next one's 2-D view):
    the pointwise nodes run on the 4-D value, so the convolutions meet in the region instead
    of through two conversions."""
    count = 0
    for node in list(graph.nodes):
        if node.graph is None or node.op_type not in ("Reshape", "Unsqueeze") \
                or node.meta.engine is not Engine.DEVICE:
            continue
        y = node.outputs[0]
        if not _is_act4d(y) or not y.meta.is_static or y in outputs or node.inputs[0] is None:
            continue
        chain, q = _pointwise_chain(node.inputs[0], node.meta.partition, outputs)
        back = q.producer
        if back is None or back.op_type not in ("Reshape", "Squeeze", "Flatten") \
                or back.meta.engine is not Engine.DEVICE \
                or back.meta.partition != node.meta.partition or q in outputs \
                or q.users != [chain[-1] if chain else node]:
            continue
        z = back.inputs[0]
        if z is None or z.meta != y.meta:
            continue
        result = _retarget(chain, z)
        graph.replace_all_uses(y, result)
        graph.remove_node(node)
        graph.remove_node(back)
        count += 1
    return count


def _into_region_views(graph: Graph, own: dict[Node, str], outputs: set[Value]) -> int:
    """A plain [N, L, C] transposed to [N, C, L] (through pointwise nodes), then reshaped to
    the [N, C, H, W] (H * W = L) a region node reads NHWC: those NHWC bytes are the [N, L, C]
    ones, so the pointwise nodes run before the transpose and it becomes a TransposeView (a
    speech encoder's LayerNorm over channels, on its way into the next convolution)."""
    count = 0
    for node in list(graph.nodes):
        if node.op_type not in ("Reshape", "Unsqueeze") or node.meta.engine is not Engine.DEVICE:
            continue
        y, r = node.outputs[0], node.inputs[0]
        if not _is_act4d(y) or y.format or y in outputs or not y.meta.is_static or r is None \
                or r.users != [node] or r in outputs or not y.users:
            continue
        if not all(own.get(u) == NHWC and u.meta.partition == node.meta.partition
                   and all(_reads_own_layout(u, i) for i, w in enumerate(u.inputs) if w is y)
                   for u in y.users):
            continue
        chain, v = _pointwise_chain(r, node.meta.partition, outputs)
        t = v.producer
        if t is None or t.op_type != "Transpose" or t.meta.engine is not Engine.DEVICE \
                or t.meta.partition != node.meta.partition or v in outputs:
            continue
        p = t.inputs[0]
        perm = t.attrs.get("perm")
        if p is None or p.format or p.meta is None or not p.meta.is_static or p.meta.rank != 3 \
                or perm is None or [int(q) % 3 for q in perm] != [0, 2, 1]:
            continue
        n, c, h, w = y.meta.shape
        if tuple(p.meta.shape) != (n, h * w, c):
            continue
        # the pointwise nodes now compute on [N, L, C]; the transpose reads their result
        t.set_inputs([_retarget(chain, p)])
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


def _transpose_views(graph: Graph, own: dict[Node, str]) -> int:
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
        if perm == _INTO_REGION and not x.format and y not in outputs:
            # into the region: worth it when a region node reads y in NHWC; y must not leave
            # the partition (a partition's edges are plain)
            read_nhwc = any(own.get(u) == NHWC and any(
                w is y and _reads_own_layout(u, i) for i, w in enumerate(u.inputs))
                for u in y.users)
            if not read_nhwc or any(u.meta.partition != node.meta.partition for u in y.users):
                continue
            fmt = (NCHW, NHWC)
        elif perm == _OUT_OF_REGION and x.format == NHWC and not y.format:
            fmt = (NHWC, NCHW)
        else:
            continue
        node.op_type = "TransposeView"
        node.attrs = {"perm": perm, "src_format": fmt[0], "dst_format": fmt[1]}
        y.format = NHWC if fmt[1] == NHWC else ""
        count += 1
    return count


def same_bytes(shape, a: str, b: str) -> bool:
    """Whether formats `a` and `b` lay a tensor of `shape` out identically."""
    if (a or NCHW) == (b or NCHW):
        return True
    if len(shape) != 4:
        return False
    c, hw = shape[1], shape[2] * shape[3]

    def like_nchw(f: str) -> bool:
        if f == NCHW:
            return True
        if f == NHWC:
            return c == 1 or hw == 1
        return hw == 1 and c % BLOCKS[f] == 0  # whole blocks, nothing padded

    return like_nchw(a or NCHW) and like_nchw(b or NCHW)


def layout_of(node: Node) -> Layout:
    """What the node's device kernel does with formats (its op schema's `layout`)."""
    return ops.get(node.op_type, node).layout


def _is_conversion(node: Node) -> bool:
    return layout_of(node) is Layout.CONVERT


def _is_act4d(v: Value | None) -> bool:
    return (v is not None and not v.is_constant and v.meta is not None and v.meta.is_static
            and v.meta.rank == 4 and v.meta.dtype is DType.FLOAT32)


def _is_head(node: Node) -> bool:
    """A convolution whose output is not 4-D (ConvHead: a pool and a fully connected layer
    follow the Conv, optimize/fusion/conv_head.py): it reads its input in any format and
    writes a plain [N, classes]."""
    out = node.outputs[0].meta if node.outputs else None
    return layout_of(node) is Layout.CONV and out is not None and out.rank != 4


def _agnostic(node: Node) -> bool:
    """Whether the node may run with its 4-D activations NHWC."""
    if node.meta.engine is not Engine.DEVICE or not node.outputs:
        return False
    if _is_head(node):
        return _is_act4d(node.input(0))
    out = node.outputs[0]
    if not _is_act4d(out) or len(node.outputs) != 1:
        return False
    kind = layout_of(node)
    if kind in (Layout.CONV, Layout.UNIFORM):
        return _is_act4d(node.input(0))
    if kind in (Layout.ELEMENTWISE, Layout.CHANNEL):
        # a scalar operand broadcasts alike in every format; a per-channel one is read plain
        ins = [v for v in node.inputs if v is not None]
        return any(_is_act4d(v) and v.meta == out.meta for v in ins) and all(
            _is_act4d(v) and v.meta == out.meta
            or v.is_constant and v.meta is not None and v.meta.numel == 1
            or kind is Layout.CHANNEL and _per_channel(v, out) for v in ins)
    if kind is Layout.CHAIN:  # flat: any format its full-size tensors share
        return all(v.is_constant and v.meta.numel == 1 if not _is_act4d(v)
                   else v.meta == out.meta for v in node.inputs)
    if kind is Layout.CONCAT:  # joins the bytes as stored, in any one format
        return bool(node.inputs) and all(_is_act4d(v) for v in node.inputs)
    return False


def _reached_from_convolutions(candidates: list[Node]) -> list[Node]:
    """The candidates (in graph order) that are convolutions or read a value another one
    in the region made. An agnostic op no convolution's output reaches (a ViT's scaled
    attention scores [N, heads, L, L], whose only convolution is the patch embedding) would
    only put a conversion on each side of itself."""
    inside: set[Node] = set()
    for node in candidates:
        if layout_of(node) is Layout.CONV or any(
                v is not None and v.producer in inside for v in node.inputs):
            inside.add(node)
    return [n for n in candidates if n in inside]


def _joins_outputs(node: Node, outputs: set[Value]) -> bool:
    """A Concat along the batch axis into a graph output (the batch split's join) stays
    plain: each part is converted where it is made, on its own stream, instead of the whole
    batch at the end on one (the branchy conv towers at batch 32: 8.8 ms on one lane while
    the other waited)."""
    return (layout_of(node) is Layout.CONCAT and node.outputs[0] in outputs
            and int(node.attrs.get("axis", 0)) % 4 == 0)


def _per_channel(v: Value, out: Value) -> bool:
    """Whether v is a per-channel operand [N|1, C, 1, 1] of out [N, C, H, W] (H*W > 1): a
    squeeze-excitation's scale. Plain, its bytes are the same in NHWC and blocked formats
    (runtime_ext/src/host/layout.h, per_channel_of)."""
    if not _is_act4d(v) and not (v.is_constant and v.meta is not None and v.meta.rank == 4):
        return False
    s, y = v.meta.shape, out.meta.shape
    return (y[2] * y[3] > 1 and s[1] == y[1] and s[2] == 1 and s[3] == 1
            and s[0] in (1, y[0]))


def _reads_own_layout(node: Node, index: int) -> bool:
    """Whether input `index` of an agnostic node is read in the node's own layout."""
    if layout_of(node) in (Layout.CONV, Layout.UNIFORM):
        return index == 0 or index == _residual(node)
    if layout_of(node) is Layout.CHANNEL:
        v = node.inputs[index]
        return v is None or not _per_channel(v, node.outputs[0])
    return True


def _residual(node: Node) -> int | None:
    """The input a node adds to its output (a Conv's fused `_sum`, ConvBlock's R)."""
    if node.attrs.get("_sum"):
        return node.attrs["_sum_input"]
    return ops.get(node.op_type, node).residual


def storage_nbytes(v: Value) -> int:
    """Bytes of v's storage in its format: a padded blocked format stores whole blocks."""
    meta = v.meta
    block = BLOCKS.get(v.format)
    if block is None or meta.rank != 4 or meta.shape[1] % block == 0:
        return meta.nbytes
    c = meta.shape[1]
    return meta.nbytes // max(c, 1) * ((c + block - 1) // block * block) if c else 0


def region_format(graph: Graph, requested: str = "auto", target: Target | None = None) -> str:
    """The format of the layout region: `requested`, or for "auto" the target's blocked
    format when the graph has a depthwise convolution (else NHWC)."""
    if requested not in REGION_FORMATS:
        raise ValueError(f"unknown layout format {requested!r}; known: {list(REGION_FORMATS)}")
    if requested != "auto":
        return requested
    blocked = (target or get_target()).blocked_format
    return blocked if blocked and any(_is_depthwise(n) for n in graph.nodes) else NHWC


def _is_depthwise(node: Node) -> bool:
    """A device convolution that is (or, fused, has) a depthwise convolution."""
    if layout_of(node) is not Layout.CONV or node.meta.engine is not Engine.DEVICE:
        return False
    x, group = node.input(0), node.attrs.get("group", 1)
    return node.op_type in DEPTHWISE or (
        group > 1 and x is not None and x.meta is not None and x.meta.rank == 4
        and x.meta.shape[1] == group)


def _conv_reads_only(v: Value) -> bool:
    """Whether every reader of v is a device Conv reading it as data (or residual)."""
    return bool(v.users) and all(
        layout_of(u) is Layout.CONV and u.meta.engine is Engine.DEVICE
        and all(_reads_own_layout(u, i) for i, w in enumerate(u.inputs) if w is v)
        for u in v.users)


def _output_format(node: Node, region: str, graph_outputs: set[Value]) -> str:
    if region == NHWC:
        return NHWC
    out = node.outputs[0]
    if layout_of(node) is Layout.CONCAT:  # blocked only if no operand would be padded
        whole = all(v.meta.shape[1] % BLOCKS[region] == 0 for v in [*node.inputs, out])
        return region if whole else NHWC
    if out.meta.shape[1] % BLOCKS[region] == 0:
        return region
    # padded: only convolutions may read it (values leaving get a TransData, which may too)
    if layout_of(node) is Layout.CONV and out not in graph_outputs and _conv_reads_only(out):
        return region
    return NHWC


def assign_layouts(graph: Graph, enabled: bool = True, fmt: str = "auto",
                   target: Target | None = None) -> PassResult:
    target = target or get_target()
    if not enabled or not _has_transdata(target):
        return PassResult(graph, False, "layout assignment off")
    outputs = set(graph.outputs)
    round_trips = _drop_reshape_round_trips(graph, outputs)
    if round_trips:
        outputs = set(graph.outputs)
    region_nodes = _reached_from_convolutions(
        [n for n in graph.nodes if _agnostic(n) and not _joins_outputs(n, outputs)])
    if not any(layout_of(n) is Layout.CONV for n in region_nodes):
        return PassResult(graph, round_trips > 0, "no convolution: layouts stay plain")
    region = region_format(graph, fmt, target)
    own = {n: region if _is_head(n) else _output_format(n, region, outputs) for n in region_nodes}
    for node, f in own.items():
        if not _is_head(node):
            node.outputs[0].format = f
    views = _transpose_views(graph, own) + _into_region_views(graph, own, outputs)
    inserted = _plain_partition_outputs(graph)
    # (value, format, partition of the reader) -> the converted value; per partition, since
    # a conversion belongs to its reader's partition
    converted: dict[tuple[Value, str, int | None], Value] = {}

    def convert(v: Value, fmt: str, before: Node) -> Value:
        nonlocal inserted
        key = (v, fmt, before.meta.partition)
        if key not in converted:
            src = v.format or NCHW
            if v.producer is not None and _is_conversion(v.producer) \
                    and (v.producer.inputs[0].format or NCHW) == fmt \
                    and v.producer.inputs[0].meta == v.meta \
                    and v.producer.meta.partition == before.meta.partition:
                # the inverse of what made v; only inside one partition: a value crossing
                # partitions is plain (the loader takes nothing else at a partition's edge)
                converted[key] = v.producer.inputs[0]
                return converted[key]
            op = "FormatView" if same_bytes(v.meta.shape, src, fmt) else "TransData"
            td = graph.add_node(op, [v], attrs={"src_format": src, "dst_format": fmt},
                                name=graph.unique_name(f"{op.lower()}_{fmt}"), after=v.producer)
            if v.producer is None:  # a graph input: right before its first reader
                graph.nodes.remove(td)
                graph.nodes.insert(graph.nodes.index(before), td)
            td.meta.engine, td.meta.partition = before.meta.engine, before.meta.partition
            if v.producer is not None:  # on the stream a pass pinned the producer to, if any
                td.meta.stream = v.producer.meta.stream
            td.outputs[0].meta = v.meta
            td.outputs[0].format = fmt
            converted[key] = td.outputs[0]
            inserted += 1
        return converted[key]

    for node in list(graph.nodes):
        if _is_conversion(node) or node.meta.engine is not Engine.DEVICE:
            continue
        mine = own.get(node, NCHW)
        new_inputs = list(node.inputs)
        for i, v in enumerate(node.inputs):
            if not _is_act4d(v):
                continue
            want = mine if (mine != NCHW and _reads_own_layout(node, i)) else NCHW
            if (want in BLOCKS and layout_of(node) is Layout.CONV and i == 0 and not v.format
                    and v.meta.shape[1] < BLOCKS[want]):
                want = NCHW  # the image: first-layer kernels read it plain
            if (v.format or NCHW) != want:
                new_inputs[i] = convert(v, want, node)
        if new_inputs != list(node.inputs):
            node.set_inputs(new_inputs)
    graph.layouts_assigned = True
    counts: dict[str, int] = {}
    for f in own.values():
        counts[f] = counts.get(f, 0) + 1
    summary = ", ".join(f"{n} nodes {f}" for f, n in sorted(counts.items()))
    same = sum(n.op_type == "FormatView" for n in graph.nodes)
    return PassResult(graph, inserted > 0 or views > 0,
                      f"{summary}, {inserted - same} TransData and {same} FormatView inserted, "
                      f"{views} Transpose made views, {round_trips} reshape round trips dropped")


def _plain_partition_outputs(graph: Graph) -> int:
    """Values leaving a device partition (or the graph) are plain NCHW."""
    count = 0
    outputs = set(graph.outputs)
    for node in list(graph.nodes):
        if _is_conversion(node):
            continue
        for out in node.outputs:
            if not out.format or out.format == NCHW:
                continue
            leaves = out in outputs or any(u.meta.partition != node.meta.partition
                                           for u in out.users)
            if not leaves:
                continue
            # The producer writes a fresh NHWC value; a TransData restores the name in NCHW.
            count += _split_output(graph, node, out)
    return count


def _split_output(graph: Graph, node: Node, out: Value) -> int:
    idx = node.outputs.index(out)
    fmt = out.format
    fresh = graph._new_value(graph.unique_name(f"{out.name}_{fmt.lower()}"), out.kind,
                             meta=out.meta)
    fresh.producer, fresh.index, fresh.format = node, idx, fmt
    node.outputs[idx] = fresh
    out.format = NCHW
    same_part = [u for u in out.users if u.meta.partition == node.meta.partition]
    for user in same_part:
        if _is_conversion(user) or (user.meta.engine is Engine.DEVICE and
                                           (user.inputs and _agnostic(user))):
            user.replace_input(out, fresh)
    op = "FormatView" if same_bytes(out.meta.shape, fmt, NCHW) else "TransData"
    td = graph.add_node(op, [fresh], attrs={"src_format": fmt, "dst_format": NCHW},
                        outputs=[], name=graph.unique_name(f"{op.lower()}_nchw"), after=node)
    # reuse the original value (and so its name) as the TransData's output
    out.producer, out.index = td, 0
    td.outputs.append(out)
    td.meta.engine, td.meta.partition = node.meta.engine, node.meta.partition
    return 1


def _has_transdata(target: Target) -> bool:
    return target.runs("TransData")


__all__ = ["BLOCKS", "NCHW", "NHWC", "REGION_FORMATS", "assign_layouts", "region_format",
           "storage_nbytes"]
