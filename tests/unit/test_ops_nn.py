"""Convolution, pooling, normalization, matrix, reduction and resize ops against
onnxruntime / onnx.reference."""

from __future__ import annotations

import numpy as np
import pytest

from graphengine.engine.errors import ShapeError
from tests.unit.test_ops_common import check, rand, symbolic


def i64(*values: int) -> np.ndarray:
    return np.array(values, dtype=np.int64)


# ---- convolution ----------------------------------------------------------------------------
@pytest.mark.parametrize("attrs", [
    {}, {"pads": [1, 1, 1, 1]}, {"strides": [2, 2], "pads": [1, 0, 2, 1]},
    {"dilations": [2, 1]}, {"auto_pad": "SAME_UPPER", "strides": [2, 2]},
    {"auto_pad": "SAME_LOWER"}, {"auto_pad": "VALID", "strides": [2, 1]},
])
def test_conv2d(attrs: dict) -> None:
    check("Conv", [("x", rand(2, 4, 7, 8)), ("w", rand(6, 4, 3, 3, seed=1)),
                   ("b", rand(6, seed=2))], attrs, consts=["w", "b"], rtol=1e-4, atol=1e-4)


def test_conv_grouped_depthwise_1d_3d() -> None:
    check("Conv", [("x", rand(1, 4, 6, 6)), ("w", rand(8, 2, 3, 3, seed=1))],
          {"group": 2, "pads": [1, 1, 1, 1]}, consts=["w"], rtol=1e-4, atol=1e-4)
    check("Conv", [("x", rand(1, 6, 5, 5)), ("w", rand(6, 1, 3, 3, seed=1))],
          {"group": 6}, consts=["w"], rtol=1e-4, atol=1e-4)
    check("Conv", [("x", rand(2, 3, 9)), ("w", rand(4, 3, 2, seed=1))], {"strides": [2]},
          rtol=1e-4, atol=1e-4)
    check("Conv", [("x", rand(1, 2, 4, 4, 4)), ("w", rand(3, 2, 2, 2, 2, seed=1))],
          rtol=1e-4, atol=1e-4)


def test_conv_channel_mismatch_names_channels() -> None:
    with pytest.raises(ShapeError, match="X has 3 channels, expected W.shape\\[1\\]"):
        check("Conv", [("x", rand(1, 3, 5, 5)), ("w", rand(2, 2, 3, 3))])


def test_conv_symbolic_batch_and_spatial() -> None:
    (meta,) = symbolic("Conv", {"x": ["n", 3, "h", 8]},
                       [("x", rand(1, 3, 8, 8)), ("w", rand(4, 3, 3, 3))],
                       {"pads": [1, 1, 1, 1]}, consts=["w"])
    assert meta.shape[0] == "n" and meta.shape[1] == 4 and meta.shape[3] == 8
    assert isinstance(meta.shape[2], str)


@pytest.mark.parametrize("attrs", [
    {}, {"strides": [2, 2]}, {"strides": [2, 2], "output_padding": [1, 1]},
    {"pads": [1, 1, 1, 1], "strides": [2, 2]}, {"output_shape": [9, 9], "strides": [2, 2]},
    {"group": 2}, {"auto_pad": "SAME_UPPER", "strides": [2, 2]}, {"dilations": [2, 2]},
])
def test_conv_transpose(attrs: dict) -> None:
    check("ConvTranspose", [("x", rand(1, 4, 4, 4)), ("w", rand(4, 3, 3, 3, seed=1)),
                            ("b", rand(3 * attrs.get("group", 1), seed=2))], attrs,
          consts=["w", "b"], rtol=1e-4, atol=1e-4)


# ---- pooling --------------------------------------------------------------------------------
@pytest.mark.parametrize("op", ["MaxPool", "AveragePool"])
@pytest.mark.parametrize("attrs", [
    {"kernel_shape": [3, 3]}, {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]},
    {"kernel_shape": [2, 2], "strides": [2, 2], "ceil_mode": 1},
    {"kernel_shape": [3, 2], "auto_pad": "SAME_UPPER", "strides": [2, 2]},
    {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1], "count_include_pad": 1},
])
def test_pool2d(op: str, attrs: dict) -> None:
    if op == "MaxPool" and "count_include_pad" in attrs:
        attrs = {k: v for k, v in attrs.items() if k != "count_include_pad"}
    check(op, [("x", rand(2, 3, 7, 8))], attrs)


