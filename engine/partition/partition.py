"""Partitioning: merge same-engine nodes into subgraphs without creating a cycle.

Nodes are visited in topological order. A node joins the newest partition of its engine
when every producer it reads sits in that partition or an earlier one; otherwise it
opens a new partition. Executing partitions in index order is then always valid, so the
partition graph is acyclic by construction. Every edge that crosses partitions is a
cut edge: an End in the producing partition paired with a PlaceHolder in the consumer.
"""

from __future__ import annotations

import dataclasses

from ..ir import Engine, Graph, Node, Value
from ..passes import PassResult


@dataclasses.dataclass
class Partition:
    index: int
    engine: Engine
    nodes: list[Node]
    inputs: list[Value]  # PlaceHolders: values read here, produced elsewhere (or inputs)
    outputs: list[Value]  # Ends: values produced here, read elsewhere (or graph outputs)


def partition_graph(graph: Graph) -> PassResult:
    part_of: dict[Node, int] = {}
    engines: list[Engine] = []
    latest: dict[Engine, int] = {}
    for node in graph.nodes:
        engine = node.meta.engine
        assert engine is not None, f"node {node.name} was not placed"
        deps = [part_of[v.producer] for v in node.inputs
                if v is not None and v.producer is not None]
        newest = max(deps, default=-1)
        target = latest.get(engine)
        if target is None or target < newest:
            target = len(engines)
            engines.append(engine)
            latest[engine] = target
        part_of[node] = target
        node.meta.partition = target
    parts = collect_partitions(graph)
    detail = f"{len(parts)} partitions: " + ", ".join(
        f"#{p.index} {p.engine.value}({len(p.nodes)})" for p in parts)
    return PassResult(graph, True, detail)


def collect_partitions(graph: Graph) -> list[Partition]:
    """The partitions as recorded in node.meta.partition, with their cut edges."""
    part_of = {n: n.meta.partition for n in graph.nodes}
    parts: dict[int, Partition] = {}
    for n in graph.nodes:
        if n.meta.partition not in parts:
            parts[n.meta.partition] = Partition(n.meta.partition, n.meta.engine, [], [], [])
    graph_outputs = set(graph.outputs)
    for node in graph.nodes:
        p = parts[part_of[node]]
        p.nodes.append(node)
        for v in node.inputs:
            if v is None or v.is_constant:
                continue
            if (v.producer is None or part_of[v.producer] != p.index) and v not in p.inputs:
                p.inputs.append(v)
        for out in node.outputs:
            if out in graph_outputs or any(part_of[u] != p.index for u in out.users):
                p.outputs.append(out)
    return [parts[i] for i in sorted(parts)]
