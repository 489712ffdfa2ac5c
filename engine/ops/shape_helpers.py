"""Shared pieces of shape inference: reading inputs, broadcasting, axes, symbolic dims.

Dims are ints or symbol strings. When a dim depends on something unknown at compile
time, inference names it after the node (`<node>_d<i>`) so that re-running inference
gives the same names and two unrelated unknowns never compare equal.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from ..dtypes import DType
from ..ir import Dim, Node, TensorMeta
from .registry import shape_error
from .value_prop import known_value

Shape = tuple[Dim, ...]

FLOATS = frozenset({DType.FLOAT16, DType.FLOAT32, DType.FLOAT64, DType.BFLOAT16})
SIGNED_INTS = frozenset({DType.INT8, DType.INT16, DType.INT32, DType.INT64})
UNSIGNED_INTS = frozenset({DType.UINT8, DType.UINT16, DType.UINT32, DType.UINT64})
INTS = SIGNED_INTS | UNSIGNED_INTS
NUMERIC = FLOATS | INTS
INDEX = frozenset({DType.INT32, DType.INT64})


def sym(node: Node, i: int | str) -> str:
    """A fresh, deterministic symbol for output dim `i` of `node`."""
    return f"{node.name}_d{i}"


def meta_in(node: Node, i: int) -> TensorMeta | None:
    v = node.input(i)
    if v is None:
        return None
    if v.meta is None:
        raise shape_error(node, f"input {i} ('{v.name}') has no inferred type yet")
    return v.meta


def shape_in(node: Node, i: int) -> Shape | None:
    m = meta_in(node, i)
    return None if m is None else m.shape


def dtype_in(node: Node, i: int) -> DType:
    m = meta_in(node, i)
    if m is None:
        raise shape_error(node, f"input {i} is missing")
    return m.dtype


def const_in(node: Node, i: int) -> np.ndarray | None:
    """The value of input i when known at compile time: a constant, or a small tensor
    derived from static shapes (see value_prop); None otherwise."""
    val = known_value(node.input(i))
    return None if val is None or val.dtype.kind in "OUS" else val


def shape_value(node: Node, i: int) -> list[Dim] | None:
    """A 1-D shape-like input as dims, symbols included (Shape of float32[batch,8] gives
    ["batch", 8]); None when unknown."""
    val = known_value(node.input(i))
    if val is None:
        return None
    return [d if isinstance(d, str) else int(d) for d in val.reshape(-1)]


def const_ints(node: Node, i: int) -> list[int] | None:
    c = const_in(node, i)
    return None if c is None else [int(x) for x in np.asarray(c).reshape(-1)]


def same(node: Node, i: int = 0) -> list[TensorMeta]:
    """One output with the dtype and shape of input i."""
    m = meta_in(node, i)
    assert m is not None
    return [TensorMeta(m.dtype, m.shape)]


def out(dtype: DType, shape: Sequence[Dim] | None) -> TensorMeta:
    return TensorMeta(dtype, None if shape is None else tuple(shape))


def check_dtype(node: Node, i: int, allowed: Iterable[DType], what: str = "") -> DType:
    dt = dtype_in(node, i)
    allowed = frozenset(allowed)
    if dt not in allowed:
        names = ", ".join(sorted(d.value for d in allowed))
        raise shape_error(node, f"input {i}{' (' + what + ')' if what else ''} has dtype "
                                f"{dt.value}, expected one of {names}")
    return dt


def check_same_dtype(node: Node, indices: Iterable[int]) -> DType:
    dts = [(i, dtype_in(node, i)) for i in indices if node.input(i) is not None]
    first = dts[0][1]
    for i, dt in dts[1:]:
        if dt is not first:
            raise shape_error(node, f"input {i} has dtype {dt.value}, expected {first.value} "
                                    f"(the dtype of input {dts[0][0]})")
    return first


def check_rank(node: Node, i: int, ranks: Iterable[int] | int, what: str = "") -> Shape | None:
    shape = shape_in(node, i)
    ranks = (ranks,) if isinstance(ranks, int) else tuple(ranks)
    if shape is not None and len(shape) not in ranks:
        want = " or ".join(str(r) for r in ranks)
        raise shape_error(node, f"input {i}{' (' + what + ')' if what else ''} has rank "
                                f"{len(shape)}, expected rank {want}")
    return shape


def broadcast_dims(node: Node, a: Dim, b: Dim, pos: int) -> Dim:
    if a == b:
        return a
    if a == 1:
        return b
    if b == 1:
        return a
    if isinstance(a, int) and isinstance(b, int):
        raise shape_error(node, f"cannot broadcast dims {a} and {b}")
    if isinstance(a, int):
        return a  # a symbol broadcast against a size > 1 must be that size (or 1)
    if isinstance(b, int):
        return b
    return sym(node, pos)


def broadcast(node: Node, shapes: Sequence[Shape | None]) -> Shape | None:
    """Numpy multidirectional broadcasting over possibly symbolic shapes."""
    if any(s is None for s in shapes):
        return None
    rank = max((len(s) for s in shapes), default=0)  # type: ignore[arg-type]
    result: list[Dim] = [1] * rank
    for s in shapes:
        assert s is not None
        padded = (1,) * (rank - len(s)) + tuple(s)
        try:
            result = [broadcast_dims(node, r, d, i) for i, (r, d) in enumerate(zip(result, padded))]
        except Exception as exc:  # re-raise with both shapes named
            shown = " and ".join(str(list(x)) for x in shapes if x is not None)
            raise shape_error(node, f"shapes {shown} are not broadcastable") from exc
    return tuple(result)


def norm_axis(node: Node, axis: int, rank: int, what: str = "axis") -> int:
    if not -rank <= axis < rank:
        raise shape_error(node, f"{what} {axis} is out of range for rank {rank} "
                                f"(expected {-rank}..{rank - 1})")
    return axis + rank if axis < 0 else axis


def norm_axes(node: Node, axes: Iterable[int], rank: int, what: str = "axes") -> list[int]:
    result = [norm_axis(node, int(a), rank, what) for a in axes]
    if len(set(result)) != len(result):
        raise shape_error(node, f"{what} {list(axes)} repeat an axis")
    return result


def numel(shape: Sequence[Dim] | None) -> int | None:
    if shape is None or not all(isinstance(d, int) for d in shape):
        return None
    return int(math.prod(shape))  # type: ignore[arg-type]


def dim_op(node: Node, pos: int | str, fn: Any, *dims: Dim) -> Dim:
    """fn over dims when all are ints, else a fresh symbol."""
    if all(isinstance(d, int) for d in dims):
        return int(fn(*dims))
    return sym(node, pos)


def symbolic_shape(node: Node, rank: int | None, prefix: str = "") -> Shape | None:
    if rank is None:
        return None
    return tuple(sym(node, f"{prefix}{i}") for i in range(rank))


def value_rank(node: Node, i: int) -> int | None:
    """Length of a 1-D input such as a shape tensor, when its own shape is known."""
    shape = shape_in(node, i)
    if shape is None:
        return None
    if len(shape) != 1:
        raise shape_error(node, f"input {i} must be 1-D, has shape {list(shape)}")
    return shape[0] if isinstance(shape[0], int) else None


def pool_out_dim(node: Node, pos: int, size: Dim, kernel: int, stride: int, pad_total: int,
                 dilation: int, ceil_mode: bool) -> Dim:
    if not isinstance(size, int):
        return sym(node, pos)
    eff = (kernel - 1) * dilation + 1
    span = size + pad_total - eff
    if span < 0:
        raise shape_error(node, f"kernel extent {eff} is larger than the padded input "
                                f"size {size + pad_total} on spatial dim {pos - 2}")
    if ceil_mode:
        n = -(-span // stride) + 1
        # the last window must start inside the input or the left padding
        if (n - 1) * stride >= size + pad_total - (pad_total - pad_total // 2):
            n -= 1
        return n
    return span // stride + 1
