"""Broadcasting binary and variadic ops: arithmetic, comparison, logic, bitwise, Where."""

from __future__ import annotations

from collections.abc import Callable
from functools import reduce
from typing import Any

import numpy as np

from ..dtypes import DType
from ..ir import Node, TensorMeta
from . import attrs as A
from .device_helpers import kernel, reject
from .kernel_utils import widen
from .registry import DeviceKernel, Layout, OpSchema, register
from .shape_helpers import (
    FLOATS,
    INTS,
    NUMERIC,
    SIGNED_INTS,
    broadcast,
    check_dtype,
    check_same_dtype,
    out,
    shape_in,
)

BOOL = frozenset({DType.BOOL})
Fn = Callable[[np.ndarray, np.ndarray, dict[str, Any]], np.ndarray]


def _device(op: str) -> Callable[..., DeviceKernel | str]:
    def device(node: Node, a: dict[str, Any]) -> DeviceKernel | str:
        if len(node.inputs) != 2:
            return f"device {op} takes exactly 2 inputs, got {len(node.inputs)}"
        why = reject(node)
        return why or kernel(op, {}, (0, 1))
    return device


def _mod_device(node: Node, a: dict[str, Any]) -> DeviceKernel | str:
    """Mod on the device: float32/64 and int32/64 in either sign rule (fmod 0: the
    divisor's sign, as numpy's mod; 1: the dividend's); an integer divisor of 0 gives 0, as
    here."""
    if len(node.inputs) != 2:
        return f"device Mod takes exactly 2 inputs, got {len(node.inputs)}"
    if a["fmod"] not in (0, 1):
        return f"fmod must be 0 or 1, got {a['fmod']}"
    why = reject(node)
    return why or kernel("Mod", {"fmod": int(a["fmod"])}, (0, 1))


def binary(name: str, fn: Fn, dtypes: frozenset[DType] = NUMERIC, *,
           out_dtype: DType | None = None, same_dtype: bool = True,
           attrs: dict[str, Any] | None = None, device: Any = None,
           layout: Layout = Layout.PLAIN) -> None:
    def infer(node: Node, a: dict[str, Any]) -> list[TensorMeta]:
        dt = check_dtype(node, 0, dtypes, "A")
        if same_dtype:
            check_same_dtype(node, [0, 1])
        return [out(out_dtype or dt, broadcast(node, [shape_in(node, 0), shape_in(node, 1)]))]

    def compute(ins: list[np.ndarray | None], a: dict[str, Any]) -> list[np.ndarray]:
        x, y = np.asarray(ins[0]), np.asarray(ins[1])
        z = fn(x, y, a)
        return [np.asarray(z).astype(out_dtype.numpy if out_dtype else x.dtype, copy=False)]

    register(OpSchema(name, 2, 2, infer, compute, attrs=attrs or {}, device=device,
                      layout=layout))


def _float_op(fn: Callable[[np.ndarray, np.ndarray], np.ndarray]) -> Fn:
    """Run float16/bfloat16 math in float32 (numpy has no bfloat16 ufunc loops)."""
    return lambda x, y, a: fn(widen(x), widen(y))


def _div(x: np.ndarray, y: np.ndarray, a: dict[str, Any]) -> np.ndarray:
    if x.dtype.kind in "iu":
        safe = np.where(y == 0, 1, y)
        q = x // safe
        if x.dtype.kind == "i":  # C semantics: truncate toward zero
            q = q + ((x % safe != 0) & ((x < 0) != (safe < 0)))
        return np.where(y == 0, 0, q)
    return widen(x) / widen(y)


def _pow(x: np.ndarray, y: np.ndarray, a: dict[str, Any]) -> np.ndarray:
    if x.dtype.kind == "f" or x.dtype.name == "bfloat16":
        return np.power(widen(x), widen(y).astype(widen(x).dtype))
    if y.dtype.kind in "iu" and np.all(y >= 0):
        return np.power(x.astype(np.int64), y.astype(np.int64))
    return np.power(x.astype(np.float64), y.astype(np.float64))


def _mod(x: np.ndarray, y: np.ndarray, a: dict[str, Any]) -> np.ndarray:
    if x.dtype.kind in "iu":
        safe = np.where(y == 0, 1, y)
        r = np.fmod(x, safe) if a["fmod"] else np.mod(x, safe)
        return np.where(y == 0, 0, r)
    return np.fmod(widen(x), widen(y)) if a["fmod"] else np.mod(widen(x), widen(y))


def _bitshift(x: np.ndarray, y: np.ndarray, a: dict[str, Any]) -> np.ndarray:
    bits = x.dtype.itemsize * 8
    yy = y.astype(np.int64)
    valid = (yy >= 0) & (yy < bits)
    amount = np.where(valid, yy, 0).astype(x.dtype)
    if a["direction"] == "LEFT":
        return np.where(valid, np.left_shift(x, amount), 0)
    fill = np.where(x < 0, -1, 0) if x.dtype.kind == "i" else 0
    return np.where(valid, np.right_shift(x, amount), fill)


def _cmp(fn: Callable[[np.ndarray, np.ndarray], np.ndarray]) -> Fn:
    return lambda x, y, a: fn(widen(x), widen(y))


