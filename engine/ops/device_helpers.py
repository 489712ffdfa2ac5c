"""Checks shared by device lowerings: static tensors of dtypes the runtime can store."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

from ..dtypes import DType
from ..ir import Node
from .registry import DeviceKernel

# The element types the native runtime knows (runtime_ext/src/dtype.cc); views and copies
# move bytes, so they run for all of these. Any other dtype stays on the host.
RUNTIME_DTYPES = frozenset({
    DType.FLOAT32, DType.FLOAT64, DType.FLOAT16, DType.INT64, DType.INT32, DType.INT16,
    DType.INT8, DType.UINT8, DType.BOOL})


def reject(node: Node, data_inputs: Iterable[int] | None = None) -> str | None:
    """Why the device cannot hold `node`'s tensors (a dtype the runtime cannot store, no
    inferred type, a dynamic shape), or None when it can.

    Which element types each kernel computes on is the runtime's answer (kernel_info,
    asked by partition/placement.py after lowering), not repeated here. Only the data
    inputs (default: all present inputs) and all outputs are checked.
    """
    allowed = RUNTIME_DTYPES
    idx = range(len(node.inputs)) if data_inputs is None else data_inputs
    values = [(f"input {i}", node.input(i)) for i in idx] + [
        (f"output {i}", o) for i, o in enumerate(node.outputs)]
    for what, v in values:
        if v is None:
            continue
        if v.meta is None:
            return f"{what} of device {node.op_type} has no inferred type"
        if v.meta.dtype not in allowed:
            return f"dtype {v.meta.dtype.value} not supported by device {node.op_type}"
        if not v.meta.is_static:
            return f"{what} shape is not static"
    return None


def reject_rank(node: Node, rank: int, what: str) -> str | None:
    """`reject(node, (0,))`, then why input 0 is not of rank `rank` (`what` says what the
    device runs: "2-D only")."""
    why = reject(node, data_inputs=(0,))
    if why:
        return why
    have = len(node.inputs[0].meta.shape)
    return None if have == rank else f"device {node.op_type} is {what}, input has rank {have}"


def kernel(op: str, attrs: Mapping[str, Any], inputs: Iterable[int]) -> DeviceKernel:
    return DeviceKernel(op=op, attrs=dict(attrs), inputs=tuple(inputs))


def optional_index(node: Node, i: int) -> int:
    return i if node.input(i) is not None else -1


def const_scalar(node: Node, i: int) -> float | None:
    v = node.input(i)
    if v is None or v.const is None or np.asarray(v.const).size != 1:
        return None
    return float(np.asarray(v.const).reshape(-1)[0])


def view(node: Node, attrs: dict[str, Any]) -> DeviceKernel | str:
    """Lowering of pure view ops (Reshape, Flatten, Squeeze...): a Copy the planner aliases."""
    why = reject(node, data_inputs=(0,))
    if why:
        return why
    return kernel("Copy", {}, (0,))
