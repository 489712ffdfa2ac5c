"""Batch splitting: run a memory-bound, batch-separable graph as a sequence of sub-batches.

A CNN like MobileNetV2 does little arithmetic per activation byte; at batch 32 every layer's
activations (tens of MB) stream through DRAM, and the model runs ~15% slower per image than
at batch 4-8, where one sub-batch's activations stay in the last-level cache. When the whole
graph treats samples independently, this pass slices the batch inputs along axis 0 into k
chunks, clones the graph once per chunk (weights shared: the runtime prepares them once),
runs the chunks one after the other (the memory planner reuses one chunk's arena for the
next) and concatenates the outputs. Results are bit-identical per sample. The slices cost
nothing: whole samples are contiguous, so task generation makes them views of the input
(the runtime binds them to the caller's array).

On by default (CompileOptions.batch_split). MobileNetV2 at batch 32 on the 2-core VM, in one
process, alternating rounds: 124.1 vs 135.0 ms median (6 of 6 rounds faster). While the
slices were copies (~1.8 ms at batch 32) it gained nothing reliable; spreading the chunks
over 2 streams with one thread each measured the same as one stream (132.0 vs 130.2 ms).

Data-parallel mode (`parallel` >= 2, CompileOptions.data_parallel; a session sets its
device's threads): a separable graph with at least MIN_PARALLEL_FLOPS of convolutions and
matrix products per chunk is split into `parallel` chunks (or keeps the memory-bound plan's
chunks when they divide evenly among the streams), each chunk's nodes pinned to stream
i % parallel (NodeMeta.stream); with as many streams as threads each runs on one core. Two
independent one-thread runs lose less to a busy host than one two-thread run whose
barriers wait for the slower thread: bert_mini b8 +1-3% in a quiet phase, +8-10% typical in
a noisy one (see docs/ARCHITECTURE.md).

It fires only when
  * every node is on the device, in one partition, and is separable: each non-constant
    input and the output carry the batch on axis 0 (dim 0 == N), and the op treats axis 0
    as independent samples (convolutions, pools, BatchNormalization, elementwise ops whose
    constant operands do not span the batch, Flatten/Softmax/Concat not over axis 0, Gemm
    and MatMul with constant weights, LayerNormalization not over axis 0, Reshape keeping
    dim 0, Transpose keeping axis 0 first (a TF export's NHWC input), Resize, Pad, Slice and
    Reduce* leaving axis 0 alone (a feature pyramid's upsample, a channel split, a
    reduction over C, H, W), fused elementwise chains, ConvTranspose, an embedding Gather,
    FusedAttention keeping the batch outermost...), where axis 0 may also hold k rows per
    sample after a Reshape folded another axis into it (DeBERTa's [N, H, S, D] ->
    [N*H, S, D]: _rows_per_sample);
  * the graph is memory-bound: FLOPs of its convolutions and matrix products per byte of
    activations written below MAX_INTENSITY (MobileNetV2 ~40; ResNet18 ~340, compute-bound:
    it gains nothing from chunks);
  * the whole batch's largest activation exceeds CACHE_BYTES, some divisor d < N of the
    batch keeps d samples' within it (the largest such d is the chunk), and
    N / d <= MAX_CHUNKS.
"""

from __future__ import annotations

import math

import numpy as np

from ..flops import node_flops
from ..ir import Engine, Graph, Node, TensorMeta, Value
from ..ops.attention import ROPE
from ..ops.conv_fused import FUSED_CONVS
from ..ops.group_norm import GROUP_NORM
from ..passes import PassResult

CACHE_BYTES = 16 << 20  # working set of one chunk: half of a 32 MiB L3, all of 2 cores' L2s
MAX_INTENSITY = 100.0   # FLOP per activation byte; above it the graph is compute-bound
MAX_CHUNKS = 16

