"""ONNX models as bytes: mutated serializations (bit flips, truncation, inserted and deleted
runs) and structurally corrupted protos (types, dims, initializers, attributes, opsets,
names, local functions) either import and run, or are refused with a domain error."""

from __future__ import annotations

import copy

from hypothesis import given
from hypothesis import strategies as st
from onnx import AttributeProto, TensorProto, helper

from .mutate import mutated_bytes
from .strategies import (
    examples,
    import_and_run,
    specs,
    to_onnx,
)


@st.composite
def onnx_blobs(draw):
    return to_onnx(draw(specs(max_nodes=5))).SerializeToString()


@examples(180)
@given(data=st.data())
def test_mutated_onnx_bytes(session, data):
    blob = data.draw(onnx_blobs())
    bad = data.draw(mutated_bytes(blob))
    import_and_run(session, bad, f"mutated ONNX bytes ({len(bad)} of {len(blob)} bytes)")


# ---- structural corruption ------------------------------------------------------------------
def _corrupt_type(draw, vi) -> None:
    tt = vi.type.tensor_type
    how = draw(st.sampled_from(["elem", "dim", "dim", "no_shape", "param", "kind"]))
    if how == "elem":
        tt.elem_type = draw(st.sampled_from([0, 2, 7, 8, 9, 14, 16, 17, 21, 23, 25, 99]))
    elif how == "dim" and tt.shape.dim:
        d = draw(st.sampled_from(list(tt.shape.dim)))
        huge = [1 << 16, 1 << 31, 1 << 40, (1 << 63) - 1]
        d.dim_value = draw(st.sampled_from([0, -1, -7, *huge]))
    elif how == "no_shape":
        tt.ClearField("shape")
    elif how == "param" and tt.shape.dim:
        d = draw(st.sampled_from(list(tt.shape.dim)))
        d.dim_param = draw(st.sampled_from(["", "batch", "x" * 300, "\x00", "2*b", "-1"]))
    elif how == "kind":
        vi.type.ClearField("tensor_type")
        vi.type.sequence_type.elem_type.tensor_type.elem_type = TensorProto.FLOAT


