"""MatMulQWeight (internal): X @ ((float(W) - Z) * S) [+ B] with constant 8-bit weights W, S
float32 and Z (W's dtype, optional) of one value or one per column, B (optional, the fused
bias) float32 [N]: a weight-only quantized
MatMul (`prepare/weight_only.py` makes it of Cast + Mul of 8-bit weights) that the device
runs with the weights kept 8-bit (`kernels_wq.cc`)."""

from __future__ import annotations

from typing import Any

import numpy as np

from ..dtypes import DType
from ..ir import Node
from .device_helpers import kernel, optional_index, reject
from .registry import DeviceKernel, OpSchema, register, shape_error
from .shape_helpers import out


def dequantized_weights(w: np.ndarray, s: np.ndarray, z: np.ndarray | None) -> np.ndarray:
    """(float32(w) - float32(z)) * s in float32, s and z per column (or one): the value the
    folded Cast / Sub / Mul of the original graph has."""
    wf = np.asarray(w).astype(np.float32)
    if z is not None:
        wf = wf - np.asarray(z).astype(np.float32).reshape(-1)
    return (wf * np.asarray(s, np.float32).reshape(-1)).astype(np.float32)


def _infer(node: Node, a: dict[str, Any]):
    x, w = node.input(0), node.input(1)
    if x.meta is None or w.meta is None:
        return [None]
    if len(w.meta.shape) != 2 or not x.meta.shape or x.meta.shape[-1] != w.meta.shape[0]:
        raise shape_error(node, f"X {x.meta.shape} and W {w.meta.shape} do not multiply")
    return [out(DType.FLOAT32, tuple(x.meta.shape[:-1]) + (w.meta.shape[1],))]


def _run(ins: list[Any], a: dict[str, Any]) -> list[np.ndarray]:
    x, w, s = ins[0], ins[1], ins[2]
    z = ins[3] if len(ins) > 3 else None
    y = np.matmul(np.asarray(x, np.float32), dequantized_weights(w, s, z)).astype(np.float32)
    if len(ins) > 4 and ins[4] is not None:
        y = (y + np.asarray(ins[4], np.float32)).astype(np.float32)
    return [y]


def _device(node: Node, a: dict[str, Any]) -> DeviceKernel | str:
    ins = (0, 1, 2) + tuple(optional_index(node, i) for i in range(3, len(node.inputs)))
    return reject(node) or kernel("MatMulQWeight", {}, ins)


register(OpSchema("MatMulQWeight", 3, 5, _infer, _run, device=_device,
                  doc="X @ ((float(W) - Z) * S) + B with constant 8-bit weights W [K, N] kept "
                      "8-bit on the device; S, Z: one value or one per column; B: [N].",
                  input_names=("X", "W", "S", "Z", "B")))
