"""Converters of ATen's arithmetic, activations, normalizations, reductions, products,
convolutions and pools to the IR's (ONNX) ops. Shape and indexing ops: aten_shapes.py.

ATen promotes types across operands where ONNX wants one type: arithmetic casts every
operand to the node's result dtype (what torch computed), comparisons to the promoted type
of their operands."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from .convert import FxConverter, Missing, Unsupported, converts, fake

aten = torch.ops.aten
Node = torch.fx.Node


def _out_dtype(node: Node) -> torch.dtype:
    return fake(node).dtype


def _operands(ctx: FxConverter, args: list[Any], dtype: torch.dtype) -> list:
    return [ctx.cast(ctx.value(x, dtype), dtype) for x in args]


def _promoted(x: Any, y: Any) -> torch.dtype:
    """torch's result type of a comparison's operands (0-d tensors and scalars weigh less)."""
    def probe(v: Any) -> Any:
        v = fake(v)
        if isinstance(v, torch.Tensor):
            return torch.zeros(() if v.dim() == 0 else (1,), dtype=v.dtype)
        return v
    return torch.result_type(probe(x), probe(y))


# ---- elementwise -------------------------------------------------------------------------
_UNARY = {
    aten.relu.default: "Relu", aten.sigmoid.default: "Sigmoid", aten.tanh.default: "Tanh",
    aten.exp.default: "Exp", aten.log.default: "Log", aten.sqrt.default: "Sqrt",
    aten.neg.default: "Neg", aten.abs.default: "Abs", aten.erf.default: "Erf",
    aten.sin.default: "Sin", aten.cos.default: "Cos", aten.reciprocal.default: "Reciprocal",
    aten.floor.default: "Floor", aten.ceil.default: "Ceil", aten.round.default: "Round",
    aten.sign.default: "Sign", aten.hardswish.default: "HardSwish",
    aten.isnan.default: "IsNaN", aten.isinf.default: "IsInf",
}


def _unary(op_type: str):
    def convert(ctx: FxConverter, node: Node, a: dict) -> Any:
        return ctx.op(op_type, ctx.tensor(a["self"]))
    return convert


for _t, _o in _UNARY.items():
    converts(_t)(_unary(_o))


@converts(aten.rsqrt.default)
def _rsqrt(ctx: FxConverter, node: Node, a: dict) -> Any:
    return ctx.op("Reciprocal", ctx.op("Sqrt", ctx.tensor(a["self"])))


@converts(aten.silu.default)
def _silu(ctx: FxConverter, node: Node, a: dict) -> Any:
    x = ctx.tensor(a["self"])
    return ctx.op("Mul", x, ctx.op("Sigmoid", x))


@converts(aten.gelu.default)
def _gelu(ctx: FxConverter, node: Node, a: dict) -> Any:
    return ctx.op("Gelu", ctx.tensor(a["self"]), approximate=a["approximate"])


@converts(aten.hardsigmoid.default)
def _hardsigmoid(ctx: FxConverter, node: Node, a: dict) -> Any:
    return ctx.op("HardSigmoid", ctx.tensor(a["self"]), alpha=1.0 / 6, beta=0.5)


@converts(aten.leaky_relu.default)
def _leaky_relu(ctx: FxConverter, node: Node, a: dict) -> Any:
    return ctx.op("LeakyRelu", ctx.tensor(a["self"]), alpha=float(a["negative_slope"]))


@converts(aten.elu.default)
def _elu(ctx: FxConverter, node: Node, a: dict) -> Any:
    if a["scale"] != 1 or a["input_scale"] != 1:
        raise Unsupported("elu with scale or input_scale other than 1")
    return ctx.op("Elu", ctx.tensor(a["self"]), alpha=float(a["alpha"]))


@converts(aten.hardtanh.default, aten.clamp.default, aten.clamp.Tensor)
def _clamp(ctx: FxConverter, node: Node, a: dict) -> Any:
    dtype = _out_dtype(node)
    x = ctx.cast(ctx.tensor(a["self"]), dtype)
    lo = a.get("min", a.get("min_val"))
    hi = a.get("max", a.get("max_val"))
    if isinstance(lo, Node) or isinstance(hi, Node):  # tensor bounds broadcast
        if lo is not None:
            x = ctx.op("Max", x, ctx.cast(ctx.tensor(lo), dtype))
        if hi is not None:
            x = ctx.op("Min", x, ctx.cast(ctx.tensor(hi), dtype))
        return x
    bounds = [None if b is None else ctx.value(b, dtype) for b in (lo, hi)]
    return ctx.op("Clip", x, *bounds)


def _binary(op_type: str, swap: bool = False):
    def convert(ctx: FxConverter, node: Node, a: dict) -> Any:
        dtype = _out_dtype(node)
        x, y = _operands(ctx, [a["self"], a["other"]], dtype)
        alpha = a.get("alpha", 1)
        if alpha not in (None, 1):
            y = ctx.op("Mul", y, ctx.value(alpha, dtype))
        return ctx.op(op_type, *((y, x) if swap else (x, y)))
    return convert


for _t, _o in ((aten.add.Tensor, "Add"), (aten.add.Scalar, "Add"), (aten.sub.Tensor, "Sub"),
               (aten.sub.Scalar, "Sub"), (aten.mul.Tensor, "Mul"), (aten.mul.Scalar, "Mul"),
               (aten.div.Tensor, "Div"), (aten.div.Scalar, "Div"),
               (aten.true_divide.Tensor, "Div"),
               (aten.maximum.default, "Max"), (aten.minimum.default, "Min"),
               (aten.pow.Tensor_Tensor, "Pow"), (aten.fmod.Tensor, "Mod"),
               (aten.logical_and.default, "And"), (aten.logical_or.default, "Or"),
               (aten.logical_xor.default, "Xor"), (aten.bitwise_and.Tensor, "And"),
               (aten.bitwise_or.Tensor, "Or")):
    converts(_t)(_binary(_o))
converts(aten.rsub.Scalar, aten.rsub.Tensor)(_binary("Sub", swap=True))


@converts(aten.div.Tensor_mode)
def _div_mode(ctx: FxConverter, node: Node, a: dict) -> Any:
    dtype = _out_dtype(node)
    x, y = _operands(ctx, [a["self"], a["other"]], dtype)
    mode = a["rounding_mode"]
    if dtype.is_floating_point:
        q = ctx.op("Div", x, y)
        if mode is None:
            return q
        return ctx.op("Floor", q) if mode == "floor" else _trunc(ctx, q)
    if mode == "floor":  # Python-style: (x - x mod y) / y is exact
        return ctx.op("Div", ctx.op("Sub", x, ctx.op("Mod", x, y, fmod=0)), y)
    return ctx.op("Div", x, y)  # integer Div truncates


def _trunc(ctx: FxConverter, q: Any) -> Any:
    return ctx.op("Where", ctx.op("Less", q, np.zeros((), q.dtype)), ctx.op("Ceil", q),
                  ctx.op("Floor", q))


@converts(aten.remainder.Tensor, aten.remainder.Scalar)
def _remainder(ctx: FxConverter, node: Node, a: dict) -> Any:
    dtype = _out_dtype(node)
    x, y = _operands(ctx, [a["self"], a["other"]], dtype)
    if not dtype.is_floating_point:
        return ctx.op("Mod", x, y, fmod=0)
    return ctx.op("Sub", x, ctx.op("Mul", ctx.op("Floor", ctx.op("Div", x, y)), y))


@converts(aten.pow.Tensor_Scalar)
def _pow_scalar(ctx: FxConverter, node: Node, a: dict) -> Any:
    dtype = _out_dtype(node)
    x = ctx.cast(ctx.tensor(a["self"]), dtype)
    e = a["exponent"]
    if e == 2:
        return ctx.op("Mul", x, x)
    if e == 0.5 and dtype.is_floating_point:
        return ctx.op("Sqrt", x)
    if e == 1:
        return ctx.op("Identity", x)
    return ctx.op("Pow", x, ctx.value(e, dtype))


@converts(aten.pow.Scalar)
def _pow_base(ctx: FxConverter, node: Node, a: dict) -> Any:
    dtype = _out_dtype(node)
    return ctx.op("Pow", ctx.value(a["self"], dtype),
                  ctx.cast(ctx.tensor(a["exponent"]), dtype))


@converts(aten.where.self)
def _where(ctx: FxConverter, node: Node, a: dict) -> Any:
    dtype = _out_dtype(node)
    c = ctx.cast(ctx.tensor(a["condition"]), torch.bool)
    x, y = _operands(ctx, [a["self"], a["other"]], dtype)
    return ctx.op("Where", c, x, y)


@converts(aten.masked_fill.Scalar, aten.masked_fill.Tensor)
def _masked_fill(ctx: FxConverter, node: Node, a: dict) -> Any:
    dtype = _out_dtype(node)
    x = ctx.cast(ctx.tensor(a["self"]), dtype)
    mask = ctx.cast(ctx.tensor(a["mask"]), torch.bool)
    return ctx.op("Where", mask, ctx.cast(ctx.value(a["value"], dtype), dtype), x)


def _compare(op_type: str, negate: bool = False):
    def convert(ctx: FxConverter, node: Node, a: dict) -> Any:
        dtype = _promoted(a["self"], a["other"])
        x, y = _operands(ctx, [a["self"], a["other"]], dtype)
        out = ctx.op(op_type, x, y)
        return ctx.op("Not", out) if negate else out
    return convert


for _name, _o, _neg in (("eq", "Equal", False), ("ne", "Equal", True), ("lt", "Less", False),
                        ("le", "LessOrEqual", False), ("gt", "Greater", False),
                        ("ge", "GreaterOrEqual", False)):
    for _overload in ("Tensor", "Scalar"):
        converts(getattr(getattr(aten, _name), _overload))(_compare(_o, _neg))


@converts(aten.logical_not.default, aten.bitwise_not.default)
def _not(ctx: FxConverter, node: Node, a: dict) -> Any:
    x = ctx.tensor(a["self"])
    if x.dtype == np.bool_:
        return ctx.op("Not", x)
    if node.target is aten.bitwise_not.default:
        return ctx.op("BitwiseNot", x)
    return ctx.op("Equal", x, np.zeros((), x.dtype))


# ---- products, convolution, pools --------------------------------------------------------
@converts(aten.mm.default, aten.bmm.default, aten.matmul.default)
def _matmul(ctx: FxConverter, node: Node, a: dict) -> Any:
    other = a.get("mat2", a.get("other"))
    return ctx.op("MatMul", ctx.tensor(a["self"]), ctx.tensor(other))


@converts(aten.addmm.default)
def _addmm(ctx: FxConverter, node: Node, a: dict) -> Any:
    return ctx.op("Gemm", ctx.tensor(a["mat1"]), ctx.tensor(a["mat2"]), ctx.tensor(a["self"]),
                  alpha=float(a["alpha"]), beta=float(a["beta"]))


@converts(aten.convolution.default)
def _convolution(ctx: FxConverter, node: Node, a: dict) -> Any:
    x, w = ctx.tensor(a["input"]), ctx.tensor(a["weight"])
    b = None if a["bias"] is None else ctx.tensor(a["bias"])
    pads = [int(p) for p in a["padding"]]
    attrs = dict(strides=[int(s) for s in a["stride"]], pads=pads + pads,
                 dilations=[int(d) for d in a["dilation"]], group=int(a["groups"]),
                 kernel_shape=list(w.shape[2:]))
    if a["transposed"]:
        return ctx.op("ConvTranspose", x, w, b, **attrs,
                      output_padding=[int(p) for p in a["output_padding"]])
    return ctx.op("Conv", x, w, b, **attrs)


def _pool_attrs(a: dict, rank: int) -> dict:
    k = [int(v) for v in a["kernel_size"]] * (rank if len(a["kernel_size"]) == 1 else 1)
    s = [int(v) for v in (a["stride"] or k)] * (rank if len(a["stride"] or k) == 1 else 1)
    p = [int(v) for v in a["padding"]] * (rank if len(a["padding"]) == 1 else 1)
    return dict(kernel_shape=k, strides=s, pads=p + p, ceil_mode=int(bool(a["ceil_mode"])))


@converts(aten.max_pool2d_with_indices.default)
def _max_pool(ctx: FxConverter, node: Node, a: dict) -> Any:
    attrs = _pool_attrs(a, 2)
    d = [int(v) for v in a["dilation"]]
    attrs["dilations"] = d * 2 if len(d) == 1 else d
    return ctx.op("MaxPool", ctx.tensor(a["self"]), **attrs), Missing("max_pool's indices")


@converts(aten.avg_pool2d.default)
def _avg_pool(ctx: FxConverter, node: Node, a: dict) -> Any:
    if a["divisor_override"] is not None:
        raise Unsupported("avg_pool2d with divisor_override")
    return ctx.op("AveragePool", ctx.tensor(a["self"]), **_pool_attrs(a, 2),
                  count_include_pad=int(bool(a["count_include_pad"])))


@converts(aten._adaptive_avg_pool2d.default)
def _adaptive_avg_pool(ctx: FxConverter, node: Node, a: dict) -> Any:
    x = ctx.tensor(a["self"])
    out = [int(v) for v in a["output_size"]]
    if out == [1, 1]:
        return ctx.op("GlobalAveragePool", x)
    size = x.shape[2:]
    if not all(isinstance(s, int) and s % o == 0 for s, o in zip(size, out)):
        raise Unsupported(f"adaptive pool of {list(size)} to {out} (windows differ)")
    k = [s // o for s, o in zip(size, out)]
    return ctx.op("AveragePool", x, kernel_shape=k, strides=k)


# ---- normalization ------------------------------------------------------------------------
def _param(ctx: FxConverter, arg: Any, size: Any, fill: float, dtype: np.dtype):
    if arg is not None:
        return ctx.tensor(arg)
    if not isinstance(size, int) and not all(isinstance(s, int) for s in size):
        raise Unsupported("a missing affine parameter over a symbolic size")
    return ctx.g.constant(np.full(size, fill, dtype))


def _affine(ctx: FxConverter, a: dict, size: Any) -> tuple:
    """A norm's input, weight and bias (ones and zeros of `size` where torch gave None)."""
    x = ctx.tensor(a["input"])
    size = x.shape[1] if size is None else size
    return (x, _param(ctx, a["weight"], size, 1.0, x.dtype),
            _param(ctx, a["bias"], size, 0.0, x.dtype))


