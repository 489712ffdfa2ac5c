"""The pass manager: order after every pass, timing records, failures named."""

import functools

import numpy as np
import pytest

from graphengine.engine.dtypes import DType
from graphengine.engine.errors import CompilerError, ErrorCode, InvalidGraph
from graphengine.engine.ir import Graph, TensorMeta
from graphengine.engine.passes import PassManager, PassResult, Stage

F32 = DType.FLOAT32


def _graph() -> Graph:
    g = Graph("g")
    x = g.add_input("x", TensorMeta(F32, (2, 3)))
    a = g.add_node("Relu", [x], outputs=["a"], name="a")
    b = g.add_node("Neg", [x], outputs=["b"], name="b")
    g.outputs = [a.outputs[0], b.outputs[0]]
    return g


def _read_later_value(g: Graph) -> PassResult:
    """A rewrite like a residual fusion: node 'a' now reads 'b', which is defined after it."""
    g.node("a").set_inputs([g.values["b"]])
    return PassResult(g, True, "rewired")


def test_the_manager_restores_topological_order_after_a_pass():
    g = _graph()
    with pytest.raises(InvalidGraph):  # the rewrite alone leaves the graph out of order
        _read_later_value(g.copy()).graph.lint()
    out = PassManager(lint=True).run_stage(Stage("s", [_read_later_value]), g)
    assert [n.name for n in out.nodes] == ["b", "a"]
    out.lint()


def test_a_pass_that_changes_nothing_keeps_the_order():
    g = _graph()
    order = [n.name for n in g.nodes]
    pm = PassManager(lint=True)
    out = pm.run_stage(Stage("s", [lambda gr: PassResult(gr, False)]), g)
    assert [n.name for n in out.nodes] == order
    assert [r.changed for r in pm.records] == [False]


def test_a_cycle_made_by_a_pass_is_named_with_the_pass():
    def make_cycle(g: Graph) -> PassResult:
        g.node("b").set_inputs([g.values["a"]])
        g.node("a").set_inputs([g.values["b"]])
        return PassResult(g, True)

    with pytest.raises(InvalidGraph, match="cycle.*in pass make_cycle"):
        PassManager().run_stage(Stage("s", [make_cycle]), _graph())


def test_constants_do_not_count_as_producers():
    g = _graph()
    w = g.add_constant("w", np.ones((2, 3), np.float32))
    g.add_node("Add", [g.values["a"], w], outputs=["c"], name="c")
    g.outputs = [*g.outputs, g.values["c"]]
    out = PassManager(lint=True).run_stage(Stage("s", [_read_later_value]), g)
    names = [n.name for n in out.nodes]
    assert names.index("b") < names.index("a") < names.index("c")


def test_a_stage_repeats_while_a_pass_changes_the_graph_and_stops_at_its_bound():
    calls = []

    def shrinks_three_times(g: Graph) -> PassResult:
        calls.append(len(calls))
        return PassResult(g, len(calls) <= 3, f"round {len(calls)}")

    seen = []
    pm = PassManager(on_pass=lambda stage, record: seen.append((stage, record)))
    pm.run_stage(Stage("fold", [shrinks_three_times], repeat_until_stable=True), _graph())
    assert len(calls) == 4  # three that changed, one that confirmed
    assert [r.changed for r in pm.records] == [True, True, True, False]
    assert seen[0] == ("fold", None)  # the stage's start, then one record per run
    assert [r.detail for _, r in seen[1:]] == ["round 1", "round 2", "round 3", "round 4"]
    calls.clear()
    forever = PassManager()
    forever.run_stage(Stage("loop", [lambda g: PassResult(g, True)], repeat_until_stable=True,
                            max_rounds=5), _graph())
    assert len(forever.records) == 5  # bounded, never endless


def test_a_stage_whose_rounds_run_out_settles_once_and_one_that_converges_does_not():
    def always(g: Graph) -> PassResult:
        return PassResult(g, True, "changed")

    def settle(g: Graph) -> PassResult:
        return PassResult(g, False, "settled")

    pm = PassManager()
    pm.run_stage(Stage("prepare", [always], repeat_until_stable=True, max_rounds=3,
                       settle=settle), _graph())
    assert [r.detail for r in pm.records] == ["changed"] * 3 + ["settled"]
    pm = PassManager()
    pm.run_stage(Stage("prepare", [lambda g: PassResult(g, False, "still")],
                       repeat_until_stable=True, max_rounds=3, settle=settle), _graph())
    assert [r.detail for r in pm.records] == ["still"]


def test_a_stage_stops_once_every_pass_has_run_on_the_graph_without_changing_it():
    # Shape inference fills in the types (a change) at the head of the prepare stage on
    # every compile: the passes after it have already run on that very graph, so only it
    # runs again to confirm, not the whole list.
    def fills_types(g: Graph) -> PassResult:
        return PassResult(g, not any(r.name == "fills_types" for r in pm.records))

    def reads(g: Graph) -> PassResult:
        return PassResult(g, False)

    def looks(g: Graph) -> PassResult:
        return PassResult(g, False)

    pm = PassManager()
    pm.run_stage(Stage("prepare", [fills_types, reads, looks], repeat_until_stable=True),
                 _graph())
    assert [(r.name, r.changed) for r in pm.records] == [
        ("fills_types", True), ("reads", False), ("looks", False), ("fills_types", False)]
    # a change in the middle of the list: the passes before it run again, then it
    calls = []

    def folds_once(g: Graph) -> PassResult:
        calls.append(1)
        return PassResult(g, len(calls) == 1)

    pm = PassManager()
    pm.run_stage(Stage("prepare", [reads, folds_once, looks], repeat_until_stable=True),
                 _graph())
    assert [r.name for r in pm.records] == ["reads", "folds_once", "looks", "reads",
                                            "folds_once"]


def test_a_crashing_pass_is_an_internal_error_naming_the_pass_and_stage():
    def buggy(g: Graph) -> PassResult:
        raise KeyError("oops")

    with pytest.raises(CompilerError, match=r"\[stage opt, graph 'g'\] pass buggy failed: "
                                            r"KeyError: 'oops'") as info:
        PassManager().run_stage(Stage("opt", [buggy]), _graph())
    assert info.value.code is ErrorCode.INTERNAL  # a bug of ours, not the caller's graph


def test_a_domain_error_gets_the_pass_node_and_stage():
    def refuses(g: Graph) -> PassResult:
        raise InvalidGraph("bad shape", node="a")

    with pytest.raises(InvalidGraph, match=r"\[stage prep, graph 'g'\] node 'a': bad shape "
                                           r"\(in pass refuses\)") as info:
        PassManager().run_stage(Stage("prep", [functools.partial(refuses)]), _graph())
    assert info.value.code is ErrorCode.INVALID_ARGUMENT and info.value.stage == "prep"


def test_lint_after_each_pass_catches_a_broken_graph():
    def dangling(g: Graph) -> PassResult:
        g.outputs = [*g.outputs, Graph("other").add_input("z", TensorMeta(F32, (1,)))]
        return PassResult(g, False)

    PassManager(lint=False).run_stage(Stage("s", [dangling]), _graph())  # unchecked
    with pytest.raises(InvalidGraph, match="in pass dangling"):
        PassManager(lint=True).run_stage(Stage("s", [dangling]), _graph())
