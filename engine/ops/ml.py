"""A few ops of the ai.onnx.ml domain: LabelEncoder, ArrayFeatureExtractor, Binarizer, Scaler,
TreeEnsemble.
Registered under their domain-qualified names."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ..dtypes import DType
from ..ir import Node, TensorMeta
from . import attrs as A
from .registry import OpSchema, register, shape_error
from .shape_helpers import meta_in, out, shape_in, sym

ML = "ai.onnx.ml."


def _pick(a: dict[str, Any], prefix: str) -> tuple[str, Any]:
    for suffix in ("int64s", "strings", "floats", "tensor"):
        value = a.get(f"{prefix}_{suffix}")
        if value is not None:
            return suffix, value
    raise ValueError(f"LabelEncoder has no {prefix}_* attribute")


def _values_dtype(a: dict[str, Any]) -> DType:
    kind, values = _pick(a, "values")
    if kind == "tensor":
        return DType.from_numpy(np.asarray(values).dtype)
    return {"int64s": DType.INT64, "strings": DType.STRING, "floats": DType.FLOAT32}[kind]


def _label_encoder(ins: list[Any], a: dict[str, Any]) -> list[np.ndarray]:
    x = np.asarray(ins[0])
    _, keys = _pick(a, "keys")
    kind, values = _pick(a, "values")
    keys = list(np.asarray(keys).reshape(-1).tolist())
    values = list(np.asarray(values).reshape(-1).tolist())
    table = dict(zip(keys, values))
    nan_value = next((v for k, v in zip(keys, values)
                      if isinstance(k, float) and math.isnan(k)), None)
    if kind == "tensor":
        default = np.asarray(a["default_tensor"]).reshape(-1)[0].item() \
            if a.get("default_tensor") is not None else 0
        dtype = np.asarray(a["values_tensor"]).dtype
    else:
        default = {"int64s": ("default_int64", -1), "floats": ("default_float", -0.0),
                   "strings": ("default_string", "_Unused")}[kind]
        default = a.get(*default)
        dtype = {"int64s": np.int64, "floats": np.float32, "strings": object}[kind]

    def look(v: Any) -> Any:
        if isinstance(v, float) and math.isnan(v) and nan_value is not None:
            return nan_value
        return table.get(v, default)

    flat = [look(v) for v in x.reshape(-1).tolist()]
    return [np.array(flat, dtype=dtype).reshape(x.shape)]


def _label_encoder_infer(node: Node, a: dict[str, Any]) -> list[TensorMeta]:
    try:
        dt = _values_dtype(a)
    except ValueError as exc:
        raise shape_error(node, str(exc)) from None
    return [out(dt, shape_in(node, 0))]


_KEYS = {f"{p}_{s}": (A.tensor() if s == "tensor" else A.ints() if s == "int64s" else
                      A.strings() if s == "strings" else A.floats())
         for p in ("keys", "values") for s in ("int64s", "strings", "floats", "tensor")}
register(OpSchema(ML + "LabelEncoder", 1, 1, _label_encoder_infer, _label_encoder, attrs={
    **_KEYS, "default_float": A.f(-0.0), "default_int64": A.i(-1),
    "default_string": A.s("_Unused"), "default_tensor": A.tensor()}))


def _extract(ins: list[Any], a: dict[str, Any]) -> list[np.ndarray]:
    x, idx = np.asarray(ins[0]), np.asarray(ins[1]).reshape(-1)
    res = x[..., idx.tolist()]
    return [res.reshape((1, len(idx)) if x.ndim == 1 else x.shape[:-1] + (len(idx),))]


def _extract_infer(node: Node, a: dict[str, Any]) -> list[TensorMeta]:
    m = meta_in(node, 0)
    idx = shape_in(node, 1)
    n = idx[-1] if idx and len(idx) == 1 else sym(node, "n")
    if m.shape is None:
        return [out(m.dtype, None)]
    return [out(m.dtype, (1, n) if len(m.shape) == 1 else m.shape[:-1] + (n,))]


register(OpSchema(ML + "ArrayFeatureExtractor", 2, 2, _extract_infer, _extract))
register(OpSchema(ML + "Binarizer", 1, 1,
                  lambda node, a: [out(meta_in(node, 0).dtype, shape_in(node, 0))],
                  lambda ins, a: [(ins[0] > a["threshold"]).astype(ins[0].dtype)],
                  attrs={"threshold": A.f(0.0)}))



# ---- Scaler: (x - offset) * scale, per feature or one for all (skl2onnx's StandardScaler) ---
def _scaler_infer(node: Node, a: dict[str, Any]) -> list[TensorMeta]:
    shape = shape_in(node, 0)
    width = shape[-1] if shape else None
    for key in ("offset", "scale"):
        n = len(a.get(key) or [])
        if n > 1 and isinstance(width, int) and n != width:
            raise shape_error(node, f"{key} has {n} values for {width} features")
    return [out(DType.FLOAT32, shape)]


def _scaler(ins: list[Any], a: dict[str, Any]) -> list[np.ndarray]:
    x = np.asarray(ins[0], np.float32)
    offset = np.asarray(a.get("offset") or [0.0], np.float32)
    scale = np.asarray(a.get("scale") or [1.0], np.float32)
    return [((x - offset) * scale).astype(np.float32)]


register(OpSchema(ML + "Scaler", 1, 1, _scaler_infer, _scaler,
                  attrs={"offset": A.floats(), "scale": A.floats()}))


# ---- TreeEnsemble (ai.onnx.ml opset 5) ------------------------------------------------------
def _tree_infer(node: Node, a: dict[str, Any]) -> list[TensorMeta]:
    m = meta_in(node, 0)
    n = m.shape[0] if m.shape else sym(node, "n")
    return [out(m.dtype, (n, int(a["n_targets"])))]


def _member_sets(a: dict[str, Any], modes: np.ndarray) -> dict[int, np.ndarray]:
    """The set each BRANCH_MEMBER node tests, from the NaN-delimited membership_values."""
    values = np.asarray(a.get("membership_values", np.zeros(0)), np.float64).reshape(-1)
    groups, current = [], []
    for v in values:
        if math.isnan(v):
            groups.append(np.array(current))
            current = []
        else:
            current.append(v)
    if current:
        groups.append(np.array(current))
    members = np.flatnonzero(modes == 6)
    return {int(k): groups[i] if i < len(groups) else np.zeros(0) for i, k in enumerate(members)}


def _tree_ensemble(ins: list[Any], a: dict[str, Any]) -> list[np.ndarray]:
    x = np.asarray(ins[0])
    x64 = x.astype(np.float64).reshape(x.shape[0], -1)
    modes = np.asarray(a["nodes_modes"]).astype(np.int64).reshape(-1)
    splits = np.asarray(a["nodes_splits"]).astype(np.float64).reshape(-1)
    feature = np.asarray(a["nodes_featureids"], np.int64)
    true_id, false_id = (np.asarray(a[k], np.int64) for k in ("nodes_truenodeids",
                                                                "nodes_falsenodeids"))
    true_leaf, false_leaf = (np.asarray(a[k], bool) for k in ("nodes_trueleafs",
                                                              "nodes_falseleafs"))
    nan_true = np.asarray(a.get("nodes_missing_value_tracks_true") or
                          [0] * len(modes), bool)
    members = _member_sets(a, modes)
    weights = np.asarray(a["leaf_weights"]).astype(np.float64).reshape(-1)
    targets = np.asarray(a["leaf_targetids"], np.int64)
    n, n_targets = x64.shape[0], int(a["n_targets"])
    rows = np.arange(n)
    leaves = []
    for root in a["tree_roots"]:
        node = np.full(n, int(root))
        leaf = np.full(n, -1)
        for _ in range(len(modes) + 1):  # a path visits each node at most once
            live = leaf < 0
            if not live.any():
                break
            k = node[live]
            v = x64[rows[live], feature[k]]
            go = _branch(v, modes[k], splits[k], k, members)
            go = np.where(np.isnan(v), nan_true[k], go)
            nxt = np.where(go, true_id[k], false_id[k])
            is_leaf = np.where(go, true_leaf[k], false_leaf[k])
            idx = rows[live]
            leaf[idx[is_leaf]] = nxt[is_leaf]
            node[idx[~is_leaf]] = nxt[~is_leaf]
        leaves.append(leaf)
    return [_aggregate(leaves, weights, targets, n, n_targets, a).astype(x.dtype)]


def _branch(v: np.ndarray, mode: np.ndarray, split: np.ndarray, nodes: np.ndarray,
            members: dict[int, np.ndarray]) -> np.ndarray:
    go = np.select([mode == 0, mode == 1, mode == 2, mode == 3, mode == 4, mode == 5],
                   [v <= split, v < split, v >= split, v > split, v == split, v != split],
                   default=False)
    for j in np.flatnonzero(mode == 6):
        go[j] = bool(np.isin(v[j], members.get(int(nodes[j]), np.zeros(0))))
    return go


def _aggregate(leaves: list[np.ndarray], weights: np.ndarray, targets: np.ndarray, n: int,
               n_targets: int, a: dict[str, Any]) -> np.ndarray:
    agg = int(a["aggregate_function"])
    rows = np.arange(n)
    if agg in (0, 1):
        score = np.zeros((n, n_targets))
        for leaf in leaves:
            np.add.at(score, (rows, targets[leaf]), weights[leaf])
        if agg == 0 and leaves:
            score /= len(leaves)
    else:
        pick = np.minimum if agg == 2 else np.maximum
        score = np.full((n, n_targets), np.inf if agg == 2 else -np.inf)
        for leaf in leaves:
            pick.at(score, (rows, targets[leaf]), weights[leaf])
        score[np.isinf(score)] = 0.0  # a target no leaf reached scores 0
    return _post_transform(score, int(a["post_transform"]))


def _post_transform(score: np.ndarray, kind: int) -> np.ndarray:
    if kind == 1:  # SOFTMAX
        e = np.exp(score - score.max(axis=1, keepdims=True))
        return e / e.sum(axis=1, keepdims=True)
    if kind == 2:  # LOGISTIC
        return 1 / (1 + np.exp(-score))
    if kind == 3:  # SOFTMAX_ZERO: zeros stay zero and do not take part
        nz = score != 0
        e = np.where(nz, np.exp(score - np.where(nz, score, -np.inf).max(axis=1,
                                                                         keepdims=True)), 0)
        total = e.sum(axis=1, keepdims=True)
        return np.divide(e, total, out=np.zeros_like(e), where=total > 0)
    if kind == 4:  # PROBIT
        from .mathfn import erfinv

        return math.sqrt(2) * erfinv(2 * score - 1)
    return score


register(OpSchema(ML + "TreeEnsemble", 1, 1, _tree_infer, _tree_ensemble, attrs={
    "aggregate_function": A.i(1), "post_transform": A.i(0), "n_targets": A.i(A.REQUIRED),
    "tree_roots": A.ints(A.REQUIRED), "nodes_modes": A.tensor(A.REQUIRED),
    "nodes_featureids": A.ints(A.REQUIRED), "nodes_splits": A.tensor(A.REQUIRED),
    "nodes_truenodeids": A.ints(A.REQUIRED), "nodes_falsenodeids": A.ints(A.REQUIRED),
    "nodes_trueleafs": A.ints(A.REQUIRED), "nodes_falseleafs": A.ints(A.REQUIRED),
    "nodes_missing_value_tracks_true": A.ints(), "nodes_hitrates": A.tensor(),
    "membership_values": A.tensor(), "leaf_targetids": A.ints(A.REQUIRED),
    "leaf_weights": A.tensor(A.REQUIRED)}))
