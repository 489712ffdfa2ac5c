"""What one torch.compile backend call did: which FX nodes GraphEngine compiled, in which
graphs, and which it left to eager torch and why."""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class Fallback:
    """An FX node run by eager torch: its name, its ATen target and why."""

    node: str
    target: str
    reason: str

    def __str__(self) -> str:
        return f"{self.node} ({self.target}): {self.reason}"


@dataclasses.dataclass(frozen=True)
class Partition:
    """One region compiled by GraphEngine: its graph in the session and its FX nodes."""

    name: str
    graph_id: int
    nodes: int
    inputs: tuple[str, ...]  # each "name: dtype[dims]"; a str dim is symbolic
    outputs: int


@dataclasses.dataclass
class CompileReport:
    """The report of one FX graph (dynamo calls the backend once per graph: a graph break
    makes two). `nodes` counts the ATen call nodes; `compiled` those GraphEngine runs."""

    graph: str
    nodes: int = 0
    compiled: int = 0
    partitions: list[Partition] = dataclasses.field(default_factory=list)
    fallbacks: list[Fallback] = dataclasses.field(default_factory=list)
    dynamic: bool = False
    where: str = "in-process"  # or the server's address

    @property
    def fully_compiled(self) -> bool:
        """Every node ran through GraphEngine: no fallback to eager torch."""
        return not self.fallbacks and self.nodes == self.compiled

    def summary(self) -> str:
        """Nodes compiled, the GraphEngine graphs, and what ran on eager torch and why."""
        lines = [f"graph {self.graph} ({self.where}{', dynamic' if self.dynamic else ''}): "
                 f"{self.compiled}/{self.nodes} nodes in {len(self.partitions)} GraphEngine "
                 f"graph(s), {len(self.fallbacks)} on eager torch"]
        lines += [f"  graph {p.graph_id} {p.name}: {p.nodes} nodes, inputs "
                  f"{', '.join(p.inputs)}" for p in self.partitions]
        lines += [f"  eager {f}" for f in self.fallbacks]
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.summary()
