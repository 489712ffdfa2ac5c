"""What `graphengine dump-graph` draws: a compiled model's plan as plain data.

A `Picture` holds partitions (engine, streams, events, tasks), nodes (op type, partition,
stream, the op types fusion folded into them, TransData and views told apart), data edges
(each with its tensor's dtype, shape and storage format) and events (record -> wait across
streams). `engine/dot.py` writes it as Graphviz DOT.

Two sources give the same picture:

- `from_graph(graph, compiled)`: the compile's own graph after stage 3 (pipeline's
  `on_stage`) and the CompiledModel it became. Exact: every node, views included, every
  value's meta and format; streams and events come from the programs' tasks (a task carries
  its node's name). Without `compiled` (the graph before stage 3) there are no streams.
- `from_compiled(compiled)`: a CompiledModel alone, e.g. read from an offline model file,
  which keeps no graph. Nodes are what runs (device tasks and host steps). A view runs no
  task: its slot shares bytes with the tensor it views, so the edge through it starts at the
  task that last wrote the arena bytes it lies in before the reader, and says `view`.

Fusion's record is the compile report's (`PlacementRecord.fused`: source op types), so both
sources show it, offline models included.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Iterable

from .dtypes import DType
from .ir import Graph, Value
from .model import CompiledModel, DeviceProgram, HostProgram, TensorSlot

# Layout conversions (optimize/layout.py): TransData reorders bytes, FormatView relabels them.
CONVERSIONS = frozenset({"TransData", "FormatView"})


class Kind(enum.Enum):
    OP = "op"
    TRANSDATA = "transdata"  # a layout conversion inserted by the layout pass
    VIEW = "view"  # no task: the output is the input's bytes
    INPUT = "input"
    OUTPUT = "output"


@dataclasses.dataclass
class Node:
    key: str  # the node's id in the picture
    name: str
    op: str
    kind: Kind = Kind.OP
    partition: int | None = None
    stream: int | None = None
    fused: list[str] = dataclasses.field(default_factory=list)  # source op types, in order
    detail: str = ""  # a conversion's formats, a host node's reason


@dataclasses.dataclass
class Edge:
    src: str
    dst: str
    tensor: str
    dtype: str = ""
    shape: tuple | None = None
    format: str = ""
    view: bool = False  # reaches dst through a view (from_compiled)


@dataclasses.dataclass
class Event:
    src: str  # the node whose task records it
    dst: str  # the node whose task waits for it
    partition: int
    event: int


@dataclasses.dataclass
class Partition:
    index: int
    engine: str
    streams: int = 0
    events: int = 0
    tasks: int = 0
    arena_bytes: int = 0


@dataclasses.dataclass
class Picture:
    name: str
    stage: str  # "compiled" or "partitioned" (before stage 3)
    backend: str = ""
    partitions: list[Partition] = dataclasses.field(default_factory=list)
    nodes: list[Node] = dataclasses.field(default_factory=list)
    edges: list[Edge] = dataclasses.field(default_factory=list)
    events: list[Event] = dataclasses.field(default_factory=list)

    def node(self, name: str) -> Node:
        for n in self.nodes:
            if n.name == name and n.kind not in (Kind.INPUT, Kind.OUTPUT):
                return n
        raise KeyError(name)


def _conversion_detail(op: str, attrs: dict) -> str:
    src, dst = attrs.get("src_format", ""), attrs.get("dst_format", "")
    return f"{src} -> {dst}" if src or dst else ""


def _partitions(compiled: CompiledModel | None, engines: dict[int, str]) -> list[Partition]:
    parts = {i: Partition(i, e) for i, e in engines.items()}
    for prog in compiled.programs if compiled else ():
        p = parts.setdefault(prog.index, Partition(prog.index, _engine(prog)))
        if isinstance(prog, DeviceProgram):
            p.streams, p.events = prog.num_streams, prog.num_events
            p.tasks, p.arena_bytes = len(prog.tasks), prog.arena_bytes
        else:
            p.tasks = len(prog.steps)
    return [parts[i] for i in sorted(parts)]


def _engine(prog: DeviceProgram | HostProgram) -> str:
    return "device" if isinstance(prog, DeviceProgram) else "host"


def _fused(compiled: CompiledModel | None) -> dict[str, list[str]]:
    if compiled is None:
        return {}
    return {p.node: list(p.fused) for p in compiled.report.placements if p.fused}


def _rejections(compiled: CompiledModel | None) -> dict[str, str]:
    if compiled is None:
        return {}
    return {p.node: "; ".join(p.rejections) for p in compiled.report.placements
            if p.engine != "device" and p.rejections}


def _task_streams(compiled: CompiledModel | None) -> dict[str, int]:
    """Node name -> the stream its task runs on (kernel and copy tasks)."""
    streams: dict[str, int] = {}
    for prog in compiled.programs if compiled else ():
        if isinstance(prog, DeviceProgram):
            for t in prog.tasks:
                if t.kind in ("kernel", "copy"):
                    streams[t.name] = t.stream
    return streams


def _events(compiled: CompiledModel | None, key_of: dict[str, str]) -> list[Event]:
    """One record -> wait pair per waiting task, by the nodes whose tasks they sit beside."""
    events: list[Event] = []
    for prog in compiled.programs if compiled else ():
        if not isinstance(prog, DeviceProgram):
            continue
        recorded = {t.event: t.name for t in prog.tasks if t.kind == "record"}
        for t in prog.tasks:
            if t.kind == "wait" and t.event in recorded:
                src, dst = key_of.get(recorded[t.event]), key_of.get(t.name)
                if src is not None and dst is not None:
                    events.append(Event(src, dst, prog.index, t.event))
    return events


def _edge(src: str, dst: str, v: Value) -> Edge:
    meta = v.meta
    return Edge(src, dst, v.name, meta.dtype.value if meta else "",
                tuple(meta.shape) if meta and meta.shape is not None else None, v.format)


def from_graph(graph: Graph, compiled: CompiledModel | None = None,
               stage: str = "compiled") -> Picture:
    """The picture of a compile's graph; `compiled` (the model it became) adds streams,
    events, fusion and which device nodes are views. Without it, nothing ran after stage 2."""
    fused, hosted = _fused(compiled), _rejections(compiled)
    streams = _task_streams(compiled)
    engines = {n.meta.partition: n.meta.engine.value for n in graph.nodes
               if n.meta.partition is not None and n.meta.engine is not None}
    pic = Picture(graph.name, stage, compiled.backend if compiled else "",
                  _partitions(compiled, engines))
    key_of: dict[str, str] = {}
    producer: dict[Value, str] = {}
    for k, v in enumerate(graph.inputs):
        pic.nodes.append(Node(f"i{k}", v.name, "input", Kind.INPUT))
        producer[v] = f"i{k}"
    device_parts = {p.index for p in pic.partitions if p.engine == "device"}
    for k, n in enumerate(graph.nodes):
        key = f"n{k}"
        kind = Kind.OP
        if n.op_type in CONVERSIONS:
            kind = Kind.TRANSDATA
        elif n.op_type == "TransposeView" or (compiled is not None and n.name not in streams
                                              and n.meta.partition in device_parts):
            kind = Kind.VIEW
        detail = _conversion_detail(n.op_type, n.attrs) if kind is Kind.TRANSDATA \
            else hosted.get(n.name, "")
        pic.nodes.append(Node(key, n.name, n.op_type, kind, n.meta.partition,
                              streams.get(n.name), fused.get(n.name, []), detail))
        key_of[n.name] = key
        for v in n.inputs:
            if v is not None and not v.is_constant and v in producer:
                pic.edges.append(_edge(producer[v], key, v))
        for v in n.outputs:
            producer[v] = key
    _add_outputs(pic, [(v.name, producer.get(v), v) for v in graph.outputs])
    pic.edges = _unique(pic.edges)
    pic.events = _events(compiled, key_of)
    return pic


def _add_outputs(pic: Picture, outputs: Iterable[tuple[str, str | None, Value | Edge | None]]
                 ) -> None:
    for k, (name, src, via) in enumerate(outputs):
        key = f"o{k}"
        pic.nodes.append(Node(key, name, "output", Kind.OUTPUT))
        if src is None:
            continue  # folded to a constant: nothing computes it
        if isinstance(via, Value):
            pic.edges.append(_edge(src, key, via))
        elif isinstance(via, Edge):
            pic.edges.append(dataclasses.replace(via, src=src, dst=key))


def _unique(edges: list[Edge]) -> list[Edge]:
    """A node reading one tensor twice (x * x) is one edge."""
    seen: set[tuple[str, str, str]] = set()
    out = []
    for e in edges:
        if (e.src, e.dst, e.tensor) not in seen:
            seen.add((e.src, e.dst, e.tensor))
            out.append(e)
    return out


# ---- from a CompiledModel alone ----------------------------------------------------------
def _slot_bytes(slot: TensorSlot) -> int:
    try:
        size = DType(slot.dtype).itemsize
    except (ValueError, AttributeError, TypeError):
        size = 1
    n = 1
    for d in slot.shape:
        n *= int(d)
    return max(n * size, 1)


def _slot_edge(src: str, dst: str, slot: TensorSlot, view: bool = False) -> Edge:
    return Edge(src, dst, slot.name, slot.dtype, tuple(slot.shape), slot.format, view)


class _DeviceWrites:
    """Which task wrote which arena bytes, in task order: a view's bytes lie inside the
    tensor it views, which is live while the view is read, so the last write covering the
    view's offset before the reader is its source."""

    def __init__(self) -> None:
        self.writes: list[tuple[int, TensorSlot, str | None]] = []  # (task, slot, writer)

    def add(self, position: int, slot: TensorSlot, writer: str | None) -> None:
        if slot.region == "arena":
            self.writes.append((position, slot, writer))

    def source(self, slot: TensorSlot, before: int) -> tuple[str | None, bool]:
        """(the writer of the bytes `slot` views, found) as of task position `before`."""
        for position, written, writer in reversed(self.writes):
            if position < before and written.offset <= slot.offset \
                    < written.offset + _slot_bytes(written):
                return writer, True
        return None, False


