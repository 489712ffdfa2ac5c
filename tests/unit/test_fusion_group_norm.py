"""Fusion row group_norm and the runtime's GroupNorm kernel: a group normalization between
convolutions (GroupNormalization, InstanceNormalization, torch's Reshape -> InstanceNorm ->
Reshape -> Mul -> Add export) is one task with its affine and activation, in the region's
format (no TransData around it); values stay ONNX Runtime's in every format, for group sizes
1, some and all channels, 1-D and 2-D."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from graphengine.engine.errors import ShapeError
from graphengine.engine.importers import load_model
from graphengine.engine.ops.group_norm import GROUP_NORM
from graphengine.engine.pipeline import CompileOptions, compile_graph
from graphengine.engine.runtime import LoadedModel

rng = np.random.default_rng(19)
C = 32


def _arr(name, value, dtype=np.float32):
    return numpy_helper.from_array(np.asarray(value, dtype), name)


def _conv(name, x, y, c_in, c_out, rank):
    k = (3,) * (rank - 2)
    inits = [_arr(f"{name}_w", rng.normal(0, 0.3, (c_out, c_in) + k)),
             _arr(f"{name}_b", rng.normal(0, 0.1, c_out))]
    node = helper.make_node("Conv", [x, f"{name}_w", f"{name}_b"], [y],
                            pads=[1] * (2 * (rank - 2)))
    return [node], inits


def _norm(kind, groups, x, y, shape, act):
    """The group normalization of x (shape [N, C, ...]) into y, as `kind` writes it, then
    `act` (None: no activation)."""
    n, c = shape[:2]
    gamma, beta = rng.normal(1, 0.5, c), rng.normal(0, 0.5, c)
    out = y if act is None else f"{y}_pre"
    per_channel = (c,) + (1,) * (len(shape) - 2)
    if kind == "GroupNormalization":  # opset 21: per-channel scale and bias
        nodes = [helper.make_node("GroupNormalization", [x, f"{y}_g", f"{y}_b"], [out],
                                  num_groups=groups, epsilon=1e-5)]
        inits = [_arr(f"{y}_g", gamma), _arr(f"{y}_b", beta)]
    elif kind == "InstanceNormalization":  # groups == C
        assert groups == c
        nodes = [helper.make_node("InstanceNormalization", [x, f"{y}_g", f"{y}_b"], [out],
                                  epsilon=1e-5)]
        inits = [_arr(f"{y}_g", gamma), _arr(f"{y}_b", beta)]
    else:  # torch's nn.GroupNorm export
        nodes = [helper.make_node("Reshape", [x, f"{y}_flat"], [f"{y}_xf"]),
                 helper.make_node("InstanceNormalization", [f"{y}_xf", f"{y}_one", f"{y}_zero"],
                                  [f"{y}_nf"], epsilon=1e-5),
                 helper.make_node("Reshape", [f"{y}_nf", f"{y}_back"], [f"{y}_n"]),
                 helper.make_node("Mul", [f"{y}_n", f"{y}_g"], [f"{y}_m"]),
                 helper.make_node("Add", [f"{y}_m", f"{y}_b"], [out])]
        inits = [_arr(f"{y}_flat", [n, groups, -1], np.int64),
                 _arr(f"{y}_back", list(shape), np.int64),
                 _arr(f"{y}_one", np.ones(groups)), _arr(f"{y}_zero", np.zeros(groups)),
                 _arr(f"{y}_g", gamma.reshape(per_channel)),
                 _arr(f"{y}_b", beta.reshape(per_channel))]
    if act == "SiLU":  # torch's export: x * Sigmoid(x)
        nodes += [helper.make_node("Sigmoid", [out], [f"{y}_sig"]),
                  helper.make_node("Mul", [out, f"{y}_sig"], [y])]
    elif act == "QuickGelu":  # x * Sigmoid(1.702 x)
        nodes += [helper.make_node("Mul", [out, f"{y}_k"], [f"{y}_kx"]),
                  helper.make_node("Sigmoid", [f"{y}_kx"], [f"{y}_sig"]),
                  helper.make_node("Mul", [out, f"{y}_sig"], [y])]
        inits.append(_arr(f"{y}_k", 1.702))
    elif act == "GeluTanh":
        nodes.append(helper.make_node("Gelu", [out], [y], approximate="tanh"))
    elif act is not None:
        nodes.append(helper.make_node(act, [out], [y]))
    return nodes, inits


def _model(kind, groups, shape, act="Relu", norm=True):
    """Conv -> (group norm) -> act -> Conv: a pre-activation block's shape."""
    rank = len(shape)
    nodes, inits = _conv("c1", "x", "h", shape[1], C, rank)
    mid = (shape[0], C) + tuple(shape[2:])
    if norm:
        more, extra = _norm(kind, groups, "h", "a", mid, act)
    else:
        more, extra = [helper.make_node("Relu" if act == "SiLU" else act, ["h"], ["a"])], []
    nodes += more
    inits += extra
    conv2, w2 = _conv("c2", "a", "y", C, 16, rank)
    g = helper.make_graph(nodes + conv2, "gn",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(shape))],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                          inits + w2)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 21)], ir_version=10)


