"""The pass manager: runs stages (lists of passes), times them, lints, names failures.

A pass is a plain function `Graph -> PassResult`. Options are bound with
functools.partial before the pass is put in a stage.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Sequence

from .errors import CompilerError, GraphEngineError, InvalidGraph
from .ir import Graph
from .report import PassRecord


@dataclasses.dataclass
class PassResult:
    graph: Graph
    changed: bool
    detail: str = ""


Pass = Callable[[Graph], PassResult]


def pass_name(p: Pass) -> str:
    func = getattr(p, "func", p)  # functools.partial
    return getattr(func, "__name__", repr(func))


@dataclasses.dataclass
class Stage:
    name: str
    passes: Sequence[Pass]
    repeat_until_stable: bool = False  # rerun the list while any pass changes the graph
    max_rounds: int = 8
    # Run once more when the rounds run out with the graph still changing, so what the
    # last round made is at least typed (prepare: shape inference): the stage's result is
    # then a graph later stages can place, if not a fixed point of every pass.
    settle: Pass | None = None


# on_pass(stage, record): called with record=None when a stage starts, then per pass.
ProgressHook = Callable[[str, "PassRecord | None"], None]


class PassManager:
    def __init__(self, *, lint: bool = False, on_pass: ProgressHook | None = None) -> None:
        self.lint = lint
        self.on_pass = on_pass
        self.records: list[PassRecord] = []

    def record(self, record: PassRecord) -> None:
        self.records.append(record)
        if self.on_pass:
            self.on_pass(record.stage, record)

    def run_stage(self, stage: Stage, graph: Graph) -> Graph:
        """Runs the stage's passes in order; a repeating stage goes round again and stops
        as soon as the last len(passes) passes changed nothing (at most max_rounds rounds).

        Then the graph is a fixed point of every pass: each last ran on this very graph and
        left it so. Waiting for a whole round without a change, from the first pass, gave
        the same graph and ran most passes once more for nothing: a first round whose only
        change is shape inference filling in the types (every compile's) ran the whole
        list again."""
        if self.on_pass:
            self.on_pass(stage.name, None)
        passes = list(stage.passes)
        rounds = stage.max_rounds if stage.repeat_until_stable else 1
        unchanged = 0  # passes run since the last change
        for step in range(rounds * len(passes)):
            graph, changed = self.run_pass(stage.name, passes[step % len(passes)], graph)
            unchanged = 0 if changed else unchanged + 1
            if unchanged >= len(passes):
                break
        else:  # the rounds ran out with the graph still changing
            if stage.settle is not None:
                graph, _ = self.run_pass(stage.name, stage.settle, graph)
        return graph

    def run_pass(self, stage: str, p: Pass, graph: Graph) -> tuple[Graph, bool]:
        name = pass_name(p)
        start = time.perf_counter()
        try:
            result = p(graph)
            if result.changed:
                # Order is the manager's guarantee, not each rewrite's: a rewrite that makes
                # a node read a value defined further down (a residual Add fused into the
                # main branch's Conv while the downsample branch comes later in the list) is
                # put back in order here, stably, before any later pass relies on it.
                result.graph.toposort()
            if self.lint:
                result.graph.lint()
        except GraphEngineError as exc:
            if isinstance(exc, InvalidGraph) and exc.node and f"'{exc.node}'" not in exc.message:
                exc.message = f"node '{exc.node}': {exc.message}"
            exc.message = f"{exc.message} (in pass {name})"
            raise exc.with_context(graph=graph.name, stage=stage) from None
        except Exception as exc:  # a bug in a pass: still say where it happened
            raise CompilerError(f"pass {name} failed: {type(exc).__name__}: {exc}",
                                graph=graph.name, stage=stage) from exc
        self.record(PassRecord(stage, name, time.perf_counter() - start, result.changed,
                               result.detail))
        return result.graph, result.changed
