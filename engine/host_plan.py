"""Host programs prepared once at load: the run is one loop over prepared steps.

A host program (a partition of nodes the device does not run: a NonMaxSuppression whose
output count depends on the data, and the Gathers after it) used to be interpreted per
run: each step looked up its schema, its attributes and each input by name (the program's
constants or the run's values), entered the error state and the memory guard, and wrapped
its outputs. On a detector's tail of seven steps over a dozen boxes that was most of the
tail's time (the kernels themselves take a few microseconds each). Here each step's kernel,
attributes and input sources are resolved when the model loads, and the error state and
the guard are entered once per program run.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from graphengine import _runtime

from . import ops
from .bounds import MemoryBudget
from .errors import GraphEngineError, ResourceExhausted
from .host_blas import limit_blas_threads
from .model import HostProgram

# (kernel, attributes, input sources, output names); an input source is (value name, None)
# for a value of the run or (None, array) for a constant / None for an omitted input
_Step = tuple[Callable[[list[Any], dict[str, Any]], list[Any]], dict[str, Any],
              tuple[tuple[str | None, Any], ...], tuple[str, ...]]


class HostPlan:
    """One host program, ready to run: `run(env, budget)` reads its inputs from `env` and
    writes every step's outputs into it."""

    __slots__ = ("graph", "index", "names", "steps", "types")

    def __init__(self, prog: HostProgram, graph: str,
                 step_attrs: Mapping[int, dict[str, Any]]) -> None:
        # numpy's BLAS on the calling thread: its spinning pool took the device team's cores
        limit_blas_threads(1)
        self.graph = graph
        self.index = prog.index
        produced = set(prog.input_names)
        steps: list[_Step] = []
        for i, step in enumerate(prog.steps):
            srcs = []
            for name in step.inputs:
                if name is None:
                    srcs.append((None, None))
                elif name not in produced and name in prog.constants:
                    srcs.append((None, prog.constants[name]))
                else:
                    srcs.append((name, None))
            steps.append((ops.get(step.op_type).compute, step_attrs.get(i, step.attrs),
                          tuple(srcs), tuple(step.outputs)))
            produced.update(step.outputs)
        self.steps = tuple(steps)
        self.names = tuple(step.name for step in prog.steps)
        self.types = tuple(step.op_type for step in prog.steps)

    def run(self, env: dict[str, np.ndarray], budget: MemoryBudget | None) -> None:
        # The arrays the run allocates count against the budget; ones it was given (inputs,
        # constants, device outputs) are already held by someone else.
        guard = _runtime.HostBudget(budget.bytes) if budget is not None else None
        i, args = 0, []
        try:
            # IEEE results (inf, nan) are the answer
            with np.errstate(all="ignore"), guard or contextlib.nullcontext():
                # i names the failing step in the handlers below
                for i, (compute, attrs, srcs, outputs) in enumerate(self.steps):  # noqa: B007
                    args = [env[name] if name is not None else const for name, const in srcs]
                    for name, value in zip(outputs, compute(args, attrs)):
                        env[name] = value if type(value) is np.ndarray else np.asarray(value)
        except GraphEngineError:
            raise
        except MemoryError as exc:
            if guard is None or not guard.refused:
                raise ops.kernel_error(self.names[i], self.types[i], exc, args,
                                       self.graph) from None
            raise ResourceExhausted(
                f"node '{self.names[i]}' ({self.types[i]}) needs more memory than the run may "
                f"hold: host program {self.index} would hold {guard.refused} bytes at "
                f"once (the node's inputs: {ops.describe_args(args)}); {budget.reason}",
                graph=self.graph, node=self.names[i], stage="execute") from None
        except Exception as exc:
            raise ops.kernel_error(self.names[i], self.types[i], exc, args,
                                   self.graph) from None
