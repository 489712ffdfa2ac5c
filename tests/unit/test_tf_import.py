"""The TensorFlow importer around the ops: telling the formats apart, inputs and outputs,
the errors (every number from the file bounded, every message naming the node), the CLI,
the model repository and the remote session."""

from __future__ import annotations

import pathlib

import numpy as np
import pytest

import graphengine
from graphengine.cli import commands as cli
from graphengine.engine.errors import InvalidModel
from graphengine.engine.importers import import_tf, load_model, model_format
from graphengine.server.core.repository import scan
from graphengine.tensorflow import graph_def_pb2 as tfpb
from tests import zoo
from tests.unit.tf_graphs import TfGraph, conv_nhwc

RNG = np.random.default_rng(3)
F = RNG.standard_normal((3, 3, 3, 4)).astype(np.float32)
B = RNG.standard_normal(4).astype(np.float32)


def small_cnn(batch: int = -1) -> TfGraph:
    """conv -> bias -> relu, as Keras freezes it: Identity outputs and a NoOp with control
    inputs, and a Const nothing reads."""
    g = TfGraph()
    g.placeholder("x", [batch, 8, 8, 3])
    g.const("f", F)
    g.const("b", B)
    g.const("unused", [1.0, 2.0])
    g.node("Conv2D", "conv", ["x", "f"], strides=[1, 1, 1, 1], padding="SAME")
    g.node("BiasAdd", "bias", ["conv", "b"])
    g.node("Relu", "relu", ["bias"])
    g.node("NoOp", "NoOp", ["^f", "^b"])
    g.node("Identity", "y", ["relu", "^NoOp"])
    return g


def reference(x: np.ndarray) -> np.ndarray:
    return np.maximum(conv_nhwc(x, F, pads=((1, 1), (1, 1))) + B, 0)


def test_a_pb_file_path_bytes_and_message_import_alike(tmp_path: pathlib.Path) -> None:
    g = small_cnn()
    path = tmp_path / "cnn.pb"
    path.write_bytes(g.bytes())
    assert model_format(str(path)) == "tf" and model_format(g.bytes()) == "tf"
    x = RNG.standard_normal((2, 8, 8, 3)).astype(np.float32)
    with graphengine.Session() as sess:
        for model in (str(path), g.bytes(), g.gd):
            gid = sess.add_graph(model)
            info = sess.graph_info(gid)
            assert [t.name for t in info.inputs] == ["x"]
            assert info.inputs[0].shape == ("x_d0", 8, 8, 3)
            assert [t.name for t in info.outputs] == ["y"]
            np.testing.assert_allclose(sess.run_graph(gid, {"x": x})["y"], reference(x),
                                       rtol=1e-4, atol=1e-4)
    assert load_model(str(path)).name == "cnn"


@pytest.mark.parametrize("data", [b"hello, world\n", b"", b"\x0a\x09short"])
def test_neither_onnx_nor_graphdef_says_so(tmp_path: pathlib.Path, data: bytes) -> None:
    path = tmp_path / "model.pb"
    path.write_bytes(data)
    with pytest.raises(InvalidModel, match="'model.pb' is not an ONNX model or TensorFlow "
                                           "GraphDef"):
        load_model(str(path))
    with graphengine.Session() as sess, pytest.raises(
            InvalidModel, match="bytes are not an ONNX model or TensorFlow GraphDef"):
        sess.add_graph(data)


def test_an_onnx_model_is_still_onnx() -> None:
    model = zoo.mlp(sizes=(4, 8, 2))
    assert model_format(model.SerializeToString()) == "onnx"
    assert [v.name for v in load_model(model.SerializeToString()).inputs] == ["input"]


def test_every_unsupported_op_is_named_once() -> None:
    g = small_cnn()
    g.node("Unique", "u1", ["y"])
    g.node("Unique", "u2", ["y"])
    g.node("Bucketize", "bk", ["x"])
    with pytest.raises(InvalidModel) as err:
        import_tf(g.gd)
    text = str(err.value)
    assert "2 unsupported op types: Bucketize (node 'bk'); Unique (nodes 'u1', 'u2')" in text
    # Asking only for outputs that do not depend on them imports the rest.
    graph = import_tf(g.gd, outputs=["y"])
    assert [v.name for v in graph.outputs] == ["y"]


