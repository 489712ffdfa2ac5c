"""engine/picture.py: what dump-graph draws, from a compile's graph and from a compiled model
alone (an offline model), on a small ResNet-like graph (tests/unit/picture_models.py)."""

from __future__ import annotations

import numpy as np
import pytest

import graphengine
from graphengine import ops
from graphengine.engine import offline, picture
from graphengine.engine.dtypes import DType
from graphengine.engine.importers import load_model
from graphengine.engine.ir import Graph, TensorMeta
from graphengine.engine.model import DeviceProgram
from graphengine.engine.optimize.fusion.match import replace_region
from graphengine.engine.picture import Kind
from graphengine.engine.pipeline import CompileOptions, compile_graph
from tests.unit.picture_models import HOST_OP, compiled_with_graph, resnet_block


@pytest.fixture(scope="module")
def plan():
    return compiled_with_graph(resnet_block(), max_streams=2)


def test_fused_nodes_list_the_op_types_folded_into_them(plan) -> None:
    pic = picture.from_graph(*plan)
    fused = {n.name: n.fused for n in pic.nodes if n.fused}
    assert fused == {
        "stem/conv": ["Conv", "BatchNormalization", "Relu"],
        "block/conv1": ["Conv", "BatchNormalization", "Relu"],
        "block/conv2": ["Conv", "BatchNormalization", "Relu"],
        "block/downsample": ["Conv", "BatchNormalization"],
        # the residual Add and the Relu after it are the last Conv's epilogue
        "block/conv3": ["Conv", "BatchNormalization", "Add", "Relu"],
    }
    ops_drawn = {n.op for n in pic.nodes}
    assert not ops_drawn & {"BatchNormalization", "Relu", "Add"}  # folded, not drawn


def test_a_fusion_of_a_fusion_lists_every_source_op() -> None:
    """Erf-GELU becomes one Gelu node (replace_region), which the MatMul then absorbs as
    its activation: the MatMul's record names the Erf form's ops, not the Gelu between."""
    rng = np.random.default_rng(1)
    g = graphengine.Graph("gelu_mlp")
    x = g.input("x", np.float32, (4, 8))
    h = ops.Add(ops.MatMul(x, rng.standard_normal((8, 8)).astype(np.float32), name="mm"),
                rng.standard_normal(8).astype(np.float32))
    gelu = ops.Mul(ops.Mul(h, ops.Add(ops.Erf(ops.Div(h, np.float32(np.sqrt(2)))),
                                      np.float32(1))), np.float32(0.5))
    g.output(gelu, name="y")
    pic = picture.from_graph(*compiled_with_graph(g, max_streams=1))
    (mm,) = [n for n in pic.nodes if n.name == "mm"]
    assert mm.op == "MatMul"
    assert mm.fused[:2] == ["MatMul", "Add"]
    assert sorted(mm.fused[2:]) == sorted(["Div", "Erf", "Add", "Mul", "Mul"])
    assert "Gelu" not in mm.fused


def test_partitions_are_the_plans_with_their_engines(plan) -> None:
    graph, compiled = plan
    pic = picture.from_graph(graph, compiled)
    assert [(p.index, p.engine) for p in pic.partitions] == [(0, "device"), (1, "host"),
                                                              (2, "device")]
    host = pic.node("host/half")
    assert (host.partition, host.op, host.stream) == (1, HOST_OP, None)
    assert "no native kernel" in host.detail  # why the device declined
    assert pic.node("fc").partition == 2
    device0 = [p for p in compiled.programs if p.index == 0][0]
    assert pic.partitions[0].tasks == len(device0.tasks)
    assert (pic.partitions[0].streams, pic.partitions[0].events) == (2, 2)


def test_two_streams_and_events_from_the_tasks(plan) -> None:
    graph, compiled = plan
    pic = picture.from_graph(graph, compiled)
    streams = {n.name: n.stream for n in pic.nodes if n.stream is not None}
    assert set(streams.values()) == {0, 1}
    # the downsample branch runs beside the main branch
    assert streams["block/downsample"] != streams["block/conv1"]
    device0 = next(p for p in compiled.programs if p.index == 0)
    waits = [t for t in device0.tasks if t.kind == "wait"]
    assert len(pic.events) == len(waits) == 2
    by_key = {n.key: n for n in pic.nodes}
    data = {(e.src, e.dst) for e in pic.edges}
    for ev in pic.events:
        src, dst = by_key[ev.src], by_key[ev.dst]
        assert src.stream != dst.stream  # an event orders two streams
        # each is the recording task's node and the waiting task's node
        assert any(t.kind == "record" and t.event == ev.event and t.name == src.name
                   for t in device0.tasks)
        assert any(t.kind == "wait" and t.event == ev.event and t.name == dst.name
                   for t in device0.tasks)
        assert (ev.src, ev.dst) in data  # here every event guards a data edge


