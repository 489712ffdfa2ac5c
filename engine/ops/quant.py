"""Quantization: QuantizeLinear, DequantizeLinear, DynamicQuantizeLinear, QLinearMatMul."""

from __future__ import annotations

from typing import Any

import numpy as np

from ..dtypes import LOW_PRECISION_FLOATS, SUB_BYTE_INTS, DType
from ..ir import Node, TensorMeta
from . import attrs as A
from .device_helpers import kernel, reject
from .kernel_utils import np_dtype, onnx_dtype, saturate_int, to_low_precision
from .linalg import matmul_shape
from .registry import DeviceKernel, OpSchema, register, shape_error
from .shape_helpers import dtype_in, meta_in, out, shape_in

_QTYPES = {DType.INT8, DType.UINT8, DType.INT16, DType.UINT16, DType.INT32, *SUB_BYTE_INTS,
           *(LOW_PRECISION_FLOATS - {DType.FLOAT8E8M0})}


def expand_scale(s: np.ndarray, x_shape: tuple[int, ...], axis: int, block: int
                 ) -> np.ndarray:
    """Broadcast a per-tensor, per-axis or blocked scale/zero point to x's shape."""
    s = np.asarray(s)
    if s.size == 1:
        return s.reshape(())
    rank = len(x_shape)
    axis = axis + rank if axis < 0 else axis
    if s.ndim == 1 and not block:
        shape = [1] * rank
        shape[axis] = s.size
        return s.reshape(shape)
    rep = np.repeat(s, block, axis=axis)
    idx = [slice(None)] * rank
    idx[axis] = slice(0, x_shape[axis])
    return rep[tuple(idx)]


def _q_out_dtype(node_or_ins: Any, a: dict[str, Any], zp_dtype: DType | None) -> DType:
    if zp_dtype is not None:
        return zp_dtype
    if a.get("output_dtype"):
        return onnx_dtype(a["output_dtype"])
    return DType.UINT8


def _quantize_infer(node: Node, a: dict[str, Any]) -> list[TensorMeta]:
    zp = dtype_in(node, 2) if node.input(2) is not None else None
    dt = _q_out_dtype(node, a, zp)
    if dt not in _QTYPES:
        raise shape_error(node, f"quantizing to {dt.value} is not supported")
    return [out(dt, shape_in(node, 0))]


def _quantize(ins: list[Any], a: dict[str, Any]) -> list[np.ndarray]:
    x, scale = np.asarray(ins[0]), np.asarray(ins[1])
    zp = ins[2] if len(ins) > 2 else None
    dt = np_dtype(_q_out_dtype(None, a, None if zp is None else DType.from_numpy(zp.dtype)))
    wd = np.float64 if np.float64 in (x.dtype, scale.dtype) else np.float32
    s = expand_scale(scale.astype(wd), x.shape, a["axis"], a["block_size"])
    y = x.astype(wd) / s
    if DType.from_numpy(dt) in LOW_PRECISION_FLOATS:
        # Float targets round (to nearest even) in the conversion itself, not before.
        if zp is not None:
            y = y + expand_scale(np.asarray(zp).astype(wd), x.shape, a["axis"],
                                 a["block_size"])
        return [to_low_precision(y, dt, bool(a["saturate"]))]
    y = np.rint(y)
    if zp is not None:
        y = y + expand_scale(np.asarray(zp).astype(wd), x.shape, a["axis"], a["block_size"])
    return [saturate_int(y, dt)]


_Q_ATTRS = {"axis": A.i(1), "block_size": A.i(0), "output_dtype": A.i(0)}
register(OpSchema("QuantizeLinear", 2, 3, _quantize_infer, _quantize, attrs={
    **_Q_ATTRS, "saturate": A.i(1), "precision": A.i(0)}))


def _dequantize_infer(node: Node, a: dict[str, Any]) -> list[TensorMeta]:
    dt = onnx_dtype(a["output_dtype"]) if a.get("output_dtype") else dtype_in(node, 1)
    return [out(dt, shape_in(node, 0))]


