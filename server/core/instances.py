"""Model instances: N arenas of one compiled model that execute concurrently.

The runtime's LoadedModel holds N instances sharing one copy of the weights and queues
runs natively when all are busy. A run with a deadline or a native cancel token (what the
gRPC layer gives, server/rpc/calls.py) waits in that native queue, which stops the wait
when the deadline passes or the token is set and reports the queue time
(`LoadedModel.execute_controlled`). Only a caller whose cancellation is a Python callable
alone still waits for a permit here, in front of the runtime (issue 18 item 1 removes this
path with its last users). A runtime without multi-instance models gets N separate
LoadedModels instead.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping, Sequence

import numpy as np

from graphengine.api.types import RunControl
from graphengine.engine.model import CompiledModel
from graphengine.engine.runtime import LoadedModel

from ..timing import StageTimes

POLL_SECONDS = 0.05  # how often a waiting run looks at its caller's cancel and deadline


def _load(compiled: CompiledModel, device, count: int) -> list[LoadedModel]:
    try:
        return [LoadedModel(compiled, device, instances=count)]
    except TypeError:  # a runtime whose models have one arena each
        return [LoadedModel(compiled, device) for _ in range(count)]


class InstancePool:
    def __init__(self, compiled: CompiledModel, device, count: int = 1) -> None:
        self.compiled = compiled
        self.count = max(1, count)
        self.models = _load(compiled, device, self.count)
        # One permit per instance: the shared model `count` times, or each model once.
        self._free = (self.models * self.count)[:self.count]
        self._lock = threading.Lock()  # not reentrant: cheaper
        self._cond = threading.Condition(self._lock)
        self._waiting = 0  # runs waiting for a permit (guarded by _lock)
        # One LoadedModel with every instance: it queues extra runs natively, so a run
        # with no deadline, cancel or stage times to honour needs no permit from here.
        self.shared = self.models[0] if len(self.models) == 1 else None
        # Its one-call path (see LoadedModel.direct), for runs with nothing else to honour.
        self.direct = self.shared.direct if self.shared is not None else None

    @property
    def device_bytes(self) -> int:
        return sum(m.device_bytes for m in self.models)

    def _acquire(self, control: RunControl | None) -> LoadedModel:
        with self._lock:
            if self._free:  # the common case: no Condition machinery
                return self._free.pop()
            self._waiting += 1
            try:
                while not self._free:
                    if control is not None:
                        control.check(f"waiting for an instance of '{self.compiled.name}'")
                    self._cond.wait(POLL_SECONDS if control is not None else None)
                return self._free.pop()
            finally:
                self._waiting -= 1

    def _release(self, model: LoadedModel) -> None:
        with self._lock:
            self._free.append(model)
            if self._waiting:
                self._cond.notify()

    def execute(self, inputs: Mapping[str, np.ndarray], output_names: Sequence[str] | None = None,
                control: RunControl | None = None, times: StageTimes | None = None
                ) -> dict[str, np.ndarray]:
        if self.shared is not None:
            if times is None and control is None:
                return self.shared.execute(inputs, output_names)  # waits natively if it must
            if control is None or control.token is not None or control.cancelled is None:
                # The caller's deadline and cancel token are watched by the runtime's queue.
                return self.shared.execute_controlled(inputs, output_names, control, times)
        t0 = time.perf_counter()
        model = self._acquire(control)
        t1 = time.perf_counter()
        try:
            return model.execute(inputs, output_names)
        finally:
            self._release(model)
            if times is not None:
                times.add("queue", t1 - t0)
                times.add("execute", time.perf_counter() - t1)
