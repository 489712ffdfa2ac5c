"""A Col2Im whose blocks tile the image (prepare/col2im.py) is a Reshape, Transpose, Reshape
on the device, equal to the host kernel's fold (ONNX Runtime's where it has one); overlapping
or padded 2-D folds run the runtime's Col2Im loop (VOLO's outlook attention), 3-D ones the
host kernel."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from graphengine.engine.importers import load_model
from graphengine.engine.ops.conv import _col2im
from graphengine.engine.pipeline import compile_graph
from graphengine.engine.runtime import LoadedModel

RNG = np.random.default_rng(13)


def _model(shape, image, block, **attrs):
    inits = [numpy_helper.from_array(np.array(image, np.int64), "image"),
             numpy_helper.from_array(np.array(block, np.int64), "block")]
    node = helper.make_node("Col2Im", ["x", "image", "block"], ["y"], **attrs)
    graph = helper.make_graph([node], "fold",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                              inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=9)


def _reference(x, image, block, attrs):
    full = {"dilations": attrs.get("dilations", []), "pads": attrs.get("pads", []),
            "strides": attrs.get("strides", [])}
    return _col2im([x, np.array(image), np.array(block)], full)[0]


@pytest.mark.parametrize("shape,image,block", [
    ((2, 64 * 4, 16), [8, 8], [2, 2]),     # MobileViTV2's folds
    ((1, 3 * 6, 20), [8, 15], [2, 3]),     # unequal blocks and grid
    ((3, 5 * 4, 12), [4, 6, 2], [2, 1, 2]),  # three spatial dims
])
def test_a_tiling_fold_is_a_permutation_on_the_device(shape, image, block):
    attrs = {"strides": block}
    x = RNG.standard_normal(shape).astype(np.float32)
    compiled = compile_graph(load_model(_model(list(shape), image, block, **attrs)))
    assert [p.op_type for p in compiled.report.placements if p.engine == "host"] == []
    got = LoadedModel(compiled).execute({"x": x})["y"]
    np.testing.assert_array_equal(got, _reference(x, image, block, attrs))


@pytest.mark.parametrize("image,block,attrs", [
    ([6, 6], [2, 2], {"strides": [1, 1]}),
    ([6, 6], [2, 2], {"strides": [2, 2], "pads": [1, 1, 1, 1]}),
    ([6, 6], [2, 2], {"strides": [2, 2], "dilations": [2, 2]}),
    ([14, 14], [3, 3], {"strides": [1, 1], "pads": [1, 1, 1, 1]}),  # VOLO's outlook folds
    ([14, 14], [3, 3], {"strides": [2, 2], "pads": [1, 1, 1, 1]}),
    ([9, 7], [3, 2], {"strides": [2, 1], "pads": [0, 1, 2, 0], "dilations": [1, 2]}),
])
def test_overlapping_or_padded_folds_run_on_the_device(image, block, attrs):
    strides, dil = attrs["strides"], attrs.get("dilations", [1, 1])
    pads = attrs.get("pads", [0, 0, 0, 0])
    k = [(image[i] + pads[i] + pads[i + 2] - (dil[i] * (block[i] - 1) + 1)) // strides[i] + 1
         for i in range(2)]
    shape = [2, 3 * block[0] * block[1], k[0] * k[1]]
    x = RNG.standard_normal(shape).astype(np.float32)
    model = _model(shape, image, block, **attrs)
    compiled = compile_graph(load_model(model))
    assert [p.op_type for p in compiled.report.placements if p.engine == "host"] == []
    got = LoadedModel(compiled).execute({"x": x})["y"]
    np.testing.assert_allclose(got, _reference(x, image, block, attrs), rtol=1e-6, atol=1e-6)
    want = ort.InferenceSession(model.SerializeToString(),
                                providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_an_overlapping_three_dimensional_fold_keeps_the_host_kernel():
    image, block, attrs = [4, 4, 4], [2, 2, 2], {"strides": [1, 1, 1]}
    shape = [1, 2 * 8, 27]
    x = RNG.standard_normal(shape).astype(np.float32)
    compiled = compile_graph(load_model(_model(shape, image, block, **attrs)))
    assert [p.op_type for p in compiled.report.placements if p.engine == "host"] == ["Col2Im"]
    got = LoadedModel(compiled).execute({"x": x})["y"]
    np.testing.assert_allclose(got, _reference(x, image, block, attrs), rtol=1e-6, atol=1e-6)