# Per chunk, for the data-parallel split: ~0.25 ms on one core. Below it the second
# stream's fixed costs (waking its lane, 10-50 us on this VM; the event; the outputs'
# Concats) are a large part of a chunk. At 2e8 (~2 ms) the small encoders and decoders
# (0.06-0.3 GFLOP at batch 8) ran as one two-thread team whose barrier after every 5-50 us
# task cost them the scaling two one-thread chunks get (docs/ARCHITECTURE.md).
MIN_PARALLEL_FLOPS = 2.5e7

_UNARY = {"Relu", "Sigmoid", "Tanh", "Exp", "Log", "Sqrt", "Abs", "Neg", "Erf", "Gelu",
          "LeakyRelu", "Clip", "HardSigmoid", "HardSwish", "Softplus", "Reciprocal", "Floor",
          "Ceil", "Identity", "Elu", "Selu", "Mish", "Softsign", "Cast"}
_BINARY = {"Add", "Sub", "Mul", "Div", "Max", "Min", "Pow"}
# Elementwise too: masks and position ids (compare, logic, select); inputs broadcast.
_LOGIC = {"Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual", "And", "Or", "Xor",
          "Not", "Where", "EltwiseChain", "EltwiseGraph"}
# Ops whose operands of the output's rank line up with it on axis 0: a constant operand
# with N rows there (a mask or position table expanded to the batch) is sliced per chunk.
_ALIGNED = _BINARY | _LOGIC | {"GatherElements", ROPE, "FusedAttention", "Concat"}
_DATA0 = {"Conv", "ConvTranspose", "MaxPool", "AveragePool", "GlobalAveragePool", "GlobalMaxPool",
          "BatchNormalization", "LRN", "InstanceNormalization", GROUP_NORM, *FUSED_CONVS}


def _carries(v: Value, n: int) -> bool:
    return (not v.is_constant and v.meta is not None and v.meta.is_static
            and v.meta.rank >= 1 and v.meta.shape[0] == n)


def _axis(node: Node, default: int) -> int | None:
    rank = node.outputs[0].meta.rank if node.outputs[0].meta is not None else 0
    axis = int(node.attrs.get("axis", default))
    return axis + rank if axis < 0 else axis