def from_compiled(compiled: CompiledModel) -> Picture:
    """The picture of a compiled model without its graph (an offline model): its tasks and
    host steps, the streams and events of its programs, fusion from its report."""
    fused, hosted = _fused(compiled), _rejections(compiled)
    op_of = {p.node: p.op_type for p in compiled.report.placements}
    pic = Picture(compiled.name, "compiled", compiled.backend,
                  _partitions(compiled, {}))
    made: dict[str, tuple[str, Edge | None]] = {}  # tensor -> (node key, edge if a view)
    for k, s in enumerate(compiled.inputs):
        pic.nodes.append(Node(f"i{k}", s.name, "input", Kind.INPUT))
        made[s.name] = (f"i{k}", None)
    key_of: dict[str, str] = {}
    # what a tensor's edges say where the step reading it does not (host steps)
    known = {s.name: Edge("", "", s.name, s.dtype.value, tuple(s.shape))
             for s in (*compiled.inputs, *compiled.outputs)}
    for prog in compiled.programs:
        if isinstance(prog, DeviceProgram):
            known.update((t.name, _slot_edge("", "", t)) for t in prog.tensors
                         if t.region == "arena")

    def add_node(name: str, op: str, partition: int, stream: int | None, attrs: dict) -> str:
        key = f"n{len(key_of)}"
        key_of.setdefault(name, key)
        op = op_of.get(name, op)
        kind = Kind.TRANSDATA if op in CONVERSIONS else Kind.OP
        detail = _conversion_detail(op, attrs) if kind is Kind.TRANSDATA \
            else hosted.get(name, "")
        pic.nodes.append(Node(key, name, op, kind, partition, stream, fused.get(name, []),
                              detail))
        return key

    def link(name: str, dst: str, edge: Edge) -> None:
        if name in made:
            src, through = made[name]
            if not edge.dtype:
                edge = known.get(name, edge)
            pic.edges.append(dataclasses.replace(through or edge, src=src, dst=dst))

    for prog in compiled.programs:
        if isinstance(prog, HostProgram):
            for step in prog.steps:
                key = add_node(step.name, step.op_type, prog.index, None, step.attrs)
                for name in step.inputs:
                    if name is not None and name not in prog.constants:
                        link(name, key, Edge("", "", name))
                for name in step.outputs:
                    made[name] = (key, None)
            continue
        _device_nodes(prog, made, add_node, link)
    outputs = []
    for sig, src in zip(compiled.outputs, compiled.output_sources):
        key, through = made.get(src, (None, None))
        outputs.append((sig.name, key, through or known.get(src) or Edge("", "", src)))
    _add_outputs(pic, outputs)
    pic.edges = _unique(pic.edges)
    pic.events = _events(compiled, key_of)
    return pic


