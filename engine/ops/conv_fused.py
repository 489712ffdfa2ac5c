"""Fused convolution kernels: ConvDw, ConvBlock and ConvHead, ops of the `graphengine` domain.

The compiler's fusion rows (optimize/fusion/conv_dw.py, conv_block.py, conv_head.py) turn a
chain of ONNX nodes into one of these; the runtime runs each as one kernel. They are
registered as "graphengine.<op>" like any other domain's ops (an ONNX node names one only
with domain "graphengine": "ConvBlock" in the default domain is an unknown op), and each has
the signature, shape inference and numpy reference of a real op: the reference runs the
reference kernels of the ONNX ops it replaces, in their order, so the host engine (and
constant folding) computes what the unfused chain computes.

Activations: each stage's is named by a string attribute (`activation` for the first 1x1
Conv, `dw_activation` for the depthwise one, `pw_activation` for the projection), one of
ACTIVATIONS, with `<name>_alpha` / `<name>_beta` as the activation fusion gives them (Clip's
bounds, LeakyRelu's and HardSigmoid's parameters); absent: none.

ConvDw(X, W, B?, DW_W, DW_B): a 1x1 Conv (stride 1, no padding, group 1; W [M,C,1,1], B [M])
and its activation, then a 3x3 depthwise Conv (group M, pads 1, stride `dw_stride` 1 or 2;
DW_W [M,1,3,3], DW_B [M]) and `dw_activation`. oneDNN runs it as one convolution with a
depthwise post-op (runtime_ext/src/host/kernels_conv.cc), the expanded tensor never in memory.

ConvBlock(X, W_E?, B_E?, DW_W, DW_B, PW_W, PW_B?, R?): an inverted-residual block. The
optional 1x1 expansion (W_E [M,C,1,1], B_E [M], `activation`; without it M = C), the 3x3
depthwise Conv as in ConvDw, the 1x1 projection (PW_W [P,M,1,1], PW_B [P]), then the
residual R (the output's shape) added and `pw_activation` applied, in that order (the
residual Add's activation follows it). Run by the block kernel of runtime_ext/src/host/conv_block.cc
(AVX-512; Relu or Clip activations, constant weights).

ConvHead(X, W, B?, FC, FC_B?): a classifier head. A 1x1 Conv (W [M,C,1,1], B [M]) and its
activation, a global average pool and flatten to [N, M], and a fully connected layer (FC
[classes, M] with `trans_b` 1, else [M, classes]; FC_B [classes]): output [N, classes]. Run
by block::Head (conv_block.cc; AVX-512, Relu or Clip, constant weights, batch 1 to 4).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ..ir import Dim, Node, TensorMeta
from . import attrs as A
from .chain import reference, run_step
from .device_helpers import kernel, optional_index, reject
from .registry import DeviceKernel, Layout, OpSchema, register, shape_error
from .shape_helpers import FLOATS, check_dtype, check_rank, check_same_dtype, out, shape_in, sym

DOMAIN = "graphengine"
CONV_DW = f"{DOMAIN}.ConvDw"
CONV_BLOCK = f"{DOMAIN}.ConvBlock"
CONV_HEAD = f"{DOMAIN}.ConvHead"
FUSED_CONVS = (CONV_DW, CONV_BLOCK, CONV_HEAD)
DEPTHWISE = (CONV_DW, CONV_BLOCK)  # the ones that have a depthwise stage

# The activations a stage may end in (the activation fusion's, GeluTanh being Gelu with
# approximate="tanh"), and the defaults of their parameters (as the runtime takes them).
ACTIVATIONS = ("Relu", "LeakyRelu", "Clip", "Sigmoid", "Tanh", "Gelu", "GeluTanh",
               "HardSigmoid", "HardSwish")
_PARAMS = {"LeakyRelu": (0.01, 0.0), "HardSigmoid": (0.2, 0.5),
           "Clip": (float("-inf"), float("inf"))}
# What the block and head kernels apply (block::Clip).
BLOCK_ACTIVATIONS = (None, "Relu", "Clip")


def activation_attrs(*stages: str) -> dict[str, A.AttrSpec]:
    """The attribute specs of the activations `stages` ("activation", "dw_activation"...)."""
    specs: dict[str, A.AttrSpec] = {}
    for key in stages:
        specs.update({key: A.s(None, ACTIVATIONS), f"{key}_alpha": A.f(), f"{key}_beta": A.f()})
    return specs


def _activate(y: np.ndarray, a: dict[str, Any], key: str) -> np.ndarray:
    op = a.get(key)
    if not op:
        return y
    alpha, beta = _PARAMS.get(op, (0.0, 0.0))
    alpha = a.get(f"{key}_alpha", alpha)
    beta = a.get(f"{key}_beta", beta)
    with np.errstate(all="ignore"):
        return run_step(op, y, None, alpha, beta)


def _conv(x: np.ndarray, w: np.ndarray, b: np.ndarray | None, group: int = 1, stride: int = 1,
          pad: int = 0) -> np.ndarray:
    return reference("Conv", [x, w, b], {"group": group, "strides": [stride, stride],
                                         "pads": [pad] * 4})


def _depthwise(x: np.ndarray, w: np.ndarray, b: np.ndarray | None, stride: int) -> np.ndarray:
    return _conv(x, w, b, group=w.shape[0], stride=stride, pad=1)


def _kernel_activations(a: dict[str, Any], *stages: str) -> dict[str, Any]:
    """The stages' activations as the runtime kernel's attributes (of the same names)."""
    attrs: dict[str, Any] = {}
    for key in stages:
        if a.get(key):
            attrs[key] = a[key]
            for part in ("_alpha", "_beta"):
                if a.get(key + part) is not None:
                    attrs[key + part] = float(a[key + part])
    return attrs


# ---- shape inference ------------------------------------------------------------------------
def _required(node: Node, named: dict[int, str]) -> None:
    for i, what in named.items():
        if node.input(i) is None:
            raise shape_error(node, f"input {i} ({what}) is required")


def _expect(node: Node, i: int, what: str, want: Sequence[Dim | None]) -> tuple[Dim, ...] | None:
    """Input i's shape (None when absent or unknown), checked against `want` where both
    dims are known integers (None in `want`: any)."""
    if node.input(i) is None:
        return None
    s = shape_in(node, i)
    if s is None:
        return None
    if len(s) != len(want) or any(isinstance(d, int) and isinstance(w, int) and d != w
                                  for d, w in zip(s, want)):
        shown = ["?" if w is None else w for w in want]
        raise shape_error(node, f"{what} has shape {list(s)}, expected {shown}")
    return tuple(s)


def _dim(node: Node, known: Dim | None, fallback: Sequence[Dim] | None, at: int,
         name: str) -> Dim:
    """`known`, else dim `at` of `fallback`, else a fresh symbol."""
    if known is not None:
        return known
    return fallback[at] if fallback is not None else sym(node, name)


def _stride(node: Node, a: dict[str, Any]) -> int:
    s = int(a["dw_stride"])
    if s not in (1, 2):
        raise shape_error(node, f"dw_stride must be 1 or 2, got {s}")
    return s


def _strided(node: Node, x: Sequence[Dim], stride: int) -> tuple[Dim, ...]:
    """X's spatial size after a 3x3 window with pads 1 and `stride`."""
    if stride == 1:
        return tuple(x[2:])
    return tuple((d - 1) // stride + 1 if isinstance(d, int) else sym(node, k)
                 for k, d in enumerate(x[2:], start=2))


