"""Validation at the door: what is wrong with a model is refused when it is added, with a
message naming the node, attribute or tensor (never at its first run, never INTERNAL)."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

import graphengine
from graphengine.engine.errors import ErrorCode, GraphEngineError, InvalidGraph, InvalidModel
from graphengine.engine.importers import onnx_import

F = TensorProto.FLOAT


def _varint(n: int) -> bytes:
    out = b""
    while True:
        b, n = n & 0x7F, n >> 7
        out += bytes([b | 0x80]) if n else bytes([b])
        if not n:
            return out


def _field(num: int, payload: bytes | int) -> bytes:
    if isinstance(payload, int):  # a varint field
        return _varint(num << 3) + _varint(payload)
    return _varint(num << 3 | 2) + _varint(len(payload)) + payload


def _model_bytes(graph_body: bytes, opset: int = 17) -> bytes:
    """ModelProto bytes around a GraphProto body written by hand (so any bytes can be in its
    text fields), with input x[2] and output y."""
    body = (graph_body + _field(11, helper.make_tensor_value_info("x", F, [2]).SerializeToString())
            + _field(12, helper.make_tensor_value_info("y", F, None).SerializeToString()))
    head = helper.make_model(helper.make_graph([], "t", [], []), ir_version=8,
                             opset_imports=[helper.make_opsetid("", opset)])
    head.ClearField("graph")
    return head.SerializeToString() + _field(7, body)


def _node(op: bytes = b"Relu", name: bytes = b"", attrs: bytes = b"") -> bytes:
    return (_field(1, b"x") + _field(2, b"y") + (_field(3, name) if name else b"")
            + _field(4, op) + attrs)


def _add(model) -> None:
    with graphengine.Session() as sess:
        sess.add_graph(model)


def _refused(model, kind=InvalidModel, match: str = "") -> GraphEngineError:
    with pytest.raises(kind, match=match) as info:
        _add(model)
    assert info.value.code is ErrorCode.INVALID_ARGUMENT
    return info.value


@pytest.mark.parametrize("where,body", [
    ("graph name", _field(1, _node()) + _field(2, b"g\xff\xfe")),
    ("node name", _field(1, _node(name=b"n\xff"))),
    ("op type", _field(1, _node(op=b"Re\xfflu"))),
])
def test_text_that_is_not_utf8_is_refused_naming_the_field(where, body):
    err = _refused(_model_bytes(body), match="not UTF-8 text")
    assert "\\xff" in err.message


def test_text_the_importer_never_reads_is_not_walked():
    """An intermediate's value_info and a node's metadata are dropped at import (nothing
    reads them), so their text is not checked (a dynamo export writes tens of thousands of
    such messages); the graph's own inputs, which are read, still are."""
    unread = (_field(1, _node() + _field(9, _field(1, b"k\xff") + _field(2, b"v")))
              + _field(13, _field(1, b"y\xfe")))
    with graphengine.Session() as sess:
        gid = sess.add_graph(_model_bytes(unread))
        x = np.array([-1.0, 2.0], np.float32)
        np.testing.assert_array_equal(sess.run_graph(gid, {"x": x})["y"], [0.0, 2.0])
    read = _field(1, _node()) + _field(11, _field(1, b"z\xff"))
    _refused(_model_bytes(read), match="not UTF-8 text")


def test_an_attribute_that_is_not_utf8_is_refused_naming_node_and_attribute():
    attr = _field(5, _field(1, b"approximate") + _field(20, 3) + _field(4, b"\xff\xfe"))
    _refused(_model_bytes(_field(1, _node(b"Gelu", b"gelu", attr))), InvalidGraph,
             "node 'gelu' \\(Gelu\\): attribute 'approximate' is not UTF-8 text")


