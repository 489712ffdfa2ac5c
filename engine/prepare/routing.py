"""What a mixture-of-experts router's masks are known to hold, from how the graph makes them.

A router picks k experts a token with TopK; exporters then write the choice as a one-hot
mask (OneHot, or Equal against the expert ids) and select each expert's rows with NonZero.
Two facts about such masks make the selections boundable (prepare/expert_rows.py):

- **exclusive axes**: along TopK's axis the picked ids are distinct, so for a fixed token
  and expert at most one of the k slots holds it: each token appears at most once in an
  expert's selection, and the selection can be padded to one row per token;
- **positions that are always zero**: a one-hot of depth E + 1 over ids below E never sets
  its last position (Mixtral's `one_hot(top_k_index, num_experts + 1)`), so a NonZero over
  the experts hit has at most E results.

Each function answers from the producers alone (no data) and returns nothing it cannot show.
"""

from __future__ import annotations

import numpy as np

from ..ir import Value
from ..ops.value_prop import known_value

# Masks whose zero positions are tracked elementwise are at most this large.
MAX_MASK = 1 << 16
_INTEGER = frozenset({"int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64"})


def _shape(v: Value | None) -> tuple[int, ...] | None:
    if v is None or v.meta is None or not v.meta.is_static:
        return None
    return tuple(v.meta.shape)  # type: ignore[arg-type]


def _ints(v: Value | None) -> list[int] | None:
    """The known integer entries of `v` (a constant or a shape-derived value)."""
    k = known_value(v) if v is not None else None
    if k is None or k.dtype == object:
        return None
    return [int(x) for x in np.asarray(k).reshape(-1)]


def _inserted(node, rank_out: int) -> list[int] | None:
    """Unsqueeze's new axes, normalized to the output's rank."""
    axes = _ints(node.input(1))
    if axes is None:
        return None
    return sorted(a + rank_out if a < 0 else a for a in axes)


def _unsqueeze_map(node, rank_in: int) -> list[int] | None:
    """Input axis i of an Unsqueeze -> its output axis."""
    new = _inserted(node, rank_in + len(_ints(node.input(1)) or []))
    if new is None:
        return None
    kept = [a for a in range(rank_in + len(new)) if a not in new]
    return kept if len(kept) == rank_in else None


def _gather_map(node, rank_in: int) -> list[int | None] | None:
    """Data axis i of a Gather -> its output axis (None for the gathered axis)."""
    idx = node.input(1)
    if idx is None or idx.meta is None or idx.meta.shape is None:
        return None
    axis = int(node.attrs.get("axis", 0))
    axis = axis + rank_in if axis < 0 else axis
    k = len(idx.meta.shape)
    return [i if i < axis else None if i == axis else i + k - 1 for i in range(rank_in)]


def _through_view(node, rank: int, axes_of) -> set[int]:
    """`axes_of(node's input)` as axes of its output, through a Transpose or Unsqueeze."""
    if node.op_type == "Transpose":
        perm = list(node.attrs.get("perm") or range(rank)[::-1])
        inner = axes_of(node.input(0))
        return {o for o, i in enumerate(perm) if i in inner}
    if node.op_type == "Unsqueeze":
        where = _unsqueeze_map(node, rank - len(_ints(node.input(1)) or []))
        return set() if where is None else {where[i] for i in axes_of(node.input(0))}
    return set()


def distinct_axes(v: Value | None) -> set[int]:
    """Axes along which `v`'s entries are pairwise distinct, the other axes fixed: TopK's
    indices along its axis, through views and integer casts."""
    node = v.producer if v is not None else None
    if node is None or v.meta is None or v.meta.shape is None:
        return set()
    rank = len(v.meta.shape)
    op = node.op_type
    if op == "TopK" and v.index == 1:
        axis = int(node.attrs.get("axis", -1))
        return {axis + rank if axis < 0 else axis}
    src = node.input(0)
    if op in ("Identity", "Cast") and src.meta is not None \
            and src.meta.dtype.value in _INTEGER and v.meta.dtype.value in _INTEGER:
        return distinct_axes(src) if op == "Identity" or \
            np.iinfo(v.meta.dtype.numpy).max >= np.iinfo(src.meta.dtype.numpy).max else set()
    return _through_view(node, rank, distinct_axes)


def _aligned(rank_out: int, v: Value) -> int:
    return rank_out - len(v.meta.shape)