# Same-shape operands meet element by element in any one format (Layout.ELEMENTWISE); the
# four arithmetic ops also take a per-channel operand (Layout.CHANNEL).
_EW, _CH = Layout.ELEMENTWISE, Layout.CHANNEL
binary("Add", _float_op(np.add), device=_device("Add"), layout=_CH)
binary("Sub", _float_op(np.subtract), device=_device("Sub"), layout=_CH)
binary("Mul", _float_op(np.multiply), device=_device("Mul"), layout=_CH)
binary("Div", _div, device=_device("Div"), layout=_CH)
binary("Pow", _pow, NUMERIC, same_dtype=False, device=_device("Pow"), layout=_EW)
binary("Mod", _mod, attrs={"fmod": A.i(0)}, device=_mod_device, layout=_EW)
binary("BitShift", _bitshift, INTS, attrs={"direction": A.s(A.REQUIRED)})
binary("BitwiseAnd", lambda x, y, a: np.bitwise_and(x, y), INTS)
binary("BitwiseOr", lambda x, y, a: np.bitwise_or(x, y), INTS)
binary("BitwiseXor", lambda x, y, a: np.bitwise_xor(x, y), INTS)
for _name, _fn in (("And", np.logical_and), ("Or", np.logical_or), ("Xor", np.logical_xor)):
    binary(_name, lambda x, y, a, f=_fn: f(x, y), BOOL, device=_device(_name), layout=_EW)
_COMPARABLE = NUMERIC | BOOL | frozenset({DType.STRING})
for _name, _fn, _types in (("Equal", np.equal, _COMPARABLE), ("Less", np.less, NUMERIC),
                           ("Greater", np.greater, NUMERIC),
                           ("LessOrEqual", np.less_equal, NUMERIC),
                           ("GreaterOrEqual", np.greater_equal, NUMERIC)):
    binary(_name, _cmp(_fn), _types, out_dtype=DType.BOOL, device=_device(_name), layout=_EW)


def _prelu_infer(node: Node, a: dict[str, Any]) -> list[TensorMeta]:
    dt = check_dtype(node, 0, FLOATS | SIGNED_INTS, "X")
    check_same_dtype(node, [0, 1])
    x, s = shape_in(node, 0), shape_in(node, 1)
    if x is not None and s is not None and broadcast(node, [x, s]) != tuple(x):
        raise node_error(node, f"slope shape {list(s)} does not broadcast to X {list(x)}")
    return [out(dt, x)]


def node_error(node: Node, msg: str) -> Exception:
    from .registry import shape_error
    return shape_error(node, msg)


# On the device by the broadcasting loops (x < 0: x * slope), any slope that broadcasts to X;
# a per-channel slope is read plain (Layout.CHANNEL; the loops take it into plain or NHWC
# outputs only: layout._agnostic keeps it out of blocked regions). One slope for all is
# LeakyRelu (prepare/canonicalize.py).
register(OpSchema("PRelu", 2, 2, _prelu_infer, lambda ins, a: [
    np.where(ins[0] < 0, widen(ins[0]) * widen(ins[1]), widen(ins[0])).astype(ins[0].dtype)],
    device=_device("PRelu"), layout=_CH))


# ---- variadic ---------------------------------------------------------------------------
def variadic(name: str, fn: Callable[[list[np.ndarray]], np.ndarray],
             device_op: str | None = None) -> None:
    def infer(node: Node, a: dict[str, Any]) -> list[TensorMeta]:
        dt = check_dtype(node, 0, NUMERIC, "data_0")
        check_same_dtype(node, range(len(node.inputs)))
        return [out(dt, broadcast(node, [shape_in(node, i) for i in range(len(node.inputs))]))]

    def compute(ins: list[np.ndarray | None], a: dict[str, Any]) -> list[np.ndarray]:
        arrays = [np.asarray(x) for x in ins if x is not None]
        return [np.asarray(fn([widen(x) for x in arrays])).astype(arrays[0].dtype)]

    register(OpSchema(name, 1, -1, infer, compute,
                      device=_device(device_op) if device_op else None,
                      layout=_EW if device_op else Layout.PLAIN))


variadic("Max", lambda xs: reduce(np.maximum, xs), "Max")
variadic("Min", lambda xs: reduce(np.minimum, xs), "Min")
variadic("Sum", lambda xs: reduce(np.add, xs))
variadic("Mean", lambda xs: reduce(np.add, xs) / len(xs))


# ---- Where --------------------------------------------------------------------------------
def _where_infer(node: Node, a: dict[str, Any]) -> list[TensorMeta]:
    check_dtype(node, 0, BOOL, "condition")
    dt = check_same_dtype(node, [1, 2])
    return [out(dt, broadcast(node, [shape_in(node, i) for i in range(3)]))]


def _where_device(node: Node, a: dict[str, Any]) -> DeviceKernel | str:
    why = reject(node, data_inputs=(1, 2))
    if why:
        return why
    cond = node.inputs[0].meta
    if cond is None or not cond.is_static:
        return "input 0 shape is not static"
    return kernel("Where", {}, (0, 1, 2))


register(OpSchema("Where", 3, 3, _where_infer,
                  lambda ins, a: [np.where(ins[0], ins[1], ins[2]).astype(ins[1].dtype)],
                  device=_where_device, layout=_EW))