@pytest.mark.parametrize("op,attr,value,extra", [
    ("Gelu", "approximate", "bogus", {}),
    ("DepthToSpace", "mode", "RDC", {"blocksize": 2}),
    ("Resize", "mode", "bicubic-ish", {}),
    ("MaxPool", "auto_pad", "SAME", {"kernel_shape": [2, 2]}),
])
def test_an_unknown_enum_value_is_refused_at_add_graph(op, attr, value, extra):
    node = helper.make_node(op, ["x"], ["y"], name="the_node", **{attr: value}, **extra)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", F, [1, 1, 4, 4])],
                              [helper.make_tensor_value_info("y", F, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=8)
    err = _refused(model, InvalidGraph, f"attribute '{attr}' is '{value}', expected one of")
    assert "the_node" in err.message


def test_an_attribute_of_absurd_size_is_refused_before_it_is_built(monkeypatch):
    monkeypatch.setattr(onnx_import, "MAX_ATTRIBUTE_ENTRIES", 8)
    node = helper.make_node("Transpose", ["x"], ["y"], name="tr", perm=list(range(9)))
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", F, [2])],
                              [helper.make_tensor_value_info("y", F, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    _refused(model, InvalidGraph, "node 'tr' \\(Transpose\\): attribute 'perm' has 9 entries")


@pytest.mark.parametrize("opset", [0, 99])
def test_an_opset_outside_the_importers_range_is_refused(opset):
    _refused(_model_bytes(_field(1, _node()), opset=opset),
             match=f"opset {opset} of the default ONNX domain; this importer reads opsets 1 to")


def test_a_model_nested_too_deep_says_so():
    leaf = helper.make_graph([helper.make_node("Identity", ["x"], ["y"])], "leaf", [],
                             [helper.make_tensor_value_info("y", F, None)]).SerializeToString()
    out = helper.make_tensor_value_info("y", F, None).SerializeToString()
    g = leaf
    for d in range(40):  # an If in an If in an If ...: deeper than protobuf parses
        attr = _field(1, b"then_branch") + _field(20, 5) + _field(6, g)
        other = _field(1, b"else_branch") + _field(20, 5) + _field(6, leaf)
        node = (_field(1, b"c") + _field(2, b"y") + _field(4, b"If") + _field(5, attr)
                + _field(5, other))
        g = _field(1, node) + _field(2, f"g{d}".encode()) + _field(12, out)
    _refused(_model_bytes(g), match="the model is nested too deep")


@pytest.mark.parametrize("location", ["../../../../etc/passwd", "/etc/passwd", "sub/../../w.bin"])
def test_external_data_outside_the_models_folder_is_refused(tmp_path, location):
    t = helper.make_tensor("w", F, [2], [1.0, 2.0])
    t.ClearField("float_data")
    t.data_location = TensorProto.EXTERNAL
    entry = t.external_data.add()
    entry.key, entry.value = "location", location
    graph = helper.make_graph([helper.make_node("Add", ["x", "w"], ["y"])], "ext",
                              [helper.make_tensor_value_info("x", F, [2])],
                              [helper.make_tensor_value_info("y", F, [2])], [t])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    (tmp_path / "m").mkdir()
    path = tmp_path / "m" / "model.onnx"
    path.write_bytes(model.SerializeToString())
    (tmp_path / "w.bin").write_bytes(np.zeros(2, np.float32).tobytes())
    err = _refused(str(path), match="tensor 'w': external data location")
    assert str(tmp_path) not in err.message  # never the server's own paths


@pytest.mark.parametrize("dims", [[1 << 62, 4], [1 << 32, 1 << 32, 3]])
def test_tensor_dims_whose_product_wraps_int64_are_refused_naming_the_tensor(dims):
    # 2^64 elements wrapped to 0 in int64, matching an empty raw_data: the importer then
    # failed in numpy's reshape (a bare ValueError) instead of naming the tensor.
    t = TensorProto(name="c", data_type=F, dims=dims, raw_data=b"")
    graph = helper.make_graph(
        [helper.make_node("Constant", [], ["c"], value=t),
         helper.make_node("Identity", ["c"], ["y"])], "g", [],
        [helper.make_tensor_value_info("y", F, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    with pytest.raises(InvalidModel, match="tensor 'c': raw data has 0 bytes"):
        onnx_import.import_onnx(model.SerializeToString())
