"""Layout assignment: keep 4-D activations channels-last inside device partitions.

oneDNN's fastest convolutions read and write NHWC. Keeping every activation between
convolutions NHWC avoids a reorder around each kernel; TransData nodes convert at the
edges of the NHWC region only (typically the graph's input and the flatten before the
classifier), and inverse TransData pairs are removed. Where NCHW and NHWC order the bytes
the same way (one channel, or 1x1 spatial: a global pool's [N,C,1,1] output before the
classifier) the conversion is a FormatView instead: the same bytes under the other format
name, which the memory planner aliases and which runs no task. The runtime executes
exactly the formats chosen here (tensor slots carry them).

A node is layout-agnostic when the device kernel computes the same result in NHWC:
convolutions, pools, BatchNormalization, unary elementwise ops, and binary elementwise
ops whose inputs are all activations of one shape.
"""

from __future__ import annotations

from .. import ops
from ..dtypes import DType
from ..ir import Engine, Graph, Node, Value
from ..ops.registry import AttrKind, AttrSpec, DeviceKernel, OpSchema
from ..passes import PassResult

NCHW, NHWC = "nchw", "nhwc"

_SPATIAL = {"Conv", "MaxPool", "AveragePool", "GlobalAveragePool", "GlobalMaxPool",
            "BatchNormalization"}
_UNARY = {"Relu", "Sigmoid", "Tanh", "Exp", "Log", "Sqrt", "Abs", "Neg", "Erf", "Gelu",
          "LeakyRelu", "Clip", "HardSigmoid", "HardSwish", "Softplus", "Reciprocal", "Floor",
          "Ceil"}
_BINARY = {"Add", "Sub", "Mul", "Div", "Max", "Min"}


def _register_transdata() -> None:
    if ops.has("TransData"):
        return

    def infer(node: Node, attrs):
        return [node.inputs[0].meta]

    def compute(inputs, attrs):
        return [inputs[0]]  # logically an identity: only the bytes' order changes

    def device(node: Node, attrs):
        return DeviceKernel("TransData", {"src_format": attrs["src_format"],
                                          "dst_format": attrs["dst_format"]}, (0,))

    ops.register(OpSchema(
        "TransData", 1, 1, infer, compute,
        attrs={"src_format": AttrSpec(AttrKind.STRING, NCHW),
               "dst_format": AttrSpec(AttrKind.STRING, NHWC)},
        device=device))


def _register_format_view() -> None:
    if ops.has("FormatView"):
        return

    def infer(node: Node, attrs):
        return [node.inputs[0].meta]

    def compute(inputs, attrs):
        return [inputs[0]]

    def device(node: Node, attrs):
        return DeviceKernel("Copy", {}, (0,))  # an alias of the input (schema.alias)

    ops.register(OpSchema(
        "FormatView", 1, 1, infer, compute,
        attrs={"src_format": AttrSpec(AttrKind.STRING, NCHW),
               "dst_format": AttrSpec(AttrKind.STRING, NHWC)},
        device=device, alias={0: 0}))


_register_transdata()
_register_format_view()


def same_bytes(shape) -> bool:
    """Whether NCHW and NHWC lay a 4-D tensor of `shape` out identically."""
    return len(shape) == 4 and (shape[1] == 1 or shape[2] * shape[3] == 1)


def _is_act4d(v: Value | None) -> bool:
    return (v is not None and not v.is_constant and v.meta is not None and v.meta.is_static
            and v.meta.rank == 4 and v.meta.dtype is DType.FLOAT32)


def _agnostic(node: Node) -> bool:
    """Whether the node may run with its 4-D activations NHWC."""
    if node.meta.engine is not Engine.DEVICE or not node.outputs:
        return False
    out = node.outputs[0]
    if not _is_act4d(out) or len(node.outputs) != 1:
        return False
    if node.op_type in _SPATIAL:
        return _is_act4d(node.input(0))
    if node.op_type in _UNARY:
        return _is_act4d(node.input(0))
    if node.op_type in _BINARY:
        ins = [v for v in node.inputs if v is not None]
        return len(ins) == 2 and all(_is_act4d(v) and v.meta == out.meta for v in ins)
    if node.op_type == "EltwiseChain":  # flat: any format its full-size tensors share
        return all(v.is_constant and v.meta.numel == 1 if not _is_act4d(v)
                   else v.meta == out.meta for v in node.inputs)
    return False