def _compile(model, fmt):
    return compile_graph(load_model(model), CompileOptions(lint=True, layout_format=fmt))


def _check(model, fmt, atol=2e-4):
    compiled = _compile(model, fmt)
    shape = [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim]
    x = (rng.standard_normal(shape) * 2 + 0.5).astype(np.float32)
    got = LoadedModel(compiled).execute({"x": x})["y"]
    want = ort.InferenceSession(model.SerializeToString(), providers=[
        "CPUExecutionProvider"]).run(None, {"x": x})[0]
    np.testing.assert_allclose(got, want, rtol=2e-4, atol=atol)
    return compiled


def _ops(compiled):
    return [p.op_type for p in compiled.report.placements]


@pytest.mark.parametrize("fmt", ["nhwc", "nChw8c", "nChw16c"])
@pytest.mark.parametrize("kind,groups", [("torch", 8), ("torch", 1), ("GroupNormalization", 4),
                                         ("InstanceNormalization", C)])
def test_a_group_norm_between_convolutions_is_one_task_in_their_format(fmt, kind, groups):
    compiled = _check(_model(kind, groups, (2, 3, 12, 10)), fmt)
    ops = _ops(compiled)
    assert ops.count(GROUP_NORM) == 1, ops
    # the normalization, its affine and the Relu are that one task
    for gone in ("LayerNormalization", "Reshape", "Mul", "Add", "Relu", "EltwiseChain"):
        assert gone not in ops, ops
    fused = [f for f in compiled.report.fusions if f.startswith("GroupNorm:")]
    assert len(fused) == 1 and f"({groups} groups + Relu)" in fused[0], compiled.report.fusions
    # no conversion around it: as many TransData as the same network without the norm
    plain = _compile(_model(kind, groups, (2, 3, 12, 10), norm=False), fmt)
    assert ops.count("TransData") == _ops(plain).count("TransData"), (ops, _ops(plain))


@pytest.mark.parametrize("kind,groups", [("torch", 4), ("torch", C), ("GroupNormalization", 1),
                                         ("InstanceNormalization", C)])
@pytest.mark.parametrize("act", ["Gelu", "Sigmoid", "Relu", "LeakyRelu", "Tanh"])
def test_a_1d_group_norm_and_its_activation_match_onnxruntime(kind, groups, act):
    # [N, C, L]: a speech encoder's feature extractor (GroupNorm(C, C) -> GELU)
    compiled = _check(_model(kind, groups, (2, 5, 50), act=act), "nhwc")
    ops = _ops(compiled)
    assert ops.count(GROUP_NORM) == 1 and act not in ops, ops
    # it reads and writes the convolutions' [N, C, 1, L] (their region), not the [N, C, L]
    # views of them: no conversion around it
    plain = _compile(_model(kind, groups, (2, 5, 50), act=act, norm=False), "nhwc")
    assert ops.count("TransData") == _ops(plain).count("TransData"), (ops, _ops(plain))


