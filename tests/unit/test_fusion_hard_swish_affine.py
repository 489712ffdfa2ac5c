"""Fusion rows hard_swish and activation_affine: PP-LCNetV3's Conv -> hardswish spelled with a
Clip -> scalar Mul and Add (its learnable affine block) becomes one Conv with HardSwish and
a linear post-op; the spelled-out forms and the affine's variants give ONNX Runtime's
results."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from graphengine.engine.importers import load_model
from graphengine.engine.pipeline import CompileOptions, compile_graph
from graphengine.engine.runtime import LoadedModel

rng = np.random.default_rng(11)


def _c(name, value):
    return numpy_helper.from_array(np.array(value, np.float32), name)


def _model(form="div", clip=(0.0, 6.0), add3=3.0, affine=(("Mul", 0.47), ("Add", -0.3)),
           opset=17, c=8):
    """x -> Conv -> hardswish (spelled as `form`) -> affine steps -> Conv 1x1 -> y."""
    inits = [numpy_helper.from_array(rng.standard_normal((c, 4, 3, 3)).astype(np.float32)
                                     * 0.4, "w1"),
             numpy_helper.from_array(rng.standard_normal(c).astype(np.float32), "b1"),
             numpy_helper.from_array(rng.standard_normal((6, c, 1, 1)).astype(np.float32)
                                     * 0.3, "w2"),
             _c("three", add3), _c("six", 6.0), _c("sixth", 1.0 / 6.0)]
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["h"], pads=[1, 1, 1, 1], name="conv1"),
             helper.make_node("Add", ["h", "three"], ["a"])]
    if opset < 11:
        nodes.append(helper.make_node("Clip", ["a"], ["cl"], min=clip[0], max=clip[1]))
    else:
        inits += [_c("lo", clip[0]), _c("hi", clip[1])]
        nodes.append(helper.make_node("Clip", ["a", "lo", "hi"], ["cl"]))
    if form == "div":          # (x * clip) / 6
        nodes += [helper.make_node("Mul", ["h", "cl"], ["m"]),
                  helper.make_node("Div", ["m", "six"], ["hs"])]
    elif form == "sixth":      # (clip * x) * (1/6)
        nodes += [helper.make_node("Mul", ["cl", "h"], ["m"]),
                  helper.make_node("Mul", ["sixth", "m"], ["hs"])]
    else:                      # x * (clip / 6)
        nodes += [helper.make_node("Div", ["cl", "six"], ["d"]),
                  helper.make_node("Mul", ["h", "d"], ["hs"])]
    last = "hs"
    for i, (op, value) in enumerate(affine):
        inits.append(_c(f"k{i}", [value]))
        nodes.append(helper.make_node(op, [last, f"k{i}"] if i % 2 == 0 else [f"k{i}", last],
                                      [f"f{i}"]) if op != "Sub"
                     else helper.make_node(op, [last, f"k{i}"], [f"f{i}"]))
        last = f"f{i}"
    nodes.append(helper.make_node("Conv", [last, "w2"], ["y"], name="conv2"))
    g = helper.make_graph(nodes, "lcnet",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4, 7, 7])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])


def _check(model):
    compiled = compile_graph(load_model(model), CompileOptions())
    x = (rng.standard_normal((2, 4, 7, 7)) * 3).astype(np.float32)  # across both kinks
    got = LoadedModel(compiled).execute({"x": x})["y"]
    want = ort.InferenceSession(model.SerializeToString(), providers=[
        "CPUExecutionProvider"]).run(None, {"x": x})[0]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    return compiled.report.fusions, [p.op_type for p in compiled.report.placements
                                     if p.op_type != "TransData"]


@pytest.mark.parametrize("form, opset", [("div", 17), ("sixth", 17), ("inner", 17),
                                         ("div", 10)])
def test_hardswish_and_the_affine_become_the_convs_epilogue(form, opset):
    fusions, ops = _check(_model(form, opset=opset))
    assert any(f.startswith("HardSwish(") for f in fusions), fusions
    assert any(f.startswith("Conv+HardSwish: conv1 absorbed") for f in fusions), fusions
    assert sum(f.startswith("Conv+Mul(after HardSwish): conv1") or
               f.startswith("Conv+Add(after HardSwish): conv1") for f in fusions) == 2, fusions
    assert ops == ["Conv", "Conv"]  # no chain, no elementwise task left


@pytest.mark.parametrize("affine", [
    (("Add", 0.25),), (("Mul", -1.5),), (("Sub", 0.5),),
    (("Mul", 2.0), ("Add", 1.0), ("Mul", 0.5)),
])
def test_affine_variants_after_the_activation(affine):
    fusions, ops = _check(_model(affine=affine))
    assert ops == ["Conv", "Conv"], (fusions, ops)


@pytest.mark.parametrize("kwargs", [{"clip": (0.0, 5.0)}, {"add3": 2.0}])
def test_other_clips_are_not_hardswish(kwargs):
    fusions, ops = _check(_model(**kwargs))
    assert not any(f.startswith("HardSwish(") for f in fusions), fusions
    # nothing to take the affine: the Conv has no activation (the chain runs it all)
    assert not any("after" in f for f in fusions), fusions


@pytest.mark.parametrize("tail", [(("Max", -0.4), ("Mul", 2.5)), (("Mul", 2.5), ("Max", -0.4)),
                                  (("Min", 0.3), ("Add", 0.7)), (("Add", 0.7), ("Min", 0.3))])
def test_a_clamp_and_an_affine_after_one_activation_keep_their_order(tail):
    """Conv -> LeakyRelu -> a scalar clamp and a scalar affine in either order: a Conv takes
    one of them as its second post-op (the activation2 and activation_affine rows leave each
    other's Conv alone, whose post-ops would then run in the wrong order); ONNX Runtime's
    results, and exactly one step left outside the Conv."""
    inits = [numpy_helper.from_array(rng.standard_normal((8, 4, 3, 3)).astype(np.float32)
                                     * 0.4, "w"),
             numpy_helper.from_array(rng.standard_normal(8).astype(np.float32), "b")]
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["h"], pads=[1, 1, 1, 1], name="conv"),
             helper.make_node("LeakyRelu", ["h"], ["t0"], alpha=0.2)]
    for i, (op, value) in enumerate(tail):
        inits.append(_c(f"k{i}", value))
        nodes.append(helper.make_node(op, [f"t{i}", f"k{i}"], [f"t{i + 1}"]))
    g = helper.make_graph(nodes, "clamp_affine",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4, 7, 7])],
                          [helper.make_tensor_value_info(f"t{len(tail)}", TensorProto.FLOAT,
                                                         None)], inits)
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    x = rng.standard_normal((2, 4, 7, 7)).astype(np.float32)
    compiled = compile_graph(load_model(model), CompileOptions(lint=True))
    got = LoadedModel(compiled).execute({"x": x})[f"t{len(tail)}"]
    ref = ort.InferenceSession(model.SerializeToString(),
                               providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5)
    ops = [p.op_type for p in compiled.report.placements if p.op_type != "TransData"]
    assert ops[0] == "Conv" and len(ops) == 2, (ops, compiled.report.fusions)
    taken = [f for f in compiled.report.fusions if f.startswith("Conv+")]
    assert len(taken) == 2, taken  # the activation, then the first step only
    assert any("after" in f for f in taken) == (tail[0][0] in ("Mul", "Add")), taken
