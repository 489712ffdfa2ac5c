"""The op registry: one schema per op type.

A schema says what an op takes (inputs, attributes with defaults), how to infer its
outputs' dtype and shape, how to compute it in numpy (the reference kernel: the host
engine and constant folding use it), and whether and how the device engine runs it.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from ..errors import InvalidGraph, ShapeError
from ..ir import Node, TensorMeta


class AttrKind(enum.Enum):
    INT = "int"
    FLOAT = "float"
    STRING = "string"
    INTS = "ints"
    FLOATS = "floats"
    STRINGS = "strings"
    TENSOR = "tensor"
    GRAPH = "graph"
    GRAPHS = "graphs"


class _Required:
    def __repr__(self) -> str:
        return "REQUIRED"


REQUIRED: Any = _Required()


@dataclasses.dataclass(frozen=True)
class AttrSpec:
    kind: AttrKind
    default: Any = None  # None: optional with no default; REQUIRED: must be given
    # the values a STRING attribute may take (an enum: validated when the graph is added,
    # not found wrong at its first run); None: any
    choices: tuple[str, ...] | None = None


class Layout(enum.Enum):
    """How a device kernel treats the formats of a node's 4-D activations: what the layout
    pass (optimize/layout.py) may store them in. The runtime checks the same rule per op
    (runtime_ext/src/host/op_table.cc, LayoutRule)."""

    PLAIN = "plain"  # every operand plain NCHW: the layout pass converts around the node
    CONV = "conv"  # data input (and a residual) and output in any format, padded too; an
    #                output that is not 4-D (ConvHead's [N, classes]) is plain
    UNIFORM = "uniform"  # data input 0 and the output share the region's format
    ELEMENTWISE = "elementwise"  # like UNIFORM when every input has the output's shape
    CHANNEL = "channel"  # ELEMENTWISE that also takes a per-channel operand [N|1, C, 1, 1]
    #                      read plain (a squeeze-excitation scale), in any format
    CHAIN = "chain"  # ELEMENTWISE that also takes constant scalars (EltwiseChain)
    CONCAT = "concat"  # every input and the output share one format
    SPATIAL = "spatial"  # UNIFORM when the device kernel's "pads" leave N and C alone (a Pad
    #                      of H and W), else PLAIN
    REDUCE = "reduce"  # UNIFORM in an NHWC region when the output keeps the input's rank
    #                    (keepdims: a reduction folds the stored axes), else PLAIN
    CONVERT = "convert"  # a format conversion (TransData, FormatView)


@dataclasses.dataclass(frozen=True)
class DeviceKernel:
    """How the device engine runs a node: a runtime kernel op, its attrs, its inputs.

    `inputs` are indices into the node's inputs (-1 for an omitted optional one), in the
    order the runtime kernel expects them.
    """

    op: str
    attrs: Mapping[str, Any]
    inputs: tuple[int, ...]


# infer(node, attrs) -> one TensorMeta per output. Reads node.inputs[i].meta and, for ops
# whose output shape depends on a tensor's value (Reshape, Expand...), node.inputs[i].const.
InferFn = Callable[[Node, dict[str, Any]], Sequence[TensorMeta]]
# compute(inputs, attrs) -> outputs; inputs are numpy arrays (None for omitted optionals).
ComputeFn = Callable[[Sequence[np.ndarray | None], dict[str, Any]], Sequence[np.ndarray]]
# device(node, attrs) -> DeviceKernel, or a string: the reason the device declines.
DeviceFn = Callable[[Node, dict[str, Any]], "DeviceKernel | str"]


@dataclasses.dataclass(frozen=True)
class OpSchema:
    name: str
    min_inputs: int
    max_inputs: int  # -1: variadic
    infer: InferFn
    compute: ComputeFn
    attrs: Mapping[str, AttrSpec] = dataclasses.field(default_factory=dict)
    min_outputs: int = 1
    max_outputs: int = 1
    device: DeviceFn | None = None
    foldable: bool = True  # False for ops with side effects or randomness
    # reads or writes a session variable (ops/variables.py): device only, never folded,
    # merged or (a write) removed as dead
    stateful: bool = False
    # Output i may share input j's memory (Reshape, Flatten, Squeeze...): {i: j}.
    alias: Mapping[int, int] = dataclasses.field(default_factory=dict)
    layout: Layout = Layout.PLAIN  # what the device kernel does with formats
    # Layout.CONV: the input the kernel adds to its output (a residual), read in the output's
    # format like input 0 (ConvBlock's R); a Conv's fused residual is its `_sum_input`.
    residual: int | None = None
    # What the builder's `graphengine.ops` function shows (engine/builder_ops.py) when ONNX
    # has no schema of the op: a custom op's description and input names.
    doc: str = ""
    input_names: tuple[str, ...] = ()

    def attrs_of(self, node: Node) -> dict[str, Any]:
        """The node's attributes with defaults filled in; raises on missing/unknown ones."""
        out: dict[str, Any] = {}
        for key, spec in self.attrs.items():
            if key in node.attrs:
                out[key] = node.attrs[key]
            elif spec.default is REQUIRED:
                raise InvalidGraph(f"node '{node.name}' ({node.op_type}): missing required "
                                   f"attribute '{key}'", node=node.name)
            elif spec.default is not None:
                out[key] = spec.default
        for key, value in node.attrs.items():
            if key not in self.attrs and not key.startswith("_"):
                raise InvalidGraph(f"node '{node.name}' ({node.op_type}): unknown attribute "
                                   f"'{key}'", node=node.name)
            out.setdefault(key, value)
        # Kernels see only attrs; some outputs counts are implied by the node (Split).
        out["_n_outputs"] = len(node.outputs)
        return out

    def check_arity(self, node: Node) -> None:
        n_in = len(node.inputs)
        while n_in and node.inputs[n_in - 1] is None:
            n_in -= 1
        if n_in < self.min_inputs or (self.max_inputs >= 0 and n_in > self.max_inputs):
            want = (f"{self.min_inputs}+" if self.max_inputs < 0 else
                    str(self.min_inputs) if self.min_inputs == self.max_inputs else
                    f"{self.min_inputs} to {self.max_inputs}")
            raise InvalidGraph(f"node '{node.name}' ({node.op_type}): expected {want} inputs, "
                               f"got {n_in}", node=node.name)
        for i in range(self.min_inputs):
            if node.inputs[i] is None:
                raise InvalidGraph(f"node '{node.name}' ({node.op_type}): required input {i} "
                                   f"is missing", node=node.name)
        n_out = len(node.outputs)
        if n_out < self.min_outputs or n_out > self.max_outputs:
            raise InvalidGraph(f"node '{node.name}' ({node.op_type}): expected "
                               f"{self.min_outputs}..{self.max_outputs} outputs, got {n_out}",
                               node=node.name)


_REGISTRY: dict[str, OpSchema] = {}


def register(schema: OpSchema, *, replace: bool = False) -> OpSchema:
    """Add `schema`; `replace` lets it take the place of one of its name (a custom op
    registered again: engine/ops/custom.py decides which may be replaced)."""
    if schema.name in _REGISTRY and not replace:
        raise ValueError(f"op {schema.name} registered twice")
    _REGISTRY[schema.name] = schema
    return schema


def get(op_type: str, node: Node | None = None) -> OpSchema:
    try:
        return _REGISTRY[op_type]
    except KeyError:
        where = f"node '{node.name}': " if node is not None else ""
        raise InvalidGraph(f"{where}unknown op type '{op_type}'",
                           node=node.name if node is not None else None) from None


def has(op_type: str) -> bool:
    return op_type in _REGISTRY


def all_ops() -> list[str]:
    return sorted(_REGISTRY)


def shape_error(node: Node, message: str) -> ShapeError:
    """A ShapeError naming the node and listing its input shapes."""
    ins = ", ".join(f"{v.name}: {v.meta}" if v is not None else "_" for v in node.inputs)
    return ShapeError(f"node '{node.name}' ({node.op_type}): {message} (inputs: {ins})",
                      node=node.name)
