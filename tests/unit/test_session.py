"""The in-process API: graphengine.Session, as embedded users call it."""

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

import graphengine
from graphengine.engine.errors import (
    ErrorCode,
    GraphEngineError,
    InvalidGraph,
    InvalidInput,
    InvalidModel,
    NotFound,
    ResourceExhausted,
)
from tests import zoo


def tiny(nodes, inputs=(("x", [2, 3]),), outputs=(("y", [2, 3]),), inits=()):
    graph = helper.make_graph(
        nodes, "tiny",
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in inputs],
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in outputs],
        list(inits))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def test_session_flow_matches_onnxruntime(tmp_path):
    model = zoo.mlp(sizes=(32, 64, 10))
    path = tmp_path / "mlp.onnx"
    onnx.save(model, path)
    x = zoo.random_inputs(model, seed=3)
    ref = ort.InferenceSession(str(path)).run(None, x)[0]
    with graphengine.Session() as sess:
        gid = sess.add_graph(str(path))
        report = sess.compile_graph(gid)
        assert report.partitions and report.passes
        out = sess.run_graph(gid, x)
        info = sess.graph_info(gid)
        assert info.compiled and info.inputs[0].name == "input"
        np.testing.assert_allclose(out[info.outputs[0].name], ref, rtol=1e-4, atol=1e-5)
        sess.remove_graph(gid)
        with pytest.raises(NotFound, match=f"graph {gid} not found"):
            sess.run_graph(gid, x)


def test_bytes_and_symbolic_batch():
    model = zoo.mlp(sizes=(8, 16, 4), symbolic_batch=True)
    with graphengine.Session() as sess:
        gid = sess.add_graph(model.SerializeToString())
        sess.compile_graph(gid)  # symbolic: validated now, compiled per signature on run
        ref = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
        rng = np.random.default_rng(2)
        for batch in (1, 3, 3, 7, 1, 3):  # repeats take the last-signature shortcut
            x = rng.standard_normal((batch, 8)).astype(np.float32)
            (out,) = sess.run_graph(gid, {"input": x}).values()
            assert out.shape == (batch, 4)
            np.testing.assert_allclose(out, ref.run(None, {"input": x})[0], rtol=1e-5,
                                       atol=1e-6)
        assert sess.graph_info(gid).compiled_signatures == 3  # one compile per signature


@pytest.mark.parametrize("nodes, match", [
    ([helper.make_node("Relu", ["y"], ["z"], name="a"),
      helper.make_node("Relu", ["z"], ["y"], name="b")], "cycle"),
    ([helper.make_node("FancyOp", ["x"], ["y"], name="fancy")], "fancy.*unknown op type"),
    ([helper.make_node("Add", ["x", "nowhere"], ["y"], name="adder")], "adder.*nowhere"),
])
def test_malformed_graphs_name_the_node(nodes, match):
    with graphengine.Session() as sess:
        with pytest.raises(InvalidGraph, match=match) as err:
            sess.add_graph(tiny(nodes))
        assert err.value.code is ErrorCode.INVALID_ARGUMENT


def test_not_a_model():
    with graphengine.Session() as sess, pytest.raises(InvalidModel, match="not an ONNX model"):
        sess.add_graph(b"\x00\x01garbage bytes")


def test_bad_runs_name_the_tensor_and_session_keeps_working():
    model = tiny([helper.make_node("Relu", ["x"], ["y"])])
    with graphengine.Session() as sess:
        gid = sess.add_graph(model)
        good = {"x": np.ones((2, 3), np.float32)}
        with pytest.raises(InvalidInput, match="missing input 'x'"):
            sess.run_graph(gid, {})
        with pytest.raises(InvalidInput, match=r"input 'x': expected shape float32\[2,3\]"):
            sess.run_graph(gid, {"x": np.ones((2, 4), np.float32)})
        with pytest.raises(InvalidInput, match="input 'x': expected dtype float32"):
            sess.run_graph(gid, {"x": np.ones((2, 3), np.float64)})
        with pytest.raises(NotFound):
            sess.run_graph(gid + 100, good)
        np.testing.assert_array_equal(sess.run_graph(gid, good)["y"], good["x"])


