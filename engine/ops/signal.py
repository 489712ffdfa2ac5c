"""Signal processing: DFT, STFT, Hann/Hamming/Blackman windows, MelWeightMatrix."""

from __future__ import annotations

from typing import Any

import numpy as np

from ..ir import Dim, Node, TensorMeta
from . import attrs as A
from .kernel_utils import np_dtype, onnx_dtype, opt
from .registry import OpSchema, register
from .shape_helpers import FLOATS, check_dtype, const_in, meta_in, norm_axis, out, sym


def _scalar(x: Any) -> float:
    return np.asarray(x).reshape(-1)[0].item()


def dft(x: np.ndarray, length: int | None, axis: int, inverse: bool, onesided: bool
        ) -> np.ndarray:
    """x has a trailing dim of 1 (real) or 2 (complex); so does the result."""
    sig = x[..., 0] + (1j * x[..., 1] if x.shape[-1] == 2 else 0)
    ax = axis if axis >= 0 else axis + x.ndim  # axis counts the trailing complex dim
    if inverse and onesided:  # the input is the first half of a Hermitian spectrum
        n = 2 * (sig.shape[ax] - 1) if length is None else length
        return np.fft.irfft(sig, n=n, axis=ax)[..., None].astype(x.dtype)
    n = sig.shape[ax] if length is None else length
    res = np.fft.ifft(sig, n=n, axis=ax) if inverse else np.fft.fft(sig, n=n, axis=ax)
    if onesided:
        res = np.take(res, np.arange(n // 2 + 1), axis=ax)
    return np.stack([res.real, res.imag], axis=-1).astype(x.dtype)


def _dft_infer(node: Node, a: dict[str, Any]) -> list[TensorMeta]:
    m = meta_in(node, 0)
    check_dtype(node, 0, FLOATS, "input")
    if m.shape is None:
        return [out(m.dtype, None)]
    axis_c = const_in(node, 2)
    if node.input(2) is not None and axis_c is None:
        last = 1 if a["onesided"] and a["inverse"] else 2
        return [out(m.dtype, tuple(sym(node, i) for i in range(len(m.shape) - 1)) + (last,))]
    axis = norm_axis(node, int(_scalar(axis_c)) if axis_c is not None else -2, len(m.shape))
    dims: list[Dim] = list(m.shape[:-1]) + [2]
    length_c = const_in(node, 1)
    n: Dim = m.shape[axis] if node.input(1) is None else (
        int(_scalar(length_c)) if length_c is not None else sym(node, axis))
    if a["onesided"] and a["inverse"]:
        dims[-1] = 1
        if node.input(1) is None:
            n = 2 * (n - 1) if isinstance(n, int) else sym(node, axis)
    elif a["onesided"]:
        n = n // 2 + 1 if isinstance(n, int) else sym(node, axis)
    dims[axis] = n
    return [out(m.dtype, dims)]


def _dft(ins: list[Any], a: dict[str, Any]) -> list[np.ndarray]:
    def get(i: int) -> Any:
        return opt(ins, i, nonempty=True)

    length = get(1)
    axis = get(2)
    return [dft(ins[0], None if length is None else int(_scalar(length)),
                -2 if axis is None else int(_scalar(axis)), bool(a["inverse"]),
                bool(a["onesided"]))]


register(OpSchema("DFT", 1, 3, _dft_infer, _dft, attrs={"inverse": A.i(0), "onesided": A.i(0)}))


def _stft(ins: list[Any], a: dict[str, Any]) -> list[np.ndarray]:
    x = ins[0]
    step = int(_scalar(ins[1]))
    def get(i: int) -> Any:
        return opt(ins, i)

    window, flen = get(2), get(3)
    n = int(_scalar(flen)) if flen is not None else (
        window.shape[0] if window is not None else x.shape[-2])
    win = np.ones(n) if window is None else window.astype(np.float64)
    frames = 1 + (x.shape[-2] - n) // step
    parts = [x[:, f * step:f * step + n, :].astype(np.float64) * win[None, :, None]
             for f in range(frames)]
    stacked = np.stack(parts, axis=1)  # (batch, frames, n, 1|2)
    return [dft(stacked, None, 2, False, bool(a["onesided"])).astype(x.dtype)]


def _stft_infer(node: Node, a: dict[str, Any]) -> list[TensorMeta]:
    m = meta_in(node, 0)
    return [out(m.dtype, (m.shape[0] if m.shape else sym(node, 0), sym(node, 1),
                          sym(node, 2), 2))]


register(OpSchema("STFT", 2, 4, _stft_infer, _stft, attrs={"onesided": A.i(1)}))


# ---- windows --------------------------------------------------------------------------------
def _window(kind: str, size: int, periodic: bool) -> np.ndarray:
    denom = size if periodic else size - 1
    k = np.arange(size) * 2 * np.pi / max(denom, 1)
    if kind == "hann":
        return 0.5 - 0.5 * np.cos(k)
    if kind == "hamming":
        alpha = 25 / 46
        return alpha - (1 - alpha) * np.cos(k)
    return 0.42 - 0.5 * np.cos(k) + 0.08 * np.cos(2 * k)


def _window_op(name: str, kind: str) -> None:
    def infer(node: Node, a: dict[str, Any]) -> list[TensorMeta]:
        size = const_in(node, 0)
        dt = onnx_dtype(a["output_datatype"])
        return [out(dt, (int(_scalar(size)) if size is not None else sym(node, 0),))]

    def compute(ins: list[Any], a: dict[str, Any]) -> list[np.ndarray]:
        w = _window(kind, int(_scalar(ins[0])), bool(a["periodic"]))
        return [w.astype(np_dtype(onnx_dtype(a["output_datatype"])))]

    register(OpSchema(name, 1, 1, infer, compute,
                      attrs={"output_datatype": A.i(1), "periodic": A.i(1)}))


_window_op("HannWindow", "hann")
_window_op("HammingWindow", "hamming")
_window_op("BlackmanWindow", "blackman")


def _mel(ins: list[Any], a: dict[str, Any]) -> list[np.ndarray]:
    bins, n_fft, rate, lo, hi = (_scalar(v) for v in ins)
    bins, n_fft = int(bins), int(n_fft)
    spec_bins = n_fft // 2 + 1
    points = np.arange(bins + 2)
    lo_mel = 2595 * np.log10(1 + lo / 700)
    hi_mel = 2595 * np.log10(1 + hi / 700)
    mel = points * ((hi_mel - lo_mel) / (bins + 2)) + lo_mel
    hz = 700 * (10 ** (mel / 2595) - 1)
    edges = (((n_fft + 1) * hz) // rate).astype(int)
    w = np.zeros((spec_bins, bins))
    for i in range(bins):
        left, center, right = edges[i], edges[i + 1], edges[i + 2]
        if center == left:
            w[center, i] = 1
        else:
            for j in range(left, center + 1):
                w[j, i] = (j - left) / (center - left)
        for j in range(center, right):
            w[j, i] = (right - j) / (right - center)
    return [w.astype(np_dtype(onnx_dtype(a["output_datatype"])))]


def _mel_infer(node: Node, a: dict[str, Any]) -> list[TensorMeta]:
    bins, n_fft = const_in(node, 0), const_in(node, 1)
    return [out(onnx_dtype(a["output_datatype"]), (
        int(_scalar(n_fft)) // 2 + 1 if n_fft is not None else sym(node, 0),
        int(_scalar(bins)) if bins is not None else sym(node, 1)))]


register(OpSchema("MelWeightMatrix", 5, 5, _mel_infer, _mel,
                  attrs={"output_datatype": A.i(1)}))