@converts(aten.native_layer_norm.default)
def _layer_norm(ctx: FxConverter, node: Node, a: dict) -> Any:
    shape = [int(v) for v in a["normalized_shape"]]
    x, w, b = _affine(ctx, a, shape)
    y = ctx.op("LayerNormalization", x, w, b, axis=-len(shape), epsilon=float(a["eps"]))
    return y, Missing("layer_norm's mean"), Missing("layer_norm's rstd")


@converts(aten._native_batch_norm_legit_no_training.default)
def _batch_norm(ctx: FxConverter, node: Node, a: dict) -> Any:
    x, w, b = _affine(ctx, a, None)
    y = ctx.op("BatchNormalization", x, w, b, ctx.tensor(a["running_mean"]),
               ctx.tensor(a["running_var"]), epsilon=float(a["eps"]))
    return y, Missing("batch_norm's mean"), Missing("batch_norm's rstd")


@converts(aten.native_group_norm.default)
def _group_norm(ctx: FxConverter, node: Node, a: dict) -> Any:
    x, w, b = _affine(ctx, a, None)
    y = ctx.op("GroupNormalization", x, w, b, num_groups=int(a["group"]),
               epsilon=float(a["eps"]))
    return y, Missing("group_norm's mean"), Missing("group_norm's rstd")