def test_one_stream_has_no_events() -> None:
    pic = picture.from_graph(*compiled_with_graph(resnet_block(), max_streams=1))
    assert pic.events == []
    assert {n.stream for n in pic.nodes if n.stream is not None} == {0}


def test_layout_conversions_and_views_are_told_apart(plan) -> None:
    pic = picture.from_graph(*plan)
    conversions = {n.op: n.detail for n in pic.nodes if n.kind is Kind.TRANSDATA}
    assert conversions["TransData"] == "nchw -> nhwc"
    views = [n for n in pic.nodes if n.kind is Kind.VIEW]
    assert [n.op for n in views] == ["Flatten"] and views[0].stream is None
    edges = {(e.src, e.dst): e for e in pic.edges}
    conv = pic.node("stem/conv")
    into = [e for (s, d), e in edges.items() if d == conv.key]
    assert [(e.dtype, e.shape, e.format) for e in into] == [("float32", (1, 4, 16, 16),
                                                             "nhwc")]


def test_the_graph_before_stage_3_has_partitions_and_no_plan() -> None:
    kept = {}
    compile_graph(load_model(resnet_block()), CompileOptions(max_streams=2),
                  on_stage=lambda s, g: kept.setdefault(s, g.copy()))
    pic = picture.from_graph(kept["partition"], None, stage="partitioned")
    assert pic.stage == "partitioned" and pic.events == []
    assert [p.engine for p in pic.partitions] == ["device", "host", "device"]
    assert all(n.stream is None and not n.fused for n in pic.nodes)
    assert sum(n.op == "BatchNormalization" for n in pic.nodes) == 5  # nothing fused yet


def _contracted(pic: picture.Picture, drop: set[str]) -> set[tuple[str, str]]:
    """Data edges by node name, with the nodes in `drop` (views) contracted."""
    name = {n.key: (n.kind.value, n.name) if n.kind in (Kind.INPUT, Kind.OUTPUT) else n.name
            for n in pic.nodes}
    preds: dict[str, set[str]] = {}
    for e in pic.edges:
        preds.setdefault(e.dst, set()).add(e.src)

    def sources(key: str) -> set[str]:
        if key not in drop:
            return {key}
        return {s for p in preds.get(key, ()) for s in sources(p)}

    return {(name[s], name[e.dst]) for e in pic.edges if e.dst not in drop
            for s in sources(e.src)}


def test_an_offline_model_draws_the_same_plan(plan) -> None:
    """From the file alone (no graph): the same task nodes, streams, fusions and events, and
    the same data flow once the views (no task) of the exact picture are contracted: the
    arena tells which task wrote the bytes a view reads."""
    graph, compiled = plan
    exact = picture.from_graph(graph, compiled)
    loaded = offline.load(offline.save(compiled))
    assert isinstance(loaded.programs[0], DeviceProgram)
    pic = picture.from_compiled(loaded)
    no_task = {n.key for n in exact.nodes if n.partition is not None and n.stream is None
               and exact.partitions[n.partition].engine == "device"}
    assert {n.op for n in exact.nodes if n.key in no_task} == {"Flatten", "FormatView"}
    ran = [(n.name, n.op, n.stream, n.fused, n.partition) for n in exact.nodes
           if n.key not in no_task]
    assert [(n.name, n.op, n.stream, n.fused, n.partition) for n in pic.nodes] == ran
    assert _contracted(pic, set()) == _contracted(exact, no_task)
    names = {n.key: n.name for n in pic.nodes}
    exact_names = {n.key: n.name for n in exact.nodes}
    assert [(names[e.src], names[e.dst], e.event) for e in pic.events] == \
        [(exact_names[e.src], exact_names[e.dst], e.event) for e in exact.events]
    through_view = [e for e in pic.edges if e.view]
    assert [(names[e.src], names[e.dst]) for e in through_view] == \
        [("GlobalAveragePool_35", "host/half")]
    assert through_view[0].shape == (1, 16)  # the view's own shape


def test_summary_counts(plan) -> None:
    counts = picture.summary(picture.from_graph(*plan))
    assert counts == {"nodes": 11, "partitions": 3, "streams": 2, "events": 2, "fused": 5,
                      "transdata": 2}


def test_a_replaced_region_keeps_what_its_nodes_had_absorbed() -> None:
    """fusion.match.replace_region: the new node's `meta.fused` is the region's nodes and,
    after each, what that node had absorbed before (the record dump-graph and the report
    read)."""
    g = Graph("region")
    x = g.add_input("x", TensorMeta(DType.FLOAT32, (2, 3)))
    a = g.add_node("Neg", [x], name="a")
    b = g.add_node("Abs", [a.outputs[0]], name="b")
    a.meta.fused = ("folded_into_a",)
    for n in (a, b):
        n.outputs[0].meta = x.meta
    g.outputs = [b.outputs[0]]
    node = replace_region(g, b, [a, b], "Relu", [x], {})
    assert node.meta.fused == ("a", "folded_into_a", "b")
    g.lint()
