"""ONNX and GraphDef importers: attributes, constants, validation, opset rewrites, round trips."""

from __future__ import annotations

import pathlib

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from graphengine.engine.dtypes import DType
from graphengine.engine.errors import InvalidGraph, InvalidModel
from graphengine.engine.importers import (
    export_graphdef,
    import_graphdef,
    import_onnx,
    load_model,
)
from graphengine.engine.ir import Graph, TensorMeta, ValueKind
from graphengine.v1 import graph_pb2 as pb
from tests.unit.test_ops_common import infer_graph, make_model, rand, reference, run_graph


def model_of(nodes, inputs, outputs, inits=(), opset=17, functions=()) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "m", inputs, outputs, initializer=list(inits))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)],
                              functions=list(functions))
    model.ir_version = 8
    return model


def vi(name: str, elem: int = TensorProto.FLOAT, shape=None):
    return helper.make_tensor_value_info(name, elem, shape)


# ---- ONNX ---------------------------------------------------------------------------------
def test_attribute_kinds_become_python_values() -> None:
    sub = helper.make_graph([helper.make_node("Identity", ["x"], ["o"])], "sub", [],
                            [vi("o", shape=[2])])
    eye = numpy_helper.from_array(np.eye(2, dtype=np.float32))
    node = helper.make_node("Custom", ["x"], ["y"], domain="", name="n",
                            i=3, f=0.5, s="txt", ints=[1, 2], floats=[1.5, 2.0],
                            strings=["a", "b"], t=eye, g=sub)
    g = import_onnx(model_of([node], [vi("x", shape=[2])], [vi("y")]))
    a = g.node("n").attrs
    assert a["i"] == 3 and isinstance(a["i"], int)
    assert a["f"] == 0.5 and isinstance(a["f"], float)
    assert a["s"] == "txt"
    assert a["ints"] == [1, 2] and a["floats"] == [1.5, 2.0] and a["strings"] == ["a", "b"]
    np.testing.assert_array_equal(a["t"], np.eye(2, dtype=np.float32))
    assert isinstance(a["g"], Graph) and a["_outer"] == ["x"]
    assert [v.name for v in a["g"].inputs] == ["x"]  # the outer read, recorded
    assert g.nodes[0].op_type == "Custom"  # unknown ops are validation's business


def test_constant_nodes_become_constants() -> None:
    nodes = [
        helper.make_node("Constant", [], ["c1"], value=numpy_helper.from_array(
            np.arange(4, dtype=np.int32))),
        helper.make_node("Constant", [], ["c2"], value_float=2.5),
        helper.make_node("Constant", [], ["c3"], value_ints=[1, 2, 3]),
        helper.make_node("Constant", [], ["c4"], value_strings=["x", "y"]),
        helper.make_node("Constant", [], ["c5"], value_int=7),
        helper.make_node("Add", ["x", "c2"], ["y"]),
    ]
    g = import_onnx(model_of(nodes, [vi("x", shape=[2])], [vi("y"), vi("c3", TensorProto.INT64)]))
    assert [n.op_type for n in g.nodes] == ["Add"]
    assert g.values["c1"].const.dtype == np.int32
    assert g.values["c2"].const.dtype == np.float32 and g.values["c2"].const.shape == ()
    assert g.values["c3"].const.tolist() == [1, 2, 3]
    assert g.values["c4"].const.tolist() == ["x", "y"]
    assert g.values["c5"].kind is ValueKind.CONSTANT
    assert g.outputs[1] is g.values["c3"]


def test_initializers_listed_as_inputs_are_constants() -> None:
    w = numpy_helper.from_array(np.ones((2, 2), np.float32), "w")
    model = model_of([helper.make_node("MatMul", ["x", "w"], ["y"])],
                     [vi("x", shape=[1, 2]), vi("w", shape=[2, 2])], [vi("y")], inits=[w])
    g = import_onnx(model)
    assert [v.name for v in g.inputs] == ["x"]
    assert g.values["w"].kind is ValueKind.CONSTANT


