"""Stage 1 passes, each on a small IR graph, linted after the pass."""

import numpy as np
import pytest

from graphengine.engine.dtypes import DType
from graphengine.engine.errors import InvalidGraph, ShapeError
from graphengine.engine.ir import Graph, TensorMeta
from graphengine.engine.prepare import (
    deduplicate_constants,
    eliminate_common_subexpressions,
    eliminate_dead_nodes,
    eliminate_identities,
    fold_constants,
    infer_shapes,
    validate,
)

F32 = DType.FLOAT32


def graph_with_x(shape=(2, 3)) -> tuple[Graph, object]:
    g = Graph("t")
    return g, g.add_input("x", TensorMeta(F32, shape))


def test_infer_shapes_handles_symbolic_dims_and_broadcasting():
    g, x = graph_with_x(("batch", 3))
    b = g.add_constant("b", np.ones((1, 3), np.float32))
    add = g.add_node("Add", [x, b], name="add")
    g.outputs = add.outputs
    infer_shapes(g)
    assert add.outputs[0].meta == TensorMeta(F32, ("batch", 3))


def test_infer_shapes_names_the_node_on_mismatch():
    g, x = graph_with_x((2, 3))
    b = g.add_constant("b", np.ones((4,), np.float32))
    g.outputs = g.add_node("Add", [x, b], name="bad_add").outputs
    with pytest.raises(ShapeError, match="bad_add"):
        infer_shapes(g)


def test_validate_rejects_unknown_ops_and_bad_attribute_types():
    g, x = graph_with_x()
    g.outputs = g.add_node("Softmax", [x], attrs={"axis": "one"}, name="sm").outputs
    with pytest.raises(InvalidGraph, match="'sm'.*axis.*int"):
        validate(g)
    g2, x2 = graph_with_x()
    g2.outputs = g2.add_node("Nope", [x2], name="n").outputs
    with pytest.raises(InvalidGraph, match="unknown op type 'Nope'"):
        validate(g2)


def test_fold_constants_and_shape_of_static_tensor():
    g, x = graph_with_x((2, 3))
    shape = g.add_node("Shape", [x], name="shape")
    c = g.add_constant("c", np.array([1.0, 2.0], np.float32))
    neg = g.add_node("Neg", [c], name="neg")
    g.outputs = [shape.outputs[0], neg.outputs[0]]
    infer_shapes(g)
    result = fold_constants(g)
    g.lint()
    assert result.changed and not g.nodes
    np.testing.assert_array_equal(g.outputs[0].const, [2, 3])
    np.testing.assert_array_equal(g.outputs[1].const, [-1.0, -2.0])


def test_dead_nodes_and_identities_go_but_outputs_keep_their_names():
    g, x = graph_with_x()
    ident = g.add_node("Identity", [x], name="id")
    relu = g.add_node("Relu", [ident.outputs[0]], outputs=["y"], name="relu")
    g.add_node("Sigmoid", [x], name="dead")
    g.outputs = relu.outputs
    eliminate_identities(g)
    eliminate_dead_nodes(g)
    g.lint()
    assert [n.name for n in g.nodes] == ["relu"] and g.outputs[0].name == "y"
    assert g.node("relu").inputs[0] is x


def test_a_cast_to_the_type_it_has_goes_and_a_real_cast_stays():
    """torch exports a float32 softmax followed by Cast(to=float32), twice: copies for
    nothing, which also hid the attention pattern from its fusion."""
    g, x = graph_with_x()
    same = g.add_node("Cast", [x], attrs={"to": 1}, name="same")
    again = g.add_node("Cast", [same.outputs[0]], attrs={"to": 1}, name="again")
    real = g.add_node("Cast", [again.outputs[0]], attrs={"to": 7}, outputs=["y"], name="real")
    g.outputs = real.outputs
    infer_shapes(g)
    eliminate_identities(g)
    g.lint()
    assert [n.name for n in g.nodes] == ["real"] and g.node("real").inputs[0] is x
    assert g.outputs[0].meta.dtype is DType.INT64


def test_a_one_input_concat_goes_and_a_real_one_stays():
    """Phi's key and value pass a KV-cache Concat of one input when exported without a
    past: a copy, which also hid the value's head-split Transpose from the attention."""
    g, x = graph_with_x()
    one = g.add_node("Concat", [x], attrs={"axis": 1}, name="one")
    two = g.add_node("Concat", [one.outputs[0], x], attrs={"axis": 1}, outputs=["y"],
                     name="two")
    g.outputs = two.outputs
    infer_shapes(g)
    eliminate_identities(g)
    g.lint()
    assert [n.name for n in g.nodes] == ["two"] and g.node("two").inputs == (x, x)
    assert g.outputs[0].meta.shape == (2, 6)


