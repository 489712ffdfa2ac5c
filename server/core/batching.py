"""Dynamic batching: requests for one model wait a little to run as one batch.

A request joins the model's queue; a worker takes the oldest, then keeps adding queued
requests with the same signature (dtypes and non-batch dims of every input, the same
requested outputs) until the batch holds `max_batch` rows or the oldest request has
waited `delay` seconds. The batch runs once (the session pads it to the smallest gear
that fits) and every request gets its own rows of the batched outputs back. One worker
per model instance, so batches run concurrently when the model has several instances.

A request whose caller cancels or runs out of time while it waits is dropped before it
runs; a failed batch fails each of its requests with the batch's error.
"""

from __future__ import annotations

import collections
import concurrent.futures
import threading
import time
from collections.abc import Callable, Mapping, Sequence

import numpy as np

from graphengine.api.types import RunControl
from graphengine.engine.errors import Unavailable

from ..timing import StageTimes
from . import gears as gearing

POLL_SECONDS = 0.05

RunFn = Callable[[Mapping[str, np.ndarray], Sequence[str] | None, StageTimes],
                 dict[str, np.ndarray]]


class _Request:
    __slots__ = ("control", "enqueued", "future", "inputs", "key", "outputs", "rows")

    def __init__(self, inputs: Mapping[str, np.ndarray], outputs: Sequence[str] | None,
                 rows: int, control: RunControl | None) -> None:
        self.inputs = inputs
        self.outputs = tuple(outputs) if outputs else None
        self.rows = rows
        self.control = control
        self.enqueued = time.perf_counter()
        self.future: concurrent.futures.Future = concurrent.futures.Future()
        self.key = (tuple(sorted((k, v.dtype.str, v.shape[1:]) for k, v in inputs.items())),
                    self.outputs)

    def gone(self) -> bool:
        try:
            if self.control is not None:
                self.control.check("queued for a batch")
        except BaseException:
            return True
        return False


class DynamicBatcher:
    """Combines requests for `run`, which executes one (padded) batch."""

    def __init__(self, name: str, run: RunFn, *, input_names: Sequence[str],
                 batched_outputs: set[str], max_batch: int, delay_seconds: float,
                 workers: int = 1,
                 on_batch: Callable[[int, StageTimes], None] | None = None) -> None:
        self.name = name
        self._run = run
        self._input_names = list(input_names)
        self._batched = batched_outputs
        self.max_batch = max_batch
        self.delay = delay_seconds
        self._on_batch = on_batch
        self._queue: collections.deque[_Request] = collections.deque()
        self._cond = threading.Condition()
        self._closed = False
        self._threads = [threading.Thread(target=self._work, daemon=True,
                                          name=f"graphengine-batcher-{name}-{i}")
                         for i in range(max(1, workers))]
        for t in self._threads:
            t.start()

    # ---- callers -----------------------------------------------------------------------
    def submit(self, inputs: Mapping[str, np.ndarray], outputs: Sequence[str] | None,
               control: RunControl | None = None, times: StageTimes | None = None
               ) -> dict[str, np.ndarray]:
        """Run `inputs` as part of a batch; blocks until its outputs are ready."""
        arrays = {k: np.asarray(v) for k, v in inputs.items()}
        rows = gearing.batch_rows(self.name, arrays, self._input_names)
        request = _Request(arrays, outputs, rows, control)
        with self._cond:
            if self._closed:
                raise Unavailable(f"model '{self.name}' is being unloaded")
            self._queue.append(request)
            self._cond.notify()
        result, batch_times = self._wait(request)
        if times is not None:
            times.merge(batch_times)
        return result

    @staticmethod
    def _wait(request: _Request) -> tuple[dict[str, np.ndarray], StageTimes]:
        while True:
            try:
                return request.future.result(timeout=POLL_SECONDS)
            except concurrent.futures.TimeoutError:
                if request.gone():
                    request.future.cancel()  # dropped unless a worker already runs it
                    request.control.check("queued for a batch")  # raises

    # ---- workers -----------------------------------------------------------------------
    def _take(self, first: _Request | None, rows: int) -> _Request | None:
        """The next queued request that fits (same signature, room left); under the lock."""
        for i, r in enumerate(self._queue):
            if first is None or (r.key == first.key and rows + r.rows <= self.max_batch):
                del self._queue[i]
                return r
        return None

    def _work(self) -> None:
        while True:
            with self._cond:
                while not self._queue and not self._closed:
                    self._cond.wait()
                if self._closed and not self._queue:
                    return
                first = self._take(None, 0)
            if first is None or first.gone() or not first.future.set_running_or_notify_cancel():
                continue
            batch, rows = [first], first.rows
            deadline = first.enqueued + self.delay
            while rows < self.max_batch:
                with self._cond:
                    nxt = self._take(first, rows)
                    if nxt is None:
                        left = deadline - time.perf_counter()
                        if left <= 0 or self._closed:
                            break
                        self._cond.wait(left)
                        continue
                if nxt.gone() or not nxt.future.set_running_or_notify_cancel():
                    continue
                batch.append(nxt)
                rows += nxt.rows
            self._execute(batch, rows)

    def _execute(self, batch: list[_Request], rows: int) -> None:
        start = time.perf_counter()
        times = StageTimes()
        try:
            with times.stage("input_copy"):
                inputs = (batch[0].inputs if len(batch) == 1 else
                          {k: np.concatenate([r.inputs[k] for r in batch])
                           for k in batch[0].inputs})
            outputs = self._run(inputs, batch[0].outputs, times)
            with times.stage("output_copy"):
                parts, offset = [], 0
                for r in batch:
                    parts.append({k: v[offset:offset + r.rows] if k in self._batched
                                  and np.ndim(v) and v.shape[0] == rows else v
                                  for k, v in outputs.items()})
                    offset += r.rows
        except BaseException as exc:
            for r in batch:
                r.future.set_exception(exc)
            return
        if self._on_batch is not None:
            self._on_batch(rows, times)
        for r, part in zip(batch, parts):
            own = StageTimes()
            own.merge(times)
            own.add("queue", start - r.enqueued)
            r.future.set_result((part, own))

    def close(self, timeout: float = 10.0) -> None:
        """Stop taking requests; queued ones still run; returns when the workers stop."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        for t in self._threads:
            t.join(timeout)