def test_input_dims_symbols_and_output_meta() -> None:
    model = model_of([helper.make_node("Relu", ["x"], ["y"])],
                     [vi("x", shape=["batch", None, 3])], [vi("y", shape=["batch", 4, 3])])
    g = import_onnx(model)
    shape = g.inputs[0].meta.shape
    assert shape[0] == "batch" and isinstance(shape[1], str) and shape[2] == 3
    assert g.outputs[0].meta.shape == ("batch", 4, 3)
    assert g.opset == 17


def test_dangling_input_names_node_and_tensor() -> None:
    model = model_of([helper.make_node("Add", ["x", "ghost"], ["y"], name="adder")],
                     [vi("x", shape=[2])], [vi("y")])
    with pytest.raises(InvalidGraph) as info:
        import_onnx(model)
    assert "adder" in str(info.value) and "ghost" in str(info.value)
    assert info.value.node == "adder" and info.value.tensor == "ghost"


def test_garbage_bytes_and_missing_path() -> None:
    with pytest.raises(InvalidModel, match="bytes are not an ONNX model"):
        import_onnx(b"\x00\x01 definitely not protobuf \xff\xfe")
    with pytest.raises(InvalidModel, match="bytes are not an ONNX model"):
        load_model(b"")
    with pytest.raises(InvalidModel, match="nowhere.onnx"):
        load_model("/nonexistent/nowhere.onnx")
    with pytest.raises(InvalidModel, match="cannot load a model from a int"):
        load_model(42)


def test_node_names_made_unique_and_empty_inputs_are_none() -> None:
    nodes = [helper.make_node("Relu", ["x"], ["a"], name="dup"),
             helper.make_node("Relu", ["a"], ["b"], name="dup"),
             helper.make_node("Clip", ["b", "", "hi"], ["y"])]
    hi = numpy_helper.from_array(np.array(1.0, np.float32), "hi")
    g = import_onnx(model_of(nodes, [vi("x", shape=[3])], [vi("y")], inits=[hi]))
    names = [n.name for n in g.nodes]
    assert len(set(names)) == 3 and "dup" in names and all(names)
    assert g.nodes[2].inputs[1] is None
    g.lint()


def test_unsorted_nodes_are_ordered() -> None:
    nodes = [helper.make_node("Relu", ["a"], ["y"], name="second"),
             helper.make_node("Neg", ["x"], ["a"], name="first")]
    g = import_onnx(model_of(nodes, [vi("x", shape=[2])], [vi("y")]))
    assert [n.name for n in g.nodes] == ["first", "second"]


def test_custom_domain_is_noted() -> None:
    model = make_model("FusedThing", [("x", rand(2))], domain="com.example")
    g = import_onnx(model)
    assert g.nodes[0].op_type == "com.example.FusedThing"
    assert g.nodes[0].attrs["_domain"] == "com.example"


def test_external_data_relative_to_model_path(tmp_path: pathlib.Path) -> None:
    w = np.arange(4096, dtype=np.float32).reshape(64, 64)
    model = model_of([helper.make_node("MatMul", ["x", "w"], ["y"])], [vi("x", shape=[1, 64])],
                     [vi("y")], inits=[numpy_helper.from_array(w, "w")])
    path = tmp_path / "ext.onnx"
    onnx.save_model(model, str(path), save_as_external_data=True, location="weights.bin",
                    size_threshold=0)
    assert (tmp_path / "weights.bin").exists()
    g = load_model(path)
    np.testing.assert_array_equal(g.values["w"].const, w)
    assert load_model(str(path)).values["w"].const.shape == (64, 64)


def _run_both(model: onnx.ModelProto, feeds: dict) -> None:
    g = import_onnx(model)
    g.lint()
    infer_graph(g)
    got = run_graph(g, feeds)
    for a, b in zip(got, reference(model, feeds, "ort")):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


def test_old_opset_softmax_flattens_to_2d() -> None:
    model = model_of([helper.make_node("Softmax", ["x"], ["y"], axis=1)],
                     [vi("x", shape=[2, 3, 4])], [vi("y")], opset=11)
    g = import_onnx(model)
    assert {n.op_type for n in g.nodes} == {"Shape", "Flatten", "Softmax", "Reshape"}
    _run_both(model, {"x": rand(2, 3, 4)})


