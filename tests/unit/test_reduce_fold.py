"""The reduction loop (FoldKernel in kernels_reduce.cc) over axis patterns that merge into
alternating kept and reduced runs: each row's output is found by an odometer over the merged
axes, sums add a row into a row of outputs. Results are numpy's (NaN propagates through Max
and Min)."""

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from graphengine import _runtime as rt
from graphengine.engine.importers import load_model
from graphengine.engine.pipeline import CompileOptions, compile_graph
from graphengine.engine.runtime import LoadedModel
from tests.unit.test_runtime import SpecBuilder

RNG = np.random.default_rng(31)
NUMPY = {"ReduceMean": np.mean, "ReduceSum": np.sum, "ReduceMax": np.max, "ReduceMin": np.min,
         "ReduceProd": np.prod}


def _reduce(op, x, axes, keepdims):
    ax = numpy_helper.from_array(np.asarray(axes, np.int64), "axes")
    node = helper.make_node(op, ["x", "axes"], ["y"], keepdims=keepdims)
    graph = helper.make_graph(
        [node], "r", [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x.shape))],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], [ax])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=8)
    compiled = compile_graph(load_model(model), CompileOptions(lint=True))
    return LoadedModel(compiled).execute({"x": x})["y"]


@pytest.mark.parametrize("op", sorted(NUMPY))
@pytest.mark.parametrize("shape,axes", [((1, 144, 40, 32), [3]), ((1, 144, 40, 32), [2]),
                                        ((3, 4, 5, 6), [1, 3]), ((3, 4, 5, 6), [0, 2]),
                                        ((2, 3, 1, 7, 5), [1, 3]), ((5, 9, 2), [0]),
                                        ((4, 6, 8), [0, 1, 2])])
def test_reductions_over_alternating_axes_are_numpys(op, shape, axes):
    x = RNG.standard_normal(shape).astype(np.float32)
    if op in ("ReduceMax", "ReduceMin"):
        x.flat[7] = np.nan
    for keepdims in (0, 1):
        got = _reduce(op, x, axes, keepdims)
        want = NUMPY[op](x, axis=tuple(axes), keepdims=bool(keepdims))
        assert got.shape == want.shape
        np.testing.assert_allclose(got, want, rtol=2e-5, atol=2e-5)


def _stored_reduce(op, shape, axes, fmt_in="nhwc", fmt_out="nhwc", keepdims=1):
    """x (plain) -> TransData to `fmt_in` -> op (axes) -> `fmt_out` -> TransData to plain: a
    reduction inside a convolution region, on the runtime directly."""
    b = SpecBuilder("stored_reduce")
    x = b.input("x", "float32", shape)
    keep = [1 if d in axes else n for d, n in enumerate(shape)]
    out_shape = keep if keepdims else [n for d, n in enumerate(shape) if d not in axes]
    sx = b.tensor("sx", "float32", shape)
    b.tensors[sx]["format"] = fmt_in
    b.kernel("TransData", [x], [sx], src_format="nchw", dst_format=fmt_in)
    y = b.tensor("y", "float32", out_shape)
    b.tensors[y]["format"] = fmt_out
    b.kernel(op, [sx], [y], axes=list(axes), keepdims=keepdims)
    out = b.tensor("out", "float32", out_shape)
    b.kernel("TransData", [y], [out], src_format=fmt_out, dst_format="nchw")
    b.outputs = [out]
    return b.load()


@pytest.mark.parametrize("op", sorted(NUMPY))
@pytest.mark.parametrize("shape,axes", [
    ((1, 144, 40, 32), [3]),        # coordinate attention: mean over W, then over H
    ((2, 96, 40, 32), [2]),
    ((2, 24, 9, 7), [1]),           # CBAM: channel max and mean (a one-channel map)
    ((3, 20, 6, 5), [2, 3]),        # a global pool kept 4-D
    ((2, 16, 11), [2]),             # a signal [N, C, L] stored [N, L, C]
    ((2, 8, 3, 5, 4), [2, 4]),      # 5-D, stored N, D, H, W, C
    ((70, 40, 33, 31), [3]),        # past the loop's size: oneDNN's reduction
])
def test_reductions_fold_the_stored_nhwc_axes(op, shape, axes):
    """A reduction keeping the rank reads and writes NHWC: the kernel folds the stored
    order's axes (C last), the reduced ones mapped with them; results are numpy's."""
    m = _stored_reduce(op, shape, axes)
    x = RNG.standard_normal(shape).astype(np.float32)
    (got,) = m.execute([x])
    want = NUMPY[op](x, axis=tuple(axes), keepdims=True)
    np.testing.assert_allclose(got, want, rtol=2e-5, atol=2e-5)
    assert m.formats["y"] == "nhwc"


@pytest.mark.parametrize("fmt_in,fmt_out,keepdims,message", [
    ("nChw8c", "nChw8c", 1, "a reduction takes nchw or nhwc"),
    ("nhwc", "nchw", 1, "this op needs one format"),
    ("nhwc", "nchw", 0, "a reduction that drops axes takes nchw"),
])
def test_reductions_in_other_formats_are_refused_at_load(fmt_in, fmt_out, keepdims, message):
    with pytest.raises(rt.InvalidArgument, match=message):
        _stored_reduce("ReduceMean", (2, 16, 5, 6), [3], fmt_in, fmt_out, keepdims)


def test_an_integer_product_runs_on_the_device_and_wraps_as_numpy():
    """ReduceProd of int64 (a SigLIP2 patch count: each image's grid height x width) is the
    loop's, not a host step; a product past int64 wraps as numpy's does."""
    node = helper.make_node("ReduceProd", ["x", "axes"], ["y"], keepdims=0)
    graph = helper.make_graph(
        [node], "p", [helper.make_tensor_value_info("x", TensorProto.INT64, [3, 2])],
        [helper.make_tensor_value_info("y", TensorProto.INT64, None)],
        [numpy_helper.from_array(np.asarray([1], np.int64), "axes")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=8)
    compiled = compile_graph(load_model(model), CompileOptions(lint=True))
    assert [p.engine for p in compiled.report.placements] == ["device"], \
        compiled.report.placements
    x = np.asarray([[16, 16], [12, 20], [2**40, 2**30]], np.int64)
    got = LoadedModel(compiled).execute({"x": x})["y"]
    np.testing.assert_array_equal(got, np.prod(x, axis=1))
