"""Device kernels of the ops that address elements through index data or run along one axis
(ops/elements.py, CumSum): GatherElements, ScatterElements, ScatterND, ReverseSequence and CumSum,
each placed on the device and compared with the numpy reference and onnxruntime; index data
out of range fails the run naming the node and leaves the model usable."""

from __future__ import annotations

import numpy as np
import pytest

from graphengine import _runtime
from graphengine.engine.errors import GraphEngineError, InvalidInput
from graphengine.engine.runtime import load
from tests.unit.device_cases import check, compile_model, engines, model, randint, randn

DTYPES = [np.float32, np.int64, np.int32, np.uint8, np.bool_]


def _data(shape, dtype):
    if dtype == np.float32:
        return randn(*shape)
    return randint(0, 2, *shape, dtype=dtype) if dtype == np.bool_ else randint(0, 99, *shape,
                                                                                 dtype=dtype)


def _indices(shape, dim, dtype=np.int64):
    """Indices in [-dim, dim): negative ones too."""
    return randint(-dim, dim, *shape, dtype=dtype)


# ---- GatherElements ------------------------------------------------------------------------
@pytest.mark.parametrize("data,idx,axis", [
    ((3, 4), (3, 4), 0), ((3, 4), (2, 4), 0), ((3, 4), (3, 7), 1), ((3, 4), (3, 2), -1),
    ((2, 3, 5), (2, 3, 6), 2), ((2, 3, 5), (4, 3, 5), -3), ((2, 6, 3), (2, 1, 3), 1),
    ((7,), (4,), 0)])
@pytest.mark.parametrize("dtype", DTYPES)
def test_gather_elements(data, idx, axis, dtype):
    dim = data[axis]
    check("GatherElements", {"x": _data(data, dtype), "i": _indices(idx, dim)}, {},
          {"axis": axis}, with_ort=dtype != np.bool_)


def test_gather_elements_int32_indices():
    check("GatherElements", {"x": randn(4, 5), "i": _indices((4, 3), 5, np.int32)}, {}, {"axis": 1})


def test_gather_elements_broadcasts_a_data_dim_of_one_like_the_reference():
    """hf_roberta's position ids: data [1, 130] expanded, indices [batch, 32] along axis 1;
    numpy's take_along_axis reads the one data row for every index row."""
    check("GatherElements", {"x": randn(1, 130), "i": randint(0, 130, 3, 32)}, {}, {"axis": 1},
          with_ort=False)


def test_gather_elements_shapes_numpy_would_broadcast_otherwise_stay_on_the_host():
    # an index dim of 1 against data's 4 off the axis: numpy's output would be 4 wide there
    info = _runtime.kernel_info("GatherElements", ["float32", "int64"], [[3, 4], [2, 1]],
                                {"axis": 0})
    assert not info["supported"] and "differ on dim 1" in info["reason"]
    m = model("GatherElements", {"x": randn(3, 4), "i": randint(0, 3, 2, 1)}, {}, {"axis": 0})
    assert engines(compile_model(m))["GatherElements"] == "host"


# ---- ScatterElements -----------------------------------------------------------------------
def _distinct(shape, dim, axis):
    """Indices without duplicates along `axis` (onnxruntime's order for them is its own)."""
    rng = np.random.default_rng(5)
    moved = list(shape)
    n = moved.pop(axis)
    rows = int(np.prod(moved, dtype=np.int64))
    picks = np.stack([rng.permutation(dim)[:n] for _ in range(rows)]).reshape(*moved, n)
    picks = np.moveaxis(picks, -1, axis)
    return np.where(rng.random(picks.shape) < 0.5, picks - dim, picks).astype(np.int64)


@pytest.mark.parametrize("data,idx,axis", [
    ((5, 4), (3, 4), 0), ((3, 6), (3, 4), 1), ((3, 6), (2, 2), -1), ((2, 3, 4), (2, 2, 3), 1),
    ((2, 3, 4), (1, 3, 4), -3), ((9,), (5,), 0)])