@pytest.mark.parametrize("fmt", ["nhwc", "nChw16c"])
def test_batch_one_and_large_planes_split_into_chunks_still_match(fmt):
    # one sample, planes of 64 x 48 positions: the kernel splits each plane into chunks of
    # positions summed apart; a large mean against its spread checks the double sums
    model = _model("torch", 2, (1, 3, 64, 48))
    compiled = _compile(model, fmt)
    x = (rng.standard_normal((1, 3, 64, 48)) + 30.0).astype(np.float32)
    got = LoadedModel(compiled).execute({"x": x})["y"]
    want = ort.InferenceSession(model.SerializeToString(), providers=[
        "CPUExecutionProvider"]).run(None, {"x": x})[0]
    np.testing.assert_allclose(got, want, rtol=1e-3, atol=1e-3)
    assert _ops(compiled).count(GROUP_NORM) == 1


def test_a_layer_norm_scale_that_varies_along_positions_is_not_a_group_norm():
    # LayerNormalization of [N, G, rest] whose scale differs within one channel's positions
    # is no per-channel affine: it stays a LayerNormalization
    n, groups, c, length = 2, 4, 8, 6
    rest = c // groups * length
    nodes = [helper.make_node("Reshape", ["x", "flat"], ["xf"]),
             helper.make_node("LayerNormalization", ["xf", "s", "b"], ["nf"], axis=-1),
             helper.make_node("Reshape", ["nf", "back"], ["y"])]
    inits = [_arr("flat", [n, groups, rest], np.int64), _arr("back", [n, c, length], np.int64),
             _arr("s", rng.normal(1, 0.5, rest)), _arr("b", np.zeros(rest))]
    g = helper.make_graph(nodes, "ln",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [n, c, length])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    x = rng.standard_normal((n, c, length)).astype(np.float32)
    compiled = compile_graph(load_model(model), CompileOptions(lint=True))
    got = LoadedModel(compiled).execute({"x": x})["y"]
    want = ort.InferenceSession(model.SerializeToString(), providers=[
        "CPUExecutionProvider"]).run(None, {"x": x})[0]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    ops = _ops(compiled)
    assert GROUP_NORM not in ops and "LayerNormalization" in ops, ops


@pytest.mark.parametrize("fmt", ["nhwc", "nChw16c"])
def test_a_silu_written_as_x_times_sigmoid_is_the_group_norms_activation(fmt):
    # a diffusion UNet's GroupNorm(32, C) -> SiLU, torch's export of nn.SiLU
    compiled = _check(_model("torch", 8, (2, 3, 12, 10), act="SiLU"), fmt)
    ops = _ops(compiled)
    assert ops.count(GROUP_NORM) == 1 and "Sigmoid" not in ops and "Mul" not in ops, ops
    fused = [f for f in compiled.report.fusions if f.startswith("GroupNorm:")]
    assert len(fused) == 1 and "(8 groups + Swish)" in fused[0], compiled.report.fusions


@pytest.mark.parametrize("conv", [False, True], ids=["plain", "nhwc"])
@pytest.mark.parametrize("act", ["Sigmoid", "Tanh", "SiLU", "QuickGelu", "GeluTanh",
                                 "HardSwish"])
def test_transcendental_activations_over_ragged_runs_and_saturating_values_match(act, conv):
    # The kernel applies them 16 floats at a time with its own vector exp / tanh: runs of 63
    # positions (plain: a tail of 15 a channel) or 63 x 24 channels (NHWC), and a scale of up
    # to 60 so the normalized values reach +-150, past exp's float range either side.
    if conv:
        model, gamma, c = _model("InstanceNormalization", C, (2, 3, 7, 9), act=act), "a_g", C
    else:
        shape, c = (2, 24, 7, 9), 24
        nodes, inits = _norm("GroupNormalization", 6, "x", "y", shape, act)
        g = helper.make_graph(nodes, "gn_act",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                              inits)
        model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 21)],
                                  ir_version=10)
        gamma = "y_g"
    init = next(i for i in model.graph.initializer if i.name == gamma)
    init.CopyFrom(_arr(gamma, np.linspace(-60, 60, c)))
    compiled = _check(model, "nhwc", atol=1e-4)
    ops = _ops(compiled)
    assert ops.count(GROUP_NORM) == 1 and not {"Sigmoid", "Tanh", "Gelu", "Mul",
                                               "HardSwish"} & set(ops), ops
    fused = [f for f in compiled.report.fusions if f.startswith("GroupNorm:")]
    want = {"SiLU": "Swish", "QuickGelu": "Swish"}.get(act, act)
    assert len(fused) == 1 and f"+ {want})" in fused[0], compiled.report.fusions
    if not conv:  # the plain path really ran (no region around it)
        assert "TransData" not in ops, ops


