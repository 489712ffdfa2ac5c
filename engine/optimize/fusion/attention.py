"""Attention fusion: a transformer layer's attention core becomes one FusedAttention node.

The pattern, matched from its second MatMul (brackets: optional)::

    Q -[Transpose]-[Mul|Div by a scalar]-.
                                          MatMul -[Div|Mul by a scalar]-[Add mask]- Softmax(-1) -.
    K -[Transpose]-[Mul|Div by a scalar]-'                                                        |
    V -[Transpose]------------------------------------------------------------------ MatMul(P, V)
                                                                                  -[Transpose]- Y

Torch exports BERT-style attention exactly so: Reshape [B,S,H,D] -> Transpose(0,2,1,3) (K:
Transpose(0,2,3,1)) -> MatMul -> Div by sqrt(D) -> Add of the extended mask -> Softmax -> MatMul
-> Transpose(0,2,1,3) -> Reshape [B,S,H*D]; scaled_dot_product_attention exports the scale as
Muls on Q and K instead. The Transposes become the node's perms (the kernel reads Q, K and V
where they are and writes Y in its final layout), so with the Reshapes being views the head
split and merge cost nothing; the scalar factors multiply into `scale`; the mask is any float32
tensor (constant or computed, e.g. from the attention_mask input) that broadcasts to the
scores without enlarging them.

T5 (and other relative-position models) add two terms to the scores: the position bias
[1,H,Sq,Sk] and then the extended mask [B,1,1,Sk] (`Add(Add(scores, bias), mask)`). The row
takes up to `_MAX_TERMS` such Adds and hands the kernel their sum as its one mask: constant
terms are summed at compile time (all-zero ones, T5's cross-attention bias, are dropped), a
computed one is added by one Add node before the fused node, shared by every layer that adds
the same terms (T5's layers all add block 0's bias and the same mask). The scores are then
s + (b + m) instead of (s + b) + m: the same terms, summed in another order.

Grouped-query attention (Mistral, Gemma, Qwen2...): K and V have Hkv heads, repeated to Q's H
by repeat_kv (Unsqueeze at 2, Expand by G, Reshape to [B,H,S,D]). The row absorbs that repeat
on both K and V (with the Transposes before it), so the node's K and V keep Hkv heads and the
kernel reads head h // G for query head h.

Like every fusion it acts inside one device partition only: each absorbed node is on the device
in the same partition, and each absorbed intermediate has no other reader (a Transpose on an
operand whose output is read elsewhere stays, and the node reads its output instead).
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from ...dtypes import DType
from ...ir import Graph, Node, TensorMeta, Value
from ...ops.attention import IDENTITY4
from .match import Fusion, on_device, rename_output, sole_producer

_FLOAT32_MAX = 3.4e38
# Additive terms (mask, position bias) taken between the scores and the Softmax.
_MAX_TERMS = 3
# Constant terms are summed at compile time into one constant up to this many elements
# (a larger broadcast sum is added at run time instead of being stored).
_MAX_FOLDED_MASK = 1 << 20


@dataclasses.dataclass
class _Operand:
    source: Value  # what the fused node reads
    perm: tuple[int, ...] = IDENTITY4  # the absorbed Transposes, composed
    factor: float = 1.0  # the absorbed scalar Mul/Div factors, multiplied
    group: int = 1  # query heads per key/value head: an absorbed repeat_kv's factor
    nodes: list[Node] = dataclasses.field(default_factory=list)


@dataclasses.dataclass
class _Match:
    q: _Operand
    k: _Operand
    v: _Operand
    terms: list[Value]  # added to the scaled scores, in the graph's order
    out_perm: tuple[int, ...]
    scale: float
    nodes: list[Node]  # every absorbed node, in graph order
    nan_to_zero: bool = False  # Where(IsNaN(P), 0, P) absorbed


def _f32_4d(v: Value | None) -> bool:
    return (v is not None and v.meta is not None and v.meta.is_static and v.meta.rank == 4
            and v.meta.dtype is DType.FLOAT32 and v.meta.numel > 0)


def _scaled(node: Node) -> tuple[Value, float] | None:
    """(x, c) when `node` is x * c, c * x or x / (1/c) for a constant scalar c, keeping x's
    shape; else None."""
    a, b = node.input(0), node.input(1)
    if a is None or b is None:
        return None
    if node.op_type == "Mul" and a.is_constant:
        a, b = b, a
    if a.is_constant or not b.is_constant or np.size(b.const) != 1 or \
            node.outputs[0].meta != a.meta:
        return None
    c = float(np.asarray(b.const, np.float64).reshape(()))
    if node.op_type == "Div":
        if c == 0.0:
            return None
        c = 1.0 / c
    return a, c


def _repeated_heads(graph: Graph, v: Value, matmul: Node) -> tuple[Value, int, list[Node]] | None:
    """v = Reshape(Expand(Unsqueeze(x) [B,Hkv,1,S,D], [B,Hkv,G,S,D]), [B,Hkv*G,S,D]), the
    repeat_kv of grouped-query attention as transformers exports it, in matmul's partition
    and read only by the next link: (x, G, the three nodes); else None. The shapes decide
    the axes (a unit axis inserted before S, repeated G times, merged into the heads)."""
    reshape = sole_producer(graph, v, {"Reshape"})
    expand = reshape and sole_producer(graph, reshape.input(0), {"Expand"})
    unsqueeze = expand and sole_producer(graph, expand.input(0), {"Unsqueeze"})
    if unsqueeze is None or not on_device(matmul, reshape, expand, unsqueeze):
        return None
    x = unsqueeze.input(0)
    if not _f32_4d(x):
        return None
    b, hkv, s, d = x.meta.shape
    group = v.meta.shape[1] // hkv
    if group < 2 or tuple(v.meta.shape) != (b, hkv * group, s, d) \
            or unsqueeze.outputs[0].meta.shape != (b, hkv, 1, s, d) \
            or expand.outputs[0].meta.shape != (b, hkv, group, s, d):
        return None
    return x, group, [reshape, expand, unsqueeze]


def _peel(graph: Graph, v: Value | None, matmul: Node, scalars: bool,
          kv: bool = False) -> _Operand | None:
    """Walks up from an operand of `matmul` through absorbable Transposes (and, if `scalars`,
    scalar Mul/Div; if `kv`, one repeat_kv of the head axis): in matmul's device partition,
    with no other reader."""
    if v is None or not _f32_4d(v):
        return None
    op = _Operand(v)
    kinds = {"Transpose", "Mul", "Div"} if scalars else {"Transpose"}
    while True:
        # the logical head axis (1) must be the repeated one, axis 1 where the repeat is
        if kv and op.group == 1 and op.perm[1] == 1:
            repeat = _repeated_heads(graph, op.source, matmul)
            if repeat is not None:
                op.source, op.group, nodes = repeat
                op.nodes += nodes
                continue
        node = sole_producer(graph, op.source, kinds)
        if node is None or not on_device(matmul, node):
            return op
        if node.op_type == "Transpose":
            perm = tuple(int(x) for x in node.attrs.get("perm", (3, 2, 1, 0)))
            src = node.input(0)
            if len(perm) != 4 or src is None or not _f32_4d(src):
                return op
            # transpose(transpose(src, perm), op.perm) reads src's axis perm[op.perm[i]]
            op.perm = tuple(perm[i] for i in op.perm)
            op.source = src
        else:
            scaled = _scaled(node)
            if scaled is None:
                return op
            op.source, factor = scaled
            op.factor *= factor
        op.nodes.append(node)


def _scores(graph: Graph, v: Value | None) -> tuple[Node, float, list[Node]] | None:
    """MatMul(Q, K) under scalar Mul/Div nodes: (the MatMul, their factor, those nodes)."""
    factor, nodes = 1.0, []
    while True:
        node = sole_producer(graph, v, {"MatMul", "Mul", "Div"})
        if node is None:
            return None
        if node.op_type == "MatMul":
            return node, factor, nodes
        scaled = _scaled(node)
        if scaled is None:
            return None
        v, f = scaled
        factor *= f
        nodes.append(node)


def _additive(graph: Graph, v: Value, full: TensorMeta, depth: int = 0
              ) -> tuple[Node, float, list[Node], list[Node], list[Value]] | None:
    """v = scaled MatMul(Q, K) + t1 + t2 ... (Adds nested left or right, each of the scores'
    type `full`, at most _MAX_TERMS): (the MatMul, the scale factor, the scale nodes, the
    Adds and the terms, both in graph order)."""
    found = _scores(graph, v)
    if found is not None:
        return (*found, [], [])
    add = sole_producer(graph, v, {"Add"}) if depth < _MAX_TERMS else None
    if add is None or add.outputs[0].meta != full:
        return None
    for i in (0, 1):
        chain, term = add.input(i), add.input(1 - i)
        if chain is None or term is None or chain is term:
            continue
        inner = _additive(graph, chain, full, depth + 1)
        if inner is not None:
            mm, factor, scale_nodes, adds, terms = inner
            return mm, factor, scale_nodes, adds + [add], terms + [term]
    return None


def _plain_matmul(node: Node) -> bool:
    return not any(node.attrs.get(k) for k in ("_has_bias", "_activation", "_sum"))


def match_attention(graph: Graph, mm2: Node) -> _Match | None:
    if mm2.op_type != "MatMul" or not _plain_matmul(mm2) or not _f32_4d(mm2.outputs[0]):
        return None
    probs, zeroed = _nan_zeroed(graph, mm2.input(0))
    softmax = sole_producer(graph, probs, {"Softmax"}) if not zeroed else probs.producer
    if softmax is None or softmax.op_type != "Softmax" \
            or int(softmax.attrs.get("axis", -1)) not in (-1, 3):
        return None
    scores_v = softmax.input(0)
    if not _f32_4d(scores_v):
        return None
    found = _additive(graph, scores_v, scores_v.meta)
    if found is None:
        return None
    mm1, factor, scale_nodes, adds, terms = found
    if not _plain_matmul(mm1) or mm1.outputs[0].meta != scores_v.meta:
        return None
    for t in terms:
        if t.meta is None or not t.meta.is_static or t.meta.dtype is not DType.FLOAT32 \
                or t.meta.rank > 4:
            return None
    q = _peel(graph, mm1.input(0), mm1, scalars=True)
    k = _peel(graph, mm1.input(1), mm1, scalars=True, kv=True)
    v = _peel(graph, mm2.input(1), mm2, scalars=False, kv=True)
    if k is not None and v is not None and k.group != v.group:  # K and V repeat alike or not
        k = _peel(graph, mm1.input(1), mm1, scalars=True)
        v = _peel(graph, mm2.input(1), mm2, scalars=False)
    if q is None or k is None or v is None:
        return None
    # MatMul broadcasts batch dims; the kernel does not: Q, K and V must agree on [B,H] —
    # but for one K/V head broadcast over Q's (multi-query attention: Falcon), which is the
    # kernel's grouped heads with a group of H.
    qs, ks, vs = (mm.input(i).meta.shape for mm, i in ((mm1, 0), (mm1, 1), (mm2, 1)))
    if not qs[:2] == ks[:2] == vs[:2] and not (
            qs[0] == ks[0] == vs[0] and ks[1] == vs[1] == 1 and k.group == v.group == 1):
        return None
    out_perm, tail = IDENTITY4, []
    out = mm2.outputs[0]
    if len(out.users) == 1 and out not in graph.outputs:
        t = out.users[0]
        if t.op_type == "Transpose" and len(t.attrs.get("perm", ())) == 4 and \
                on_device(mm2, t):
            out_perm, tail = tuple(int(x) for x in t.attrs["perm"]), [t]
    scale = factor * q.factor * k.factor
    if not math.isfinite(scale) or abs(scale) > _FLOAT32_MAX:
        return None
    nodes = q.nodes + k.nodes + v.nodes + [mm1] + scale_nodes + adds + [softmax] + zeroed \
        + [mm2] + tail
    if len(set(nodes)) != len(nodes) or not on_device(*nodes):
        return None
    order = {n: i for i, n in enumerate(graph.nodes)}
    return _Match(q, k, v, terms, out_perm, scale, sorted(nodes, key=order.__getitem__),
                  bool(zeroed))


def _nan_zeroed(graph: Graph, p: Value | None) -> tuple[Value | None, list[Node]]:
    """(P, [IsNaN, Where]) when p = Where(IsNaN(P), 0, P) and P is read by those two only —
    torch's export of scaled_dot_product_attention zeroes a row that sees no key so — else
    (p, [])."""
    where = sole_producer(graph, p, {"Where"})
    if where is None:
        return p, []
    cond, zero, probs = (where.input(i) for i in range(3))
    isnan = cond.producer if cond is not None else None
    if isnan is None or isnan.op_type != "IsNaN" or isnan.input(0) is not probs \
            or cond.users != [where] or cond in graph.outputs or zero is None \
            or not zero.is_constant or np.size(zero.const) != 1 \
            or float(np.asarray(zero.const).reshape(())) != 0.0 \
            or probs is None or probs.producer is None \
            or sorted(map(id, probs.users)) != sorted(map(id, (isnan, where))) \
            or probs in graph.outputs or probs.meta != p.meta:
        return p, []
    return probs, [isnan, where]


_REPEAT = frozenset({"Unsqueeze", "Expand", "Reshape"})


def rewrite_attention(graph: Graph, mm2: Node, m: _Match) -> str:
    last = m.nodes[-1]
    final = last.outputs[0]
    mask, anchor = _mask(graph, m.terms, last)
    inputs = [m.q.source, m.k.source, m.v.source] + ([mask] if mask is not None else [])
    attrs = {"scale": m.scale, "q_perm": list(m.q.perm), "k_perm": list(m.k.perm),
             "v_perm": list(m.v.perm), "out_perm": list(m.out_perm)}
    if m.nan_to_zero:
        attrs["nan_to_zero"] = 1
    node = graph.add_node("FusedAttention", inputs, attrs=attrs,
                          name=graph.unique_name("fused_attention"), after=anchor)
    node.meta.engine, node.meta.partition = last.meta.engine, last.meta.partition
    node.outputs[0].meta = final.meta
    graph.replace_all_uses(final, node.outputs[0])
    for n in reversed(m.nodes):
        graph.remove_node(n)
    rename_output(graph, node.outputs[0], final.name)
    node.meta.fused = tuple(name for n in m.nodes for name in (n.name, *n.meta.fused))
    core = [n.op_type for n in m.nodes if n.op_type != "Transpose" and n.op_type not in _REPEAT]
    transposes = sum(n.op_type == "Transpose" for n in m.nodes)
    what = "+".join(core) + (f", {transposes} Transpose{'s' * (transposes != 1)}"
                             if transposes else "")
    if m.k.group > 1:
        what += f", K and V repeated {m.k.group}x"
    terms = " + ".join(t.name for t in m.terms)
    if mask is not None and len(m.terms) > 1:
        terms += f" as {mask.name}"
    return (f"Attention({what}): {len(m.nodes)} nodes -> {node.name} "
            f"(scale {m.scale:.6g}{', mask ' + terms if m.terms else ''})")


def _mask(graph: Graph, terms: list[Value], last: Node) -> tuple[Value | None, Node]:
    """One value holding the sum of `terms` (None for no terms, or only zeros): constants
    summed now, computed terms added by Add nodes inserted after `last` (the match's last
    node, so after every term's producer) or an existing identical Add before it; and the
    node the fused node goes after (`last`, or the last Add inserted)."""
    consts = [t for t in terms if t.is_constant and np.any(t.const)]
    live = [t for t in terms if not t.is_constant]
    if len(consts) > 1:
        shape = np.broadcast_shapes(*(t.const.shape for t in consts))
        if math.prod(shape) <= _MAX_FOLDED_MASK:
            total = consts[0].const.astype(np.float32)
            for t in consts[1:]:
                total = total + t.const.astype(np.float32)
            # named after its terms: the layers that add the same constants share it
            name = f"attention_mask({'+'.join(t.name for t in consts)})"
            existing = graph.values.get(name)
            consts = [existing if existing is not None and existing.is_constant
                      else graph.add_constant(name, total)]
    values = consts + live
    if not values:
        return None, last
    acc, anchor = values[0], last
    order = {n: i for i, n in enumerate(graph.nodes)}
    for t in values[1:]:
        acc, anchor = _shared_add(graph, acc, t, last, anchor, order)
    return acc, anchor


def _shared_add(graph: Graph, a: Value, b: Value, last: Node, anchor: Node,
                order: dict[Node, int]) -> tuple[Value, Node]:
    """a + b: the output of an Add of the two already in `last`'s device partition and
    before it (an earlier layer's), else of a new one right after `anchor`; and the new
    anchor."""
    for user in a.users:
        if user.op_type == "Add" and {user.input(0), user.input(1)} == {a, b} \
                and not user.attrs and on_device(last, user) \
                and order.get(user, len(order)) < order[last]:
            return user.outputs[0], anchor
    node = graph.add_node("Add", [a, b], name=graph.unique_name("attention_mask"),
                          after=anchor)
    node.meta.engine, node.meta.partition = last.meta.engine, last.meta.partition
    node.outputs[0].meta = TensorMeta(DType.FLOAT32, tuple(
        int(d) for d in np.broadcast_shapes(a.meta.shape, b.meta.shape)))
    return node.outputs[0], node


ROW = Fusion("attention", match_attention, rewrite_attention, produces=("FusedAttention",))