def test_default_outputs_skip_noop_const_and_unread_placeholders() -> None:
    g = small_cnn()
    g.placeholder("unused_input", [3])
    graph = import_tf(g.gd)
    assert [v.name for v in graph.outputs] == ["y"]
    assert [v.name for v in graph.inputs] == ["x"]


def test_outputs_by_name_and_output_index() -> None:
    g = small_cnn()
    g.node("Split", "split", [g.const("axis", 0, np.int32), "x"], num_split=2)
    graph = import_tf(g.gd, outputs=["relu", "conv:0"])
    assert [v.name for v in graph.outputs] == ["relu", "conv"]
    with pytest.raises(InvalidModel, match="output 'nothing' names no node"):
        import_tf(g.gd, outputs=["nothing"])


def test_input_shapes_override_placeholders() -> None:
    g = small_cnn()
    graph = import_tf(g.gd, input_shapes={"x": (1, 16, 16, 3)})
    assert graph.inputs[0].meta.shape == (1, 16, 16, 3)
    assert import_tf(g.gd, input_shapes={"x": (-1, 4, 4, 3)}).inputs[0].meta.shape == \
        ("x_d0", 4, 4, 3)
    with pytest.raises(InvalidModel, match="rank 2"):
        import_tf(g.gd, input_shapes={"x": (1, 3)})
    with pytest.raises(InvalidModel, match=r"input shapes name \['z'\]"):
        import_tf(g.gd, input_shapes={"z": (1,)})


def test_unknown_rank_placeholder_has_no_shape() -> None:
    g = TfGraph()
    g.placeholder("x", None)
    g.node("Relu", "y", ["x"])
    assert import_tf(g.gd).inputs[0].meta.shape is None


def _with_const(t: tfpb.TensorProto) -> TfGraph:
    g = TfGraph()
    g.placeholder("x", [2, 3])
    nd = g.gd.node.add(name="w", op="Const")
    nd.attr["value"].tensor.CopyFrom(t)
    nd.attr["dtype"].type = t.dtype
    g.node("AddV2", "y", ["x", "w"])
    return g


def _proto(dtype: int, shape, **fields) -> tfpb.TensorProto:
    t = tfpb.TensorProto(dtype=dtype, **fields)
    t.tensor_shape.dim.extend(tfpb.TensorShapeProto.Dim(size=d) for d in shape)
    return t


@pytest.mark.parametrize("t,message", [
    (_proto(1, [2, 3], tensor_content=b"\0" * 20), "needs 24 bytes, the request carries 20"),
    (_proto(1, [2, -3]), "dimension below -1"),
    (_proto(1, [2, 3], float_val=[1.0] * 7), "holds 6 values, the tensor gives 7"),
    (_proto(1, [1 << 20, 1 << 10], float_val=[1.0]), "at most 67108864 elements"),
    (_proto(4, [2, 3], int_val=[300]), "outside the range of uint8"),
    (_proto(7, [1]), "dtype DT_STRING, which has no counterpart"),
    (_proto(1, [1] * 40), "rank 40 exceeds the bound of 32"),
])
def test_constants_are_bounded_by_what_the_file_holds(t, message: str) -> None:
    with pytest.raises(InvalidModel, match=message) as err:
        import_tf(_with_const(t).gd)
    assert "'w'" in str(err.value)


def test_a_short_value_list_fills_the_shape_as_tensorflow_does() -> None:
    g = _with_const(_proto(1, [2, 3], float_val=[1.0, 2.0]))
    x = np.zeros((2, 3), np.float32)
    with graphengine.Session() as sess:
        got = sess.run_graph(sess.add_graph(g.gd), {"x": x})["y"]
    np.testing.assert_array_equal(got, [[1, 2, 2], [2, 2, 2]])


