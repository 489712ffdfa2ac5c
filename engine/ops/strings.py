"""String and text ops: StringNormalizer, StringSplit, StringConcat, RegexFullMatch,
TfIdfVectorizer."""

from __future__ import annotations

import re
from typing import Any

import numpy as np

from ..dtypes import DType
from ..ir import Node, TensorMeta
from . import attrs as A
from .registry import OpSchema, register
from .shape_helpers import broadcast, check_dtype, out, shape_in, sym

STRING = frozenset({DType.STRING})


def _normalize(ins: list[Any], a: dict[str, Any]) -> list[np.ndarray]:
    x = np.asarray(ins[0], dtype=object)
    stop = set(a.get("stopwords") or [])
    sensitive = bool(a["is_case_sensitive"])
    lowered = {s.lower() for s in stop}
    flat = x.reshape(-1)
    kept = [s for s in flat if (s not in stop if sensitive else s.lower() not in lowered)]
    action = a["case_change_action"]
    if action == "LOWER":
        kept = [s.lower() for s in kept]
    elif action == "UPPER":
        kept = [s.upper() for s in kept]
    if not kept:
        kept = [""]
    res = np.array(kept, dtype=object)
    return [res.reshape(1, -1) if x.ndim == 2 else res]


def _normalize_infer(node: Node, a: dict[str, Any]) -> list[TensorMeta]:
    check_dtype(node, 0, STRING, "X")
    shape = shape_in(node, 0)
    n = sym(node, "n")
    return [out(DType.STRING, (1, n) if shape is not None and len(shape) == 2 else (n,))]


register(OpSchema("StringNormalizer", 1, 1, _normalize_infer, _normalize, attrs={
    "case_change_action": A.s("NONE"), "is_case_sensitive": A.i(0), "locale": A.s(),
    "stopwords": A.strings()}))


def _split_one(s: str, delim: str | None, maxsplit: int | None) -> list[str]:
    limit = -1 if maxsplit is None else maxsplit
    if not delim:
        return s.split(None, limit)
    return s.split(delim, limit)


def _string_split(ins: list[Any], a: dict[str, Any]) -> list[np.ndarray]:
    x = np.asarray(ins[0], dtype=object)
    parts = [_split_one(s, a.get("delimiter"), a.get("maxsplit")) for s in x.reshape(-1)]
    width = max((len(p) for p in parts), default=0)
    y = np.full((len(parts), width), "", dtype=object)
    for i, p in enumerate(parts):
        y[i, :len(p)] = p
    counts = np.array([len(p) for p in parts], dtype=np.int64).reshape(x.shape)
    return [y.reshape(x.shape + (width,)), counts]


def _string_split_infer(node: Node, a: dict[str, Any]) -> list[TensorMeta]:
    check_dtype(node, 0, STRING, "X")
    shape = shape_in(node, 0)
    return [out(DType.STRING, None if shape is None else shape + (sym(node, "n"),)),
            out(DType.INT64, shape)]


register(OpSchema("StringSplit", 1, 1, _string_split_infer, _string_split, max_outputs=2,
                  attrs={"delimiter": A.s(), "maxsplit": A.i()}))


def _concat_infer(node: Node, a: dict[str, Any]) -> list[TensorMeta]:
    check_dtype(node, 0, STRING, "X")
    check_dtype(node, 1, STRING, "Y")
    return [out(DType.STRING, broadcast(node, [shape_in(node, 0), shape_in(node, 1)]))]


register(OpSchema("StringConcat", 2, 2, _concat_infer, lambda ins, a: [
    np.asarray(np.char.add(np.asarray(ins[0]).astype(str), np.asarray(ins[1]).astype(str)),
               dtype=object)]))


def _regex(ins: list[Any], a: dict[str, Any]) -> list[np.ndarray]:
    pattern = re.compile(a["pattern"])
    x = np.asarray(ins[0], dtype=object)
    return [np.array([pattern.fullmatch(s) is not None for s in x.reshape(-1)],
                     dtype=bool).reshape(x.shape)]


register(OpSchema("RegexFullMatch", 1, 1, lambda node, a: [out(DType.BOOL, shape_in(node, 0))],
                  _regex, attrs={"pattern": A.s(A.REQUIRED)}))


# ---- TfIdfVectorizer ------------------------------------------------------------------------
def _ngram_table(a: dict[str, Any]) -> dict[tuple[Any, ...], int]:
    pool = list(a.get("pool_int64s") or a.get("pool_strings") or [])
    starts = list(a["ngram_counts"]) + [len(pool)]
    table: dict[tuple[Any, ...], int] = {}
    k = 0
    for n in range(1, len(starts)):
        chunk = pool[starts[n - 1]:starts[n]]
        for i in range(0, len(chunk), n):
            table[tuple(chunk[i:i + n])] = k
            k += 1
    return table


def _tfidf(ins: list[Any], a: dict[str, Any]) -> list[np.ndarray]:
    x = np.asarray(ins[0])
    rows = x.reshape(1, -1) if x.ndim <= 1 else x
    table = _ngram_table(a)
    idx = a["ngram_indexes"]
    width = max(idx) + 1 if idx else 0
    y = np.zeros((rows.shape[0], width), dtype=np.float32)
    lo, hi, skips = a["min_gram_length"], a["max_gram_length"], a["max_skip_count"]
    for r, row in enumerate(rows):
        seq = [v.item() if hasattr(v, "item") else v for v in row]
        for n in range(lo, hi + 1):
            for skip in range(skips + 1 if n > 1 else 1):
                span = (n - 1) * (skip + 1)
                for start in range(len(seq) - span):
                    gram = tuple(seq[start + k * (skip + 1)] for k in range(n))
                    if gram in table:
                        y[r, idx[table[gram]]] += 1
    weights = np.asarray(a.get("weights") or [1.0] * len(idx), dtype=np.float32)
    w = np.zeros(width, np.float32)
    w[idx] = weights
    if a["mode"] == "IDF":
        y = np.minimum(y, 1) * w
    elif a["mode"] == "TFIDF":
        y = y * w
    return [y.reshape(-1) if x.ndim <= 1 else y]


def _tfidf_infer(node: Node, a: dict[str, Any]) -> list[TensorMeta]:
    shape = shape_in(node, 0)
    width = max(a["ngram_indexes"]) + 1
    dims = (width,) if shape is not None and len(shape) <= 1 else (
        (shape[0], width) if shape is not None else None)
    return [out(DType.FLOAT32, dims)]


register(OpSchema("TfIdfVectorizer", 1, 1, _tfidf_infer, _tfidf, attrs={
    "max_gram_length": A.i(A.REQUIRED), "max_skip_count": A.i(A.REQUIRED),
    "min_gram_length": A.i(A.REQUIRED), "mode": A.s(A.REQUIRED),
    "ngram_counts": A.ints(A.REQUIRED), "ngram_indexes": A.ints(A.REQUIRED),
    "pool_int64s": A.ints(), "pool_strings": A.strings(), "weights": A.floats()}))
