"""TensorFlow's shape, slicing, joining and reduction ops -> IR nodes (see tf_ops).

Reductions, concatenation and padding of a value held as NCHW stay in NCHW with their axes
mapped; the rest read the TensorFlow layout.
"""

from __future__ import annotations

import numpy as np

from ..dtypes import DType, to_onnx
from ..ir import Value
from .tf_context import NCHW_FROM_NHWC, NHWC_FROM_NCHW, TfContext, TfNode, dtype_of, rank
from .tf_ops import (
    INT64_MAX,
    INT64_MIN,
    as_nchw_operand,
    attr_b,
    attr_i,
    attr_ints,
    attr_s,
    axis_in,
    converts,
    i64,
    ints_const,
)

# NHWC axis -> its position in NCHW.
_NCHW_AXIS = {a: NCHW_FROM_NHWC.index(a) for a in range(4)}


@converts("Softmax", "LogSoftmax")
def _softmax(ctx: TfContext, node: TfNode) -> None:
    ctx.result(node, node.op, [ctx.value(ctx.input(node, 0))], axis=-1)


@converts("Mean", "Sum", "Max", "Min", "Prod")
def _reduce(ctx: TfContext, node: TfNode) -> None:
    op = {"Mean": "ReduceMean", "Sum": "ReduceSum", "Max": "ReduceMax", "Min": "ReduceMin",
          "Prod": "ReduceProd"}[node.op]
    ref = ctx.input(node, 0)
    keep = attr_b(node, "keep_dims", False)
    axes = ints_const(ctx, node, 1, "reduction_indices").reshape(-1)
    attrs = {"keepdims": int(keep), "noop_with_empty_axes": 1}
    if ctx.has_nchw(ref):
        mapped = sorted({_NCHW_AXIS[axis_in(node, int(a), 4)] for a in axes})
        kept_tf = [a for a in range(4) if _NCHW_AXIS[a] not in mapped]
        kept_nchw = [NCHW_FROM_NHWC[p] for p in range(4) if p not in mapped]
        # Kept dims, the NCHW result is NCHW; else it is plain when its axes keep TF's order
        # (a global pool [N, H, W, C] -> [N, C]).
        if keep or kept_tf == kept_nchw:
            ctx.result(node, op, [ctx.nchw_forms[ref], i64(ctx, mapped)], nchw=keep, **attrs)
            return
    x = ctx.value(ref)
    r = rank(x)
    axes = [axis_in(node, int(a), r) for a in axes]
    ctx.result(node, op, [x, i64(ctx, axes)], **attrs)


@converts("ConcatV2", "Concat")
def _concat(ctx: TfContext, node: TfNode) -> None:
    if len(node.inputs) < 2:
        raise node.fail(f"has {len(node.inputs)} inputs, at least 2 are needed")
    if node.op == "ConcatV2":
        refs, axis_index = node.inputs[:-1], len(node.inputs) - 1
    else:
        refs, axis_index = node.inputs[1:], 0
    axis = int(ints_const(ctx, node, axis_index, "axis").reshape(-1)[0])
    if any(ctx.has_nchw(r) for r in refs):
        forms = [as_nchw_operand(ctx, r) for r in refs]
        if all(f is not None and rank(f) == 4 for f in forms):
            ctx.result(node, "Concat", forms, nchw=True, axis=_NCHW_AXIS[axis_in(node, axis, 4)])
            return
    values = [ctx.value(r) for r in refs]
    ctx.result(node, "Concat", values, axis=axis_in(node, axis, rank(values[0])))


@converts("Pad", "PadV2", "MirrorPad")
def _pad(ctx: TfContext, node: TfNode) -> None:
    ref = ctx.input(node, 0)
    paddings = ints_const(ctx, node, 1, "paddings")
    if paddings.ndim != 2 or paddings.shape[1] != 2 or (paddings < 0).any():
        raise node.fail(f"paddings of shape {list(paddings.shape)} must be [rank, 2] "
                        f"non-negative sizes")
    mode = "constant"
    if node.op == "MirrorPad":
        tf_mode = attr_s(node, "mode", "")
        if tf_mode != "REFLECT":
            raise node.fail(f"MirrorPad mode '{tf_mode}' is not supported (REFLECT is)")
        mode = "reflect"
    x = ctx.nchw_forms[ref] if ctx.has_nchw(ref) else ctx.value(ref)
    nchw = paddings.shape[0] == 4 and rank(x) == 4 and x.meta.dtype.is_float
    if nchw:
        x, paddings = ctx.nchw(ref), paddings[list(NCHW_FROM_NHWC)]
    inputs: list[Value | None] = [x, i64(ctx, np.concatenate([paddings[:, 0], paddings[:, 1]]))]
    if node.op == "PadV2":
        inputs.append(ctx.value(ctx.input(node, 2)))
    ctx.result(node, "Pad", inputs, nchw=nchw, mode=mode)