def test_maxpool_indices_dilations_and_1d() -> None:
    check("MaxPool", [("x", rand(1, 2, 6, 6))], {"kernel_shape": [2, 2], "strides": [2, 2]},
          n_outputs=2)
    check("MaxPool", [("x", rand(1, 2, 7, 7))], {"kernel_shape": [2, 2], "dilations": [2, 2]})
    check("AveragePool", [("x", rand(2, 3, 9))], {"kernel_shape": [3], "strides": [2]})


def test_global_pools_and_lp() -> None:
    x = rand(2, 3, 4, 5)
    check("GlobalAveragePool", [("x", x)])
    check("GlobalMaxPool", [("x", x)])
    check("GlobalLpPool", [("x", x)], {"p": 3}, rtol=1e-4)
    check("LpPool", [("x", x)], {"kernel_shape": [2, 2], "p": 2}, rtol=1e-4)


# ---- normalization --------------------------------------------------------------------------
def test_batchnorm_inference() -> None:
    c = 4
    check("BatchNormalization", [("x", rand(2, c, 3, 3)), ("s", rand(c, seed=1)),
                                 ("b", rand(c, seed=2)), ("m", rand(c, seed=3)),
                                 ("v", np.abs(rand(c, seed=4)) + 0.5)], {"epsilon": 1e-3},
          consts=["s", "b", "m", "v"], rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("axis", [-1, 1, -2])
def test_layer_norm(axis: int) -> None:
    shape = (2, 3, 4)
    norm = shape[axis:] if axis >= 0 else shape[len(shape) + axis:]
    check("LayerNormalization", [("x", rand(*shape)), ("s", rand(*norm, seed=1)),
                                 ("b", rand(*norm, seed=2))], {"axis": axis, "epsilon": 1e-5},
          n_outputs=3, rtol=1e-4, atol=1e-5)


def test_other_normalizations() -> None:
    x = rand(2, 4, 3, 3)
    check("InstanceNormalization", [("x", x), ("s", rand(4, seed=1)), ("b", rand(4, seed=2))],
          rtol=1e-4, atol=1e-5)
    check("LRN", [("x", x)], {"size": 3}, rtol=1e-4)
    check("MeanVarianceNormalization", [("x", x)], rtol=1e-4, atol=1e-5)
    check("LpNormalization", [("x", x)], {"axis": 1, "p": 1}, rtol=1e-5)
    check("GroupNormalization", [("x", x), ("s", rand(4, seed=1)), ("b", rand(4, seed=2))],
          {"num_groups": 2}, opset=21, engine="ref", rtol=1e-4, atol=1e-5)


# ---- matrices -------------------------------------------------------------------------------
@pytest.mark.parametrize("sa,sb", [((3, 4), (4, 5)), ((2, 3, 4), (4, 5)), ((4,), (4, 5)),
                                   ((2, 1, 3, 4), (3, 4, 2)), ((3, 4), (4,))])
def test_matmul(sa: tuple, sb: tuple) -> None:
    check("MatMul", [("a", rand(*sa)), ("b", rand(*sb, seed=1))], rtol=1e-5, atol=1e-5)


def test_matmul_inner_mismatch() -> None:
    with pytest.raises(ShapeError, match="inner dims of MatMul differ: 4 != 5"):
        check("MatMul", [("a", rand(3, 4)), ("b", rand(5, 2))])


@pytest.mark.parametrize("attrs", [{}, {"transA": 1}, {"transB": 1, "alpha": 0.5},
                                   {"beta": 2.0, "transA": 1, "transB": 1}])
def test_gemm(attrs: dict) -> None:
    a = rand(4, 3) if attrs.get("transA") else rand(3, 4)
    b = rand(5, 4, seed=1) if attrs.get("transB") else rand(4, 5, seed=1)
    check("Gemm", [("a", a), ("b", b), ("c", rand(5, seed=2))], attrs, rtol=1e-5, atol=1e-5)


def test_einsum_det() -> None:
    check("Einsum", [("a", rand(2, 3, 4)), ("b", rand(2, 4, 5, seed=1))],
          {"equation": "bij,bjk->bik"}, rtol=1e-5, atol=1e-5)
    check("Einsum", [("a", rand(3, 3))], {"equation": "ii"}, rtol=1e-5, atol=1e-5)
    check("Det", [("x", rand(2, 3, 3))], rtol=1e-4, atol=1e-5)


# ---- reductions -----------------------------------------------------------------------------
REDUCE = ["ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1",
          "ReduceL2", "ReduceSumSquare", "ReduceLogSumExp"]


@pytest.mark.parametrize("op", REDUCE)
@pytest.mark.parametrize("axes,keep", [([1], 1), ([-1, 0], 0), (None, 1)])
def test_reduce(op: str, axes: list[int] | None, keep: int) -> None:
    ins = [("x", rand(2, 3, 4))]
    if axes is not None:
        ins.append(("a", i64(*axes)))
    check(op, ins, {"keepdims": keep}, consts=["a"], opset=18, rtol=1e-5, atol=1e-5)


def test_reduce_old_opset_and_noop() -> None:
    check("ReduceMean", [("x", rand(2, 3, 4))], {"axes": [-1], "keepdims": 1}, opset=13)
    check("ReduceSum", [("x", rand(2, 3)), ("a", np.zeros(0, np.int64))],
          {"noop_with_empty_axes": 1}, consts=["a"])
    check("ReduceLogSum", [("x", np.abs(rand(2, 3)) + 0.1), ("a", i64(1))], consts=["a"],
          opset=18)
    check("ReduceSum", [("x", np.arange(12, dtype=np.int32).reshape(3, 4)), ("a", i64(0))],
          consts=["a"])


@pytest.mark.parametrize("op", ["ArgMax", "ArgMin"])
def test_arg_reductions(op: str) -> None:
    x = np.array([[1, 3, 3], [2, 2, 0]], np.float32)
    check(op, [("x", x)], {"axis": 1})
    check(op, [("x", x)], {"axis": -1, "keepdims": 0, "select_last_index": 1})


def test_cumsum_topk() -> None:
    x = rand(3, 4)
    check("CumSum", [("x", x), ("a", np.array(1, np.int64))])
    check("CumSum", [("x", x), ("a", np.array(-2, np.int64))], {"exclusive": 1, "reverse": 1})
    check("TopK", [("x", x), ("k", i64(2))], {"axis": 1}, n_outputs=2, consts=["k"])
    check("TopK", [("x", x), ("k", i64(3))], {"axis": 0, "largest": 0}, n_outputs=2,
          consts=["k"])


# ---- resize ---------------------------------------------------------------------------------
@pytest.mark.parametrize("attrs", [
    {"mode": "nearest"}, {"mode": "linear"}, {"mode": "cubic"},
    {"mode": "linear", "coordinate_transformation_mode": "align_corners"},
    {"mode": "nearest", "coordinate_transformation_mode": "asymmetric", "nearest_mode": "floor"},
    {"mode": "linear", "coordinate_transformation_mode": "pytorch_half_pixel"},
    {"mode": "cubic", "cubic_coeff_a": -0.5, "exclude_outside": 1},
])
@pytest.mark.parametrize("scales", [[1, 1, 2, 1.5], [1, 1, 0.5, 0.75]])
def test_resize_scales(attrs: dict, scales: list[float]) -> None:
    check("Resize", [("x", rand(1, 2, 4, 4)), ("r", None),
                     ("s", np.array(scales, np.float32))], attrs, consts=["s"],
          rtol=1e-4, atol=1e-5)


def test_resize_sizes_and_policy() -> None:
    x = rand(1, 1, 4, 6)
    check("Resize", [("x", x), ("r", None), ("s", None), ("z", i64(1, 1, 3, 5))],
          {"mode": "linear"}, consts=["z"], rtol=1e-4, atol=1e-5)
    check("Resize", [("x", x), ("r", None), ("s", None), ("z", i64(8, 8))],
          {"mode": "nearest", "axes": [2, 3], "keep_aspect_ratio_policy": "not_larger"},
          consts=["z"], opset=18, rtol=1e-4, atol=1e-5)
    check("Resize", [("x", x), ("r", None), ("s", np.array([1, 1, 0.6, 0.5], np.float32))],
          {"mode": "linear", "antialias": 1}, consts=["s"], opset=18, engine="ref",
          rtol=1e-4, atol=1e-5)


def test_resize_crop_and_upsample() -> None:
    x = rand(1, 1, 4, 4)
    check("Resize", [("x", x), ("r", np.array([0, 0, 0.2, 0.3, 1, 1, 0.8, 0.9], np.float32)),
                     ("s", None), ("z", i64(1, 1, 3, 3))],
          {"mode": "linear", "coordinate_transformation_mode": "tf_crop_and_resize",
           "extrapolation_value": 10.0}, consts=["r", "z"], rtol=1e-4, atol=1e-5)
    check("Upsample", [("x", x), ("s", np.array([1, 1, 2, 3], np.float32))],
          {"mode": "nearest"}, consts=["s"], opset=9)
