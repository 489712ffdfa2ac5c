"""Fusion row eltwise_chain: chains of elementwise ops run as one EltwiseChain kernel."""

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from graphengine import _runtime
from graphengine.engine import ops
from graphengine.engine.dtypes import DType
from graphengine.engine.errors import GraphEngineError
from graphengine.engine.importers import load_model
from graphengine.engine.ir import Graph, TensorMeta
from graphengine.engine.pipeline import CompileOptions, compile_graph
from graphengine.engine.runtime import load

RNG = np.random.default_rng(3)
ONNX_TYPES = {np.float32: TensorProto.FLOAT, np.float64: TensorProto.DOUBLE}


def _model(nodes, inputs, outputs, inits, dtype=np.float32):
    t = ONNX_TYPES[dtype]
    graph = helper.make_graph(
        nodes, "chain", [helper.make_tensor_value_info(n, t, list(s)) for n, s in inputs],
        [helper.make_tensor_value_info(n, t, None) for n in outputs],
        [numpy_helper.from_array(np.asarray(v, dtype), k) for k, v in inits.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)], ir_version=9)


def _run(model, feeds, rtol=2e-5, atol=2e-6):
    compiled = compile_graph(load_model(model), CompileOptions(lint=True))
    ours = load(compiled).execute(feeds)
    ref = ort.InferenceSession(model.SerializeToString()).run(None, feeds)
    for (name, got), want in zip(ours.items(), ref):
        assert got.dtype == want.dtype and got.shape == want.shape, name
        np.testing.assert_allclose(got, want, rtol=rtol, atol=atol)
    return compiled


def _chains(compiled):
    return [p for p in compiled.report.placements if p.op_type == "EltwiseChain"]


def _ops(compiled):
    return [p.op_type for p in compiled.report.placements if p.op_type != "TransData"]


def _feed(shape, lo=-3.0, hi=3.0):
    return RNG.uniform(lo, hi, shape).astype(np.float32)


# ---- the row fires and matches onnxruntime ----------------------------------------------
@pytest.mark.parametrize("shape,operand", [
    ((2, 3, 4, 5), ()),            # scalar constants
    ((2, 3, 4, 5), (1, 3, 1, 1)),  # per channel
    ((2, 3, 4, 5), (5,)),          # last dim
    ((2, 3, 4, 5), (2, 1, 4, 1)),  # an odd broadcast (oneDNN post-ops may lack it)
    ((7,), (7,)),
    ((3, 1), (1,)),
    ((1, 8, 16, 16), (8, 1, 1)),
])
def test_mul_add_tanh_mul_is_one_kernel(shape, operand):
    nodes = [helper.make_node("Mul", ["x", "a"], ["m"]),
             helper.make_node("Add", ["m", "b"], ["s"]),
             helper.make_node("Tanh", ["s"], ["t"]),
             helper.make_node("Mul", ["t", "c"], ["y"])]
    model = _model(nodes, [("x", shape)], ["y"],
                   {"a": RNG.normal(size=operand), "b": RNG.normal(size=operand),
                    "c": RNG.normal(size=operand)})
    compiled = _run(model, {"x": _feed(shape)})
    assert _ops(compiled) == ["EltwiseChain"]
    (chain,) = _chains(compiled)
    assert chain.engine == "device"
    assert any(f.startswith("EltwiseChain: 4 nodes (Mul->Add->Tanh->Mul)")
               for f in compiled.report.fusions)


@pytest.mark.parametrize("y_shape", [(2, 3, 4, 5), (2, 1, 1, 5), (1, 3, 1, 1)])
def test_activation_operands_full_or_broadcast(y_shape):
    # x * y + x, then sigmoid: y is a second graph input; x is read twice
    nodes = [helper.make_node("Mul", ["x", "y"], ["m"]),
             helper.make_node("Add", ["m", "x"], ["s"]),
             helper.make_node("Sigmoid", ["s"], ["out"])]
    model = _model(nodes, [("x", (2, 3, 4, 5)), ("y", y_shape)], ["out"], {})
    compiled = _run(model, {"x": _feed((2, 3, 4, 5)), "y": _feed(y_shape)})
    assert _ops(compiled) == ["EltwiseChain"]


