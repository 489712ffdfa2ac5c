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

5-D activations (Conv3d, 3-D pools) join the region too, always stored NHWC (N, D, H, W,
C): the blocked formats are 4-D only, and oneDNN's Conv3d and our depthwise 3-D kernel run
channels-last (plain, each Conv3d converted in and out inside its task).

The region's 4-D format (`region_format`): NHWC, or oneDNN's blocked format for the CPU
(nChw16c with AVX-512, nChw8c with AVX2; the target's `blocked_format`), whose direct 1x1 and
depthwise kernels were ~25% faster on MobileNetV2 when this pass was written, and which alone
fuse a depthwise convolution into a 1x1 without a round trip through memory (the conv_dw
fusion). "auto" is NHWC. It used to pick blocked for graphs with depthwise convolutions
(unless they read token sequences or 1-D signals, or most activations had partial channel
blocks); measured on the 40 zoo and unseen models it picked blocked for (oneDNN 3.2, AMD
Zen 4, two threads, batches 1 and 8, alternated rounds), NHWC ran them 4.6% faster on the
geometric mean: blocked was ahead by at most 9% (12 of 80 measurements by more than 3%)
and behind by up to 2x (31 by more than 3%: PP-OCRv3's recognizer at batch 8 0.49x;
MicroNet's narrow and grouped convolutions, padded to whole blocks, 1.51 ms blocked against
0.61 NHWC).

A node is layout-agnostic when the device kernel computes the same result in the region's
format; its op schema says which kind it is (`OpSchema.layout`, ops/registry.py `Layout`):
convolutions (CONV), pools, BatchNormalization and unary elementwise ops (UNIFORM), binary
elementwise ops whose inputs are activations of one shape or scalar constants
(ELEMENTWISE), elementwise chains (CHAIN) and Concat of 4-D activations (CONCAT: the kernel
joins or, for a Split, cuts the bytes as stored; blocked only when no operand's channels
would be padded), a Pad
of H and W only (SPATIAL: a U-Net's reflect pads between convolutions) and, in an NHWC
region, a reduction keeping the rank (REDUCE: coordinate attention's means over H and W,
CBAM's channel pooling; an elementwise region then reads gates broadcast over H or W as
stored, `stored_broadcast`). Every
other device op (PLAIN) reads and writes plain NCHW: the pass converts its region inputs
back to NCHW.
In a blocked region, a value whose channels are not a multiple of the block is stored
padded (zero channels up to the next block) when only convolutions read it — the runtime
lets no other kernel touch a padded tensor — and NHWC otherwise. A convolution reads a
plain input with fewer channels than a block (the image) as it is: oneDNN's first-layer
kernels take it directly.
"""

from __future__ import annotations

from .. import ops
from ..ir import Engine, Graph, Node, Value
from ..ops.registry import AttrKind, AttrSpec, DeviceKernel, Layout, OpSchema
from ..passes import PassResult
from ..target import Target
from ..target import get as get_target
from .formats import (
    BLOCKS,
    NCHW,
    NHWC,
    channel_constants_as_4d,
    is_act,
    is_act4d,
    is_conversion,
    layout_of,
    per_channel,
    pixel_map,
    reads_own_layout,
    same_bytes,
    spatial_only,
    stored_broadcast,
    unit_view,
)
from .layout_views import (
    drop_reshape_round_trips,
    into_region_views,
    transpose_views,
    unit_transposes_as_views,
)

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


def _is_head(node: Node) -> bool:
    """A convolution whose output is not 4-D (ConvHead: a pool and a fully connected layer
    follow the Conv, optimize/fusion/conv_head.py): it reads its input in any format and
    writes a plain [N, classes]."""
    out = node.outputs[0].meta if node.outputs else None
    return layout_of(node) is Layout.CONV and out is not None and out.rank < 3


def _agnostic(node: Node, maps: bool = False, nhwc: bool = False,
              reduces: bool = False) -> bool:
    """Whether the node may run with its 4-D (or 5-D) activations in the region's format
    (operands of one rank); `maps`: an elementwise op
    may broadcast a per-pixel map (`pixel_map`) over the channels (an NHWC region on a
    runtime that takes them, `_takes_pixel_maps`); `nhwc` (an NHWC region): 3-D activations
    [N, C, L] too, the views between them and a 1-D convolution's [N, C, 1, L]
    (`unit_view`), elementwise chains with per-channel operands, and elementwise regions
    with operands broadcast over spatial axes (`stored_broadcast`); `reduces` (an NHWC region
    on a runtime that folds NHWC reductions, `_reduces_stored`): a reduction keeping the rank
    (coordinate attention's means over H and over W, CBAM's channel max and mean)."""
    if node.meta.engine is not Engine.DEVICE or not node.outputs:
        return False
    if _is_head(node):
        return is_act4d(node.input(0))
    rank = node.outputs[0].meta.rank if node.outputs[0].meta is not None else 0
    if rank == 3 and not nhwc:
        return False
    if unit_view(node):
        return nhwc
    out = node.outputs[0]
    kind = layout_of(node)
    if kind is Layout.CONCAT:  # joins (Concat) or cuts (Split) the bytes as stored
        data = _data_inputs(node)
        return bool(data) and all(is_act(v) and v.meta.rank == rank
                                  for v in [*data, *node.outputs])
    if not is_act(out) or len(node.outputs) != 1:
        return False
    if kind in (Layout.CONV, Layout.UNIFORM):
        return is_act(node.input(0)) and node.input(0).meta.rank == rank
    if kind is Layout.SPATIAL:  # a Pad of H and W: the stored axes padded in any format
        return is_act(node.input(0)) and node.input(0).meta.rank == rank and spatial_only(node)
    if kind is Layout.REDUCE:  # keepdims: the runtime folds the stored (NHWC) axes
        return reduces and is_act(node.input(0)) and node.input(0).meta.rank == rank
    if kind in (Layout.ELEMENTWISE, Layout.CHANNEL):
        # a scalar operand broadcasts alike in every format; a per-channel one is read plain,
        # and by oneDNN only as the second operand of a Sub or Div (c - x stays plain)
        ins = [v for v in node.inputs if v is not None]
        second = node.input(1) if node.op_type in ("Sub", "Div") else None
        return any(is_act(v) and v.meta == out.meta for v in ins) and all(
            is_act(v) and v.meta == out.meta
            or v.is_constant and v.meta is not None and v.meta.numel == 1
            or kind is Layout.CHANNEL and _scale_of(v, out, rank == 4)
            and (second is None or v is second) and (nhwc or node.op_type != "PRelu")
            or maps and rank == 4 and pixel_map(v, out) and (second is None or v is second)
            for v in ins)
    if kind is Layout.CHAIN:  # flat: any format its full-size tensors share (and, NHWC, rows
        # of C with a per-channel operand; a fused region's kernel reads a per-channel
        # operand, computed or constant, plain against any unpadded format of its domain)
        if node.op_type == "EltwiseGraph":
            return all(v.meta == out.meta and is_act(v) or per_channel(v, out)
                       or v.is_constant and v.meta.numel == 1
                       or nhwc and stored_broadcast(v, out) for v in node.inputs)
        return all(v.meta == out.meta if is_act(v)
                   else v.is_constant and v.meta.numel == 1 or nhwc and _scale_of(v, out)
                   for v in node.inputs) and (
            nhwc or not any(per_channel(v, out) for v in node.inputs))
    return False


def _scale_of(v: Value, out: Value, any_width: bool = False) -> bool:
    """Whether v is a per-channel operand of out the region's kernels broadcast well: over
    at least a vector of 16 channels, or (`any_width`) a 4-D one of any width. Stored NHWC,
    the channels are the innermost axis: a signal of 8 channels broadcast its scale 8 floats
    at a time over 4000 rows (DAC's Snake: its 22 chains 744 us, 376 with the narrow scales
    plain), where plain rows of one channel broadcast a scalar."""
    return per_channel(v, out) and (any_width or out.meta.shape[1] >= 16)


def _takes_pixel_maps(target: Target) -> bool:
    """Whether the target's elementwise kernels broadcast a [N, 1, H, W] map into an NHWC
    output (its kernel info offers NHWC for that Mul)."""
    try:
        info = target.kernel_info("Mul", ["float32", "float32"], [[2, 4, 3, 3], [2, 1, 3, 3]],
                                  None)
    except Exception:  # a compile-only target without kernel info
        return False
    return bool(info.get("supported")) and NHWC in info.get("formats", ())


def _reduces_stored(target: Target) -> bool:
    """Whether the target's reductions fold an NHWC input into an NHWC output (its kernel
    info offers NHWC for a ReduceMean keeping the rank)."""
    try:
        info = target.kernel_info("ReduceMean", ["float32"], [[2, 4, 3, 3]],
                                  {"axes": [3], "keepdims": 1})
    except Exception:  # a compile-only target without kernel info
        return False
    return bool(info.get("supported")) and NHWC in info.get("formats", ())


def _data_inputs(node: Node) -> list[Value]:
    """A CONCAT node's activation inputs: all but a Split's sizes (a 1-D constant the
    compiler resolves into the kernel's attribute)."""
    return [v for v in node.inputs
            if v is not None and not (v.is_constant and v.meta is not None and v.meta.rank <= 1)]


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


def _grown_backwards(graph: Graph, region: list[Node], candidates: list[Node],
                     outputs: set[Value]) -> list[Node]:
    """The region plus the candidates whose output only region nodes read, in their own
    layout, so the conversion moves from their output to their inputs: a UNIFORM or SPATIAL
    node (an upsampling Resize, a Pad) whose input is not larger than its output (a GLPN
    decoder's two bilinear x2 Resizes into the head's convolution: one TransData of a map 16
    times smaller instead of the full-resolution one, and the Resizes run vectorized over
    the stored channels), and a Concat with a part made by a candidate (an all-MLP
    decoder's upsampled maps into its fuse conv: the same bytes converted in parts, which
    then grow further back, to the Resizes' small inputs or token views). Walks the graph
    backwards so a chain (Resize -> Resize -> Concat -> Conv) joins as a whole."""
    inside = set(region)
    allowed = set(candidates)
    for node in reversed(graph.nodes):
        if node in inside or node not in allowed or len(node.outputs) != 1:
            continue
        out = node.outputs[0]
        if out in outputs or not out.users:
            continue
        if layout_of(node) is Layout.CONCAT:
            # the same bytes converted in parts; worth it when a part then grows further
            if not any(v.producer in allowed for v in _data_inputs(node)):
                continue
        elif (layout_of(node) not in (Layout.UNIFORM, Layout.SPATIAL)
              or node.input(0).meta.nbytes > out.meta.nbytes):
            continue
        if all(u in inside and all(reads_own_layout(u, i)
                                   for i, w in enumerate(u.inputs) if w is out)
               for u in out.users):
            inside.add(node)
    return [n for n in graph.nodes if n in inside]


def _joins_outputs(node: Node, outputs: set[Value]) -> bool:
    """A Concat along the batch axis into a graph output (the batch split's join) stays
    plain: each part is converted where it is made, on its own stream, instead of the whole
    batch at the end on one (the branchy conv towers at batch 32: 8.8 ms on one lane while
    the other waited)."""
    return (layout_of(node) is Layout.CONCAT and node.outputs[0] in outputs
            and int(node.attrs.get("axis", 0)) % 4 == 0)


def storage_nbytes(v: Value) -> int:
    """Bytes of v's storage in its format: a padded blocked format stores whole blocks."""
    meta = v.meta
    block = BLOCKS.get(v.format)
    if block is None or meta.rank != 4 or meta.shape[1] % block == 0:
        return meta.nbytes
    c = meta.shape[1]
    return meta.nbytes // max(c, 1) * ((c + block - 1) // block * block) if c else 0


def region_format(requested: str = "auto") -> str:
    """The format of the layout region: `requested`; "auto" is NHWC (see the module's note:
    the blocked format measured slower on most graphs it was picked for)."""
    if requested not in REGION_FORMATS:
        raise ValueError(f"unknown layout format {requested!r}; known: {list(REGION_FORMATS)}")
    return NHWC if requested == "auto" else requested


def _conv_reads_only(v: Value) -> bool:
    """Whether every reader of v is a device Conv reading it as data (or residual)."""
    return bool(v.users) and all(
        layout_of(u) is Layout.CONV and u.meta.engine is Engine.DEVICE
        and all(reads_own_layout(u, i) for i, w in enumerate(u.inputs) if w is v)
        for u in v.users)


def _output_format(node: Node, region: str, graph_outputs: set[Value],
                   own: dict[Node, str]) -> str:
    out = node.outputs[0]
    if region == NHWC or out.meta.rank == 5:  # 5-D: channels last (the blocked formats are 4-D)
        return NHWC
    source = node.input(0).producer
    if layout_of(node) in (Layout.UNIFORM, Layout.SPATIAL) and source in own \
            and not _is_head(source):
        # as its input is stored (NHWC after a Concat of partial blocks: a U-Net's Pad of the
        # joined maps), so no conversion runs between them
        return own[source]
    if layout_of(node) is Layout.CONCAT:  # blocked only if no operand would be padded
        whole = all(v.meta.shape[1] % BLOCKS[region] == 0
                    for v in [*_data_inputs(node), *node.outputs])
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
    round_trips = drop_reshape_round_trips(graph, outputs) + unit_transposes_as_views(graph)
    if round_trips:
        outputs = set(graph.outputs)
    channel_constants_as_4d(graph)
    region = region_format(fmt)
    maps = region == NHWC and _takes_pixel_maps(target)
    reduces = region == NHWC and _reduces_stored(target)
    candidates = [n for n in graph.nodes if _agnostic(n, maps, region == NHWC, reduces)
                  and not _joins_outputs(n, outputs)]
    region_nodes = _grown_backwards(graph, _reached_from_convolutions(candidates), candidates,
                                    outputs)
    if not any(layout_of(n) is Layout.CONV for n in region_nodes):
        return PassResult(graph, round_trips > 0, "no convolution: layouts stay plain")
    own: dict[Node, str] = {}
    for n in region_nodes:  # in graph order: a producer's format is known before its readers'
        own[n] = region if _is_head(n) else _output_format(n, region, outputs, own)
    for node, f in own.items():
        if not _is_head(node):
            for out in node.outputs:  # a Split's every part
                out.format = f
    views = transpose_views(graph, own) + into_region_views(graph, own, outputs)
    inserted = _plain_partition_outputs(graph)
    # (value, format, partition of the reader) -> the converted value; per partition, since
    # a conversion belongs to its reader's partition
    converted: dict[tuple[Value, str, int | None], Value] = {}

    def convert(v: Value, fmt: str, before: Node) -> Value:
        nonlocal inserted
        key = (v, fmt, before.meta.partition)
        if key not in converted:
            src = v.format or NCHW
            if v.producer is not None and is_conversion(v.producer) \
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
        if is_conversion(node) or node.meta.engine is not Engine.DEVICE:
            continue
        mine = own.get(node, NCHW)
        new_inputs = list(node.inputs)
        for i, v in enumerate(node.inputs):
            if not is_act(v):
                continue
            want = mine if (mine != NCHW and reads_own_layout(node, i)) else NCHW
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
        if is_conversion(node):
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
        if is_conversion(user) or (user.meta.engine is Engine.DEVICE and
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
