"""Convolutions: Conv, ConvTranspose, ConvInteger, QLinearConv, Col2Im."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ..dtypes import DType
from ..ir import Dim, Node, TensorMeta
from . import attrs as A
from .device_helpers import kernel, optional_index, reject
from .kernel_utils import exact_int32, ints, widen
from .registry import DeviceKernel, Layout, OpSchema, register, shape_error
from .shape_helpers import (
    FLOATS,
    check_dtype,
    check_same_dtype,
    const_ints,
    meta_in,
    out,
    shape_in,
    sym,
    symbolic_shape,
)
from .spatial import Window, pad_for_windows, window, window_slices

CONV_ATTRS = {"auto_pad": A.s("NOTSET", A.AUTO_PAD), "dilations": A.ints(), "group": A.i(1),
              "kernel_shape": A.ints(), "pads": A.ints(), "strides": A.ints()}


def conv_compute(x: np.ndarray, w: np.ndarray, win: Window, out: tuple[int, ...],
                 group: int) -> np.ndarray:
    """Grouped n-D convolution via im2col + one batched matmul; no bias."""
    n, c = x.shape[:2]
    m = w.shape[0]
    cg, mg = c // group, m // group
    xp, _ = pad_for_windows(x, win, out, 0)
    taps = [xp[sl] for _, sl in window_slices(win, out)]
    p = math.prod(out)
    cols = np.stack(taps, axis=2).reshape(n, group, cg * len(taps), p)
    wk = w.reshape(group, mg, cg * len(taps))
    y = np.matmul(wk, cols)  # (n, group, mg, p)
    return y.reshape((n, m) + tuple(out))


def _conv_window(node: Node | None, a: dict[str, Any], xs: tuple[Dim, ...],
                 ws: tuple[Dim, ...]) -> tuple[Window, tuple[Dim, ...]]:
    kern = a.get("kernel_shape") or list(ws[2:])
    if not all(isinstance(k, int) for k in kern):
        raise shape_error(node, f"kernel shape {kern} is not static")
    return window(node, a, kern, xs[2:])


def _conv_infer(node: Node, a: dict[str, Any]) -> list[TensorMeta]:
    dt = check_dtype(node, 0, FLOATS, "X")
    check_same_dtype(node, [0, 1, 2])
    return [out(dt, _conv_shape(node, a))]


def _conv_shape(node: Node, a: dict[str, Any], w_index: int = 1) -> tuple[Dim, ...] | None:
    xs, ws = shape_in(node, 0), shape_in(node, w_index)
    if xs is None or ws is None:
        return None if xs is None else symbolic_shape(node, len(xs))
    if len(xs) < 3 or len(ws) != len(xs):
        raise shape_error(node, f"X rank {len(xs)} and W rank {len(ws)} must be equal and >= 3")
    g = a["group"]
    c, cw = xs[1], ws[1]
    if isinstance(c, int) and isinstance(cw, int) and c != cw * g:
        raise shape_error(node, f"X has {c} channels, expected W.shape[1] * group = "
                                f"{cw} * {g} = {cw * g}")
    _, spatial = _conv_window(node, a, xs, ws)
    return (xs[0], ws[0]) + spatial


def _conv(ins: list[Any], a: dict[str, Any]) -> list[np.ndarray]:
    x, w = widen(ins[0]), widen(ins[1])
    win, outs = _conv_window(None, a, x.shape, w.shape)
    y = conv_compute(x, w, win, outs, a["group"])  # type: ignore[arg-type]
    if len(ins) > 2 and ins[2] is not None:
        y = y + widen(ins[2]).reshape((1, -1) + (1,) * (x.ndim - 2))
    return [y.astype(ins[0].dtype)]


def _conv_device(node: Node, a: dict[str, Any]) -> DeviceKernel | str:
    why = reject(node)
    if why:
        return why
    xs, ws = node.inputs[0].meta.shape, node.inputs[1].meta.shape
    if len(xs) not in (3, 4, 5):  # 1-D (audio models), 2-D and 3-D (video)
        return f"device Conv is 1-D, 2-D or 3-D only, input has rank {len(xs)}"
    win, _ = _conv_window(node, a, xs, ws)
    return kernel("Conv", {"strides": list(win.strides), "pads": list(win.pads),
                           "dilations": list(win.dilations), "group": int(a["group"])},
                  (0, 1, optional_index(node, 2)))


register(OpSchema("Conv", 2, 3, _conv_infer, _conv, attrs=CONV_ATTRS, device=_conv_device,
                  layout=Layout.CONV))


# ---- ConvTranspose --------------------------------------------------------------------------
def transpose_geometry(a: dict[str, Any], spatial: tuple[int, ...], kern: list[int]
                       ) -> tuple[Window, tuple[int, ...]]:
    n = len(kern)
    strides = list(a.get("strides") or [1] * n)
    dil = list(a.get("dilations") or [1] * n)
    opad = list(a.get("output_padding") or [0] * n)
    pads = list(a.get("pads") or [0] * (2 * n))
    auto = a.get("auto_pad", "NOTSET")
    shape = a.get("output_shape")
    outs = []
    for i in range(n):
        ext = (kern[i] - 1) * dil[i] + 1
        full = strides[i] * (spatial[i] - 1) + opad[i] + ext
        if shape is not None or auto in ("SAME_UPPER", "SAME_LOWER"):
            o = int(shape[-n + i]) if shape is not None else spatial[i] * strides[i]
            total = full - o
            small, big = total // 2, total - total // 2
            pads[i], pads[i + n] = (small, big) if auto == "SAME_UPPER" else (big, small)
        else:
            if auto == "VALID":
                pads[i] = pads[i + n] = 0
            o = full - pads[i] - pads[i + n]
        outs.append(o)
    return Window(tuple(kern), tuple(strides), tuple(dil), tuple(pads)), tuple(outs)


def _convt_infer(node: Node, a: dict[str, Any]) -> list[TensorMeta]:
    dt = check_dtype(node, 0, FLOATS, "X")
    check_same_dtype(node, [0, 1, 2])
    xs, ws = shape_in(node, 0), shape_in(node, 1)
    if xs is None or ws is None:
        return [out(dt, None if xs is None else symbolic_shape(node, len(xs)))]
    m = ws[1] * a["group"] if isinstance(ws[1], int) else sym(node, 1)
    kern = a.get("kernel_shape") or list(ws[2:])
    if not all(isinstance(d, int) for d in list(xs[2:]) + list(kern)):
        return [out(dt, (xs[0], m) + tuple(sym(node, i + 2) for i in range(len(xs) - 2)))]
    _, outs = transpose_geometry(a, xs[2:], kern)  # type: ignore[arg-type]
    return [out(dt, (xs[0], m) + outs)]


def _convt(ins: list[Any], a: dict[str, Any]) -> list[np.ndarray]:
    x, w = widen(ins[0]), widen(ins[1])
    g = a["group"]
    n, c = x.shape[:2]
    cg, mg = c // g, w.shape[1]
    kern = a.get("kernel_shape") or list(w.shape[2:])
    win, outs = transpose_geometry(a, x.shape[2:], kern)
    nsp = len(kern)
    full = [max(win.strides[i] * (x.shape[i + 2] - 1) + win.extent(i), win.pads[i] + outs[i])
            for i in range(nsp)]
    y = np.zeros((n, g, mg) + tuple(full), dtype=x.dtype)
    xg = x.reshape((n, g, cg) + x.shape[2:])
    wg = w.reshape((g, cg, mg) + tuple(kern))
    for kpos, _ in window_slices(Window(tuple(kern), (1,) * nsp, (1,) * nsp, ()),
                                 (1,) * nsp):
        sl = tuple(slice(k * d, k * d + (i - 1) * s + 1, s) for k, d, i, s in
                   zip(kpos, win.dilations, x.shape[2:], win.strides))
        contrib = np.einsum("ngc...,gcm->ngm...", xg, wg[(...,) + kpos])
        y[(slice(None),) * 3 + sl] += contrib
    crop = tuple(slice(win.pads[i], win.pads[i] + outs[i]) for i in range(nsp))
    y = y[(slice(None),) * 3 + crop].reshape((n, g * mg) + outs)
    if len(ins) > 2 and ins[2] is not None:
        y = y + widen(ins[2]).reshape((1, -1) + (1,) * nsp)
    return [y.astype(ins[0].dtype)]


def _convt_device(node: Node, a: dict[str, Any]) -> DeviceKernel | str:
    """Geometry resolved here (auto_pad, output_shape): the kernel gets explicit pads."""
    why = reject(node)
    if why:
        return why
    xs, w = node.inputs[0].meta.shape, node.inputs[1]
    if len(xs) not in (3, 4):
        return f"device ConvTranspose is 1-D or 2-D only, input has rank {len(xs)}"
    if not w.is_constant:
        return "device ConvTranspose needs constant weights"
    kern = a.get("kernel_shape") or list(w.meta.shape[2:])
    win, _ = transpose_geometry(a, xs[2:], kern)
    n = len(kern)
    return kernel("ConvTranspose", {
        "strides": list(win.strides), "pads": list(win.pads), "dilations": list(win.dilations),
        "output_padding": list(a.get("output_padding") or [0] * n), "group": int(a["group"])},
        (0, 1, optional_index(node, 2)))


register(OpSchema("ConvTranspose", 2, 3, _convt_infer, _convt, attrs={
    **CONV_ATTRS, "output_padding": A.ints(), "output_shape": A.ints()}, device=_convt_device,
    layout=Layout.CONV))  # any format: the kernel converts where oneDNN chose another


# ---- integer / quantized convolutions -------------------------------------------------------
def _zp(x: np.ndarray, zp: Any, channel_axis: int | None = None) -> np.ndarray:
    x = x.astype(np.int32)
    if zp is None:
        return x
    zp = np.asarray(zp).astype(np.int32)
    if zp.size > 1 and channel_axis is not None:
        shape = [1] * x.ndim
        shape[channel_axis] = zp.size
        zp = zp.reshape(shape)
    return x - zp.reshape(zp.shape if zp.size > 1 else ())


def _int_conv(x: np.ndarray, w: np.ndarray, a: dict[str, Any]) -> np.ndarray:
    """Zero points already removed: padding with 0 is padding with the zero point. The
    products run in float64 (BLAS; numpy's integer matmul has none and was ~100x slower),
    exact: 8-bit differences multiply to < 2^17, sums stay exact below 2^53 terms' worth."""
    win, outs = _conv_window(None, a, x.shape, w.shape)
    y = conv_compute(x.astype(np.float64), w.astype(np.float64), win, outs,  # type: ignore
                     a["group"])
    return exact_int32(y)



def _conv_integer_infer(node: Node, a: dict[str, Any]) -> list[TensorMeta]:
    check_dtype(node, 0, {DType.INT8, DType.UINT8}, "x")
    return [out(DType.INT32, _conv_shape(node, a))]


register(OpSchema("ConvInteger", 2, 4, _conv_integer_infer, lambda ins, a: [_int_conv(
    _zp(ins[0], ins[2] if len(ins) > 2 else None),
    _zp(ins[1], ins[3] if len(ins) > 3 else None, 0), a)],
    attrs=CONV_ATTRS))


def requantize(acc: np.ndarray, scale: np.ndarray, zp: np.ndarray | None,
               dtype: np.dtype) -> np.ndarray:
    info = np.iinfo(dtype)
    y = np.rint(acc * scale) + (0 if zp is None else np.asarray(zp).astype(np.float64))
    return np.clip(y, info.min, info.max).astype(dtype)


def _qlinear_conv(ins: list[Any], a: dict[str, Any]) -> list[np.ndarray]:
    x, xs, xz, w, ws, wz, ys, yz = ins[:8]
    acc = _int_conv(_zp(x, xz), _zp(w, wz, 0), a).astype(np.float64)
    if len(ins) > 8 and ins[8] is not None:
        acc = acc + ins[8].astype(np.float64).reshape((1, -1) + (1,) * (x.ndim - 2))
    ws = np.asarray(ws, dtype=np.float64)
    scale = float(xs) * (ws.reshape((1, -1) + (1,) * (x.ndim - 2)) if ws.size > 1 else ws)
    return [requantize(acc, scale / float(ys), yz, np.asarray(yz).dtype)]


register(OpSchema("QLinearConv", 8, 9, lambda node, a: [out(
    meta_in(node, 7).dtype, _conv_shape(node, a, 3))], _qlinear_conv, attrs=CONV_ATTRS))


# ---- Col2Im ---------------------------------------------------------------------------------
def _col2im_infer(node: Node, a: dict[str, Any]) -> list[TensorMeta]:
    m = meta_in(node, 0)
    image, block = const_ints(node, 1), const_ints(node, 2)
    xs = m.shape
    if xs is None or image is None or block is None:
        return [out(m.dtype, None)]
    c = xs[1] // math.prod(block) if isinstance(xs[1], int) else sym(node, 1)
    return [out(m.dtype, (xs[0], c) + tuple(image))]


def _col2im(ins: list[Any], a: dict[str, Any]) -> list[np.ndarray]:
    x = ins[0]
    image = ints(ins[1])
    block = ints(ins[2])
    nsp = len(image)
    win, outs = window(None, a, block, image)
    n, ck, _ = x.shape
    c = ck // math.prod(block)
    cols = x.reshape((n, c, math.prod(block)) + tuple(outs))
    padded = [image[i] + win.pads[i] + win.pads[i + nsp] for i in range(nsp)]
    y = np.zeros((n, c) + tuple(padded), dtype=x.dtype)
    for k, (_, sl) in enumerate(window_slices(win, outs)):
        y[sl] += cols[:, :, k]
    crop = tuple(slice(win.pads[i], win.pads[i] + image[i]) for i in range(nsp))
    return [y[(slice(None), slice(None)) + crop]]


def _col2im_device(node: Node, a: dict[str, Any]) -> DeviceKernel | str:
    """2-D, float32, constant image and block shapes: the runtime's loop (overlapping blocks
    add up; VOLO's outlook attention), the shapes as attributes."""
    why = reject(node)
    if why:
        return why
    image, block = const_ints(node, 1), const_ints(node, 2)
    if image is None or block is None:
        return "Col2Im's image and block shapes are not constants"
    if len(image) != 2 or len(block) != 2:
        return f"device Col2Im is 2-D, got image {list(image)}"
    if node.inputs[0].meta.dtype is not DType.FLOAT32:
        return "device Col2Im is float32 only"
    win, _ = window(node, a, block, image)
    return kernel("Col2Im", {"image": [int(v) for v in image], "block": [int(v) for v in block],
                             "dilations": list(win.dilations), "strides": list(win.strides),
                             "pads": list(win.pads)}, (0,))


register(OpSchema("Col2Im", 3, 3, _col2im_infer, _col2im, attrs={
    "dilations": A.ints(), "pads": A.ints(), "strides": A.ints()}, device=_col2im_device))


# ---- DeformConv (2-D) ---------------------------------------------------------------------
def _bilinear_zero(img: np.ndarray, y: np.ndarray, x: np.ndarray) -> np.ndarray:
    """img (N, C, H, W) sampled at per-batch points y, x (N, ...); zero outside."""
    n, c, h, w = img.shape
    y0, x0 = np.floor(y).astype(np.int64), np.floor(x).astype(np.int64)
    bidx = np.arange(n).reshape((n,) + (1,) * (y.ndim - 1))
    res = np.zeros((n,) + y.shape[1:] + (c,))
    moved = np.moveaxis(img, 1, -1)
    for dy in (0, 1):
        for dx in (0, 1):
            yy, xx = y0 + dy, x0 + dx
            wt = (1 - np.abs(y - yy)) * (1 - np.abs(x - xx))
            ok = (yy >= 0) & (yy < h) & (xx >= 0) & (xx < w)
            vals = moved[bidx, np.clip(yy, 0, h - 1), np.clip(xx, 0, w - 1)]
            res += vals * (wt * ok)[..., None]
    return np.moveaxis(res, -1, 1)


def _deform_conv(ins: list[Any], a: dict[str, Any]) -> list[np.ndarray]:
    x, w, offset = widen(ins[0]), widen(ins[1]), widen(ins[2])
    bias = ins[3] if len(ins) > 3 else None
    mask = ins[4] if len(ins) > 4 else None
    n, c = x.shape[:2]
    kh, kw = a.get("kernel_shape") or w.shape[2:]
    win, (oh, ow) = window(None, a, [kh, kw], x.shape[2:])
    og = a["offset_group"]
    off = offset.reshape(n, og, kh, kw, 2, oh, ow)
    msk = (np.ones((n, og, kh, kw, oh, ow)) if mask is None
           else widen(mask).reshape(n, og, kh, kw, oh, ow))
    base_y = (np.arange(oh) * win.strides[0] - win.pads[0])[:, None]
    base_x = (np.arange(ow) * win.strides[1] - win.pads[1])[None, :]
    cpg = c // og
    cols = np.zeros((n, c, kh * kw, oh, ow))
    for i in range(kh):
        for j in range(kw):
            for g in range(og):
                yy = base_y + i * win.dilations[0] + off[:, g, i, j, 0]
                xx = base_x + j * win.dilations[1] + off[:, g, i, j, 1]
                chans = x[:, g * cpg:(g + 1) * cpg]
                sampled = _bilinear_zero(chans, yy, xx) * msk[:, g, i, j][:, None]
                cols[:, g * cpg:(g + 1) * cpg, i * kw + j] = sampled
    group = a["group"]
    m = w.shape[0]
    y = np.matmul(w.reshape(group, m // group, -1),
                  cols.reshape(n, group, (c // group) * kh * kw, oh * ow))
    y = y.reshape(n, m, oh, ow)
    if bias is not None:
        y = y + widen(bias).reshape(1, -1, 1, 1)
    return [y.astype(ins[0].dtype)]


register(OpSchema("DeformConv", 3, 5, _conv_infer, _deform_conv,
                  attrs={**CONV_ATTRS, "offset_group": A.i(1)}))