def test_old_opset_clip_pad_and_topk() -> None:
    _run_both(model_of([helper.make_node("Clip", ["x"], ["y"], min=-0.5, max=0.5)],
                       [vi("x", shape=[3, 4])], [vi("y")], opset=6), {"x": rand(3, 4)})
    _run_both(model_of([helper.make_node("Pad", ["x"], ["y"], pads=[0, 1, 1, 0], value=3.0)],
                       [vi("x", shape=[2, 2])], [vi("y")], opset=2), {"x": rand(2, 2)})
    _run_both(model_of([helper.make_node("TopK", ["x"], ["v", "i"], k=2)],
                       [vi("x", shape=[3, 4])], [vi("v"), vi("i", TensorProto.INT64)],
                       opset=9), {"x": rand(3, 4)})


def test_model_local_functions_are_inlined() -> None:
    fn = helper.make_function("local", "AddTwice", ["a", "b"], ["c"],
                              [helper.make_node("Add", ["a", "b"], ["t"]),
                               helper.make_node("Add", ["t", "b"], ["c"])],
                              [helper.make_opsetid("", 17)])
    graph = helper.make_graph([helper.make_node("AddTwice", ["x", "y"], ["z"], domain="local")],
                              "f", [vi("x", shape=[2]), vi("y", shape=[2])], [vi("z")])
    model = helper.make_model(graph, functions=[fn], opset_imports=[
        helper.make_opsetid("", 17), helper.make_opsetid("local", 1)])
    model.ir_version = 8
    g = import_onnx(model)
    assert [n.op_type for n in g.nodes] == ["Add", "Add"]
    x, y = rand(2), rand(2, seed=1)
    infer_graph(g)
    np.testing.assert_allclose(run_graph(g, {"x": x, "y": y})[0], x + 2 * y, rtol=1e-6)


def _calling(names_and_bodies, main_call: str) -> onnx.ModelProto:
    """A model whose main graph calls local function `main_call`; each function's body
    is a chain of calls (or one Relu for an empty list)."""
    opsets = [helper.make_opsetid("", 17), helper.make_opsetid("local", 1)]
    funcs = []
    for name, callees in names_and_bodies:
        names = ["a", *(f"m{k}" for k in range(len(callees) - 1)), "b"]
        body = ([helper.make_node(c, [names[k]], [names[k + 1]], domain="local")
                 for k, c in enumerate(callees)] or [helper.make_node("Relu", ["a"], ["b"])])
        funcs.append(helper.make_function("local", name, ["a"], ["b"], body, opsets))
    graph = helper.make_graph([helper.make_node(main_call, ["x"], ["y"], domain="local")],
                              "calls", [vi("x", shape=[2])], [vi("y")])
    model = helper.make_model(graph, functions=funcs, opset_imports=opsets)
    model.ir_version = 8
    return model


@pytest.mark.parametrize("funcs, call, words", [
    ([("F", ["F"])], "F", r"function local.F -> local.F calls itself"),
    ([("F", ["G"]), ("G", ["Relu2"]), ("Relu2", ["F"])], "F",
     r"local.F -> local.G -> local.Relu2 -> local.F calls itself"),
    # Each level calls the next twice: 2**40 nodes from a few hundred bytes, refused from
    # the counts alone, before a node is copied.
    ([("F0", [])] + [(f"F{k}", [f"F{k - 1}"] * 2) for k in range(1, 41)], "F40",
     r"expand the graph to \d+ nodes; at most 1048576"),
    ([("F0", [])] + [(f"F{k}", [f"F{k - 1}"]) for k in range(1, 80)], "F79",
     r"call each other more than 64 deep"),
])
def test_local_functions_that_cannot_be_inlined_are_named(funcs, call, words) -> None:
    """Found by the fuzz harness: a function calling itself raised a raw ValueError after
    32 levels of copies (INTERNAL); an expansion bomb was not bounded at all."""
    with pytest.raises(InvalidModel, match=words):
        import_onnx(_calling(funcs, call))


