"""Model instances: N arenas of one compiled model that execute concurrently.

The runtime's LoadedModel holds N instances sharing one copy of the weights and queues runs
natively when all are busy. A run with a deadline or a native cancel token (what the gRPC
layer gives every call, server/rpc/calls.py) waits in that native queue, which ends the wait
when the deadline passes or the token is set and reports the queue time
(`LoadedModel.execute_controlled`). A cancellation given only as a Python callable is
checked as the run starts; to cancel while queued, give a token (`RunControl.token`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from graphengine.api.types import RunControl
from graphengine.engine.model import CompiledModel
from graphengine.engine.runtime import LoadedModel

from ..timing import StageTimes

POLL_SECONDS = 0.05  # how often a waiting caller looks at its cancel and deadline


class InstancePool:
    def __init__(self, compiled: CompiledModel, device, count: int = 1) -> None:
        self.compiled = compiled
        self.shared = LoadedModel(compiled, device, instances=max(1, count))
        # Its one-call path (see LoadedModel.direct), for runs with nothing else to honour.
        self.direct = self.shared.direct

    @property
    def device_bytes(self) -> int:
        return self.shared.device_bytes

    def execute(self, inputs: Mapping[str, np.ndarray], output_names: Sequence[str] | None = None,
                control: RunControl | None = None, times: StageTimes | None = None
                ) -> dict[str, np.ndarray]:
        if times is None and control is None:
            return self.shared.execute(inputs, output_names)  # waits natively if it must
        if control is not None:
            control.check(f"starting a run of '{self.compiled.name}'")
        return self.shared.execute_controlled(inputs, output_names, control, times)