@pytest.mark.parametrize("op", ["Sub", "Div"])
def test_reversed_operands(op):
    # c - x and c / x (the chain's value on the right), then Relu
    nodes = [helper.make_node("Exp", ["x"], ["e"]),
             helper.make_node(op, ["c", "e"], ["r"]),
             helper.make_node("Relu", ["r"], ["y"])]
    model = _model(nodes, [("x", (3, 8))], ["y"], {"c": RNG.normal(size=(8,))})
    compiled = _run(model, {"x": _feed((3, 8))})
    assert _ops(compiled) == ["EltwiseChain"]


def _unary_chain(kinds, shape=(4, 6, 5)):
    nodes, inits, prev = [], {}, "x"
    for i, kind in enumerate(kinds):
        out = f"v{i}" if i < len(kinds) - 1 else "y"
        if kind == "Clip":
            inits.update({"lo": np.float32(-0.5), "hi": np.float32(0.75)})
            nodes.append(helper.make_node("Clip", [prev, "lo", "hi"], [out]))
        elif kind == "Pow":
            inits["e"] = np.float32(2.0)
            nodes.append(helper.make_node("Pow", [prev, "e"], [out]))
        elif kind == "LeakyRelu":
            nodes.append(helper.make_node(kind, [prev], [out], alpha=0.2))
        elif kind == "HardSigmoid":
            nodes.append(helper.make_node(kind, [prev], [out], alpha=0.3, beta=0.4))
        elif kind == "GeluTanh":
            nodes.append(helper.make_node("Gelu", [prev], [out], approximate="tanh"))
        else:
            nodes.append(helper.make_node(kind, [prev], [out]))
        prev = out
    return _model(nodes, [("x", shape)], ["y"], inits)


@pytest.mark.parametrize("kinds", [
    ["Relu", "Sigmoid", "Neg", "Exp"],
    ["Abs", "Sqrt", "Log", "Tanh"],
    ["LeakyRelu", "Clip", "HardSigmoid"],
    ["HardSwish", "Pow", "Reciprocal"],
    ["Gelu", "GeluTanh", "Neg"],
])
def test_unary_steps(kinds):
    compiled = _run(_unary_chain(kinds), {"x": _feed((4, 6, 5), 0.1, 2.0)}, rtol=1e-4)
    assert _ops(compiled) == ["EltwiseChain"]


def test_chain_after_a_matmul_epilogue_is_separate():
    # MatMul+bias absorbs the Add; the Sigmoid goes into the MatMul; Mul->Add stay a chain
    nodes = [helper.make_node("MatMul", ["x", "w"], ["mm"]),
             helper.make_node("Add", ["mm", "bias"], ["h"]),
             helper.make_node("Mul", ["h", "s"], ["hs"]),
             helper.make_node("Add", ["hs", "t"], ["y"])]
    model = _model(nodes, [("x", (3, 8))], ["y"],
                   {"w": RNG.normal(size=(8, 6)), "bias": RNG.normal(size=(6,)),
                    "s": RNG.normal(size=(6,)), "t": RNG.normal(size=(1, 6))})
    compiled = _run(model, {"x": _feed((3, 8))}, rtol=1e-4, atol=1e-5)
    assert _ops(compiled) == ["MatMul", "EltwiseChain"]


# ---- the row leaves alone what it must not fuse ------------------------------------------
def _three(extra_output=False, extra_reader=False):
    nodes = [helper.make_node("Mul", ["x", "a"], ["m"]),
             helper.make_node("Add", ["m", "b"], ["s"]),
             helper.make_node("Tanh", ["s"], ["y"])]
    outputs = ["y"]
    if extra_reader:
        nodes.append(helper.make_node("Exp", ["m"], ["side_exp"]))
        nodes.append(helper.make_node("ReduceSum", ["side_exp"], ["side"]))
        outputs.append("side")
    if extra_output:
        outputs.append("s")
    return _model(nodes, [("x", (2, 5))], outputs, {"a": np.float32(1.5), "b": np.float32(-0.5)})


def test_intermediate_with_another_reader_ends_a_chain():
    compiled = _run(_three(extra_reader=True), {"x": _feed((2, 5))})
    fused = [f for f in compiled.report.fusions if f.startswith("EltwiseChain")]
    # m has two readers: Mul stays alone; Add->Tanh is a chain
    assert fused == [f for f in fused if "(Add->Tanh)" in f] and len(fused) == 1
    assert "Mul" in _ops(compiled)


