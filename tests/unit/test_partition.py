"""Stage 2, partition: placement by an engine list and merging into acyclic partitions with
cut edges, on hand-placed graphs (no device or kernel behind them)."""

from __future__ import annotations

import pytest

from graphengine.engine.dtypes import DType
from graphengine.engine.errors import InvalidGraph
from graphengine.engine.ir import Engine, Graph, TensorMeta
from graphengine.engine.partition import collect_partitions, partition_graph, place_nodes

DEV, HOST = Engine.DEVICE, Engine.HOST


def _chain(engines: str) -> Graph:
    """x -> n0 -> n1 -> ... one Relu per letter (d: device, h: host), each reading the last."""
    g = Graph("chain")
    v = g.add_input("x", TensorMeta(DType.FLOAT32, (2,)))
    for i, e in enumerate(engines):
        node = g.add_node("Relu", [v], outputs=[f"v{i}"], name=f"n{i}")
        node.meta.engine = DEV if e == "d" else HOST
        v = node.outputs[0]
    g.outputs = [v]
    return g


def _parts(g: Graph) -> list[tuple[str, list[str]]]:
    partition_graph(g)
    return [(p.engine.value, [n.name for n in p.nodes]) for p in collect_partitions(g)]


def test_a_chain_alternating_engines_cuts_at_each_change():
    assert _parts(_chain("ddhhd")) == [("device", ["n0", "n1"]), ("host", ["n2", "n3"]),
                                       ("device", ["n4"])]


def test_independent_branches_of_one_engine_share_a_partition():
    g = Graph("branches")
    x = g.add_input("x", TensorMeta(DType.FLOAT32, (2,)))
    a = g.add_node("Relu", [x], outputs=["a"], name="a")
    h = g.add_node("Neg", [x], outputs=["h"], name="h")
    b = g.add_node("Relu", [x], outputs=["b"], name="b")  # after the host node, not reading it
    c = g.add_node("Add", [a.outputs[0], h.outputs[0]], outputs=["c"], name="c")
    for n, e in ((a, DEV), (h, HOST), (b, DEV), (c, DEV)):
        n.meta.engine = e
    g.outputs = [b.outputs[0], c.outputs[0]]
    # b joins a's partition (it reads nothing of the host's); c reads h, so it cannot
    # (partition 0 would then wait for 1, which waits for 0): a new device partition.
    assert _parts(g) == [("device", ["a", "b"]), ("host", ["h"]), ("device", ["c"])]


def test_cut_edges_are_placeholders_and_ends():
    g = _chain("dhd")
    partition_graph(g)
    p0, p1, p2 = collect_partitions(g)
    assert [v.name for v in p0.inputs] == ["x"] and [v.name for v in p0.outputs] == ["v0"]
    assert [v.name for v in p1.inputs] == ["v0"] and [v.name for v in p1.outputs] == ["v1"]
    assert [v.name for v in p2.inputs] == ["v1"] and [v.name for v in p2.outputs] == ["v2"]


def test_partitions_run_in_index_order_without_a_cycle():
    """Every cut edge goes from a lower partition index to a higher one, on a graph whose
    engines alternate along two interleaved chains."""
    g = Graph("woven")
    x = g.add_input("x", TensorMeta(DType.FLOAT32, (2,)))
    left = right = x
    for i in range(6):
        ln = g.add_node("Relu", [left], outputs=[f"l{i}"], name=f"l{i}")
        rn = g.add_node("Add", [right, left], outputs=[f"r{i}"], name=f"r{i}")
        ln.meta.engine = DEV if i % 2 else HOST
        rn.meta.engine = HOST if i % 2 else DEV
        left, right = ln.outputs[0], rn.outputs[0]
    g.outputs = [left, right]
    partition_graph(g)
    for node in g.nodes:
        for v in node.inputs:
            if v is not None and v.producer is not None:
                assert v.producer.meta.partition <= node.meta.partition, (v.name, node.name)


