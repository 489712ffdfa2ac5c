"""Losses: NegativeLogLikelihoodLoss, SoftmaxCrossEntropyLoss."""

from __future__ import annotations

from typing import Any

import numpy as np

from ..ir import Node, TensorMeta
from . import attrs as A
from .activations import _log_softmax
from .kernel_utils import widen
from .registry import OpSchema, register, shape_error
from .shape_helpers import FLOATS, INDEX, check_dtype, meta_in, out, shape_in

_ATTRS = {"ignore_index": A.i(), "reduction": A.s("mean")}


def nll(logp: np.ndarray, target: np.ndarray, weight: np.ndarray | None,
        a: dict[str, Any]) -> np.ndarray:
    """The NLL loss of log-probabilities (N, C, d...) against integer targets (N, d...)."""
    target = np.asarray(target).astype(np.int64)
    ignore = a.get("ignore_index")
    keep = np.ones(target.shape, bool) if ignore is None else target != ignore
    safe = np.where(keep, target, 0)
    picked = np.take_along_axis(logp, np.expand_dims(safe, 1), axis=1)[:, 0]
    w = np.ones(target.shape, logp.dtype) if weight is None else widen(weight)[safe]
    w = np.where(keep, w, 0)
    loss = -picked * w
    if a["reduction"] == "none":
        return loss
    if a["reduction"] == "sum":
        return np.sum(loss)
    total = np.sum(w)
    return np.sum(loss) / total if total != 0 else np.sum(loss) * 0


def _infer(node: Node, a: dict[str, Any], n_out: int) -> list[TensorMeta]:
    dt = check_dtype(node, 0, FLOATS, "input")
    check_dtype(node, 1, INDEX, "target")
    xs, ts = shape_in(node, 0), shape_in(node, 1)
    if xs is not None and ts is not None and len(ts) != len(xs) - 1:
        raise shape_error(node, f"target rank {len(ts)} must be input rank {len(xs)} - 1")
    if a["reduction"] not in ("none", "sum", "mean"):
        raise shape_error(node, f"reduction '{a['reduction']}' is not none, sum or mean")
    loss = out(dt, ts if a["reduction"] == "none" else ())
    return [loss, out(dt, meta_in(node, 0).shape)][:n_out]


def _nll(ins: list[Any], a: dict[str, Any]) -> list[np.ndarray]:
    x = ins[0]
    w = ins[2] if len(ins) > 2 else None
    return [np.asarray(nll(widen(x), ins[1], w, a)).astype(x.dtype)]


def _sce(ins: list[Any], a: dict[str, Any]) -> list[np.ndarray]:
    x = ins[0]
    logp = _log_softmax(widen(x), 1)
    w = ins[2] if len(ins) > 2 else None
    loss = np.asarray(nll(logp, ins[1], w, a)).astype(x.dtype)
    return [loss, logp.astype(x.dtype)]


register(OpSchema("NegativeLogLikelihoodLoss", 2, 3, lambda node, a: _infer(node, a, 1), _nll,
                  attrs=_ATTRS))
register(OpSchema("SoftmaxCrossEntropyLoss", 2, 3, lambda node, a: _infer(node, a, 2), _sce,
                  attrs=_ATTRS, max_outputs=2))
