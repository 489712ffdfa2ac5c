"""Fusion row matmul_bn: a Linear layer's BatchNorm1d (LeViT's Linear -> flatten ->
BatchNorm1d -> unflatten, TensorFlow's Dense -> BatchNormalization) folds into the MatMul's
weights and bias; results stay ONNX Runtime's."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from graphengine.engine.importers import load_model
from graphengine.engine.pipeline import CompileOptions, compile_graph
from graphengine.engine.runtime import LoadedModel

rng = np.random.default_rng(7)
K, N = 24, 16


def _arr(name, value, dtype=np.float32):
    return numpy_helper.from_array(np.asarray(value, dtype), name)


def _bn_inits():
    return [_arr("g", rng.uniform(0.5, 1.5, N)), _arr("be", rng.standard_normal(N)),
            _arr("mu", rng.standard_normal(N)), _arr("var", rng.uniform(0.3, 2.0, N))]


def _model(nodes, inits, shape):
    g = helper.make_graph(nodes, "mmbn",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(shape))],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def _compiled_and_checked(model):
    compiled = compile_graph(load_model(model), CompileOptions(lint=True))
    shape = [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim]
    x = rng.standard_normal(shape).astype(np.float32)
    got = LoadedModel(compiled).execute({"x": x})["y"]
    want = ort.InferenceSession(model.SerializeToString(), providers=[
        "CPUExecutionProvider"]).run(None, {"x": x})[0]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    return compiled


@pytest.mark.parametrize("bias", [False, True])
def test_levit_linear_flatten_batchnorm_folds_into_the_matmul(bias):
    """[B, T, K] @ [K, N] (+ bias) -> Reshape [B*T, N] -> BatchNormalization -> Reshape
    [B, T, N] -> HardSwish: one MatMul with the normalization in its weights and bias."""
    inits = [_arr("w", rng.standard_normal((K, N)) * 0.3), *_bn_inits(),
             _arr("flat", [-1, N], np.int64), _arr("back", [2, 5, N], np.int64)]
    nodes = [helper.make_node("MatMul", ["x", "w"], ["m"])]
    if bias:
        inits.append(_arr("b", rng.standard_normal(N)))
        nodes.append(helper.make_node("Add", ["m", "b"], ["mb"]))
    nodes += [helper.make_node("Reshape", ["mb" if bias else "m", "flat"], ["f"]),
              helper.make_node("BatchNormalization", ["f", "g", "be", "mu", "var"], ["n"],
                               epsilon=1e-5),
              helper.make_node("Reshape", ["n", "back"], ["u"]),
              helper.make_node("HardSwish", ["u"], ["y"])]
    compiled = _compiled_and_checked(_model(nodes, inits, (2, 5, K)))
    fusions = compiled.report.fusions
    assert any(f.startswith("MatMul+BatchNormalization") for f in fusions), fusions
    assert not any(p.op_type == "BatchNormalization" for p in compiled.report.placements)


def test_a_two_d_dense_then_batchnorm_folds():
    inits = [_arr("w", rng.standard_normal((K, N)) * 0.3), *_bn_inits()]
    nodes = [helper.make_node("MatMul", ["x", "w"], ["m"]),
             helper.make_node("BatchNormalization", ["m", "g", "be", "mu", "var"], ["y"])]
    compiled = _compiled_and_checked(_model(nodes, inits, (6, K)))
    assert any(f.startswith("MatMul+BatchNormalization") for f in compiled.report.fusions)


def test_a_norm_over_another_axis_stays():
    """BatchNormalization of a [B, N, T] transpose normalizes axis 1, not the MatMul's
    columns in place: it is not folded (and stays right)."""
    inits = [_arr("w", rng.standard_normal((K, N)) * 0.3), *_bn_inits()]
    nodes = [helper.make_node("MatMul", ["x", "w"], ["m"]),
             helper.make_node("Transpose", ["m"], ["t"], perm=[0, 2, 1]),
             helper.make_node("BatchNormalization", ["t", "g", "be", "mu", "var"], ["y"])]
    compiled = _compiled_and_checked(_model(nodes, inits, (2, 5, K)))
    assert not any(f.startswith("MatMul+BatchNormalization") for f in compiled.report.fusions)


@pytest.mark.parametrize("trans_b,beta,bias_shape", [(1, 1.0, (N,)), (0, 0.5, (1, N)),
                                                     (1, 2.0, ()), (1, 1.0, None)])
def test_a_gemm_then_batchnorm_folds_into_the_gemm(trans_b, beta, bias_shape):
    """torch's Linear on a 2-D input exports as a Gemm (transB = 1): Linear -> BatchNorm1d
    (tabular nets, GIN's MLPs) is one Gemm, its B's rows (or columns) scaled and beta * C
    folded into its bias."""
    w = rng.standard_normal((N, K) if trans_b else (K, N)) * 0.3
    inits = [_arr("w", w), *_bn_inits()]
    ins = ["x", "w"]
    if bias_shape is not None:
        inits.append(_arr("c", rng.standard_normal(bias_shape)))
        ins.append("c")
    nodes = [helper.make_node("Gemm", ins, ["m"], transB=trans_b, beta=beta),
             helper.make_node("BatchNormalization", ["m", "g", "be", "mu", "var"], ["n"]),
             helper.make_node("Relu", ["n"], ["y"])]
    compiled = _compiled_and_checked(_model(nodes, inits, (6, K)))
    ops = [t.op for p in compiled.programs for t in getattr(p, "tasks", []) if t.kind == "kernel"]
    assert ops == ["Gemm"], ops
    assert any(f.startswith("Gemm+BatchNormalization") for f in compiled.report.fusions)


@pytest.mark.parametrize("attrs,bias_shape", [({"transA": 1}, (N,)), ({"alpha": 2.0}, (N,)),
                                              ({}, (6, 1))])
def test_a_gemm_the_fold_cannot_take_keeps_its_batchnorm(attrs, bias_shape):
    """A transposed A, an alpha other than 1, or a C per row: the normalization stays."""
    inits = [_arr("w", rng.standard_normal((N, K)) * 0.3), *_bn_inits(),
             _arr("c", rng.standard_normal(bias_shape))]
    shape = (K, 6) if attrs.get("transA") else (6, K)
    nodes = [helper.make_node("Gemm", ["x", "w", "c"], ["m"], transB=1, **attrs),
             helper.make_node("BatchNormalization", ["m", "g", "be", "mu", "var"], ["y"])]
    compiled = _compiled_and_checked(_model(nodes, inits, shape))
    assert not any(f.startswith("Gemm+BatchNormalization") for f in compiled.report.fusions)
