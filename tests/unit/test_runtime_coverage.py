"""The new device kernels' load-time checks, straight on the runtime: anything wrong in a
spec (values, attributes, shapes) is an InvalidArgument naming the node, never UB."""

from __future__ import annotations

import numpy as np
import pytest

from graphengine import _runtime as rt
from tests.unit.test_runtime import Const, load_op, randn, run_op

X = randn(2, 3, 4, 5)
I64 = np.int64


@pytest.mark.parametrize("op,inputs,out,attrs,message", [
    ("TopK", [X, Const(np.array([6], I64))], [[2, 3, 4, 6], [2, 3, 4, 6]], {},
     r"k = 6 is out of range \[0, 5\]"),
    ("TopK", [X, Const(np.array([1, 2], I64))], [[2, 3, 4, 1]] * 2, {}, "K must have one element"),
    ("ArgMax", [X], [2, 3, 4], {"axis": 7, "keepdims": 0}, "axis 7 out of range for rank 4"),
    ("Split", [X, Const(np.array([2, 2], I64))], [[2, 2, 4, 5], [2, 2, 4, 5]], {"axis": 1},
     r"do not sum to dim 3"),
    ("Split", [X, Const(np.array([4, -1], I64))], [[2, 3, 4, 5], [2, 0, 4, 5]], {"axis": 1},
     "must not be negative"),
    ("GatherND", [X, np.zeros((2, 5), I64)], [2], {}, r"last dim 5 must be in \[1, 4\]"),
    ("GatherND", [X, np.zeros((3, 1), I64)], [3, 3, 4, 5], {"batch_dims": 1},
     "batch dim 0 differs"),
    ("Resize", [X], [2, 3, 8, 10], {"scales": [2.0, -2.0]}, "scales must be positive"),
    ("Resize", [X], [2, 3, 8, 10], {"scales": [2.0, 2.0], "mode": "cubic"},
     "mode must be nearest or linear"),
    ("Pad", [X, Const(np.array([0, 0, 0, -9, 0, 0, 0, 0], I64))], [2, 3, 4, 1],
     {"mode": "edge"}, "remove more than the input has"),
    ("ReduceMin", [X, Const(np.array([1, 1], I64))], [2, 1, 4, 5], {}, "appears twice"),
    ("ConvTranspose", [X, Const(randn(3, 2, 3, 3))], [2, 2, 9, 11],
     {"output_padding": [2, 0], "strides": [1, 1]}, "must be smaller than the stride"),
    ("Less", [X, randn(3, 5)], [2, 3, 4, 5], {}, "do not broadcast"),
])
def test_bad_nodes_fail_to_load_naming_the_node(op, inputs, out, attrs, message):
    n_out = len(out) if isinstance(out[0], list) else 1
    dtype = "bool" if op == "Less" else "int64" if op == "ArgMax" else "float32"
    dtypes = ["float32", "int64"] if op == "TopK" else [dtype] * n_out if n_out > 1 else dtype
    with pytest.raises(rt.InvalidArgument, match=rf"node 'fc' \({op}\): .*{message}"):
        load_op(op, inputs, out, dtypes, n_out, **attrs)


def test_topk_and_gather_nd_run_on_the_runtime_directly():
    x = np.array([[3, 1, 2, 3]], np.float32)
    vals, idx = run_op("TopK", [x, Const(np.array([3], I64))], [[1, 3], [1, 3]],
                       ["float32", "int64"], 2, axis=1)
    np.testing.assert_array_equal(vals, [[3, 3, 2]])
    np.testing.assert_array_equal(idx, [[0, 3, 2]])
    m, _ = load_op("GatherND", [randn(3, 2), np.zeros((2, 1), I64)], [2, 2])
    with pytest.raises(rt.InvalidArgument, match=r"node 'fc' \(GatherND\): index -4 out of range"):
        m.execute([randn(3, 2), np.array([[1], [-4]], I64)])


def _topk_reference(x: np.ndarray, k: int, axis: int, largest: bool):
    """ONNX's order: by value, equal values by index, NaN after every number."""
    moved = np.moveaxis(x, axis, -1)
    key = np.where(np.isnan(moved), np.inf, -moved if largest else moved)
    nan_last = np.isnan(moved)
    order = np.lexsort((np.broadcast_to(np.arange(moved.shape[-1]), moved.shape), key, nan_last),
                       axis=-1)[..., :k]
    vals = np.take_along_axis(moved, order, -1)
    return np.moveaxis(vals, -1, axis), np.moveaxis(order, -1, axis)


def _check_topk(x, k, axis, largest, note=""):
    """The runtime's TopK of x against the reference: indices and values exactly."""
    want_v, want_i = _topk_reference(x.astype(np.float64), k, axis, bool(largest))
    shape = list(x.shape)
    shape[axis] = k
    vals, idx = run_op("TopK", [x, Const(np.array([k], I64))], [shape, shape],
                       [x.dtype.name, "int64"], 2, axis=axis, largest=largest)
    np.testing.assert_array_equal(idx, want_i, err_msg=note)
    np.testing.assert_array_equal(vals, want_v.astype(x.dtype), err_msg=note)


