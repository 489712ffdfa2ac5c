"""Device kernels for the ops common models need (issue 16): each placed on the device and
compared with the numpy reference and onnxruntime over shapes, axes, attributes, dtypes."""

from __future__ import annotations

import numpy as np
import pytest

from graphengine import _runtime
from graphengine.engine import ops
from graphengine.engine.ops.eltwise_graph import GRAPH_ONLY
from graphengine.engine.ops.group_norm import GROUP_NORM
from tests.unit.device_cases import check, randint, randn

CMP = ["Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual"]
SHAPE_PAIRS = [((2, 3, 4), (2, 3, 4)), ((2, 3, 4), (4,)), ((3, 1), (1, 5)), ((1, 4, 1), (2, 1, 3)),
               ((), (3,)), ((5,), ())]


@pytest.mark.parametrize("op", CMP)
@pytest.mark.parametrize("dtype", [np.float32, np.int64, np.int32, np.float64])
@pytest.mark.parametrize("shapes", SHAPE_PAIRS)
def test_comparisons_broadcast_to_bool(op, dtype, shapes):
    # few distinct values, so Equal and the *OrEqual ones see ties
    a = randint(-2, 3, *shapes[0], dtype=dtype)
    b = randint(-2, 3, *shapes[1], dtype=dtype)
    check(op, {"a": a, "b": b})


@pytest.mark.parametrize("op", CMP)
def test_comparisons_with_nan_and_inf_are_numpy_s(op):
    a = np.array([np.nan, 1, np.inf, -np.inf, 0, -0.0], np.float32)
    b = np.array([np.nan, np.nan, np.inf, 1, -0.0, 0], np.float32)
    check(op, {"a": a, "b": b})


def test_equal_on_bool_and_constant_operand():
    a = randint(0, 2, 3, 4, dtype=np.bool_)
    check("Equal", {"a": a}, {"b": np.array([True, False, True, True])})


@pytest.mark.parametrize("op", ["And", "Or", "Xor"])
@pytest.mark.parametrize("shapes", SHAPE_PAIRS)
def test_logical_ops(op, shapes):
    a = randint(0, 2, *shapes[0], dtype=np.bool_)
    b = randint(0, 2, *shapes[1], dtype=np.bool_)
    check(op, {"a": a, "b": b})


@pytest.mark.parametrize("shape", [(7,), (2, 3, 4), ()])
def test_not(shape):
    check("Not", {"a": randint(0, 2, *shape, dtype=np.bool_)})


@pytest.mark.parametrize("shapes", [((2, 3, 4),) * 3, ((3, 1), (1, 4), (3, 4)),
                                    ((1, 4), (3, 1), ()), ((2, 1, 4), (3, 1), (1,)),
                                    ((), (2, 3), (3,))])
@pytest.mark.parametrize("dtype", [np.float32, np.int64])
def test_where_broadcasts_all_three_operands(shapes, dtype):
    c = randint(0, 2, *shapes[0], dtype=np.bool_)
    check("Where", {"c": c, "x": randint(-9, 9, *shapes[1], dtype=dtype),
                    "y": randint(-9, 9, *shapes[2], dtype=dtype)})


# ---- Split -------------------------------------------------------------------------------
@pytest.mark.parametrize("shape,axis,sizes", [
    ((6, 4), 0, [2, 4]), ((2, 7, 3), 1, [1, 0, 6]), ((2, 3, 8), -1, [3, 3, 2]),
    ((4, 6, 2, 2), 1, [2, 2, 2]), ((5,), 0, [5])])
@pytest.mark.parametrize("dtype", [np.float32, np.int64])
def test_split_given_sizes(shape, axis, sizes, dtype):
    x = randint(-50, 50, *shape, dtype=dtype)
    check("Split", {"x": x}, {"split": np.array(sizes, np.int64)}, {"axis": axis},
          n_outputs=len(sizes))


@pytest.mark.parametrize("shape,axis,n", [((6, 4), 0, 3), ((2, 7, 3), 1, 3), ((2, 3, 8), -1, 4),
                                          ((1, 10, 2, 2), 1, 4)])
def test_split_equal_parts_by_num_outputs(shape, axis, n):
    check("Split", {"x": randn(*shape)}, {}, {"axis": axis, "num_outputs": n}, n_outputs=n)