def _input_x(node: Node, count: int) -> tuple[Any, tuple[Dim, ...] | None]:
    dt = check_dtype(node, 0, FLOATS, "X")
    check_same_dtype(node, range(count))
    return dt, check_rank(node, 0, 4, "X")


def _depthwise_stage(node: Node, w_at: int, m: Dim | None) -> Dim:
    """Checks the depthwise weight and bias at w_at, w_at + 1; their channel count."""
    w = _expect(node, w_at, "the depthwise weight", (m, 1, 3, 3))
    m = _dim(node, m, w, 0, "m")
    _expect(node, w_at + 1, "the depthwise bias", (m,))
    return m


def _conv_dw_infer(node: Node, a: dict[str, Any]) -> list[TensorMeta]:
    _required(node, {1: "W", 3: "DW_W, the depthwise weight", 4: "DW_B, the depthwise bias"})
    dt, x = _input_x(node, 5)
    c = x[1] if x is not None else None
    w = _expect(node, 1, "W", (None, c, 1, 1))
    m = w[0] if w is not None else None
    _expect(node, 2, "B", (m,))
    m = _depthwise_stage(node, 3, m)
    stride = _stride(node, a)
    if x is None:
        return [out(dt, None)]
    return [out(dt, (x[0], m) + _strided(node, x, stride))]


