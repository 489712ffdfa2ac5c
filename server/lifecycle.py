"""The server's lifecycle state: serving, then draining; and the work in flight.

On SIGTERM the server starts draining: health turns NOT_SERVING, every new RPC is refused
with UNAVAILABLE, and the work already admitted finishes (within the grace period) before
the process exits. `Lifecycle` is the one place that state lives; the request interceptor
admits RPCs through it and streams ask it whether to take new items.
"""

from __future__ import annotations

import threading
import time


class Lifecycle:
    def __init__(self) -> None:
        self._draining = threading.Event()
        self._idle = threading.Condition()
        self._inflight = 0
        self.last_refused = 0.0  # time.monotonic() of the last refusal while draining

    @property
    def draining(self) -> bool:
        return self._draining.is_set()

    def begin_drain(self) -> None:
        # The quiet period counts from the drain's start, not from the epoch: a drain that
        # begins before any call was refused still lingers long enough for callers queued
        # behind busy workers (and health probes) to be answered NOT_SERVING / UNAVAILABLE.
        self.last_refused = time.monotonic()
        self._draining.set()
        with self._idle:
            self._idle.notify_all()

    def enter(self) -> bool:
        """Admit one unit of work; False when draining (the caller refuses it)."""
        with self._idle:
            if self._draining.is_set():
                self.last_refused = time.monotonic()
                return False
            self._inflight += 1
            return True

    def exit(self) -> None:
        with self._idle:
            self._inflight -= 1
            if self._inflight == 0:
                self._idle.notify_all()

    @property
    def inflight(self) -> int:
        with self._idle:
            return self._inflight

    def quiet_for(self, seconds: float) -> bool:
        """True when no work was refused in the last `seconds` (callers have gone away)."""
        return time.monotonic() - self.last_refused >= seconds

    def wait_idle(self, timeout: float | None) -> bool:
        """Block until no admitted work is left; False if `timeout` passed first."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._idle:
            while self._inflight:
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    return False
                self._idle.wait(left)
            return True