def test_graph_errors_name_the_node() -> None:
    g = small_cnn()
    g.node("Relu", "reader", ["ghost:0"])
    with pytest.raises(InvalidModel, match="node 'reader' \\(Relu\\): reads 'ghost'"):
        import_tf(g.gd)
    loop = TfGraph()
    loop.node("Relu", "a", ["b"])
    loop.node("Relu", "b", ["a"])
    loop.node("Identity", "out", ["a"])
    with pytest.raises(InvalidModel, match="cycle"):
        import_tf(loop.gd)
    bn = TfGraph()
    bn.placeholder("x", [1, 2, 2, 1])
    for name in ("s", "o", "m", "v"):
        bn.const(name, [1.0])
    bn.node("FusedBatchNormV3", "bn", ["x", "s", "o", "m", "v"], is_training=True)
    with pytest.raises(InvalidModel, match="node 'bn' .*is_training is set"):
        import_tf(bn.gd)
    strided = small_cnn()
    strided.gd.node[4].attr["strides"].list.i[:] = [1, 1, 1, 0]
    with pytest.raises(InvalidModel, match="node 'conv' .*strides"):
        import_tf(strided.gd)


def test_layout_handling_leaves_one_transpose() -> None:
    """Three convolutions with per-channel arithmetic between: NCHW throughout, one
    Transpose after the input (a view for the layout pass); the naive form converts each
    result back to NHWC."""
    g = TfGraph()
    g.placeholder("x", [1, 8, 8, 3])
    prev = "x"
    for k, cin in enumerate((3, 4, 4)):
        g.const(f"f{k}", RNG.standard_normal((3, 3, cin, 4)).astype(np.float32))
        g.node("Conv2D", f"c{k}", [prev, f"f{k}"], strides=[1, 1, 1, 1], padding="SAME")
        g.node("Mul", f"m{k}", [f"c{k}", g.const(f"s{k}", np.ones(4) * 0.5)])
        prev = g.node("Relu6", f"r{k}", [f"m{k}"])
    tracked, naive = import_tf(g.gd), import_tf(g.gd, keep_nchw=False)
    count = [sum(n.op_type == "Transpose" for n in gr.nodes) for gr in (tracked, naive)]
    assert count == [2, 6]  # the input's and the output's; naive: two per convolution
    x = RNG.standard_normal((1, 8, 8, 3)).astype(np.float32)
    with graphengine.Session() as sess:
        a = sess.run_graph(sess.add_graph(tracked), {"x": x})["r2"]
        b = sess.run_graph(sess.add_graph(naive), {"x": x})["r2"]
    np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)


def test_cli_compiles_a_pb_with_input_shapes_and_outputs(
        tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]) -> None:
    pb, out = tmp_path / "cnn.pb", tmp_path / "cnn.om"
    pb.write_bytes(small_cnn().bytes())
    code = cli.main(["compile", str(pb), "-o", str(out), "--input-shape", "x:2,8,8,3",
                     "--outputs", "relu,conv"])
    assert code == 0, capsys.readouterr().err
    x = RNG.standard_normal((2, 8, 8, 3)).astype(np.float32)
    with graphengine.Session() as sess:
        got = sess.run_graph(sess.add_graph(out.read_bytes()), {"x": x})
    assert sorted(got) == ["conv", "relu"]
    np.testing.assert_allclose(got["relu"], reference(x), rtol=1e-4, atol=1e-4)
    capsys.readouterr()
    code = cli.main(["compile", str(pb), "-o", str(out), "--input-shape", "z:1"])
    assert code == 2 and "input shapes name ['z']" in capsys.readouterr().err


def test_the_repository_serves_pb_files(tmp_path: pathlib.Path) -> None:
    (tmp_path / "cnn.pb").write_bytes(small_cnn(batch=1).bytes())
    sources, problems = scan(str(tmp_path))
    assert list(sources) == ["cnn"] and not problems


def test_the_remote_session_sends_a_pb(server: str, tmp_path: pathlib.Path) -> None:
    path = tmp_path / "cnn.pb"
    path.write_bytes(small_cnn().bytes())
    x = RNG.standard_normal((1, 8, 8, 3)).astype(np.float32)
    with graphengine.Client(server, timeout=60) as client, client.session() as sess:
        for model in (str(path), small_cnn().gd):
            got = sess.run_graph(sess.add_graph(model), {"x": x})["y"]
            np.testing.assert_allclose(got, reference(x), rtol=1e-4, atol=1e-4)
