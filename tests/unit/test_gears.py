"""Gears: padded runs are right only where every output follows the inputs' batch."""

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import graphengine
from graphengine.engine.errors import InvalidInput

W = np.random.default_rng(0).standard_normal((8, 4)).astype(np.float32)


def _model(in_dim, out_dims, nodes=None, opset=17, ir=8, outputs=("y",)):
    """x[in_dim, 8] @ W -> Relu -> y, declared with the given dims (strings, ints or -1)."""
    nodes = nodes or [helper.make_node("MatMul", ["x", "w"], ["m"]),
                      helper.make_node("Relu", ["m"], ["y"])]
    graph = helper.make_graph(
        nodes, "geared", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [in_dim, 8])],
        [helper.make_tensor_value_info(o, TensorProto.FLOAT, d) for o, d in zip(outputs,
                                                                                  out_dims)],
        [numpy_helper.from_array(W, "w")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)],
                             ir_version=ir)


def _ort(model, x):
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, {"x": x})


@pytest.mark.parametrize("in_dim,out_dim", [
    ("unk__214", "unk__215"),  # tf2onnx names the outputs' batch apart from the inputs'
    ("unk__214", "N"),
    ("batch", None),           # no declared output shape at all
])
def test_outputs_declared_with_another_batch_name_are_sliced(in_dim, out_dim):
    model = _model(in_dim, [[out_dim, 4]] if out_dim else [None])
    x = np.random.default_rng(1).standard_normal((3, 8)).astype(np.float32)
    with graphengine.Session() as sess:
        gid = sess.add_graph(model, gears=[1, 4])
        info = sess.graph_info(gid)
        assert info.outputs[0].shape == (in_dim, 4)  # the inferred shape, not the declared
        out = sess.run_graph(gid, {"x": x})["y"]
    assert out.shape == (3, 4)  # 3 rows, not the gear's 4 with a padded one
    np.testing.assert_allclose(out, _ort(model, x)[0], rtol=1e-5, atol=1e-6)


def test_negative_dim_values_are_read_as_symbols():
    model = _model(-1, [[-1, 4]], opset=11, ir=6)  # keras2onnx / old tf2onnx wrote -1
    x = np.random.default_rng(2).standard_normal((3, 8)).astype(np.float32)
    with graphengine.Session() as sess:
        gid = sess.add_graph(model, gears=[1, 4])
        dim = sess.graph_info(gid).inputs[0].shape[0]
        assert isinstance(dim, str)
        assert sess.graph_info(gid).outputs[0].shape == (dim, 4)
        out = sess.run_graph(gid, {"x": x})["y"]
        plain = sess.add_graph(model)
        np.testing.assert_allclose(sess.run_graph(plain, {"x": x[:2]})["y"],
                                   _ort(model, x[:2])[0], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(out, _ort(model, x)[0], rtol=1e-5, atol=1e-6)


def test_gears_are_refused_when_an_output_does_not_follow_the_batch():
    # y = ReduceSum over the batch: a padded row would be summed in, so no gears
    nodes = [helper.make_node("MatMul", ["x", "w"], ["y"]),
             helper.make_node("ReduceSum", ["y", "axes"], ["s"], keepdims=0)]
    model = _model("n", [["n", 4], [4]], nodes=nodes, outputs=("y", "s"))
    model.graph.initializer.append(numpy_helper.from_array(np.array([0], np.int64), "axes"))
    with graphengine.Session() as sess:
        with pytest.raises(InvalidInput, match=r"output 's' has shape \[4\].*batch 'n'"):
            sess.add_graph(model, gears=[1, 4])
        gid = sess.add_graph(model)  # without gears it runs, one signature per batch
        x = np.ones((3, 8), np.float32)
        np.testing.assert_allclose(sess.run_graph(gid, {"x": x})["s"], _ort(model, x)[1],
                                   rtol=1e-5)


def test_gears_are_refused_when_the_batch_moves_off_the_first_axis():
    nodes = [helper.make_node("MatMul", ["x", "w"], ["m"]),
             helper.make_node("Transpose", ["m"], ["y"], perm=[1, 0])]
    model = _model("n", [[4, "n"]], nodes=nodes)
    with graphengine.Session() as sess, pytest.raises(InvalidInput, match="output 'y'"):
        sess.add_graph(model, gears=[2, 4])


def test_inputs_naming_their_batch_apart_share_it_under_gears():
    # tf2onnx: x[unk__156, 8] and z[unk__157, 4], y = Relu(x @ W) + z
    nodes = [helper.make_node("MatMul", ["x", "w"], ["m"]),
             helper.make_node("Relu", ["m"], ["r"]),
             helper.make_node("Add", ["r", "z"], ["y"])]
    model = _model("unk__156", [["unk__158", 4]], nodes=nodes)
    model.graph.input.append(helper.make_tensor_value_info("z", TensorProto.FLOAT,
                                                           ["unk__157", 4]))
    rng = np.random.default_rng(3)
    x = rng.standard_normal((3, 8)).astype(np.float32)
    z = rng.standard_normal((3, 4)).astype(np.float32)
    sess_ort = ort.InferenceSession(model.SerializeToString(),
                                    providers=["CPUExecutionProvider"])
    with graphengine.Session() as sess:
        gid = sess.add_graph(model, gears=[1, 4])
        assert sess.graph_info(gid).outputs[0].shape == ("unk__156", 4)
        out = sess.run_graph(gid, {"x": x, "z": z})["y"]
        with pytest.raises(InvalidInput, match="same batch"):
            sess.run_graph(gid, {"x": x, "z": z[:2]})
        plain = sess.add_graph(model)  # without gears the inputs keep their own symbols
        assert [i.shape[0] for i in sess.graph_info(plain).inputs] == ["unk__156", "unk__157"]
    np.testing.assert_allclose(out, sess_ort.run(None, {"x": x, "z": z})[0], rtol=1e-5,
                               atol=1e-6)