@pytest.mark.parametrize("inputs, words", [
    (None, "inputs must be a mapping of input name to array"),
    (7, "got int"), ("x", "got str"),
    ([np.ones((2, 3), np.float32)], "got list"),
    ({"x": [[1.0, 2.0, 3.0], [4.0]]}, "input 'x' is not an array"),
    ({"x": np.array([object()] * 6).reshape(2, 3)}, "input 'x': expected dtype float32"),
])
def test_requests_that_are_not_inputs_are_invalid_input(inputs, words):
    """Found by the fuzz harness: None, an int, or a ragged nested list as the request
    raised a raw TypeError/ValueError; they are the caller's error, before any run."""
    model = tiny([helper.make_node("Relu", ["x"], ["y"])])
    with graphengine.Session() as sess:
        gid = sess.add_graph(model)
        for _ in range(2):  # the second time after a good run: the fast path of its signature
            with pytest.raises(InvalidInput, match=words):
                sess.run_graph(gid, inputs)
            sess.run_graph(gid, {"x": np.ones((2, 3), np.float32)})


def test_gather_out_of_range_is_an_error_not_a_crash():
    data = helper.make_tensor("table", TensorProto.FLOAT, [4, 2], np.arange(8.0).tolist())
    graph = helper.make_graph(
        [helper.make_node("Gather", ["table", "idx"], ["y"], name="emb")], "gather",
        [helper.make_tensor_value_info("idx", TensorProto.INT64, [3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3, 2])], [data])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    with graphengine.Session() as sess:
        gid = sess.add_graph(model)
        ok = sess.run_graph(gid, {"idx": np.array([0, 3, -1])})["y"]
        np.testing.assert_array_equal(ok, np.array([[0, 1], [6, 7], [6, 7]], np.float32))
        with pytest.raises(GraphEngineError, match="emb") as err:
            sess.run_graph(gid, {"idx": np.array([0, 4, 1])})
        assert err.value.code is ErrorCode.INVALID_ARGUMENT
        assert sess.run_graph(gid, {"idx": np.array([1, 1, 1])})["y"].shape == (3, 2)


def test_memory_limit_is_checked_before_load():
    model = zoo.mlp(sizes=(256, 512, 10))
    with graphengine.Session({"memory_limit_bytes": 4096}) as sess:
        gid = sess.add_graph(model)
        with pytest.raises(ResourceExhausted, match=r"needs \d+ bytes.*4096 byte limit"):
            sess.compile_graph(gid)


def test_unknown_compile_option_is_rejected():
    with pytest.raises(InvalidInput, match="unknown compile option 'bogus'"):
        graphengine.Session({"options": {"bogus": "1"}})


def test_an_input_in_the_other_byte_order_runs_as_its_values():
    """A big-endian float32 array was refused with "expected dtype float32, got float32"."""
    model = tiny([helper.make_node("Relu", ["x"], ["y"])])
    x = np.array([[1, -2, 3], [-4, 5, -6]], ">f4")
    with graphengine.Session() as sess:
        gid = sess.add_graph(model)
        np.testing.assert_array_equal(sess.run_graph(gid, {"x": x})["y"], np.maximum(x, 0))
        with pytest.raises(InvalidInput, match="expected dtype float32, got float64"):
            sess.run_graph(gid, {"x": x.astype(">f8")})


def test_compile_shapes_bind_the_symbols_of_inputs_left_out():
    """compile_graph(gid, shapes) for some inputs: the others take their declared shapes with
    the symbols the given ones bind; one whose symbols stay free is named (a raw ValueError
    before: the CLI compiles for the shapes of an input file)."""
    graph = helper.make_graph(
        [helper.make_node("Add", ["x", "y"], ["s"]), helper.make_node("Mul", ["s", "z"], ["o"])],
        "syms", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["b", 3]),
                 helper.make_tensor_value_info("y", TensorProto.FLOAT, ["b", 3]),
                 helper.make_tensor_value_info("z", TensorProto.FLOAT, ["n", 3])],
        [helper.make_tensor_value_info("o", TensorProto.FLOAT, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    with graphengine.Session() as sess:
        gid = sess.add_graph(model)
        report = sess.compile_graph(gid, {"x": (2, 3), "z": (1, 3)})  # y bound to x's b
        assert report.nodes_after == 1  # Add, then Mul by the broadcast z: one EltwiseGraph
        with pytest.raises(InvalidInput, match="lacks input 'z' .*float32\\[n,3\\]"):
            sess.compile_graph(gid, {"x": (2, 3)})
        for shapes, words in (({"x": "23"}, "must be a list of dims"),
                              ({"x": (2.5, 3)}, "dim 2.5 is not an integer"),
                              ({"w": (1,)}, "names 'w', which is not an input")):
            with pytest.raises(InvalidInput, match=words):
                sess.compile_graph(gid, shapes)
        x = np.ones((2, 3), np.float32)
        out = sess.run_graph(gid, {"x": x, "y": x, "z": np.full((1, 3), 3, np.float32)})
        np.testing.assert_array_equal(out["o"], np.full((2, 3), 6, np.float32))
