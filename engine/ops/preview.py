"""Ops of the ai.onnx.preview domains: FlexAttention and the training optimizers
(Adagrad, Adam, Momentum). Registered under their domain-qualified names."""

from __future__ import annotations

from typing import Any

import numpy as np

from ..ir import Node, TensorMeta
from . import attrs as A
from .control import _split_outer, infer_graph, run_graph
from .kernel_utils import is_bfloat16, onnx_np_dtype
from .registry import OpSchema, register, shape_error
from .shape_helpers import FLOATS, check_dtype, meta_in, out, shape_in

TRAINING = "ai.onnx.preview.training."


# ---- FlexAttention ------------------------------------------------------------------------
def _flex(ins: list[Any], a: dict[str, Any]) -> list[np.ndarray]:
    formals, outer = _split_outer(ins, a)
    q, k, v = formals[:3]
    hq, hk = q.shape[1], k.shape[1]
    if hq != hk:
        k, v = np.repeat(k, hq // hk, axis=1), np.repeat(v, hq // hk, axis=1)
    scale = a.get("scale")
    scale = 1.0 / np.sqrt(q.shape[-1]) if scale is None else scale
    root = np.array(np.sqrt(np.float32(scale)), dtype=q.dtype)
    scores = np.matmul(q * root, np.swapaxes(k * root, -1, -2))
    prec = a.get("softmax_precision")
    if prec:
        wd = onnx_np_dtype(prec)
    elif q.dtype == np.float16 or is_bfloat16(q.dtype) or q.dtype.itemsize < 4:
        wd = np.dtype(np.float32)
    else:
        wd = q.dtype
    scores = scores.astype(wd)
    if a.get("score_mod") is not None:
        scores = np.asarray(run_graph(a["score_mod"], [scores], outer)[0], dtype=wd)
    e = np.exp(scores - np.max(scores, axis=-1, keepdims=True))
    probs = e / np.sum(e, axis=-1, keepdims=True)
    if a.get("prob_mod") is not None:
        probs = np.asarray(run_graph(a["prob_mod"], [probs], outer)[0], dtype=wd)
    return [np.matmul(probs, v.astype(wd)).astype(v.dtype)]


def _flex_infer(node: Node, a: dict[str, Any]) -> list[TensorMeta]:
    dt = check_dtype(node, 0, FLOATS, "Q")
    qs, vs = shape_in(node, 0), shape_in(node, 2)
    if qs is None or vs is None:
        return [out(dt, None)]
    if len(qs) != 4 or len(vs) != 4:
        raise shape_error(node, "FlexAttention needs rank-4 Q, K and V")
    outer = {n: meta_in(node, len(node.inputs) - len(a.get("_outer") or []) + i)
             for i, n in enumerate(a.get("_outer") or [])}
    for key in ("score_mod", "prob_mod"):
        if a.get(key) is not None:
            infer_graph(a[key], [None], outer)
    return [out(meta_in(node, 2).dtype, (qs[0], qs[1], qs[2], vs[3]))]


register(OpSchema("ai.onnx.preview.FlexAttention", 3, -1, _flex_infer, _flex, attrs={
    "scale": A.f(), "score_mod": A.graph(None), "prob_mod": A.graph(None),
    "softmax_precision": A.i()}))


# ---- training optimizers ------------------------------------------------------------------
def _groups(ins: list[Any], n_groups: int) -> tuple[float, int, list[list[np.ndarray]]]:
    r = float(np.asarray(ins[0]).reshape(-1)[0])
    t = int(np.asarray(ins[1]).reshape(-1)[0])
    rest = ins[2:]
    n = len(rest) // n_groups
    return r, t, [rest[k * n:(k + 1) * n] for k in range(n_groups)]


def _adagrad(ins: list[Any], a: dict[str, Any]) -> list[np.ndarray]:
    r, t, (xs, gs, hs) = _groups(ins, 3)
    new_x, new_h = [], []
    for x, g, h in zip(xs, gs, hs):
        rate = r / (1 + t * a["decay_factor"])
        greg = a["norm_coefficient"] * x + g
        h2 = h + greg * greg
        new_x.append((x - rate * greg / (np.sqrt(h2) + a["epsilon"])).astype(x.dtype))
        new_h.append(h2.astype(h.dtype))
    return new_x + new_h


def _adam(ins: list[Any], a: dict[str, Any]) -> list[np.ndarray]:
    r, t, (xs, gs, vs, hs) = _groups(ins, 4)
    al, be = a["alpha"], a["beta"]
    new_x, new_v, new_h = [], [], []
    for x, g, v, h in zip(xs, gs, vs, hs):
        greg = a["norm_coefficient"] * x + g
        v2 = al * v + (1 - al) * greg
        h2 = be * h + (1 - be) * greg * greg
        rate = r * np.sqrt(1 - be ** t) / (1 - al ** t) if t > 0 else r
        x2 = (1 - a["norm_coefficient_post"]) * (x - rate * (v2 / (np.sqrt(h2) + a["epsilon"])))
        new_x.append(x2.astype(x.dtype))
        new_v.append(v2.astype(v.dtype))
        new_h.append(h2.astype(h.dtype))
    return new_x + new_v + new_h


def _momentum(ins: list[Any], a: dict[str, Any]) -> list[np.ndarray]:
    r, t, (xs, gs, vs) = _groups(ins, 3)
    new_x, new_v = [], []
    for x, g, v in zip(xs, gs, vs):
        greg = a["norm_coefficient"] * x + g
        v2 = a["alpha"] * v + (a["beta"] if t > 0 else 1) * greg
        step = greg + a["alpha"] * v2 if a["mode"] == "nesterov" else v2
        new_x.append((x - r * step).astype(x.dtype))
        new_v.append(v2.astype(v.dtype))
    return new_x + new_v


def _optimizer_infer(groups: int, out_groups: list[int]) -> Any:
    def infer(node: Node, a: dict[str, Any]) -> list[TensorMeta]:
        n = (len(node.inputs) - 2) // groups
        if n * groups != len(node.inputs) - 2:
            raise shape_error(node, f"expected R, T and {groups} equal groups of tensors")
        return [out(meta_in(node, 2 + k * n + i).dtype, shape_in(node, 2 + k * n + i))
                for k in out_groups for i in range(n)]
    return infer


register(OpSchema(TRAINING + "Adagrad", 5, -1, _optimizer_infer(3, [0, 2]), _adagrad,
                  max_outputs=1 << 16, foldable=False, attrs={
                      "decay_factor": A.f(0.0), "epsilon": A.f(0.0),
                      "norm_coefficient": A.f(0.0)}))
register(OpSchema(TRAINING + "Adam", 6, -1, _optimizer_infer(4, [0, 2, 3]), _adam,
                  max_outputs=1 << 16, foldable=False, attrs={
                      "alpha": A.f(0.9), "beta": A.f(0.999), "epsilon": A.f(0.0),
                      "norm_coefficient": A.f(0.0), "norm_coefficient_post": A.f(0.0)}))
register(OpSchema(TRAINING + "Momentum", 5, -1, _optimizer_infer(3, [0, 2]), _momentum,
                  max_outputs=1 << 16, foldable=False, attrs={
                      "alpha": A.f(A.REQUIRED), "beta": A.f(A.REQUIRED),
                      "mode": A.s(A.REQUIRED), "norm_coefficient": A.f(A.REQUIRED)}))