def _conv_block_infer(node: Node, a: dict[str, Any]) -> list[TensorMeta]:
    _required(node, {3: "DW_W, the depthwise weight", 4: "DW_B, the depthwise bias",
                     5: "PW_W, the projection weight"})
    dt, x = _input_x(node, 8)
    c = x[1] if x is not None else None
    if node.input(1) is not None:
        w = _expect(node, 1, "the expansion weight W_E", (None, c, 1, 1))
        m = w[0] if w is not None else None
        _expect(node, 2, "the expansion bias B_E", (m,))
    elif node.input(2) is not None or a.get("activation"):
        raise shape_error(node, "B_E and activation belong to the expansion: give W_E too")
    else:
        m = c
    m = _depthwise_stage(node, 3, m)
    pw = _expect(node, 5, "the projection weight PW_W", (None, m, 1, 1))
    p = _dim(node, None, pw, 0, "p")
    _expect(node, 6, "the projection bias PW_B", (p,))
    stride = _stride(node, a)
    y = None if x is None else (x[0], p) + _strided(node, x, stride)
    if y is not None:
        _expect(node, 7, "the residual R", y)
    return [out(dt, y)]


def _conv_head_infer(node: Node, a: dict[str, Any]) -> list[TensorMeta]:
    _required(node, {1: "W", 3: "FC, the fully connected weight"})
    dt, x = _input_x(node, 5)
    c = x[1] if x is not None else None
    w = _expect(node, 1, "W", (None, c, 1, 1))
    m = w[0] if w is not None else None
    _expect(node, 2, "B", (m,))
    trans = bool(a["trans_b"])
    fc = _expect(node, 3, "FC", (None, m) if trans else (m, None))
    classes = _dim(node, None, fc, 0 if trans else 1, "classes")
    _expect(node, 4, "FC_B", (classes,))
    return [out(dt, None if x is None else (x[0], classes))]


# ---- reference kernels ----------------------------------------------------------------------
def _conv_dw(ins: list[Any], a: dict[str, Any]) -> list[np.ndarray]:
    x, w, b, dw_w, dw_b = ins[:5]
    y = _activate(_conv(x, w, b), a, "activation")
    y = _depthwise(y, dw_w, dw_b, int(a["dw_stride"]))
    return [_activate(y, a, "dw_activation")]


def _conv_block(ins: list[Any], a: dict[str, Any]) -> list[np.ndarray]:
    x, w_e, b_e, dw_w, dw_b, pw_w = ins[:6]
    pw_b = ins[6] if len(ins) > 6 else None
    r = ins[7] if len(ins) > 7 else None
    h = x if w_e is None else _activate(_conv(x, w_e, b_e), a, "activation")
    h = _activate(_depthwise(h, dw_w, dw_b, int(a["dw_stride"])), a, "dw_activation")
    y = _conv(h, pw_w, pw_b)
    if r is not None:
        y = reference("Add", [y, r])
    return [_activate(y, a, "pw_activation")]


def _conv_head(ins: list[Any], a: dict[str, Any]) -> list[np.ndarray]:
    x, w, b, fc = ins[:4]
    fc_b = ins[4] if len(ins) > 4 else None
    h = _activate(_conv(x, w, b), a, "activation")
    pooled = reference("GlobalAveragePool", [h])
    flat = reference("Flatten", [pooled], {"axis": 1})
    return [reference("Gemm", [flat, fc, fc_b], {"transB": int(a["trans_b"])})]


