"""The dynamic batcher over a scripted `run`: requests that arrive together run as one
batch up to the limit, each gets its own rows back, and waiting work stops."""

from __future__ import annotations

import concurrent.futures
import threading
import time

import numpy as np
import pytest

from graphengine.api.types import RunControl
from graphengine.engine.errors import ExecutionError, Unavailable
from graphengine.server.core.batching import DynamicBatcher
from graphengine.server.timing import StageTimes


class Recorder:
    """run(x) -> {"y": 10 * x, "k": constant}; records the batch sizes it saw."""

    def __init__(self, delay: float = 0.0, fail: bool = False) -> None:
        self.batches: list[int] = []
        self.delay = delay
        self.fail = fail
        self.gate = threading.Event()
        self.gate.set()

    def __call__(self, inputs, outputs, times: StageTimes):
        self.gate.wait(10)
        self.batches.append(inputs["x"].shape[0])
        with times.stage("execute"):
            time.sleep(self.delay)
        if self.fail:
            raise ExecutionError("kernel failed in node 'n1'", node="n1")
        return {"y": inputs["x"] * 10, "k": np.array([7])}


def make(run: Recorder, max_batch: int = 8, delay: float = 0.05, workers: int = 1,
         on_batch=None) -> DynamicBatcher:
    return DynamicBatcher("m", run, input_names=["x"], batched_outputs={"y"},
                          max_batch=max_batch, delay_seconds=delay, workers=workers,
                          on_batch=on_batch)


def test_concurrent_requests_share_one_batch() -> None:
    run = Recorder()
    seen = []
    # A generous delay, so that all four threads are queued even on a loaded machine.
    batcher = make(run, delay=0.5, on_batch=lambda rows, times: seen.append(rows))
    requests = [np.full((r, 2), i, np.float32) for i, r in enumerate((1, 2, 1, 3))]
    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        results = list(pool.map(lambda x: batcher.submit({"x": x}, None), requests))
    for x, out in zip(requests, results):
        np.testing.assert_array_equal(out["y"], x * 10)  # its own rows, in order
        assert out["k"].tolist() == [7]  # an unbatched output comes back whole
    assert sum(run.batches) == 7 and len(run.batches) < 4 and seen == run.batches
    batcher.close()


def test_batches_stop_at_the_limit_and_keep_signatures_apart() -> None:
    run = Recorder()
    run.gate.clear()  # hold the worker so that everything queues up
    batcher = make(run, max_batch=4, delay=0.2)
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        futures = [pool.submit(batcher.submit, {"x": np.ones((1, 2), np.float32)}, None)
                   for _ in range(6)]
        futures.append(pool.submit(batcher.submit, {"x": np.ones((1, 3), np.float32)}, None))
        time.sleep(0.1)
        run.gate.set()
        outs = [f.result(timeout=10) for f in futures]
    assert max(run.batches) <= 4 and sum(run.batches) == 7
    assert outs[-1]["y"].shape == (1, 3)  # different shape: never batched with the others
    batcher.close()


def test_a_lone_request_waits_at_most_the_delay() -> None:
    batcher = make(Recorder(), delay=0.05)
    start = time.perf_counter()
    times = StageTimes()
    batcher.submit({"x": np.ones((1, 2), np.float32)}, None, times=times)
    assert time.perf_counter() - start < 1.0
    assert 0.04 <= times.seconds["queue"] < 1.0 and "execute" in times.seconds
    batcher.close()


def test_a_failed_batch_fails_each_request() -> None:
    batcher = make(Recorder(fail=True), delay=0.01)
    with pytest.raises(ExecutionError, match="n1"):
        batcher.submit({"x": np.ones((1, 2), np.float32)}, None)
    batcher.close()


def test_cancelled_and_expired_requests_do_not_run() -> None:
    run = Recorder()
    run.gate.clear()
    batcher = make(run, max_batch=1, delay=0.0)
    blocker = threading.Thread(target=batcher.submit,
                               args=({"x": np.ones((1, 2), np.float32)}, None))
    blocker.start()
    time.sleep(0.05)  # the worker now holds the first request at the gate
    with pytest.raises(TimeoutError):
        batcher.submit({"x": np.full((1, 2), 2, np.float32)}, None,
                       RunControl(deadline=time.monotonic() + 0.1))
    gone = threading.Event()
    threading.Timer(0.1, gone.set).start()
    with pytest.raises(concurrent.futures.CancelledError):
        batcher.submit({"x": np.full((1, 2), 3, np.float32)}, None,
                       RunControl(cancelled=gone.is_set))
    run.gate.set()
    blocker.join(10)
    time.sleep(0.1)
    assert run.batches == [1]  # only the first request ever ran
    batcher.close()
    with pytest.raises(Unavailable, match="unloaded"):
        batcher.submit({"x": np.ones((1, 2), np.float32)}, None)