@converts(aten._softmax.default, aten._log_softmax.default)
def _softmax(ctx: FxConverter, node: Node, a: dict) -> Any:
    op = "Softmax" if node.target is aten._softmax.default else "LogSoftmax"
    x = ctx.cast(ctx.tensor(a["self"]), _out_dtype(node))
    return ctx.op(op, x, axis=int(a["dim"]))


# ---- reductions ---------------------------------------------------------------------------
def _axes(ctx: FxConverter, x: Any, dims: Any) -> list[int]:
    rank = len(x.shape)
    if dims is None or (isinstance(dims, (list, tuple)) and len(dims) == 0):
        return list(range(rank))
    dims = [dims] if isinstance(dims, int) else list(dims)
    return sorted(int(d) % max(rank, 1) for d in dims)


def _reduce(op_type: str, dim_key: str = "dim"):
    def convert(ctx: FxConverter, node: Node, a: dict) -> Any:
        dtype = _out_dtype(node)
        x = ctx.tensor(a["self"])
        bool_in = x.dtype == np.bool_
        x = ctx.cast(x, torch.int32 if bool_in else dtype)
        axes = _axes(ctx, x, a.get(dim_key))
        if not axes:  # a 0-d tensor: nothing to reduce
            return ctx.op("Identity", x)
        return ctx.op(op_type, x, np.array(axes, np.int64),
                      keepdims=int(bool(a.get("keepdim", False))))
    return convert


