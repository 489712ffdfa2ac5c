"""The compile report: what every stage did, as a structured first-class output."""

from __future__ import annotations

import dataclasses
import json


@dataclasses.dataclass
class PassRecord:
    stage: str
    name: str
    seconds: float
    changed: bool
    detail: str = ""


@dataclasses.dataclass
class PlacementRecord:
    node: str
    op_type: str
    engine: str
    rejections: list[str] = dataclasses.field(default_factory=list)
    # the op types fusion folded into this node, in order (pipeline.fused_ops); [] if none
    fused: list[str] = dataclasses.field(default_factory=list)


@dataclasses.dataclass
class BodyRecord:
    """A host control-flow node's body: compiled as a model of its own (run on the device
    per branch taken or iteration), or interpreted, and why."""
    node: str
    op_type: str
    body: str  # the attribute: then_branch, else_branch, body
    compiled: bool
    detail: str = ""  # compiled: its programs and tasks; else the reason


@dataclasses.dataclass
class PartitionRecord:
    index: int
    engine: str
    nodes: list[str]
    inputs: list[str]
    outputs: list[str]


@dataclasses.dataclass
class MemoryRecord:
    arena_bytes: int = 0
    lower_bound_bytes: int = 0
    weight_bytes: int = 0
    strategy: str = ""


@dataclasses.dataclass
class CompileReport:
    """What a compile did (`compile_graph` returns it; `render()` prints it): each pass's
    stage, time and whether it changed the graph, the partitions and each node's engine
    (with the reasons a device declined it), fusions, the memory plan, streams, events,
    tasks, node counts before and after, the FLOPs of one run and control-flow bodies."""

    graph: str
    passes: list[PassRecord] = dataclasses.field(default_factory=list)
    partitions: list[PartitionRecord] = dataclasses.field(default_factory=list)
    placements: list[PlacementRecord] = dataclasses.field(default_factory=list)
    fusions: list[str] = dataclasses.field(default_factory=list)
    memory: MemoryRecord = dataclasses.field(default_factory=MemoryRecord)
    streams: int = 0
    events: int = 0
    tasks: int = 0
    nodes_before: int = 0
    nodes_after: int = 0
    total_seconds: float = 0.0
    # FLOPs of one run: convolutions and matrix products of the prepared graph (engine/flops.py)
    flops: float = 0.0
    bodies: list[BodyRecord] = dataclasses.field(default_factory=list)

    def to_dict(self) -> dict:
        """The report as plain dicts and lists (what `--json-report` writes)."""
        return dataclasses.asdict(self)

    def to_json(self) -> str:
        """`to_dict()` as indented JSON."""
        return json.dumps(self.to_dict(), indent=2)

    def render(self) -> str:
        """A human-readable report, as the CLI prints it."""
        lines = [f"compile report for graph '{self.graph}' ({self.total_seconds * 1e3:.1f} ms)",
                 f"  nodes: {self.nodes_before} -> {self.nodes_after}", "  passes:"]
        for p in self.passes:
            mark = "*" if p.changed else " "
            detail = f"  {p.detail}" if p.detail else ""
            lines.append(f"   {mark} {p.stage:<10} {p.name:<28} {p.seconds * 1e3:8.2f} ms{detail}")
        lines.append("  partitions:")
        for part in self.partitions:
            lines.append(f"    #{part.index} {part.engine:<7} {len(part.nodes)} nodes; "
                         f"PlaceHolder {_few(part.inputs)}; End {_few(part.outputs)}")
        hosted = [p for p in self.placements if p.engine != "device"]
        for p in hosted:
            lines.append(f"    {p.node} ({p.op_type}) on {p.engine}: {'; '.join(p.rejections)}")
        if self.bodies:
            lines.append("  control-flow bodies:")
            lines += [f"    {b.node} ({b.op_type}) {b.body}: "
                      f"{'compiled' if b.compiled else 'interpreted'}; {b.detail}"
                      for b in self.bodies]
        if self.fusions:
            lines.append(f"  fusions ({len(self.fusions)}):")
            lines += [f"    {f}" for f in self.fusions]
        m = self.memory
        lines.append(f"  memory: arena {m.arena_bytes} B (lower bound {m.lower_bound_bytes} B, "
                     f"strategy {m.strategy}), weights {m.weight_bytes} B")
        lines.append(f"  streams {self.streams}, events {self.events}, tasks {self.tasks}")
        if self.flops:
            lines.append(f"  arithmetic: {self.flops / 1e9:.3f} GFLOP per run "
                         f"(convolutions and matrix products)")
        return "\n".join(lines)


def _few(names: list[str], n: int = 3) -> str:
    return "[" + ", ".join(names[:n]) + (f", ... +{len(names) - n}" if len(names) > n else "") + "]"
