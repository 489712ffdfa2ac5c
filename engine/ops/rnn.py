"""Recurrent layers: RNN, GRU, LSTM (directions, layouts, sequence_lens, clip, peepholes)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ..dtypes import DType
from ..ir import Dim, Node, TensorMeta
from . import attrs as A
from .device_helpers import kernel, optional_index, reject
from .kernel_utils import opt
from .registry import DeviceKernel, OpSchema, register, shape_error
from .shape_helpers import FLOATS, check_dtype, out, shape_in, sym

Act = Callable[[np.ndarray], np.ndarray]
_DEFAULT_ACTS = {"RNN": ["Tanh"], "GRU": ["Sigmoid", "Tanh"], "LSTM": ["Sigmoid", "Tanh", "Tanh"]}
_GATES = {"RNN": 1, "GRU": 3, "LSTM": 4}


def _activation(name: str, alpha: float | None, beta: float | None) -> Act:
    n = name.lower()
    if n == "relu":
        return lambda x: np.maximum(x, 0)
    if n == "tanh":
        return np.tanh
    if n == "sigmoid":
        return lambda x: 1 / (1 + np.exp(-x))
    if n == "affine":
        return lambda x: (1.0 if alpha is None else alpha) * x + (0.0 if beta is None else beta)
    if n == "leakyrelu":
        al = 0.01 if alpha is None else alpha
        return lambda x: np.where(x >= 0, x, al * x)
    if n == "thresholdedrelu":
        al = 1.0 if alpha is None else alpha
        return lambda x: np.where(x > al, x, 0)
    if n == "scaledtanh":
        return lambda x: (1.0 if alpha is None else alpha) * np.tanh(
            (1.0 if beta is None else beta) * x)
    if n == "hardsigmoid":
        al, be = 0.2 if alpha is None else alpha, 0.5 if beta is None else beta
        return lambda x: np.clip(al * x + be, 0, 1)
    if n == "elu":
        al = 1.0 if alpha is None else alpha
        return lambda x: np.where(x >= 0, x, al * (np.exp(np.minimum(x, 0)) - 1))
    if n == "softsign":
        return lambda x: x / (1 + np.abs(x))
    if n == "softplus":
        return lambda x: np.logaddexp(0, x)
    raise ValueError(f"unknown RNN activation '{name}'")


def _activations(op: str, a: dict[str, Any], dirs: int) -> list[list[Act]]:
    names = list(a.get("activations") or _DEFAULT_ACTS[op] * dirs)
    if len(names) == len(_DEFAULT_ACTS[op]) and dirs == 2:
        names = names * 2
    alphas = list(a.get("activation_alpha") or [])
    betas = list(a.get("activation_beta") or [])
    fns = []
    for k, name in enumerate(names):
        fns.append(_activation(name, alphas[k] if k < len(alphas) else None,
                               betas[k] if k < len(betas) else None))
    per = len(_DEFAULT_ACTS[op])
    return [fns[d * per:(d + 1) * per] for d in range(dirs)]


def _cell(op: str, a: dict[str, Any], acts: list[Act], xw: np.ndarray, h: np.ndarray,
          c: np.ndarray | None, r: np.ndarray, rb: np.ndarray,
          p: np.ndarray | None) -> tuple[np.ndarray, np.ndarray | None]:
    """One time step for a batch of rows: `xw` is the input's projection with its bias
    (x W^T + Wb), computed for every step at once by run_rnn."""
    clip = a.get("clip")

    def cl(v: np.ndarray) -> np.ndarray:
        return np.clip(v, -clip, clip) if clip is not None else v

    if op == "RNN":
        return acts[0](cl(xw + h @ r.T + rb)), None
    if op == "GRU":
        f, g = acts
        xz, xr, xh = np.split(xw, 3, axis=-1)
        rz, rr, rh = np.split(r, 3, axis=0)
        bz, br, bh = np.split(rb, 3)
        z = f(cl(xz + h @ rz.T + bz))
        rt = f(cl(xr + h @ rr.T + br))
        if a["linear_before_reset"]:
            ht = g(cl(xh + rt * (h @ rh.T + bh)))
        else:
            ht = g(cl(xh + (rt * h) @ rh.T + bh))
        return (1 - z) * ht + z * h, None
    f, g, hf = acts
    pre = xw + h @ r.T + rb
    pi, po, pf, pc = np.split(pre, 4, axis=-1)
    peep_i, peep_o, peep_f = np.split(p, 3) if p is not None else (0, 0, 0)
    i = f(cl(pi + peep_i * c))
    ft = 1 - i if a["input_forget"] else f(cl(pf + peep_f * c))
    ct = g(cl(pc))
    c_new = ft * c + i * ct
    o = f(cl(po + peep_o * c_new))
    return o * hf(c_new), c_new


def run_rnn(op: str, ins: list[Any], a: dict[str, Any]) -> list[np.ndarray]:
    def get(i: int) -> Any:
        return opt(ins, i)

    x, w, r = ins[0], ins[1], ins[2]
    dtype = x.dtype
    if a["layout"]:
        x = np.swapaxes(x, 0, 1)
    seq, batch = x.shape[:2]
    dirs, hidden = w.shape[0], r.shape[-1]
    gates = _GATES[op]
    b = get(3)
    b = np.zeros((dirs, 2 * gates * hidden)) if b is None else b.astype(np.float64)
    lens = get(4)
    lens = np.full(batch, seq) if lens is None else np.asarray(lens).astype(np.int64)
    h0, c0 = get(5), get(6) if op == "LSTM" else None
    p = get(7) if op == "LSTM" else None
    if lens.shape != (batch,) or (batch and (lens.min() < 0 or lens.max() > seq)):
        raise ValueError(f"sequence_lens {lens.tolist()} must hold {batch} lengths within "
                         f"[0, {seq}]")
    acts = _activations(op, a, dirs)
    xs = x.astype(np.float64)
    y = np.zeros((seq, dirs, batch, hidden))
    yh = np.zeros((dirs, batch, hidden))
    yc = np.zeros((dirs, batch, hidden))
    rows = np.arange(batch)
    for d in range(dirs):
        reverse = a["direction"] == "reverse" or d == 1
        h = np.zeros((batch, hidden)) if h0 is None else h0[d].astype(np.float64)
        c = np.zeros((batch, hidden)) if c0 is None else c0[d].astype(np.float64)
        # The input's projection for every step and row in one product; the loop over time
        # then carries the whole batch, each row at its own position (reversed rows start at
        # their own last step) and frozen once its sequence has ended.
        xw = xs @ w[d].astype(np.float64).T + b[d][:gates * hidden]
        rd, rb = r[d].astype(np.float64), b[d][gates * hidden:]
        pd = None if p is None else p[d].astype(np.float64)
        for k in range(int(lens.max()) if batch else 0):
            active = k < lens
            t = np.where(active, lens - 1 - k if reverse else k, 0)
            h_new, c_new = _cell(op, a, acts[d], xw[t, rows], h, c, rd, rb, pd)
            h = np.where(active[:, None], h_new, h)
            if c_new is not None:
                c = np.where(active[:, None], c_new, c)
            y[t[active], d, rows[active]] = h_new[active]
        # a row whose sequence is empty has no last output: 0 (ONNX Runtime's answer),
        # not its initial state
        yh[d], yc[d] = np.where(lens[:, None] > 0, h, 0), np.where(lens[:, None] > 0, c, 0)
    if a["layout"]:
        y = np.transpose(y, (2, 0, 1, 3))
        yh, yc = np.swapaxes(yh, 0, 1), np.swapaxes(yc, 0, 1)
    res = [y.astype(dtype), yh.astype(dtype)]
    if op == "LSTM":
        res.append(yc.astype(dtype))
    return res


def _rnn_infer(op: str) -> Callable[[Node, dict[str, Any]], list[TensorMeta]]:
    def infer(node: Node, a: dict[str, Any]) -> list[TensorMeta]:
        dt = check_dtype(node, 0, FLOATS, "X")
        xs, ws, rs = shape_in(node, 0), shape_in(node, 1), shape_in(node, 2)
        if xs is None:
            return [out(dt, None)] * 3
        if len(xs) != 3:
            raise shape_error(node, f"X has rank {len(xs)}, expected 3")
        seq, batch = (xs[1], xs[0]) if a["layout"] else (xs[0], xs[1])
        dirs: Dim = 2 if a["direction"] == "bidirectional" else 1
        hidden: Dim = a.get("hidden_size") or (rs[-1] if rs is not None else sym(node, "h"))
        # R is [dirs, gates * hidden, hidden] (DynamicQuantizeLSTM, sharing this, stores it
        # transposed)
        if node.op_type == op and rs is not None and len(rs) == 3 and isinstance(rs[-1], int) \
                and rs[-1] != hidden:
            raise shape_error(node, f"hidden_size {hidden} does not match R {list(rs)}")
        if ws is not None and isinstance(ws[0], int) and ws[0] != dirs:
            raise shape_error(node, f"W has {ws[0]} directions, expected {dirs}")
        if a["layout"]:
            y, state = (batch, seq, dirs, hidden), (batch, dirs, hidden)
        else:
            y, state = (seq, dirs, batch, hidden), (dirs, batch, hidden)
        return [out(dt, y), out(dt, state), out(dt, state)]
    return infer


def _rnn_device(op: str) -> Callable[[Node, dict[str, Any]], DeviceKernel | str]:
    """The runtime's RNN/GRU/LSTM kernel (float32): for the default activations only."""
    def device(node: Node, a: dict[str, Any]) -> DeviceKernel | str:
        why = reject(node)
        if why:
            return why
        lens = node.input(4)
        if lens is not None and (lens.meta is None or lens.meta.dtype is not DType.INT32):
            return "sequence_lens must be int32"
        dirs = 2 if a["direction"] == "bidirectional" else 1
        acts = a.get("activations")
        if acts and [s.lower() for s in acts] != [s.lower() for s in _DEFAULT_ACTS[op]] * dirs:
            return f"activations {list(acts)}: the device runs the default ones only"
        if a.get("activation_alpha") or a.get("activation_beta"):
            return "activation_alpha/beta: the device runs the default activations only"
        attrs = {"direction": a["direction"], "layout": int(a["layout"])}
        if a.get("clip") is not None:
            attrs["clip"] = float(a["clip"])
        if op == "LSTM":
            attrs["input_forget"] = int(a["input_forget"])
        if op == "GRU":
            attrs["linear_before_reset"] = int(a["linear_before_reset"])
        return kernel(op, attrs, [0, 1, 2] + [optional_index(node, i)
                                              for i in range(3, len(node.inputs))])
    return device


_COMMON = {"activation_alpha": A.floats(), "activation_beta": A.floats(),
           "activations": A.strings(), "clip": A.f(), "direction": A.s("forward", A.DIRECTIONS),
           "hidden_size": A.i(), "layout": A.i(0)}
register(OpSchema("RNN", 3, 6, _rnn_infer("RNN"), lambda ins, a: run_rnn("RNN", ins, a),
                  attrs=_COMMON, min_outputs=0, max_outputs=2, device=_rnn_device("RNN")))
register(OpSchema("GRU", 3, 6, _rnn_infer("GRU"), lambda ins, a: run_rnn("GRU", ins, a),
                  attrs={**_COMMON, "linear_before_reset": A.i(0)}, min_outputs=0,
                  max_outputs=2, device=_rnn_device("GRU")))
register(OpSchema("LSTM", 3, 8, _rnn_infer("LSTM"), lambda ins, a: run_rnn("LSTM", ins, a),
                  attrs={**_COMMON, "input_forget": A.i(0)}, min_outputs=0, max_outputs=3,
                  device=_rnn_device("LSTM")))
