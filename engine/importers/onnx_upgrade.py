"""Rewrite old-opset ONNX node forms into the canonical (newest-opset) form.

Schemas implement one form only: attributes that later opsets moved to inputs become
constant inputs, removed attributes are dropped, deprecated ops are replaced, and the
flatten-to-2-D softmax of opset < 13 is spelled out with Flatten/Reshape.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import numpy as np
from onnx import TensorProto

from ..errors import InvalidGraph
from ..ir import Graph, Value


@dataclasses.dataclass
class NodeSpec:
    """A node about to be added: the importer's unit of rewriting.

    An input given as a str names a value made by an earlier spec of the same rewrite.
    """

    op_type: str
    inputs: list[Value | str | None]
    outputs: list[str]
    attrs: dict[str, Any]
    name: str | None = None


Rewrite = Callable[[Graph, NodeSpec, int], list[NodeSpec]]
_REWRITES: dict[str, list[tuple[int, Rewrite]]] = {}


def _rewrite(op_type: str, below: int) -> Callable[[Rewrite], Rewrite]:
    """Register a rewrite that applies when the model's opset is below `below`."""
    def deco(fn: Rewrite) -> Rewrite:
        _REWRITES.setdefault(op_type, []).append((below, fn))
        return fn
    return deco


def upgrade(g: Graph, spec: NodeSpec, opset: int) -> list[NodeSpec]:
    """The canonical node(s), in order, for `spec` as written under `opset`."""
    spec.attrs.pop("consumed_inputs", None)  # opset < 6 memory hint, meaningless now
    specs = [spec]
    for below, fn in _REWRITES.get(spec.op_type, ()):
        if opset < below:
            head = specs.pop()
            specs += fn(g, head, opset)
    return specs


def _const(g: Graph, array: Any, dtype: Any = np.int64) -> Value:
    return g.add_constant(None, np.asarray(array, dtype=dtype))


def _attr_to_input(g: Graph, spec: NodeSpec, attr: str, index: int,
                   dtype: Any = np.int64) -> None:
    """Move attribute `attr` to input `index` as a constant (None when absent)."""
    value = spec.attrs.pop(attr, None)
    while len(spec.inputs) < index:
        spec.inputs.append(None)
    const = None if value is None else _const(g, value, dtype)
    if len(spec.inputs) == index:
        spec.inputs.append(const)
    elif spec.inputs[index] is None:
        spec.inputs[index] = const


def _like(g: Graph, spec: NodeSpec, value: float, pre: list[NodeSpec]) -> str:
    """A scalar constant cast to the dtype of the spec's input 0 (unknown at import time)."""
    name = g.unique_name(f"{spec.name or spec.op_type.lower()}_bound")
    pre.append(NodeSpec("CastLike", [_const(g, value, np.float32), spec.inputs[0]], [name], {}))
    return name


# ---- attributes that became inputs --------------------------------------------------------
def _axes_to_input(g: Graph, spec: NodeSpec, opset: int) -> list[NodeSpec]:
    _attr_to_input(g, spec, "axes", 1)
    return [spec]


for _op in ("Squeeze", "Unsqueeze", "ReduceSum"):
    _rewrite(_op, 13)(_axes_to_input)
for _op in ("ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2",
            "ReduceLogSum", "ReduceLogSumExp", "ReduceSumSquare"):
    _rewrite(_op, 18)(_axes_to_input)


@_rewrite("Split", 18)
def _split(g: Graph, spec: NodeSpec, opset: int) -> list[NodeSpec]:
    if opset < 13:
        _attr_to_input(g, spec, "split", 1)
    if (len(spec.inputs) < 2 or spec.inputs[1] is None) and "num_outputs" not in spec.attrs:
        spec.attrs["num_outputs"] = len(spec.outputs)
    return [spec]


@_rewrite("Clip", 11)
def _clip(g: Graph, spec: NodeSpec, opset: int) -> list[NodeSpec]:
    pre: list[NodeSpec] = []
    bounds: list[Value | str | None] = []
    for key in ("min", "max"):
        value = spec.attrs.pop(key, None)
        bounds.append(None if value is None else _like(g, spec, float(value), pre))
    spec.inputs = [spec.inputs[0], *bounds]
    return [*pre, spec]


@_rewrite("Pad", 11)
def _pad(g: Graph, spec: NodeSpec, opset: int) -> list[NodeSpec]:
    pads = spec.attrs.pop("pads", spec.attrs.pop("paddings", None))
    if pads is None:
        raise KeyError("pads")
    value = float(spec.attrs.pop("value", 0.0))
    pre: list[NodeSpec] = []
    spec.inputs = [spec.inputs[0], _const(g, pads), _like(g, spec, value, pre)]
    return [*pre, spec]


@_rewrite("Slice", 10)
def _slice(g: Graph, spec: NodeSpec, opset: int) -> list[NodeSpec]:
    for i, key in enumerate(("starts", "ends", "axes"), start=1):
        _attr_to_input(g, spec, key, i)
    return [spec]


@_rewrite("TopK", 10)
def _topk(g: Graph, spec: NodeSpec, opset: int) -> list[NodeSpec]:
    spec.inputs = [spec.inputs[0], _const(g, [spec.attrs.pop("k")])]
    return [spec]


@_rewrite("Reshape", 5)
def _reshape(g: Graph, spec: NodeSpec, opset: int) -> list[NodeSpec]:
    _attr_to_input(g, spec, "shape", 1)
    return [spec]


