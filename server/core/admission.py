"""What a session checks before work: graph counts and sizes, the shapes a compile is
asked for, and device memory (the quota, the device's size), so that a refusal comes
before the work it would have cost. The bounds themselves live in engine/bounds.py.

`Admission` is a part of `Session` (server/core/session.py), kept apart to keep that file's
job the graphs' life; it reads the session's `limits`, `options`, `id`, `_lock`,
`_graphs`, `_reserved` and `device_bytes` (loaded models and variables).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING

from graphengine.engine.bounds import (
    DEFAULT_MAX_TENSOR_ELEMENTS,
    MemoryBudget,
    element_count,
    physical_memory_bytes,
)
from graphengine.engine.errors import InvalidInput, ResourceExhausted
from graphengine.engine.ir import Dim, Graph

if TYPE_CHECKING:
    from .session import _GraphEntry


class Admission:
    @staticmethod
    def _gear_call(gear: int, fn: Callable, *args):
        """`fn(*args)`, with a refusal's message naming the gear it was for."""
        try:
            return fn(*args)
        except (InvalidInput, ResourceExhausted) as exc:
            if not exc.message.startswith("gear "):
                exc.message = f"gear {gear}: {exc.message}"
                exc.with_context()
            raise

    def _check_graph_count(self) -> None:
        limit = self.limits.max_graphs
        with self._lock:
            self._check_open()
            if limit and len(self._graphs) >= limit:
                raise ResourceExhausted(f"session '{self.id}' holds its maximum of {limit} "
                                        f"graphs; remove one first")

    def _check_graph_size(self, graph: Graph) -> None:
        limit = self.limits.max_nodes
        if limit and len(graph.nodes) > limit:
            raise ResourceExhausted(f"graph '{graph.name}' has {len(graph.nodes)} nodes; the "
                                    f"server accepts at most {limit} per graph",
                                    graph=graph.name)
        limit = self.limits.max_tensor_elements or DEFAULT_MAX_TENSOR_ELEMENTS
        for v in graph.inputs:
            shape = v.meta.shape if v.meta else None
            if shape and not any(isinstance(d, str) for d in shape):
                element_count(f"input '{v.name}' declares {v.meta}", shape, limit=limit,
                              tensor=v.name, graph=graph.name)
            elif shape and any(not isinstance(d, str) and d < 0 for d in shape):
                raise InvalidInput(f"input '{v.name}' declares a negative dimension: "
                                   f"{v.meta}", graph=graph.name, tensor=v.name)

    def _check_shapes(self, entry: _GraphEntry, shapes: Mapping[str, Sequence[Dim]]) -> None:
        """The shapes a compile is asked for, bounded before anything is inferred."""
        limit = self.limits.max_tensor_elements or DEFAULT_MAX_TENSOR_ELEMENTS
        for name, shape in shapes.items():
            if shape is not None and not any(isinstance(d, str) for d in shape):
                element_count(f"input '{name}'", shape, limit=limit, tensor=name,
                              graph=entry.graph.name)

    def _admit(self, nbytes: int, entry: _GraphEntry) -> None:
        """Reserve `nbytes` of device memory for a load, or explain why not, before loading."""
        device = self._device_memory()
        if device and nbytes > device:
            raise ResourceExhausted(
                f"loading graph {entry.graph_id} ('{entry.graph.name}') needs {nbytes} bytes "
                f"of device memory; the device has {device}", graph=entry.graph.name,
                stage="load")
        limit = self.options.memory_limit_bytes
        with self._lock:
            used = self.device_bytes + self._reserved
            if limit > 0 and used + nbytes > limit:
                raise ResourceExhausted(
                    f"loading graph {entry.graph_id} ('{entry.graph.name}') needs {nbytes} bytes "
                    f"of device memory; session '{self.id}' uses {used} of its {limit} byte "
                    f"limit, {max(0, limit - used)} left", graph=entry.graph.name,
                    stage="load")
            self._reserved += nbytes

    @contextlib.contextmanager
    def _reserving(self, nbytes: int, what: str) -> Iterator[None]:
        """Holds `nbytes` of the session's device memory while `what` (new variables) is
        made, or refuses it (ResourceExhausted: how much was asked and how much is left)."""
        device = self._device_memory()
        limit = self.options.memory_limit_bytes
        with self._lock:
            used = self.device_bytes + self._reserved
            if device and nbytes > device:
                raise ResourceExhausted(f"{what} needs {nbytes} bytes of device memory; the "
                                        f"device has {device}")
            if limit > 0 and used + nbytes > limit:
                raise ResourceExhausted(f"{what} needs {nbytes} bytes of device memory; "
                                        f"session '{self.id}' uses {used} of its {limit} "
                                        f"byte limit, {max(0, limit - used)} left")
            self._reserved += nbytes
        try:
            yield
        finally:
            with self._lock:
                self._reserved -= nbytes

    def _device_memory(self) -> int:
        return self.limits.device_memory_bytes or physical_memory_bytes()

    def _budget(self) -> MemoryBudget | None:
        """What a compile may still plan for: the device's memory and the session's quota.
        The compile refuses right after shape inference what cannot fit (see `_admit` for
        the exact check against the memory plan, before the load)."""
        device = self._device_memory()
        limit = self.options.memory_limit_bytes
        copies = self.options.instances
        if limit <= 0:
            return MemoryBudget(device, f"the device has {device}", copies) if device else None
        with self._lock:
            used = self.device_bytes + self._reserved
        left = max(0, limit - used)
        reason = f"session '{self.id}' uses {used} of its {limit} byte limit, {left} left"
        if device and device < left:
            return MemoryBudget(device, f"the device has {device}", copies)
        return MemoryBudget(left, reason, copies)