def _separable(node: Node, n: int) -> bool:
    """Whether the node computes each sample of axis 0 on its own."""
    if (len(node.outputs) != 1 and node.op_type != "EltwiseGraph") or not all(
            _carries(out, n) for out in node.outputs):  # (a fused region: outputs of one shape)
        return False
    out_rank = node.outputs[0].meta.rank
    data = [v for v in node.inputs if v is not None and not v.is_constant]
    if not data or not all(_carries(v, n) for v in data):
        return False
    op = node.op_type
    if op in _UNARY or op in _DATA0:
        return node.inputs[0] is not None and not node.inputs[0].is_constant
    if op in _BINARY or op in _LOGIC or op == ROPE:
        for v in node.inputs:
            if v is None:
                continue
            if not v.is_constant and v.meta.rank != out_rank:
                return False  # its axis 0 is not the batch axis
            if v.is_constant and v.const.ndim == out_rank and v.const.shape[0] not in (1, n):
                return False  # a constant neither broadcast over the batch nor one row each
        return True
    if op == "GatherElements":  # along another axis; data or indices may be batch constants
        d0, idx = node.input(0), node.input(1)
        return (d0 is not None and idx is not None and _axis(node, 0) != 0
                and d0.meta.rank == out_rank
                and (not d0.is_constant or d0.const.shape[0] == n)
                and (not idx.is_constant or idx.const.shape[0] == n))
    if op == "CumSum":
        axis = node.input(1)
        return (axis is not None and axis.is_constant and np.size(axis.const) == 1
                and int(np.ravel(axis.const)[0]) % out_rank != 0)
    if op == "Expand":  # the batch stays on axis 0 (a target with N there is rewritten)
        x, shape = node.input(0), node.input(1)
        return (x is not None and not x.is_constant and x.meta.rank == out_rank
                and shape is not None and shape.is_constant and shape.const.ndim == 1
                and (shape.const.size < out_rank or int(shape.const[0]) in (1, n)))
    if op == "RMSNormalization":  # not over axis 0
        return (node.input(0) is not None and not node.input(0).is_constant and len(data) == 1
                and _axis(node, -1) != 0)
    if op == "Flatten":
        return _axis(node, 1) != 0
    if op == "Concat":  # a constant part (a class token expanded to the batch) is sliced
        return _axis(node, 0) != 0 and all(
            v is not None and v.meta.rank == out_rank and v.meta.shape[0] == n
            for v in node.inputs)
    if op in ("Softmax", "LogSoftmax"):
        return _axis(node, -1) != 0
    if op == "Gemm":
        c = node.input(2)
        return (not node.attrs.get("transA") and node.input(1) is not None
                and node.input(1).is_constant and len(data) == 1 + bool(node.attrs.get("_sum"))
                and (c is None or (c.is_constant and (c.const.ndim < 2 or c.const.shape[0] == 1))))
    if op == "MatMul":
        a, b = node.input(0), node.input(1)
        if a is not None and b is not None and not b.is_constant and out_rank >= 3:
            return all(v.meta.rank == out_rank for v in data)  # a batch of products each
        if (a is not None and b is not None and not a.is_constant and b.is_constant
                and out_rank >= 3 and b.const.ndim == out_rank and b.const.shape[0] in (1, n)):
            return all(v.meta.rank == out_rank for v in data)  # one constant matrix per row
        return (a is not None and b is not None and not a.is_constant and a.meta.rank >= 2
                and a.meta.rank == out_rank and b.is_constant and b.const.ndim == 2
                and all(v.meta.rank == out_rank for v in data))  # a residual too
    if op == "LayerNormalization":
        x = node.input(0)
        return x is not None and not x.is_constant and len(data) == 1 and _axis(node, -1) != 0
    if op == "Unsqueeze":
        axes = node.input(1)
        return (axes is not None and axes.is_constant and node.input(0) is not None
                and not node.input(0).is_constant
                and all(int(a) % out_rank != 0 for a in np.ravel(axes.const)))
    if op == "Squeeze":  # explicit axes only: a chunk of one sample would lose axis 0
        x = node.input(0)
        return (x is not None and not x.is_constant
                and _keeps_axis0(node, x.meta.rank))
    if op == "Reshape":  # whole samples keep their bytes: dim 0 stays n (the clone says d)
        x, shape = node.input(0), node.input(1)
        return (x is not None and not x.is_constant and shape is not None and shape.is_constant
                and shape.const.ndim == 1 and shape.const.size >= 1
                and int(shape.const[0]) in (n, 0, -1) and x.meta.rank >= 1)
    if op == "Transpose":  # a TF export's NHWC -> NCHW: samples stay outermost
        perm = node.attrs.get("perm")
        return perm is not None and len(perm) == out_rank and int(perm[0]) == 0
    if op == "Resize":
        return _resize_axis0(node, n) is not None
    if op in ("Pad", "Slice") or op.startswith("Reduce"):
        x = node.input(0)
        return x is not None and _keeps_axis0(node, x.meta.rank)
    if op == "Gather":
        data_v, idx = node.input(0), node.input(1)
        if data_v is None or idx is None:
            return False
        axis = int(node.attrs.get("axis", 0))
        if data_v.is_constant:  # an embedding: rows picked per sample
            return axis == 0 and not idx.is_constant and idx.meta.rank >= 1
        return idx.is_constant and axis % data_v.meta.rank != 0
    if op == "FusedAttention":  # Q, K, V and Y keep the batch outermost
        if int(node.attrs.get("packed_axis", -1)) >= 0:
            return False
        perms = [node.attrs.get(k, (0, 1, 2, 3)) for k in ("q_perm", "k_perm", "v_perm",
                                                            "out_perm")]
        mask = node.input(3)
        return (all(int(p[0]) == 0 for p in perms)
                and all(v is not None and not v.is_constant for v in node.inputs[:3])
                and (mask is None or (mask.meta.rank == 4 if not mask.is_constant
                                      else mask.const.ndim < 4 or mask.const.shape[0] in (1, n))))
    return False


