"""Canonical forms: 1-D pools as 2-D pools of a view, InstanceNormalization as LayerNorm;
each exact against ONNX Runtime and placed on the device."""

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from graphengine.engine.importers import load_model
from graphengine.engine.pipeline import CompileOptions, compile_graph
from graphengine.engine.runtime import LoadedModel


def _run_one(node, x, inits=(), opset=17, device=True):
    """The one-node model x -> y compiled (on the device only, when `device`) and run on x:
    the model and our y."""
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info(
        "x", TensorProto.FLOAT, list(x.shape))], [helper.make_tensor_value_info(
            "y", TensorProto.FLOAT, None)], list(inits))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)],
                              ir_version=8)
    compiled = compile_graph(load_model(model), CompileOptions(lint=True))
    if device:
        assert {p.engine for p in compiled.report.placements} == {"device"}, \
            compiled.report.render()
    return model, LoadedModel(compiled).execute({"x": x})["y"]


def _check(node, x, inits=(), opset=17, device=True):
    model, got = _run_one(node, x, inits, opset, device)
    want = ort.InferenceSession(model.SerializeToString(),
                                providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


X3 = np.random.default_rng(0).standard_normal((2, 5, 23)).astype(np.float32)


@pytest.mark.parametrize("op,attrs", [
    ("MaxPool", dict(kernel_shape=[3], strides=[2], pads=[1, 1])),
    ("MaxPool", dict(kernel_shape=[4], strides=[3], ceil_mode=1)),
    ("MaxPool", dict(kernel_shape=[3], dilations=[2])),  # the host's: no dilated device pool
    ("AveragePool", dict(kernel_shape=[5], strides=[2], pads=[2, 1], count_include_pad=1)),
    ("AveragePool", dict(kernel_shape=[5], strides=[2], pads=[2, 1], count_include_pad=0)),
    ("GlobalAveragePool", {}),
    ("GlobalMaxPool", {}),
])
def test_one_dimensional_pools_run_as_two_dimensional_ones(op, attrs):
    _check(helper.make_node(op, ["x"], ["y"], **attrs), X3, device="dilations" not in attrs)


@pytest.mark.parametrize("shape", [(2, 4, 19), (1, 3, 6, 7)])
def test_instance_normalization_runs_as_layer_normalization(shape):
    rng = np.random.default_rng(1)
    x = (rng.standard_normal(shape) * 3 + 1).astype(np.float32)
    c = shape[1]
    inits = [numpy_helper.from_array(rng.uniform(0.5, 1.5, c).astype(np.float32), "s"),
             numpy_helper.from_array(rng.standard_normal(c).astype(np.float32), "b")]
    _check(helper.make_node("InstanceNormalization", ["x", "s", "b"], ["y"], epsilon=1e-3),
           x, inits)


@pytest.mark.parametrize("opset,per_group", [(21, False), (18, True)])
def test_group_normalization_runs_as_layer_normalization(opset, per_group):
    rng = np.random.default_rng(2)
    x = (rng.standard_normal((2, 6, 5, 4)) * 2 - 1).astype(np.float32)
    n = 3 if per_group else 6  # GroupNormalization-18: one scale and bias a group
    inits = [numpy_helper.from_array(rng.uniform(0.5, 1.5, n).astype(np.float32), "s"),
             numpy_helper.from_array(rng.standard_normal(n).astype(np.float32), "b")]
    node = helper.make_node("GroupNormalization", ["x", "s", "b"], ["y"], num_groups=3,
                            epsilon=1e-4)
    if per_group:  # ONNX Runtime runs only the opset-21 form: compare with numpy
        compiled = compile_graph(load_model(helper.make_model(helper.make_graph(
            [node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, x.shape)],
            [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits),
            opset_imports=[helper.make_opsetid("", opset)], ir_version=8)))
        assert {p.engine for p in compiled.report.placements} == {"device"}
        got = LoadedModel(compiled).execute({"x": x})["y"]
        g = x.reshape(2, 3, -1)
        want = ((g - g.mean(-1, keepdims=True)) / np.sqrt(g.var(-1, keepdims=True) + 1e-4))
        s = np.repeat(numpy_helper.to_array(inits[0]), 2).reshape(1, 6, 1, 1)
        b = np.repeat(numpy_helper.to_array(inits[1]), 2).reshape(1, 6, 1, 1)
        np.testing.assert_allclose(got, want.reshape(x.shape) * s + b, rtol=1e-4, atol=1e-5)
    else:
        _check(node, x, inits, opset=opset)


@pytest.mark.parametrize("axis", [-1, 1])
def test_rms_normalization_runs_as_device_steps(axis):
    rng = np.random.default_rng(3)
    x = (rng.standard_normal((2, 5, 8)) * 2).astype(np.float32)
    scale_shape = x.shape[axis:]
    inits = [numpy_helper.from_array(rng.uniform(0.5, 1.5, scale_shape).astype(np.float32),
                                     "s")]
    _check(helper.make_node("RMSNormalization", ["x", "s"], ["y"], axis=axis, epsilon=1e-4),
           x, inits, opset=23)


def _reduce(op, axes, keepdims, opset):
    """A reduction node over ``axes`` (None: all) as the opset spells them, and its inits."""
    if axes is None:
        return helper.make_node(op, ["x"], ["y"], keepdims=keepdims), []
    if opset >= 18:
        return (helper.make_node(op, ["x", "axes"], ["y"], keepdims=keepdims),
                [numpy_helper.from_array(np.array(axes, np.int64), "axes")])
    return helper.make_node(op, ["x"], ["y"], axes=axes, keepdims=keepdims), []


@pytest.mark.parametrize("op", ["ReduceMean", "ReduceMax"])
@pytest.mark.parametrize("axes,keepdims,opset", [([2, 3], 1, 13), ([-1, -2], 0, 13),
                                                 ([2, 3], 1, 18), ([1, 2], 1, 13)])
def test_spatial_reductions_run_as_global_pools(op, axes, keepdims, opset):
    """A mean (max) over H and W is the global pool (the form that runs in a convolution's
    format); other axes stay the reduction."""
    from graphengine.engine.prepare.canonicalize import canonicalize

    x = np.random.default_rng(3).standard_normal((2, 6, 5, 7)).astype(np.float32)
    node, inits = _reduce(op, axes, keepdims, opset)
    _check(node, x, inits, opset=opset)
    graph = load_model(helper.make_model(helper.make_graph(
        [node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x.shape))],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits),
        opset_imports=[helper.make_opsetid("", opset)], ir_version=8))
    from graphengine.engine.prepare import infer_shapes

    infer_shapes(graph)
    canonicalize(graph)
    pools = [n.op_type for n in graph.nodes if n.op_type.startswith("Global")]
    assert pools == ([] if axes == [1, 2] else
                     ["GlobalAveragePool" if op == "ReduceMean" else "GlobalMaxPool"])