@pytest.mark.parametrize("dtype", DTYPES)
def test_scatter_elements_distinct_indices(data, idx, axis, dtype):
    check("ScatterElements", {"x": _data(data, dtype), "i": _distinct(idx, data[axis], axis),
                              "u": _data(idx, dtype)}, {}, {"axis": axis},
          with_ort=dtype != np.bool_)


@pytest.mark.parametrize("reduction", ["add", "mul", "max", "min"])
@pytest.mark.parametrize("dtype", [np.float32, np.int64, np.int32, np.float64])
def test_scatter_elements_reductions_with_duplicates(reduction, dtype):
    """Duplicate indices combine in the indices' order (float sums too), as ufunc.at does."""
    x = randint(-5, 6, 4, 5, dtype=dtype)
    i = randint(-4, 4, 6, 5, dtype=np.int64)
    u = randint(-5, 6, 6, 5, dtype=dtype)
    check("ScatterElements", {"x": x, "i": i, "u": u}, {}, {"axis": 0, "reduction": reduction},
          exact=True)


def test_scatter_elements_float_sum_of_duplicates_is_bit_exact():
    x = np.zeros((1, 3), np.float32)
    i = np.zeros((1, 40), np.int64)
    u = randn(1, 40) * np.float32(1e4)
    check("ScatterElements", {"x": x, "i": i, "u": u}, {}, {"axis": 1, "reduction": "add"},
          exact=True, with_ort=False)


def test_scatter_elements_duplicates_without_reduction_keep_the_last_write():
    i = np.array([[0, 2, 0, 2, 0]], np.int64)
    u = np.array([[1, 2, 3, 4, 5]], np.float32)
    (y,) = check("ScatterElements", {"x": np.zeros((1, 3), np.float32), "i": i, "u": u}, {},
                 {"axis": 1}, with_ort=False)
    np.testing.assert_array_equal(y, [[5, 0, 4]])


def test_scatter_elements_max_min_keep_nan_like_numpy():
    x = np.array([np.nan, 1, 2, 3], np.float32)
    i = np.array([0, 1, 2, 2], np.int64)
    u = np.array([5, np.nan, 1, np.nan], np.float32)
    for red in ("max", "min"):
        check("ScatterElements", {"x": x, "i": i, "u": u}, {}, {"reduction": red}, with_ort=False)


def _edge_rows(batch, edges, nodes, width, negative=False, duplicates=True):
    """A graph net's edge list expanded over the features: [batch, edges, width] indices
    along axis 1, one node per row (negative: some written from the end)."""
    rng = np.random.default_rng(11)
    col = rng.integers(0, nodes, (batch, edges, 1))
    if not duplicates:
        col = np.stack([rng.permutation(nodes)[:edges] for _ in range(batch)])[..., None]
    if negative:
        col = np.where(rng.random(col.shape) < 0.5, col - nodes, col)
    return np.ascontiguousarray(np.broadcast_to(col, (batch, edges, width))).astype(np.int64)


@pytest.mark.parametrize("negative", [False, True])
@pytest.mark.parametrize("dtype", [np.float32, np.int64, np.uint8])
def test_gather_elements_of_rows_with_one_index_each(negative, dtype):
    """Indices constant along the last dim (an edge list expanded over the features) gather
    whole rows (row copies, not element by element); a row that differs anywhere still
    gathers element-wise (the last case)."""
    i = _edge_rows(2, 37, 11, 20, negative)
    check("GatherElements", {"x": _data((2, 11, 20), dtype), "i": i}, {}, {"axis": 1})
    i[1, 5, 19] = 0
    check("GatherElements", {"x": _data((2, 11, 20), dtype), "i": i}, {}, {"axis": 1})


@pytest.mark.parametrize("reduction", ["none", "add", "max"])
def test_scatter_elements_of_rows_with_one_index_each(reduction):
    """A graph net's message aggregation: rows of updates into node rows, duplicates
    combining in the indices' order (exactly ufunc.at's sums); without a reduction distinct
    rows (onnxruntime's order for duplicates is its own)."""
    i = _edge_rows(2, 37 if reduction != "none" else 9, 11, 20, negative=True,
                   duplicates=reduction != "none")
    u = randn(*i.shape)
    check("ScatterElements", {"x": randn(2, 11, 20), "i": i, "u": u}, {},
          {"axis": 1, "reduction": reduction}, exact=reduction != "none")


