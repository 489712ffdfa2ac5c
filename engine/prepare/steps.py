"""A rewrite's chain of new nodes, each placed after the last (canonicalize, einsum)."""

from __future__ import annotations

from collections.abc import Callable

from ..ir import Graph, Node, Value


def chain(graph: Graph, node: Node) -> Callable[..., Value]:
    """``step(op, inputs, **attrs)`` adds a node after the previous one (the first after
    ``node``), named after ``node``, and returns its output."""
    last = [node]

    def step(op: str, ins: list, **attrs) -> Value:
        last[0] = graph.add_node(op, ins, attrs=attrs, name=graph.unique_name(
            f"{node.name}_{op.lower()}"), after=last[0])
        return last[0].outputs[0]
    return step


def replace_outputs(graph: Graph, node: Node, values: dict[int, Value]) -> None:
    """`node`'s outputs (by index) become `values` — readers and graph outputs, a graph
    output keeping its name — and `node` goes."""
    named = []
    for i, value in values.items():
        out = node.outputs[i]
        if out in graph.outputs:
            named.append((out.name, value))
        graph.replace_all_uses(out, value)
    graph.remove_node(node)
    for name, value in named:
        del graph.values[value.name]
        value.name = name
        graph.values[name] = value