def test_a_view_to_its_own_shape_goes_and_a_real_one_stays():
    """TorchScript's export of scaled_dot_product_attention reshapes Q, K, V and the result
    to the shapes they have: no-ops that hid the head-split Transposes from the fusions."""
    g, x = graph_with_x((2, 3, 4))
    same = g.add_constant("same", np.array([2, 3, 4], np.int64))
    flat = g.add_constant("flat", np.array([6, 4], np.int64))
    own = g.add_node("Reshape", [x, same], name="own")
    neg = g.add_node("Neg", [own.outputs[0]], name="neg")
    real = g.add_node("Reshape", [neg.outputs[0], flat], outputs=["y"], name="real")
    g.outputs = real.outputs
    infer_shapes(g)
    eliminate_identities(g)
    g.lint()
    assert [n.name for n in g.nodes] == ["neg", "real"] and g.node("neg").inputs == (x,)


@pytest.mark.parametrize("reps,goes", [([1, 1, 1], True), ([1, 2, 1], False)])
def test_a_tile_by_ones_goes(reps, goes):
    """GIT tiles its image tokens by batch // images: by ones at batch 1, which stayed a host
    Tile (no device kernel; the Expand rewrite takes only real repeats) between two device
    programs."""
    g, x = graph_with_x((2, 3, 4))
    r = g.add_constant("r", np.array(reps, np.int64))
    tile = g.add_node("Tile", [x, r], name="tile")
    neg = g.add_node("Neg", [tile.outputs[0]], outputs=["y"], name="neg")
    g.outputs = neg.outputs
    infer_shapes(g)
    eliminate_identities(g)
    g.lint()
    assert [n.name for n in g.nodes] == (["neg"] if goes else ["tile", "neg"])


@pytest.mark.parametrize("pads,goes", [([0, 0, 0, 0, 0, 0], True), ([0, 0, 1, 0, 0, 0], False),
                                       ([0, 0, 1, 0, 0, -1], False)])
def test_a_pad_of_zero_width_goes(pads, goes):
    """Encodec's padding arithmetic pads its 1x1 convolutions by 0 each side: a copy task
    between two format conversions. Any nonzero pad stays (1 then -1 keeps the shape but
    moves the data)."""
    g, x = graph_with_x((2, 3, 4))
    p = g.add_constant("p", np.array(pads, np.int64))
    pad = g.add_node("Pad", [x, p], attrs={"mode": "reflect"}, name="pad")
    neg = g.add_node("Neg", [pad.outputs[0]], outputs=["y"], name="neg")
    g.outputs = neg.outputs
    infer_shapes(g)
    eliminate_identities(g)
    g.lint()
    assert [n.name for n in g.nodes] == (["neg"] if goes else ["pad", "neg"])
    assert (g.node("neg").inputs[0] is x) == goes


def test_a_view_back_to_its_source_shape_reads_the_source_whoever_reads_the_middle():
    """[N, C, 1, L] viewed as [N, C, L] (read by an activation) and viewed back to
    [N, C, 1, L] (a shortcut convolution's input): the second view is its source, so the
    shortcut reads the convolution's own value. A view to another shape stays."""
    from graphengine.engine.prepare.canonicalize import canonicalize
    g, x = graph_with_x((2, 3, 1, 5))
    axes = g.add_constant("axes", np.array([2], np.int64))
    other = g.add_constant("other", np.array([2, 3, 5, 1], np.int64))
    sq = g.add_node("Squeeze", [x, axes], name="sq")
    act = g.add_node("Elu", [sq.outputs[0]], outputs=["a"], name="act")
    back = g.add_node("Unsqueeze", [sq.outputs[0], axes], name="back")
    neg = g.add_node("Neg", [back.outputs[0]], outputs=["b"], name="neg")
    elsewhere = g.add_node("Reshape", [sq.outputs[0], other], outputs=["c"], name="elsewhere")
    g.outputs = [act.outputs[0], neg.outputs[0], elsewhere.outputs[0]]
    infer_shapes(g)
    canonicalize(g)
    g.lint()
    assert g.node("neg").inputs[0] is x
    assert "back" not in [n.name for n in g.nodes]
    assert g.node("elsewhere").inputs[0] is sq.outputs[0]