# ---- device lowerings -----------------------------------------------------------------------
def _not_constant(node: Node, named: dict[int, str]) -> str | None:
    for i, what in named.items():
        v = node.input(i)
        if v is not None and not v.is_constant:
            return f"device {node.op_type} needs a constant {what}"
    return None


def _block_activations(node: Node, a: dict[str, Any], keys: Sequence[str]) -> str | None:
    for key in keys:
        if a.get(key) not in BLOCK_ACTIVATIONS:
            return f"device {node.op_type} applies Relu or Clip only, {key} is {a[key]}"
    return None


def _conv_dw_device(node: Node, a: dict[str, Any]) -> DeviceKernel | str:
    why = reject(node) or _not_constant(node, {3: "depthwise weight", 4: "depthwise bias"})
    if why:
        return why
    attrs = {"dw_stride": int(a["dw_stride"])}
    attrs.update(_kernel_activations(a, "activation", "dw_activation"))
    return kernel("ConvDw", attrs, (0, 1, optional_index(node, 2), 3, 4))


def _conv_block_device(node: Node, a: dict[str, Any]) -> DeviceKernel | str:
    why = reject(node) or _not_constant(node, {
        1: "expansion weight", 2: "expansion bias", 3: "depthwise weight",
        4: "depthwise bias", 5: "projection weight", 6: "projection bias"}) \
        or _block_activations(node, a, ("activation", "dw_activation", "pw_activation"))
    if why:
        return why
    # The kernel's own convention: X, W, B (the expansion's, or else the depthwise's),
    # [the depthwise's,] the projection's, [R with sum=1].
    stride = int(a["dw_stride"])
    expand = node.input(1) is not None
    channels = int(node.inputs[0].meta.shape[1])
    if not expand and channels % 16:
        return (f"device {node.op_type} without an expansion reads whole blocks of 16 "
                f"channels, X has {channels}")
    attrs: dict[str, Any] = {"expand": int(expand)}
    if expand:
        attrs["dw_stride"] = stride
        inputs = [0, 1, optional_index(node, 2), 3, 4]
    else:
        attrs.update(group=channels, strides=[stride, stride], pads=[1, 1, 1, 1])
        inputs = [0, 3, 4]
    inputs += [5, optional_index(node, 6)]
    if node.input(7) is not None:
        attrs["sum"] = 1
        inputs.append(7)
    attrs.update(_kernel_activations(a, "activation", "dw_activation", "pw_activation"))
    return kernel("ConvBlock", attrs, inputs)


def _conv_head_device(node: Node, a: dict[str, Any]) -> DeviceKernel | str:
    why = reject(node) or _not_constant(node, {1: "weight", 2: "bias", 3: "fc weight",
                                               4: "fc bias"}) \
        or _block_activations(node, a, ("activation",))
    if why:
        return why
    attrs = {"trans_b": int(a["trans_b"])}
    attrs.update(_kernel_activations(a, "activation"))
    return kernel("ConvHead", attrs, (0, 1, optional_index(node, 2), 3, optional_index(node, 4)))


register(OpSchema(CONV_DW, 2, 5, _conv_dw_infer, _conv_dw, device=_conv_dw_device,
                  layout=Layout.CONV, attrs={
                      "dw_stride": A.i(1), **activation_attrs("activation", "dw_activation")}))
register(OpSchema(CONV_BLOCK, 1, 8, _conv_block_infer, _conv_block, device=_conv_block_device,
                  layout=Layout.CONV, residual=7, attrs={
                      "dw_stride": A.i(1),
                      **activation_attrs("activation", "dw_activation", "pw_activation")}))
register(OpSchema(CONV_HEAD, 2, 5, _conv_head_infer, _conv_head, device=_conv_head_device,
                  layout=Layout.CONV, attrs={"trans_b": A.i(0), **activation_attrs("activation")}))

__all__ = ["ACTIVATIONS", "BLOCK_ACTIVATIONS", "CONV_BLOCK", "CONV_DW", "CONV_HEAD", "DEPTHWISE",
           "DOMAIN", "FUSED_CONVS", "activation_attrs"]