@pytest.mark.parametrize("k", [0, 1, 2, 5, 16, 17, 40])
@pytest.mark.parametrize("largest", [1, 0])
@pytest.mark.parametrize("axis", [-1, 1])
def test_topk_orders_ties_and_nans_like_the_reference_at_every_k(k, largest, axis):
    """Small k (a router's top-2 of 8) select by insertion into k slots, larger k sort:
    both give the reference's order — ties by index, NaN last — along the inner axis and
    an outer one."""
    rng = np.random.default_rng(k + 7 * largest)
    x = rng.integers(-3, 4, (4, 40, 41)).astype(np.float32)  # many ties
    x[rng.random(x.shape) < 0.1] = np.nan
    _check_topk(x, k, axis, largest)


@pytest.mark.parametrize("largest", [1, 0])
@pytest.mark.parametrize("axis", [-1, 1])
def test_topk_of_a_large_k_ties_signed_zeros_and_orders_infinities(largest, axis):
    """k above 16 sorts integer keys made of the values' bits: -0 and +0 tie (by index, as
    the reference compares them equal), infinities at the ends, NaNs after every number."""
    rng = np.random.default_rng(5 + largest)
    x = rng.choice(np.array([0.0, -0.0, 1.5, -1.5, np.inf, -np.inf, np.nan, 3e-45, -3e-45],
                            np.float32), (3, 40, 40))
    k = 24
    _check_topk(x, k, axis, largest)


@pytest.mark.parametrize("n", [1, 2, 3, 4, 7, 8, 9])
@pytest.mark.parametrize("largest", [1, 0])
@pytest.mark.parametrize("dtype", [np.float32, np.int64])
def test_topk_short_axes_place_each_element_like_the_reference(n, largest, dtype):
    """Short axes (insertion into k slots): every k, ties
    (a sort of k-max pooling's indices, a router's equal scores) and NaNs among numbers, along
    the inner axis and an outer one."""
    rng = np.random.default_rng(n + 11 * largest)
    x = rng.integers(-2, 3, (5, n, 6)).astype(dtype)
    if dtype == np.float32:
        x[rng.random(x.shape) < 0.15] = np.nan
    for axis in (1, 2) if n <= 6 else (1,):
        for k in range(0, x.shape[axis] + 1):
            _check_topk(x, k, axis, largest, f"axis {axis} k {k}")


@pytest.mark.parametrize("k", [1, 4, 16])
@pytest.mark.parametrize("largest", [1, 0])
@pytest.mark.parametrize("nan_rate", [0.0, 0.004, 0.3])
def test_topk_long_rows_skip_what_cannot_pass_the_bar_exactly(isa, k, largest, nan_rate):
    """Along a contiguous row only elements that can be among the k are inserted: past a
    floor from the 16 lanes' extremes (AVX-512), or past the k-th kept, 8 compared at a time
    (the plain build). Rows of random numbers, of ties, ascending and descending (every
    element passes, or none), with infinities, NaNs now and then or often (a NaN in the row,
    or among the k, takes the full order) and lengths around the vector's width all give
    the reference's indices and values."""
    rng = np.random.default_rng(k + 3 * largest + int(nan_rate * 1000))
    n = 301
    rows = [rng.standard_normal(n), rng.integers(-2, 3, n), np.arange(n), -np.arange(n),
            np.where(rng.random(n) < 0.1, np.inf, rng.standard_normal(n)),
            np.where(rng.random(n) < 0.1, -np.inf, rng.standard_normal(n))]
    x = np.stack(rows).astype(np.float32)
    x[rng.random(x.shape) < nan_rate] = np.nan
    for length in (n, k + 15, k + 16, k + 17, 40):
        _check_topk(np.ascontiguousarray(x[:, :length]), k, -1, largest, f"row length {length}")


@pytest.mark.parametrize("op", ["ArgMax", "ArgMin"])
@pytest.mark.parametrize("last", [0, 1])
@pytest.mark.parametrize("axis", [0, 1, 2])
def test_argmax_and_argmin_take_numpys_index_along_every_axis(op, last, axis):
    """An outer axis runs row by row over the lanes, the inner one lane by lane: both give
    numpy's first extreme (the last with select_last_index), a NaN being the extreme."""
    rng = np.random.default_rng(axis + 3 * last)
    x = rng.integers(-2, 3, (3, 5, 7)).astype(np.float32)  # ties everywhere
    x[rng.random(x.shape) < 0.08] = np.nan
    pick = np.argmax if op == "ArgMax" else np.argmin
    if last:
        want = x.shape[axis] - 1 - pick(np.flip(x, axis), axis=axis)
    else:
        want = pick(x, axis=axis)
    shape = list(want.shape)
    got = run_op(op, [x], shape, "int64", 1, axis=axis, keepdims=0, select_last_index=last)
    np.testing.assert_array_equal(got, want)