def test_split_opset13_equal_parts_without_sizes():
    check("Split", {"x": randn(4, 6)}, {}, {"axis": 1}, n_outputs=3, opset=13)


# ---- the one table -------------------------------------------------------------------------
def test_schema_layouts_agree_with_the_runtime_s_format_rules():
    """A device op the layout pass may keep in the region's format (its schema's Layout is
    UNIFORM, ELEMENTWISE or CHANNEL) runs in that format on the runtime too: kernel_info
    offers nhwc for 4-D operands of one shape, and for CHANNEL with a per-channel operand;
    an ELEMENTWISE op is not offered the per-channel form."""
    act, checked = [1, 16, 4, 4], 0
    binary = (ops.Layout.ELEMENTWISE, ops.Layout.CHANNEL)
    for name in ops.all_ops():
        schema = ops.get(name)
        if schema.device is None or schema.layout not in (ops.Layout.UNIFORM, *binary):
            continue
        if schema.layout in binary and name != "Where":
            info = _runtime.kernel_info(name, ["float32"] * 2, [act, [1, 16, 1, 1]], {})
            if info["supported"]:
                assert ("nhwc" in info["formats"]) == (schema.layout is ops.Layout.CHANNEL), \
                    (name, info)
        if name == "BatchNormalization":
            info = _runtime.kernel_info(name, ["float32"] * 5, [act] + [[16]] * 4, {})
        elif name == GROUP_NORM:  # the graphengine domain's op; its kernel's name
            info = _runtime.kernel_info("GroupNorm", ["float32"] * 3, [act, [16], [16]],
                                        {"num_groups": 4})
        elif name in GRAPH_ONLY:  # a one-instruction EltwiseGraph
            info = _runtime.kernel_info("EltwiseGraph", ["float32"], [act], {
                "ops": name, "args": [0, -1, -1], "alphas": [0.0], "betas": [0.0],
                "results": [1]})
        else:
            n = {"Where": 3}.get(name, 2 if schema.layout in binary else 1)
            info = None
            for dts in (["float32"] * n, ["bool"] * n, ["bool"] + ["float32"] * (n - 1)):
                info = _runtime.kernel_info(name, dts, [act] * n, {})
                if info["supported"]:
                    break
        assert info["supported"] and "nhwc" in info["formats"], (name, info)
        checked += 1
    assert checked >= 25


# ---- Resize ------------------------------------------------------------------------------
COORDS = ["asymmetric", "half_pixel", "pytorch_half_pixel", "align_corners"]
NEAREST = ["floor", "round_prefer_floor", "round_prefer_ceil", "ceil"]
RESIZES = [((1, 2, 4, 5), [1, 1, 2, 2], None), ((2, 3, 6, 4), [1, 1, 0.5, 0.5], None),
           ((1, 1, 5, 3), [1, 1, 1.5, 3], None), ((1, 2, 7, 6), None, [1, 2, 3, 10]),
           ((1, 3, 4, 4), None, [1, 3, 9, 1]), ((2, 1, 3, 8), [1, 1, 1, 0.75], None)]


def _resize(shape, scales, sizes, dtype=np.float32, **attrs):
    consts = {"roi": None, "scales": None if scales is None else np.array(scales, np.float32)}
    if sizes is not None:
        consts["sizes"] = np.array(sizes, np.int64)
    x = randn(*shape) if dtype == np.float32 else randint(-99, 99, *shape, dtype=dtype)
    # onnxruntime has no int64 Resize, and align_corners with a fractional output length
    # (scale * size) it computes from the rounded size, the ONNX reference from the length
    fractional = scales is not None and any(s * d % 1 for s, d in zip(scales, shape))
    ort = dtype != np.int64 and not (
        fractional and attrs.get("coordinate_transformation_mode") == "align_corners")
    return check("Resize", {"x": x}, consts, attrs, with_ort=ort)


@pytest.mark.parametrize("coord", COORDS)
@pytest.mark.parametrize("nearest", NEAREST)
@pytest.mark.parametrize("case", RESIZES)
def test_resize_nearest(coord, nearest, case):
    _resize(*case, mode="nearest", coordinate_transformation_mode=coord, nearest_mode=nearest)


