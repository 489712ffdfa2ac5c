"""ai.onnx.ml TreeEnsembleClassifier and TreeEnsembleRegressor (the forms skl2onnx writes).

Nodes are named by (tree id, node id) with string modes; each leaf carries any number of
(class or target, weight) pairs. Scores are the base values plus the weights of every leaf the
row reaches (the regressor may average them), then the post transform; a classifier whose
weights name one class only is binary (class 1 scores s, class 0 1 - s, or -s after a
transform), and its label is the class of the largest score.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..dtypes import DType
from ..ir import Node, TensorMeta
from . import attrs as A
from .device_helpers import kernel, reject
from .ml import ML, _post_transform
from .registry import DeviceFn, DeviceKernel, OpSchema, register, shape_error
from .shape_helpers import meta_in, out, sym

_MODES = {"BRANCH_LEQ": 0, "BRANCH_LT": 1, "BRANCH_GTE": 2, "BRANCH_GT": 3, "BRANCH_EQ": 4,
          "BRANCH_NEQ": 5, "LEAF": -1}
_TRANSFORMS = {"NONE": 0, "SOFTMAX": 1, "LOGISTIC": 2, "SOFTMAX_ZERO": 3, "PROBIT": 4}


def _text(v: Any) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


def _leaves(x: np.ndarray, a: dict[str, Any]) -> tuple[list[np.ndarray], dict]:
    """Per tree, the index (into the nodes arrays) of the leaf each row reaches."""
    tree, nid = np.asarray(a["nodes_treeids"], np.int64), np.asarray(a["nodes_nodeids"],
                                                                      np.int64)
    index = {(int(t), int(n)): i for i, (t, n) in enumerate(zip(tree, nid))}
    modes = np.array([_MODES[_text(m)] for m in a["nodes_modes"]], np.int64)
    feature = np.asarray(a["nodes_featureids"], np.int64)
    split = np.asarray(a.get("nodes_values") or [0.0] * len(modes), np.float64)
    tracks = np.asarray(a.get("nodes_missing_value_tracks_true") or [0] * len(modes), bool)
    go_true = np.array([index.get((int(t), int(c)), -1) for t, c in
                        zip(tree, a["nodes_truenodeids"])], np.int64)
    go_false = np.array([index.get((int(t), int(c)), -1) for t, c in
                         zip(tree, a["nodes_falsenodeids"])], np.int64)
    if x.shape[1] <= (feature[modes >= 0].max(initial=-1)):
        raise ValueError(f"a tree reads feature {int(feature[modes >= 0].max())} of rows with "
                         f"{x.shape[1]} features")
    rows = np.arange(x.shape[0])
    result = []
    for root in sorted({int(t) for t in tree}):
        node = np.full(x.shape[0], index[(root, 0)] if (root, 0) in index else
                       int(np.flatnonzero(tree == root)[0]))
        for _ in range(len(modes) + 1):
            inner = modes[node] >= 0
            if not inner.any():
                break
            k = node[inner]
            v = x[rows[inner], feature[k]]
            s, m = split[k], modes[k]
            go = np.select([m == 0, m == 1, m == 2, m == 3, m == 4, m == 5],
                           [v <= s, v < s, v >= s, v > s, v == s, v != s], False)
            # a NaN compares false (true under NEQ) unless it is tracked: ONNX Runtime's rule
            go = go | (np.isnan(v) & tracks[k])
            nxt = np.where(go, go_true[k], go_false[k])
            if (nxt < 0).any():
                raise ValueError("a tree node points at a node that does not exist")
            node[inner] = nxt
        else:  # more steps than nodes: the walk went round a cycle
            raise ValueError(f"tree {root} has a cycle")
        result.append(node)
    return result, index


def _scores(x: np.ndarray, a: dict[str, Any], prefix: str, width: int) -> np.ndarray:
    leaves, index = _leaves(x, a)
    weights: dict[int, list[tuple[int, float]]] = {}
    for t, n, c, w in zip(a[f"{prefix}_treeids"], a[f"{prefix}_nodeids"], a[f"{prefix}_ids"],
                          a[f"{prefix}_weights"]):
        weights.setdefault(index[(int(t), int(n))], []).append((int(c), float(w)))
    score = np.zeros((x.shape[0], width))
    reached = np.zeros((x.shape[0], width), bool)
    for leaf in leaves:
        for i, node in enumerate(leaf):
            for c, w in weights.get(int(node), ()):
                score[i, c] += w
                reached[i, c] = True
    if _text(a.get("aggregate_function") or "SUM") == "AVERAGE" and leaves:
        score /= len(leaves)
    base = a.get("base_values")
    if base:
        score += np.asarray(base, np.float64).reshape(1, -1)
    # a target no leaf of the row scores stays 0, base value and all; a class keeps its base
    # value (as ONNX Runtime computes them: measured)
    return score if prefix == "class" else np.where(reached, score, 0.0)


def _classifier(ins: list[Any], a: dict[str, Any]) -> list[np.ndarray]:
    x = np.asarray(ins[0], np.float64).reshape(len(ins[0]), -1)
    labels = a.get("classlabels_int64s") or [_text(s) for s in a.get("classlabels_strings")
                                              or []]
    score = _scores(x, a, "class", max(len(labels), 1))
    kind = _TRANSFORMS[_text(a.get("post_transform") or "NONE")]
    if len(set(a["class_ids"])) == 1 and len(labels) == 2:  # binary: weights of one class
        # as ONNX Runtime scores it (measured): the other class is 1 - s when every weight
        # is a probability, else -s; a softmax is not applied to the pair
        score[:, 1] = score[:, 0]
        positive = min(a["class_weights"]) >= 0
        score[:, 0] = 1 - score[:, 1] if positive and kind in (0, 4) else -score[:, 1]
        if kind in (1, 3):
            kind = 0
    probs = _post_transform(score, kind)
    picked = np.asarray(labels, dtype=object if a.get("classlabels_strings") else np.int64)[
        np.argmax(probs, axis=1)]
    return [picked, probs.astype(np.float32)]


def _classifier_infer(node: Node, a: dict[str, Any]) -> list[TensorMeta]:
    m = meta_in(node, 0)
    labels = a.get("classlabels_int64s") or a.get("classlabels_strings")
    if not labels:
        raise shape_error(node, "TreeEnsembleClassifier needs classlabels_int64s or "
                                "classlabels_strings")
    n = m.shape[0] if m.shape else sym(node, "n")
    dt = DType.INT64 if a.get("classlabels_int64s") else DType.STRING
    return [out(dt, (n,)), out(DType.FLOAT32, (n, len(labels)))]


def _regressor(ins: list[Any], a: dict[str, Any]) -> list[np.ndarray]:
    x = np.asarray(ins[0], np.float64).reshape(len(ins[0]), -1)
    score = _scores(x, a, "target", int(a["n_targets"]))
    kind = _TRANSFORMS[_text(a.get("post_transform") or "NONE")]
    return [_post_transform(score, kind).astype(np.float32)]


def _regressor_infer(node: Node, a: dict[str, Any]) -> list[TensorMeta]:
    m = meta_in(node, 0)
    n = m.shape[0] if m.shape else sym(node, "n")
    return [out(DType.FLOAT32, (n, int(a["n_targets"])))]


def _device(op: str) -> DeviceFn:
    """The runtime's tree ensemble kernel, given the nodes with their modes as codes and the
    leaf weights under one name for both ops."""
    prefix = "class" if op == "TreeEnsembleClassifier" else "target"

    def lower(node: Node, a: dict[str, Any]) -> DeviceKernel | str:
        if a.get("classlabels_strings"):
            return "string class labels stay on the host (the device writes int64 labels)"
        doubles = [k for k in a if k.endswith("_as_tensor") and a[k] is not None]
        if doubles:
            return f"{doubles[0]} (double thresholds or weights) stays on the host"
        aggregate = _text(a.get("aggregate_function") or "SUM")
        if aggregate not in ("SUM", "AVERAGE"):
            return f"aggregate_function {aggregate} stays on the host"
        modes = [_text(m) for m in a["nodes_modes"]]
        unknown = sorted(set(modes) - set(_MODES))
        if unknown:
            return f"unknown node mode {unknown[0]}"
        why = reject(node, data_inputs=(0,))
        if why:
            return why
        n = len(modes)
        attrs: dict[str, Any] = {
            "nodes_treeids": list(a["nodes_treeids"]), "nodes_nodeids": list(a["nodes_nodeids"]),
            "nodes_featureids": list(a["nodes_featureids"]),
            "nodes_modes": [_MODES[m] for m in modes],
            "nodes_values": [float(v) for v in a.get("nodes_values") or [0.0] * n],
            "nodes_truenodeids": list(a["nodes_truenodeids"]),
            "nodes_falsenodeids": list(a["nodes_falsenodeids"]),
            "nodes_missing_value_tracks_true": list(
                a.get("nodes_missing_value_tracks_true") or [0] * n),
            "weights_treeids": list(a[f"{prefix}_treeids"]),
            "weights_nodeids": list(a[f"{prefix}_nodeids"]),
            "weights_ids": list(a[f"{prefix}_ids"]),
            "weights": [float(w) for w in a[f"{prefix}_weights"]],
            "post_transform": _text(a.get("post_transform") or "NONE"),
            "aggregate_function": aggregate,
            "base_values": [float(v) for v in a.get("base_values") or []]}
        if prefix == "class":
            attrs["classlabels_int64s"] = list(a["classlabels_int64s"])
        else:
            attrs["n_targets"] = int(a["n_targets"])
        return kernel(op, attrs, (0,))
    return lower


_NODES = {"nodes_treeids": A.ints(A.REQUIRED), "nodes_nodeids": A.ints(A.REQUIRED),
          "nodes_modes": A.strings(A.REQUIRED), "nodes_featureids": A.ints(A.REQUIRED),
          "nodes_values": A.floats(), "nodes_values_as_tensor": A.tensor(),
          "nodes_truenodeids": A.ints(A.REQUIRED), "nodes_falsenodeids": A.ints(A.REQUIRED),
          "nodes_missing_value_tracks_true": A.ints(), "nodes_hitrates": A.floats(),
          "nodes_hitrates_as_tensor": A.tensor(), "post_transform": A.s("NONE"),
          "base_values": A.floats(), "base_values_as_tensor": A.tensor()}
register(OpSchema(ML + "TreeEnsembleClassifier", 1, 1, _classifier_infer, _classifier,
                  attrs={**_NODES, "class_treeids": A.ints(A.REQUIRED),
                         "class_nodeids": A.ints(A.REQUIRED), "class_ids": A.ints(A.REQUIRED),
                         "class_weights": A.floats(A.REQUIRED),
                         "class_weights_as_tensor": A.tensor(),
                         "classlabels_int64s": A.ints(), "classlabels_strings": A.strings()},
                  max_outputs=2, min_outputs=2, device=_device("TreeEnsembleClassifier")))
register(OpSchema(ML + "TreeEnsembleRegressor", 1, 1, _regressor_infer, _regressor,
                  attrs={**_NODES, "target_treeids": A.ints(A.REQUIRED),
                         "target_nodeids": A.ints(A.REQUIRED),
                         "target_ids": A.ints(A.REQUIRED),
                         "target_weights": A.floats(A.REQUIRED),
                         "target_weights_as_tensor": A.tensor(), "n_targets": A.i(A.REQUIRED),
                         "aggregate_function": A.s("SUM")},
                  device=_device("TreeEnsembleRegressor")))