def test_a_group_norm_node_whose_groups_do_not_divide_the_channels_is_refused():
    # graphengine.GroupNorm written in a model (domain "graphengine"): checked like any op
    node = helper.make_node("GroupNorm", ["x", "s", "b"], ["y"], domain="graphengine",
                            num_groups=3)
    g = helper.make_graph([node], "bad",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 32, 4, 4])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                          [_arr("s", np.ones(32)), _arr("b", np.zeros(32))])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17),
                                                helper.make_opsetid("graphengine", 1)])
    with pytest.raises(ShapeError, match="num_groups 3 does not divide the 32 channels"):
        compile_graph(load_model(model), CompileOptions(lint=True))


def test_a_layer_norm_that_nothing_joins_stays_a_layer_norm():
    # a transformer's LayerNormalization over [B, L, H] with an identity affine (OLMo's
    # non-parametric one) is a group norm of L groups, but no view, affine or activation
    # joins it: it stays the LayerNormalization kernel
    nodes = [helper.make_node("LayerNormalization", ["x", "s", "b"], ["n"], axis=-1),
             helper.make_node("MatMul", ["n", "w"], ["y"])]
    inits = [_arr("s", np.ones(16)), _arr("b", np.zeros(16)), _arr("w", rng.normal(0, 1, (16, 8)))]
    g = helper.make_graph(nodes, "ln",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 5, 16])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    ops = _ops(compile_graph(load_model(model), CompileOptions(lint=True)))
    assert GROUP_NORM not in ops and "LayerNormalization" in ops, ops



@pytest.mark.parametrize("fmt", ["nhwc", "nChw8c", "nChw16c"])
@pytest.mark.parametrize("n", [1, 2])
def test_a_large_mean_against_a_small_spread_keeps_the_variance(fmt, n):
    # activations of mean 1000 and spread ~1.5 (a bias far from the data's scale): the
    # variance as E[x^2] - mean^2 of float sums cancels to noise (ONNX Runtime's own
    # GroupNormalization is 1.5 off here); the kernel sums deviations from a sample of each
    # channel, so it stays the float64 reference's
    model = _model("GroupNormalization", 4, (n, 3, 40, 36))
    bias = next(t for t in model.graph.initializer if t.name == "c1_b")
    bias.CopyFrom(_arr("c1_b", numpy_helper.to_array(bias) + 1000.0))
    model.graph.output.extend([helper.make_tensor_value_info(name, TensorProto.FLOAT, None)
                               for name in ("h", "a")])
    compiled = _compile(model, fmt)
    assert _ops(compiled).count(GROUP_NORM) == 1, _ops(compiled)
    x = rng.standard_normal((n, 3, 40, 36)).astype(np.float32)
    got = LoadedModel(compiled).execute({"x": x})
    h = got["h"].astype(np.float64)
    assert abs(h.mean() - 1000) < 5 and 0.5 < h.std() < 5, (h.mean(), h.std())
    params = {t.name: numpy_helper.to_array(t).astype(np.float64) for t in model.graph.initializer}
    groups = h.reshape(n, 4, -1)
    normed = ((groups - groups.mean(-1, keepdims=True))
              / np.sqrt(groups.var(-1, keepdims=True) + 1e-5)).reshape(h.shape)
    want = np.maximum(normed * params["a_g"][:, None, None] + params["a_b"][:, None, None], 0)
    np.testing.assert_allclose(got["a"], want, rtol=1e-3, atol=1e-3)
