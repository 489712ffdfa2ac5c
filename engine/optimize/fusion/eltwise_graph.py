"""Fusion row: regions of elementwise ops become one EltwiseGraph kernel (a DAG, not a chain).

The chain row fuses a run of ops each reading the previous one's output. Many elementwise
regions are not runs: RWKV's WKV recurrence unrolled over the sequence is ~20 ops a step on
[B, 128] vectors whose values are read two or three times (a running max, exponentials of
differences, numerator and denominator), a softcapped or gated expression joins two branches,
an update writes several values at once. Run one op a task, each pays a dispatch and a pass
over memory for a few hundred floats of work (RWKV-4: 1,014 of its 1,261 tasks).

A region is a set of device nodes of one partition whose ops the kernel has (`ARITY`),
float32, each output of one shape (the domain), connected by the values they pass, and
convex: no path leaves it and comes back (its fused node would both feed and read the node
on the way). Inputs from outside have the domain's shape, one element, or a broadcast whose
non-unit axes are one contiguous run of the domain's ([C] of [N, L, C], [N, 1] of [N, L]).
The row grows regions over the nodes in order, each joining the regions of its producers
when the union stays convex (ancestor sets as bitsets), and rewrites each region that is
not a plain chain (left to the chain row, whose oneDNN post-op kernel reads large chains
as fast) into one node with an output per value read outside it.

A domain of a rank the graph's convolutions have may be stored in their format by the layout
pass, which places a fused node by its single output: there a region has one output and
only inputs of the domain's shape, constant scalars or per-channel operands (any format
then).
"""

from __future__ import annotations

import numpy as np

from ...dtypes import DType
from ...ir import Graph, Node, Value
from ...ops import registry
from ...ops.eltwise_graph import ARITY, GRAPH_ONLY, MAX_INSTRUCTIONS, TRIG
from ...ops.registry import Layout
from ..formats import broadcast_runs, layout_of, per_channel, pixel_map, stored_broadcast, unit_view
from .eltwise import _step, match_chain
from .match import Fusion, on_device, rename_output

_MAX_NODES = 2048  # a region's size (its inputs then fit the kernel's bounds)
_MAX_CHECKS = 256  # outside nodes a merge's convexity check looks at before giving up


def _f32(v: Value | None) -> bool:
    return v is not None and v.meta is not None and v.meta.is_static and \
        v.meta.dtype is DType.FLOAT32


def _instruction(node: Node) -> tuple[str, list[Value], float, float] | None:
    """node as an instruction: its kernel op, data inputs, alpha and beta; or None."""
    op = node.op_type
    if op not in ARITY or op == "GeluTanh" or len(node.outputs) != 1 or not _f32(node.outputs[0]):
        return None
    if ARITY[op] == 2:
        if len(node.inputs) != 2 or not all(_f32(v) for v in node.inputs):
            return None
        return op, list(node.inputs), 0.0, 0.0
    x = node.input(0)
    if not _f32(x):
        return None
    if op == "Pow":
        e = node.input(1)
        if len(node.inputs) != 2 or e is None or not e.is_constant or np.asarray(e.const).size != 1:
            return None
        return op, [x], float(np.asarray(e.const).reshape(-1)[0]), 0.0
    if op in GRAPH_ONLY:
        alpha, beta = GRAPH_ONLY[op][0](registry.get(op).attrs_of(node))
        return op, [x], float(alpha), float(beta)
    if op in TRIG:
        return op, [x], 0.0, 0.0
    step = _step(node)
    if step is None:
        return None
    return step.op, [x], step.alpha, step.beta


def _outside_ok(v: Value, out: Value, strict: bool) -> str | None:
    """Whether v may be a region input of a domain shaped like `out`: "any" where it is fine
    in every format (the domain's shape, a constant scalar, or a per-channel [N|1, C, 1, 1]:
    the layout pass hands it to the kernel plain, which reads it against the domain stored
    plain, NHWC or blocked), "plain" where it is fine plain only, else None. `strict`: the
    domain's rank is one convolutions have, so the layout pass may keep it in their format;
    there a scalar the graph computes is no region input, a broadcast the kernel reads
    stored NHWC as well as plain (`stored_broadcast`: coordinate attention's [N, C, H, 1]
    gates, a per-pixel map) is fine for an NHWC region ("any": a blocked one keeps the region
    plain), and another broadcast makes its reader plain, as it would be unfused. (MicroNet's
    dynamic shift-max: four per-channel products of a value and its channel roll, two sums and
    a max, were four oneDNN binaries and a region.)"""
    shape, domain = tuple(v.meta.shape), tuple(out.meta.shape)
    if shape == domain or (v.is_constant and v.meta.numel == 1) or per_channel(v, out):
        return "any"  # (per-channel: read plain against every unpadded format)
    if strict and stored_broadcast(v, out):
        return "any"
    if strict and (v.meta.numel == 1 or pixel_map(v, out)):
        return None
    return "plain" if broadcast_runs(shape, domain) is not None else None


