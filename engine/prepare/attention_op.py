"""ONNX Attention (opset 23) as the steps the attention fusion takes.

torch's exporter writes `scaled_dot_product_attention` as one `Attention` node from opset 23
on. Its reference runs in numpy on the host, so a decoder exported that way was cut into a
device program per layer with a host step between (a one-layer GQA block: three partitions).
This rewrite spells the node out as the graph exporters wrote before opset 23 — head split,
Q·Kᵀ, scale, additive mask, Softmax, P·V, head merge — which the `attention` fusion row then
makes one FusedAttention (the Transposes its perms, the repeat_kv its grouped heads); what the
fusion does not take still runs on the device op by op.

Exactly the reference's result, including its edges:
- the 3-D form [B, S, heads * D] (q_num_heads, kv_num_heads) and the 4-D one [B, H, S, D];
- grouped heads (K/V with fewer heads than Q), repeated as repeat_kv;
- past_key/past_value: K and V are Concat(past, new) along the sequence, the present outputs;
- is_causal and the left/right windows: a constant bias, the causal offset being the past's
  length;
- a boolean mask (False: -inf) or an additive float one, its last axis as long as the keys;
- a row every key of which is masked: the reference gives zeros (not Softmax's NaN). Where the
  bias may have such a row (a mask from the graph; a window that hides a whole row) the bias
  is clamped to -FLT_MAX, so the row's Softmax is finite, and Y is multiplied by 1 where the
  row has a visible key, 0 where not.
Not rewritten (the host runs the reference): softcap, the qk_matmul_output output, the
nonpad_kv_seqlen input, types other than float32, and shapes not known at compile time.
"""

from __future__ import annotations

import numpy as np

from ..dtypes import DType, to_onnx
from ..ir import Graph, Node, Value
from ..ops.attention import visible_keys
from .steps import chain, replace_outputs

_FLOAT32_MAX = float(np.finfo(np.float32).max)
# The causal/window bias is a constant [Sq, Sk] made at compile time: at most this many
# elements (64 MB); a longer one leaves the node to the host's reference, under its guard.
MAX_WINDOW_BIAS = 1 << 24


def _static_f32(v: Value | None, rank: int | None = None) -> bool:
    return (v is not None and v.meta is not None and v.meta.is_static
            and v.meta.dtype is DType.FLOAT32 and (rank is None or v.meta.rank == rank))


def _used(node: Node, i: int, graph_outputs: list[Value] | None = None) -> bool:
    return i < len(node.outputs) and bool(node.outputs[i].users or (
        graph_outputs is not None and node.outputs[i] in graph_outputs))


def onnx_attention(graph: Graph, node: Node) -> bool:
    """An Attention the device steps compute exactly (see the module's note)."""
    if node.op_type != "Attention":
        return False
    q, k, v = (node.input(i) for i in range(3))
    if not all(_static_f32(x) for x in (q, k, v)) or q.meta.rank not in (3, 4) \
            or not q.meta.rank == k.meta.rank == v.meta.rank:
        return False
    if node.input(6) is not None or _used(node, 3, graph.outputs) \
            or float(node.attrs.get("softcap", 0.0) or 0.0) != 0.0:
        return False
    past_k, past_v = node.input(4), node.input(5)
    if (past_k is None) != (past_v is None) or (past_k is not None and not (
            _static_f32(past_k, 4) and _static_f32(past_v, 4))):
        return False
    if past_k is None and (_used(node, 1, graph.outputs) or _used(node, 2, graph.outputs)):
        return False  # the present key/value would be the inputs themselves: left as is
    mask = node.input(3)
    if mask is not None and not (mask.meta is not None and mask.meta.is_static and (
            mask.meta.dtype is DType.BOOL or mask.meta.dtype is DType.FLOAT32)):
        return False
    out = node.outputs[0].meta
    if out is None or not out.is_static:
        return False
    hq, hk = _heads(node)
    if hq is None or hk < 1 or hq % hk:
        return False
    kv_len = _kv_len(node)
    if mask is not None:  # the reference pads a shorter mask; take only the plain case
        if mask.meta.rank < 2 or mask.meta.rank > 4 or mask.meta.shape[-1] != kv_len:
            return False
    q_len = q.meta.shape[2] if q.meta.rank == 4 else q.meta.shape[1]
    restricted = int(node.attrs.get("is_causal", 0)) or \
        int(node.attrs.get("left_window_size", -1)) >= 0 or \
        int(node.attrs.get("right_window_size", -1)) >= 0
    return not restricted or q_len * kv_len <= MAX_WINDOW_BIAS


def _heads(node: Node) -> tuple[int | None, int]:
    q, k = node.input(0), node.input(1)
    if q.meta.rank == 4:
        return q.meta.shape[1], k.meta.shape[1]
    hq, hk = node.attrs.get("q_num_heads"), node.attrs.get("kv_num_heads")
    if hq is None or hk is None or int(hq) < 1 or int(hk) < 1 \
            or q.meta.shape[2] % int(hq) or k.meta.shape[2] % int(hk):
        return None, 0
    return int(hq), int(hk)


