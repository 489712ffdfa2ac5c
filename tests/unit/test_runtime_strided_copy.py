"""The runtime's strided copy (runtime_ext/src/host/copy.cc), which runs Slice, Transpose and
Expand views: rows walked by an odometer over the outer dims (first row of each thread's
span from its index), rows of any length, on one thread and on a team."""

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from graphengine.engine.importers import load_model
from graphengine.engine.pipeline import compile_graph
from graphengine.engine.runtime import LoadedModel

RNG = np.random.default_rng(7)


def slice_model(shape, starts, ends, axes, steps):
    inits = [numpy_helper.from_array(np.array(v, np.int64), name)
             for name, v in (("s", starts), ("e", ends), ("a", axes), ("k", steps))]
    node = helper.make_node("Slice", ["x", "s", "e", "a", "k"], ["y"])
    graph = helper.make_graph([node], "slice",
                              [helper.make_tensor_value_info("x", TensorProto.INT32, shape)],
                              [helper.make_tensor_value_info("y", TensorProto.INT32, None)],
                              inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=10)


def impls(model: LoadedModel) -> list[str]:
    return [t["impl"] for n in model.natives.values() for t in n.profile() if t["op"] == "Slice"]


# (shape, starts, ends, axes, steps): rows of 1, 2 and many elements, carries through
# several outer dims, steps and reversed axes, and large copies (a team's spans).
CASES = [
    ((1, 192, 21), [0], [2], [2], [1]),             # 192 rows of two elements
    ((3, 5, 7, 11), [1, 0, 2], [3, 5, 9], [0, 2, 3], [1, 2, 3]),
    ((2, 3, 4, 5, 6), [0, 1, 1], [2, 3, 5], [1, 3, 4], [2, 1, 2]),
    ((2, 3, 2, 3, 2, 5), [1, 4], [-1, 0], [1, 5], [1, -1]),
    ((4, 9, 13), [8, 12], [-100, -100], [1, 2], [-3, -5]),
    ((64, 130, 40), [1, 3], [63, 37], [0, 2], [1, 1]),      # 1.2 MB: split over a team
    ((8, 300, 129), [0, 5], [300, 128], [1, 2], [2, 7]),    # a team, gathered rows
]


@pytest.mark.parametrize("shape,starts,ends,axes,steps", CASES)
def test_slices_copy_exactly(shape, starts, ends, axes, steps):
    x = RNG.integers(-2**31, 2**31 - 1, size=shape, dtype=np.int32)
    model = LoadedModel(compile_graph(load_model(slice_model(list(shape), starts, ends, axes,
                                                             steps))))
    want = x
    for s, e, a, k in zip(starts, ends, axes, steps):
        idx = [slice(None)] * x.ndim
        idx[a] = slice(s, e, k)
        want = want[tuple(idx)]
    got = model.execute({"x": x})["y"]
    assert got.shape == want.shape
    np.testing.assert_array_equal(got, want)
    assert impls(model) == ["strided copy"]