def test_intermediate_that_is_a_graph_output_ends_a_chain():
    compiled = _run(_three(extra_output=True), {"x": _feed((2, 5))})
    fused = [f for f in compiled.report.fusions if f.startswith("EltwiseChain")]
    assert len(fused) == 1 and "(Mul->Add)" in fused[0]
    assert "Tanh" in _ops(compiled)


def test_single_op_and_float64_are_not_fused():
    single = _model([helper.make_node("Tanh", ["x"], ["y"])], [("x", (2, 5))], ["y"], {})
    assert _ops(_run(single, {"x": _feed((2, 5))})) == ["Tanh"]
    nodes = [helper.make_node("Mul", ["x", "a"], ["m"]), helper.make_node("Add", ["m", "a"], ["y"])]
    f64 = _model(nodes, [("x", (2, 5))], ["y"], {"a": 2.0}, dtype=np.float64)
    compiled = _run(f64, {"x": RNG.normal(size=(2, 5))}, rtol=1e-12, atol=0)
    assert _chains(compiled) == []


def test_a_broadcasting_chain_value_stops_the_chain():
    # x[5] + y[3,5] grows the value: that Add cannot be a step whose value is x
    nodes = [helper.make_node("Relu", ["x"], ["r"]),
             helper.make_node("Add", ["r", "y"], ["s"]),
             helper.make_node("Tanh", ["s"], ["out"])]
    model = _model(nodes, [("x", (5,)), ("y", (3, 5))], ["out"], {})
    compiled = _run(model, {"x": _feed((5,)), "y": _feed((3, 5))})
    fused = [f for f in compiled.report.fusions if f.startswith("EltwiseChain")]
    # y is the chain's value for the Add (x broadcasts to it), so Add->Tanh fuse; Relu not
    assert len(fused) == 1 and "(Add->Tanh)" in fused[0] and "Relu" in _ops(compiled)


# ---- the numpy reference (host fallback) -----------------------------------------------
def test_reference_equals_the_unfused_ops():
    schema = ops.get("EltwiseChain")
    x = np.linspace(-2, 2, 24, dtype=np.float32).reshape(2, 3, 4)
    c, v = np.float32(0.5), RNG.normal(size=(3, 1)).astype(np.float32)
    attrs = {"steps": ["Mul", "Sub", "Clip", "Div", "Pow", "GeluTanh"],
             "operands": [1, 2, -1, 1, -1, -1], "reversed": [0, 1, 0, 1, 0, 0],
             "alphas": [0, 0, -1.0, 0, 3.0, 0], "betas": [0, 0, 1.5, 0, 0, 0]}
    got = schema.compute([x, c, v], attrs)[0]
    want = x * c
    want = v - want
    want = np.clip(want, -1.0, 1.5)
    want = c / want
    want = want ** 3
    want = 0.5 * want * (1 + np.tanh(np.sqrt(2 / np.pi) * (want + 0.044715 * want ** 3)))
    assert got.dtype == np.float32
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    # float64 runs in float64
    got64 = schema.compute([x.astype(np.float64), np.float64(0.5), v.astype(np.float64)], attrs)[0]
    assert got64.dtype == np.float64


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_chain_node_runs_on_the_host_when_the_device_declines(dtype):
    # float64: the device declines EltwiseChain, the host runs the numpy reference
    g = Graph("host_chain")
    x = g.add_input("x", TensorMeta(DType.from_numpy(np.dtype(dtype)), (2, 5)))
    a = g.add_constant("a", np.asarray(2.0, dtype))
    b = g.add_constant("b", np.arange(5, dtype=dtype))
    node = g.add_node("EltwiseChain", [x, a, b], attrs={
        "steps": ["Mul", "Sub", "Tanh"], "operands": [1, 2, -1], "reversed": [0, 1, 0],
        "alphas": [0.0, 0.0, 0.0], "betas": [0.0, 0.0, 0.0]})
    g.outputs.append(node.outputs[0])
    compiled = compile_graph(g, CompileOptions(lint=True))
    (placed,) = [p for p in compiled.report.placements if p.op_type == "EltwiseChain"]
    assert placed.engine == ("host" if dtype == np.float64 else "device")
    feed = RNG.normal(size=(2, 5)).astype(dtype)
    (got,) = load(compiled).execute({"x": feed}).values()
    assert got.dtype == dtype
    np.testing.assert_allclose(got, np.tanh(np.arange(5) - feed * 2), rtol=1e-6, atol=1e-7)