def _dequantize(ins: list[Any], a: dict[str, Any]) -> list[np.ndarray]:
    x, scale = np.asarray(ins[0]), np.asarray(ins[1])
    zp = ins[2] if len(ins) > 2 else None
    y = x.astype(np.float64)
    if zp is not None:
        y = y - expand_scale(np.asarray(zp).astype(np.float64), x.shape, a["axis"],
                             a["block_size"])
    y = y * expand_scale(scale.astype(np.float64), x.shape, a["axis"], a["block_size"])
    dt = np_dtype(onnx_dtype(a["output_dtype"])) if a.get("output_dtype") else scale.dtype
    return [y.astype(dt)]


register(OpSchema("DequantizeLinear", 2, 3, _dequantize_infer, _dequantize, attrs=_Q_ATTRS))


def _dynamic_quantize(ins: list[Any], a: dict[str, Any]) -> list[np.ndarray]:
    x = np.asarray(ins[0]).astype(np.float32)
    lo = min(0.0, float(np.min(x))) if x.size else 0.0
    hi = max(0.0, float(np.max(x))) if x.size else 0.0
    # float32 arithmetic, as ONNX Runtime computes it (a double quotient differs by an ulp)
    scale = (np.float32(hi) - np.float32(lo)) / np.float32(255) if hi != lo else np.float32(1)
    zp = saturate_int(np.rint(np.float32(0 - lo) / scale), np.dtype(np.uint8))
    # a NaN quantizes to 0 (the device kernel's answer; numpy's cast of one is undefined)
    y = saturate_int(np.nan_to_num(np.rint(x / scale) + zp, nan=0.0), np.dtype(np.uint8))
    return [y, np.array(scale, np.float32), np.array(zp, np.uint8)]


def _dynamic_quantize_device(node: Node, a: dict[str, Any]) -> DeviceKernel | str:
    return reject(node) or kernel("DynamicQuantizeLinear", {}, (0,))


register(OpSchema("DynamicQuantizeLinear", 1, 1, lambda node, a: [
    out(DType.UINT8, shape_in(node, 0)), out(DType.FLOAT32, ()), out(DType.UINT8, ())],
    _dynamic_quantize, max_outputs=3, device=_dynamic_quantize_device))


def _qlinear_matmul(ins: list[Any], a: dict[str, Any]) -> list[np.ndarray]:
    x, xs, xz, w, ws, wz, ys, yz = ins
    xa = x.astype(np.float64) - np.asarray(xz).astype(np.float64).reshape(
        -1, 1) if np.size(xz) > 1 else x.astype(np.float64) - float(np.asarray(xz).reshape(-1)[0])
    wa = w.astype(np.float64) - np.asarray(wz).astype(np.float64).reshape(
        (1,) * (w.ndim - 1) + (-1,)) if np.size(wz) > 1 else \
        w.astype(np.float64) - float(np.asarray(wz).reshape(-1)[0])
    acc = np.matmul(xa, wa)
    xs64 = np.asarray(xs).astype(np.float64)
    xs64 = xs64.reshape(-1, 1) if xs64.size > 1 else xs64.reshape(())
    ws64 = np.asarray(ws).astype(np.float64)
    ws64 = ws64.reshape((1,) * (w.ndim - 1) + (-1,)) if ws64.size > 1 else ws64.reshape(())
    y = np.rint(acc * xs64 * ws64 / np.asarray(ys).astype(np.float64).reshape(()))
    y = y + np.asarray(yz).astype(np.float64).reshape(())
    return [saturate_int(y, np.asarray(yz).dtype)]


register(OpSchema("QLinearMatMul", 8, 8, lambda node, a: [out(
    meta_in(node, 7).dtype, matmul_shape(node, shape_in(node, 0), shape_in(node, 3)))],
    _qlinear_matmul))
