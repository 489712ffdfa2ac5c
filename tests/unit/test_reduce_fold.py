"""The reduction loop (FoldKernel in kernels_reduce.cc) over axis patterns that merge into
alternating kept and reduced runs: each row's output is found by an odometer over the merged
axes, sums add a row into a row of outputs. Results are numpy's (NaN propagates through Max
and Min)."""

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from graphengine.engine.importers import load_model
from graphengine.engine.pipeline import CompileOptions, compile_graph
from graphengine.engine.runtime import LoadedModel

RNG = np.random.default_rng(31)
NUMPY = {"ReduceMean": np.mean, "ReduceSum": np.sum, "ReduceMax": np.max, "ReduceMin": np.min}


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