@pytest.mark.parametrize("coord", COORDS)
@pytest.mark.parametrize("case", RESIZES)
def test_resize_linear(coord, case):
    _resize(*case, mode="linear", coordinate_transformation_mode=coord)


@pytest.mark.parametrize("dtype", [np.int64, np.uint8, np.int32])
def test_resize_nearest_copies_any_dtype(dtype):
    _resize((1, 2, 3, 4), [1, 1, 2, 2], None, dtype, mode="nearest")


def test_resize_modes_the_device_does_not_run_stay_on_the_host():
    from tests.unit.device_cases import compile_model, engines, model
    x = {"x": randn(1, 2, 4, 4)}
    scales = {"roi": None, "scales": np.array([1, 1, 2, 2], np.float32)}
    for attrs in ({"mode": "cubic"}, {"mode": "linear", "antialias": 1},
                  {"mode": "nearest", "coordinate_transformation_mode": "tf_half_pixel_for_nn"}):
        assert engines(compile_model(model("Resize", x, scales, attrs)))["Resize"] == "host"
    channels = {"roi": None, "scales": np.array([1, 2, 2, 2], np.float32)}
    assert engines(compile_model(model("Resize", x, channels, {})))["Resize"] == "host"


# ---- Conv 1-D, ConvTranspose ---------------------------------------------------------------
@pytest.mark.parametrize("attrs,c,m", [
    ({}, 4, 6), ({"pads": [2, 1], "strides": [2]}, 3, 8),
    ({"dilations": [3], "pads": [3, 3]}, 4, 4),
    ({"group": 2, "pads": [1, 1]}, 6, 4), ({"group": 6, "strides": [3]}, 6, 12),
    ({"auto_pad": "SAME_UPPER", "strides": [2]}, 5, 7)])
@pytest.mark.parametrize("bias", [False, True])
def test_conv_1d(attrs, c, m, bias):
    w = randn(m, c // attrs.get("group", 1), 3)
    consts = {"w": w, "b": randn(m) if bias else None}
    check("Conv", {"x": randn(2, c, 17)}, consts, attrs, rtol=1e-4, atol=1e-4)


def test_conv_1d_with_batchnorm_and_relu_fused_matches_onnxruntime():
    from onnx import TensorProto, helper, numpy_helper

    from tests.unit.device_cases import onnxruntime, run_device
    c = 8
    inits = {"w": randn(c, 4, 5), "s": randn(c), "bb": randn(c), "mu": randn(c),
             "var": np.abs(randn(c)) + 0.5}
    g = helper.make_graph(
        [helper.make_node("Conv", ["x", "w"], ["c"], pads=[2, 2]),
         helper.make_node("BatchNormalization", ["c", "s", "bb", "mu", "var"], ["n"]),
         helper.make_node("Relu", ["n"], ["y"])], "conv1d",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 50])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(v, k) for k, v in inits.items()])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    feeds = {"x": randn(1, 4, 50)}
    np.testing.assert_allclose(run_device(m, feeds, "Conv")[0], onnxruntime(m, feeds)[0],
                               rtol=1e-4, atol=1e-4)


CONVT = [
    ({"strides": [2, 2], "pads": [1, 1, 1, 1]}, 4, 3, (4, 4)),  # the 4x4 stride-2 upsampler
    ({"strides": [2, 2], "pads": [1, 1, 1, 1], "output_padding": [1, 1]}, 3, 5, (3, 3)),
    ({}, 2, 3, (3, 3)), ({"strides": [3, 2], "dilations": [2, 1]}, 4, 2, (2, 3)),
    ({"group": 2, "strides": [2, 2]}, 4, 6, (3, 3)),
    ({"group": 4, "pads": [1, 0, 0, 1]}, 4, 4, (3, 2)),
    ({"auto_pad": "SAME_UPPER", "strides": [2, 2]}, 3, 4, (3, 3)),
    ({"output_shape": [11, 12], "strides": [2, 2]}, 2, 3, (3, 3)),
    ({"strides": [2, 2], "output_padding": [1, 0]}, 2, 2, (2, 2))]


