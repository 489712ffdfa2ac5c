"""The transpose of our own (runtime_ext/src/host/transpose.cc): TransData between nchw and nhwc,
and Transpose nodes whose permutation is a batched matrix transpose, for 4-byte elements."""

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from graphengine import _runtime
from graphengine.engine.importers import load_model
from graphengine.engine.pipeline import compile_graph
from graphengine.engine.runtime import LoadedModel
from tests import zoo

OWN = "transpose avx512"


def impls(model: LoadedModel, op: str) -> list[str]:
    return [t["impl"] for native in model.natives.values() for t in native.profile()
            if t["op"] == op]


def transpose_model(shape, perm, elem=TensorProto.FLOAT):
    node = helper.make_node("Transpose", ["x"], ["y"], perm=perm)
    graph = helper.make_graph([node], "t", [helper.make_tensor_value_info("x", elem, shape)],
                              [helper.make_tensor_value_info("y", elem, None)])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=10)


# Shapes whose matrices are cut by the 16 x 16 tiles' edges on either side, and whole tiles.
@pytest.mark.parametrize("shape,perm", [
    ((33, 17), (1, 0)),
    ((16, 48), (1, 0)),
    ((3, 5, 18), (0, 2, 1)),
    ((2, 20, 7, 9), (0, 2, 3, 1)),   # NCHW -> NHWC
    ((2, 7, 9, 20), (0, 3, 1, 2)),   # NHWC -> NCHW
    ((1, 2, 3, 17, 31), (0, 1, 4, 2, 3)),
])
@pytest.mark.parametrize("dtype", [np.float32, np.int32])
def test_batched_matrix_transposes_are_exact(shape, perm, dtype):
    elem = TensorProto.FLOAT if dtype == np.float32 else TensorProto.INT32
    x = (np.random.default_rng(1).standard_normal(shape) * 1000).astype(dtype)
    model = LoadedModel(compile_graph(load_model(transpose_model(list(shape), list(perm), elem))))
    y = model.execute({"x": x})["y"]
    assert y.dtype == dtype and y.shape == tuple(shape[p] for p in perm)
    np.testing.assert_array_equal(y, np.transpose(x, perm))
    if _runtime.cpu_has_avx512():
        assert impls(model, "Transpose") == [OWN]


# A side of 2..8 (an image's channels into NHWC and back) takes the permute path: every side
# and both directions, pixel counts cut by its groups of 16 or under one group, batches of
# matrices, and one large enough to run on a team.
@pytest.mark.parametrize("side", range(2, 10))
@pytest.mark.parametrize("pixels,batch", [(37, 1), (16, 2), (5, 3), (70001, 1)])
@pytest.mark.parametrize("to_last", [True, False])
def test_small_sides_interleave_and_deinterleave_exactly(side, pixels, batch, to_last):
    shape, perm = ((batch, side, pixels), (0, 2, 1)) if to_last else \
        ((batch, pixels, side), (0, 2, 1))
    x = np.random.default_rng(side).integers(-2**31, 2**31 - 1, size=shape, dtype=np.int32)
    model = LoadedModel(compile_graph(load_model(transpose_model(list(shape), list(perm),
                                                                 TensorProto.INT32))))
    np.testing.assert_array_equal(model.execute({"x": x})["y"], np.transpose(x, perm))
    if _runtime.cpu_has_avx512():
        assert impls(model, "Transpose") == [OWN]


def test_an_image_enters_nhwc_exactly():
    """The first TransData of a conv net (3 channels to NHWC) and its exit (2 channels back)."""
    nodes = [helper.make_node("Conv", ["x", "w1"], ["a"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["a"], ["r"]),
             helper.make_node("Conv", ["r", "w2"], ["y"])]
    rng = np.random.default_rng(4)
    inits = [helper.make_tensor("w1", TensorProto.FLOAT, (8, 3, 3, 3),
                                rng.standard_normal((8, 3, 3, 3)).astype(np.float32).ravel()),
             helper.make_tensor("w2", TensorProto.FLOAT, (2, 8, 1, 1),
                                rng.standard_normal((2, 8, 1, 1)).astype(np.float32).ravel())]
    graph = helper.make_graph(
        nodes, "img", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 23, 29])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=10)
    model = LoadedModel(compile_graph(load_model(m)))
    x = rng.standard_normal((2, 3, 23, 29)).astype(np.float32)
    sess = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    np.testing.assert_allclose(model.execute({"x": x})["y"], sess.run(None, {"x": x})[0],
                               rtol=1e-4, atol=1e-4)
    if _runtime.cpu_has_avx512():
        assert impls(model, "TransData") == [OWN, OWN]


def test_other_permutations_keep_the_general_kernels():
    shape, perm = (4, 5, 6), (1, 0, 2)  # not one batched matrix transpose
    x = np.random.default_rng(2).standard_normal(shape).astype(np.float32)
    model = LoadedModel(compile_graph(load_model(transpose_model(list(shape), list(perm)))))
    np.testing.assert_array_equal(model.execute({"x": x})["y"], np.transpose(x, perm))
    assert OWN not in impls(model, "Transpose")


def test_conv_towers_convert_nchw_and_nhwc_with_the_transpose():
    # 20 channels and 9 x 9 images: neither side of the matrices is a multiple of 16
    m = zoo.branchy(towers=2, channels=20, size=9, batch=3, depth=1)
    x = np.random.default_rng(3).standard_normal((3, 20, 9, 9)).astype(np.float32)
    model = LoadedModel(compile_graph(load_model(m)))
    got = model.execute({"input": x})["output"]
    sess = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    np.testing.assert_allclose(got, sess.run(None, {"input": x})[0], rtol=1e-4, atol=1e-5)
    transdata = impls(model, "TransData")
    assert len(transdata) == 2  # in to nhwc, out to nchw
    if _runtime.cpu_has_avx512():
        assert transdata == [OWN, OWN]
