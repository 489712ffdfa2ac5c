"""Detection ops: RoiAlign and NonMaxSuppression."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from graphengine import _runtime

from ..dtypes import DType
from ..ir import Node, TensorMeta
from . import attrs as A
from .device_helpers import kernel, optional_index, reject
from .kernel_utils import opt
from .registry import DeviceKernel, OpSchema, register
from .shape_helpers import FLOATS, check_dtype, out, shape_in, sym


def _bilinear_terms(img_h: int, img_w: int, y: float, x: float
                    ) -> list[tuple[int, int, float]] | None:
    """Corner (row, col, weight) terms of a bilinear sample; None when out of bounds."""
    if y < -1.0 or y > img_h or x < -1.0 or x > img_w:
        return None
    y, x = max(y, 0.0), max(x, 0.0)
    y0, x0 = int(y), int(x)
    if y0 >= img_h - 1:
        y0 = y1 = img_h - 1
        y = float(y0)
    else:
        y1 = y0 + 1
    if x0 >= img_w - 1:
        x0 = x1 = img_w - 1
        x = float(x0)
    else:
        x1 = x0 + 1
    ly, lx = y - y0, x - x0
    hy, hx = 1 - ly, 1 - lx
    return [(y0, x0, hy * hx), (y0, x1, hy * lx), (y1, x0, ly * hx), (y1, x1, ly * lx)]


def roi_align(x: np.ndarray, rois: np.ndarray, batch: np.ndarray, a: dict[str, Any]
              ) -> np.ndarray:
    oh, ow = a["output_height"], a["output_width"]
    scale, ratio = a["spatial_scale"], a["sampling_ratio"]
    half = a["coordinate_transformation_mode"] == "half_pixel"
    n_rois, c = rois.shape[0], x.shape[1]
    h, w = x.shape[2:]
    y = np.zeros((n_rois, c, oh, ow), dtype=np.float64)
    data = x.astype(np.float64)
    for r in range(n_rois):
        off = 0.5 if half else 0.0
        x1, y1, x2, y2 = (float(v) * scale - off for v in rois[r])
        rw, rh = x2 - x1, y2 - y1
        if not half:
            rw, rh = max(rw, 1.0), max(rh, 1.0)
        bh, bw = rh / oh, rw / ow
        gh = ratio if ratio > 0 else int(math.ceil(rh / oh))
        gw = ratio if ratio > 0 else int(math.ceil(rw / ow))
        count = max(gh * gw, 1)
        img = data[int(batch[r])]
        for ph in range(oh):
            for pw in range(ow):
                acc = np.zeros(c)
                best = None
                for iy in range(gh):
                    yy = y1 + ph * bh + (iy + 0.5) * bh / gh
                    for ix in range(gw):
                        xx = x1 + pw * bw + (ix + 0.5) * bw / gw
                        terms = _bilinear_terms(h, w, yy, xx)
                        if a["mode"] == "avg":
                            if terms:
                                acc += sum(wt * img[:, i, j] for i, j, wt in terms)
                            continue
                        vals = (np.max([wt * img[:, i, j] for i, j, wt in terms], axis=0)
                                if terms else np.zeros(c))
                        best = vals if best is None else np.maximum(best, vals)
                y[r, :, ph, pw] = acc / count if a["mode"] == "avg" else \
                    (best if best is not None else 0)
    return y.astype(x.dtype)


def _roi_infer(node: Node, a: dict[str, Any]) -> list[TensorMeta]:
    dt = check_dtype(node, 0, FLOATS, "X")
    xs, rs = shape_in(node, 0), shape_in(node, 1)
    n = rs[0] if rs is not None else sym(node, 0)
    c = xs[1] if xs is not None else sym(node, 1)
    return [out(dt, (n, c, a["output_height"], a["output_width"]))]


register(OpSchema("RoiAlign", 3, 3, _roi_infer, lambda ins, a: [roi_align(*ins, a)], attrs={
    "coordinate_transformation_mode": A.s("half_pixel"), "mode": A.s("avg"),
    "output_height": A.i(1), "output_width": A.i(1), "sampling_ratio": A.i(0),
    "spatial_scale": A.f(1.0)}))


# ---- NonMaxSuppression ----------------------------------------------------------------------
def _corners(boxes: np.ndarray, center: bool) -> np.ndarray:
    if center:
        xc, yc, w, h = boxes.T
        return np.stack([yc - h / 2, xc - w / 2, yc + h / 2, xc + w / 2], axis=1)
    y1, x1, y2, x2 = boxes.T
    return np.stack([np.minimum(y1, y2), np.minimum(x1, x2), np.maximum(y1, y2),
                     np.maximum(x1, x2)], axis=1)


def _ious(b: np.ndarray, i: int, rest: np.ndarray) -> np.ndarray:
    """IoU of box i with each box of `rest` (indices), 0 where the boxes do not overlap or
    one is empty (ONNX NonMaxSuppression), in float64, term by term as the scalar form."""
    r = b[rest]
    ih = np.minimum(b[i, 2], r[:, 2]) - np.maximum(b[i, 0], r[:, 0])
    iw = np.minimum(b[i, 3], r[:, 3]) - np.maximum(b[i, 1], r[:, 1])
    inter = ih * iw
    a1 = (b[i, 2] - b[i, 0]) * (b[i, 3] - b[i, 1])
    a2 = (r[:, 2] - r[:, 0]) * (r[:, 3] - r[:, 1])
    union = a1 + a2 - inter
    # not "> 0": a NaN coordinate gives a NaN IoU (which suppresses), as in the scalar form
    zero = (ih <= 0) | (iw <= 0) | (a1 <= 0) | (a2 <= 0) | (union <= 0)
    with np.errstate(all="ignore"):
        return np.where(zero, 0.0, inter / np.where(zero, 1.0, union))


def _nms_args(ins: list[Any]) -> tuple[int, float, float | None] | None:
    """(limit, IoU threshold, score threshold or None) from the optional inputs; None when
    max_output_boxes_per_class is absent (nothing is selected)."""
    def first(i: int) -> Any:
        value = opt(ins, i, nonempty=True)
        return None if value is None else np.asarray(value).reshape(-1)[0]

    limit = first(2)
    if limit is None:
        return None
    iou_t, score_t = first(3), first(4)
    return int(limit), 0.0 if iou_t is None else float(iou_t), \
        None if score_t is None else float(score_t)


def nms(ins: list[Any], a: dict[str, Any]) -> list[np.ndarray]:
    """The host engine's NonMaxSuppression: float32 boxes and scores in the runtime's
    native loop (`_runtime.non_max_suppression`, the same arithmetic as `nms_reference`
    in one pass: a dozen numpy calls per kept box were most of a small detector's run),
    other types by the reference."""
    boxes, scores = np.asarray(ins[0]), np.asarray(ins[1])
    args = _nms_args(ins)
    if args is None:
        return [np.zeros((0, 3), np.int64)]
    if boxes.dtype == np.float32 and scores.dtype == np.float32 and boxes.ndim == 3 \
            and scores.ndim == 3:
        limit, iou_t, score_t = args
        return [_runtime.non_max_suppression(
            np.ascontiguousarray(boxes), np.ascontiguousarray(scores), limit, iou_t, score_t,
            bool(a["center_point_box"]))]
    return nms_reference(ins, a)


def nms_reference(ins: list[Any], a: dict[str, Any]) -> list[np.ndarray]:
    """Greedy NMS per batch and class: candidates above the score threshold in order of
    score (then index), each kept unless a kept box overlaps it by more than the IoU
    threshold. Vectorized over the candidates (a detector's 8400 boxes x 80 classes took
    15 ms as a Python loop per box): a kept box suppresses every later candidate at once,
    which keeps exactly the boxes the one-by-one rule keeps."""
    boxes, scores = ins[0], ins[1]
    args = _nms_args(ins)
    if args is None:
        return [np.zeros((0, 3), np.int64)]
    limit, iou_t, score_t = args
    picked = []
    for b in range(boxes.shape[0]):
        corners = _corners(boxes[b].astype(np.float64), bool(a["center_point_box"]))
        for c in range(scores.shape[1]):
            s = scores[b, c]
            cand = (np.arange(len(s)) if score_t is None
                    else np.flatnonzero(s.astype(np.float64) > score_t))
            if limit <= 0 or not cand.size:
                continue
            order = cand[np.lexsort((cand, -s[cand]))]  # score descending, then index
            kept = 0
            while order.size and kept < limit:
                i = int(order[0])
                picked.append((b, c, i))
                kept += 1
                rest = order[1:]
                order = rest[_ious(corners, i, rest) <= iou_t]
    return [np.array(picked, dtype=np.int64).reshape(-1, 3)]


register(OpSchema("NonMaxSuppression", 2, 5,
                  lambda node, a: [out(DType.INT64, (sym(node, 0), 3))], nms,
                  attrs={"center_point_box": A.i(0)}))


# ---- PaddedNonMaxSuppression (graphengine domain) --------------------------------------------
PADDED_NMS = "graphengine.PaddedNonMaxSuppression"


def padded_rows(boxes: tuple, scores: tuple, limit: int) -> int:
    """How many rows a NonMaxSuppression of boxes [B, N, 4] and scores [B, C, N] may select:
    B x C x min(limit, N)."""
    return 0 if limit <= 0 else boxes[0] * scores[1] * min(limit, boxes[1])


def _padded_nms_infer(node: Node, a: dict[str, Any]) -> list[TensorMeta]:
    check_dtype(node, 0, FLOATS, "boxes")
    return [out(DType.INT64, (int(a["rows"]), 3)), out(DType.INT64, (1,))]


def padded_nms(ins: list[Any], a: dict[str, Any]) -> list[np.ndarray]:
    """NonMaxSuppression's selection in `rows` rows, zero rows after the selected ones, and
    how many were selected (the device kernel's contract, kernels_nms.cc)."""
    rows = int(a["rows"])
    picked = nms(ins, a)[0]
    if len(picked) > rows:
        raise ValueError(f"{len(picked)} boxes selected, more than the {rows} rows the "
                         f"selection was bounded to")
    y = np.zeros((rows, 3), np.int64)
    y[:len(picked)] = picked
    return [y, np.array([len(picked)], np.int64)]


def _padded_nms_device(node: Node, a: dict[str, Any]) -> DeviceKernel | str:
    why = reject(node)
    if why:
        return why
    if any(node.input(i) is not None and node.input(i).meta.numel != 1 for i in (2, 3, 4)):
        return "the limit and thresholds must be one element each"
    return kernel("PaddedNonMaxSuppression", {"center_point_box": int(a["center_point_box"])},
                  (0, 1, *(optional_index(node, i) for i in (2, 3, 4))))


register(OpSchema(PADDED_NMS, 2, 5, _padded_nms_infer, padded_nms, min_outputs=2,
                  max_outputs=2, foldable=False,  # its count trims the graph's outputs
                  attrs={"center_point_box": A.i(0), "rows": A.i(A.REQUIRED)},
                  device=_padded_nms_device,
                  doc="NonMaxSuppression's selected (batch, class, box) rows in a fixed number "
                      "of rows (`rows`), zero rows after them, and the selected count",
                  input_names=("boxes", "scores", "max_output_boxes_per_class",
                               "iou_threshold", "score_threshold")))
