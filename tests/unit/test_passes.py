"""The pass manager: order after every pass, timing records, failures named."""

import numpy as np
import pytest

from graphengine.engine.dtypes import DType
from graphengine.engine.errors import InvalidGraph
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