def test_placement_takes_the_first_engine_that_accepts_and_keeps_the_reasons():
    g = _chain("dd")
    place_nodes(g, [(DEV, lambda n: None if n.name == "n0" else "not n0"),
                    (HOST, lambda n: None)])
    assert [(n.meta.engine, n.meta.rejections) for n in g.nodes] == [
        (DEV, ()), (HOST, ("device: not n0",))]
    with pytest.raises(InvalidGraph, match=r"no engine runs node 'n0' \(Relu\): device: never"):
        place_nodes(_chain("d"), [(DEV, lambda n: "never")])


def test_placement_asks_the_kernel_info_store_each_question_once():
    # A network repeats its layers: the same kernel on the same dtypes, shapes and
    # attributes is asked of the runtime once per compile (each answer is a native call, a
    # oneDNN primitive descriptor for a convolution); a different shape is a new question.
    import dataclasses

    from graphengine.engine.target import get as get_target

    target = get_target("host")
    asked = []

    def counting(op, dtypes, shapes, attrs):
        asked.append((op, [tuple(s) for s in shapes]))
        return target.kernel_info(op, dtypes, shapes, attrs)

    g = Graph("repeats")
    v = g.add_input("x", TensorMeta(DType.FLOAT32, (2, 8)))
    for i in range(5):
        node = g.add_node("LeakyRelu", [v], outputs=[f"v{i}"], name=f"n{i}",
                          attrs={"alpha": 0.1})
        node.outputs[0].meta = TensorMeta(DType.FLOAT32, (2, 8))
        v = node.outputs[0]
    odd = g.add_node("LeakyRelu", [v], outputs=["odd"], name="odd", attrs={"alpha": -0.0})
    odd.outputs[0].meta = TensorMeta(DType.FLOAT32, (2, 8))
    g.outputs = [odd.outputs[0]]
    place_nodes(g, target=dataclasses.replace(target, kernel_info=counting))
    assert all(n.meta.engine is DEV for n in g.nodes)
    assert len(asked) == 2  # alpha 0.1 once for five nodes; alpha -0.0 is another question


def _typed_chain(ops: str, shape=(2,)) -> Graph:
    """`_chain` with typed values; letters: d / h a device / host Relu, m a device MatMul."""
    g = Graph("typed")
    v = g.add_input("x", TensorMeta(DType.FLOAT32, shape))
    for i, e in enumerate(ops):
        node = g.add_node("MatMul" if e == "m" else "Relu", [v, v] if e == "m" else [v],
                          outputs=[f"v{i}"], name=f"n{i}")
        node.meta.engine = HOST if e == "h" else DEV
        node.outputs[0].meta = TensorMeta(DType.FLOAT32, shape)
        v = node.outputs[0]
    g.outputs = [v]
    return g


def test_a_small_device_island_between_host_steps_runs_on_the_host():
    # a mixture-of-experts layer: shape arithmetic and routing weights between the host
    # steps after a NonZero alternated 26 host and 26 device partitions
    g = _typed_chain("dhddhdhd")
    partition_graph(g)
    assert [(p.engine.value, [n.name for n in p.nodes]) for p in collect_partitions(g)] == [
        ("device", ["n0"]), ("host", ["n1", "n2", "n3", "n4", "n5", "n6"]), ("device", ["n7"])]
    moved = g.node("n2").meta.rejections[0]
    assert moved.startswith("device: a small device island between host steps"), moved


@pytest.mark.parametrize("ops,shape,why", [
    ("hmh", (4, 4), "a matmul's work grows faster than its bytes"),
    ("hdh", (1024, 512), "half a million elements: a device program's work"),
    ("h" + "d" * 17 + "h", (2,), "more nodes than an island"),
    ("dhd", (2,), "first and last partitions are no islands")])
def test_device_partitions_that_are_no_small_island_stay(ops, shape, why):
    g = _typed_chain(ops, shape)
    partition_graph(g)
    engines = [p.engine.value for p in collect_partitions(g)]
    assert "device" in engines and engines.count("host") == ops.count("h"), why
