"""A 1x1 strided Conv's stride moved up into the Conv that makes its input.

ResNet v1 as Caffe and TF-slim wrote it (and what was exported from them) downsamples in
the first 1x1 Conv of a stage and in its projection shortcut: both read the previous
block's output with stride 2 and use a quarter of it. That output is a Conv's (the last
1x1 of the block, with its residual sum and Relu as epilogues; before it, a 3x3 and its
Relu): computing it at full resolution does four times the work that is used. A Conv of
stride 1 subsampled by s is the same Conv with stride s and the same explicit pads (the
output size floor((H + pads - k) / s) + 1 is the subsampled one's), and an elementwise
epilogue commutes with the subsampling. So when every reader of a Conv's output is a 1x1
Conv without pads and with strides s, the producer takes stride s and the readers stride 1;
a residual sum the producer adds is subsampled by a MaxPool of kernel 1 (what is left to
copy: a quarter of it), and when the producer is itself a 1x1 Conv without pads, the same
question is asked of its input (the block's 3x3 Conv: it then does a quarter of its work).
OpenVINO does the same (its `StridesOptimization`); opennsfw's last block of each stage
ran its 3x3 and 1x1 Convs on four times the pixels its successors read.
"""

from __future__ import annotations

from ...ir import Graph, Node, TensorMeta, Value
from .match import Fusion, on_device


def _spatial(node: Node) -> int | None:
    """The number of spatial axes of a 2-D Conv with a static weight shape, else None."""
    w = node.input(1)
    if w is None or w.meta is None or not w.meta.is_static or len(w.meta.shape) != 4:
        return None
    return 2


def _strides(node: Node) -> tuple[int, ...]:
    return tuple(int(s) for s in node.attrs.get("strides") or (1, 1))


def _pads_zero(node: Node) -> bool:
    return node.attrs.get("auto_pad", "NOTSET") in ("NOTSET", "VALID") \
        and not any(node.attrs.get("pads") or ())


def _subsampling_reader(node: Node, v: Value) -> tuple[int, ...] | None:
    """The strides of `node` when it is a 1x1 Conv without pads that reads `v` as its data
    input only (so it uses v at every s-th pixel and nothing else of it), else None."""
    if node.op_type != "Conv" or node.input(0) is not v or _spatial(node) is None \
            or any(x is v for x in node.inputs[1:]) or not _pads_zero(node):
        return None
    if tuple(node.input(1).meta.shape[2:]) != (1, 1):
        return None
    s = _strides(node)
    return s if len(s) == 2 and any(k > 1 for k in s) else None


def _readers_stride(graph: Graph, v: Value) -> tuple[int, ...] | None:
    """The common stride when every reader of v subsamples it by that stride."""
    if v in graph.outputs or not v.users:
        return None
    strides = {_subsampling_reader(u, v) for u in v.users}
    if len(strides) != 1 or None in strides:
        return None
    return next(iter(strides))


def _explicit_pads(node: Node) -> list[int] | None:
    """The Conv's pads at stride 1 as [top, left, bottom, right], auto_pad resolved."""
    auto = node.attrs.get("auto_pad", "NOTSET")
    if auto in ("NOTSET", "VALID"):
        pads = list(node.attrs.get("pads") or [0, 0, 0, 0]) if auto == "NOTSET" else [0] * 4
        return [int(p) for p in pads] if len(pads) == 4 else None
    if auto not in ("SAME_UPPER", "SAME_LOWER"):
        return None
    k = node.input(1).meta.shape[2:]
    dil = [int(d) for d in node.attrs.get("dilations") or (1, 1)]
    total = [(int(k[i]) - 1) * dil[i] for i in range(2)]  # at stride 1 the output keeps H, W
    small = [t // 2 for t in total]
    begin = small if auto == "SAME_UPPER" else [t - b for t, b in zip(total, small)]
    end = [t - b for t, b in zip(total, begin)]
    return begin + end


def _stridable(graph: Graph, p: Node | None, readers: list[Node]) -> bool:
    """p: a stride-1 2-D Conv on the device, in its readers' partition, with a static
    output, whose pads can be written out."""
    if p is None or p.op_type != "Conv" or len(p.outputs) != 1 or _spatial(p) is None \
            or not on_device(p, *readers) or any(s != 1 for s in _strides(p)):
        return False
    out = p.outputs[0].meta
    return out is not None and out.is_static and len(out.shape) == 4 \
        and _explicit_pads(p) is not None


def _match_conv_stride(graph: Graph, conv: Node):
    if conv.op_type != "Conv" or len(conv.outputs) != 1:
        return None
    v = conv.outputs[0]
    s = _readers_stride(graph, v)
    if s is None or not _stridable(graph, conv, list(v.users)):
        return None
    return s


def _subsampled(shape: tuple, s: tuple[int, ...]) -> tuple:
    return (*shape[:2], *((int(d) - 1) // k + 1 for d, k in zip(shape[2:], s)))


def _push(graph: Graph, conv: Node, s: tuple[int, ...], done: list[str]) -> None:
    """conv (stridable) takes stride s; its readers (all 1x1 subsampling by s) stride 1."""
    v = conv.outputs[0]
    readers = list(dict.fromkeys(v.users))
    conv.attrs["pads"] = _explicit_pads(conv)
    conv.attrs["auto_pad"] = "NOTSET"
    conv.attrs["strides"] = list(s)
    for r in readers:
        r.attrs["strides"] = [1, 1]
    v.meta = TensorMeta(v.meta.dtype, _subsampled(tuple(v.meta.shape), s))
    done.append(conv.name)
    if conv.attrs.get("_sum"):  # the residual sum is taken at the kept pixels only
        i = int(conv.attrs["_sum_input"])
        res = conv.input(i)
        pool = graph.add_node("MaxPool", [res], attrs={
            "kernel_shape": [1, 1], "strides": list(s), "pads": [0, 0, 0, 0]},
            name=graph.unique_name(f"{conv.name}_residual_subsample"),
            after=res.producer if res.producer is not None
            and res.producer.graph is graph else None)
        if res.producer is None or res.producer.graph is not graph:
            graph.nodes.remove(pool)
            graph.nodes.insert(graph.nodes.index(conv), pool)
        pool.meta.engine, pool.meta.partition = conv.meta.engine, conv.meta.partition
        pool.outputs[0].meta = TensorMeta(res.meta.dtype,
                                          _subsampled(tuple(res.meta.shape), s))
        inputs = list(conv.inputs)
        inputs[i] = pool.outputs[0]
        conv.set_inputs(inputs)
    # a 1x1 Conv without pads subsamples its own input now: ask the same of that one
    x = conv.input(0)
    if _subsampling_reader(conv, x) == s and _readers_stride(graph, x) == s \
            and _stridable(graph, x.producer, list(x.users)):
        _push(graph, x.producer, s, done)


def _rewrite_conv_stride(graph: Graph, conv: Node, s) -> str:
    readers = [r.name for r in dict.fromkeys(conv.outputs[0].users)]
    done: list[str] = []
    _push(graph, conv, s, done)
    return (f"Conv stride {'x'.join(map(str, s))} moved up: {', '.join(done)} strided for "
            f"{', '.join(readers)}")


ROW = Fusion("conv_stride", _match_conv_stride, _rewrite_conv_stride,
             produces=("MaxPool",))
