"""Operators of ONNX Runtime's `com.microsoft` domain that trained models ship with.

`onnxruntime.quantization.quantize_dynamic` rewrites an LSTM into DynamicQuantizeLSTM: int8
weights (W [dirs, input, 4*hidden], R [dirs, hidden, 4*hidden], transposed against LSTM's) with
a scale and zero point per direction (or per output column), and every matrix product's
left operand quantized on the fly to uint8 over the whole operand: the inputs of all time steps
in one product, the hidden state once per step and per sequence of the batch (each row is its
own product in ONNX Runtime; measured: quantizing the batch's rows together differs by 2e-4).
The result is what that arithmetic gives, not
what a float LSTM gives (they differ by ~0.3% of the output's scale on a CRNN's logits), so
the reference kernel does the same quantization.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..dtypes import DType
from ..ir import Node, TensorMeta
from . import attrs as A
from .device_helpers import kernel, optional_index, reject
from .registry import DeviceKernel, OpSchema, register, shape_error
from .rnn import _DEFAULT_ACTS, _activations, _rnn_infer

_LSTM_ATTRS = {"activation_alpha": A.floats(), "activation_beta": A.floats(),
               "activations": A.strings(), "clip": A.f(), "direction": A.s("forward", A.DIRECTIONS),
               "hidden_size": A.i(), "input_forget": A.i(0)}


def quantize_u8(a: np.ndarray) -> tuple[np.ndarray, np.float32, np.float32]:
    """Dynamic per-tensor uint8 quantization: the range always holds 0; values round to
    nearest even; (quantized values as float64, scale, zero point)."""
    a = np.asarray(a, np.float32)
    lo = np.float32(min(float(a.min()), 0.0)) if a.size else np.float32(0)
    hi = np.float32(max(float(a.max()), 0.0)) if a.size else np.float32(0)
    scale = np.float32((hi - lo) / np.float32(255)) if hi != lo else np.float32(1)
    zp = np.float32(np.clip(np.round(np.float32(0) - lo / scale), 0, 255))
    q = np.clip(np.round(a / scale) + zp, 0, 255)
    return q.astype(np.float64), scale, zp


def _centred(wq: np.ndarray, w_zp: np.ndarray) -> np.ndarray:
    """int8 weights [K, N] less their zero point, as float64 (exact), once per call."""
    return wq.astype(np.float64) - w_zp.astype(np.float64)


def _qmatmul(a: np.ndarray, w: np.ndarray, w_scale: np.ndarray) -> np.ndarray:
    """a [M, K] float times centred int8 weights [K, N] (`_centred`): exact integer sums,
    then the scales."""
    q, s, z = quantize_u8(a)
    acc = (q - z) @ w
    return (acc.astype(np.float32) * (s * w_scale.astype(np.float32))).astype(np.float32)


def _per_dir(v: np.ndarray, d: int, dirs: int) -> np.ndarray:
    v = np.asarray(v)
    return v.reshape(dirs, -1)[d] if v.size > 1 else v.reshape(())


def _dq_lstm(ins: list[Any], a: dict[str, Any]) -> list[np.ndarray]:
    x, w, r = ins[0], ins[1], ins[2]
    b, lens, h0, c0, p = (ins[i] if len(ins) > i else None for i in range(3, 8))
    ws, wz, rs, rz = ins[8], ins[9], ins[10], ins[11]
    seq, batch, _ = x.shape
    dirs, hidden = w.shape[0], r.shape[1]
    if lens is not None and np.any(np.asarray(lens) != seq):
        raise ValueError("DynamicQuantizeLSTM with sequence_lens shorter than the sequence "
                         "is not supported")
    acts = _activations("LSTM", a, dirs)
    clip = a.get("clip")
    y = np.zeros((seq, dirs, batch, hidden), np.float32)
    yh = np.zeros((dirs, batch, hidden), np.float32)
    yc = np.zeros((dirs, batch, hidden), np.float32)
    xf = np.asarray(x, np.float32).reshape(seq * batch, -1)
    for d in range(dirs):
        f, g, hf = acts[d]
        bias = np.zeros(8 * hidden, np.float32) if b is None else b[d].astype(np.float32)
        xw = _qmatmul(xf, _centred(w[d], _per_dir(wz, d, dirs)), _per_dir(ws, d, dirs))
        rd, r_scale = _centred(r[d], _per_dir(rz, d, dirs)), _per_dir(rs, d, dirs)
        # Wb + Rb join after the two products, ONNX Runtime's order of float additions
        xw, wrb = xw.reshape(seq, batch, -1), bias[:4 * hidden] + bias[4 * hidden:]
        peep = np.split(p[d].astype(np.float32), 3) if p is not None else (0, 0, 0)
        h = np.zeros((batch, hidden), np.float32) if h0 is None else h0[d].astype(np.float32)
        c = np.zeros((batch, hidden), np.float32) if c0 is None else c0[d].astype(np.float32)
        reverse = a["direction"] == "reverse" or d == 1
        for t in (range(seq - 1, -1, -1) if reverse else range(seq)):
            rec = np.concatenate([_qmatmul(h[i:i + 1], rd, r_scale) for i in range(batch)])
            pre = (xw[t] + rec) + wrb
            if clip is not None:
                pre = np.clip(pre, -clip, clip)
            pi, po, pf, pc = np.split(pre, 4, axis=-1)
            i = f(pi + peep[0] * c)
            ft = 1 - i if a["input_forget"] else f(pf + peep[2] * c)
            c = ft * c + i * g(pc)
            h = (f(po + peep[1] * c) * hf(c)).astype(np.float32)
            y[t, d] = h
        yh[d], yc[d] = h, c
    return [y, yh, yc]


def _dq_lstm_infer(node: Node, a: dict[str, Any]) -> list[TensorMeta]:
    if len(node.inputs) < 12 or any(node.input(i) is None for i in (8, 9, 10, 11)):
        raise shape_error(node, "DynamicQuantizeLSTM needs W_scale, W_zero_point, R_scale "
                                "and R_zero_point (inputs 8-11)")
    return _rnn_infer("LSTM")(node, {**a, "layout": 0})


def _dq_lstm_device(node: Node, a: dict[str, Any]) -> DeviceKernel | str:
    """The runtime's kernel (kernels_dq_lstm.cc): constant int8 weights, default activations."""
    why = reject(node)
    if why:
        return why
    for i, what in ((1, "W"), (2, "R"), (8, "W_scale"), (9, "W_zero_point"), (10, "R_scale"),
                    (11, "R_zero_point")):
        v = node.input(i)
        if v is None or v.const is None:
            return f"{what} must be a constant"
    for i in (1, 2, 9, 11):
        if node.input(i).meta.dtype is not DType.INT8:
            return "the device runs int8 weights only"
    lens = node.input(4)
    if lens is not None and lens.meta.dtype is not DType.INT32:
        return "sequence_lens must be int32"
    acts = a.get("activations")
    dirs = 2 if a["direction"] == "bidirectional" else 1
    if acts and [s.lower() for s in acts] != [s.lower() for s in _DEFAULT_ACTS["LSTM"]] * dirs:
        return f"activations {list(acts)}: the device runs the default ones only"
    if a.get("activation_alpha") or a.get("activation_beta"):
        return "activation_alpha/beta: the device runs the default activations only"
    attrs: dict[str, Any] = {"direction": a["direction"], "input_forget": int(a["input_forget"])}
    if a.get("clip") is not None:
        attrs["clip"] = float(a["clip"])
    return kernel("DynamicQuantizeLSTM", attrs,
                  [0, 1, 2] + [optional_index(node, i) for i in range(3, 8)] + [8, 9, 10, 11])


register(OpSchema("com.microsoft.DynamicQuantizeLSTM", 3, 12, _dq_lstm_infer, _dq_lstm,
                  attrs=_LSTM_ATTRS, min_outputs=0, max_outputs=3, device=_dq_lstm_device))
