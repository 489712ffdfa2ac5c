"""One repository model being served: its session, gears, batcher and statistics.

A repository model is a Session with one graph: every gear compiled ahead at load, as
many instances as configured, and (opt-in) a dynamic batcher in front. Its statistics are
the KServe/Triton inference statistics (counts and cumulative nanoseconds per stage).
"""

from __future__ import annotations

import dataclasses
import enum
import threading
import time
from collections.abc import Mapping, Sequence

import numpy as np

from graphengine.api.types import GraphInfo, RunControl, SessionLimits, SessionOptions
from graphengine.engine.errors import InvalidInput

from ..timing import StageTimes
from . import signature
from .batching import DynamicBatcher
from .model_config import ModelConfig
from .session import CompileHook, Session

REPOSITORY_OWNER = "<repository>"  # no identity can be this: names are [A-Za-z0-9_.@-]
VERSION = "1"


class ModelState(enum.Enum):
    READY = "READY"
    LOADING = "LOADING"
    UNLOADING = "UNLOADING"
    UNAVAILABLE = "UNAVAILABLE"


@dataclasses.dataclass
class Duration:
    count: int = 0
    ns: int = 0

    def add(self, seconds: float) -> None:
        self.count += 1
        self.ns += int(seconds * 1e9)


@dataclasses.dataclass
class BatchStats:
    compute_input: Duration = dataclasses.field(default_factory=Duration)
    compute_infer: Duration = dataclasses.field(default_factory=Duration)
    compute_output: Duration = dataclasses.field(default_factory=Duration)


