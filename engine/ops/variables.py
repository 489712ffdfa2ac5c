"""Session variables in the IR: Variable, Assign, AssignAdd, AssignSlice, and the Snapshot
copy the compiler inserts.

A `Variable` node stands for a named tensor of the session that runs the graph (its dtype
and shape are attributes; `value`, when given, is what the session creates it with if it
has no variable of that name yet). Its output is a reference: the variable's bytes, read in
place. A write — `Assign(variable, value)`, `AssignAdd(variable, delta)`,
`AssignSlice(variable, update, start, axis=)` — takes a reference as input 0 and outputs
the reference after the write, which later writes and later readers take.

Semantics (engine/prepare/variables.py enforces them): a reader of a reference sees the
value the variable had at that point of the chain — the value from before the run for a
`Variable` output, the written value for a write's output — whatever the order the nodes
were listed in. Writes to one variable must form a chain (each takes the previous one's
output); two writes of the same reference are refused. Inputs of a write past its own
(Assign and AssignAdd: 2, AssignSlice: 3) only order it: it runs after they are computed,
as TensorFlow's control inputs.

These ops run only on the device (the variable lives in its memory): never folded, merged
or removed as dead (a write's effect is the point), never on the host engine.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ..bounds import MAX_ELEMENTS, MAX_RANK
from ..dtypes import DType
from ..errors import InvalidGraph
from ..ir import Node, TensorMeta, Value
from . import attrs as A
from .registry import DeviceKernel, Layout, OpSchema, register, shape_error

VARIABLE = "Variable"
SNAPSHOT = "graphengine.Snapshot"
# write op -> how many of its inputs are data (the rest only order it)
WRITES = {"Assign": 2, "AssignAdd": 2, "AssignSlice": 3}
# what a variable may hold: the device runtime's element types
VARIABLE_DTYPES = ("float32", "float64", "float16", "int64", "int32", "int16", "int8", "uint8",
                   "bool")
_ARITH = (DType.FLOAT32, DType.FLOAT64, DType.INT64, DType.INT32)


def is_reference(v: Value | None) -> bool:
    """Whether `v` is a variable reference: a Variable's output or a write's."""
    return v is not None and v.producer is not None and \
        (v.producer.op_type == VARIABLE or v.producer.op_type in WRITES)


def variable_of(v: Value) -> str:
    """The name of the variable a reference stands for (follows writes back)."""
    node = v.producer
    while node is not None and node.op_type in WRITES:
        node = node.inputs[0].producer
    if node is None or node.op_type != VARIABLE:
        raise InvalidGraph(f"'{v.name}' is not a variable reference", tensor=v.name)
    return str(node.attrs["variable"])


def declared_meta(node: Node) -> TensorMeta:
    """A Variable node's dtype and shape, checked (names the node when they are wrong)."""
    name = node.attrs.get("variable")
    if not isinstance(name, str) or not name or len(name) > 4096 or \
            any(ord(c) < 32 for c in name):
        raise shape_error(node, f"attribute 'variable' must be a name of 1 to 4096 printable "
                                f"characters, got {name!r:.60}")
    dtype = node.attrs.get("dtype")
    if dtype not in VARIABLE_DTYPES:
        raise shape_error(node, f"variable '{name}': dtype {dtype!r:.40} is not one a variable "
                                f"holds ({', '.join(VARIABLE_DTYPES)})")
    shape = node.attrs.get("shape")
    if shape is None or isinstance(shape, (str, bytes)):
        raise shape_error(node, f"variable '{name}': attribute 'shape' (ints) is required")
    dims = [int(d) for d in shape]
    if len(dims) > MAX_RANK or any(d < 0 for d in dims) or \
            math.prod(max(d, 1) for d in dims) > MAX_ELEMENTS:
        raise shape_error(node, f"variable '{name}': shape {dims[:MAX_RANK + 1]} is outside "
                                f"the bounds (rank <= {MAX_RANK}, dims >= 0, at most "
                                f"{MAX_ELEMENTS} elements)")
    meta = TensorMeta(DType(dtype), tuple(dims))
    value = node.attrs.get("value")
    if value is not None:
        arr = np.asarray(value)
        if arr.dtype != meta.dtype.numpy or tuple(arr.shape) != meta.shape:
            raise shape_error(node, f"variable '{name}': initial value is "
                                    f"{arr.dtype.name}{list(arr.shape)}, the variable "
                                    f"{meta}")
    return meta


def _variable_infer(node: Node, attrs: dict[str, Any]) -> list[TensorMeta]:
    return [declared_meta(node)]


def _reference(node: Node) -> TensorMeta:
    ref = node.inputs[0]
    if not is_reference(ref):
        what = "a graph input" if ref is not None and ref.producer is None and \
            not ref.is_constant else "a constant" if ref is not None and ref.is_constant \
            else f"the output of {ref.producer.op_type} '{ref.producer.name}'" \
            if ref is not None else "nothing"
        raise shape_error(node, f"input 0 must be a variable (a Variable's output or a "
                                f"write's), got {what}")
    if ref.meta is None:
        raise shape_error(node, "the variable's type is unknown")
    return ref.meta