def test_scatter_elements_of_piper_tashkeel_int64_positions():
    """piper_tashkeel's GRU: zeros scattered with a Range at cast indices, 1-D int64."""
    check("ScatterElements", {"x": np.zeros(12, np.int64), "i": _distinct((7,), 12, 0),
                              "u": np.arange(7, dtype=np.int64)}, {}, {"axis": 0})


def test_scatter_elements_reduction_on_bool_stays_on_the_host():
    info = _runtime.kernel_info("ScatterElements", ["bool", "int64", "bool"], [[4], [2], [2]],
                                {"axis": 0, "reduction": "add"})
    assert not info["supported"] and "reduction 'add' does not support bool" in info["reason"]


# ---- ScatterND ------------------------------------------------------------------------------
def _distinct_rows(data_shape, rows, k, dtype=np.int64):
    """`rows` index tuples of length k into data_shape[:k], no two alike, some negative."""
    rng = np.random.default_rng(7)
    dims = np.array(data_shape[:k])
    flat = rng.permutation(int(np.prod(dims)))[:rows]
    idx = np.stack(np.unravel_index(flat, dims), axis=-1)
    return np.where(rng.random(idx.shape) < 0.4, idx - dims, idx).astype(dtype)


@pytest.mark.parametrize("data,lead,k", [
    ((6, 5), (3,), 1), ((6, 5), (4,), 2), ((4, 3, 5), (2, 2), 1), ((4, 3, 5), (5,), 2),
    ((4, 3, 5), (2, 3), 3), ((8,), (3,), 1), ((2, 7, 4), (1, 6), 2)])
@pytest.mark.parametrize("dtype", DTYPES)
def test_scatter_nd_distinct_indices(data, lead, k, dtype):
    rows = int(np.prod(lead))
    idx = _distinct_rows(data, rows, k).reshape(*lead, k)
    check("ScatterND", {"x": _data(data, dtype), "i": idx,
                        "u": _data(lead + data[k:], dtype)}, {}, {},
          with_ort=dtype != np.bool_)


@pytest.mark.parametrize("reduction", ["add", "mul", "max", "min"])
@pytest.mark.parametrize("dtype", [np.float32, np.int64, np.int32])
def test_scatter_nd_reductions_with_duplicates(reduction, dtype):
    """Duplicate index rows combine in the indices' order, as ufunc.at does."""
    x = randint(-5, 6, 4, 3, 2, dtype=dtype)
    i = randint(-3, 3, 7, 2, dtype=np.int64)
    u = randint(-5, 6, 7, 2, dtype=dtype)
    check("ScatterND", {"x": x, "i": i, "u": u}, {}, {"reduction": reduction}, exact=True)


def test_scatter_nd_duplicates_without_reduction_keep_the_last_write():
    i = np.array([[1], [0], [1]], np.int64)
    u = np.array([[1, 1], [2, 2], [3, 3]], np.float32)
    (y,) = check("ScatterND", {"x": np.zeros((3, 2), np.float32), "i": i, "u": u}, {}, {},
                 with_ort=False)
    np.testing.assert_array_equal(y, [[2, 2], [3, 3], [0, 0]])


def test_scatter_nd_of_a_subsampled_mask_runs_on_the_device():
    """Speech2Text's encoder marks each sample's last valid frame: zeros [N, T] with a 1
    scattered at [n, length - 1] (it was the one host op in the encoder)."""
    feeds = {"x": np.zeros((3, 10), np.int64), "i": np.array([[0, 9], [1, 4], [2, 0]], np.int64),
             "u": np.ones(3, np.int64)}
    check("ScatterND", feeds, {}, {})
    assert engines(compile_model(model("ScatterND", feeds, {}, {})))["ScatterND"] == "device"