def _const_ints(v: Value | None) -> list[int] | None:
    return None if v is None or not v.is_constant else [int(x) for x in np.ravel(v.const)]


def _keeps_axis0(node: Node, rank: int) -> bool:
    """A Pad, Slice, Squeeze or Reduce* whose constant pads/axes leave axis 0 alone (a
    channel Slice, a spatial Pad, a reduction over C, H, W; `rank` is the input's)."""
    x = node.input(0)
    if x is None or x.is_constant or x.meta.rank != rank:
        return False
    op = node.op_type
    if op == "Pad":
        pads = _const_ints(node.input(1))
        return (len(node.inputs) <= 3 and pads is not None and len(pads) == 2 * rank
                and pads[0] == 0 and pads[rank] == 0
                and (node.input(2) is None or node.input(2).is_constant))
    if op == "Slice":
        if len(node.inputs) < 4 or any(v is not None and not v.is_constant
                                       for v in node.inputs[1:]):
            return False
        axes = _const_ints(node.input(3))
        return axes is not None and all(a % rank != 0 for a in axes)
    axes = _const_ints(node.input(1)) if len(node.inputs) > 1 else None
    if axes is None:
        if len(node.inputs) > 1 and node.input(1) is not None:
            return False  # axes computed at run time
        axes = [int(a) for a in node.attrs.get("axes") or []]
    return bool(axes) and all(a % rank != 0 for a in axes)


def _resize_axis0(node: Node, n: int) -> int | None:
    """For a Resize that leaves axis 0 as it is (a feature pyramid's upsample): the index of
    the axis-0 entry of its constant `sizes` (n, which a chunk's clone rewrites to its own
    batch), or -1 when nothing needs rewriting (constant scales keeping axis 0, or `axes`
    without it); None when it may resize axis 0."""
    if node.attrs.get("mode") == "tf_crop_and_resize" or len(node.inputs) > 4:
        return None
    rank = node.outputs[0].meta.rank
    axes = node.attrs.get("axes")
    axes = list(range(rank)) if not axes else [int(a) % rank for a in axes]
    extra = [v for v in node.inputs[1:] if v is not None]
    if any(not v.is_constant for v in extra):
        return None
    scales, sizes = node.input(2), node.input(3)
    if sizes is not None and sizes.const.size:
        if node.attrs.get("keep_aspect_ratio_policy", "stretch") != "stretch":
            return None
        if 0 not in axes:
            return -1
        k = axes.index(0)
        return k if sizes.const.size == len(axes) and int(sizes.const[k]) == n else None
    if scales is None or not scales.const.size or scales.const.size != len(axes):
        return None
    return -1 if 0 not in axes or float(scales.const[axes.index(0)]) == 1.0 else None


def _reshape_rows(node: Node, n: int, k_in: int) -> int | None:
    """For a Reshape of a value whose axis 0 holds k_in rows per sample: the rows per
    sample of its output (whose axis 0 a multiple of n), else None. Row-major order keeps
    each sample's bytes contiguous, so sample i is rows [i*k, (i+1)*k) on both sides
    (DeBERTa's attention folds the heads into axis 0: [N, H, S, D] -> [N*H, S, D]). The
    target's axis-0 entry must say the rows (a chunk's clone rewrites it), -1, or 0 when
    the rows stay as they are."""
    x, shape, out = node.input(0), node.input(1), node.outputs[0]
    if (x is None or x.is_constant or shape is None or not shape.is_constant
            or shape.const.ndim != 1 or shape.const.size < 1 or not _carries(x, n * k_in)
            or out.meta is None or not out.meta.is_static or out.meta.rank < 1
            or out.meta.shape[0] % n or out.meta.shape[0] == 0):
        return None
    k = out.meta.shape[0] // n
    t0 = int(shape.const[0])
    return k if t0 in (n * k, -1) or (t0 == 0 and k == k_in) else None


