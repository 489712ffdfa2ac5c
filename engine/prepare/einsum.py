"""Einsum as the device's Transpose, Reshape, ReduceSum and MatMul.

An Einsum of one or two float32 operands of static shape, with no label repeated inside a
term (no diagonal), is a batched matrix product once its labels are sorted into groups:
batch labels (in both operands and the output), contracted ones (in both, not in the
output), each operand's free ones (in it and the output only) and its summed ones (in it
only: a ReduceSum first). Each operand is transposed to [batch, free, contracted] (the
second to [batch, contracted, free]) and reshaped to [batch..., M, K] / [batch..., K, N];
the MatMul's [batch..., M, N] is reshaped to the free labels and transposed into the
output's order. An ellipsis becomes fresh labels, right-aligned over each operand's rank.

Attention written as einsum (Funnel-Transformer, XLNet, Transformer-XL, Perceiver, many
TensorFlow exports: 'bind,bjnd->bnij', 'binh,tnh->bnit') otherwise ran as numpy on the host,
each one a round trip off the device.
"""

from __future__ import annotations

import numpy as np

from ..ir import Graph, Node, Value
from ..ops.linalg import parse_einsum
from .steps import chain


class _Plan:
    def __init__(self, terms: list[str], rhs: str, sizes: list[dict[str, int]]) -> None:
        self.terms, self.rhs, self.sizes = terms, rhs, sizes


def _plan(node: Node) -> _Plan | None:
    eq = node.attrs.get("equation")
    if isinstance(eq, bytes):
        eq = eq.decode()
    if not isinstance(eq, str):
        return None
    try:
        terms, rhs = parse_einsum(eq, len(node.inputs))
    except ValueError:
        return None
    shapes = [list(v.meta.shape) for v in node.inputs]
    n_ell = max((len(s) - len(t) + 1 for t, s in zip(terms, shapes) if "." in t), default=0)
    fresh = "".join(chr(0x100 + i) for i in range(max(n_ell, 0)))  # no equation's letters
    expanded = []
    for t, s in zip(terms, shapes):
        k = len(s) - len(t) + 1 if "." in t else 0
        if k < 0 or (k == 0 and len(t.replace(".", "")) != len(s)):
            return None
        expanded.append(t.replace(".", fresh[len(fresh) - k:] if k else ""))
    rhs = rhs.replace(".", fresh)
    if any(len(set(t)) != len(t) for t in expanded) or len(set(rhs)) != len(rhs) \
            or any(c not in "".join(expanded) for c in rhs):
        return None
    sizes = [dict(zip(t, s)) for t, s in zip(expanded, shapes)]
    if len(expanded) == 2:
        a, b = sizes
        for c in set(a) & set(b):  # a contracted label may not broadcast; a batch one may
            if a[c] != b[c] and (c not in rhs or 1 not in (a[c], b[c])):
                return None
    return _Plan(expanded, rhs, sizes)


def einsum_as_matmul(node: Node) -> bool:
    """The canonicalize match: an Einsum this module lowers."""
    if node.op_type != "Einsum" or len(node.inputs) not in (1, 2) or len(node.outputs) != 1:
        return False
    for v in node.inputs:
        if v is None or v.meta is None or not v.meta.is_static \
                or v.meta.dtype.numpy != np.float32:
            return False
    return _plan(node) is not None


def as_matmul_steps(graph: Graph, node: Node) -> None:
    """The canonicalize rewrite (see the module's docstring)."""
    plan = _plan(node)
    assert plan is not None
    step = chain(graph, node)

    def ints(xs: list[int]) -> Value:
        return graph.add_constant(None, np.asarray(xs, np.int64))

    def summed(v: Value, term: str, keep: str) -> tuple[Value, str]:
        """ReduceSum over the labels of `term` not in `keep`."""
        axes = [i for i, c in enumerate(term) if c not in keep]
        if not axes:
            return v, term
        return step("ReduceSum", [v, ints(axes)], keepdims=0), \
            "".join(c for c in term if c in keep)

    def arranged(v: Value, term: str, order: str) -> Value:
        perm = [term.index(c) for c in order]
        return v if perm == sorted(perm) else step("Transpose", [v], perm=perm)

    def reshaped(v: Value, now: list[int], shape: list[int]) -> Value:
        return v if now == shape else step("Reshape", [v, ints(shape)])

    rhs = plan.rhs
    if len(plan.terms) == 1:
        (term,) = plan.terms
        x, term = summed(node.inputs[0], term, rhs)
        y = arranged(x, term, rhs)
        if y is node.inputs[0]:
            y = step("Identity", [y])
    else:
        (ta, tb), (sa, sb) = plan.terms, plan.sizes
        a, ta = summed(node.inputs[0], ta, tb + rhs)
        b, tb = summed(node.inputs[1], tb, ta + rhs)
        batch = [c for c in rhs if c in ta and c in tb]
        contr = [c for c in ta if c in tb and c not in rhs]
        free_a = [c for c in rhs if c in ta and c not in tb]
        free_b = [c for c in rhs if c in tb and c not in ta]
        m = int(np.prod([sa[c] for c in free_a], dtype=np.int64))
        k = int(np.prod([sa[c] for c in contr], dtype=np.int64))
        n = int(np.prod([sb[c] for c in free_b], dtype=np.int64))
        a = arranged(a, ta, "".join(batch + free_a + contr))
        a = reshaped(a, [sa[c] for c in batch + free_a + contr], [sa[c] for c in batch] + [m, k])
        b = arranged(b, tb, "".join(batch + contr + free_b))
        b = reshaped(b, [sb[c] for c in batch + contr + free_b], [sb[c] for c in batch] + [k, n])
        y = step("MatMul", [a, b])
        out_batch = [max(sa[c], sb[c]) for c in batch]
        y = reshaped(y, out_batch + [m, n],
                     out_batch + [sa[c] for c in free_a] + [sb[c] for c in free_b])
        y = arranged(y, "".join(batch + free_a + free_b), rhs)
    graph.replace_all_uses(node.outputs[0], y)
    graph.remove_node(node)


__all__ = ["as_matmul_steps", "einsum_as_matmul"]