def test_local_functions_calling_functions_inline() -> None:
    g = import_onnx(_calling([("F0", []), ("F1", ["F0", "F0"]), ("F2", ["F1", "F1"])], "F2"))
    assert [n.op_type for n in g.nodes] == ["Relu"] * 4


@pytest.mark.parametrize("node, opset, words", [
    (helper.make_node("Pad", ["x"], ["y"]), 10, r"opset-10 form .*attribute 'pads' is missing"),
    (helper.make_node("Clip", ["x"], ["y"], min="abc"), 6,
     r"opset-6 form .*malformed \(could not convert string to float: 'abc'\)"),
    (helper.make_node("TopK", ["x"], ["y", "i"]), 9, r"opset-9 form .*attribute 'k' is missing"),
])
def test_old_opset_forms_that_cannot_be_rewritten_are_named(node, opset, words) -> None:
    """Found by the fuzz harness: the rewrite to the newest form raised TypeError/ValueError."""
    node.name = "old_form"
    with pytest.raises(InvalidGraph, match=rf"node 'old_form' \({node.op_type}\): its {words}"):
        import_onnx(model_of([node], [vi("x", shape=[4])], [vi("y")], opset=opset))


# ---- GraphDef ---------------------------------------------------------------------------
def test_low_precision_inputs_and_initializers_keep_their_dtypes() -> None:
    w = helper.make_tensor("w", TensorProto.INT4, [3], [-8, 0, 7])
    model = model_of([helper.make_node("Cast", ["w"], ["wf"], to=TensorProto.FLOAT),
                      helper.make_node("Cast", ["x"], ["xf"], to=TensorProto.FLOAT)],
                     [vi("x", TensorProto.FLOAT8E4M3FN, [2])], [vi("wf"), vi("xf")], [w],
                     opset=21)
    g = import_onnx(model)
    assert g.values["x"].meta.dtype is DType.FLOAT8E4M3FN
    assert g.values["w"].meta.dtype is DType.INT4
    assert g.values["w"].const.astype(np.int8).tolist() == [-8, 0, 7]


def test_scan_opset8_with_sequence_lens_is_refused() -> None:
    body = helper.make_graph([helper.make_node("Identity", ["s"], ["t"])], "b",
                             [vi("s", shape=[1])], [vi("t", shape=[1])])
    node = helper.make_node("Scan", ["lens", "init"], ["out"], body=body, num_scan_inputs=0)
    model = model_of([node], [vi("lens", TensorProto.INT32, [1]), vi("init", shape=[1, 1])],
                     [vi("out")], opset=8)
    with pytest.raises(InvalidGraph, match="sequence_lens"):
        import_onnx(model)


def _sample_graph() -> Graph:
    w = numpy_helper.from_array(rand(4, 3, seed=2), "w")
    nodes = [helper.make_node("MatMul", ["x", "w"], ["h"], name="mm"),
             helper.make_node("Softmax", ["h"], ["p"], name="sm", axis=-1),
             helper.make_node("TopK", ["p", "k"], ["v", "i"], name="top", largest=1)]
    k = numpy_helper.from_array(np.array([2], np.int64), "k")
    return import_onnx(model_of(nodes, [vi("x", shape=["batch", 4])],
                                [vi("v"), vi("i", TensorProto.INT64)], inits=[w, k]))


def test_graphdef_round_trip() -> None:
    g = _sample_graph()
    gd = export_graphdef(g)
    back = import_graphdef(pb.GraphDef.FromString(gd.SerializeToString()))
    assert [n.name for n in back.nodes] == [n.name for n in g.nodes]
    assert [(n.op_type, n.attrs) for n in back.nodes] == [(n.op_type, n.attrs) for n in g.nodes]
    assert back.inputs[0].meta.shape == ("batch", 4) and back.inputs[0].meta.dtype is DType.FLOAT32
    np.testing.assert_array_equal(back.values["w"].const, g.values["w"].const)
    back.lint()
    x = rand(5, 4)
    for graph in (g, back):
        infer_graph(graph)
    for a, b in zip(run_graph(g, {"x": x}), run_graph(back, {"x": x})):
        np.testing.assert_array_equal(a, b)
    assert load_model(gd, name="renamed").name == "renamed"
    assert load_model(g) is g


