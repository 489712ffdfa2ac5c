"""Activations with parameters, Clip, and the softmax family."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ..ir import Node, TensorMeta
from . import attrs as A
from .device_helpers import const_scalar, kernel, reject
from .elementwise import unary, unary_device
from .eltwise_graph import single
from .kernel_utils import widen
from .mathfn import erf
from .registry import DeviceKernel, Layout, OpSchema, register
from .shape_helpers import FLOATS, NUMERIC, check_dtype, check_same_dtype, norm_axis, same

unary("Elu", lambda x, a: np.where(x > 0, x, a["alpha"] * np.expm1(np.minimum(x, 0))),
      attrs={"alpha": A.f(1.0)}, device=unary_device("Elu", ("alpha",)))
unary("Celu", lambda x, a: np.maximum(x, 0) + np.minimum(
    0, a["alpha"] * np.expm1(np.minimum(x, 0) / a["alpha"])), attrs={"alpha": A.f(1.0)},
    device=single("Celu"))
unary("Selu", lambda x, a: a["gamma"] * np.where(
    x > 0, x, a["alpha"] * np.expm1(np.minimum(x, 0))),
    attrs={"alpha": A.f(1.67326319217681884765625), "gamma": A.f(1.05070102214813232421875)},
    device=single("Selu"))
unary("LeakyRelu", lambda x, a: np.where(x >= 0, x, x * np.float32(a["alpha"])),
      attrs={"alpha": A.f(0.01)}, device=unary_device("LeakyRelu", ("alpha",)))
unary("ThresholdedRelu", lambda x, a: np.where(x > a["alpha"], x, 0),
      attrs={"alpha": A.f(1.0)}, device=single("ThresholdedRelu"))
unary("HardSigmoid", lambda x, a: np.clip(x * np.float32(a["alpha"]) + np.float32(a["beta"]),
                                          0, 1),
      attrs={"alpha": A.f(0.2), "beta": A.f(0.5)},
      device=unary_device("HardSigmoid", ("alpha", "beta")))
unary("Swish", lambda x, a: x / (1 + np.exp(-np.float32(a["alpha"]) * x)),
      attrs={"alpha": A.f(1.0)}, device=unary_device("Swish", ("alpha",)))
unary("Shrink", lambda x, a: np.where(x < -a["lambd"], x + a["bias"],
                                      np.where(x > a["lambd"], x - a["bias"], 0)),
      NUMERIC, attrs={"bias": A.f(0.0), "lambd": A.f(0.5)}, device=single("Shrink"))


def _gelu(x: np.ndarray, a: dict[str, Any]) -> np.ndarray:
    if a["approximate"] == "tanh":
        return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))
    return 0.5 * x * (1 + erf(x / math.sqrt(2)))


unary("Gelu", _gelu, attrs={"approximate": A.s("none", ("none", "tanh"))},
      device=unary_device("Gelu", ("approximate",)))


# ---- Clip --------------------------------------------------------------------------------
def _clip_infer(node: Node, a: dict[str, Any]) -> list[TensorMeta]:
    check_dtype(node, 0, NUMERIC, "input")
    check_same_dtype(node, [0, 1, 2])
    return same(node)


def _clip(ins: list[np.ndarray | None], a: dict[str, Any]) -> list[np.ndarray]:
    x = ins[0]
    lo = ins[1] if len(ins) > 1 else None
    hi = ins[2] if len(ins) > 2 else None
    y = x
    if lo is not None:
        y = np.maximum(y, lo)
    if hi is not None:
        y = np.minimum(y, hi)
    return [np.asarray(y, dtype=x.dtype)]


def _clip_device(node: Node, a: dict[str, Any]) -> DeviceKernel | str:
    """Constant bounds become attributes; a bound the graph computes (one element) stays an
    input, which the kernel reads at each run."""
    why = reject(node, data_inputs=(0,))
    if why:
        return why
    attrs: dict[str, float] = {}
    inputs = [0, -1, -1]
    rank = len(node.inputs[0].meta.shape)
    for i, key, default in ((1, "min", -math.inf), (2, "max", math.inf)):
        v = node.input(i)
        value = default if v is None else const_scalar(node, i)
        if value is not None:
            attrs[key] = value
            continue
        why = reject(node, data_inputs=(i,))
        if why:
            return why
        # more than one element, or more dims than x, and the reference's broadcast differs
        if v.is_constant or v.meta.numel != 1 or v.meta.rank > rank:
            return f"Clip {key} is neither a constant scalar nor one element of x's rank or less"
        inputs[i] = i
    while inputs[-1] == -1:
        inputs.pop()
    return kernel("Clip", attrs, tuple(inputs))


register(OpSchema("Clip", 1, 3, _clip_infer, _clip, device=_clip_device, layout=Layout.UNIFORM))


# ---- Softmax family ---------------------------------------------------------------------
def _softmax_infer(node: Node, a: dict[str, Any]) -> list[TensorMeta]:
    check_dtype(node, 0, FLOATS, "input")
    m = same(node)
    if m[0].shape is not None:
        norm_axis(node, a["axis"], len(m[0].shape))
    return m


def _softmax(x: np.ndarray, axis: int) -> np.ndarray:
    shifted = x - np.max(x, axis=axis, keepdims=True)
    e = np.exp(shifted)
    return e / np.sum(e, axis=axis, keepdims=True)


def _log_softmax(x: np.ndarray, axis: int) -> np.ndarray:
    shifted = x - np.max(x, axis=axis, keepdims=True)
    return shifted - np.log(np.sum(np.exp(shifted), axis=axis, keepdims=True))


def _hardmax(x: np.ndarray, axis: int) -> np.ndarray:
    idx = np.expand_dims(np.argmax(x, axis=axis), axis)
    y = np.zeros_like(x)
    np.put_along_axis(y, idx, 1, axis=axis)
    return y


def _softmax_op(name: str, fn: Any, device: bool) -> None:
    def compute(ins: list[np.ndarray | None], a: dict[str, Any]) -> list[np.ndarray]:
        x = ins[0]
        if x.ndim == 0:
            return [fn(x.reshape(1), 0).reshape(()).astype(x.dtype)]
        return [fn(widen(x), a["axis"]).astype(x.dtype)]

    def lower(node: Node, a: dict[str, Any]) -> DeviceKernel | str:
        why = reject(node)
        if why:
            return why
        rank = len(node.inputs[0].meta.shape)
        return kernel(name, {"axis": norm_axis(node, a["axis"], rank)}, (0,))

    register(OpSchema(name, 1, 1, _softmax_infer, compute, attrs={"axis": A.i(-1)},
                      device=lower if device else None))


_softmax_op("Softmax", _softmax, True)
_softmax_op("LogSoftmax", _log_softmax, True)
_softmax_op("Hardmax", _hardmax, False)