def _reads_nhwc(node: Node, index: int) -> bool:
    """Whether input `index` of an agnostic node is read in the node's own layout."""
    if node.op_type in _SPATIAL:
        return index == 0 or (node.attrs.get("_sum") and index == node.attrs["_sum_input"])
    return True


def assign_layouts(graph: Graph, enabled: bool = True) -> PassResult:
    if not enabled or not _runtime_has_transdata():
        return PassResult(graph, False, "layout assignment off")
    nhwc_nodes = [n for n in graph.nodes if _agnostic(n)]
    if not any(n.op_type == "Conv" for n in nhwc_nodes):
        return PassResult(graph, False, "no convolution: layouts stay plain")
    for node in nhwc_nodes:
        node.outputs[0].format = NHWC
    inserted = _plain_partition_outputs(graph)
    converted: dict[tuple[Value, str], Value] = {}

    def convert(v: Value, fmt: str, before: Node) -> Value:
        nonlocal inserted
        key = (v, fmt)
        if key not in converted:
            src = v.format or NCHW
            if v.producer is not None and v.producer.op_type in ("TransData", "FormatView") \
                    and (v.producer.inputs[0].format or NCHW) == fmt:
                converted[key] = v.producer.inputs[0]  # the inverse of what made v
                return converted[key]
            op = "FormatView" if same_bytes(v.meta.shape) else "TransData"
            td = graph.add_node(op, [v], attrs={"src_format": src, "dst_format": fmt},
                                name=graph.unique_name(f"{op.lower()}_{fmt}"), after=v.producer)
            if v.producer is None:  # a graph input: right before its first reader
                graph.nodes.remove(td)
                graph.nodes.insert(graph.nodes.index(before), td)
            td.meta.engine, td.meta.partition = before.meta.engine, before.meta.partition
            td.outputs[0].meta = v.meta
            td.outputs[0].format = fmt
            converted[key] = td.outputs[0]
            inserted += 1
        return converted[key]

    for node in list(graph.nodes):
        if node.op_type in ("TransData", "FormatView") or node.meta.engine is not Engine.DEVICE:
            continue
        mine = NHWC if node in nhwc_nodes else NCHW
        new_inputs = list(node.inputs)
        for i, v in enumerate(node.inputs):
            if not _is_act4d(v):
                continue
            want = mine if (mine == NHWC and _reads_nhwc(node, i)) else NCHW
            if (v.format or NCHW) != want:
                new_inputs[i] = convert(v, want, node)
        if new_inputs != list(node.inputs):
            node.set_inputs(new_inputs)
    graph.layouts_assigned = True
    views = sum(n.op_type == "FormatView" for n in graph.nodes)
    return PassResult(graph, inserted > 0, f"{len(nhwc_nodes)} nodes NHWC, "
                      f"{inserted - views} TransData and {views} FormatView inserted")


def _plain_partition_outputs(graph: Graph) -> int:
    """Values leaving a device partition (or the graph) are plain NCHW."""
    count = 0
    outputs = set(graph.outputs)
    for node in list(graph.nodes):
        if node.op_type in ("TransData", "FormatView"):
            continue
        for out in node.outputs:
            if out.format != NHWC:
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
    fresh = graph._new_value(graph.unique_name(f"{out.name}_nhwc"), out.kind, meta=out.meta)
    fresh.producer, fresh.index, fresh.format = node, idx, NHWC
    node.outputs[idx] = fresh
    out.format = NCHW
    same_part = [u for u in out.users if u.meta.partition == node.meta.partition]
    for user in same_part:
        if user.op_type in ("TransData", "FormatView") or (user.meta.engine is Engine.DEVICE and
                                           (user.inputs and _agnostic(user))):
            user.replace_input(out, fresh)
    op = "FormatView" if same_bytes(out.meta.shape) else "TransData"
    td = graph.add_node(op, [fresh], attrs={"src_format": NHWC, "dst_format": NCHW},
                        outputs=[], name=graph.unique_name(f"{op.lower()}_nchw"), after=node)
    # reuse the original value (and so its name) as the TransData's output
    out.producer, out.index = td, 0
    td.outputs.append(out)
    td.meta.engine, td.meta.partition = node.meta.engine, node.meta.partition
    return 1


def _runtime_has_transdata() -> bool:
    from ..runtime import device_kernel_ops

    return "TransData" in device_kernel_ops()


__all__ = ["NCHW", "NHWC", "assign_layouts"]