@converts("Reshape")
def _reshape(ctx: TfContext, node: TfNode) -> None:
    x = ctx.value(ctx.input(node, 0))
    shape = ctx.value(ctx.input(node, 1))
    attrs = {}
    if shape.is_constant:
        dims = ints_const(ctx, node, 1, "shape").reshape(-1)
        if (dims < -1).any() or (dims == -1).sum() > 1:
            raise node.fail(f"shape {dims.tolist()} has a dim below -1 or more than one -1")
        attrs["allowzero"] = int((dims == 0).any() and not (dims == -1).any())
        shape = i64(ctx, dims)
    elif shape.meta is not None and shape.meta.dtype is not DType.INT64:
        shape = ctx.emit("Cast", [shape], to=to_onnx(DType.INT64))
    ctx.result(node, "Reshape", [x, shape], **attrs)


@converts("Squeeze")
def _squeeze(ctx: TfContext, node: TfNode) -> None:
    x = ctx.value(ctx.input(node, 0))
    dims = attr_ints(node, "squeeze_dims", [])
    if dims:
        r = rank(x)
        ctx.result(node, "Squeeze", [x, i64(ctx, [axis_in(node, d, r) for d in dims])])
    else:
        ctx.result(node, "Squeeze", [x])


@converts("ExpandDims")
def _expand_dims(ctx: TfContext, node: TfNode) -> None:
    x = ctx.value(ctx.input(node, 0))
    dim = ints_const(ctx, node, 1, "dim").reshape(-1)
    if dim.size != 1:
        raise node.fail(f"dim has {dim.size} values, 1 is needed")
    r = rank(x)
    axis = axis_in(node, int(dim[0]), None if r is None else r + 1, "dim")
    ctx.result(node, "Unsqueeze", [x, i64(ctx, [axis])])


@converts("Transpose")
def _transpose(ctx: TfContext, node: TfNode) -> None:
    ref = ctx.input(node, 0)
    perm = [int(p) for p in ints_const(ctx, node, 1, "perm").reshape(-1)]
    if sorted(perm) != list(range(len(perm))):
        raise node.fail(f"perm {perm} is not a permutation")
    if ctx.has_nchw(ref) and len(perm) == 4:
        # Transposing the NHWC view of an NCHW value is one transpose of the NCHW value;
        # an explicit NHWC -> NCHW transpose is then none at all.
        composed = [NHWC_FROM_NCHW[p] for p in perm]
        src = ctx.nchw_forms[ref]
        if composed == [0, 1, 2, 3]:
            ctx.set(node, src)
        else:
            ctx.result(node, "Transpose", [src], perm=composed)
        return
    ctx.result(node, "Transpose", [ctx.value(ref)], perm=perm)


@converts("Shape")
def _shape(ctx: TfContext, node: TfNode) -> None:
    x = ctx.value(ctx.input(node, 0))
    out = dtype_of(node.attr["out_type"].type, f"node '{node.name}'") \
        if "out_type" in node.attr else DType.INT32
    if out is DType.INT64:
        ctx.result(node, "Shape", [x])
    else:
        ctx.result(node, "Cast", [ctx.emit("Shape", [x])], to=to_onnx(out))


@converts("Pack")
def _pack(ctx: TfContext, node: TfNode) -> None:
    if not node.inputs:
        raise node.fail("has no inputs")
    values = [ctx.value(r) for r in node.inputs]
    r = rank(values[0])
    axis = axis_in(node, attr_i(node, "axis", 0), None if r is None else r + 1)
    if all(v.is_constant for v in values):
        try:
            ctx.set(node, ctx.constant(np.stack([v.const for v in values], axis)))
        except ValueError as exc:
            raise node.fail(f"cannot stack its inputs: {exc}") from None
        return
    axes = i64(ctx, [axis])
    if len(values) == 1:
        ctx.result(node, "Unsqueeze", [values[0], axes])
        return
    ctx.result(node, "Concat", [ctx.emit("Unsqueeze", [v, axes]) for v in values], axis=axis)


