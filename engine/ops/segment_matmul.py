"""SegmentMatMul (internal): x [R, K] in consecutive segments of sizes [E] (int64, read at
each run), row r of segment i times the constant w[i] [K, N] (plus bias[i] [N]) -> [R, N].
`prepare/ragged_experts.py` makes it of a mixture's experts run on the parts of a Split by
computed counts (JetMoE, Granite-MoE); the device runs each segment's rows through its own
matrix (`kernels_segment_matmul.cc`)."""

from __future__ import annotations

from typing import Any

import numpy as np

from ..dtypes import DType
from ..errors import InvalidInput
from ..ir import Node
from .device_helpers import kernel, optional_index, reject
from .registry import DeviceKernel, OpSchema, register, shape_error
from .shape_helpers import out


def _infer(node: Node, a: dict[str, Any]):
    x, sizes, w = node.input(0), node.input(1), node.input(2)
    if x.meta is None or w.meta is None or sizes.meta is None:
        return [None]
    if len(x.meta.shape or ()) != 2 or len(w.meta.shape or ()) != 3 \
            or x.meta.shape[1] != w.meta.shape[1]:
        raise shape_error(node, f"x {x.meta.shape} and w {w.meta.shape} do not multiply")
    if sizes.meta.dtype is not DType.INT64 or tuple(sizes.meta.shape or ()) != (w.meta.shape[0],):
        raise shape_error(node, f"sizes must be int64 [{w.meta.shape[0]}]")
    return [out(DType.FLOAT32, (x.meta.shape[0], w.meta.shape[2]))]


def _run(ins: list[Any], a: dict[str, Any]) -> list[np.ndarray]:
    x, sizes, w = np.asarray(ins[0], np.float32), np.asarray(ins[1]).reshape(-1), ins[2]
    bias = ins[3] if len(ins) > 3 and ins[3] is not None else None
    if (sizes < 0).any() or int(sizes.sum()) != x.shape[0]:
        raise InvalidInput(f"segment sizes {sizes.tolist()} do not add up to the "
                           f"{x.shape[0]} rows")
    y = np.empty((x.shape[0], w.shape[2]), np.float32)
    start = 0
    for i, m in enumerate(sizes.tolist()):
        y[start:start + m] = x[start:start + m] @ w[i]
        if bias is not None:
            y[start:start + m] += bias[i]
        start += m
    return [y]


def _device(node: Node, a: dict[str, Any]) -> DeviceKernel | str:
    ins = (0, 1, 2) + tuple(optional_index(node, i) for i in range(3, len(node.inputs)))
    return reject(node) or kernel("SegmentMatMul", {}, ins)


register(OpSchema("SegmentMatMul", 3, 4, _infer, _run, device=_device,
                  doc="Rows of x in consecutive segments of `sizes` (computed), segment i "
                      "times the constant w[i] [K, N] plus bias[i].",
                  input_names=("x", "sizes", "w", "bias")))
