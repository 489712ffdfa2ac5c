"""Bidirectional streams with many requests in flight (RunGraphStream, ModelStreamInfer).

A reader thread takes requests off the stream and runs each on a shared executor, at most
`max_inflight` at once (then it stops reading: backpressure reaches the client through
gRPC's flow control). Answers are yielded as they finish, in any order; each carries its
request's id. One failed request is answered with an error item and the stream stays open.

While the server drains, requests still arriving are answered UNAVAILABLE; once the runs
in flight have answered, the stream ends with UNAVAILABLE so that no client waits on it.
"""

from __future__ import annotations

import contextvars
import queue
import threading
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Executor
from typing import Any, Generic, TypeVar

import grpc

from graphengine.engine.errors import Unavailable

from .. import timing
from ..lifecycle import Lifecycle
from . import errors

Req = TypeVar("Req")
Resp = TypeVar("Resp")

_END = object()
POLL_SECONDS = 0.1


class _Failed:
    def __init__(self, exc: BaseException) -> None:
        self.exc = exc


class StreamRunner(Generic[Req, Resp]):
    """`handle(request, times) -> response`; `error_item(request, code, message) -> response`.

    `observe(times, code)` reports each item (the metrics); `method` names the stream in
    logs and in the stage times' api label.
    """

    def __init__(self, *, method: str, executor: Executor, max_inflight: int,
                 lifecycle: Lifecycle, handle: Callable[[Req, timing.StageTimes], Resp],
                 error_item: Callable[[Req | None, grpc.StatusCode, str], Resp],
                 observe: Callable[[timing.StageTimes, str], None] | None = None) -> None:
        self._method = method
        self._api = method.rsplit("/", 1)[-1]
        self._executor = executor
        self._max = max_inflight
        self._lifecycle = lifecycle
        self._handle = handle
        self._error_item = error_item
        self._observe = observe

    def serve(self, requests: Iterable[Req], context: grpc.ServicerContext) -> Iterator[Resp]:
        out: queue.Queue[Any] = queue.Queue()
        slots = threading.Semaphore(self._max)
        counts = {"submitted": 0, "answered": 0}
        lock = threading.Lock()
        stopped = threading.Event()
        ctx = contextvars.copy_context()  # the caller's identity, for every item

        def answer(response: Resp) -> None:
            out.put(response)

        def run_one(request: Req) -> None:
            times = timing.StageTimes(self._api)
            code = "OK"
            try:
                response = self._handle(request, times)
            except BaseException as exc:  # answered as an item; the stream goes on
                status, message = errors.describe(exc, self._method)
                code = status.name
                response = self._error_item(request, status, message)
            finally:
                slots.release()
            if self._observe is not None:
                self._observe(times, code)
            answer(response)

        def read() -> None:
            try:
                for request in requests:
                    while not slots.acquire(timeout=POLL_SECONDS):
                        if stopped.is_set():
                            return
                    with lock:
                        counts["submitted"] += 1
                    if self._lifecycle.draining:
                        slots.release()
                        answer(self._error_item(request, grpc.StatusCode.UNAVAILABLE,
                                                "the server is shutting down; retry elsewhere"))
                        continue
                    self._executor.submit(ctx.copy().run, run_one, request)
                out.put(_END)
            except BaseException as exc:  # a malformed request, or the call went away
                out.put(_Failed(exc))

        reader = threading.Thread(target=read, name="graphengine-stream-reader", daemon=True)
        reader.start()
        done_reading = False
        try:
            while True:
                with lock:
                    idle = counts["answered"] == counts["submitted"]
                if idle and done_reading:
                    return
                if idle and self._lifecycle.draining:
                    raise Unavailable("the server is shutting down; the stream is closed after "
                                      "its runs in flight answered")
                try:
                    item = out.get(timeout=POLL_SECONDS)
                except queue.Empty:
                    if not context.is_active():
                        return  # the client went away; nobody reads the answers
                    continue
                if item is _END:
                    done_reading = True
                elif isinstance(item, _Failed):
                    if context.is_active():
                        raise item.exc
                    return
                else:
                    with lock:
                        counts["answered"] += 1
                    yield item
        finally:
            stopped.set()

