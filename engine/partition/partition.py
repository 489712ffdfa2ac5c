"""Partitioning: merge same-engine nodes into subgraphs without creating a cycle.

Nodes are visited in topological order. A node joins the newest partition of its engine
when every producer it reads sits in that partition or an earlier one; otherwise it
opens a new partition. Executing partitions in index order is then always valid, so the
partition graph is acyclic by construction. Every edge that crosses partitions is a
cut edge: an End in the producing partition paired with a PlaceHolder in the consumer.

A small device island — a device partition between two host partitions, of at most
ISLAND_NODES nodes that move bytes rather than multiply (no matmul, convolution, attention
or recurrence) and produce at most ISLAND_ELEMENTS elements in total — runs on the host with
its neighbours: a device program's call costs more than numpy's few steps, and each island
splits the host steps around it in two. A mixture-of-experts layer after its NonZero (a
small Mixtral) alternated 26 host and 26 device partitions of shape arithmetic, routing
weights and the picked expert's weight slice, each device call ~4 times a host program's.
"""

from __future__ import annotations

import dataclasses

from ..ir import Engine, Graph, Node, Value
from ..passes import PassResult
from .placement import host_accepts


@dataclasses.dataclass
class Partition:
    index: int
    engine: Engine
    nodes: list[Node]
    inputs: list[Value]  # PlaceHolders: values read here, produced elsewhere (or inputs)
    outputs: list[Value]  # Ends: values produced here, read elsewhere (or graph outputs)


ISLAND_NODES = 16  # nodes of a device island that moves to the host
ISLAND_ELEMENTS = 1 << 18  # elements it may produce in total (1 MB of float32)
# ops whose work grows faster than their bytes: an island with one stays on the device
_COMPUTE = frozenset({"MatMul", "Gemm", "Conv", "ConvTranspose", "ConvDw", "ConvBlock",
                      "ConvHead", "FusedAttention", "LSTM", "GRU", "RNN", "Einsum",
                      "MatMulInteger", "ConvInteger", "QLinearMatMul", "QLinearConv"})


def partition_graph(graph: Graph) -> PassResult:
    _assign(graph)
    moved = 0
    while True:
        islands = _small_islands(graph)
        if not islands:
            break
        for part in islands:
            for node in part.nodes:
                node.meta.engine = Engine.HOST
                node.meta.rejections = (
                    f"device: a small device island between host steps ({_produced(part)} "
                    f"elements) runs on the host with them", *node.meta.rejections)
                moved += 1
        _assign(graph)
    parts = collect_partitions(graph)
    detail = f"{len(parts)} partitions: " + ", ".join(
        f"#{p.index} {p.engine.value}({len(p.nodes)})" for p in parts)
    if moved:
        detail += f"; {moved} nodes of small device islands moved to the host"
    return PassResult(graph, True, detail)


def _produced(part: Partition) -> int:
    return sum(int(v.meta.numel) for n in part.nodes for v in n.outputs)


def _small_islands(graph: Graph) -> list[Partition]:
    """Device partitions with a host partition just before and just after them, at most
    ISLAND_NODES nodes, none of them a _COMPUTE op or one the host declines (a session
    variable's), every value they produce static and ISLAND_ELEMENTS elements or fewer in
    total."""
    parts = collect_partitions(graph)
    found = []
    for i in range(1, len(parts) - 1):
        part = parts[i]
        if part.engine is not Engine.DEVICE or parts[i - 1].engine is not Engine.HOST \
                or parts[i + 1].engine is not Engine.HOST:
            continue
        values = [v for n in part.nodes for v in n.outputs]
        if len(part.nodes) > ISLAND_NODES or any(n.op_type in _COMPUTE for n in part.nodes) \
                or any(v.meta is None or not v.meta.is_static for v in values) \
                or _produced(part) > ISLAND_ELEMENTS \
                or any(host_accepts(n) is not None for n in part.nodes):
            continue
        found.append(part)
    return found


def _assign(graph: Graph) -> None:
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
