"""Resize: nearest / linear / cubic interpolation, every coordinate transformation mode,
antialiasing, axes and aspect-ratio policies. Separable: one (out x in) weight matrix per
resized axis."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ..dtypes import DType
from ..ir import Dim, Node, TensorMeta
from . import attrs as A
from .device_helpers import kernel, reject
from .kernel_utils import opt
from .registry import DeviceKernel, Layout, OpSchema, register, shape_error
from .shape_helpers import FLOATS, check_dtype, const_in, meta_in, out, shape_value, sym

ATTRS = {
    "antialias": A.i(0), "axes": A.ints(), "coordinate_transformation_mode": A.s("half_pixel", (
        "half_pixel", "half_pixel_symmetric", "pytorch_half_pixel", "align_corners", "asymmetric",
        "tf_crop_and_resize", "tf_half_pixel_for_nn")),
    "cubic_coeff_a": A.f(-0.75), "exclude_outside": A.i(0), "extrapolation_value": A.f(0.0),
    "keep_aspect_ratio_policy": A.s("stretch", ("stretch", "not_larger", "not_smaller")),
    "mode": A.s("nearest", ("nearest", "linear", "cubic")),
    "nearest_mode": A.s("round_prefer_floor", (
        "round_prefer_floor", "round_prefer_ceil", "floor", "ceil")),
}


def plan(shape: tuple[int, ...], scales: np.ndarray | None, sizes: np.ndarray | None,
         a: dict[str, Any]) -> tuple[list[int], list[float], list[int]]:
    """Output sizes, per-axis scales and the resized axes, ONNX rules."""
    r = len(shape)
    axes = [x + r if x < 0 else x for x in (a.get("axes") or range(r))]
    out_sizes = list(shape)
    factors = [1.0] * r
    if sizes is not None and np.size(sizes):
        want = [int(v) for v in np.asarray(sizes).reshape(-1)]
        ratios = [want[k] / shape[ax] for k, ax in enumerate(axes)]
        policy = a.get("keep_aspect_ratio_policy", "stretch")
        if policy == "stretch":
            for k, ax in enumerate(axes):
                out_sizes[ax], factors[ax] = want[k], ratios[k]
        else:
            s = min(ratios) if policy == "not_larger" else max(ratios)
            for ax in axes:
                factors[ax] = s
                out_sizes[ax] = int(s * shape[ax] + 0.5)
    elif scales is not None and np.size(scales):
        vals = [float(v) for v in np.asarray(scales).reshape(-1)]
        for k, ax in enumerate(axes):
            factors[ax] = vals[k]
            out_sizes[ax] = int(math.floor(vals[k] * shape[ax]))
    else:
        raise ValueError("Resize needs non-empty scales or sizes")
    return out_sizes, factors, axes


def _source_coords(mode: str, n_out: int, n_in: int, scale: float, roi: tuple[float, float]
                   ) -> tuple[np.ndarray, np.ndarray | None]:
    y = np.arange(n_out, dtype=np.float64)
    length = scale * n_in  # the float output length, as the ONNX reference uses it
    if mode == "align_corners":
        return (np.zeros(n_out) if length == 1 else y * (n_in - 1) / (length - 1)), None
    if mode == "asymmetric":
        return y / scale, None
    if mode == "tf_crop_and_resize":
        lo, hi = roi
        x = (np.full(n_out, (hi - lo) * (n_in - 1) / 2) if length == 1
             else y * (hi - lo) * (n_in - 1) / (length - 1))
        x = x + lo * (n_in - 1)
        return x, (x < 0) | (x > n_in - 1)
    if mode == "pytorch_half_pixel":
        return (np.full(n_out, -0.5) if length == 1 else (y + 0.5) / scale - 0.5), None
    if mode == "half_pixel":
        return (y + 0.5) / scale - 0.5, None
    if mode == "tf_half_pixel_for_nn":
        return (y + 0.5) / scale, None
    if mode == "half_pixel_symmetric":
        offset = n_in / 2 * (1 - n_out / length)
        return offset + (y + 0.5) / scale - 0.5, None
    raise ValueError(f"unknown coordinate_transformation_mode '{mode}'")


def _cubic(x: np.ndarray, a: float) -> np.ndarray:
    x = np.abs(x)
    near = ((a + 2) * x - (a + 3)) * x * x + 1
    far = ((a * x - 5 * a) * x + 8 * a) * x - 4 * a
    return np.where(x <= 1, near, np.where(x < 2, far, 0.0))


def _taps(x: np.ndarray, scale: float, a: dict[str, Any]) -> tuple[np.ndarray, np.ndarray]:
    """(indices, weights), each (n_out, taps), before clamping."""
    mode = a["mode"]
    if mode == "nearest":
        nm = a["nearest_mode"]
        if nm == "round_prefer_floor":
            idx = np.ceil(x - 0.5)
        elif nm == "round_prefer_ceil":
            idx = np.floor(x + 0.5)
        elif nm == "floor":
            idx = np.floor(x)
        else:
            idx = np.ceil(x)
        return idx.astype(np.int64)[:, None], np.ones((len(x), 1))
    base = np.floor(x)
    frac = x - base
    anti = bool(a["antialias"]) and scale < 1
    s = min(scale, 1.0) if anti else 1.0
    if mode == "linear":
        start = int(math.floor(-1 / s) + 1)
        offsets = np.arange(start, 2 - start)
        w = np.clip(1 - np.abs((offsets[None, :] - frac[:, None]) * s), 0, None)
    elif mode == "cubic":
        start = int(math.floor(-2 / s) + 1)
        offsets = np.arange(start, 2 - start)
        w = _cubic((offsets[None, :] - frac[:, None]) * s, a["cubic_coeff_a"])
    else:
        raise ValueError(f"unknown Resize mode '{mode}'")
    if anti:
        w = w / w.sum(axis=1, keepdims=True)
    return base.astype(np.int64)[:, None] + offsets[None, :], w


def axis_matrix(n_in: int, n_out: int, scale: float, roi: tuple[float, float],
                a: dict[str, Any]) -> tuple[np.ndarray, np.ndarray | None]:
    x, outside = _source_coords(a["coordinate_transformation_mode"], n_out, n_in, scale, roi)
    idx, w = _taps(x, scale, a)
    if a["exclude_outside"] and a["mode"] != "nearest":
        w = np.where((idx < 0) | (idx >= n_in), 0.0, w)
        total = w.sum(axis=1, keepdims=True)
        w = w / np.where(total == 0, 1, total)
    mat = np.zeros((n_out, n_in))
    rows = np.repeat(np.arange(n_out), idx.shape[1])
    np.add.at(mat, (rows, np.clip(idx, 0, n_in - 1).reshape(-1)), w.reshape(-1))
    return mat, outside


def resize(x: np.ndarray, roi: np.ndarray | None, scales: np.ndarray | None,
           sizes: np.ndarray | None, a: dict[str, Any]) -> np.ndarray:
    out_sizes, factors, axes = plan(x.shape, scales, sizes, a)
    r = x.ndim
    full_roi = [0.0] * r + [1.0] * r
    if roi is not None and np.size(roi):
        vals = [float(v) for v in np.asarray(roi).reshape(-1)]
        n = len(vals) // 2
        for k, ax in enumerate(axes if n == len(axes) else range(r)):
            full_roi[ax], full_roi[ax + r] = vals[k], vals[k + n]
    y = x.astype(np.float64)
    mask = None
    for ax in axes:
        span = (full_roi[ax], full_roi[ax + r])
        if out_sizes[ax] == x.shape[ax] and math.isclose(factors[ax], 1.0) and \
                span == (0.0, 1.0):
            continue
        mat, outside = axis_matrix(x.shape[ax], out_sizes[ax], factors[ax], span, a)
        y = np.moveaxis(np.tensordot(y, mat, axes=([ax], [1])), -1, ax)
        if outside is not None and outside.any():
            shape = [1] * r
            shape[ax] = len(outside)
            m = outside.reshape(shape)
            mask = m if mask is None else (mask | m)
    if mask is not None:
        y = np.where(mask, a["extrapolation_value"], y)
    if x.dtype.kind in "iu":
        info = np.iinfo(x.dtype)
        return np.clip(np.rint(y), info.min, info.max).astype(x.dtype)
    return y.astype(x.dtype)


def _resize_infer(node: Node, a: dict[str, Any]) -> list[TensorMeta]:
    m = meta_in(node, 0)
    check_dtype(node, 0, FLOATS | {DType.INT8, DType.UINT8, DType.INT32, DType.INT64}, "X")
    if m.shape is None:
        return [out(m.dtype, None)]
    scales = const_in(node, 2)
    # sizes is shape-like: exporters build it as Concat(Shape(x)[:2], [H, W]), so it may
    # hold the input's symbols (the batch), which a resize with sizes passes through
    sizes_dims = shape_value(node, 3) if node.input(3) is not None else None
    has_sizes = node.input(3) is not None and (sizes_dims is None or len(sizes_dims))
    has_scales = node.input(2) is not None and (scales is None or np.size(scales))
    if not has_sizes and not has_scales:
        raise shape_error(node, "Resize needs a non-empty scales or sizes input")
    if (has_sizes and sizes_dims is None) or (not has_sizes and scales is None):
        return [out(m.dtype, tuple(sym(node, i) for i in range(len(m.shape))))]
    r = len(m.shape)
    axes = [x + r if x < 0 else x for x in (a.get("axes") or range(r))]
    sizes = None
    if has_sizes:
        if len(sizes_dims) != len(axes):
            raise shape_error(node, f"sizes {sizes_dims} has {len(sizes_dims)} entries for "
                                    f"{len(axes)} axes")
        if any(isinstance(d, str) for d in sizes_dims):
            if a["keep_aspect_ratio_policy"] != "stretch":
                return [out(m.dtype, tuple(sym(node, i) for i in range(r)))]
            dims = list(m.shape)
            for k, ax in enumerate(axes):
                dims[ax] = sizes_dims[k]
            return [out(m.dtype, tuple(dims))]
        sizes = np.array(sizes_dims, dtype=np.int64)
    if not all(isinstance(m.shape[ax], int) for ax in axes):
        return [out(m.dtype, _symbolic_resize(node, m.shape, axes, scales,
                                              sizes if has_sizes else None, a))]
    concrete = tuple(d if isinstance(d, int) else 1 for d in m.shape)
    try:
        out_sizes, _, _ = plan(concrete, scales, sizes if has_sizes else None, a)
    except (ValueError, IndexError) as exc:
        raise shape_error(node, str(exc)) from None
    return [out(m.dtype, tuple(out_sizes[i] if i in axes else d
                               for i, d in enumerate(m.shape)))]


def _symbolic_resize(node: Node, shape: tuple[Dim, ...], axes: list[int],
                     scales: np.ndarray | None, sizes: np.ndarray | None,
                     a: dict[str, Any]) -> tuple[Dim, ...]:
    """Resized dims when some resized input dims are symbols: a scale of 1 keeps the dim."""
    dims: list[Dim] = list(shape)
    stretch = a["keep_aspect_ratio_policy"] == "stretch"
    for k, ax in enumerate(axes):
        if sizes is not None:
            dims[ax] = int(np.asarray(sizes).reshape(-1)[k]) if stretch else sym(node, ax)
            continue
        scale = float(np.asarray(scales).reshape(-1)[k])
        d = shape[ax]
        if scale == 1.0:
            continue
        dims[ax] = int(np.floor(scale * d)) if isinstance(d, int) else sym(node, ax)
    return tuple(dims)


def _resize(ins: list[Any], a: dict[str, Any]) -> list[np.ndarray]:
    x = ins[0]

    def get(i: int) -> Any:
        return opt(ins, i)

    sizes = get(3)
    if sizes is not None and not np.size(sizes):
        sizes = None
    return [resize(x, get(1), get(2), sizes, a)]


# The coordinate modes torch and tf exporters emit; the device kernel computes exactly these.
_DEVICE_COORDS = ("asymmetric", "half_pixel", "pytorch_half_pixel", "align_corners")


def _resize_device(node: Node, a: dict[str, Any]) -> DeviceKernel | str:
    """Nearest or linear on the spatial axes of a 4-D or 5-D tensor (NCHW / NCDHW or the
    layout region's format: N and C are kept, Layout.UNIFORM), scales resolved here."""
    why = reject(node, data_inputs=(0,))
    if why:
        return why
    shape = node.inputs[0].meta.shape
    if len(shape) not in (4, 5):
        return f"device Resize is 4-D or 5-D only, input has rank {len(shape)}"
    mode, coord = a["mode"], a["coordinate_transformation_mode"]
    if mode not in ("nearest", "linear"):
        return f"device Resize has no {mode} mode"
    if coord not in _DEVICE_COORDS:
        return f"device Resize has no coordinate_transformation_mode {coord}"
    if mode == "linear" and (a["antialias"] or a["exclude_outside"]):
        return "device Resize has no antialias or exclude_outside"
    scales, sizes = const_in(node, 2), const_in(node, 3)
    if (node.input(2) is not None and scales is None) or (node.input(3) is not None
                                                           and sizes is None):
        return "Resize scales/sizes are not constant"
    if sizes is not None and not np.size(sizes):
        sizes = None
    out_sizes, factors, axes = plan(shape, scales, sizes, a)
    if list(out_sizes[:2]) != list(shape[:2]) or factors[0] != 1 or factors[1] != 1:
        return "device Resize resizes the spatial axes only"
    # An axis the reference leaves alone (same size, scale ~1) maps each index to itself.
    hw = [1.0 if out_sizes[ax] == shape[ax] and math.isclose(factors[ax], 1.0) else factors[ax]
          for ax in range(2, len(shape))]
    return kernel("Resize", {"mode": mode, "coordinate_transformation_mode": coord,
                             "nearest_mode": a["nearest_mode"], "scales": hw}, (0,))


register(OpSchema("Resize", 1, 4, _resize_infer, _resize, attrs=ATTRS, device=_resize_device,
                  layout=Layout.UNIFORM))
