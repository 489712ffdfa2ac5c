"""What a servicer takes from a gRPC call besides its request: who calls, how long they
will wait, whether they are still there, and where the call's stage times go."""

from __future__ import annotations

import time
from typing import Any

from graphengine import _runtime
from graphengine.api.types import RunControl

from .. import timing
from . import auth

_NO_DEADLINE = 1e9  # gRPC reports "no deadline" as a time_remaining of ~2**63 seconds


def run_control(context: Any) -> RunControl:
    """The call's deadline and cancellation, for work that waits (queues, instances)."""
    remaining = context.time_remaining()
    deadline = None
    if remaining is not None and remaining < _NO_DEADLINE:
        deadline = time.monotonic() + remaining
    token = _runtime.CancelToken()
    if not context.add_callback(token.cancel):  # the call has already ended
        token.cancel()
    return RunControl(deadline=deadline, cancelled=lambda: not context.is_active(), token=token)


def identity() -> str | None:
    return auth.current_identity()


def times() -> timing.StageTimes | None:
    return timing.current()
