"""Converters of ATen's views, shape ops, indexing, copies and tensor creation.

A size argument may hold SymInts under `dynamic=True`: `FxConverter.ints` gives it as Python
ints, or as a 1-D int64 tensor computed from the inputs' shapes when any is symbolic."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from .convert import INT64_MAX, FxConverter, Unsupported, converts, fake, is_symint, np_dtype

aten = torch.ops.aten
Node = torch.fx.Node


def _i64(values: Any) -> np.ndarray:
    return np.array(values, np.int64)


def _rank(x: Any) -> int:
    if x.shape is None:
        raise Unsupported("input of unknown rank")
    return len(x.shape)


@converts(aten.view.default, aten._unsafe_view.default, aten.reshape.default)
def _view(ctx: FxConverter, node: Node, a: dict) -> Any:
    x = ctx.tensor(a["self"])
    return ctx.op("Reshape", x, ctx.as_tensor(ctx.ints(a["size"])))


@converts(aten.permute.default)
def _permute(ctx: FxConverter, node: Node, a: dict) -> Any:
    x = ctx.tensor(a["self"])
    r = _rank(x)
    return ctx.op("Transpose", x, perm=[int(d) % r for d in a["dims"]])


@converts(aten.t.default, aten.transpose.int)
def _transpose(ctx: FxConverter, node: Node, a: dict) -> Any:
    x = ctx.tensor(a["self"])
    r = _rank(x)
    if r < 2:
        return ctx.op("Identity", x)
    d0, d1 = (a.get("dim0", 0) % r, a.get("dim1", 1) % r)
    perm = list(range(r))
    perm[d0], perm[d1] = perm[d1], perm[d0]
    return ctx.op("Transpose", x, perm=perm)


@converts(aten.expand.default)
def _expand(ctx: FxConverter, node: Node, a: dict) -> Any:
    x = ctx.tensor(a["self"])
    size = list(a["size"])
    lead = len(size) - _rank(x)
    # -1 keeps the input's dim; Expand's 1 broadcasts to whatever the input has
    size = [1 if (isinstance(s, int) and s == -1 and i >= lead) else s
            for i, s in enumerate(size)]
    return ctx.op("Expand", x, ctx.as_tensor(ctx.ints(size)))


@converts(aten.unsqueeze.default)
def _unsqueeze(ctx: FxConverter, node: Node, a: dict) -> Any:
    x = ctx.tensor(a["self"])
    return ctx.op("Unsqueeze", x, _i64([int(a["dim"]) % (_rank(x) + 1)]))


@converts(aten.squeeze.dim, aten.squeeze.dims, aten.squeeze.default)
def _squeeze(ctx: FxConverter, node: Node, a: dict) -> Any:
    x = ctx.tensor(a["self"])
    shape = fake(a["self"]).shape
    r = len(shape)
    dims = a.get("dim", None)
    dims = range(r) if dims is None else [dims] if isinstance(dims, int) else dims
    # aten squeezes only dims of size 1 (a symbolic dim is guarded not to be 1)
    axes = sorted({int(d) % max(r, 1) for d in dims if r and not is_symint(shape[int(d)])
                   and int(shape[int(d)]) == 1})
    if not axes:
        return ctx.op("Identity", x)
    return ctx.op("Squeeze", x, _i64(axes))


@converts(aten.cat.default)
def _cat(ctx: FxConverter, node: Node, a: dict) -> Any:
    dtype = fake(node).dtype
    parts = []
    for t in a["tensors"]:
        v = fake(t)
        if v.dim() == 1 and not is_symint(v.shape[0]) and int(v.shape[0]) == 0:
            continue  # torch's legacy empty tensor joins anything
        parts.append(ctx.cast(ctx.tensor(t), dtype))
    if not parts:
        raise Unsupported("cat of empty tensors only")
    r = _rank(parts[0])
    return ctx.op("Concat", *parts, axis=int(a["dim"]) % r)


@converts(aten.slice.Tensor)
def _slice(ctx: FxConverter, node: Node, a: dict) -> Any:
    x = ctx.tensor(a["self"])
    start = 0 if a["start"] is None else ctx.int_arg(a["start"])
    end = INT64_MAX if a["end"] is None else ctx.int_arg(a["end"])
    if isinstance(end, int):
        end = min(end, INT64_MAX)
    dim = int(a["dim"]) % _rank(x)
    return ctx.op("Slice", x, ctx.as_tensor(ctx.ints([start])), ctx.as_tensor(ctx.ints([end])),
                  _i64([dim]), _i64([int(a["step"])]))


@converts(aten.select.int)
def _select(ctx: FxConverter, node: Node, a: dict) -> Any:
    x = ctx.tensor(a["self"])
    index = ctx.int_arg(a["index"])
    index = ctx.as_tensor(index) if not isinstance(index, int) else _i64(index)
    return ctx.op("Gather", x, index, axis=int(a["dim"]) % _rank(x))


@converts(aten.index.Tensor)
def _index(ctx: FxConverter, node: Node, a: dict) -> Any:
    """x[..., i0, i1, ...]: the indexed dims first (Transpose), the index tensors broadcast
    and stacked (GatherND), then torch's placement of the result's dims: where the indexed
    dims were if they are adjacent, else first."""
    x = ctx.tensor(a["self"])
    r = _rank(x)
    given = [(i, t) for i, t in enumerate(a["indices"]) if t is not None]
    if any(fake(t).dtype == torch.bool for _, t in given):
        raise Unsupported("indexing with a boolean mask (data-dependent shape)")
    if len(given) == 1:
        return ctx.op("Gather", x, ctx.tensor(given[0][1]), axis=given[0][0])
    axes = [i for i, _ in given]
    rest = [i for i in range(r) if i not in axes]
    idx = [ctx.cast(ctx.tensor(t), torch.int64) for _, t in given]
    zero = idx[0]
    for t in idx[1:]:
        zero = ctx.op("Add", zero, t)
    zero = ctx.op("Mul", zero, _i64(0))  # broadcast every index to the common shape
    stacked = ctx.op("Concat", *[ctx.op("Unsqueeze", ctx.op("Add", t, zero), _i64([-1]))
                                 for t in idx], axis=-1)
    xt = ctx.op("Transpose", x, perm=axes + rest) if axes != list(range(len(axes))) else x
    out = ctx.op("GatherND", xt, stacked)
    lead = len([i for i in rest if i < axes[0]])
    if lead == 0 or axes != list(range(axes[0], axes[0] + len(axes))):
        return out
    nb = len(fake(node).shape) - len(rest)
    perm = [nb + i for i in range(lead)] + list(range(nb)) + \
        [nb + lead + i for i in range(len(rest) - lead)]
    return ctx.op("Transpose", out, perm=perm)


@converts(aten.index_select.default)
def _index_select(ctx: FxConverter, node: Node, a: dict) -> Any:
    x = ctx.tensor(a["self"])
    return ctx.op("Gather", x, ctx.tensor(a["index"]), axis=int(a["dim"]) % _rank(x))


@converts(aten.embedding.default)
def _embedding(ctx: FxConverter, node: Node, a: dict) -> Any:
    return ctx.op("Gather", ctx.tensor(a["weight"]), ctx.tensor(a["indices"]), axis=0)


@converts(aten.gather.default)
def _gather(ctx: FxConverter, node: Node, a: dict) -> Any:
    x = ctx.tensor(a["self"])
    return ctx.op("GatherElements", x, ctx.tensor(a["index"]), axis=int(a["dim"]) % _rank(x))


@converts(aten.split_with_sizes.default, aten.split.Tensor)
def _split(ctx: FxConverter, node: Node, a: dict) -> Any:
    x = ctx.tensor(a["self"])
    dim = int(a["dim"]) % _rank(x)
    sizes = [int(t.shape[dim]) if not is_symint(t.shape[dim]) else None for t in fake(node)]
    if None in sizes:
        raise Unsupported("split along a symbolic dim")
    outs = ctx.g.add("Split", [x, _i64(sizes)], {"axis": dim}, outputs=len(sizes))
    return outs if isinstance(outs, tuple) else (outs,)


@converts(aten.constant_pad_nd.default)
def _pad(ctx: FxConverter, node: Node, a: dict) -> Any:
    x = ctx.tensor(a["self"])
    r = _rank(x)
    pad = [int(p) for p in a["pad"]]
    begins, ends = [0] * r, [0] * r
    for k in range(len(pad) // 2):  # pairs from the last dim backwards
        begins[r - 1 - k], ends[r - 1 - k] = pad[2 * k], pad[2 * k + 1]
    if min(begins + ends) < 0:
        raise Unsupported("negative padding")
    value = ctx.value(a["value"], fake(node).dtype)
    return ctx.op("Pad", x, _i64(begins + ends), value, mode="constant")


@converts(aten.repeat.default)
def _repeat(ctx: FxConverter, node: Node, a: dict) -> Any:
    x = ctx.tensor(a["self"])
    reps = [int(r) for r in a["repeats"]]
    extra = len(reps) - _rank(x)
    if extra > 0:
        x = ctx.op("Unsqueeze", x, _i64(list(range(extra))))
    return ctx.op("Tile", x, _i64(reps))


@converts(aten.flip.default)
def _flip(ctx: FxConverter, node: Node, a: dict) -> Any:
    x = ctx.tensor(a["self"])
    dims = [int(d) % _rank(x) for d in a["dims"]]
    n = len(dims)
    return ctx.op("Slice", x, _i64([-1] * n), _i64([-INT64_MAX] * n), _i64(dims), _i64([-1] * n))


@converts(aten.tril.default, aten.triu.default)
def _trilu(ctx: FxConverter, node: Node, a: dict) -> Any:
    return ctx.op("Trilu", ctx.tensor(a["self"]), _i64(int(a["diagonal"])),
                  upper=int(node.target is aten.triu.default))


# ---- copies -------------------------------------------------------------------------------
@converts(aten.clone.default, aten.alias.default, aten.lift_fresh_copy.default,
          aten.detach.default, aten._to_copy.default, aten.contiguous.default,
          torch.ops.prims.convert_element_type.default)
def _copy(ctx: FxConverter, node: Node, a: dict) -> Any:
    val = fake(node)
    x = ctx.tensor(a["self"] if "self" in a else a["a"])  # prims name it a
    if val.device.type != "cpu":
        raise Unsupported(f"copy to {val.device}")
    return ctx.op("Identity", ctx.cast(x, val.dtype))


@converts(aten._assert_tensor_metadata.default)
def _assert_meta(ctx: FxConverter, node: Node, a: dict) -> Any:
    return None  # a check torch made while tracing; the converted graph is typed already


# ---- creation -----------------------------------------------------------------------------
def _static(values: list[Any]) -> bool:
    return all(not isinstance(v, Node) for v in values)


@converts(aten.arange.start_step, aten.arange.default, aten.arange.start)
def _arange(ctx: FxConverter, node: Node, a: dict) -> Any:
    val = fake(node)
    start, end, step = a.get("start", 0), a["end"], a.get("step", 1)
    if _static([start, end, step]):
        return ctx.g.constant(np.arange(start, end, step).astype(np_dtype(val.dtype)))
    parts = [ctx.as_tensor(ctx.int_arg(v)) if isinstance(v, Node) else _i64(v)
             for v in (start, end, step)]
    if not all(isinstance(v, (int, Node)) for v in (start, end, step)):
        raise Unsupported("arange of float bounds over a symbolic size")
    return ctx.op("Range", *parts)


def _filled(ctx: FxConverter, node: Node, size: Any, value: Any) -> Any:
    val = fake(node)
    dtype = np_dtype(val.dtype)
    dims = ctx.ints(size)
    if isinstance(dims, list):
        return ctx.g.constant(np.full(dims, value, dtype))
    return ctx.op("Expand", np.array(value, dtype), dims)


@converts(aten.full.default)
def _full(ctx: FxConverter, node: Node, a: dict) -> Any:
    return _filled(ctx, node, a["size"], a["fill_value"])


@converts(aten.full_like.default, aten.zeros_like.default, aten.ones_like.default)
def _full_like(ctx: FxConverter, node: Node, a: dict) -> Any:
    value = a.get("fill_value", 1 if node.target is aten.ones_like.default else 0)
    x = ctx.tensor(a["self"])
    if x.shape is not None and all(isinstance(d, int) for d in x.shape):
        return ctx.g.constant(np.full(x.shape, value, np_dtype(fake(node).dtype)))
    return ctx.op("Expand", np.array(value, np_dtype(fake(node).dtype)), ctx.op("Shape", x))


@converts(aten.zeros.default, aten.ones.default)
def _zeros(ctx: FxConverter, node: Node, a: dict) -> Any:
    return _filled(ctx, node, a["size"], 1 if node.target is aten.ones.default else 0)


@converts(aten.scalar_tensor.default)
def _scalar_tensor(ctx: FxConverter, node: Node, a: dict) -> Any:
    return ctx.g.constant(np.array(a["s"], np_dtype(fake(node).dtype)))
