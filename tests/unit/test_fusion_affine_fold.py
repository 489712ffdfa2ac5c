"""Fusion row affine_fold: runs of constant Muls and Adds (torch's GroupNorm(C, C) as an
InstanceNormalization with an identity affine before the layer's own per-channel Mul and Add)
run as one Mul and one Add, or not at all; results stay ONNX Runtime's."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

from graphengine.engine.importers import load_model
from graphengine.engine.pipeline import CompileOptions, compile_graph
from graphengine.engine.runtime import LoadedModel

rng = np.random.default_rng(5)
C, L = 8, 50


def _arr(name, value):
    return numpy_helper.from_array(np.asarray(value, np.float32), name)


def _model(nodes, inits, out="y", shape=(2, C, L)):
    g = helper.make_graph(nodes, "affine",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(shape))],
                          [helper.make_tensor_value_info(out, TensorProto.FLOAT, None)], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def _group_norm(scale, bias, torch_layout=False):
    """x -> InstanceNormalization(scale, bias) -> Mul(w [C, 1]) -> Add(b [C, 1]) -> Relu;
    `torch_layout`: as torch writes GroupNorm(C, C) of a [N, C, 1, L] conv output, the
    normalization on a [N, C, L] view between two Reshapes."""
    per_channel = (C, 1, 1) if torch_layout else (C, 1)
    inits = [_arr("s", scale), _arr("bi", bias),
             _arr("w", rng.standard_normal(per_channel) + 1.5),
             _arr("b", rng.standard_normal(per_channel))]
    nodes = [helper.make_node("InstanceNormalization", ["x", "s", "bi"], ["n"], epsilon=1e-5),
             helper.make_node("Mul", ["n", "w"], ["m"]),
             helper.make_node("Add", ["m", "b"], ["a"]),
             helper.make_node("Relu", ["a"], ["y"])]
    if not torch_layout:
        return _model(nodes, inits)
    inits += [numpy_helper.from_array(np.array([0, C, -1], np.int64), "flat"),
              numpy_helper.from_array(np.array([2, C, 1, L], np.int64), "back")]
    nodes = [helper.make_node("Reshape", ["x", "flat"], ["xf"]),
             helper.make_node("InstanceNormalization", ["xf", "s", "bi"], ["nf"], epsilon=1e-5),
             helper.make_node("Reshape", ["nf", "back"], ["n"])] + nodes[1:]
    return _model(nodes, inits, shape=(2, C, 1, L))


def _run(model):
    compiled = compile_graph(load_model(model), CompileOptions(lint=True))
    shape = [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim]
    x = (rng.standard_normal(shape) * 2 + 0.5).astype(np.float32)
    got = LoadedModel(compiled).execute({"x": x})
    want = ort.InferenceSession(model.SerializeToString(), providers=[
        "CPUExecutionProvider"]).run(None, {"x": x})
    for name, w in zip([o.name for o in model.graph.output], want):
        np.testing.assert_allclose(got[name], w, rtol=1e-5, atol=1e-5)
    ops = [p.op_type for p in compiled.report.placements]
    return compiled.report.fusions, ops


def test_the_identity_affine_of_a_group_norm_runs_no_pass():
    fusions, ops = _run(_group_norm(np.ones(C), np.zeros(C), torch_layout=True))
    assert any(f.startswith("Affine fold: 2 constant Mul/Add nodes -> nothing") for f in fusions), \
        fusions
    # the layer's own Mul and Add (and the Relu) are the group_norm row's, after the fold
    assert ops == ["graphengine.GroupNorm"], ops


def test_an_instance_norm_affine_and_the_layers_own_fold_into_one_mul_and_add():
    fusions, ops = _run(_group_norm(rng.standard_normal(C), rng.standard_normal(C)))
    assert any(f.startswith("Affine fold: 4 constant Mul/Add nodes -> Mul*Add") for f in fusions), \
        fusions
    # the two that remain join the normalization with the Relu (fusion row group_norm)
    assert any(f.startswith("GroupNorm: 4 nodes") and f.endswith("(8 groups + Relu)")
               for f in fusions), fusions
    assert ops == ["graphengine.GroupNorm"], ops


def test_sub_and_scalars_fold_and_what_widens_or_is_read_twice_stays():
    inits = [_arr("c0", [0.7]), _arr("c1", rng.standard_normal((C, 1))), _arr("c2", 2.5),
             _arr("c3", -1.25), _arr("wide", rng.standard_normal((2, 1, 1, 1))),
             _arr("c4", rng.standard_normal((C, 1)))]
    nodes = [helper.make_node("Sub", ["x", "c0"], ["s"]),        # x - 0.7
             helper.make_node("Mul", ["c1", "s"], ["m"]),        # constant on the left
             helper.make_node("Add", ["m", "c2"], ["a"]),
             helper.make_node("Mul", ["a", "c3"], ["f"]),        # 4 steps -> Mul, Add
             helper.make_node("Sigmoid", ["f"], ["g"]),
             helper.make_node("Sub", ["c2", "g"], ["r"]),        # c - x: not a step of x
             helper.make_node("Add", ["r", "c4"], ["t"]),
             helper.make_node("Mul", ["t", "wide"], ["y"])]      # widens [2, C, L]: not folded
    fusions, ops = _run(_model(nodes, inits))
    folds = [f for f in fusions if f.startswith("Affine fold")]
    assert len(folds) == 1 and folds[0].startswith(
        "Affine fold: 4 constant Mul/Add nodes -> Mul*Add"), fusions
    # c - x stays: a Sub of its own, or in the elementwise region after the fold
    assert ops.count("Sub") + ops.count("EltwiseGraph") == 1, ops

    # an intermediate another node reads ends the run: nothing folds
    nodes = [helper.make_node("Mul", ["x", "c1"], ["m"]),
             helper.make_node("Add", ["m", "c2"], ["a"]),
             helper.make_node("Add", ["m", "a"], ["y"])]
    fusions, _ = _run(_model(nodes, inits))
    assert not [f for f in fusions if f.startswith("Affine fold")], fusions


def test_a_division_is_not_folded():
    inits = [_arr("c1", rng.standard_normal((C, 1))), _arr("c2", 3.0)]
    nodes = [helper.make_node("Mul", ["x", "c1"], ["m"]),
             helper.make_node("Div", ["m", "c2"], ["y"])]
    fusions, ops = _run(_model(nodes, inits))
    assert not [f for f in fusions if f.startswith("Affine fold")], fusions
