"""Shape inference run again (the prepare stage repeats it after folding and merging): a
node is inferred again only when what its inference read has changed."""

from __future__ import annotations

import importlib

import numpy as np
import pytest

from graphengine.engine import ops
from graphengine.engine.dtypes import DType
from graphengine.engine.ir import Graph, TensorMeta
from graphengine.engine.prepare import infer_shapes

infer_again = importlib.import_module("graphengine.engine.prepare.infer_shapes")

F32 = DType.FLOAT32


@pytest.fixture
def inferred(monkeypatch):
    """The names of the nodes infer_node was called for."""
    names: list[str] = []
    real = ops.infer_node

    def counting(node):
        names.append(node.name)
        return real(node)

    monkeypatch.setattr(ops, "infer_node", counting)
    return names


def _graph() -> Graph:
    """x -> Add(w) -> Relu -> Reshape(Shape(x)) -> y"""
    g = Graph("g")
    x = g.add_input("x", TensorMeta(F32, (2, 3)))
    w = g.add_constant("w", np.ones((2, 3), np.float32))
    a = g.add_node("Add", [x, w], outputs=["a"], name="add")
    r = g.add_node("Relu", [a.outputs[0]], outputs=["r"], name="relu")
    s = g.add_node("Shape", [x], outputs=["s"], name="shape")
    y = g.add_node("Reshape", [r.outputs[0], s.outputs[0]], outputs=["y"], name="reshape")
    g.outputs = [y.outputs[0]]
    return g


def test_a_node_as_it_was_is_not_inferred_again(inferred):
    g = _graph()
    assert infer_shapes(g).changed
    assert inferred == ["add", "relu", "shape", "reshape"]
    inferred.clear()
    assert not infer_shapes(g).changed
    # the Reshape's target came from the Shape node, further up than its own inputs
    assert inferred == ["reshape"]
    assert g.values["y"].meta == TensorMeta(F32, (2, 3))


def test_a_new_constant_input_or_a_changed_attribute_is_inferred_again(inferred):
    g = _graph()
    infer_shapes(g)
    inferred.clear()
    # what folding does: the same values, a new constant
    add = g.node("add")
    add.replace_input(add.input(1), g.add_constant(None, np.full((2, 3), 2, np.float32)))
    g.node("relu").attrs["_tag"] = 1
    infer_shapes(g)
    assert inferred == ["add", "relu", "reshape"]
    inferred.clear()
    g.values["x"].meta = TensorMeta(F32, (3, 2))  # an input's type: all of its readers
    add.replace_input(add.input(1), g.add_constant(None, np.ones((3, 2), np.float32)))
    infer_shapes(g)
    assert inferred == ["add", "relu", "shape", "reshape"]
    assert g.values["y"].meta == TensorMeta(F32, (3, 2))


def test_what_inference_kept_is_not_written_to_an_offline_model():
    # A body graph in an offline model is stored with its nodes' metas: the memo (a
    # schema, weak references) is the compile's own and is left out.
    from graphengine.engine.offline_codec import Reader, Writer

    g = _graph()
    infer_shapes(g)
    assert g.node("add").meta.inferred is not None
    writer = Writer()
    doc = writer.encode(g, "g")
    back = Reader(np.frombuffer(b"".join(bytes(c) for c in writer.chunks), np.uint8)).decode(doc)
    assert [n.name for n in back.nodes] == [n.name for n in g.nodes]
    assert back.node("add").meta.inferred is None
    assert back.values["y"].meta == TensorMeta(F32, (2, 3))


def test_a_derived_shape_read_by_several_nodes_is_derived_once_per_sweep(monkeypatch):
    # Every layer's Reshape reads the same Shape -> Cast chain: within one sweep the chain
    # is evaluated once (value_prop.sweep), and each reader still gets the right shape.
    from graphengine.engine.ops import value_prop

    evaluated: list[str] = []
    real = value_prop.run_node

    def counting(node, inputs):
        evaluated.append(node.name)
        return real(node, inputs)

    monkeypatch.setattr(value_prop, "run_node", counting)
    g = Graph("g")
    x = g.add_input("x", TensorMeta(F32, (2, 3)))
    s = g.add_node("Shape", [x], outputs=["s"], name="shape")
    c = g.add_node("Cast", [s.outputs[0]], outputs=["c"], name="cast", attrs={"to": 7})
    outs = []
    for i in range(3):
        r = g.add_node("Relu", [x], outputs=[f"r{i}"], name=f"relu{i}")
        y = g.add_node("Reshape", [r.outputs[0], c.outputs[0]], outputs=[f"y{i}"],
                       name=f"reshape{i}")
        outs.append(y.outputs[0])
    g.outputs = outs
    infer_shapes(g)
    assert evaluated.count("cast") == 1
    assert all(v.meta == TensorMeta(F32, (2, 3)) for v in outs)


