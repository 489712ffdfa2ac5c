"""graphengine.GroupNorm: group normalization, its per-channel affine and an activation.

GroupNorm(X, scale, bias): X [N, C, spatial...] (rank >= 3), scale and bias [C] (constants
on the device); attributes `num_groups` (dividing C), `epsilon`, and `activation` (one of
ACTIVATIONS, with `activation_alpha` / `activation_beta` as the activation fusion gives
them). Each sample's channels form `num_groups` groups of C / num_groups channels; a group
is normalized over its channels and spatial positions, then y = act(x_hat * scale[c] +
bias[c]).

The fusion row optimize/fusion/group_norm.py makes it from the canonical steps that
GroupNormalization, InstanceNormalization and torch's GroupNorm export become (Reshape to
[N, G, rest] -> LayerNormalization -> Reshape back -> Mul -> Add [-> activation]). Its layout
is UNIFORM: the runtime kernel (runtime_ext/src/host/kernels_group_norm.cc) reads and writes
plain, NHWC and unpadded blocked tensors, so a GroupNorm between convolutions stays in their
format. The reference computes what those steps compute, in their order.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..ir import Node, TensorMeta
from . import attrs as A
from .chain import run_step
from .device_helpers import kernel, reject
from .registry import DeviceKernel, Layout, OpSchema, register, shape_error
from .shape_helpers import FLOATS, check_dtype, check_rank, same, shape_in

GROUP_NORM = "graphengine.GroupNorm"
# What the runtime kernel applies after the affine (the activation fusion's names).
ACTIVATIONS = ("Relu", "LeakyRelu", "Clip", "Sigmoid", "Tanh", "Gelu", "GeluTanh", "Swish",
               "HardSwish")
_DEFAULTS = {"LeakyRelu": (0.01, 0.0), "Swish": (1.0, 0.0),
             "Clip": (float("-inf"), float("inf"))}


def _infer(node: Node, a: dict[str, Any]) -> list[TensorMeta]:
    check_dtype(node, 0, FLOATS, "X")
    x = shape_in(node, 0)
    if x is not None and len(x) < 3:
        raise shape_error(node, f"X has rank {len(x)}, expected N, C, spatial...")
    c = x[1] if x is not None else None
    groups = int(a["num_groups"])
    if isinstance(c, int) and (groups < 1 or c % groups):
        raise shape_error(node, f"num_groups {groups} does not divide the {c} channels")
    for i, what in ((1, "scale"), (2, "bias")):
        s = check_rank(node, i, 1, what)
        if s is not None and isinstance(c, int) and isinstance(s[0], int) and s[0] != c:
            raise shape_error(node, f"{what} has {s[0]} entries, expected C = {c}")
    return same(node)


def _compute(ins: list[Any], a: dict[str, Any]) -> list[np.ndarray]:
    x = np.asarray(ins[0])
    n, c = x.shape[:2]
    grouped = x.astype(np.float64).reshape((n, int(a["num_groups"]), -1))
    mean = grouped.mean(axis=2, keepdims=True)
    var = grouped.var(axis=2, keepdims=True)
    normed = ((grouped - mean) / np.sqrt(var + a["epsilon"])).reshape(x.shape)
    per_channel = (1, c) + (1,) * (x.ndim - 2)
    y = (normed * np.asarray(ins[1], np.float64).reshape(per_channel)
         + np.asarray(ins[2], np.float64).reshape(per_channel)).astype(x.dtype)
    act = a.get("activation")
    if not act:
        return [y]
    alpha, beta = _DEFAULTS.get(act, (0.0, 0.0))
    alpha = alpha if a.get("activation_alpha") is None else a["activation_alpha"]
    beta = beta if a.get("activation_beta") is None else a["activation_beta"]
    with np.errstate(all="ignore"):
        return [run_step(act, y, None, alpha, beta)]


def _device(node: Node, a: dict[str, Any]) -> DeviceKernel | str:
    why = reject(node)
    if why:
        return why
    for i, what in ((1, "scale"), (2, "bias")):
        if not node.inputs[i].is_constant:
            return f"device {node.op_type} needs a constant {what}"
    attrs: dict[str, Any] = {"num_groups": int(a["num_groups"]),
                             "epsilon": float(a["epsilon"])}
    if a.get("activation"):
        attrs["activation"] = a["activation"]
        for part in ("_alpha", "_beta"):
            if a.get("activation" + part) is not None:
                attrs["activation" + part] = float(a["activation" + part])
    return kernel("GroupNorm", attrs, (0, 1, 2))


register(OpSchema(GROUP_NORM, 3, 3, _infer, _compute, device=_device, layout=Layout.UNIFORM,
                  attrs={"num_groups": A.i(A.REQUIRED), "epsilon": A.f(1e-5),
                         "activation": A.s(None, ACTIVATIONS), "activation_alpha": A.f(),
                         "activation_beta": A.f()}))

__all__ = ["ACTIVATIONS", "GROUP_NORM"]
