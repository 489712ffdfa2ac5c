"""Where a request's time went, stage by stage (no gRPC, no Prometheus here).

A `StageTimes` travels with one request: the layer that does a stage adds its seconds
(decode -> `input_copy`, waiting for a batch or a model instance -> `queue`, the device run
-> `execute`, slicing and encoding -> `output_copy`). The RPC layer creates it and reports
it to the metrics when the request is over; the core only ever adds to it.
"""

from __future__ import annotations

import contextlib
import contextvars
import time
from collections.abc import Iterator

STAGES = ("queue", "input_copy", "execute", "output_copy")


class StageTimes:
    """Seconds per stage of one request, plus the labels it is reported under."""

    __slots__ = ("api", "model", "seconds", "start")

    def __init__(self, api: str = "", start: float | None = None) -> None:
        self.api = api
        self.model = ""
        self.start = time.perf_counter() if start is None else start
        self.seconds: dict[str, float] = {}

    def add(self, stage: str, seconds: float) -> None:
        self.seconds[stage] = self.seconds.get(stage, 0.0) + seconds

    @contextlib.contextmanager
    def stage(self, name: str) -> Iterator[None]:
        t0 = time.perf_counter()
        try:
            yield
        finally:
            self.add(name, time.perf_counter() - t0)

    def merge(self, other: StageTimes) -> None:
        for stage, seconds in other.seconds.items():
            self.add(stage, seconds)

    def total(self) -> float:
        return time.perf_counter() - self.start


@contextlib.contextmanager
def stage(times: StageTimes | None, name: str) -> Iterator[None]:
    """`times.stage(name)`, or nothing when nobody is measuring."""
    if times is None:
        yield
        return
    with times.stage(name):
        yield


_current: contextvars.ContextVar[StageTimes | None] = contextvars.ContextVar(
    "graphengine_stage_times", default=None)


def current() -> StageTimes | None:
    """The times of the RPC being handled on this thread (set by the request interceptor)."""
    return _current.get()


def bind(times: StageTimes | None) -> contextvars.Token:
    return _current.set(times)


def unbind(token: contextvars.Token) -> None:
    try:
        _current.reset(token)
    except ValueError:  # a generator finished on another context: nothing to restore
        _current.set(None)
