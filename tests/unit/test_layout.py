"""Layout assignment: NHWC between convolutions, TransData only at the edges."""

from graphengine.engine.importers import load_model
from graphengine.engine.optimize import layout
from graphengine.engine.passes import PassManager
from graphengine.engine.pipeline import CompileOptions, bind_shapes, stages
from tests import zoo


def optimized(model, monkeypatch):
    monkeypatch.setattr(layout, "_runtime_has_transdata", lambda: True)
    g = bind_shapes(load_model(model), None)
    pm = PassManager(lint=True)
    for stage in stages(CompileOptions(lint=True, layout_format="nhwc")):
        g = pm.run_stage(stage, g)
    return g


def test_resnet_is_nhwc_inside_with_transdata_at_the_boundary_only(monkeypatch):
    g = optimized(zoo.resnet(depths=(1, 1, 1, 1), width=8, image=32, classes=10), monkeypatch)
    tds = [n for n in g.nodes if n.op_type == "TransData"]
    assert len(tds) == 2, [n.name for n in tds]
    first, last = tds
    assert first.inputs[0] in g.inputs and first.attrs["dst_format"] == "nhwc"
    assert last.attrs["dst_format"] == "nchw"
    assert last.outputs[0].users[0].op_type == "Flatten"
    convs = [n for n in g.nodes if n.op_type == "Conv"]
    assert convs and all(c.outputs[0].format == "nhwc" for c in convs)


def test_mobilenet_has_no_inverse_pairs(monkeypatch):
    g = optimized(zoo.mobilenetv2(width_mult=0.35, image=32, classes=10), monkeypatch)
    for n in g.nodes:
        if n.op_type == "TransData":
            producer = n.inputs[0].producer
            assert producer is None or producer.op_type != "TransData"
    assert sum(n.op_type == "TransData" for n in g.nodes) == 2


def test_graph_without_convolutions_keeps_plain_layouts(monkeypatch):
    g = optimized(zoo.mlp(sizes=(8, 16, 4)), monkeypatch)
    assert not any(n.op_type == "TransData" for n in g.nodes)
    assert all(v.format == "" for v in g.values.values())