class ModelStats:
    """Counts and times of one model's requests and executions; thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.success, self.fail = Duration(), Duration()
        self.queue, self.compute_input = Duration(), Duration()
        self.compute_infer, self.compute_output = Duration(), Duration()
        self.inference_count = 0
        self.execution_count = 0
        self.last_inference_ms = 0
        self.batches: dict[int, BatchStats] = {}

    def record_request(self, times: StageTimes, ok: bool) -> None:
        """A request is over: its total time, and for a success its stages."""
        s = times.seconds
        with self._lock:
            (self.success if ok else self.fail).add(times.total())
            if not ok:
                return
            self.queue.add(s.get("queue", 0.0))
            self.compute_input.add(s.get("input_copy", 0.0))
            self.compute_infer.add(s.get("execute", 0.0))
            self.compute_output.add(s.get("output_copy", 0.0))
            self.last_inference_ms = int(time.time() * 1e3)

    def record_inferences(self, rows: int) -> None:
        with self._lock:
            self.inference_count += rows

    def record_execution(self, rows: int, times: StageTimes) -> None:
        s = times.seconds
        with self._lock:
            self.execution_count += 1
            b = self.batches.setdefault(rows, BatchStats())
            b.compute_input.add(s.get("input_copy", 0.0))
            b.compute_infer.add(s.get("execute", 0.0))
            b.compute_output.add(s.get("output_copy", 0.0))

    def snapshot(self) -> ModelStats:
        with self._lock:
            copy = ModelStats()
            copy.__dict__.update({k: dataclasses.replace(v) if isinstance(v, Duration) else v
                                  for k, v in self.__dict__.items() if k != "_lock"})
            copy.batches = {k: dataclasses.replace(
                v, compute_input=dataclasses.replace(v.compute_input),
                compute_infer=dataclasses.replace(v.compute_infer),
                compute_output=dataclasses.replace(v.compute_output))
                for k, v in self.batches.items()}
            return copy


class ServedModel:
    """Loads at construction (compiles every gear ahead); `infer` serves one request."""

    def __init__(self, name: str, path: str, config: ModelConfig, *, device,
                 version: str = VERSION, limits: SessionLimits | None = None,
                 on_compile: CompileHook | None = None, on_batch=None, compile_cache=None) -> None:
        self.name = name
        self.version = version
        self.path = path
        self.config = config
        self.stats = ModelStats()
        self._inflight = 0
        self._idle = threading.Condition()
        options = SessionOptions(max_streams=config.max_streams, options=config.options,
                                 instances=config.instances)
        self.session = Session(options, device=device, owner=REPOSITORY_OWNER, limits=limits,
                               on_compile=on_compile, compile_cache=compile_cache)
        try:
            self.graph_id = self._add(path, name, config)
            # The declaration first: a wrong config.pbtxt is named before any compile.
            signature.check_model(config, self.session.graph_info(self.graph_id), name)
            self.session.compile_graph(self.graph_id)
        except BaseException:
            self.session.close()
            raise
        self.info: GraphInfo = self.session.graph_info(self.graph_id)
        self.batcher: DynamicBatcher | None = None
        if config.dynamic_batching is not None:
            self.batcher = DynamicBatcher(
                name, self._run_batch, input_names=[t.name for t in self.info.inputs],
                batched_outputs=self.session.batched_outputs(self.graph_id),
                max_batch=config.max_batch_size,
                delay_seconds=config.dynamic_batching.max_queue_delay_ms / 1e3,
                workers=config.instances, on_batch=self._on_batch(on_batch))

    def _add(self, path: str, name: str, config: ModelConfig) -> int:
        try:
            return self.session.add_graph(path, name=name, gears=config.gears)
        except InvalidInput as exc:
            if not config.declared_max_batch_size:
                raise
            # The gears are the config's doing: say where they come from.
            raise InvalidInput(f"{config.source}: model '{name}': max_batch_size "
                               f"{config.declared_max_batch_size} compiles the model ahead for "
                               f"batch sizes {list(config.gears)}: {exc.message}") from None

    def _on_batch(self, hook):
        def record(rows: int, times: StageTimes) -> None:
            self.stats.record_execution(rows, times)
            if hook is not None:
                hook(self.name, rows)
        return record

    def _run_batch(self, inputs: Mapping[str, np.ndarray], outputs: Sequence[str] | None,
                   times: StageTimes) -> dict[str, np.ndarray]:
        return self.session.run_graph(self.graph_id, inputs, outputs, times=times)

    @property
    def output_names(self) -> list[str]:
        """What a request that names no outputs gets: the declared ones, else all."""
        return [s.name for s in self.config.outputs] or [t.name for t in self.info.outputs]

    @property
    def device_bytes(self) -> int:
        return self.session.device_bytes

    def infer(self, inputs: Mapping[str, np.ndarray], outputs: Sequence[str] | None,
              control: RunControl | None, times: StageTimes) -> dict[str, np.ndarray]:
        rows = _rows(inputs)
        signature.check_request(self.config, inputs, self.name, rows)
        outputs = outputs or self.output_names
        if self.batcher is not None:
            result = self.batcher.submit(inputs, outputs, control, times)
        else:
            own = StageTimes()
            result = self.session.run_graph(self.graph_id, inputs, outputs, control=control,
                                            times=own)
            times.merge(own)
            self.stats.record_execution(rows, own)
        self.stats.record_inferences(rows)
        return result

    # ---- in-flight accounting (unload waits for it) --------------------------------------
    def enter(self) -> None:
        with self._idle:
            self._inflight += 1

    def exit(self) -> None:
        with self._idle:
            self._inflight -= 1
            if not self._inflight:
                self._idle.notify_all()

    def close(self, timeout: float = 30.0) -> None:
        """Wait (up to `timeout`) for requests in flight, then free the model."""
        deadline = time.monotonic() + timeout
        with self._idle:
            while self._inflight and time.monotonic() < deadline:
                self._idle.wait(deadline - time.monotonic())
        if self.batcher is not None:
            self.batcher.close()
        self.session.close()


def _rows(inputs: Mapping[str, np.ndarray]) -> int:
    for v in inputs.values():
        shape = np.shape(v)
        return int(shape[0]) if shape else 1
    return 1