def _convolution_ranks(graph: Graph) -> set[int]:
    """Ranks of the outputs of the graph's convolution-like nodes: where layout regions may
    store values in another format than plain. A convolution reading a unit-axis view of a
    rank-3 signal (a 1-D convolution as the 2-D one of [N, C, 1, L]) adds rank 3: the layout
    keeps the signal channels-last around it."""
    ranks: set[int] = set()
    for n in graph.nodes:
        if layout_of(n) is not Layout.CONV or not n.outputs or n.outputs[0].meta is None \
                or n.outputs[0].meta.rank is None:
            continue
        ranks.add(n.outputs[0].meta.rank)
        x = n.input(0)
        if x is not None and x.producer is not None and unit_view(x.producer):
            ranks.add(x.producer.inputs[0].meta.rank)  # the signal the view reads
        ranks.update(u.outputs[0].meta.rank for u in n.outputs[0].users if unit_view(u))
    return ranks


class _Region:
    __slots__ = ("nodes", "bits", "anc", "domain", "first", "plain")

    def __init__(self, node: Node, bit: int, anc: int, index: int, plain: bool) -> None:
        self.nodes = [node]
        self.bits = bit
        self.anc = anc
        self.domain = tuple(node.outputs[0].meta.shape)
        self.first = index
        self.plain = plain  # (at a convolution rank) every member reads a broadcast


def _convex(bits: int, outside: int, first: int, ancestors: list[int]) -> bool:
    """Whether none of the `outside` nodes (ancestors of members, not members) descends from
    a member (`bits`); only nodes after the first member can."""
    outside >>= first
    checked = 0
    while outside:
        low = outside & -outside
        i = low.bit_length() - 1 + first
        if ancestors[i] & bits:
            return False
        checked += 1
        if checked > _MAX_CHECKS:
            return False
        outside ^= low
    return True


def find_regions(graph: Graph, instructions: dict[Node, tuple] | None = None
                 ) -> list[list[Node]]:
    """The convex elementwise regions of two or more nodes, each in graph order
    (`instructions`, when given, gets each candidate's `_instruction`)."""
    instructions = {} if instructions is None else instructions
    graph.toposort()
    strict = _convolution_ranks(graph)
    index = {n: i for i, n in enumerate(graph.nodes)}
    ancestors: list[int] = []
    region_of: dict[Node, _Region] = {}
    for i, n in enumerate(graph.nodes):
        anc = 0
        for v in n.inputs:
            if v is not None and v.producer is not None:
                p = index[v.producer]
                anc |= ancestors[p] | (1 << p)
        ancestors.append(anc)
        got = _instruction(n) if on_device(n) else None
        if got is None:
            continue
        out = n.outputs[0]
        domain = tuple(out.meta.shape)
        kinds = [_outside_ok(v, out, len(domain) in strict) for v in got[1]]
        if None in kinds:
            continue  # (a member's output has the domain's shape: always fine)
        # At a convolution rank a region is all members the layout could keep in the
        # region's format, or all members that read a broadcast (plain either way).
        plain = len(domain) in strict and "plain" in kinds
        instructions[n] = got
        joined = list(dict.fromkeys(
            region_of[v.producer] for v in got[1]
            if v.producer in region_of and region_of[v.producer].domain == domain
            and region_of[v.producer].plain == plain and on_device(v.producer, n)))
        bit = 1 << i
        choice: list[_Region] = []
        attempts = [joined] + [[r] for r in sorted(joined, key=lambda r: -len(r.nodes))] \
            if len(joined) > 1 else [joined]
        for group in attempts:
            if not group or sum(len(r.nodes) for r in group) >= _MAX_NODES:
                continue
            bits = bit
            anc_u = anc
            first = i
            for r in group:
                bits |= r.bits
                anc_u |= r.anc
                first = min(first, r.first)
            # One convex region and the node: only the node's new outside ancestors can close
            # a path (an older one precedes the node, so descends from it only through the
            # region, which its own check ruled out). Merged regions: every outside ancestor.
            outside = (anc & ~group[0].anc if len(group) == 1 else anc_u) & ~bits
            if _convex(bits, outside, first, ancestors):
                choice = group
                break
        if not choice:
            region_of[n] = _Region(n, bit, anc, i, plain)
            continue
        keep = choice[0]
        for r in choice[1:]:
            keep.nodes += r.nodes
            keep.bits |= r.bits
            keep.anc |= r.anc
            keep.first = min(keep.first, r.first)
            for m in r.nodes:
                region_of[m] = keep
        keep.nodes.append(n)
        keep.bits |= bit
        keep.anc |= anc
        region_of[n] = keep
    regions = {id(r): r for r in region_of.values()}.values()
    found = [(sorted(r.nodes, key=index.__getitem__), r.plain) for r in regions
             if len(r.nodes) > 1]
    return _without_cycles(graph, [nodes for nodes, plain in found
                                   if _worth_fusing(graph, nodes, strict, plain)])


