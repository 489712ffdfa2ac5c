"""TensorFlow op -> IR nodes: one converter per op type, `CONVERTERS[op](ctx, node)`.

The IR's ops are ONNX's (newest opset). A converter reads its inputs from the context in
the form it wants: `ctx.nchw(ref)` for convolutions and pools (NHWC data becomes NCHW),
`ctx.value(ref)` for the TensorFlow layout, or `_follow` for ops that run in either layout
and keep a value that is held as NCHW in NCHW (tf_import's module comment says why).
Every number read from an attribute or a constant operand is checked here, and an error
names the node.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ..dtypes import to_onnx
from ..ir import Value
from .tf_context import NCHW_FROM_NHWC, TfContext, TfNode, dtype_of, rank, tensor_from_tf

INT64_MAX = np.iinfo(np.int64).max
INT64_MIN = np.iinfo(np.int64).min
MAX_WINDOW = 1 << 20  # strides, dilations, pool windows
Converter = Callable[[TfContext, TfNode], None]
CONVERTERS: dict[str, Converter] = {}


def converts(*names: str) -> Callable[[Converter], Converter]:
    def register(fn: Converter) -> Converter:
        for name in names:
            CONVERTERS[name] = fn
        return fn
    return register


# ---- attributes ----------------------------------------------------------------------------
def attr_s(node: TfNode, key: str, default: str) -> str:
    if key not in node.attr:
        return default
    try:
        return node.attr[key].s.decode()
    except UnicodeDecodeError:
        raise node.fail(f"attribute '{key}' is not text") from None


def attr_i(node: TfNode, key: str, default: int) -> int:
    return int(node.attr[key].i) if key in node.attr else default


def attr_b(node: TfNode, key: str, default: bool) -> bool:
    return bool(node.attr[key].b) if key in node.attr else default


def attr_f(node: TfNode, key: str, default: float) -> float:
    return float(node.attr[key].f) if key in node.attr else default


def attr_ints(node: TfNode, key: str, default: Sequence[int] | None = None) -> list[int]:
    if key not in node.attr:
        if default is None:
            raise node.fail(f"attribute '{key}' is missing")
        return list(default)
    return [int(v) for v in node.attr[key].list.i]


def window(node: TfNode, key: str, fmt: str, default: Sequence[int] | None = None
           ) -> list[int]:
    """The H and W entries of a 4-entry strides / dilations / ksize list; N and C must be 1."""
    vals = attr_ints(node, key, default)
    if len(vals) != 4:
        raise node.fail(f"attribute '{key}' has {len(vals)} entries, 4 are needed")
    h, w = (1, 2) if fmt == "NHWC" else (2, 3)
    n, c = (0, 3) if fmt == "NHWC" else (0, 1)
    if vals[n] != 1 or vals[c] != 1:
        raise node.fail(f"attribute '{key}' {vals} moves along the batch or channel axis")
    if not all(1 <= v <= MAX_WINDOW for v in vals):
        raise node.fail(f"attribute '{key}' {vals} has an entry outside 1..{MAX_WINDOW}")
    return [vals[h], vals[w]]


def data_format(node: TfNode) -> str:
    fmt = attr_s(node, "data_format", "NHWC")
    if fmt not in ("NHWC", "NCHW"):
        raise node.fail(f"data_format '{fmt}' is not supported (NHWC or NCHW)")
    return fmt


def ints_const(ctx: TfContext, node: TfNode, i: int, what: str) -> np.ndarray:
    arr = ctx.const(node, i)
    if arr.dtype.kind not in "iu":
        raise node.fail(f"{what} (input {i}) has dtype {arr.dtype}, integers are needed")
    return arr.astype(np.int64)


def i64(ctx: TfContext, values: Sequence[int] | np.ndarray) -> Value:
    return ctx.constant(np.asarray(values, np.int64).reshape(-1))


def scalar_like(ctx: TfContext, x: Value, value: float) -> Value:
    dtype = x.meta.dtype.numpy if x.meta is not None else np.float32
    return ctx.constant(np.asarray(value, dtype))


def axis_in(node: TfNode, axis: int, r: int | None, what: str = "axis") -> int:
    if r is None:
        if axis < 0:
            raise node.fail(f"{what} {axis} counts from the end of a tensor of unknown rank")
        return axis
    if not -r <= axis < r:
        raise node.fail(f"{what} {axis} is outside a tensor of rank {r}")
    return axis % r


# ---- layout-following helpers -------------------------------------------------------------
def follow(ctx: TfContext, ref: str) -> tuple[Value, bool]:
    """The NCHW form when the value is held as NCHW, else the plain one."""
    if ctx.has_nchw(ref):
        return ctx.nchw_forms[ref], True
    return ctx.value(ref), False


def as_nchw_operand(ctx: TfContext, ref: str) -> Value | None:
    """An operand broadcast against a 4-D NHWC value, in NCHW terms; None if it cannot be."""
    if ctx.has_nchw(ref):
        return ctx.nchw_forms[ref]
    v = ctx.value(ref)
    arr = ctx.evaluate(v)
    if arr is not None and arr.ndim <= 4:
        if arr.ndim == 0:
            return v
        return ctx.constant(np.transpose(arr.reshape((1,) * (4 - arr.ndim) + arr.shape),
                                         NCHW_FROM_NHWC))
    r = rank(v)
    if r == 0:
        return v
    if r == 4:
        return ctx.nchw(ref)
    if r is None or r > 4:
        return None
    # [C] (a batch norm's computed scale), [W, C], ...: leading ones to rank 4, then NCHW.
    v = ctx.emit("Unsqueeze", [v, i64(ctx, range(4 - r))])
    return ctx.emit("Transpose", [v], perm=list(NCHW_FROM_NHWC))


def broadcast_forms(ctx: TfContext, refs: Sequence[str]) -> tuple[list[Value], bool]:
    """The inputs of an op that broadcasts them, and whether that is in NCHW: it is when one
    input is held so and every other one can follow (a constant, a scalar, another NCHW
    value, a smaller computed one), else the inputs are as TensorFlow lays them out."""
    if any(ctx.has_nchw(r) for r in refs):
        forms = [as_nchw_operand(ctx, r) for r in refs]
        if all(f is not None for f in forms):
            return forms, True
    return [ctx.value(r) for r in refs], False


def elementwise(ctx: TfContext, node: TfNode, op: str, refs: Sequence[str], **attrs: Any
                ) -> None:
    forms, nchw = broadcast_forms(ctx, refs)
    ctx.result(node, op, forms, nchw=nchw, **attrs)


def unary(op: str, **attrs: Any) -> Converter:
    def convert(ctx: TfContext, node: TfNode) -> None:
        x, nchw = follow(ctx, ctx.input(node, 0))
        ctx.result(node, op, [x], nchw=nchw, **attrs)
    return convert


def binary(op: str) -> Converter:
    def convert(ctx: TfContext, node: TfNode) -> None:
        elementwise(ctx, node, op, [ctx.input(node, 0), ctx.input(node, 1)])
    return convert


for _tf, _ir in {"Relu": "Relu", "Sigmoid": "Sigmoid", "Tanh": "Tanh", "Exp": "Exp",
                 "Log": "Log", "Neg": "Neg", "Abs": "Abs", "Sqrt": "Sqrt", "Floor": "Floor",
                 "Ceil": "Ceil", "Erf": "Erf", "Softplus": "Softplus", "Sign": "Sign",
                 "Reciprocal": "Reciprocal", "Inv": "Reciprocal", "Elu": "Elu",
                 "Selu": "Selu"}.items():
    CONVERTERS[_tf] = unary(_ir)
for _tf, _ir in {"Add": "Add", "AddV2": "Add", "Sub": "Sub", "Mul": "Mul", "RealDiv": "Div",
                 "Maximum": "Max", "Minimum": "Min", "Pow": "Pow"}.items():
    CONVERTERS[_tf] = binary(_ir)


@converts("LeakyRelu")
def _leaky_relu(ctx: TfContext, node: TfNode) -> None:
    unary("LeakyRelu", alpha=attr_f(node, "alpha", 0.2))(ctx, node)


@converts("Relu6")
def _relu6(ctx: TfContext, node: TfNode) -> None:
    x, nchw = follow(ctx, ctx.input(node, 0))
    ctx.result(node, "Clip", [x, scalar_like(ctx, x, 0.0), scalar_like(ctx, x, 6.0)],
               nchw=nchw)


@converts("Rsqrt")
def _rsqrt(ctx: TfContext, node: TfNode) -> None:
    x, nchw = follow(ctx, ctx.input(node, 0))
    ctx.result(node, "Reciprocal", [ctx.emit("Sqrt", [x])], nchw=nchw)


@converts("Erfc")
def _erfc(ctx: TfContext, node: TfNode) -> None:
    x, nchw = follow(ctx, ctx.input(node, 0))
    ctx.result(node, "Sub", [scalar_like(ctx, x, 1.0), ctx.emit("Erf", [x])], nchw=nchw)


@converts("Square")
def _square(ctx: TfContext, node: TfNode) -> None:
    x, nchw = follow(ctx, ctx.input(node, 0))
    ctx.result(node, "Mul", [x, x], nchw=nchw)


@converts("SquaredDifference")
def _squared_difference(ctx: TfContext, node: TfNode) -> None:
    forms, nchw = broadcast_forms(ctx, [ctx.input(node, 0), ctx.input(node, 1)])
    diff = ctx.emit("Sub", forms)
    ctx.result(node, "Mul", [diff, diff], nchw=nchw)


@converts("AddN")
def _add_n(ctx: TfContext, node: TfNode) -> None:
    if not node.inputs:
        raise node.fail("has no inputs")
    elementwise(ctx, node, "Sum", node.inputs)


@converts("BiasAdd", "BiasAddV1")
def _bias_add(ctx: TfContext, node: TfNode) -> None:
    x_ref = ctx.input(node, 0)
    bias = ctx.value(ctx.input(node, 1))
    if data_format(node) == "NHWC":
        elementwise(ctx, node, "Add", [x_ref, node.inputs[1]])
        return
    x = ctx.value(x_ref)
    r = rank(x)
    if r is None:
        raise node.fail("an NCHW BiasAdd needs its input's rank")
    shape = i64(ctx, [-1] + [1] * (r - 2))
    ctx.result(node, "Add", [x, ctx.emit("Reshape", [bias, shape])])


# ---- identity-like, constants, inputs ------------------------------------------------------
def alias(ctx: TfContext, node: TfNode, ref: str, k: int = 0) -> None:
    """Output k of `node` is `ref`, in the forms it is held in (neither is made)."""
    if ctx.has_nchw(ref):
        ctx.set(node, ctx.nchw_forms[ref], nchw=True, k=k)
    if ref in ctx.plain or not ctx.has_nchw(ref):
        ctx.set(node, ctx.value(ref), k=k)


@converts("Identity", "StopGradient", "Snapshot", "PreventGradient",
          "PlaceholderWithDefault", "CheckNumerics", "EnsureShape")
def _identity(ctx: TfContext, node: TfNode) -> None:
    alias(ctx, node, ctx.input(node, 0))


@converts("IdentityN")
def _identity_n(ctx: TfContext, node: TfNode) -> None:
    for k, ref in enumerate(node.inputs):
        alias(ctx, node, ref, k)


@converts("NoOp")
def _no_op(ctx: TfContext, node: TfNode) -> None:
    return None


@converts("Const")
def _const(ctx: TfContext, node: TfNode) -> None:
    if "value" not in node.attr or not node.attr["value"].HasField("tensor"):
        raise node.fail("has no 'value' tensor")
    arr = tensor_from_tf(node.attr["value"].tensor, f"node '{node.name}' (Const)")
    ctx.set(node, ctx.constant(arr, name=node.name))


@converts("Placeholder")
def _placeholder(ctx: TfContext, node: TfNode) -> None:
    ctx.placeholder(node)


@converts("Cast")
def _cast(ctx: TfContext, node: TfNode) -> None:
    if "DstT" not in node.attr:
        raise node.fail("has no DstT attribute")
    to = dtype_of(node.attr["DstT"].type, f"node '{node.name}' (Cast)")
    x, nchw = follow(ctx, ctx.input(node, 0))
    ctx.result(node, "Cast", [x], nchw=nchw, to=to_onnx(to))


# ---- matrix products -----------------------------------------------------------------------
def _transposed(ctx: TfContext, v: Value, node: TfNode) -> Value:
    """v with its last two axes swapped."""
    if v.is_constant:
        if v.const.ndim < 2:
            raise node.fail(f"operand '{v.name}' has rank {v.const.ndim}, 2 or more needed")
        return ctx.constant(np.swapaxes(v.const, -1, -2))
    r = rank(v)
    if r is None or r < 2:
        raise node.fail(f"operand '{v.name}' has rank {r}; a transposed operand needs a "
                        f"known rank of 2 or more")
    return ctx.emit("Transpose", [v], perm=list(range(r - 2)) + [r - 1, r - 2])


@converts("MatMul", "BatchMatMul", "BatchMatMulV2", "BatchMatMulV3")
def _matmul(ctx: TfContext, node: TfNode) -> None:
    ta, tb = ("transpose_a", "transpose_b") if node.op == "MatMul" else ("adj_x", "adj_y")
    a = ctx.value(ctx.input(node, 0))
    b = ctx.value(ctx.input(node, 1))
    if attr_b(node, ta, False):
        a = _transposed(ctx, a, node)
    if attr_b(node, tb, False):
        b = _transposed(ctx, b, node)
    ctx.result(node, "MatMul", [a, b])


# ---- convolutions and pools ----------------------------------------------------------------
def padding_attrs(ctx: TfContext, node: TfNode, x: Value, kernel: Sequence[int],
                  strides: Sequence[int], dilations: Sequence[int], fmt: str
                  ) -> dict[str, Any]:
    """TensorFlow's padding as the IR's: explicit pads where the spatial sizes are known
    (SAME puts the odd pixel after, as ONNX's SAME_UPPER does), else auto_pad."""
    mode = attr_s(node, "padding", "")
    if mode == "VALID":
        return {"pads": [0, 0, 0, 0]}
    if mode == "EXPLICIT":
        vals = attr_ints(node, "explicit_paddings")
        if len(vals) != 8 or any(not 0 <= v <= MAX_WINDOW for v in vals):
            raise node.fail(f"explicit_paddings {vals} must be 8 values within 0..{MAX_WINDOW}")
        pairs = [vals[k:k + 2] for k in range(0, 8, 2)]
        n, c, h, w = (0, 3, 1, 2) if fmt == "NHWC" else (0, 1, 2, 3)
        if pairs[n] != [0, 0] or pairs[c] != [0, 0]:
            raise node.fail(f"explicit_paddings {vals} pad the batch or channel axis")
        return {"pads": [pairs[h][0], pairs[w][0], pairs[h][1], pairs[w][1]]}
    if mode != "SAME":
        raise node.fail(f"padding '{mode}' is not supported (SAME, VALID or EXPLICIT)")
    shape = x.meta.shape if x.meta is not None else None
    if shape is None or len(shape) != 4 or not all(isinstance(d, int) for d in shape[2:]):
        return {"auto_pad": "SAME_UPPER"}
    begins, ends = [], []
    for size, k, s, d in zip(shape[2:], kernel, strides, dilations):
        total = max((-(-size // s) - 1) * s + (k - 1) * d + 1 - size, 0)
        begins.append(total // 2)
        ends.append(total - total // 2)
    return {"pads": begins + ends}


def _filter(ctx: TfContext, node: TfNode, perm: Sequence[int]) -> Value:
    """An HWIO filter as the IR's OIHW (or IOHW) weight."""
    f = ctx.value(ctx.input(node, 1))
    if f.is_constant:
        if f.const.ndim != 4:
            raise node.fail(f"filter '{f.name}' has rank {f.const.ndim}, 4 is needed")
        return ctx.constant(np.ascontiguousarray(np.transpose(f.const, perm)))
    if rank(f) not in (4, None):
        raise node.fail(f"filter '{f.name}' has rank {rank(f)}, 4 is needed")
    return ctx.emit("Transpose", [f], perm=list(perm))


def _static_dims(node: TfNode, v: Value, what: str) -> tuple[int, ...]:
    if v.meta is None or not v.meta.is_static or v.meta.rank != 4:
        raise node.fail(f"{what} '{v.name}' needs a known 4-D shape, has "
                        f"{v.meta.shape if v.meta else 'none'}")
    return tuple(int(d) for d in v.meta.shape)


def _data(ctx: TfContext, node: TfNode, fmt: str, i: int = 0) -> Value:
    ref = ctx.input(node, i)
    return ctx.nchw(ref) if fmt == "NHWC" else ctx.value(ref)


@converts("Conv2D")
def _conv2d(ctx: TfContext, node: TfNode) -> None:
    fmt = data_format(node)
    x = _data(ctx, node, fmt)
    kh, kw, cin, _ = _static_dims(node, ctx.value(ctx.input(node, 1)), "filter")
    w = _filter(ctx, node, (3, 2, 0, 1))
    strides = window(node, "strides", fmt)
    dilations = window(node, "dilations", fmt, [1, 1, 1, 1])
    group = 1
    if x.meta is not None and x.meta.shape is not None and isinstance(x.meta.shape[1], int):
        channels = x.meta.shape[1]
        if cin < 1 or channels % cin:
            raise node.fail(f"the input's {channels} channels are not a multiple of the "
                            f"filter's {cin}")
        group = channels // cin
    ctx.result(node, "Conv", [x, w], nchw=fmt == "NHWC", kernel_shape=[kh, kw],
               strides=strides, dilations=dilations, group=group,
               **padding_attrs(ctx, node, x, (kh, kw), strides, dilations, fmt))


@converts("DepthwiseConv2dNative")
def _depthwise(ctx: TfContext, node: TfNode) -> None:
    fmt = data_format(node)
    x = _data(ctx, node, fmt)
    f = ctx.const(node, 1)
    if f.ndim != 4:
        raise node.fail(f"the filter has rank {f.ndim}, 4 is needed")
    kh, kw, cin, mult = f.shape
    # Output channel c * mult + m reads input channel c: groups of one input channel.
    w = ctx.constant(np.ascontiguousarray(np.transpose(f, (2, 3, 0, 1)))
                     .reshape(cin * mult, 1, kh, kw))
    strides = window(node, "strides", fmt)
    dilations = window(node, "dilations", fmt, [1, 1, 1, 1])
    ctx.result(node, "Conv", [x, w], nchw=fmt == "NHWC", kernel_shape=[kh, kw],
               strides=strides, dilations=dilations, group=int(cin),
               **padding_attrs(ctx, node, x, (kh, kw), strides, dilations, fmt))


def _known_entries(v: Value) -> list[int | None]:
    """The entries of a 1-D integer vector that are constants, None for the others: a
    Pack of a computed batch and constant sizes is a Concat of Unsqueezed scalars."""
    if v.is_constant:
        return [int(d) for d in np.asarray(v.const).reshape(-1)]
    p = v.producer
    if p is None or p.op_type != "Concat":
        return [None] * (v.meta.shape[0] if v.meta is not None and v.meta.is_static
                         and v.meta.rank == 1 else 0)
    out: list[int | None] = []
    for part in p.inputs:
        q = part.producer if part is not None else None
        src = q.inputs[0] if q is not None and q.op_type == "Unsqueeze" else part
        if src is not None and src.is_constant and np.asarray(src.const).size == 1:
            out.append(int(np.asarray(src.const).reshape(-1)[0]))
        else:
            out.append(None)
    return out


@converts("Conv2DBackpropInput")
def _conv2d_backprop_input(ctx: TfContext, node: TfNode) -> None:
    fmt = data_format(node)
    sizes = np.asarray(_known_entries(ctx.value(ctx.input(node, 0))), dtype=object)
    spatial = sizes[[1, 2]] if fmt == "NHWC" and sizes.size == 4 else sizes[[2, 3]] \
        if sizes.size == 4 else []
    if len(spatial) != 2 or any(d is None or d < 0 for d in spatial):
        raise node.fail(f"input_sizes must be 4 sizes whose height and width are constants "
                        f"(a batch computed from a Shape is fine), got {sizes.tolist()}")
    x = _data(ctx, node, fmt, 2)
    f = ctx.const(node, 1)
    if f.ndim != 4:
        raise node.fail(f"the filter has rank {f.ndim}, 4 is needed")
    kh, kw = f.shape[:2]
    w = ctx.constant(np.ascontiguousarray(np.transpose(f, (3, 2, 0, 1))))
    strides = window(node, "strides", fmt)
    dilations = window(node, "dilations", fmt, [1, 1, 1, 1])
    out_hw = [int(d) for d in spatial]
    xs = x.meta.shape if x.meta is not None else None
    if xs is None or len(xs) != 4 or not all(isinstance(d, int) for d in xs[2:]):
        raise node.fail("needs the spatial size of out_backprop")
    mode = attr_s(node, "padding", "")
    if mode not in ("SAME", "VALID"):
        raise node.fail(f"padding '{mode}' is not supported here (SAME or VALID)")
    pads_b, pads_e, extra = [], [], []
    for size, n_in, k, s, d in zip(out_hw, xs[2:], (kh, kw), strides, dilations):
        k_eff = (k - 1) * d + 1
        fwd_total = max((-(-size // s) - 1) * s + k_eff - size, 0) if mode == "SAME" else 0
        full = (n_in - 1) * s + k_eff  # the transposed convolution before cropping
        begin = fwd_total // 2
        end = full - int(size) - begin
        if end < 0 and -end >= s:
            raise node.fail(f"input_sizes {out_hw} do not fit out_backprop "
                            f"{list(xs)} with strides {strides}")
        pads_b.append(begin)
        pads_e.append(max(end, 0))
        extra.append(max(-end, 0))
    ctx.result(node, "ConvTranspose", [x, w], nchw=fmt == "NHWC", kernel_shape=[kh, kw],
               strides=strides, dilations=dilations, pads=pads_b + pads_e,
               output_padding=extra)


@converts("MaxPool", "AvgPool")
def _pool(ctx: TfContext, node: TfNode) -> None:
    fmt = data_format(node)
    x = _data(ctx, node, fmt)
    kernel = window(node, "ksize", fmt)
    strides = window(node, "strides", fmt)
    extra = {"count_include_pad": 0} if node.op == "AvgPool" else {}
    ctx.result(node, "MaxPool" if node.op == "MaxPool" else "AveragePool", [x],
               nchw=fmt == "NHWC", kernel_shape=kernel, strides=strides, **extra,
               **padding_attrs(ctx, node, x, kernel, strides, (1, 1), fmt))


@converts("FusedBatchNorm", "FusedBatchNormV2", "FusedBatchNormV3")
def _batch_norm(ctx: TfContext, node: TfNode) -> None:
    if attr_b(node, "is_training", True):
        raise node.fail("is_training is set: batch statistics are a training graph's; "
                        "freeze the inference graph (is_training=false)")
    fmt = data_format(node)
    x = _data(ctx, node, fmt)
    params = [ctx.value(ctx.input(node, i)) for i in range(1, 5)]
    ctx.result(node, "BatchNormalization", [x, *params], nchw=fmt == "NHWC",
               epsilon=attr_f(node, "epsilon", 1e-4))


__all__ = ["CONVERTERS", "attr_b", "attr_i", "attr_ints", "attr_s", "axis_in", "converts",
           "elementwise", "follow", "i64", "ints_const", "scalar_like"]

