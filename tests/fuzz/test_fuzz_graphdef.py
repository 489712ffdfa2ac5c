"""GraphDefs (the project's wire IR): valid ones compile and match the reference; mutated
serializations that still parse, and GraphDefs with corrupted fields (dtype codes, dims,
constant data, names, cycles, attributes), import and run or are refused with a domain
error."""

from __future__ import annotations

from google.protobuf.message import DecodeError
from hypothesis import given, reject
from hypothesis import strategies as st

from graphengine.v1 import graph_pb2 as pb

from .mutate import mutated_bytes
from .strategies import (
    assert_close,
    examples,
    import_and_run,
    reference,
    run_session,
    specs,
    time_limit,
    to_graphdef,
)


@examples(60)
@given(spec=specs())
def test_valid_graphdef_matches_reference(session, spec):
    feeds = spec.feeds()
    want = reference(spec, feeds)
    gd = pb.GraphDef.FromString(to_graphdef(spec).SerializeToString())
    with time_limit():
        got = run_session(session, gd, feeds)
    for name, w in want.items():
        assert_close(got[name], w, f"output {name}\n{spec.describe()}")


@examples(150)
@given(data=st.data())
def test_mutated_graphdef_bytes(session, data):
    blob = to_graphdef(data.draw(specs(max_nodes=5))).SerializeToString()
    bad = data.draw(mutated_bytes(blob))
    try:
        gd = pb.GraphDef.FromString(bad)
    except DecodeError:
        reject()  # the gRPC layer refuses bytes that do not parse (test_bad_inputs)
    import_and_run(session, gd, f"mutated GraphDef\n{gd}"[:4000])


_DIMS = [pb.Dim(size=-1), pb.Dim(size=0), pb.Dim(symbol=""), pb.Dim(symbol="b"),
         pb.Dim(size=1 << 16), pb.Dim()]
_HUGE_DIMS = [pb.Dim(size=1 << 40), pb.Dim(size=(1 << 63) - 1)]


@st.composite
def corrupted_graphdefs(draw):
    gd = to_graphdef(draw(specs(max_nodes=5)))
    for _ in range(draw(st.integers(1, 2))):
        what = draw(st.sampled_from(["input_dtype", "input_dim", "unknown_rank", "const_data",
                                     "const_shape", "const_dtype", "const_name", "node_input",
                                     "node_output", "cycle", "attr", "op", "output",
                                     "duplicate_node", "output_desc"]))
        node = draw(st.sampled_from(list(gd.nodes)))
        if what == "input_dtype":
            gd.inputs[0].dtype = draw(st.sampled_from([0, 2, 3, 6, 7, 9, 13, 14, 99]))
        elif what == "input_dim":
            dims = _DIMS + _HUGE_DIMS
            if gd.inputs[0].shape:
                k = draw(st.integers(0, len(gd.inputs[0].shape) - 1))
                gd.inputs[0].shape[k].CopyFrom(draw(st.sampled_from(dims)))
            else:
                gd.inputs[0].shape.append(draw(st.sampled_from(dims)))
        elif what == "unknown_rank":
            gd.inputs[0].unknown_rank = True
            if draw(st.booleans()):
                del gd.inputs[0].shape[:]
        elif what.startswith("const") and gd.constants:
            t = draw(st.sampled_from(list(gd.constants)))
            if what == "const_data":
                t.data = t.data[:draw(st.integers(0, max(0, len(t.data) - 1)))] + draw(
                    st.binary(max_size=3))
            elif what == "const_shape":
                t.shape.append(draw(st.sampled_from([-1, 0, 2, 1 << 40])))
            elif what == "const_dtype":
                t.dtype = draw(st.sampled_from([0, 2, 7, 9, 13, 14, 99]))
            else:
                t.name = draw(st.sampled_from(["", gd.inputs[0].name, node.outputs[0]]))
        elif what == "node_input" and node.inputs:
            node.inputs[draw(st.integers(0, len(node.inputs) - 1))] = draw(st.sampled_from(
                ["", "ghost", node.outputs[0], gd.nodes[-1].outputs[0]]))
        elif what == "node_output":
            node.outputs[0] = draw(st.sampled_from(["", gd.inputs[0].name, "dup"]))
        elif what == "cycle" and node.inputs:
            node.inputs[0] = gd.nodes[-1].outputs[0]
        elif what == "attr":
            key = draw(st.sampled_from([*node.attrs, "axis", "bogus", "perm"]))
            node.attrs[key].CopyFrom(draw(st.sampled_from([
                pb.AttrValue(), pb.AttrValue(i=1 << 62), pb.AttrValue(i=-99), pb.AttrValue(s="x"),
                pb.AttrValue(f=float("nan")), pb.AttrValue(ints=pb.AttrValue.Ints(values=[])),
                pb.AttrValue(ints=pb.AttrValue.Ints(values=[1 << 40, -1])),
                pb.AttrValue(floats=pb.AttrValue.Floats(values=[1.5])),
                pb.AttrValue(strings=pb.AttrValue.Strings(values=["a", "b"])),
                pb.AttrValue(tensor=pb.Tensor(dtype=7, shape=[2], data=b"\0" * 16)),
                pb.AttrValue(tensor=pb.Tensor(dtype=99, shape=[-1], data=b"")),
            ])))
        elif what == "op":
            node.op_type = draw(st.sampled_from(["", "NoSuch", "If", "Loop", "Constant",
                                                 "OfflineModel", "EltwiseChain",
                                                 "FusedAttention", "TransData", "Split"]))
        elif what == "output":
            gd.outputs.append(pb.TensorDesc(name=draw(st.sampled_from(
                ["", "ghost", gd.inputs[0].name]))))
        elif what == "output_desc":
            gd.outputs[0].dtype = draw(st.sampled_from([2, 7, 99]))
            gd.outputs[0].shape.append(pb.Dim(size=-5))
        elif what == "duplicate_node":
            gd.nodes.append(pb.NodeDef().FromString(node.SerializeToString()))
    return gd


@examples(240)
@given(gd=corrupted_graphdefs())
def test_corrupted_graphdef(session, gd):
    import_and_run(session, gd, f"corrupted GraphDef\n{gd}"[:4000])