def _rows_per_sample(graph: Graph, n: int) -> dict[Node, int] | None:
    """Per node, the rows its output's axis 0 holds for each of the n samples (1 but where
    a Reshape folded another axis into the batch), when every node is separable over its
    rows; else None. Every node's data inputs must agree on it."""
    ks: dict[Value, int] = {v: 1 for v in graph.inputs}
    rows: dict[Node, int] = {}
    for node in graph.nodes:
        k_ins = {ks.get(v) for v in node.inputs if v is not None and not v.is_constant}
        if len(k_ins) != 1 or None in k_ins:
            return None
        (k_in,) = k_ins
        if node.op_type == "Reshape":
            k = _reshape_rows(node, n, k_in)
        else:
            k = k_in if _separable(node, n * k_in) else None
        if k is None:
            return None
        rows[node] = k
        for out in node.outputs:
            ks[out] = k
    return rows


def _batch_of_separable(graph: Graph) -> int | None:
    """The batch n when every input and output carries it on axis 0 and every node is on
    the device, in one partition, and separable; else None."""
    nodes = graph.nodes
    if not nodes or not graph.inputs or not graph.outputs:
        return None
    first = graph.inputs[0].meta
    if first is None or not first.is_static or first.rank < 1 or first.shape[0] < 2:
        return None
    n = first.shape[0]
    part = nodes[0].meta.partition
    if not all(_carries(v, n) for v in graph.inputs) or \
            not all(v.producer is not None and _carries(v, n) for v in graph.outputs):
        return None
    if not all(x.meta.engine is Engine.DEVICE and x.meta.partition == part for x in nodes):
        return None
    return n if _rows_per_sample(graph, n) is not None else None


