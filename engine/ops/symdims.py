"""Arithmetic on symbolic dims: products of symbols with an integer coefficient.

Exporters compute shapes: a Flatten of [batch, 32] is [batch*32], a window partition
reshapes [batch, 8, 8, C] to [-1, 16, C] (batch*4 windows) and back. A product is written
canonically as a string, the coefficient first and the symbols sorted: "4*batch",
"batch*seq". Two dims are the same product exactly when their strings are equal, so the rest
of inference keeps comparing dims with ==. Division is exact or unknown (None): a dim is never
guessed.
"""

from __future__ import annotations

from collections import Counter

from ..ir import Dim


def factors(d: Dim) -> tuple[int, Counter]:
    """(coefficient, symbols with multiplicity) of a dim."""
    if isinstance(d, int):
        return d, Counter()
    coef, syms = 1, Counter()
    for part in d.split("*"):
        if part.isdigit():
            coef *= int(part)
        else:
            syms[part] += 1
    return coef, syms


def _make(coef: int, syms: Counter) -> Dim:
    if coef == 0 or not syms:
        return coef
    names = sorted(syms.elements())
    return "*".join(([str(coef)] if coef != 1 else []) + names)


def mul(*dims: Dim) -> Dim:
    coef, syms = 1, Counter()
    for d in dims:
        c, s = factors(d)
        coef *= c
        syms += s
    return _make(coef, syms)


def div(a: Dim, b: Dim) -> Dim | None:
    """a / b when it divides exactly as a product of symbols; else None."""
    ca, sa = factors(a)
    cb, sb = factors(b)
    if cb == 0 or ca % cb or any(sa[k] < n for k, n in sb.items()):
        return None
    return _make(ca // cb, sa - sb)
