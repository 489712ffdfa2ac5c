"""graphengine.Graph and graphengine.ops: graphs built op by op, shapes known as they are
built, wrong calls refused at the call, and the graphs run in a Session like imported ones."""

from __future__ import annotations

import inspect

import numpy as np
import pytest

import graphengine
from graphengine import ops
from graphengine.engine.builder import OpCallError
from graphengine.engine.errors import InvalidGraph, InvalidModel, ShapeError
from graphengine.engine.importers import import_graphdef, load_model, saved_graphdef
from tests import builder_models


@pytest.mark.parametrize("make", [builder_models.mlp, builder_models.basic_block])
def test_built_models_match_numpy_in_process(make) -> None:
    graph, inputs, reference = make(np.random.default_rng(1))
    with graphengine.Session() as session:
        gid = session.add_graph(graph)
        (out,) = session.run_graph(gid, inputs).values()
    np.testing.assert_allclose(out, reference(inputs["x"]), rtol=1e-4, atol=1e-5)


def test_shapes_and_dtypes_are_inferred_while_building() -> None:
    g = graphengine.Graph("shapes")
    x = g.input("x", "float32", ("batch", 3, 32, 32))
    y = ops.Conv(x, np.zeros((8, 3, 3, 3), np.float32), strides=[2, 2], pads=[1, 1, 1, 1])
    assert y.shape == ("batch", 8, 16, 16) and y.dtype == np.float32
    pooled = ops.GlobalAveragePool(y)
    assert pooled.shape == ("batch", 8, 1, 1)
    flat = ops.Flatten(pooled)
    assert flat.shape[1] == 8
    ids = ops.ArgMax(flat, axis=1, keepdims=0)
    assert ids.dtype == np.int64 and ids.shape == ("batch",)
    half = g.input("h", np.float16, (4,))
    assert (half * 2.0).dtype == np.float16  # a Python number takes its partner's dtype
    assert (ops.Cast(half, to=1)).dtype == np.float32


def test_unknown_attribute_fails_at_the_call_naming_the_op() -> None:
    g = graphengine.Graph("bad")
    x = g.input("x", "float32", (2, 4))
    with pytest.raises(OpCallError, match=r"ops\.Softmax\(\): Softmax has no attribute "
                                          r"'axes' \(its attributes: axis\)"):
        ops.Softmax(x, axes=1)
    with pytest.raises(TypeError, match="Softmax"):  # it is also Python's TypeError
        ops.Softmax(x, axes=1)
    with pytest.raises(InvalidGraph, match=r"ops\.Softmax\(\): attribute 'axis' of Softmax "
                                           r"must be int"):
        ops.Softmax(x, axis="last")
    with pytest.raises(InvalidGraph, match=r"attribute 'mode' of Pad is 'mirror', expected "
                                           r"one of"):
        ops.Pad(x, np.array([0, 1, 0, 1]), mode="mirror")
    assert len(g.nodes) == 0  # nothing of a refused call stays in the graph


def test_wrong_arity_fails_at_the_call_naming_the_op() -> None:
    g = graphengine.Graph("arity")
    x = g.input("x", "float32", (2, 4))
    with pytest.raises(OpCallError, match=r"ops\.Relu\(\): Relu takes 1 inputs, got 2"):
        ops.Relu(x, x)
    with pytest.raises(OpCallError, match=r"ops\.Gemm\(\): Gemm takes 2 to 3 inputs, got 1"):
        ops.Gemm(x)
    with pytest.raises(OpCallError, match=r"ops\.Relu\(\): no input is a Tensor"):
        ops.Relu(np.ones(3, np.float32))


def test_inputs_that_do_not_fit_fail_at_the_call_and_leave_the_graph_as_it_was() -> None:
    g = graphengine.Graph("fit")
    x = g.input("x", "float32", (2, 4))
    before = dict(g._ir.values)
    with pytest.raises(ShapeError, match="MatMul"):
        ops.MatMul(x, np.ones((5, 3), np.float32))
    assert dict(g._ir.values) == before and g.nodes == []
    other = graphengine.Graph("other").input("y", "float32", (2, 4))
    with pytest.raises(InvalidGraph, match="belongs to graph 'other'"):
        ops.Add(x, other)