@pytest.mark.parametrize("op", ["ReduceMean", "ReduceMax"])
@pytest.mark.parametrize("shape,axes,keepdims,conv,pooled", [
    ((2, 6, 40), [2], 0, True, True),  # a 1-D convolution's max over time
    ((2, 6, 40), [-1], 1, True, True),
    ((2, 6, 1, 40), [3], 0, True, True),  # H is 1: over W is over every spatial axis
    ((2, 6, 1, 40), [3], 1, True, True),
    ((2, 6, 3, 40), [3], 0, True, False),  # H is 3: a reduction over W only
    ((2, 6, 40), [1, 2], 0, True, False),  # the channels too
    ((2, 6, 40), [2], 1, False, False)])  # [B, S, H] of no convolution: a LayerNorm's mean
def test_reductions_over_the_only_spatial_axis_run_as_global_pools(op, shape, axes, keepdims,
                                                                   conv, pooled):
    """A character CNN's max over time of a convolution's [N, C, L] (or [N, C, 1, L]) is the
    global pool, which reads the convolution's channels-last output as it is: six of them
    converted their input back to NCHW for a scalar loop (char_highway 0.76 -> 0.61 ms at
    batch 1). A transformer's mean over its hidden axis stays the reduction the LayerNorm
    and RMSNorm fusions read."""
    from graphengine.engine.prepare import infer_shapes
    from graphengine.engine.prepare.canonicalize import canonicalize

    rng = np.random.default_rng(5)
    x = rng.standard_normal(shape).astype(np.float32)
    node, inits = _reduce(op, axes, keepdims, 13)
    nodes = [node]
    if conv:
        k = [3] if len(shape) == 3 else [1, 3]
        w = rng.standard_normal((6, 6, *k)).astype(np.float32)
        inits.append(numpy_helper.from_array(w, "w"))
        nodes = [helper.make_node("Conv", ["x0", "w"], ["x"], pads=([1, 1] if len(shape) == 3
                                                                     else [0, 1, 0, 1])),
                 node]
    else:
        nodes = [helper.make_node("Identity", ["x0"], ["x"]), node]
    model = helper.make_model(helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x0", TensorProto.FLOAT, list(shape))],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits),
        opset_imports=[helper.make_opsetid("", 13)], ir_version=8)
    got = LoadedModel(compile_graph(load_model(model), CompileOptions(lint=True))).execute(
        {"x0": x})["y"]
    want = ort.InferenceSession(model.SerializeToString(), providers=[
        "CPUExecutionProvider"]).run(None, {"x0": x})[0]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    graph = load_model(model)
    infer_shapes(graph)
    canonicalize(graph)
    pools = [n.op_type for n in graph.nodes if n.op_type.startswith("Global")]
    assert bool(pools) == pooled, [n.op_type for n in graph.nodes]