def test_a_small_constant_of_the_same_values_is_not_a_change(inferred):
    """Folding and deduplication make new arrays of the same few numbers (a Reshape's
    target, axes, a scalar): compared by value, they leave the node as it was (more_olmoe's
    second prepare round inferred 240 nodes again only for that). A large constant is
    still compared by identity."""
    g = Graph("g")
    x = g.add_input("x", TensorMeta(F32, (2, 3)))
    small = g.add_node("Reshape", [x, g.add_constant(None, np.array([3, 2], np.int64))],
                       outputs=["r"], name="reshape")
    big = g.add_node("Add", [small.outputs[0], g.add_constant(None, np.ones((3, 2), np.float32))],
                     outputs=["y"], name="add")
    g.outputs = [big.outputs[0]]
    infer_shapes(g)
    inferred.clear()
    small.replace_input(small.input(1), g.add_constant(None, np.array([3, 2], np.int64)))
    infer_shapes(g)
    assert inferred == []
    small.replace_input(small.input(1), g.add_constant(None, np.array([6], np.int64)))
    big.replace_input(big.input(1), g.add_constant(None, np.ones((6,), np.float32)))
    infer_shapes(g)
    assert inferred == ["reshape", "add"]
    assert g.values["y"].meta == TensorMeta(F32, (6,))
    inferred.clear()
    n = infer_again.SMALL_CONSTANT + 1
    g2 = Graph("g2")
    x2 = g2.add_input("x", TensorMeta(F32, (n,)))
    add = g2.add_node("Add", [x2, g2.add_constant(None, np.ones(n, np.float32))],
                      outputs=["y"], name="wide")
    g2.outputs = [add.outputs[0]]
    infer_shapes(g2)
    inferred.clear()
    add.replace_input(add.input(1), g2.add_constant(None, np.ones(n, np.float32)))
    infer_shapes(g2)
    assert inferred == ["wide"]  # by identity: not compared element by element


def test_a_deep_padding_computation_is_known_in_the_first_sweep():
    """Encodec's conv padding: Shape -> Gather -> Cast -> the frame count (Sub, Div, Add,
    Ceil) -> the ideal length (Sub, Mul, Add, Sub) -> Cast -> pads -> Pad, ~20 values deep.
    Value propagation stopped 12 deep, so each such layer's shapes were known only after a
    folding round: an encoder of more layers than the prepare stage has rounds ran its last
    layers on the host (12 programs, 41 host steps)."""
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper

    from graphengine.engine.importers import load_model
    from graphengine.engine.prepare.infer_shapes import infer_shapes

    f = TensorProto.FLOAT
    c = {"two": np.array(2, np.int64), "k": np.float32(7), "s": np.float32(4),
         "one": np.float32(1), "pt": np.float32(3), "zeros": np.zeros(5, np.int64)}
    nodes = [helper.make_node("Shape", ["x"], ["shape"]),
             helper.make_node("Gather", ["shape", "two"], ["len"], axis=0),
             helper.make_node("Cast", ["len"], ["lenf"], to=f),
             helper.make_node("Sub", ["lenf", "k"], ["a1"]),
             helper.make_node("Add", ["a1", "pt"], ["a2"]),
             helper.make_node("Div", ["a2", "s"], ["a3"]),
             helper.make_node("Add", ["a3", "one"], ["frames"]),
             helper.make_node("Ceil", ["frames"], ["cf"]),
             helper.make_node("Sub", ["cf", "one"], ["b1"]),
             helper.make_node("Mul", ["b1", "s"], ["b2"]),
             helper.make_node("Sub", ["k", "pt"], ["b3"]),
             helper.make_node("Add", ["b2", "b3"], ["ideal"]),
             helper.make_node("Sub", ["ideal", "lenf"], ["extra"]),
             helper.make_node("Abs", ["extra"], ["e1"]),
             helper.make_node("Neg", ["e1"], ["e2"]),
             helper.make_node("Neg", ["e2"], ["e3"]),
             helper.make_node("Cast", ["e3"], ["ei"], to=TensorProto.INT64),
             helper.make_node("Add", ["ei", "pti"], ["right"]),
             helper.make_node("Reshape", ["right", "one1"], ["r1"]),
             helper.make_node("Concat", ["zeros", "r1"], ["pads"], axis=0),
             helper.make_node("Pad", ["x", "pads"], ["y"])]
    c.update(pti=np.array(1, np.int64), one1=np.array([1], np.int64))
    graph = helper.make_graph(nodes, "pad_chain", [helper.make_tensor_value_info(
        "x", f, [1, 4, 50])], [helper.make_tensor_value_info("y", f, None)],
        [numpy_helper.from_array(np.asarray(v), k) for k, v in c.items()])
    g = load_model(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)],
                                     ir_version=8))
    infer_shapes(g)
    # frames = (50 - 7 + 3) / 4 + 1 = 12.5 -> 13; ideal = 12 * 4 + 4 = 52; extra 2, +1
    assert g.outputs[0].meta.shape == (1, 4, 53)