def test_scatter_nd_updates_of_the_wrong_shape_stay_on_the_host_with_the_reason():
    info = _runtime.kernel_info("ScatterND", ["float32", "int64", "float32"],
                                [[4, 3], [2, 1], [2, 4]], {"reduction": "none"})
    assert not info["supported"] and "updates float32[2,4] must be float32[2,3]" in info["reason"]


# ---- ReverseSequence -----------------------------------------------------------------------
@pytest.mark.parametrize("shape,time_axis,batch_axis", [
    ((5, 3, 4), 0, 1), ((3, 5, 2), 1, 0), ((4, 2), 0, 1), ((2, 6), 1, 0), ((6, 2, 3, 2), -4, -3)])
@pytest.mark.parametrize("dtype", [np.float32, np.bool_, np.int32])
def test_reverse_sequence(shape, time_axis, batch_axis, dtype):
    steps, batch = shape[time_axis], shape[batch_axis]
    lens = np.array([(steps, 0, 1, steps - 1, 2, 3)[b % 6] for b in range(batch)], np.int64)
    check("ReverseSequence", {"x": _data(shape, dtype), "lens": lens}, {},
          {"time_axis": time_axis, "batch_axis": batch_axis},
          with_ort=dtype != np.bool_ and time_axis >= 0)


def test_reverse_sequence_of_a_tf2onnx_bidirectional_layer():
    """nakdimon: [T, B, 400] float32 and its [T, B, 1] bool mask, every row the full length."""
    lens = np.full(2, 9, np.int64)
    check("ReverseSequence", {"x": randn(9, 2, 400), "lens": lens}, {},
          {"time_axis": 0, "batch_axis": 1})
    check("ReverseSequence", {"x": _data((9, 2, 1), np.bool_), "lens": lens}, {},
          {"time_axis": 0, "batch_axis": 1}, with_ort=False)


@pytest.mark.parametrize("bad", [5, 6, -1, 2**40])
def test_reverse_sequence_lengths_out_of_range_fail_the_run_naming_the_node(bad):
    x = randn(4, 3, 2)
    good = np.array([4, 0, 2], np.int64)
    loaded = load(compile_model(model("ReverseSequence", {"x": x, "lens": good}, {},
                                      {"time_axis": 0, "batch_axis": 1})))
    with pytest.raises(InvalidInput, match=rf"node 'reversesequence_0' \(ReverseSequence\): "
                                           rf"sequence_lens\[1\] = {bad} is out of range \[0, 4\]"):
        loaded.execute({"x": x, "lens": np.array([4, bad, 2], np.int64)})
    (y,) = loaded.execute({"x": x, "lens": good}).values()
    np.testing.assert_array_equal(y[:, 0], x[::-1, 0])
    np.testing.assert_array_equal(y[:, 1], x[:, 1])
    np.testing.assert_array_equal(y[:, 2], np.concatenate([x[1::-1, 2], x[2:, 2]]))


@pytest.mark.parametrize("attrs,match", [
    ({"time_axis": 0, "batch_axis": 0}, "time_axis and batch_axis are both axis 0"),
    ({"time_axis": -4, "batch_axis": 1}, r"time_axis -4 is out of range for rank 3"),
    ({"time_axis": 0, "batch_axis": 3}, r"batch_axis 3 is out of range for rank 3")])
def test_reverse_sequence_bad_axes_are_compile_errors_naming_the_node(attrs, match):
    m = model("ReverseSequence", {"x": randn(4, 3, 2), "lens": np.full(3, 2, np.int64)}, {}, attrs)
    with pytest.raises(GraphEngineError, match=rf"reversesequence_0.*{match}"):
        compile_model(m)


# ---- CumSum --------------------------------------------------------------------------------
@pytest.mark.parametrize("shape,axis", [((7,), 0), ((3, 5), 1), ((3, 5), -2), ((2, 4, 6), 1),
                                        ((2, 4, 6), -1), ((1, 32), 1)])
