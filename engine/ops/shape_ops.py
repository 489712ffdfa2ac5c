"""Ops that move data without arithmetic: Reshape, Flatten, (Un)Squeeze, Transpose, Concat,
Split, Expand, Tile, Shape, Size, Dropout, DepthToSpace, SpaceToDepth."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from ..dtypes import DType
from ..ir import Dim, Node, TensorMeta
from . import attrs as A
from . import symdims
from .device_helpers import kernel, reject, view
from .kernel_utils import ints
from .registry import DeviceKernel, Layout, OpSchema, register, shape_error
from .shape_helpers import (
    broadcast,
    check_dtype,
    const_ints,
    dtype_in,
    meta_in,
    norm_axes,
    norm_axis,
    out,
    shape_in,
    shape_value,
    sym,
    symbolic_shape,
    value_rank,
)


def dim_prod(node: Node, dims: Sequence[Dim], pos: int | str) -> Dim:
    """The product of dims: an int, or a product of symbols (symdims)."""
    return symdims.mul(*dims)


def reshape_dims(node: Node, src: Sequence[Dim], target: Sequence[Dim],
                 allowzero: bool) -> tuple[Dim, ...]:
    dims: list[Dim] = []
    for i, t in enumerate(target):
        if isinstance(t, str):
            dims.append(t)
        elif t == 0 and not allowzero:
            if i >= len(src):
                raise shape_error(node, f"shape entry {i} is 0 (copy) but the input has rank "
                                        f"{len(src)}")
            dims.append(src[i])
        elif t < -1:
            raise shape_error(node, f"shape entry {t} is invalid (expected -1, 0 or a size)")
        else:
            dims.append(t)
    if target.count(-1) > 1:
        raise shape_error(node, f"shape {list(target)} has more than one -1")
    # The -1 is the input's element count over the rest, as a product of symbols where
    # symbols take part ((b, s, 12, 64) -> (0, 0, -1) is (b, s, 768); (b, 8, 8, C) ->
    # (-1, 16, C) is 4*b), or a fresh symbol where that does not divide exactly.
    num = symdims.mul(*src)
    den = symdims.mul(*(d for d in dims if d != -1))
    if -1 in dims:
        k = dims.index(-1)
        q = symdims.div(num, den)
        if q is None and isinstance(num, int) and isinstance(den, int):
            raise shape_error(node, f"cannot reshape {list(src)} to {list(target)}")
        dims[k] = sym(node, k) if q is None else q
    elif isinstance(num, int) and isinstance(den, int) and num != den:
        raise shape_error(node, f"cannot reshape {list(src)} ({num} elements) to "
                                f"{list(target)} ({den} elements)")
    return tuple(dims)


def _reshape_infer(node: Node, a: dict[str, Any]) -> list[TensorMeta]:
    m = meta_in(node, 0)
    check_dtype(node, 1, {DType.INT64}, "shape")
    target = shape_value(node, 1)
    if target is None:
        return [out(m.dtype, symbolic_shape(node, value_rank(node, 1)))]
    if m.shape is None:
        if 0 in target and not a["allowzero"] or -1 in target:
            return [out(m.dtype, tuple(sym(node, i) if t in (0, -1) else t
                                       for i, t in enumerate(target)))]
        return [out(m.dtype, target)]
    return [out(m.dtype, reshape_dims(node, m.shape, target, bool(a["allowzero"])))]


def _reshape(ins: list[Any], a: dict[str, Any]) -> list[np.ndarray]:
    x = ins[0]
    target = ints(ins[1])
    # ONNX's rules, checked here: numpy reads any negative entry as the one to infer and
    # indexes past the rank for a 0, where ONNX refuses both.
    for i, t in enumerate(target):
        if t < -1:
            raise ValueError(f"shape entry {t} is invalid (expected -1, 0 or a size)")
        if t == 0 and not a["allowzero"] and i >= x.ndim:
            raise ValueError(f"shape entry {i} is 0 (copy) but the input has rank {x.ndim}")
    if target.count(-1) > 1:
        raise ValueError(f"shape {target} has more than one -1")
    if not a["allowzero"]:
        target = [x.shape[i] if t == 0 else t for i, t in enumerate(target)]
    try:
        return [x.reshape(target)]
    except ValueError:
        raise ValueError(f"cannot reshape {list(x.shape)} ({x.size} elements) to "
                         f"{target}") from None


register(OpSchema("Reshape", 2, 2, _reshape_infer, _reshape, attrs={"allowzero": A.i(0)},
                  device=view, alias={0: 0}))


# ---- Flatten ------------------------------------------------------------------------------
def _flatten_infer(node: Node, a: dict[str, Any]) -> list[TensorMeta]:
    m = meta_in(node, 0)
    if m.shape is None:
        return [out(m.dtype, (sym(node, 0), sym(node, 1)))]
    r = len(m.shape)
    axis = a["axis"] + r if a["axis"] < 0 else a["axis"]
    if not 0 <= axis <= r:
        raise shape_error(node, f"axis {a['axis']} is out of range for rank {r}")
    return [out(m.dtype, (dim_prod(node, m.shape[:axis], 0), dim_prod(node, m.shape[axis:], 1)))]


def _flatten(ins: list[Any], a: dict[str, Any]) -> list[np.ndarray]:
    x = ins[0]
    axis = a["axis"] + x.ndim if a["axis"] < 0 else a["axis"]
    lead = math.prod(x.shape[:axis])
    return [x.reshape(lead, -1) if lead else x.reshape(0, math.prod(x.shape[axis:]))]


register(OpSchema("Flatten", 1, 1, _flatten_infer, _flatten, attrs={"axis": A.i(1)},
                  device=view, alias={0: 0}))


# ---- Squeeze / Unsqueeze ------------------------------------------------------------------
def _squeeze_infer(node: Node, a: dict[str, Any]) -> list[TensorMeta]:
    m = meta_in(node, 0)
    axes = const_ints(node, 1)
    if node.input(1) is not None and axes is None:
        n = value_rank(node, 1)
        rank = None if m.shape is None or n is None else len(m.shape) - n
        return [out(m.dtype, symbolic_shape(node, rank))]
    if m.shape is None:
        return [out(m.dtype, None)]
    if axes is None:
        if any(not isinstance(d, int) for d in m.shape):
            return [out(m.dtype, None)]
        return [out(m.dtype, tuple(d for d in m.shape if d != 1))]
    axes = norm_axes(node, axes, len(m.shape))
    for ax in axes:
        if isinstance(m.shape[ax], int) and m.shape[ax] != 1:
            raise shape_error(node, f"cannot squeeze axis {ax} of size {m.shape[ax]}")
    return [out(m.dtype, tuple(d for i, d in enumerate(m.shape) if i not in axes))]


def _squeeze(ins: list[Any], a: dict[str, Any]) -> list[np.ndarray]:
    x = ins[0]
    axes = (None if len(ins) < 2 or ins[1] is None
            else tuple(int(v) for v in np.asarray(ins[1]).reshape(-1)))
    return [np.squeeze(x, axis=axes) if axes is None or axes else x]


def _unsqueeze_infer(node: Node, a: dict[str, Any]) -> list[TensorMeta]:
    m = meta_in(node, 0)
    axes = const_ints(node, 1)
    if axes is None:
        n = value_rank(node, 1)
        rank = None if m.shape is None or n is None else len(m.shape) + n
        return [out(m.dtype, symbolic_shape(node, rank))]
    if m.shape is None:
        return [out(m.dtype, None)]
    rank = len(m.shape) + len(axes)
    axes = norm_axes(node, axes, rank)
    rest = iter(m.shape)
    return [out(m.dtype, tuple(1 if i in axes else next(rest) for i in range(rank)))]


def _unsqueeze(ins: list[Any], a: dict[str, Any]) -> list[np.ndarray]:
    x = ins[0]
    raw = np.asarray(ins[1]).reshape(-1)
    rank = x.ndim + len(raw)
    axes = sorted(int(v) + rank if v < 0 else int(v) for v in raw)
    return [np.expand_dims(x, tuple(axes))]


register(OpSchema("Squeeze", 1, 2, _squeeze_infer, _squeeze, device=view, alias={0: 0}))
register(OpSchema("Unsqueeze", 2, 2, _unsqueeze_infer, _unsqueeze, device=view, alias={0: 0}))


# ---- Transpose ----------------------------------------------------------------------------
def _perm(a: dict[str, Any], rank: int) -> list[int]:
    perm = a.get("perm")
    return list(range(rank))[::-1] if perm is None else [int(p) for p in perm]


def _transpose_infer(node: Node, a: dict[str, Any]) -> list[TensorMeta]:
    m = meta_in(node, 0)
    if m.shape is None:
        return [out(m.dtype, None if a.get("perm") is None else symbolic_shape(
            node, len(a["perm"])))]
    perm = _perm(a, len(m.shape))
    if sorted(norm_axes(node, perm, len(m.shape), "perm")) != list(range(len(m.shape))):
        raise shape_error(node, f"perm {perm} is not a permutation of rank {len(m.shape)}")
    perm = [p % len(m.shape) for p in perm]
    return [out(m.dtype, tuple(m.shape[p] for p in perm))]


def _transpose_device(node: Node, a: dict[str, Any]) -> DeviceKernel | str:
    why = reject(node)
    if why:
        return why
    rank = len(node.inputs[0].meta.shape)
    return kernel("Transpose", {"perm": [p % rank for p in _perm(a, rank)]}, (0,))


register(OpSchema("Transpose", 1, 1, _transpose_infer,
                  lambda ins, a: [np.transpose(ins[0], _perm(a, ins[0].ndim))],
                  attrs={"perm": A.ints()}, device=_transpose_device))


# ---- Concat ----------------------------------------------------------------------------------
def _concat_infer(node: Node, a: dict[str, Any]) -> list[TensorMeta]:
    ins = [i for i in range(len(node.inputs)) if node.input(i) is not None]
    dt = dtype_in(node, ins[0])
    shapes = []
    for i in ins:
        if dtype_in(node, i) is not dt:
            raise shape_error(node, f"input {i} has dtype {dtype_in(node, i).value}, "
                                    f"expected {dt.value}")
        shapes.append(shape_in(node, i))
    known = [s for s in shapes if s is not None]
    if not known:
        return [out(dt, None)]
    rank = len(known[0])
    axis = norm_axis(node, a["axis"], rank)
    result: list[Dim] = list(known[0])
    for s in known[1:]:
        if len(s) != rank:
            raise shape_error(node, f"inputs have ranks {len(known[0])} and {len(s)}, "
                                    f"expected equal ranks")
        for k in range(rank):
            if k == axis:
                continue
            if isinstance(result[k], int) and isinstance(s[k], int) and result[k] != s[k]:
                raise shape_error(node, f"dim {k} differs ({result[k]} vs {s[k]}); only the "
                                        f"concat axis {axis} may differ")
            if isinstance(result[k], str) and isinstance(s[k], int):
                result[k] = s[k]
    if len(known) < len(shapes):
        result[axis] = sym(node, axis)
    else:
        result[axis] = dim_sum(node, [s[axis] for s in known], axis)
    return [out(dt, tuple(result))]


def dim_sum(node: Node, dims: Sequence[Dim], pos: int) -> Dim:
    syms = [d for d in dims if not isinstance(d, int)]
    total = sum(d for d in dims if isinstance(d, int))
    if not syms:
        return total
    return syms[0] if len(syms) == 1 and total == 0 else sym(node, pos)


def _concat_device(node: Node, a: dict[str, Any]) -> DeviceKernel | str:
    why = reject(node)
    if why:
        return why
    rank = len(node.outputs[0].meta.shape)
    present = [i for i in range(len(node.inputs)) if node.input(i) is not None]
    return kernel("Concat", {"axis": norm_axis(node, a["axis"], rank)}, present)


register(OpSchema("Concat", 1, -1, _concat_infer, lambda ins, a: [
    np.concatenate([x for x in ins if x is not None], axis=a["axis"])],
    attrs={"axis": A.i(A.REQUIRED)}, device=_concat_device, layout=Layout.CONCAT))


# ---- Split ------------------------------------------------------------------------------------
def split_sizes(dim: int, n: int) -> list[int]:
    chunk = -(-dim // n)
    return [min(chunk, max(dim - chunk * k, 0)) for k in range(n)]


def _split_infer(node: Node, a: dict[str, Any]) -> list[TensorMeta]:
    m = meta_in(node, 0)
    n = len(node.outputs)
    if m.shape is None:
        return [out(m.dtype, None)] * n
    axis = norm_axis(node, a["axis"], len(m.shape))
    dim = m.shape[axis]
    sizes: list[Dim] | None = None
    if node.input(1) is not None:
        sizes = const_ints(node, 1)
        if sizes is not None and len(sizes) != n:
            raise shape_error(node, f"split has {len(sizes)} sizes for {n} outputs")
        if sizes is not None and isinstance(dim, int) and sum(sizes) != dim:
            raise shape_error(node, f"split sizes {sizes} do not sum to dim {dim}")
    elif isinstance(dim, int):
        parts = a.get("num_outputs", n)
        if parts != n:
            raise shape_error(node, f"num_outputs is {parts} but the node has {n} outputs")
        sizes = split_sizes(dim, n)
    outs = []
    for k in range(n):
        shape = list(m.shape)
        shape[axis] = sizes[k] if sizes is not None else sym(node, f"{k}_{axis}")
        outs.append(out(m.dtype, shape))
    return outs


def _split(ins: list[Any], a: dict[str, Any]) -> list[np.ndarray]:
    x = ins[0]
    axis = a["axis"] + x.ndim if a["axis"] < 0 else a["axis"]
    if len(ins) > 1 and ins[1] is not None:
        sizes = ints(ins[1])
    else:
        sizes = split_sizes(x.shape[axis], a.get("num_outputs") or a.get("_n_outputs", 1))
    bounds = np.cumsum(sizes)[:-1]
    return list(np.split(x, bounds, axis=axis))


def _split_device(node: Node, a: dict[str, Any]) -> DeviceKernel | str:
    why = reject(node, data_inputs=(0,))
    if why:
        return why
    shape = node.inputs[0].meta.shape
    axis = norm_axis(node, a["axis"], len(shape))
    if node.input(1) is not None:
        sizes = const_ints(node, 1)
        if sizes is None:
            return "Split sizes are not constant"
    else:  # equal parts: opset 18's num_outputs, or as many as the node has outputs
        sizes = split_sizes(shape[axis], len(node.outputs))
    return kernel("Split", {"axis": axis, "split": [int(s) for s in sizes]}, (0,))


register(OpSchema("Split", 1, 2, _split_infer, _split, attrs={
    "axis": A.i(0), "num_outputs": A.i()}, max_outputs=1 << 16, device=_split_device,
    layout=Layout.CONCAT))  # cuts the bytes as stored, in the format its parts share


# ---- Expand / Tile ---------------------------------------------------------------------------
def _expand_infer(node: Node, a: dict[str, Any]) -> list[TensorMeta]:
    m = meta_in(node, 0)
    check_dtype(node, 1, {DType.INT64}, "shape")
    target = shape_value(node, 1)
    if target is None:
        n = value_rank(node, 1)
        rank = None if n is None or m.shape is None else max(n, len(m.shape))
        return [out(m.dtype, symbolic_shape(node, rank))]
    return [out(m.dtype, broadcast(node, [m.shape, tuple(target)]))]


def _expand_device(node: Node, a: dict[str, Any]) -> DeviceKernel | str:
    why = reject(node, data_inputs=(0,))
    return why or kernel("Expand", {}, (0,))


register(OpSchema("Expand", 2, 2, _expand_infer, lambda ins, a: [np.broadcast_to(
    ins[0], np.broadcast_shapes(ins[0].shape, tuple(ints(ins[1])))).copy()],
    device=_expand_device))


def _tile_infer(node: Node, a: dict[str, Any]) -> list[TensorMeta]:
    m = meta_in(node, 0)
    check_dtype(node, 1, {DType.INT64}, "repeats")
    reps = const_ints(node, 1)
    if m.shape is None:
        return [out(m.dtype, None if reps is None else symbolic_shape(node, len(reps)))]
    if reps is None:
        return [out(m.dtype, symbolic_shape(node, len(m.shape)))]
    if len(reps) != len(m.shape):
        raise shape_error(node, f"repeats has {len(reps)} entries, expected {len(m.shape)}")
    return [out(m.dtype, tuple(d * r if isinstance(d, int) else (d if r == 1 else sym(node, i))
                               for i, (d, r) in enumerate(zip(m.shape, reps))))]


register(OpSchema("Tile", 2, 2, _tile_infer, lambda ins, a: [
    np.tile(ins[0], tuple(ints(ins[1])))]))


# ---- Shape / Size ------------------------------------------------------------------------
def _shape_range(rank: int, a: dict[str, Any]) -> tuple[int, int]:
    start = a["start"]
    end = a.get("end", rank)
    start = min(max(start + rank if start < 0 else start, 0), rank)
    end = min(max(end + rank if end < 0 else end, 0), rank)
    return start, max(end, start)


def _shape_infer(node: Node, a: dict[str, Any]) -> list[TensorMeta]:
    shape = shape_in(node, 0)
    if shape is None:
        return [out(DType.INT64, (sym(node, 0),))]
    start, end = _shape_range(len(shape), a)
    return [out(DType.INT64, (end - start,))]


def _shape(ins: list[Any], a: dict[str, Any]) -> list[np.ndarray]:
    start, end = _shape_range(ins[0].ndim, a)
    return [np.array(ins[0].shape[start:end], dtype=np.int64)]


register(OpSchema("Shape", 1, 1, _shape_infer, _shape,
                  attrs={"start": A.i(0), "end": A.i()}))
register(OpSchema("Size", 1, 1, lambda node, a: [out(DType.INT64, ())],
                  lambda ins, a: [np.array(ins[0].size, dtype=np.int64)]))


# ---- Dropout (inference) ---------------------------------------------------------------
def _dropout_infer(node: Node, a: dict[str, Any]) -> list[TensorMeta]:
    m = meta_in(node, 0)
    return [out(m.dtype, m.shape), out(DType.BOOL, m.shape)]


def _dropout(ins: list[Any], a: dict[str, Any]) -> list[np.ndarray]:
    x = ins[0]
    ratio = 0.5 if len(ins) < 2 or ins[1] is None else float(ins[1])
    training = len(ins) > 2 and ins[2] is not None and bool(ins[2])
    if not training or ratio == 0:
        return [x, np.ones(x.shape, dtype=bool)]
    # With a seed, numpy's legacy Mersenne Twister stream: the convention the ONNX
    # reference and its test data follow, so seeded runs agree across backends.
    seed = a.get("seed")
    uniform = (np.random.RandomState(seed).uniform if seed is not None
               else np.random.default_rng().uniform)
    mask = uniform(0, 1, x.shape) >= ratio
    return [(mask * x * (1 / (1 - ratio))).astype(x.dtype), mask]


def _dropout_device(node: Node, a: dict[str, Any]) -> DeviceKernel | str:
    if len(node.outputs) > 1 and (node.outputs[1].users
                                  or node.outputs[1] in node.graph.outputs):
        return "device Dropout computes no mask output"
    training = node.input(2)
    if training is not None and (training.const is None or bool(training.const)):
        return "device Dropout runs inference only (training_mode is not constant false)"
    return view(node, a)


register(OpSchema("Dropout", 1, 3, _dropout_infer, _dropout, attrs={"seed": A.i()},
                  max_outputs=2, device=_dropout_device, alias={0: 0}, foldable=True))


# ---- DepthToSpace / SpaceToDepth ---------------------------------------------------------
def _d2s_infer(node: Node, a: dict[str, Any]) -> list[TensorMeta]:
    m = meta_in(node, 0)
    if m.shape is None:
        return [out(m.dtype, symbolic_shape(node, 4))]
    if len(m.shape) != 4:
        raise shape_error(node, f"input has rank {len(m.shape)}, expected 4 (NCHW)")
    b, c, h, w = m.shape
    bs = a["blocksize"]
    if node.op_type == "DepthToSpace":
        if isinstance(c, int) and c % (bs * bs):
            raise shape_error(node, f"channels {c} not divisible by blocksize^2 = {bs * bs}")
        dims = (b, _scale(node, c, 1, bs * bs, 1), _scale(node, h, bs, 1, 2),
                _scale(node, w, bs, 1, 3))
    else:
        dims = (b, _scale(node, c, bs * bs, 1, 1), _scale(node, h, 1, bs, 2),
                _scale(node, w, 1, bs, 3))
    return [out(m.dtype, dims)]


def _scale(node: Node, d: Dim, mul: int, div: int, pos: int) -> Dim:
    return d * mul // div if isinstance(d, int) else sym(node, pos)


def _depth_to_space(ins: list[Any], a: dict[str, Any]) -> list[np.ndarray]:
    x = ins[0]
    b, c, h, w = x.shape
    bs = a["blocksize"]
    if a["mode"] == "DCR":
        t = x.reshape(b, bs, bs, c // (bs * bs), h, w).transpose(0, 3, 4, 1, 5, 2)
    else:
        t = x.reshape(b, c // (bs * bs), bs, bs, h, w).transpose(0, 1, 4, 2, 5, 3)
    return [t.reshape(b, c // (bs * bs), h * bs, w * bs)]


def _space_to_depth(ins: list[Any], a: dict[str, Any]) -> list[np.ndarray]:
    x = ins[0]
    b, c, h, w = x.shape
    bs = a["blocksize"]
    t = x.reshape(b, c, h // bs, bs, w // bs, bs)
    t = t.transpose(0, 3, 5, 1, 2, 4) if a["mode"] == "DCR" else t.transpose(0, 1, 3, 5, 2, 4)
    return [t.reshape(b, c * bs * bs, h // bs, w // bs)]


_D2S_ATTRS = {"blocksize": A.i(A.REQUIRED), "mode": A.s("DCR", ("DCR", "CRD"))}
register(OpSchema("DepthToSpace", 1, 1, _d2s_infer, _depth_to_space, attrs=_D2S_ATTRS))
register(OpSchema("SpaceToDepth", 1, 1, _d2s_infer, _space_to_depth, attrs=_D2S_ATTRS))