@pytest.mark.parametrize("attrs,group", [({}, 1), ({"pads": [2, 0, 1, 0], "strides": [2, 1]}, 1),
                                         ({"dilations": [2, 1], "pads": [1, 0, 1, 0]}, 4),
                                         ({"pads": [0, 0, 0, 1]}, 1),
                                         ({"pads": [0, 0, 0, 1], "strides": [1, 2]}, 1)])
def test_a_one_column_conv_runs_along_w(attrs, group):
    """A Conv of [N, C, H, 1] with a [k, 1] kernel is the same convolution of the view
    [N, C, 1, H] with a [1, k] kernel (oneDNN runs a long W about twice as fast)."""
    from graphengine.engine.prepare import infer_shapes
    from graphengine.engine.prepare.canonicalize import canonicalize

    rng = np.random.default_rng(4)
    x = rng.standard_normal((2, 8, 40, 1)).astype(np.float32)
    inits = [numpy_helper.from_array(rng.standard_normal((12, 8 // group, 5, 1))
                                     .astype(np.float32), "w"),
             numpy_helper.from_array(rng.standard_normal(12).astype(np.float32), "b")]
    node = helper.make_node("Conv", ["x", "w", "b"], ["y"], group=group, **attrs)
    _check(node, x, inits)
    graph = load_model(helper.make_model(helper.make_graph(
        [node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x.shape))],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits),
        opset_imports=[helper.make_opsetid("", 17)], ir_version=8))
    infer_shapes(graph)
    canonicalize(graph)
    (conv,) = [n for n in graph.nodes if n.op_type == "Conv"]
    # a column padded along W is not one column (the fuzzer found a silently wrong answer
    # from rewriting [0, 0, 0, 1]): it stays as it was
    padded = attrs.get("pads", [0, 0, 0, 0])[3] > 0
    assert conv.inputs[1].meta.shape == ((12, 8 // group, 5, 1) if padded
                                         else (12, 8 // group, 1, 5))
    assert graph.outputs[0].name == "y"


@pytest.mark.parametrize("offset,scale", [([0.5, -1.0, 2.0], [2.0, 0.25, 1.5]), ([1.0], None)])
def test_ml_scaler_runs_on_the_device(offset, scale):
    """ai.onnx.ml.Scaler of float32 is its Sub and Mul: no host partition in front of a
    scikit-learn model."""
    attrs = {"offset": offset} if scale is None else {"offset": offset, "scale": scale}
    node = helper.make_node("Scaler", ["x"], ["y"], domain="ai.onnx.ml", **attrs)
    x = np.random.default_rng(5).standard_normal((4, 3)).astype(np.float32)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info(
        "x", TensorProto.FLOAT, [4, 3])], [helper.make_tensor_value_info(
            "y", TensorProto.FLOAT, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                    helper.make_opsetid("ai.onnx.ml", 3)],
                              ir_version=8)
    compiled = compile_graph(load_model(model), CompileOptions(lint=True))
    assert {p.engine for p in compiled.report.placements} == {"device"}
    got = LoadedModel(compiled).execute({"x": x})["y"]
    want = ((x - np.float32(offset)) * np.float32(scale or [1.0])).astype(np.float32)
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("op", ["ReduceL2", "ReduceSumSquare", "ReduceL1", "ReduceLogSum"])
@pytest.mark.parametrize("axes,keepdims,opset", [([1, 2], 1, 13), ([-1], 0, 13), (None, 0, 13),
                                                 ([1, 2], 1, 18), ([0, 3], 0, 18)])
def test_norm_reductions_run_as_device_sums(op, axes, keepdims, opset):
    """ReduceL2 (ConvNeXt-V2's global response norm), ReduceSumSquare, ReduceL1 and
    ReduceLogSum are an elementwise step, ReduceSum and a step after, all on the device."""
    x = np.random.default_rng(4).uniform(0.1, 2.0, (2, 6, 5, 7)).astype(np.float32)
    x[0, 1] *= -1  # signs matter to L1 / L2 (not to the log-sum, which needs a positive sum)
    if op == "ReduceLogSum":
        x = np.abs(x)
    node, inits = _reduce(op, axes, keepdims, opset)
    _check(node, x, inits, opset=opset)


@pytest.mark.parametrize("axes,keepdims,opset", [([1, 2], 1, 13), ([-1], 0, 13), (None, 0, 13),
                                                 (None, 1, 13), ([1, 2], 1, 18), ([0, 3], 0, 18)])
def test_logsumexp_runs_as_stable_device_steps(axes, keepdims, opset):
    """ReduceLogSumExp (Reformer's LSH attention) is max, shifted exp, sum, log and the
    shift added back, on the device: ONNX Runtime's values on rows that overflow exp in
    float32 (values of 100), and the reference's where a row is all -inf (-inf), holds a
    +inf (+inf) or a NaN (NaN)."""
    x = np.random.default_rng(6).standard_normal((2, 6, 5, 7)).astype(np.float32) * 3
    x[1, 2] += 100.0
    x[0, 3, :, :] = -np.inf
    x[1, 4, 2, :] = -np.inf
    x[0, 5, 1, 1] = np.inf
    x[1, 0, 3, 4] = np.nan
    node, inits = _reduce("ReduceLogSumExp", axes, keepdims, opset)
    _, got = _run_one(node, x, inits, opset)
    ax = tuple(range(4)) if axes is None else tuple(axes)
    with np.errstate(all="ignore"):
        want = np.log(np.sum(np.exp(x.astype(np.float64)), axis=ax, keepdims=bool(keepdims)))
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want.astype(np.float32), rtol=2e-6, atol=1e-6)


@pytest.mark.parametrize("cin,cout,group,kernel,dense", [
    (12, 32, 2, (1, 1), True),    # MicroNet's grouped 1x1: 6 channels a group
    (6, 12, 6, (1, 3), True),     # its stem: a depthwise layer with a channel multiplier
    (64, 64, 4, (3, 3), False),   # 16 channels a group: oneDNN's jit takes it as it is
    (16, 16, 16, (3, 3), False),  # plain depthwise: jit too
    (48, 48, 12, (3, 3), False),  # more groups than a dense weight is worth
])
def test_a_grouped_conv_for_the_gemm_runs_dense(cin, cout, group, kernel, dense):
    """A grouped convolution oneDNN would give its GEMM convolution (the runtime prefers
    plain NCHW for it) runs as one dense convolution with a block-diagonal weight when it
    has few groups: the same values as ONNX Runtime; jit-able groupings stay grouped."""
    rng = np.random.default_rng(cin + group)
    x = rng.standard_normal((2, cin, 9, 10)).astype(np.float32)
    w = rng.standard_normal((cout, cin // group) + kernel).astype(np.float32)
    pads = [kernel[0] // 2, kernel[1] // 2] * 2
    graph = helper.make_graph(
        [helper.make_node("Conv", ["x", "w"], ["c"], group=group, pads=pads, strides=[1, 2]),
         helper.make_node("Relu", ["c"], ["y"])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x.shape))],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(w, "w")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    compiled = compile_graph(load_model(model), CompileOptions(lint=True))
    groups = [t.attrs.get("group", 1) for p in compiled.programs if hasattr(p, "tasks")
              for t in p.tasks if t.kind == "kernel" and t.op == "Conv"]
    assert groups == ([1] if dense else [group]), groups
    got = LoadedModel(compiled).execute({"x": x})["y"]
    want = ort.InferenceSession(model.SerializeToString(),
                                providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("op,n,dtype", [
    ("Sum", 2, np.float32), ("Sum", 4, np.float32), ("Mean", 3, np.float32),
    ("Max", 3, np.float32), ("Min", 5, np.float32), ("Max", 4, np.int64), ("Min", 3, np.int64)])
def test_variadic_ops_run_as_pairwise_device_steps(op, n, dtype):
    """Sum (tf2onnx's AddN), Mean (float types, as ONNX's Sum), and Max / Min of more than
    two inputs, broadcasting, are the binary op left to right (Mean then a division) on the
    device, as ONNX Runtime."""
    rng = np.random.default_rng(n)
    shapes = [(2, 3, 4), (3, 1), (4,), (1, 3, 4), (2, 1, 1)][:n]
    xs = {f"x{i}": (rng.standard_normal(s) * 9).astype(dtype) for i, s in enumerate(shapes)}
    onnx_type = TensorProto.FLOAT if dtype == np.float32 else TensorProto.INT64
    graph = helper.make_graph(
        [helper.make_node(op, list(xs), ["y"])], "g",
        [helper.make_tensor_value_info(k, onnx_type, list(v.shape)) for k, v in xs.items()],
        [helper.make_tensor_value_info("y", onnx_type, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    compiled = compile_graph(load_model(model), CompileOptions(lint=True))
    assert {p.engine for p in compiled.report.placements} == {"device"}, compiled.report.render()
    got = LoadedModel(compiled).execute(xs)["y"]
    want = ort.InferenceSession(model.SerializeToString(),
                                providers=["CPUExecutionProvider"]).run(None, xs)[0]
    assert got.dtype == want.dtype and got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("upper,k", [(1, None), (0, None), (1, 2), (0, -1), (1, -7), (0, 9)])
@pytest.mark.parametrize("dtype", [np.float32, np.int64])
def test_trilu_runs_as_a_masked_where(upper, k, dtype):
    """Trilu of a static input by a constant k (Qwen3-Next's chunked delta rule) keeps its
    triangle through a constant mask and Where, on the device; infinities and NaN outside
    the triangle become 0 (a product by the mask would give NaN)."""
    x = np.random.default_rng(7).integers(-9, 9, (2, 3, 5, 6)).astype(dtype)
    if dtype == np.float32:
        x[0, 0, 4, 0], x[1, 2, 0, 5], x[0, 1, 2, 2] = np.inf, np.nan, -np.inf
    onnx_type = TensorProto.FLOAT if dtype == np.float32 else TensorProto.INT64
    ins, inits = ["x"], []
    if k is not None:
        ins.append("k")
        inits.append(numpy_helper.from_array(np.array(k, np.int64), "k"))
    graph = helper.make_graph([helper.make_node("Trilu", ins, ["y"], upper=upper)], "g",
                              [helper.make_tensor_value_info("x", onnx_type, list(x.shape))],
                              [helper.make_tensor_value_info("y", onnx_type, None)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    compiled = compile_graph(load_model(model), CompileOptions(lint=True))
    assert {p.engine for p in compiled.report.placements} == {"device"}, compiled.report.render()
    got = LoadedModel(compiled).execute({"x": x})["y"]
    want = np.triu(x, 0 if k is None else k) if upper else np.tril(x, 0 if k is None else k)
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("shape,reps", [((2, 5, 7), (1, 3, 1)), ((2, 5, 7), (2, 1, 4)),
                                        ((6,), (3,)), ((1, 4, 1, 3), (2, 1, 5, 1)),
                                        ((3, 2, 4), (1, 1, 2))])
@pytest.mark.parametrize("dtype", [np.float32, np.int64])
def test_a_tile_by_constant_repeats_runs_on_the_device(shape, reps, dtype):
    """Tile (SwiftFormer's attention; no device kernel of its own) is a view, the device's
    Expand and a view: the whole graph stays on the device and matches ONNX Runtime."""
    x = np.random.default_rng(5).integers(-50, 50, shape).astype(dtype)
    onnx_type = TensorProto.FLOAT if dtype == np.float32 else TensorProto.INT64
    graph = helper.make_graph(
        [helper.make_node("Tile", ["x", "r"], ["t"]), helper.make_node("Add", ["t", "t"], ["y"])],
        "g", [helper.make_tensor_value_info("x", onnx_type, list(shape))],
        [helper.make_tensor_value_info("y", onnx_type, None)],
        [numpy_helper.from_array(np.array(reps, np.int64), "r")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    compiled = compile_graph(load_model(model), CompileOptions(lint=True))
    engines = {(p.op_type, p.engine) for p in compiled.report.placements}
    assert all(e == "device" for _, e in engines), compiled.report.render()
    assert "Tile" not in {op for op, _ in engines}
    got = LoadedModel(compiled).execute({"x": x})["y"]
    want = ort.InferenceSession(model.SerializeToString(),
                                providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    assert got.shape == want.shape and got.dtype == want.dtype
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize(("transposed", "sizes", "cut"), [
    (False, (2, 3), (2, 3)),   # the parts back
    (True, (1, 1), (1, 1)),    # a MoE selection's [1, T] rows as [T, 1] columns
    (True, (2, 3), (2, 3)),    # parts that move non-unit axes: each a Transpose
    (False, (2, 3), (3, 2)),   # other pieces: the Split stays
])
def test_a_split_that_undoes_a_concat_is_its_parts(transposed, sizes, cut):
    rng = np.random.default_rng(4)
    a = rng.normal(size=(sizes[0], 6)).astype(np.float32)
    b = rng.normal(size=(sizes[1], 6)).astype(np.float32)
    nodes = [helper.make_node("Concat", ["a", "b"], ["ab"], axis=0)]
    src, axis = "ab", 0
    if transposed:
        nodes.append(helper.make_node("Transpose", ["ab"], ["ba"], perm=[1, 0]))
        src, axis = "ba", 1
    nodes += [helper.make_node("Split", [src, "cut"], ["p", "q"], axis=axis),
              helper.make_node("Relu", ["p"], ["y"]), helper.make_node("Neg", ["q"], ["z"])]
    shape = (lambda n: [6, n]) if transposed else (lambda n: [n, 6])
    graph = helper.make_graph(
        nodes, "split_concat",
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, list(v.shape))
         for n, v in (("a", a), ("b", b))],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, shape(cut[0])),
         helper.make_tensor_value_info("z", TensorProto.FLOAT, shape(cut[1]))],
        [numpy_helper.from_array(np.array(cut, np.int64), "cut")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model = model.SerializeToString()
    compiled = compile_graph(load_model(model))
    placed = [p.op_type for p in compiled.report.placements]
    assert ("Split" in placed) == (cut != sizes), placed
    if cut == sizes and sizes == (1, 1):
        assert "Transpose" not in placed and "Concat" not in placed, placed
    got = LoadedModel(compiled).run({"a": a, "b": b})
    sess = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
    want = sess.run(None, {"a": a, "b": b})
    np.testing.assert_array_equal(got["y"], want[0])
    np.testing.assert_array_equal(got["z"], want[1])
