"""What every fusion row shares: the row type and the matching helpers.

A row matches at a pattern's last node and rewrites in place. Fusions act only inside one
device partition (`on_device`), on values nothing else reads (`sole_producer`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from ...ir import Engine, Graph, Node, Value
from ...target import Target


@dataclasses.dataclass(frozen=True)
class Fusion:
    name: str
    # match(graph, node) -> a context for rewrite, or None; `node` is the pattern's last node.
    match: Callable[[Graph, Node], object | None]
    rewrite: Callable[[Graph, Node, object], str]  # returns a description
    # Rows that must run before this one (checked by the driver, fusion/__init__.py): the
    # table's order is a contract, not a comment.
    after: tuple[str, ...] = ()
    # What the row needs of the target (engine/target.py), e.g. a fused kernel; None: nothing.
    requires: Callable[[Target], bool] | None = None
    # The kernel op types the row creates: a target that does not run one of them skips the
    # row, since its nodes were placed on the device before fusion and must stay runnable.
    produces: tuple[str, ...] = ()
    # A row that looks at the whole graph at once (regions, not patterns at one node):
    # whole_graph(graph) rewrites and returns a description per fusion; match and rewrite
    # are then unused.
    whole_graph: Callable[[Graph], list[str]] | None = None


def on_device(*nodes: Node) -> bool:
    part = nodes[0].meta.partition
    return all(n.meta.engine is Engine.DEVICE and n.meta.partition == part for n in nodes)


def sole_producer(graph: Graph, v: Value | None, op_types: set[str]) -> Node | None:
    """The producer of v when it is one of op_types and v has no other reader."""
    if v is None or v.producer is None or v.producer.op_type not in op_types:
        return None
    if len(v.users) != 1 or v in graph.outputs or len(v.producer.outputs) != 1:
        return None
    return v.producer


# Nodes that only relabel their input's elements (the runtime makes them aliases): an
# elementwise epilogue commutes with them.
VIEWS = frozenset({"Reshape", "Flatten", "Squeeze", "Unsqueeze"})


# Views an epilogue looks through: a chain of them is still a relabelling (magika's
# convolution, run along W, is reshaped back to [N, C, H, 1] and then squeezed).
_MAX_VIEW_CHAIN = 4


def producer_through_view(graph: Graph, v: Value | None, op_types: set[str]
                          ) -> tuple[Node, Node | None] | None:
    """(producer, None) when v's sole producer is one of op_types; (producer, view) when v
    is a view (Reshape, ...) of such a producer's output, or a view of a view (up to
    `_MAX_VIEW_CHAIN`), each link the only reader of the one before (GPT-2's Gemm ->
    Reshape -> activation); `view` is the last view, the one that makes v. Else None."""
    p = sole_producer(graph, v, op_types)
    if p is not None:
        return p, None
    last = view = sole_producer(graph, v, set(VIEWS))
    for _ in range(_MAX_VIEW_CHAIN):
        if view is None:
            return None
        p = sole_producer(graph, view.input(0), op_types)
        if p is not None:
            return (p, last) if on_device(p, last) else None
        view = sole_producer(graph, view.input(0), set(VIEWS))
    return None


def absorb_through_view(graph: Graph, keep: Node, view: Node | None, gone: Node) -> None:
    """absorb(), where `gone` (elementwise) reads keep's output through `view`: keep now
    computes gone's function, the view relabels that, and the view's output takes over
    gone's readers and name."""
    if view is None:
        absorb(graph, keep, gone)
        return
    out, vout = gone.outputs[0], view.outputs[0]
    graph.replace_all_uses(out, vout)
    graph.remove_node(gone)
    rename_output(graph, vout, out.name)
    keep.meta.fused = keep.meta.fused + (gone.name,) + gone.meta.fused


def absorb(graph: Graph, keep: Node, gone: Node) -> None:
    """`gone` read only keep's output; keep now produces gone's output value."""
    out = gone.outputs[0]
    old = keep.outputs[0]
    gone.set_inputs([])
    # keep takes over gone's output so names of graph outputs and readers stay stable.
    graph.nodes.remove(gone)
    graph._node_names.discard(gone.name)
    gone.graph = None  # type: ignore[assignment]
    out.producer, out.index = keep, 0
    keep.outputs[0] = out
    if old.name in graph.values and old is not out:
        del graph.values[old.name]
    keep.meta.fused = keep.meta.fused + (gone.name,) + gone.meta.fused


def become(node: Node, op_type: str, inputs: list[Value | None], attrs: dict) -> None:
    """`node` turns into a node of `op_type` (a fused kernel's op) in place: its name, place
    in the graph, output and meta stay; its inputs and attributes are the new op's."""
    node.op_type = op_type
    node.attrs = dict(attrs)
    node.set_inputs(inputs)


def replace_region(graph: Graph, last: Node, nodes: list[Node], op_type: str,
                   inputs: list[Value], attrs: dict) -> Node:
    """One `op_type` node takes over what `nodes` (ending in `last`, read from outside only
    through last's output) computed: their readers, their output name, their names (and what
    they had absorbed) as `meta.fused`."""
    out = last.outputs[0]
    node = graph.add_node(op_type, inputs, attrs=attrs, name=graph.unique_name(op_type.lower()),
                          after=last)
    node.meta.engine, node.meta.partition = last.meta.engine, last.meta.partition
    node.outputs[0].meta = out.meta
    graph.replace_all_uses(out, node.outputs[0])
    for n in reversed(nodes):
        graph.remove_node(n)
    rename_output(graph, node.outputs[0], out.name)
    # what the region's nodes had absorbed themselves is this node's too
    node.meta.fused = tuple(name for n in nodes for name in (n.name, *n.meta.fused))
    return node


def rename_output(graph: Graph, v: Value, name: str) -> None:
    if name in graph.values:
        return
    del graph.values[v.name]
    v.name = name
    graph.values[name] = v


def const_close(v: Value | None, target: float) -> bool:
    return (v is not None and v.is_constant and v.const.size == 1
            and abs(float(v.const.reshape(())) - target) < 1e-4 * max(1.0, abs(target)))


def other(node: Node, v: Value) -> Value | None:
    a, b = node.input(0), node.input(1)
    return b if a is v else a if b is v else None