@_rewrite("Dropout", 12)
def _dropout(g: Graph, spec: NodeSpec, opset: int) -> list[NodeSpec]:
    for key in ("is_test", "ratio"):
        spec.attrs.pop(key, None)
    return [spec]


@_rewrite("BatchNormalization", 15)
def _batchnorm(g: Graph, spec: NodeSpec, opset: int) -> list[NodeSpec]:
    for key in ("spatial", "is_test"):
        spec.attrs.pop(key, None)
    if opset < 14:
        spec.outputs = spec.outputs[:1] if len(spec.outputs) > 3 else spec.outputs
    return [spec]


@_rewrite("Cast", 6)
def _cast(g: Graph, spec: NodeSpec, opset: int) -> list[NodeSpec]:
    to = spec.attrs.get("to")
    if isinstance(to, str):
        spec.attrs["to"] = TensorProto.DataType.Value(to.upper())
    return [spec]


@_rewrite("Concat", 4)
def _concat(g: Graph, spec: NodeSpec, opset: int) -> list[NodeSpec]:
    spec.attrs.setdefault("axis", 1)
    return [spec]


def _drop_broadcast(g: Graph, spec: NodeSpec, opset: int) -> list[NodeSpec]:
    spec.attrs.pop("broadcast", None)
    return [spec]


for _op in ("Add", "Sub", "Mul", "Div", "Pow", "And", "Or", "Xor", "Equal", "Less", "Greater",
            "Gemm", "PRelu"):
    _rewrite(_op, 7)(_drop_broadcast)


@_rewrite("Scatter", 99)
def _scatter(g: Graph, spec: NodeSpec, opset: int) -> list[NodeSpec]:
    spec.op_type = "ScatterElements"
    return [spec]


@_rewrite("Upsample", 99)
def _upsample(g: Graph, spec: NodeSpec, opset: int) -> list[NodeSpec]:
    scales = spec.attrs.pop("scales", None)
    x = spec.inputs[0]
    scale_in = _const(g, scales, np.float32) if scales is not None else spec.inputs[1]
    return [_as_resize(spec, x, scale_in)]


@_rewrite("Resize", 11)
def _resize10(g: Graph, spec: NodeSpec, opset: int) -> list[NodeSpec]:
    return [_as_resize(spec, spec.inputs[0], spec.inputs[1])]


def _as_resize(spec: NodeSpec, x: Value | str | None, scales: Value | str | None) -> NodeSpec:
    mode = str(spec.attrs.pop("mode", "nearest")).lower()
    mode = "linear" if mode in ("bilinear", "trilinear") else mode
    attrs = {"mode": mode, "coordinate_transformation_mode": "asymmetric",
             "nearest_mode": "floor"}
    return NodeSpec("Resize", [x, None, scales], spec.outputs, attrs, spec.name)


def _legacy_softmax(g: Graph, spec: NodeSpec, opset: int) -> list[NodeSpec]:
    """Opset < 13 softmax works on the input flattened to 2-D at `axis` (default 1)."""
    axis = int(spec.attrs.pop("axis", 1))
    if axis == -1:
        spec.attrs["axis"] = -1
        return [spec]
    base = spec.name or spec.op_type.lower()
    x = spec.inputs[0]
    shape_name, flat_name, soft_name = (g.unique_name(f"{base}_{s}")
                                        for s in ("shape", "flat", "2d"))
    return [
        NodeSpec("Shape", [x], [shape_name], {}),
        NodeSpec("Flatten", [x], [flat_name], {"axis": axis}),
        NodeSpec(spec.op_type, [flat_name], [soft_name], {"axis": 1}, spec.name),
        NodeSpec("Reshape", [soft_name, shape_name], spec.outputs, {}),
    ]


for _op in ("Softmax", "LogSoftmax", "Hardmax"):
    _rewrite(_op, 13)(_legacy_softmax)


@_rewrite("DFT", 20)
def _dft(g: Graph, spec: NodeSpec, opset: int) -> list[NodeSpec]:
    axis = int(spec.attrs.pop("axis", 1))
    while len(spec.inputs) < 2:
        spec.inputs.append(None)
    spec.inputs = spec.inputs[:2] + [_const(g, axis)]
    return [spec]


@_rewrite("GridSample", 20)
def _grid_sample(g: Graph, spec: NodeSpec, opset: int) -> list[NodeSpec]:
    mode = spec.attrs.get("mode", "bilinear")
    spec.attrs["mode"] = {"bilinear": "linear", "bicubic": "cubic"}.get(mode, mode)
    return [spec]


def _drop_output_sequence(g: Graph, spec: NodeSpec, opset: int) -> list[NodeSpec]:
    spec.attrs.pop("output_sequence", None)  # opset 1: Y is returned when it has a name
    return [spec]


for _op in ("RNN", "GRU", "LSTM"):
    _rewrite(_op, 7)(_drop_output_sequence)


@_rewrite("Scan", 9)
def _scan_batched(g: Graph, spec: NodeSpec, opset: int) -> list[NodeSpec]:
    """Scan-8: a leading batch axis on every state and scan input, and `sequence_lens`
    first. The canonical Scan has neither; the per-item loop is kept as the internal
    attribute `_batched`, which the Scan kernel and its inference understand."""
    if spec.inputs and spec.inputs[0] is not None:
        raise InvalidGraph(f"node '{spec.name or 'Scan'}': Scan-8 with sequence_lens (ragged "
                           f"batches) is not supported", node=spec.name)
    spec.inputs = spec.inputs[1:]
    if "directions" in spec.attrs:
        spec.attrs["scan_input_directions"] = spec.attrs.pop("directions")
    spec.attrs["_batched"] = 1
    return [spec]