@converts("StridedSlice")
def _strided_slice(ctx: TfContext, node: TfNode) -> None:
    x = ctx.value(ctx.input(node, 0))
    begin, end, strides = (ints_const(ctx, node, i, what).reshape(-1)
                           for i, what in ((1, "begin"), (2, "end"), (3, "strides")))
    n = begin.size
    if end.size != n or strides.size != n or n > 64:
        raise node.fail(f"begin, end and strides have {n}, {end.size} and {strides.size} "
                        f"values; they must agree (at most 64)")
    if (strides == 0).any():
        raise node.fail(f"strides {strides.tolist()} has a 0")
    masks = {k: attr_i(node, f"{k}_mask", 0) for k in
             ("begin", "end", "ellipsis", "new_axis", "shrink_axis")}

    def bit(mask: str, i: int) -> bool:
        return bool(masks[mask] >> i & 1)

    ellipses = [i for i in range(n) if bit("ellipsis", i)]
    if len(ellipses) > 1:
        raise node.fail(f"ellipsis_mask {masks['ellipsis']} marks more than one ellipsis")
    consumed = sum(1 for i in range(n) if not bit("new_axis", i) and not bit("ellipsis", i))
    r = rank(x)
    spread = 0
    if ellipses:
        if r is None:
            raise node.fail("an ellipsis needs the input's rank, which is not known")
        spread = r - consumed
    if r is not None and (spread < 0 or consumed > r):
        raise node.fail(f"slices {consumed} dims of a tensor of rank {r}")
    starts, ends, axes, steps, squeeze, unsqueeze = [], [], [], [], [], []
    dim = out = 0
    for i in range(n):
        if bit("ellipsis", i):
            dim, out = dim + spread, out + spread
        elif bit("new_axis", i):
            unsqueeze.append(out)
            out += 1
        elif bit("shrink_axis", i):
            b = int(begin[i])
            starts.append(b)
            ends.append(b + 1 if b != -1 else INT64_MAX)
            axes.append(dim)
            steps.append(1)
            squeeze.append(dim)
            dim += 1
        else:
            s = int(strides[i])
            full_begin, full_end = bit("begin", i), bit("end", i)
            if not (full_begin and full_end and s == 1):
                starts.append((0 if s > 0 else INT64_MAX) if full_begin else int(begin[i]))
                ends.append((INT64_MAX if s > 0 else INT64_MIN) if full_end else int(end[i]))
                axes.append(dim)
                steps.append(s)
            dim, out = dim + 1, out + 1
    steps_out: list[tuple[str, list[Value]]] = []
    if axes:
        steps_out.append(("Slice", [i64(ctx, starts), i64(ctx, ends), i64(ctx, axes),
                                    i64(ctx, steps)]))
    if squeeze:
        steps_out.append(("Squeeze", [i64(ctx, squeeze)]))
    if unsqueeze:
        steps_out.append(("Unsqueeze", [i64(ctx, unsqueeze)]))
    if not steps_out:
        ctx.set(node, x)
        return
    for op, extra in steps_out[:-1]:
        x = ctx.emit(op, [x, *extra])
    op, extra = steps_out[-1]
    ctx.result(node, op, [x, *extra])


@converts("Slice")
def _slice(ctx: TfContext, node: TfNode) -> None:
    x = ctx.value(ctx.input(node, 0))
    begin = ints_const(ctx, node, 1, "begin").reshape(-1)
    size = ints_const(ctx, node, 2, "size").reshape(-1)
    if begin.size != size.size or (begin < 0).any() or (size < -1).any():
        raise node.fail(f"begin {begin.tolist()} and size {size.tolist()} must agree, "
                        f"begin >= 0 and size >= -1")
    ends = np.where(size == -1, INT64_MAX, begin + size)
    ctx.result(node, "Slice", [x, i64(ctx, begin), i64(ctx, ends),
                               i64(ctx, np.arange(begin.size))])


@converts("GatherV2")
def _gather(ctx: TfContext, node: TfNode) -> None:
    if attr_i(node, "batch_dims", 0) != 0:
        raise node.fail("batch_dims other than 0 is not supported")
    params = ctx.value(ctx.input(node, 0))
    indices = ctx.value(ctx.input(node, 1))
    axis = int(ints_const(ctx, node, 2, "axis").reshape(-1)[0])
    ctx.result(node, "Gather", [params, indices], axis=axis_in(node, axis, rank(params)))


@converts("Tile")
def _tile(ctx: TfContext, node: TfNode) -> None:
    x = ctx.value(ctx.input(node, 0))
    reps = ctx.value(ctx.input(node, 1))
    if reps.meta is not None and reps.meta.dtype is not DType.INT64:
        reps = ctx.emit("Cast", [reps], to=to_onnx(DType.INT64))
    ctx.result(node, "Tile", [x, reps])


@converts("ArgMax", "ArgMin")
def _arg(ctx: TfContext, node: TfNode) -> None:
    x = ctx.value(ctx.input(node, 0))
    axis = axis_in(node, int(ints_const(ctx, node, 1, "dimension").reshape(-1)[0]), rank(x))
    out = dtype_of(node.attr["output_type"].type, f"node '{node.name}'") \
        if "output_type" in node.attr else DType.INT64
    if out is DType.INT64:
        ctx.result(node, node.op, [x], axis=axis, keepdims=0)
    else:
        ctx.result(node, "Cast", [ctx.emit(node.op, [x], axis=axis, keepdims=0)],
                   to=to_onnx(out))