def _fits(shape: tuple | None, want: tuple) -> bool:
    """`shape` is the variable's, or may be once its symbols are bound (a graph with
    symbolic inputs is checked again when it compiles for concrete shapes)."""
    return shape is not None and len(shape) == len(want) and \
        all(d == w or isinstance(d, str) for d, w in zip(shape, want))


def _same(node: Node, i: int, want: TensorMeta, what: str) -> None:
    v = node.inputs[i]
    if v is None or v.meta is None or v.meta.dtype != want.dtype or \
            not _fits(v.meta.shape, want.shape):
        raise shape_error(node, f"{what} must have the variable's type {want}, got "
                                f"{v.meta if v is not None else None}")


def _assign_infer(node: Node, attrs: dict[str, Any]) -> list[TensorMeta]:
    ref = _reference(node)
    _same(node, 1, ref, "the value")
    return [ref]


def _assign_add_infer(node: Node, attrs: dict[str, Any]) -> list[TensorMeta]:
    ref = _reference(node)
    if ref.dtype not in _ARITH:
        raise shape_error(node, f"AssignAdd adds to float32, float64, int64 or int32 "
                                f"variables, not {ref.dtype.value}")
    delta = node.inputs[1].meta
    one = delta is not None and delta.is_static and delta.numel == 1
    if delta is None or delta.dtype != ref.dtype or (not _fits(delta.shape, ref.shape)
                                                     and not one):
        raise shape_error(node, f"the delta must be {ref.dtype.value} of the variable's shape "
                                f"{ref} or one element, got {delta}")
    return [ref]


def _assign_slice_infer(node: Node, attrs: dict[str, Any]) -> list[TensorMeta]:
    ref = _reference(node)
    rank = len(ref.shape)
    if rank < 1:
        raise shape_error(node, "AssignSlice writes into a variable of rank >= 1")
    axis = int(attrs.get("axis", 0))
    if not -rank <= axis < rank:
        raise shape_error(node, f"axis {axis} is outside [{-rank}, {rank - 1}]")
    axis %= rank
    upd = node.inputs[1].meta
    if upd is None or upd.dtype != ref.dtype or upd.shape is None or len(upd.shape) != rank:
        raise shape_error(node, f"the update must have the variable's dtype and rank ({ref}), "
                                f"got {upd}")
    for d, (u, r) in enumerate(zip(upd.shape, ref.shape)):
        # a symbolic length along the axis is checked when the graph compiles for a shape
        fits = (u <= r if isinstance(u, int) else True) if d == axis else u == r
        if not fits:
            raise shape_error(node, f"the update {upd} does not fit the variable {ref} along "
                                    f"axis {axis} (its other dims must be equal)")
    start = node.inputs[2].meta
    if start is None or start.dtype not in (DType.INT64, DType.INT32) or \
            not start.is_static or start.numel != 1:
        raise shape_error(node, f"start must be one int64 or int32 element, got {start}")
    return [ref]


def _device_only(inputs, attrs) -> list[np.ndarray]:
    raise InvalidGraph("a variable op runs on the device of a session, which holds the "
                       "variable; it has no host kernel")


def _snapshot(inputs, attrs) -> list[np.ndarray]:
    return [np.array(inputs[0], copy=True)]


def _write(op: str, infer, inputs: int, attrs=None, names=()) -> None:
    def device(node: Node, a: dict[str, Any]) -> DeviceKernel:
        kernel_attrs = {"axis": int(a.get("axis", 0))} if op == "AssignSlice" else {}
        return DeviceKernel(op, kernel_attrs, tuple(range(inputs)))

    register(OpSchema(op, inputs, -1, infer, _device_only, attrs=attrs or {}, device=device,
                      foldable=False, stateful=True, layout=Layout.PLAIN,
                      doc=f"Writes to a session variable in place (input 0, a variable "
                          f"reference); the output is the variable after the write. Inputs "
                          f"past the first {inputs} only order the write after them.",
                      input_names=names))


register(OpSchema(VARIABLE, 0, 0, _variable_infer, _device_only,
                  attrs={"variable": A.s(A.REQUIRED), "dtype": A.s(A.REQUIRED, VARIABLE_DTYPES),
                         "shape": A.ints(A.REQUIRED), "value": A.tensor()},
                  device=lambda node, a: DeviceKernel(VARIABLE, {}, ()),
                  foldable=False, stateful=True, layout=Layout.PLAIN,
                  doc="A session variable's value, read in place (a reference writes take)."))
_write("Assign", _assign_infer, 2, names=("variable", "value"))
_write("AssignAdd", _assign_add_infer, 2, names=("variable", "delta"))
_write("AssignSlice", _assign_slice_infer, 3, attrs={"axis": A.i(0)},
       names=("variable", "update", "start"))
# A copy of a value into memory of its own (a copy task): the compiler's snapshot of a
# variable's value that must outlive a later write in the same run (a graph output, or a
# reader that also depends on the write).
register(OpSchema(SNAPSHOT, 1, 1, lambda node, a: [node.inputs[0].meta], _snapshot,
                  device=lambda node, a: DeviceKernel("Copy", {}, (0,)), foldable=False,
                  doc="A copy of its input (the value at that point of the run)."))