for _t, _o in ((aten.mean.dim, "ReduceMean"), (aten.sum.dim_IntList, "ReduceSum"),
               (aten.amax.default, "ReduceMax"), (aten.amin.default, "ReduceMin"),
               (aten.any.dim, "ReduceMax"), (aten.any.dims, "ReduceMax"),
               (aten.all.dim, "ReduceMin"), (aten.prod.dim_int, "ReduceProd")):
    converts(_t)(_reduce(_o))
for _t, _o in ((aten.mean.default, "ReduceMean"), (aten.sum.default, "ReduceSum"),
               (aten.any.default, "ReduceMax"), (aten.all.default, "ReduceMin")):
    converts(_t)(_reduce(_o, dim_key="all"))  # no dim argument: every axis


@converts(aten.argmax.default, aten.argmin.default)
def _argmax(ctx: FxConverter, node: Node, a: dict) -> Any:
    op = "ArgMax" if node.target is aten.argmax.default else "ArgMin"
    x = ctx.tensor(a["self"])
    if a["dim"] is None:
        x = ctx.op("Reshape", x, np.array([-1], np.int64))
        return ctx.op(op, x, axis=0, keepdims=0)
    return ctx.op(op, x, axis=int(a["dim"]), keepdims=int(bool(a["keepdim"])))


@converts(aten.cumsum.default)
def _cumsum(ctx: FxConverter, node: Node, a: dict) -> Any:
    x = ctx.cast(ctx.tensor(a["self"]), _out_dtype(node))
    return ctx.op("CumSum", x, np.array(int(a["dim"]), np.int64))