def _kv_len(node: Node) -> int:
    k, past = node.input(1), node.input(4)
    own = k.meta.shape[2] if k.meta.rank == 4 else k.meta.shape[1]
    return own + (past.meta.shape[2] if past is not None else 0)


def _window_bias(node: Node, q_len: int, kv_len: int, offset: int) -> np.ndarray | None:
    """The causal/window bias [q_len, kv_len] (0 visible, -inf hidden) of the reference's
    visibility; None if unrestricted."""
    ok = visible_keys(q_len, kv_len, offset, {
        "is_causal": int(node.attrs.get("is_causal", 0)),
        "left_window_size": int(node.attrs.get("left_window_size", -1)),
        "right_window_size": int(node.attrs.get("right_window_size", -1))})
    return None if ok is None else np.where(ok, np.float32(0), np.float32(-np.inf))


def as_attention_steps(graph: Graph, node: Node) -> None:
    q, k, v = node.inputs[:3]
    mask, past_k, past_v = node.input(3), node.input(4), node.input(5)
    step = chain(graph, node)

    def const(x) -> Value:
        return graph.add_constant(None, np.asarray(x))

    hq, hk = _heads(node)
    three_d = q.meta.rank == 3
    b = q.meta.shape[0]
    if three_d:  # [B, S, H*D] -> [B, S, H, D]; the Transposes below are the head split
        q_len = q.meta.shape[1]
        d = q.meta.shape[2] // hq
        dv = v.meta.shape[2] // hk
        q4 = step("Transpose", [step("Reshape", [q, const([b, q_len, hq, d])])],
                  perm=[0, 2, 1, 3])
        k4 = step("Transpose", [step("Reshape", [k, const([b, k.meta.shape[1], hk, d])])],
                  perm=[0, 2, 1, 3])
        v4 = step("Transpose", [step("Reshape", [v, const([b, v.meta.shape[1], hk, dv])])],
                  perm=[0, 2, 1, 3])
    else:
        q_len, d, dv = q.meta.shape[2], q.meta.shape[3], v.meta.shape[3]
        q4, k4, v4 = q, k, v
    offset = 0
    if past_k is not None:
        offset = past_k.meta.shape[2]
        k4 = step("Concat", [past_k, k4], axis=2)
        v4 = step("Concat", [past_v, v4], axis=2)
    present = (k4, v4)
    kv_len = _kv_len(node)
    group = hq // hk
    if group > 1:  # transformers' repeat_kv, which the fusion reads as grouped heads
        k4, v4 = (step("Reshape", [step("Expand", [
            step("Unsqueeze", [x, const([2])]), const([b, hk, group, kv_len, n])]),
            const([b, hq, kv_len, n])]) for x, n in ((k4, d), (v4, dv)))
    scale = node.attrs.get("scale")
    scale = 1.0 / np.sqrt(d) if scale is None else float(scale)
    scores = step("Mul", [step("MatMul", [q4, step("Transpose", [k4], perm=[0, 1, 3, 2])]),
                          const(np.float32(scale))])

    window = _window_bias(node, q_len, kv_len, offset)
    bias: Value | None = None
    if mask is not None:
        bias = (step("Where", [mask, const(np.float32(0)), const(np.float32(-np.inf))])
                if mask.meta.dtype is DType.BOOL else mask)
    if window is not None:
        bias = const(window) if bias is None else step("Add", [bias, const(window)])
    alive = None
    rank = max(mask.meta.rank if mask is not None else 0, 2 if window is not None else 0)
    if bias is not None and (mask is not None or np.isneginf(window).all(axis=-1).any()):
        # a row may hide every key: its Softmax finite (clamped bias), its output zeroed
        top = step("ReduceMax", [bias, const([-1])], keepdims=1)
        alive = step("Cast", [step("Greater", [top, const(np.float32(-np.inf))])],
                     to=to_onnx(DType.FLOAT32))
        bias = step("Max", [bias, const(np.float32(-_FLOAT32_MAX))])
    if bias is not None:
        scores = step("Add", [scores, bias])
    y = step("MatMul", [step("Softmax", [scores], axis=-1), v4])
    if alive is not None and three_d:  # [.., Sq, 1] to rank 4, then as Y after the merge
        if rank < 4:
            alive = step("Unsqueeze", [alive, const(list(range(4 - rank)))])
        alive = step("Transpose", [alive], perm=[0, 2, 1, 3])
    if three_d:
        y = step("Transpose", [y], perm=[0, 2, 1, 3])
        if alive is not None:
            y = step("Mul", [y, alive])
        y = step("Reshape", [y, const([b, q_len, hq * dv])])
    elif alive is not None:
        y = step("Mul", [y, alive])
    replace_outputs(graph, node, {i: value for i, value in ((0, y), (1, present[0]),
                                                           (2, present[1]))
                                  if _used(node, i, graph.outputs)})