def exclusive_axes(v: Value | None) -> set[int]:
    """Axes along which at most one entry of `v` is nonzero, the other axes fixed."""
    if v is None or v.meta is None or v.meta.shape is None:
        return set()
    rank = len(v.meta.shape)
    if v.is_constant:
        c = np.asarray(v.const) != 0
        return {a for a in range(c.ndim) if c.size and int(c.sum(axis=a).max()) <= 1}
    node = v.producer
    if node is None:
        return set()
    op, src = node.op_type, node.input(0)
    if op in ("Identity", "Cast"):  # a cast keeps zeros zero (it may only add some)
        return exclusive_axes(src)
    if op in ("Transpose", "Unsqueeze"):
        return _through_view(node, rank, exclusive_axes)
    if op == "Gather" and src.meta is not None and src.meta.shape is not None:
        where = _gather_map(node, len(src.meta.shape))  # a slice of src keeps its rows apart
        return set() if where is None else {where[i] for i in exclusive_axes(src)
                                            if where[i] is not None}
    if op == "Where":  # nonzero only where the condition holds, when the else is zero
        other = node.input(2)
        if other is not None and other.is_constant and not np.any(np.asarray(other.const)) \
                and node.input(0).meta is not None and node.input(0).meta.shape == v.meta.shape:
            return exclusive_axes(node.input(0))
        return set()
    if op == "Equal":  # distinct ids against one id: at most one match
        found = set()
        for a, b in ((node.input(0), node.input(1)), (node.input(1), node.input(0))):
            if a.meta is None or b.meta is None or a.meta.shape is None \
                    or b.meta.shape is None:
                continue
            off_a, off_b = _aligned(rank, a), _aligned(rank, b)
            for d in distinct_axes(a):
                o = d + off_a
                j = o - off_b
                if j < 0 or b.meta.shape[j] == 1:
                    found.add(o)
        return found
    if op == "OneHot":
        values = known_value(node.input(2))
        if values is None or np.asarray(values).reshape(-1)[0] != 0:
            return set()
        axis = int(node.attrs.get("axis", -1))
        axis = axis + rank if axis < 0 else axis
        return {axis} | {d if d < axis else d + 1 for d in distinct_axes(src)}
    return set()


def value_range(v: Value | None) -> tuple[int, int] | None:
    """Inclusive bounds of an integer value: TopK's indices lie within its axis."""
    node = v.producer if v is not None else None
    if v is not None and v.is_constant:
        c = np.asarray(v.const)
        return (int(c.min()), int(c.max())) if c.size and c.dtype.kind in "iub" else None
    if node is None:
        return None
    if node.op_type == "TopK" and v.index == 1:
        src = _shape(node.input(0))
        if src is None:
            return None
        axis = int(node.attrs.get("axis", -1))
        return (0, src[axis] - 1) if src[axis] > 0 else None
    if node.op_type in ("Identity", "Unsqueeze", "Squeeze", "Transpose", "Reshape",
                        "Flatten"):
        return value_range(node.input(0))
    return None


def always_zero(v: Value | None) -> np.ndarray | None:
    """A boolean mask of `v`'s shape, True where `v` is zero whatever the inputs."""
    shape = _shape(v)
    if shape is None or int(np.prod(shape, dtype=np.int64)) > MAX_MASK:
        return None
    if v.is_constant:
        return np.asarray(v.const) == 0
    node = v.producer
    if node is None:
        return None
    op, src = node.op_type, node.input(0)
    if op in ("Identity", "Cast"):
        return always_zero(src)
    if op == "Transpose":
        inner = always_zero(src)
        perm = node.attrs.get("perm")
        return None if inner is None else np.transpose(inner, perm)
    if op == "Unsqueeze":
        inner = always_zero(src)
        return None if inner is None else inner.reshape(shape)
    if op in ("ReduceSum", "ReduceMax", "ReduceMin"):  # every reduced entry zero
        inner = always_zero(src)
        axes = _ints(node.input(1)) if node.input(1) is not None else None
        if inner is None or axes is None or not axes:
            return None
        return np.all(inner, axis=tuple(axes), keepdims=bool(node.attrs.get("keepdims", 1)))
    if op == "Greater":  # 0 > c is false for c >= 0
        c = known_value(node.input(1))
        inner = always_zero(src)
        if inner is None or c is None or np.asarray(c).size != 1 or float(np.min(c)) < 0:
            return None
        return np.broadcast_to(inner, shape)
    if op == "Where":
        cond, then, other = (always_zero(node.input(i)) for i in range(3))
        if other is None or (cond is None and then is None):
            return None
        zero_when = np.zeros(shape, bool)
        if cond is not None:
            zero_when |= np.broadcast_to(cond, shape)  # the condition never holds there
        if then is not None:
            zero_when |= np.broadcast_to(then, shape)
        return zero_when & np.broadcast_to(other, shape)
    if op == "Equal":  # ids within [lo, hi] never equal a constant outside it
        for a, b in ((node.input(0), node.input(1)), (node.input(1), node.input(0))):
            bounds, c = value_range(a), b.const if b.is_constant else None
            if bounds is not None and c is not None:
                c = np.asarray(c)
                return np.broadcast_to((c < bounds[0]) | (c > bounds[1]), shape).copy()
        return None
    if op == "OneHot":
        bounds, values = value_range(src), known_value(node.input(2))
        if bounds is None or values is None or np.asarray(values).reshape(-1)[0] != 0 \
                or bounds[0] < 0:
            return None
        axis = int(node.attrs.get("axis", -1))
        axis = axis + len(shape) if axis < 0 else axis
        line = np.arange(shape[axis]) > bounds[1]
        view = [1] * len(shape)
        view[axis] = shape[axis]
        return np.broadcast_to(line.reshape(view), shape).copy()
    return None
