"""Shared helpers for the op tests (one-node ONNX models checked against onnxruntime or
onnx.reference), plus tests of the registry and of infer_node / run_node themselves."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import helper, numpy_helper
from onnx.reference import ReferenceEvaluator

from graphengine.engine import ops
from graphengine.engine.dtypes import DType
from graphengine.engine.errors import ExecutionError, InvalidGraph, InvalidInput, ShapeError
from graphengine.engine.importers import import_onnx
from graphengine.engine.ir import Graph, TensorMeta

PRIORITY_1 = """Conv BatchNormalization Relu Clip Add Sub Mul Div Pow Sqrt Erf Tanh Sigmoid MaxPool
AveragePool GlobalAveragePool Flatten Gemm MatMul Reshape Transpose Softmax LayerNormalization
Gather Shape Unsqueeze Squeeze Concat Slice Cast Constant ConstantOfShape Expand Where Equal
Identity Dropout ReduceMean Range Neg Exp Log Not Less Greater Split""".split()


def make_model(op: str, inputs: Sequence[tuple[str, np.ndarray | None]],
               attrs: dict[str, Any] | None = None, n_outputs: int = 1,
               consts: Sequence[str] = (), opset: int = 17, domain: str = "",
               dims: dict[str, Sequence[Any]] | None = None) -> onnx.ModelProto:
    """A one-node model; inputs named in `consts` become initializers, a None array an
    omitted optional input; `dims` overrides declared input shapes (symbols allowed)."""
    names = [n if a is not None else "" for n, a in inputs]
    outs = [f"y{k}" for k in range(n_outputs)]
    node = helper.make_node(op, names, outs, domain=domain, **(attrs or {}))
    graph_inputs, inits = [], []
    for name, arr in inputs:
        if arr is None:
            continue
        if name in consts:
            inits.append(numpy_helper.from_array(arr, name))
            continue
        elem = helper.np_dtype_to_tensor_dtype(arr.dtype)
        shape = list((dims or {}).get(name, arr.shape))
        graph_inputs.append(helper.make_tensor_value_info(name, elem, shape))
    graph = helper.make_graph([node], f"test_{op.lower()}", graph_inputs,
                              [helper.make_empty_tensor_value_info(o) for o in outs],
                              initializer=inits)
    opsets = [helper.make_opsetid("", opset)]
    if domain:
        opsets.append(helper.make_opsetid(domain, 1))
    model = helper.make_model(graph, opset_imports=opsets)
    model.ir_version = 8 if opset <= 17 else 10
    return model


def infer_graph(g: Graph) -> None:
    for node in g.nodes:
        for value, meta in zip(node.outputs, ops.infer_node(node)):
            value.meta = meta


def run_graph(g: Graph, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    env: dict[str, Any] = {v.name: v.const for v in g.constants()}
    env.update(feeds)
    for node in g.nodes:
        outs = ops.run_node(node, [env[v.name] if v is not None else None for v in node.inputs])
        for value, arr in zip(node.outputs, outs):
            env[value.name] = arr
    return [env[v.name] for v in g.outputs]


def reference(model: onnx.ModelProto, feeds: dict[str, np.ndarray], engine: str
              ) -> list[np.ndarray]:
    if engine == "ort":
        sess = ort.InferenceSession(model.SerializeToString(),
                                    providers=["CPUExecutionProvider"])
        return sess.run(None, feeds)
    return list(ReferenceEvaluator(model).run(None, feeds))


def assert_matches_meta(meta: TensorMeta, arr: np.ndarray) -> None:
    want = DType.STRING if arr.dtype == object else DType.from_numpy(arr.dtype)
    assert meta.dtype is want, f"inferred {meta}, computed {arr.dtype}{list(arr.shape)}"
    assert meta.shape is not None and len(meta.shape) == arr.ndim, (meta, arr.shape)
    for d, n in zip(meta.shape, arr.shape):
        assert not isinstance(d, int) or d == n, f"inferred {meta}, computed {arr.shape}"


def check(op: str, inputs: Sequence[tuple[str, np.ndarray | None]],
          attrs: dict[str, Any] | None = None, *, n_outputs: int = 1,
          consts: Sequence[str] = (), opset: int = 17, engine: str = "ort",
          rtol: float = 1e-5, atol: float = 1e-6, exact_shapes: bool = True
          ) -> tuple[Graph, list[np.ndarray]]:
    """Import a one-node model, infer and run it, and compare with the reference engine."""
    model = make_model(op, inputs, attrs, n_outputs, consts, opset)
    g = import_onnx(model)
    g.lint()
    infer_graph(g)
    feeds = {n: a for n, a in inputs if a is not None and n not in consts}
    got = run_graph(g, feeds)
    want = reference(model, feeds, engine)
    assert len(got) == len(want) == n_outputs
    for k, (value, g_arr, w_arr) in enumerate(zip(g.outputs, got, want)):
        w_arr = np.asarray(w_arr)
        if w_arr.dtype.kind in "US":
            w_arr = w_arr.astype(object)
        assert g_arr.dtype == w_arr.dtype, f"output {k}: {g_arr.dtype} vs {w_arr.dtype}"
        assert g_arr.shape == w_arr.shape, f"output {k}: {g_arr.shape} vs {w_arr.shape}"
        if exact_shapes:
            assert value.meta is not None and value.meta.shape == w_arr.shape, value.meta
        assert_matches_meta(value.meta, g_arr)
        if w_arr.dtype.kind in "fc":
            np.testing.assert_allclose(g_arr, w_arr, rtol=rtol, atol=atol, err_msg=f"out {k}")
        else:
            np.testing.assert_array_equal(g_arr, w_arr, err_msg=f"output {k}")
    return g, got


def symbolic(op: str, dims: dict[str, Sequence[Any]],
             inputs: Sequence[tuple[str, np.ndarray | None]],
             attrs: dict[str, Any] | None = None, consts: Sequence[str] = (),
             n_outputs: int = 1, opset: int = 17) -> list[TensorMeta]:
    """Inferred output metas with symbolic input dims."""
    g = import_onnx(make_model(op, inputs, attrs, n_outputs, consts, opset, dims=dims))
    infer_graph(g)
    return [v.meta for v in g.outputs]


def rand(*shape: int, dtype: Any = np.float32, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)


# ---- tests of the registry and the node entry points -----------------------------------
def test_priority_one_ops_are_registered() -> None:
    missing = [op for op in PRIORITY_1 if not ops.has(op)]
    assert not missing
    assert len(ops.all_ops()) > 150


@pytest.mark.parametrize("op", PRIORITY_1)
def test_every_schema_has_infer_and_compute(op: str) -> None:
    schema = ops.get(op)
    assert schema.name == op and callable(schema.infer) and callable(schema.compute)


def test_unknown_op_names_the_node() -> None:
    g = Graph()
    x = g.add_input("x", TensorMeta(DType.FLOAT32, (2,)))
    node = g.add_node("NoSuchOp", [x], name="weird")
    with pytest.raises(InvalidGraph, match="weird.*NoSuchOp"):
        ops.infer_node(node)


def test_arity_and_attribute_errors() -> None:
    g = Graph()
    x = g.add_input("x", TensorMeta(DType.FLOAT32, (2,)))
    with pytest.raises(InvalidGraph, match="expected 2 inputs, got 1"):
        ops.infer_node(g.add_node("Add", [x], name="add1"))
    with pytest.raises(InvalidGraph, match="unknown attribute 'bogus'"):
        ops.infer_node(g.add_node("Relu", [x], name="relu1", attrs={"bogus": 1}))
    with pytest.raises(InvalidGraph, match="missing required attribute 'axis'"):
        ops.infer_node(g.add_node("Concat", [x, x], name="cat"))


def test_shape_error_names_node_and_inputs() -> None:
    g = Graph()
    a = g.add_input("a", TensorMeta(DType.FLOAT32, (2, 3)))
    b = g.add_input("b", TensorMeta(DType.FLOAT32, (4,)))
    node = g.add_node("Add", [a, b], name="bad_add")
    with pytest.raises(ShapeError) as info:
        ops.infer_node(node)
    msg = str(info.value)
    assert "bad_add" in msg and "broadcast" in msg and "float32[2,3]" in msg
    assert info.value.node == "bad_add"


def test_dtype_error_names_expected_dtype() -> None:
    g = Graph()
    a = g.add_input("a", TensorMeta(DType.FLOAT32, (2,)))
    b = g.add_input("b", TensorMeta(DType.INT64, (2,)))
    with pytest.raises(ShapeError, match="int64, expected float32"):
        ops.infer_node(g.add_node("Mul", [a, b], name="mixed"))


def test_run_node_wraps_kernel_failures() -> None:
    g = Graph()
    x = g.add_input("x", TensorMeta(DType.FLOAT32, (2, 3)))
    shape = g.add_constant("s", np.array([7], np.int64))
    node = g.add_node("Reshape", [x, shape], name="r")
    # data that does not fit the op is the caller's error, named with what the node got
    with pytest.raises(InvalidInput, match=r"node 'r' \(Reshape\).*float32\[2,3\], int64\[1\]"):
        ops.run_node(node, [np.zeros((2, 3), np.float32), np.array([7], np.int64)])


def test_run_node_reports_a_kernel_of_its_own_failing(monkeypatch) -> None:
    g = Graph()
    x = g.add_input("x", TensorMeta(DType.FLOAT32, (2, 3)))
    node = g.add_node("Relu", [x], name="relu")

    def broken(ins, attrs):
        raise RuntimeError("kernel bug")

    import dataclasses

    from graphengine.engine.ops import registry

    schema = ops.get("Relu")
    monkeypatch.setitem(registry._REGISTRY, "Relu", dataclasses.replace(schema, compute=broken))
    with pytest.raises(ExecutionError, match="node 'relu' \\(Relu\\) failed: RuntimeError"):
        ops.run_node(node, [np.zeros((2, 3), np.float32)])


def test_unknown_rank_propagates() -> None:
    g = Graph()
    x = g.add_input("x", TensorMeta(DType.FLOAT32, None))
    y = g.add_input("y", TensorMeta(DType.FLOAT32, (3,)))
    for op, ins in (("Relu", [x]), ("Add", [x, y]), ("Softmax", [x])):
        (meta,) = ops.infer_node(g.add_node(op, ins))
        assert meta == TensorMeta(DType.FLOAT32, None)


def test_value_propagation_through_shape_chain() -> None:
    """Reshape(x, Concat(Shape(x)[0], [-1])) keeps the batch symbol without folding."""
    g = Graph()
    x = g.add_input("x", TensorMeta(DType.FLOAT32, ("batch", 4, 5)))
    shape = g.add_node("Shape", [x]).outputs[0]
    idx = g.add_constant("i0", np.array([0], np.int64))
    first = g.add_node("Gather", [shape, idx], attrs={"axis": 0}).outputs[0]
    minus = g.add_constant("m1", np.array([-1], np.int64))
    target = g.add_node("Concat", [first, minus], attrs={"axis": 0}).outputs[0]
    reshape = g.add_node("Reshape", [x, target])
    for node in g.nodes:
        for value, meta in zip(node.outputs, ops.infer_node(node)):
            value.meta = meta
    assert reshape.outputs[0].meta == TensorMeta(DType.FLOAT32, ("batch", 20))


_SYM = np.array(["batch", 40, 64], dtype=object)
_INT = np.array([2, 40, 64, 8], np.int64)


@pytest.mark.parametrize("op, ins, attrs", [
    ("Gather", [_INT, np.array(1, np.int64)], {"axis": 0}),
    ("Gather", [_INT, np.array(-1, np.int64)], {}),
    ("Gather", [_INT, np.array([3, 0, -2], np.int64)], {"axis": -1}),
    ("Gather", [_SYM, np.array(0, np.int64)], {"axis": 0}),
    ("Gather", [_SYM, np.array([0, 2], np.int64)], {"axis": 0}),
    ("Unsqueeze", [np.array(7, np.int64), np.array([0], np.int64)], {}),
    ("Unsqueeze", [np.array(7, np.int64), np.array([-1], np.int64)], {}),
    ("Unsqueeze", [np.array("batch", dtype=object), np.array([0], np.int64)], {}),
    ("Concat", [_INT[:2], np.array([-1], np.int64)], {"axis": 0}),
    ("Concat", [_SYM[:1], np.array([5], dtype=object), _SYM[1:]], {"axis": -1}),
])
def test_value_propagation_shortcuts_give_the_kernels_values(op, ins, attrs) -> None:
    """A shape chain's Gather / Unsqueeze / Concat steps are taken without run_node
    (value_prop._FAST); for each form they take, the same dtype, shape and values."""
    from graphengine.engine.ops import value_prop

    g = Graph()
    values = [g.add_constant(f"i{k}", x) for k, x in enumerate(ins)]
    node = g.add_node(op, values, attrs=attrs)
    fast = value_prop._FAST[op](node, list(ins))
    assert fast is not None
    want = ops.run_node(node, list(ins))[0]
    if want.dtype.kind in "US":  # value propagation keeps symbols as objects (_derive)
        want = want.astype(object)
    assert fast.dtype == want.dtype and fast.shape == want.shape
    assert fast.tolist() == want.tolist()


@pytest.mark.parametrize("op, ins, attrs", [
    ("Gather", [_INT, np.array(4, np.int64)], {"axis": 0}),  # out of range: unknown
    ("Gather", [_INT.reshape(2, 2), np.array(0, np.int64)], {"axis": 0}),  # not a vector
    ("Unsqueeze", [_INT, np.array([0], np.int64)], {}),  # not a scalar
    ("Concat", [_INT, _INT.astype(np.int32)], {"axis": 0}),  # two dtypes
])
def test_value_propagation_shortcuts_leave_other_forms_to_the_kernels(op, ins, attrs) -> None:
    from graphengine.engine.ops import value_prop

    g = Graph()
    values = [g.add_constant(f"i{k}", x) for k, x in enumerate(ins)]
    assert value_prop._FAST[op](g.add_node(op, values, attrs=attrs), list(ins)) is None


@pytest.mark.parametrize("op, x, arg, attrs, want", [
    ("ReduceL2", np.arange(6, dtype=np.float32).reshape(3, 2), np.int64(0), {"keepdims": 1},
     lambda x: np.sqrt((x * x).sum(0, keepdims=True))),
    ("ReduceSum", np.arange(6, dtype=np.float32).reshape(3, 2), np.int64(-1), {"keepdims": 0},
     lambda x: x.sum(-1)),
    ("Tile", np.arange(3, dtype=np.float32), np.int64(2), {}, lambda x: np.tile(x, 2)),
    ("Expand", np.arange(1, dtype=np.float32), np.int64(4), {}, lambda x: np.repeat(x, 4)),
    ("Reshape", np.arange(6, dtype=np.float32).reshape(2, 3), np.int64(-1), {},
     lambda x: x.reshape(-1)),
])
def test_int_inputs_given_as_0d_tensors_run_as_one_entry(op, x, arg, attrs, want):
    """A 0-d axes/repeats/shape tensor: shape inference reads it flattened (one entry), and
    the kernels now do too; the kernels iterated it and failed with a TypeError that a run
    reported as INTERNAL (found by the fuzz harness: a GraphDef constant with no shape)."""
    g = import_onnx(make_model(op, [("x", x), ("k", np.asarray(arg))], attrs, consts=("k",)))
    infer_graph(g)
    (got,) = run_graph(g, {"x": x})
    np.testing.assert_allclose(got, want(x), rtol=1e-6)
    assert_matches_meta(g.outputs[0].meta, got)


def hostile_detections(rng: np.random.Generator, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Boxes [2, n, 4] and scores [2, 3, n] for NonMaxSuppression with what a detector does
    not give: NaN coordinates and scores, -inf scores, ties (scores rounded to 0.1)."""
    boxes = rng.uniform(0, 20, (2, n, 4)).astype(np.float32)
    scores = np.round(rng.uniform(-1, 1, (2, 3, n)), 1).astype(np.float32)
    boxes.reshape(-1)[rng.integers(0, boxes.size, 3)] = np.nan
    scores.reshape(-1)[rng.integers(0, scores.size, 4)] = np.nan
    scores.reshape(-1)[rng.integers(0, scores.size, 2)] = -np.inf
    return boxes, scores