def test_graphdef_attr_kinds_round_trip() -> None:
    g = Graph("attrs")
    x = g.add_input("x", _sample_graph().inputs[0].meta)
    t = np.arange(6, dtype=np.int32).reshape(2, 3)
    node = g.add_node("Custom", [x, None], name="c", attrs={
        "i": 4, "f": 0.25, "s": "hi", "ints": [1, -2], "floats": [0.5], "strings": ["u", "v"],
        "t": t})
    g.outputs = [node.outputs[0]]
    back = import_graphdef(export_graphdef(g))
    a = back.node("c").attrs
    assert a["i"] == 4 and a["f"] == 0.25 and a["s"] == "hi" and a["ints"] == [1, -2]
    assert a["floats"] == [0.5] and a["strings"] == ["u", "v"]
    np.testing.assert_array_equal(a["t"], t)
    assert back.node("c").inputs[1] is None


def test_graphdef_validation() -> None:
    gd = pb.GraphDef(name="bad", inputs=[pb.TensorDesc(name="x", dtype=pb.DT_FLOAT32)],
                     nodes=[pb.NodeDef(name="n1", op_type="Add", inputs=["x", "nope"],
                                       outputs=["y"])],
                     outputs=[pb.TensorDesc(name="y")])
    with pytest.raises(InvalidGraph, match="node 'n1' reads tensor 'nope'"):
        import_graphdef(gd)
    dup = pb.GraphDef(name="dup", inputs=[pb.TensorDesc(name="x", dtype=pb.DT_FLOAT32)],
                      nodes=[pb.NodeDef(name="a", op_type="Relu", inputs=["x"], outputs=["x"])])
    with pytest.raises(InvalidGraph, match="'x' is defined more than once"):
        import_graphdef(dup)
    undefined = pb.GraphDef(inputs=[pb.TensorDesc(name="x")])
    with pytest.raises(InvalidGraph, match="dtype"):
        import_graphdef(undefined)


def test_graphdef_rejects_subgraph_attributes() -> None:
    sub = helper.make_graph([helper.make_node("Identity", ["x"], ["o"])], "sub", [],
                            [vi("o", shape=[2])])
    node = helper.make_node("If", ["c"], ["y"], then_branch=sub, else_branch=sub)
    g = import_onnx(model_of([node], [vi("c", TensorProto.BOOL, []), vi("x", shape=[2])],
                             [vi("y")]))
    with pytest.raises(InvalidGraph, match="cannot be written to a GraphDef"):
        export_graphdef(g)


def test_graphdef_export_refuses_dtypes_the_wire_lacks() -> None:
    g = Graph("lowp")
    x = g.add_input("x", TensorMeta(DType.FLOAT8E4M3FN, (2,)))
    g.outputs = [g.add_node("Cast", [x], attrs={"to": TensorProto.FLOAT}).outputs[0]]
    with pytest.raises(InvalidGraph, match="float8_e4m3fn.*GraphDef"):
        export_graphdef(g)


def test_loading_a_file_does_not_import_the_graph_builder(tmp_path):
    """A path (or bytes) cannot be a builder Graph: loading it leaves the builder's module,
    whose op classes are made from the whole registry at import, unloaded (a fresh process:
    this one's tests import it). A builder Graph still loads (its module is then loaded)."""
    import subprocess
    import sys

    path = tmp_path / "m.onnx"
    onnx.save(model_of([helper.make_node("Relu", ["x"], ["y"])],
                       [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
                       [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])]), path)
    code = ("import sys\n"
            "from graphengine.engine.importers import load_model\n"
            f"g = load_model({str(path)!r})\n"
            "assert [n.op_type for n in g.nodes] == ['Relu']\n"
            "print('graphengine.engine.builder' in sys.modules)\n"
            "import graphengine\n"
            "b = graphengine.Graph('b')\n"
            "x = b.input('x', 'float32', [2])\n"
            "b.output(graphengine.ops.Relu(x))\n"
            "print([n.op_type for n in load_model(b).nodes])\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split("\n")[:2] == ["False", "['Relu']"], out.stdout