@pytest.mark.parametrize("attrs,c,m,k", CONVT)
@pytest.mark.parametrize("bias", [False, True])
def test_conv_transpose_2d(attrs, c, m, k, bias):
    g = attrs.get("group", 1)
    consts = {"w": randn(c, m // g if g > 1 else m, *k), "b": randn(m) if bias else None}
    check("ConvTranspose", {"x": randn(2, c, 5, 6)}, consts, attrs, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("attrs", [{}, {"strides": [2], "pads": [1, 2]},
                                   {"strides": [4], "output_padding": [2], "group": 2}])
def test_conv_transpose_1d(attrs):
    check("ConvTranspose", {"x": randn(1, 4, 9)}, {"w": randn(4, 3, 4), "b": randn(6 if attrs.get(
        "group") else 3)}, attrs, rtol=1e-4, atol=1e-4)


# ---- Pad -----------------------------------------------------------------------------------
@pytest.mark.parametrize("mode", ["reflect", "edge"])
@pytest.mark.parametrize("shape,pads,axes", [
    ((1, 3, 5, 6), [0, 0, 1, 2, 0, 0, 2, 1], None), ((2, 7), [1, 0, 1, 4], None),
    ((4, 5, 6), [2, 3], [-1]), ((1, 2, 4, 4), [1, 1, 2, 2], [2, 3]), ((6,), [5, 5], None)])
@pytest.mark.parametrize("dtype", [np.float32, np.int64])
def test_pad_reflect_and_edge(mode, shape, pads, axes, dtype):
    consts = {"pads": np.array(pads, np.int64), "value": None,
              "axes": None if axes is None else np.array(axes, np.int64)}
    x = randint(-99, 99, *shape, dtype=dtype)
    check("Pad", {"x": x}, consts, {"mode": mode})


def test_pad_reflect_wider_than_the_axis_mirrors_again_like_numpy():
    # onnxruntime refuses pads of at least the axis length; numpy (the reference) mirrors on
    check("Pad", {"x": randn(2, 3)}, {"pads": np.array([0, 7, 0, 6], np.int64)},
          {"mode": "reflect"}, with_ort=False)


@pytest.mark.parametrize("op,attrs", [
    ("Sign", {}), ("Round", {}), ("Softsign", {}), ("Selu", {}),
    ("Selu", {"alpha": 1.2, "gamma": 0.8}), ("Celu", {"alpha": 0.7}),
    ("ThresholdedRelu", {"alpha": 0.4}), ("Shrink", {"lambd": 0.6, "bias": 0.3}),
])
def test_unary_ops_without_a_onednn_eltwise_run_as_one_instruction(op, attrs):
    """Ops oneDNN has no eltwise for (JetMoE's Sign cut its device program in ten) run on
    the device as a one-instruction EltwiseGraph, its alpha and beta the node's attributes:
    the reference's values and ONNX Runtime's, zeros, halves (Round: to even) and infinities
    included."""
    x = np.concatenate([randn(3, 40).reshape(-1) * 3, np.arange(-4.5, 5, 0.5),
                        [0.0, -0.0, np.inf, -np.inf, 0.6, -0.6, 1e-30]]).astype(np.float32)
    check(op, {"x": x.reshape(1, -1)}, {}, attrs, rtol=1e-6, atol=1e-7)


def test_pad_constant_still_runs_on_the_device():
    check("Pad", {"x": randn(2, 3, 4)}, {"pads": np.array([0, 1, 2, 1, 0, 3], np.int64),
                                        "value": np.array(1.5, np.float32)})


# ---- selection and extremes -------------------------------------------------------------------
def _ties(*shape, dtype=np.float32):
    """Few distinct values, so the index order of equal ones matters."""
    return randint(-3, 4, *shape, dtype=dtype)


@pytest.mark.parametrize("shape,axis,k", [((5, 9), -1, 3), ((4, 6, 3), 1, 6), ((7,), 0, 0),
                                          ((2, 3, 8), 0, 1), ((3, 10, 2), -2, 4)])
@pytest.mark.parametrize("largest", [1, 0])
@pytest.mark.parametrize("dtype", [np.float32, np.int64])
def test_topk(shape, axis, k, largest, dtype):
    check("TopK", {"x": _ties(*shape, dtype=dtype)}, {"k": np.array([k], np.int64)},
          {"axis": axis, "largest": largest}, n_outputs=2)


def test_topk_orders_nan_after_every_number_like_the_reference():
    x = np.array([[1, np.nan, 3, -np.inf, np.nan, 2]], np.float32)
    for largest in (0, 1):
        check("TopK", {"x": x}, {"k": np.array([5], np.int64)}, {"largest": largest},
              n_outputs=2, with_ort=False)


@pytest.mark.parametrize("op", ["ArgMax", "ArgMin"])
@pytest.mark.parametrize("axis", [0, 1, -1])
@pytest.mark.parametrize("keepdims", [1, 0])
@pytest.mark.parametrize("last", [0, 1])
@pytest.mark.parametrize("dtype", [np.float32, np.int64, np.int32])
def test_argmax_argmin(op, axis, keepdims, last, dtype):
    check(op, {"x": _ties(3, 5, 4, dtype=dtype)}, {},
          {"axis": axis, "keepdims": keepdims, "select_last_index": last})


@pytest.mark.parametrize("op", ["ReduceMax", "ReduceMin", "ReduceSum"])
@pytest.mark.parametrize("axes", [None, [1], [0, 2], [-1], [1, 2], []])
@pytest.mark.parametrize("keepdims", [1, 0])
@pytest.mark.parametrize("dtype", [np.float32, np.int64])
def test_reduce_max_min_sum_with_axes_as_input(op, axes, keepdims, dtype):
    """Integer sums too (a count of matches) run on the device: the runtime's folding loop."""
    consts = {} if axes is None else {"axes": np.array(axes, np.int64)}
    check(op, {"x": _ties(3, 4, 5, dtype=dtype)}, consts, {"keepdims": keepdims})


@pytest.mark.parametrize("op", ["ReduceMax", "ReduceMin"])
def test_reduce_max_min_keep_inf_and_nan(op):
    x = np.array([[-np.inf, -np.inf], [np.inf, np.inf], [1, np.nan], [np.nan, -2]], np.float32)
    check(op, {"x": x}, {"axes": np.array([1], np.int64)}, {"keepdims": 0}, with_ort=False)


def test_reduce_max_opset13_axes_attribute():
    check("ReduceMax", {"x": randn(2, 3, 4)}, {}, {"axes": [0, 2]}, opset=13)


# ---- GatherND ----------------------------------------------------------------------------
@pytest.mark.parametrize("data,idx,b", [
    ((4, 5), [[0, 1], [3, -1], [-4, 2]], 0), ((4, 5, 3), [[1], [-1], [2]], 0),
    ((2, 3, 4), [[[0, 1]], [[2, 3]]], 1), ((2, 3, 4, 2), [[[1], [2]], [[0], [-3]]], 1),
    ((2, 2, 3, 4), [[[[2]], [[0]]], [[[-1]], [[1]]]], 2), ((3, 4), [[[2, 1]]], 0)])
@pytest.mark.parametrize("dtype", [np.float32, np.int64])
def test_gather_nd(data, idx, b, dtype):
    x = randint(-99, 99, *data, dtype=dtype)
    check("GatherND", {"x": x, "i": np.array(idx, np.int64)}, {}, {"batch_dims": b})


# ---- bad input: errors that name the node, never a crash ---------------------------------
@pytest.mark.parametrize("bad", [4, -5, 99, -(2**31)])
@pytest.mark.parametrize("dtype", [np.int64, np.int32])
def test_gather_nd_index_out_of_range_fails_the_run_naming_the_node(bad, dtype):
    from graphengine.engine.errors import InvalidInput
    from graphengine.engine.runtime import load
    from tests.unit.device_cases import compile_model, model

    x = randn(4, 3)
    good = np.array([[1, 2], [3, -3]], dtype)
    m = model("GatherND", {"x": x, "i": good}, {})
    loaded = load(compile_model(m))
    with pytest.raises(InvalidInput, match=rf"node 'gathernd_0' \(GatherND\): index {bad} out of "
                                           r"range \[-4, 3\] on data axis 0"):
        loaded.execute({"x": x, "i": np.array([[1, 2], [bad, 0]], dtype)})
    # the model stays usable
    (y,) = loaded.execute({"x": x, "i": good}).values()
    np.testing.assert_array_equal(y, x[[1, 3], [2, 0]])


def test_topk_k_larger_than_the_axis_is_an_error_naming_the_node():
    from graphengine.engine.errors import GraphEngineError
    from tests.unit.device_cases import compile_model, model

    m = model("TopK", {"x": randn(2, 5)}, {"k": np.array([6], np.int64)}, {}, n_outputs=2)
    with pytest.raises(GraphEngineError, match=r"topk_0.*K=6 exceeds the axis size 5"):
        compile_model(m)


def test_runtime_topk_and_argmax_reject_bad_attributes_at_load():
    from graphengine import _runtime as rt

    info = rt.kernel_info("TopK", ["float32"], [[2, 5]], {"k": 6})
    assert info["supported"]  # values are checked at load, where the kernel sees them
    bad = rt.kernel_info("TopK", ["bool"], [[2, 5]], {"k": 1})
    assert not bad["supported"] and "bool" in bad["reason"]
    gnd = rt.kernel_info("GatherND", ["float32", "float32"], [[2, 5], [1, 1]], {})
    assert not gnd["supported"] and "GatherND indices must be int64 or int32" in gnd["reason"]


# ---- MaxPool on plain planes --------------------------------------------------------------
def _max_pool_ref(x, k, s, pads, out):
    """numpy: pad with -inf, take each window's max; `out` the output's spatial size."""
    n, c, h, w = x.shape
    xp = np.full((n, c, h + pads[0] + pads[2] + k[0], w + pads[1] + pads[3] + k[1]), -np.inf,
                 np.float32)
    xp[:, :, pads[0]:pads[0] + h, pads[1]:pads[1] + w] = x
    y = np.empty((n, c, *out), np.float32)
    for r in range(out[0]):
        for q in range(out[1]):
            y[:, :, r, q] = xp[:, :, r * s[0]:r * s[0] + k[0], q * s[1]:q * s[1] + k[1]].max((2, 3))
    return y


@pytest.mark.parametrize("shape,k,s,pads,out", [
    ((2, 8, 1, 128), (1, 2), (1, 2), (0, 0, 0, 0), (1, 64)),  # a 1-D pool lifted to 2-D
    ((1, 4, 1, 23), (1, 3), (1, 2), (0, 1, 0, 1), (1, 12)),
    ((1, 4, 1, 23), (1, 4), (1, 3), (0, 0, 0, 0), (1, 8)),  # ceil_mode: one more window
    ((1, 3, 9, 7), (3, 2), (2, 2), (1, 1, 1, 0), (5, 4)),
])
def test_plain_max_pool_matches_numpy(shape, k, s, pads, out):
    """A plain MaxPool runs where oneDNN has only its simple_nchw reference on a loop of the
    runtime's (windows inside the row unchecked, the edges checked)."""
    x = randn(*shape)
    oshape = [shape[0], shape[1], *out]
    nbytes = [int(np.prod(t)) * 4 for t in (shape, oshape)]
    spec = {"name": "m", "arena_bytes": nbytes[0] + nbytes[1] + 64, "num_streams": 1,
            "num_events": 0,
            "tensors": [{"name": "x", "dtype": "float32", "shape": list(shape),
                         "region": "arena", "offset": 0},
                        {"name": "y", "dtype": "float32", "shape": oshape, "region": "arena",
                         "offset": -(-nbytes[0] // 64) * 64}],
            "tasks": [{"kind": "kernel", "name": "p", "op": "MaxPool", "stream": 0,
                       "inputs": [0], "outputs": [1],
                       "attrs": {"kernel_shape": list(k), "strides": list(s),
                                 "pads": list(pads), "ceil_mode": 1}}],
            "inputs": [0], "outputs": [1]}
    m = _runtime.Model(_runtime.Device(), spec)
    (got,) = m.execute([x])
    np.testing.assert_array_equal(got, _max_pool_ref(x, k, s, pads, out))
    impl = m.profile()[0]["impl"]
    assert "simple_nchw" not in impl and "ref" not in impl, impl


@pytest.mark.parametrize("op", ["GlobalMaxPool", "GlobalAveragePool"])
def test_plain_global_pools_of_long_planes(op):
    """Global pools of a plain tensor that oneDNN would run on simple_nchw run as the
    reduction over the spatial axes; numpy's answer."""
    x = randn(2, 6, 1, 509)
    check(op, {"x": x})