def plan_chunk(graph: Graph) -> tuple[int, int] | None:
    """(batch, chunk) when the graph should run in chunks, else None."""
    n = _batch_of_separable(graph)
    if n is None:
        return None
    nodes = graph.nodes
    flops = sum(node_flops(x) for x in nodes)
    written = sum(x.outputs[0].meta.nbytes for x in nodes)
    if written == 0 or flops / written > MAX_INTENSITY:
        return None
    largest = max(x.outputs[0].meta.nbytes for x in nodes) / n
    if n * largest <= CACHE_BYTES:
        return None  # the whole batch fits already
    # The largest divisor of n below n whose chunk fits the cache, if it leaves at most
    # MAX_CHUNKS chunks. Divisors come in pairs (k, n // k) with k <= sqrt(n): O(sqrt n)
    # steps (a loop from n down took minutes for a batch of 2**31).
    fits = [d for k in range(1, math.isqrt(n) + 1) if n % k == 0 for d in (k, n // k)
            if d < n and d * largest <= CACHE_BYTES]
    d = max(fits, default=0)
    return (n, d) if d and n // d <= MAX_CHUNKS else None


def plan_parallel(graph: Graph, ways: int) -> tuple[int, int] | None:
    """(batch, chunk) when the graph should run as `ways` chunks at once, else None: a
    separable graph on one device partition whose batch divides by `ways` and whose chunks
    each have at least MIN_PARALLEL_FLOPS of convolutions and matrix products."""
    n = _batch_of_separable(graph) if ways >= 2 else None
    if n is None or n < ways or n % ways:
        return None
    if sum(node_flops(x) for x in graph.nodes) / ways < MIN_PARALLEL_FLOPS:
        return None
    return n, n // ways


def _chunk_of(graph: Graph, node: Node, v: Value | None, n: int, start: int,
              d: int) -> Value | None:
    """A chunk's operand: a constant with the batch's n rows on the output's axis 0 (of an
    op in _ALIGNED, or a MatMul's per-row matrices) is cut to the chunk's d rows from
    `start`; anything else as it is."""
    if v is None or not v.is_constant or n == d:
        return v
    c = np.asarray(v.const)
    aligned = node.op_type in _ALIGNED or (node.op_type == "MatMul" and c.ndim >= 3)
    if not aligned or c.ndim != node.outputs[0].meta.rank or c.shape[0] != n:
        return v
    return graph.add_constant(None, np.ascontiguousarray(c[start:start + d]))


def split_batch(graph: Graph, enabled: bool = True, parallel: int = 0) -> PassResult:
    """`parallel` >= 2: the device runs that many streams at once (one core each), and a
    compute-heavy separable graph is split into that many chunks, one per stream (the
    memory-bound plan's chunks are dealt to the streams in turn)."""
    plan = plan_chunk(graph) if enabled else None
    ways = 0
    if enabled and parallel >= 2:
        wide = plan_parallel(graph, parallel)
        if wide is not None:
            ways = parallel
            if plan is None or (plan[0] // plan[1]) % parallel:
                plan = wide  # one chunk per stream (else the cache-sized chunks, in turn)
    if plan is None:
        return PassResult(graph, False, "not split")
    n, d = plan
    k = n // d
    old = list(graph.nodes)
    rows = _rows_per_sample(graph, n)  # not None: the plan found the graph separable
    engine, part = old[0].meta.engine, old[0].meta.partition

    def new_node(op: str, inputs, attrs: dict, name: str, shape_from: Value,
                 dim0: int, outputs: int = 1) -> Node:
        node = graph.add_node(op, inputs, attrs=attrs, name=graph.unique_name(name),
                              outputs=outputs)
        node.meta.engine, node.meta.partition = engine, part
        meta = shape_from.meta
        for out in node.outputs:  # (several only of a fused region: all of one shape)
            out.meta = TensorMeta(meta.dtype, (dim0,) + tuple(meta.shape[1:]))
        return node

    chunks: list[dict[Value, Value]] = []
    for i in range(k):
        m: dict[Value, Value] = {}
        for x in graph.inputs:
            bounds = [graph.add_constant(None, np.array([b], np.int64))
                      for b in (i * d, (i + 1) * d, 0)]
            m[x] = new_node("Slice", [x, *bounds], {}, f"{x.name}_chunk{i}", x, d).outputs[0]
        for node in old:
            r = rows[node]  # the output's rows per sample: n * r in all, d * r per chunk
            ins = [m.get(v, v) if v is not None else None for v in node.inputs]
            if node.op_type in ("Reshape", "Expand") and node.input(1).const.size == \
                    node.outputs[0].meta.rank and int(node.input(1).const[0]) == n * r:
                target = node.input(1).const.copy()
                target[0] = d * r
                ins[1] = graph.add_constant(None, target)
            k0 = _resize_axis0(node, n * r) if node.op_type == "Resize" else -1
            if k0 is not None and k0 >= 0:
                sizes = node.input(3).const.copy()
                sizes[k0] = d * r
                ins[3] = graph.add_constant(None, sizes)
            ins = [_chunk_of(graph, node, v, n * r, i * d * r, d * r) for v in ins]
            clone = new_node(node.op_type, ins, dict(node.attrs), f"{node.name}_chunk{i}",
                             node.outputs[0], d * r, len(node.outputs))
            clone.meta.fused = node.meta.fused
            m.update(zip(node.outputs, clone.outputs))
        if ways:  # this chunk's stream: every node of it, the input slices included
            for v in m.values():
                if v.producer is not None:
                    v.producer.meta.stream = i % ways
        chunks.append(m)
    renames: list[tuple[Value, str]] = []
    for out in dict.fromkeys(graph.outputs):
        cat = new_node("Concat", [m[out] for m in chunks], {"axis": 0}, f"{out.name}_concat",
                       out, n)
        graph.replace_all_uses(out, cat.outputs[0])
        renames.append((cat.outputs[0], out.name))
    for node in reversed(old):
        graph.remove_node(node)
    for v, name in renames:  # the outputs keep their names
        del graph.values[v.name]
        v.name = name
        graph.values[name] = v
    where = f" on {ways} streams at once" if ways else ""
    graph.fusions.append(f"batch split: {n} samples as {k} chunks of {d}{where}")
    return PassResult(graph, True, f"{k} chunks of {d}{where}")


__all__ = ["CACHE_BYTES", "MAX_CHUNKS", "MAX_INTENSITY", "MIN_PARALLEL_FLOPS", "plan_chunk",
           "plan_parallel", "split_batch"]