def _corrupt_initializer(draw, t) -> None:
    how = draw(st.sampled_from(["dims", "dims", "dtype", "raw", "float_data", "external",
                                "segment", "int64_data"]))
    if how == "dims":
        dims = list(t.dims) or [1]
        i = draw(st.integers(0, len(dims) - 1))
        dims[i] = draw(st.sampled_from([0, -1, dims[i] + 1, 1 << 40, (1 << 63) - 1]))
        del t.dims[:]
        t.dims.extend(dims)
    elif how == "dtype":
        t.data_type = draw(st.sampled_from([0, 2, 6, 8, 10, 11, 16, 99]))
    elif how == "raw":
        n = len(t.raw_data)
        t.raw_data = t.raw_data[:draw(st.integers(0, max(0, n - 1)))] if n else b"\x01\x02\x03"
    elif how == "float_data":
        raw = t.raw_data
        t.ClearField("raw_data")
        t.float_data.extend([1.0] * draw(st.integers(0, max(0, len(raw) // 4 + 2))))
    elif how == "int64_data":
        t.ClearField("raw_data")
        t.int64_data.extend([1 << 40, -5])
    elif how == "external":
        t.ClearField("raw_data")
        t.data_location = TensorProto.EXTERNAL
        for k, v in draw(st.sampled_from([
                [("location", "missing.bin")], [("location", "../../../etc/passwd")],
                [("location", "/etc/hostname")], [("location", "w.bin"), ("offset", "-4")],
                [("location", "w.bin"), ("length", "99999999999")], []])):
            entry = t.external_data.add()
            entry.key, entry.value = k, v
    elif how == "segment":
        t.segment.begin = 3
        t.segment.end = 1


def _corrupt_attribute(draw, node) -> None:
    if not node.attribute:
        a = node.attribute.add()
        a.name = draw(st.sampled_from(["axis", "perm", "bogus"]))
        a.type = AttributeProto.INT
        a.i = 1 << 40
        return
    a = draw(st.sampled_from(list(node.attribute)))
    how = draw(st.sampled_from(["type", "type", "value", "empty", "graph", "ref"]))
    if how == "type":  # the declared type says something the fields do not carry
        # A closed enum: 99 cannot be set here (mutated bytes carry such values).
        a.type = draw(st.sampled_from([0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 11, 13]))
    elif how == "value":
        if a.ints:
            a.ints[draw(st.integers(0, len(a.ints) - 1))] = draw(st.sampled_from(
                [-(1 << 62), -1, 0, 1 << 40, 99]))
        else:
            a.i = draw(st.sampled_from([-(1 << 62), -9, 1 << 40, 99]))
            a.f = draw(st.sampled_from([float("nan"), float("inf"), -1e30]))
    elif how == "empty":
        a.ClearField("ints")
        a.ClearField("i")
        a.ClearField("f")
        a.ClearField("s")
    elif how == "graph":
        a.type = AttributeProto.GRAPH
        a.g.name = "body"
    elif how == "ref":
        a.ref_attr_name = "outer"


@st.composite
def corrupted_models(draw):
    model = to_onnx(draw(specs(max_nodes=5)))
    g = model.graph
    for _ in range(draw(st.integers(1, 2))):
        what = draw(st.sampled_from(["input_type", "output_type", "initializer", "attribute",
                                     "opset", "ir_version", "node_io", "op", "function",
                                     "duplicate", "domain"]))
        if what == "input_type":
            _corrupt_type(draw, draw(st.sampled_from(list(g.input))))
        elif what == "output_type":
            _corrupt_type(draw, draw(st.sampled_from(list(g.output))))
        elif what == "initializer" and g.initializer:
            _corrupt_initializer(draw, draw(st.sampled_from(list(g.initializer))))
        elif what == "attribute":
            _corrupt_attribute(draw, draw(st.sampled_from(list(g.node))))
        elif what == "opset":
            old = [1, 6, 10]
            model.opset_import[0].version = draw(st.sampled_from([0, *old, 12, 29, 1 << 40,
                                                                  -3]))
        elif what == "ir_version":
            model.ir_version = draw(st.sampled_from([1, 3, 99, 1 << 40]))
        elif what == "node_io":
            node = draw(st.sampled_from(list(g.node)))
            field = node.input if draw(st.booleans()) or not node.output else node.output
            if field:
                field[draw(st.integers(0, len(field) - 1))] = draw(st.sampled_from(
                    ["", "ghost", g.node[-1].output[0], g.input[0].name]))
        elif what == "op":
            node = draw(st.sampled_from(list(g.node)))
            node.op_type = draw(st.sampled_from(["", "NoSuch", "If", "Loop", "Scan", "Split",
                                                 "Constant", "Resize", "TopK"]))
        elif what == "domain":
            draw(st.sampled_from(list(g.node))).domain = draw(st.sampled_from(
                ["com.microsoft", "ai.onnx.ml", "local", "x" * 100]))
        elif what == "duplicate":
            g.node.append(copy.deepcopy(draw(st.sampled_from(list(g.node)))))
        elif what == "function":
            _add_function(draw, model)
    return model.SerializeToString()


def _add_function(draw, model) -> None:
    """A local function called by a node; maybe calling itself (directly or in a pair)."""
    recursive = draw(st.sampled_from(["none", "self", "pair"]))
    callee = "F" if recursive != "pair" else "G"
    f_nodes = [helper.make_node(callee if recursive != "none" else "Relu", ["a"], ["b"],
                                domain="local" if recursive != "none" else "")]
    funcs = [helper.make_function("local", "F", ["a"], ["b"], f_nodes,
                                  [helper.make_opsetid("", 18), helper.make_opsetid("local", 1)])]
    if recursive == "pair":
        funcs.append(helper.make_function(
            "local", "G", ["a"], ["b"], [helper.make_node("F", ["a"], ["b"], domain="local")],
            [helper.make_opsetid("", 18), helper.make_opsetid("local", 1)]))
    model.functions.extend(funcs)
    model.opset_import.append(helper.make_opsetid("local", 1))
    g = model.graph
    last = g.node[-1].output[0]
    g.node.append(helper.make_node("F", [last], ["f_out"], domain="local"))
    g.output[0].name = "f_out"


@examples(240)
@given(blob=corrupted_models())
def test_corrupted_onnx_model(session, blob):
    import_and_run(session, blob, "corrupted ONNX model")


@examples(45)
@given(depth=st.integers(1, 3000), kind=st.sampled_from(["If", "Identity"]))
def test_deep_onnx_models(session, depth, kind):
    """A chain of `depth` nodes, or Ifs nested up to 32 deep (protobuf parses 100 levels,
    3 per If; onnx's
    helper itself crashes building much deeper ones): no RecursionError."""
    if kind == "If":
        depth = depth % 32 + 1
    if kind == "Identity":
        nodes = [helper.make_node("Identity", [f"v{k}"], [f"v{k + 1}"]) for k in range(depth)]
        graph = helper.make_graph(
            nodes, "deep", [helper.make_tensor_value_info("v0", TensorProto.FLOAT, [2])],
            [helper.make_tensor_value_info(f"v{depth}", TensorProto.FLOAT, [2])])
    else:
        leaf = body = helper.make_graph(
            [helper.make_node("Identity", ["x"], ["y"])], "leaf", [],
            [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])])
        for k in range(depth):
            node = helper.make_node("If", ["c"], [f"y{k}"], then_branch=body, else_branch=leaf)
            body = helper.make_graph(
                [node], f"b{k}", [], [helper.make_tensor_value_info(f"y{k}", TensorProto.FLOAT,
                                                                    [2])])
        graph = helper.make_graph(
            list(body.node), "deep_if",
            [helper.make_tensor_value_info("c", TensorProto.BOOL, []),
             helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
            list(body.output))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)],
                              ir_version=8)
    import_and_run(session, model.SerializeToString(), f"{kind} x{depth}")