def _device_nodes(prog: DeviceProgram, made: dict[str, tuple[str, Edge | None]],
                  add_node, link) -> None:
    """A device program's tasks as nodes; every arena tensor a task reads (or the program
    hands out) that no task of it writes and that is not its input is a view, traced back
    through the arena."""
    slots = prog.tensors
    inputs = set(prog.inputs)
    writes = _DeviceWrites()
    for i in prog.inputs:
        writes.add(-1, slots[i], made.get(slots[i].name, (None, None))[0])
    written: set[int] = set(prog.inputs)

    def resolve(i: int, position: int, reader: str | None) -> None:
        slot = slots[i]
        if i in written or i in inputs or slot.region != "arena":
            if reader is not None and slot.region == "arena":
                link(slot.name, reader, _slot_edge("", "", slot))
            return
        src, found = writes.source(slot, position)
        if found and src is not None:
            made[slot.name] = (src, _slot_edge("", "", slot, view=True))
            written.add(i)
        if reader is not None:
            link(slot.name, reader, _slot_edge("", "", slot, view=True))

    position = 0
    for task in prog.tasks:
        if task.kind not in ("kernel", "copy"):
            continue
        key = add_node(task.name, task.op or "Copy", prog.index, task.stream, task.attrs)
        for i in task.inputs:
            if 0 <= i < len(slots):
                resolve(i, position, key)
        for i in task.outputs:
            if 0 <= i < len(slots):
                writes.add(position, slots[i], key)
                written.add(i)
                made[slots[i].name] = (key, None)
        position += 1
    for i in prog.outputs:
        if 0 <= i < len(slots):
            resolve(i, position, None)


def summary(pic: Picture) -> dict[str, int]:
    """Counts for the command's last line (and tests)."""
    drawn = [n for n in pic.nodes if n.kind not in (Kind.INPUT, Kind.OUTPUT)]
    return {"nodes": len(drawn), "partitions": len(pic.partitions),
            "streams": max((p.streams for p in pic.partitions), default=0),  # per program
            "events": len(pic.events), "fused": sum(1 for n in drawn if n.fused),
            "transdata": sum(1 for n in drawn if n.kind is Kind.TRANSDATA)}


__all__ = ["CONVERSIONS", "Edge", "Event", "Kind", "Node", "Partition", "Picture",
           "from_compiled", "from_graph", "summary"]