def _without_cycles(graph: Graph, regions: list[list[Node]]) -> list[list[Node]]:
    """The regions, less those that would close a cycle between fused nodes. Each region is
    convex on its own, but two can still need each other (a1 -> b2 and b1 -> a2 with a1 ->
    a2 and b1 -> b2). The graph with each region contracted to one node must be acyclic:
    while it is not, the smallest region on or between its cycles is left unfused."""
    regions = list(regions)
    while regions:
        group = {n: k for k, r in enumerate(regions) for n in r}
        succ: dict[object, set] = {}
        pred: dict[object, set] = {}
        for n in graph.nodes:
            k = group.get(n, n)
            succ.setdefault(k, set())
            pred.setdefault(k, set())
            for v in n.inputs:
                if v is not None and v.producer is not None:
                    kp = group.get(v.producer, v.producer)
                    if kp != k:
                        succ.setdefault(kp, set()).add(k)
                        pred[k].add(kp)
        left = set(succ)
        for edges, other in ((pred, succ), (succ, pred)):  # peel sources, then sinks
            count = {k: len(edges[k] & left) for k in left}
            ready = [k for k, c in count.items() if c == 0]
            while ready:
                k = ready.pop()
                left.discard(k)
                for m in other[k]:
                    if m in left:
                        count[m] -= 1
                        if count[m] == 0:
                            ready.append(m)
        cyclic = [k for k in left if isinstance(k, int)]
        if not cyclic:
            return regions
        regions.pop(min(cyclic, key=lambda k: len(regions[k])))
    return regions


def _outputs(graph: Graph, nodes: list[Node]) -> list[Value]:
    """The members' outputs read outside the region (or graph outputs)."""
    members = set(nodes)
    graph_outs = set(graph.outputs)
    return [n.outputs[0] for n in nodes
            if n.outputs[0] in graph_outs or any(u not in members for u in n.outputs[0].users)]


def _worth_fusing(graph: Graph, nodes: list[Node], strict: set[int], plain: bool) -> bool:
    """Not a plain chain the chain row fuses as well (its oneDNN post-op kernel reads large
    chains as fast), and, on a domain of a convolution rank, what the layout pass can place
    (one output) unless it is plain anyway."""
    outs = _outputs(graph, nodes)
    if len(outs) != 1:
        return plain or len(nodes[0].outputs[0].meta.shape) not in strict
    chain = match_chain(graph, nodes[-1])
    return chain is None or set(chain[0]) != set(nodes)


def fuse_region(graph: Graph, nodes: list[Node], instructions: dict[Node, tuple]) -> str:
    members = {n: k for k, n in enumerate(nodes)}
    inputs: list[Value] = []
    slot_of_input: dict[Value, int] = {}
    ops, args, alphas, betas = [], [], [], []
    program = []
    for n in nodes:
        op, _, alpha, beta = instructions[n]
        data = list(n.inputs[:ARITY[n.op_type]])  # now: an earlier region's output replaced one
        for v in data:
            if v.producer not in members and v not in slot_of_input:
                slot_of_input[v] = len(inputs)
                inputs.append(v)
        program.append((op, data, alpha, beta))
    n_in = len(inputs)

    def slot(v: Value) -> int:
        return n_in + members[v.producer] if v.producer in members else slot_of_input[v]

    for op, data, alpha, beta in program:
        ops.append(op)
        s = [slot(v) for v in data]
        args += s + [-1] * (3 - len(s))
        alphas.append(alpha)
        betas.append(beta)
    outs = _outputs(graph, nodes)
    last = nodes[-1]
    fused = graph.add_node("EltwiseGraph", inputs, outputs=len(outs), attrs={
        "ops": ops, "args": args, "alphas": alphas, "betas": betas,
        "results": [slot(v) for v in outs]},
        name=graph.unique_name("eltwise_graph"), after=last)
    fused.meta.engine, fused.meta.partition = last.meta.engine, last.meta.partition
    fused.meta.fused = tuple(name for n in nodes for name in (n.name, *n.meta.fused))
    for new, old in zip(fused.outputs, outs):
        new.meta = old.meta
        graph.replace_all_uses(old, new)
    names = [v.name for v in outs]
    graph.remove_nodes(nodes)
    for new, name in zip(fused.outputs, names):
        rename_output(graph, new, name)
    return f"EltwiseGraph({len(nodes)} ops, {n_in} inputs, {len(outs)} outputs) -> {fused.name}"


def apply(graph: Graph) -> list[str]:
    instructions: dict[Node, tuple] = {}
    return [fuse_region(graph, nodes, instructions)
            for nodes in find_regions(graph, instructions) if len(nodes) <= MAX_INSTRUCTIONS]


ROW = Fusion("eltwise_graph", lambda graph, node: None, lambda graph, node, ctx: "",
             produces=("EltwiseGraph",), whole_graph=apply)