@pytest.mark.parametrize("exclusive", [0, 1])
@pytest.mark.parametrize("reverse", [0, 1])
@pytest.mark.parametrize("dtype", [np.float32, np.int64, np.int32, np.float64])
def test_cumsum(shape, axis, exclusive, reverse, dtype):
    x = randn(*shape).astype(dtype) if dtype in (np.float32, np.float64) else \
        randint(-50, 50, *shape, dtype=dtype)
    check("CumSum", {"x": x}, {"axis": np.array(axis, np.int64)},
          {"exclusive": exclusive, "reverse": reverse}, exact=True)


def test_cumsum_float_sums_in_order_bit_for_bit_and_keeps_negative_zero():
    x = (randn(3, 200) * np.float32(1e3)).astype(np.float32)
    x[:, 0] = -0.0
    for exclusive in (0, 1):
        (y,) = check("CumSum", {"x": x}, {"axis": np.array([1], np.int32)},
                     {"exclusive": exclusive}, exact=True, with_ort=False)
        first = y[:, 1] if exclusive else y[:, 0]
        assert np.signbit(first).all()


def test_cumsum_int32_wraps_like_numpy():
    x = np.full((1, 4), 2**30, np.int32)
    (y,) = check("CumSum", {"x": x}, {"axis": np.array(1, np.int64)}, with_ort=False)
    assert y[0, 2] == np.int32(-(2**30))


def test_cumsum_axis_out_of_range_is_a_compile_error_naming_the_node():
    m = model("CumSum", {"x": randn(3, 4)}, {"axis": np.array(-3, np.int64)})
    with pytest.raises(GraphEngineError, match=r"cumsum_0.*axis -3 is out of range for rank 2"):
        compile_model(m)


# ---- bad indices: errors that name the node, never a crash --------------------------------
@pytest.mark.parametrize("bad", [3, -4, 99, -(2**31)])
@pytest.mark.parametrize("dtype", [np.int64, np.int32])
def test_scatter_nd_index_out_of_range_fails_the_run_naming_the_node(bad, dtype):
    x = randn(3, 4)
    good = np.array([[1, 3], [-3, 0]], dtype)
    feeds = {"x": x, "i": good, "u": randn(2)}
    loaded = load(compile_model(model("ScatterND", feeds, {}, {})))
    with pytest.raises(InvalidInput, match=rf"node 'scatternd_0' \(ScatterND\): index {bad} out "
                                           r"of range \[-3, 2\] on data dim 0 \(indices row 1\)"):
        loaded.execute(dict(feeds, i=np.array([[1, 3], [bad, 0]], dtype)))
    (y,) = loaded.execute(feeds).values()  # the model stays usable
    want = x.copy()
    want[1, 3], want[0, 0] = feeds["u"]
    np.testing.assert_array_equal(y, want)



@pytest.mark.parametrize("bad", [5, -6, 99, -(2**31)])
@pytest.mark.parametrize("dtype", [np.int64, np.int32])
@pytest.mark.parametrize("op", ["GatherElements", "ScatterElements"])
def test_index_out_of_range_fails_the_run_naming_the_node(op, bad, dtype):
    x = randn(2, 5)
    good = np.array([[1, -5], [4, 0]], dtype)
    feeds = {"x": x, "i": good}
    if op == "ScatterElements":
        feeds["u"] = randn(2, 2)
    loaded = load(compile_model(model(op, feeds, {}, {"axis": -1})))
    bad_feeds = dict(feeds, i=np.array([[1, -5], [0, bad]], dtype))
    with pytest.raises(InvalidInput, match=rf"node '{op.lower()}_0' \({op}\): index {bad} out of "
                                           r"range \[-5, 4\] on axis 1 \(indices element 3\)"):
        loaded.execute(bad_feeds)
    (y,) = loaded.execute(feeds).values()  # the model stays usable
    if op == "GatherElements":
        np.testing.assert_array_equal(y, [[x[0, 1], x[0, 0]], [x[1, 4], x[1, 0]]])
    else:
        want = x.copy()
        want[0, 1], want[0, 0] = feeds["u"][0]
        want[1, 4], want[1, 0] = feeds["u"][1]
        np.testing.assert_array_equal(y, want)
