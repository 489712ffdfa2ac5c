"""Device kernels of IsNaN / IsInf (kernels_classify.cc) and of a Clip whose bounds the graph
computes at run time (kernels_unary.cc), compared with the numpy reference and onnxruntime."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from tests.unit.device_cases import (
    check,
    compile_model,
    engines,
    onnxruntime,
    randn,
    reference,
    run_device,
)

SPECIALS = [np.nan, np.inf, -np.inf, 0.0, -0.0, 1.5, -3.0, np.finfo(np.float32).max]


def _specials(*shape, dtype=np.float32):
    x = randn(*shape).astype(dtype)
    flat = x.reshape(-1)
    flat[::3] = np.resize(np.array(SPECIALS, dtype), flat[::3].shape)
    return x


@pytest.mark.parametrize("shape", [(7,), (2, 3, 4), (), (1, 12, 5, 5)])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_isnan(shape, dtype):
    check("IsNaN", {"x": _specials(*shape, dtype=dtype)})


@pytest.mark.parametrize("pos", [0, 1])
@pytest.mark.parametrize("neg", [0, 1])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_isinf_detects_the_infinities_asked_for(pos, neg, dtype):
    check("IsInf", {"x": _specials(3, 8, dtype=dtype)}, {},
          {"detect_positive": pos, "detect_negative": neg})


# ---- Clip with bounds computed at run time -----------------------------------------------
def _clip_model(x_shape, lo, hi, floor_db=None):
    """Clip(x, lo, hi): a bound given as an array is an initializer, "in" a graph input of
    shape `floor_db` (one element), None omitted."""
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x_shape))]
    inits, names = [], ["x"]
    for name, b in (("lo", lo), ("hi", hi)):
        if b is None:
            names.append("")
        elif isinstance(b, str):
            inputs.append(helper.make_tensor_value_info(name, TensorProto.FLOAT, list(floor_db)))
            names.append(name)
        else:
            inits.append(numpy_helper.from_array(np.asarray(b, np.float32), name))
            names.append(name)
    while names[-1] == "":
        names.pop()
    g = helper.make_graph([helper.make_node("Clip", names, ["y"])], "clip", inputs,
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)], ir_version=8)


def _check_clip(m, feeds, with_ort=True):
    got = run_device(m, feeds, "Clip")
    wants = [reference(m, feeds)] + ([onnxruntime(m, feeds)] if with_ort else [])
    for want in wants:
        np.testing.assert_array_equal(got[0], want[0])
    return got[0]


@pytest.mark.parametrize("lo,hi", [("in", np.float32(2)), ("in", None), (None, "in"),
                                   (np.float32(-1), "in"), ("in", "in")])
def test_clip_reads_computed_bounds_at_run_time(lo, hi):
    x = randn(2, 1, 9, 32) * np.float32(3)
    m = _clip_model(x.shape, lo, hi, ())
    for bound in (-0.5, 0.25, 4.0):
        feeds = {"x": x}
        feeds.update({k: np.array(bound + (k == "hi"), np.float32) for k, b in
                      (("lo", lo), ("hi", hi)) if isinstance(b, str)})
        _check_clip(m, feeds)


def test_clip_with_a_one_element_bound_of_rank_one_runs_on_the_device():
    m = _clip_model((3, 4), "in", None, (1,))
    _check_clip(m, {"x": randn(3, 4), "lo": np.array([0.1], np.float32)}, with_ort=False)


def test_clip_run_time_bounds_keep_nan_like_numpy():
    """numpy's maximum then minimum: a NaN in x or in a bound is NaN, min > max gives max."""
    x = np.array([np.nan, -2, 0.5, 3, np.inf, -np.inf], np.float32)
    m = _clip_model(x.shape, "in", "in", ())
    for lo, hi in ((0.0, 1.0), (np.nan, 1.0), (0.0, np.nan), (2.0, 1.0)):
        got = _check_clip(m, {"x": x, "lo": np.array(lo, np.float32),
                              "hi": np.array(hi, np.float32)}, with_ort=False)
        if np.isnan(lo) or np.isnan(hi):
            assert np.isnan(got).all()
    np.testing.assert_array_equal(got, [np.nan, 1, 1, 1, 1, 1])


def test_clip_of_oww_melspec_floor_below_the_max():
    """oww_melspec: Clip(x, ReduceMax(x) - 80, inf): the floor is a graph value."""
    x_info = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1, 20, 32])
    nodes = [helper.make_node("ReduceMax", ["x"], ["m"], keepdims=0),
             helper.make_node("Sub", ["m", "db"], ["floor"]),
             helper.make_node("Clip", ["x", "floor", "top"], ["y"])]
    inits = [numpy_helper.from_array(np.array(8, np.float32), "db"),
             numpy_helper.from_array(np.array(np.inf, np.float32), "top")]
    g = helper.make_graph(nodes, "melspec", [x_info],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)], ir_version=8)
    x = randn(1, 1, 20, 32) * np.float32(10)
    compiled = compile_model(m)
    assert engines(compiled)["Clip"] == "device"
    assert [p.engine for p in compiled.report.partitions] == ["device"]
    np.testing.assert_array_equal(run_device(m, {"x": x}, "Clip")[0], onnxruntime(m, {"x": x})[0])


def test_clip_with_a_bound_of_several_elements_stays_on_the_host():
    m = _clip_model((3, 2), "in", None, (2,))
    placed = {p.op_type: p for p in compile_model(m).report.placements}["Clip"]
    assert placed.engine == "host"
    assert "neither a constant scalar nor one element" in "; ".join(placed.rejections)