def test_schema_rejects_bad_attributes():
    for attrs, message in [
        ({"steps": ["Mul"], "operands": [5]}, "out of range"),
        ({"steps": ["Tanh"], "operands": [1]}, "is unary"),
        ({"steps": ["Frob"], "operands": [-1]}, "unknown op"),
        ({"steps": ["Tanh", "Relu"], "operands": [-1]}, "'operands' has 1 entries"),
    ]:
        g = Graph("bad")
        x = g.add_input("x", TensorMeta(DType.FLOAT32, (2, 3)))
        c = g.add_constant("c", np.ones(3, np.float32))
        n = len(attrs["steps"])
        full = {"reversed": [0] * n, "alphas": [0.0] * n, "betas": [0.0] * n} | attrs
        node = g.add_node("EltwiseChain", [x, c] if "Mul" in attrs["steps"] else [x],
                          attrs=full)
        with pytest.raises(GraphEngineError, match=message):
            ops.get("EltwiseChain").infer(node, ops.get("EltwiseChain").attrs_of(node))


# ---- the runtime kernel's checks ---------------------------------------------------------
def _spec(steps="Mul,Tanh", operands=(1, -1), reversed_=(0, 0), alphas=(0, 0), betas=(0, 0),
          operand_shape=(3,), operand_dtype="float32", extra_inputs=0):
    tensors = [{"name": "x", "dtype": "float32", "shape": [2, 3], "region": "arena", "offset": 0},
               {"name": "y", "dtype": "float32", "shape": [2, 3], "region": "arena",
                "offset": 64}]
    size = int(np.prod(operand_shape)) * np.dtype(operand_dtype).itemsize
    tensors.append({"name": "c", "dtype": operand_dtype, "shape": list(operand_shape),
                    "region": "weight", "offset": 0})
    for i in range(extra_inputs):
        tensors.append({"name": f"e{i}", "dtype": "float32", "shape": [1], "region": "weight",
                        "offset": 64 * (i + 1)})
    inputs = [0, 2] + [3 + i for i in range(extra_inputs)]
    return {"name": "m", "tensors": tensors, "arena_bytes": 128,
            "weights": np.zeros(max(64, size) + 64 * (extra_inputs + 1), np.uint8),
            "num_streams": 1, "num_events": 0, "inputs": [0], "outputs": [1],
            "tasks": [{"kind": "kernel", "name": "chain", "stream": 0, "op": "EltwiseChain",
                       "inputs": inputs, "outputs": [1],
                       "attrs": {"steps": steps, "operands": list(operands),
                                 "reversed": list(reversed_), "alphas": list(alphas),
                                 "betas": list(betas)}}]}


def test_kernel_runs_a_valid_spec():
    model = _runtime.Model(_runtime.Device(1), _spec())
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    np.testing.assert_array_equal(model.execute([x])[0], np.zeros((2, 3), np.float32))


@pytest.mark.parametrize("kwargs,message", [
    ({"steps": "Mul,Frob"}, "unknown step 'Frob'"),
    ({"operands": (2, -1)}, r"operand input 2 out of range \[1, 2\)"),
    ({"operands": (1, 1)}, "is unary but names operand input 1"),
    ({"operands": (1,)}, "'operands' has 1 entries for 2 steps"),
    ({"alphas": (0, 0, 0)}, "'alphas' has 3 entries for 2 steps"),
    ({"operand_shape": (4,)}, r"does not broadcast to X's \[2,3\]"),
    ({"operand_shape": (1, 2, 3)}, "does not broadcast"),
    ({"operand_dtype": "float64"}, "must be float32"),
    ({"extra_inputs": 1}, "input 2 is not used by any step"),
    ({"steps": "Clip,Tanh", "operands": (-1, -1), "alphas": (float("nan"), 0),
      "extra_inputs": 0}, "NaN"),
])
def test_kernel_rejects_bad_specs(kwargs, message):
    spec = _spec(**kwargs)
    if kwargs.get("steps", "").startswith("Clip"):  # no operand inputs at all
        spec["tasks"][0]["inputs"] = [0]
    with pytest.raises(_runtime.InvalidArgument, match=message) as err:
        _runtime.Model(_runtime.Device(1), spec)
    assert "chain" in str(err.value)