@pytest.mark.parametrize("mode,goes", [("linear", True), ("nearest", True), ("cubic", False)])
def test_a_resize_to_its_own_size_goes(mode, goes):
    """SegFormer's decoder resizes its first stage to that stage's size: an identity for
    nearest and linear (cubic is left alone); a real resize stays."""
    g, x = graph_with_x((2, 3, 4, 4))
    same = g.add_constant("same", np.array([2, 3, 4, 4], np.int64))
    big = g.add_constant("big", np.array([2, 3, 8, 8], np.int64))
    own = g.add_node("Resize", [x, None, None, same], attrs={"mode": mode}, name="own")
    up = g.add_node("Resize", [own.outputs[0], None, None, big], attrs={"mode": mode},
                    outputs=["y"], name="up")
    g.outputs = up.outputs
    infer_shapes(g)
    eliminate_identities(g)
    g.lint()
    assert [n.name for n in g.nodes] == (["up"] if goes else ["own", "up"])
    assert (g.node("up").inputs[0] is x) == goes and g.outputs[0].meta.shape == (2, 3, 8, 8)


def test_a_resize_by_a_scale_that_keeps_the_size_stays():
    """Scales [1, 1, 1.1, 1.1] keep 4 pixels (floor(4.4)) but sample at (x + 0.5) / 1.1 -
    0.5: not the input."""
    g, x = graph_with_x((2, 3, 4, 4))
    scales = g.add_constant("scales", np.array([1, 1, 1.1, 1.1], np.float32))
    node = g.add_node("Resize", [x, None, scales], attrs={"mode": "linear"}, outputs=["y"],
                      name="r")
    g.outputs = node.outputs
    infer_shapes(g)
    assert g.outputs[0].meta.shape == (2, 3, 4, 4)
    eliminate_identities(g)
    assert [n.name for n in g.nodes] == ["r"]


def test_cse_merges_equal_nodes_only():
    g, x = graph_with_x()
    a = g.add_node("Softmax", [x], attrs={"axis": 1}, name="a")
    b = g.add_node("Softmax", [x], attrs={"axis": 1}, name="b")
    c = g.add_node("Softmax", [x], attrs={"axis": 0}, name="c")
    s = g.add_node("Sum", [a.outputs[0], b.outputs[0], c.outputs[0]], name="s")
    g.outputs = s.outputs
    result = eliminate_common_subexpressions(g)
    g.lint()
    assert result.changed and {n.name for n in g.nodes} == {"a", "c", "s"}
    assert g.node("s").inputs[0] is g.node("s").inputs[1]


def test_constant_dedup():
    g, x = graph_with_x()
    c1 = g.add_constant("c1", np.arange(3, dtype=np.float32))
    c2 = g.add_constant("c2", np.arange(3, dtype=np.float32))
    c3 = g.add_constant("c3", np.arange(3, dtype=np.float32) + 1)
    n1 = g.add_node("Add", [x, c1], name="n1")
    n2 = g.add_node("Add", [n1.outputs[0], c2], name="n2")
    n3 = g.add_node("Add", [n2.outputs[0], c3], name="n3")
    g.outputs = n3.outputs
    deduplicate_constants(g)
    g.lint()
    assert n1.inputs[1] is n2.inputs[1] and n3.inputs[1] is c3
    assert "c2" not in g.values


def test_opset10_clip_bounds_fold_to_constants_so_the_clip_runs_on_the_device():
    """Clip-10's min/max attributes become CastLike(bound, x) at import; CastLike depends on
    x's dtype only, so it folds, and the device's Clip (constant bounds only) takes it."""
    import onnxruntime as ort
    from onnx import TensorProto, helper

    from graphengine.engine.importers import load_model
    from graphengine.engine.pipeline import compile_graph
    from graphengine.engine.runtime import LoadedModel

    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["r"]),
         helper.make_node("Clip", ["r"], ["y"], min=0.5, max=6.0, name="relu6")], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 8])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 10)], ir_version=5)
    compiled = compile_graph(load_model(model))
    assert {p.engine for p in compiled.report.placements} == {"device"}, \
        compiled.report.render()
    x = np.linspace(-8, 8, 16, dtype=np.float32).reshape(2, 8)
    want = ort.InferenceSession(model.SerializeToString(),
                                providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    np.testing.assert_array_equal(LoadedModel(compiled).execute({"x": x})["y"], want)