def test_signatures_and_docstrings_come_from_the_registry() -> None:
    sig = inspect.signature(ops.Conv)
    params = list(sig.parameters.values())
    assert [p.name for p in params[:3]] == ["X", "W", "B"]
    assert params[2].default is None and params[0].kind is inspect.Parameter.POSITIONAL_ONLY
    assert sig.parameters["auto_pad"].default == "NOTSET"
    assert sig.parameters["auto_pad"].kind is inspect.Parameter.KEYWORD_ONLY
    assert "Attributes:" in ops.Conv.__doc__ and "pads (ints)" in ops.Conv.__doc__
    assert inspect.signature(ops.Concat).parameters["inputs"].kind is \
        inspect.Parameter.VAR_POSITIONAL
    assert "Relu" in dir(ops) and "Conv" in dir(ops)
    assert ops.op("ai.onnx.ml.Scaler").op_type == "ai.onnx.ml.Scaler"
    with pytest.raises(AttributeError, match="no op 'NoSuchOp'"):
        ops.NoSuchOp  # noqa: B018


def test_several_outputs_and_names() -> None:
    g = graphengine.Graph("split")
    x = g.input("x", "float32", (6, 2))
    a, b, c = ops.Split(x, num_outputs=3, axis=0)
    assert a.shape == (2, 2) and c.name.endswith(".2")
    values, indices = ops.TopK(x, np.array([1]), axis=1, name="top")
    assert indices.dtype == np.int64 and values.shape == (6, 1)
    g.output(b, name="middle")
    g.output(values)
    g.output(x, name="same")  # an input is passed through an Identity
    with pytest.raises(InvalidGraph, match="already has a tensor named 'middle'"):
        g.output(c, name="middle")
    with graphengine.Session() as s:
        out = s.run_graph(s.add_graph(g), {"x": np.arange(12, dtype=np.float32).reshape(6, 2)})
    np.testing.assert_array_equal(out["middle"], [[4, 5], [6, 7]])
    np.testing.assert_array_equal(out["same"].ravel(), np.arange(12))
    np.testing.assert_array_equal(out[values.name].ravel(), np.arange(1, 12, 2))


def test_bad_inputs_and_names_are_refused() -> None:
    g = graphengine.Graph("bounds")
    with pytest.raises(InvalidGraph, match="dim 0 is -1"):
        g.input("x", "float32", (-1,))
    with pytest.raises(InvalidGraph, match="more than 32 dims"):
        g.input("x", "float32", (1,) * 33)
    with pytest.raises(InvalidGraph, match="not a dtype"):
        g.input("x", "complex-ish", (1,))
    with pytest.raises(InvalidGraph, match="at most 4096"):
        g.input("x" * 5000, "float32", (1,))
    x = g.input("x", "float32", (1,))
    with pytest.raises(InvalidGraph, match="already has a tensor named 'x'"):
        g.input("x", "float32", (1,))
    with pytest.raises(InvalidGraph, match="not a numeric array"):
        g.constant(["a", "b"])
    with pytest.raises(OpCallError, match="outputs= must be"):
        ops.Relu(x, outputs="y")
    with pytest.raises(InvalidGraph, match="no outputs"):
        g.to_ir()


def test_graphdef_and_files_round_trip(tmp_path) -> None:
    graph, inputs, reference = builder_models.mlp(np.random.default_rng(2))
    gd = graph.to_graphdef()
    assert [d.name for d in gd.outputs] == ["probs"] and gd.inputs[0].name == "x"
    back, ir = import_graphdef(gd), graph.to_ir()
    assert [(n.name, n.op_type, n.attrs) for n in back.nodes] == \
        [(n.name, n.op_type, n.attrs) for n in ir.nodes]
    with graphengine.Session() as s:
        for path in (tmp_path / "mlp.graphdef", tmp_path / "mlp.pbtxt"):
            graph.save(path)
            gid = s.add_graph(str(path))
            np.testing.assert_allclose(s.run_graph(gid, inputs)["probs"],
                                       reference(inputs["x"]), rtol=1e-4, atol=1e-6)
    data = gd.SerializeToString(deterministic=True)
    assert saved_graphdef(data) is not None
    assert saved_graphdef(data + b"\x0a\x01x") is None  # a second name: not what we wrote
    assert saved_graphdef(b"\x08\x07" + data) is None  # an ONNX model's first field
    with pytest.raises(InvalidModel):
        load_model(b"\x0a\x03abc" * 3)


def test_the_session_gets_a_copy() -> None:
    g = graphengine.Graph("copy")
    x = g.input("x", "float32", (2,))
    g.output(ops.Relu(x))
    ir = load_model(g, name="renamed")
    ops.Neg(x)  # building on does not change what was added
    assert ir.name == "renamed" and len(ir.nodes) == 1 and len(g.nodes) == 2
