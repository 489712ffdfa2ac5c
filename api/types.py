"""Plain data types of the session API, importable without the compiler or the runtime."""

from __future__ import annotations

import concurrent.futures
import dataclasses
import time
from collections.abc import Callable, Mapping

from graphengine.engine.bounds import MAX_DATA_PARALLEL, MAX_INSTANCES, MAX_STREAMS, check_int
from graphengine.engine.dtypes import DType
from graphengine.engine.errors import InvalidInput
from graphengine.engine.ir import Dim

PRECISIONS = ("", "fp32")  # what the host device compiles for today


@dataclasses.dataclass(frozen=True)
class SessionOptions:
    """What a session compiles and loads with (`graphengine.Session(options)`,
    `Client.session(options)`); a mapping works too, its unknown keys taken as compile
    options.

    - `max_streams` (`1`): streams a device program may use (0..64; 0 is 1); independent
      branches run on different streams, ordered by events.
    - `memory_limit_bytes` (`0`): the session's device-memory quota, checked against each
      memory plan before a load; `0`: the device's memory (a server gives the session
      its `session_memory_limit_bytes`, also the most a session may ask).
    - `options` (`{}`): compile options by name, as strings (docs/api/config.md).
    - `precision` (`""`): `""` or `fp32`, what the host device compiles.
    - `instances` (`1`): model instances per compiled signature (1..64): runs at once, each
      with an activation arena of its own, sharing the weights.
    """

    max_streams: int = 1
    memory_limit_bytes: int = 0  # 0: no limit
    options: Mapping[str, str] = dataclasses.field(default_factory=dict)
    precision: str = ""  # "" = fp32
    instances: int = 1  # model instances per compiled signature

    def __post_init__(self) -> None:
        if self.precision not in PRECISIONS:
            raise InvalidInput(f"session option precision '{self.precision}' is not supported; "
                               f"the host device compiles fp32 only")
        # Each sizes what a compile and a load allocate: bounded before either runs.
        check_int("session option 'instances'", self.instances, 1, MAX_INSTANCES)
        check_int("session option 'max_streams'", self.max_streams, 0, MAX_STREAMS)
        if self.memory_limit_bytes < 0:
            raise InvalidInput(f"session option 'memory_limit_bytes' must be >= 0, got "
                               f"{self.memory_limit_bytes}")

    @classmethod
    def coerce(cls, value: SessionOptions | Mapping | None) -> SessionOptions:
        """SessionOptions from None (the defaults), SessionOptions or a mapping (keys that
        are not fields become compile options)."""
        if value is None:
            return cls()
        if isinstance(value, SessionOptions):
            return value
        value = dict(value)
        known = {f.name for f in dataclasses.fields(cls)}
        compile_opts = dict(value.pop("options", {}) or {})
        for key in list(value):
            if key not in known:
                compile_opts[key] = value.pop(key)  # compile options given flat
        return cls(**value, options={k: str(v) for k, v in compile_opts.items()})

    def compile_options(self, threads: int = 0):
        """The compile options; for a device of `threads` >= 2 threads a heavy separable
        batch is split over them (data_parallel) unless the options say otherwise."""
        from graphengine.engine.pipeline import CompileOptions

        opts = dict(self.options)
        opts.setdefault("max_streams", str(self.max_streams or 1))
        if threads >= 2:  # a machine may have more threads than chunks are worth
            opts.setdefault("data_parallel", str(min(threads, MAX_DATA_PARALLEL)))
        return CompileOptions.from_mapping(opts)


@dataclasses.dataclass(frozen=True)
class SessionLimits:
    """What the server allows one session (0: no limit)."""

    max_graphs: int = 0
    max_nodes: int = 0
    max_tensor_elements: int = 0
    device_memory_bytes: int = 0  # the device's size: no single model may exceed it


@dataclasses.dataclass(frozen=True)
class RunControl:
    """How long the caller of a run is willing to wait; checked while work waits."""

    deadline: float | None = None  # a time.monotonic() value
    cancelled: Callable[[], bool] | None = None
    # A native cancel flag (graphengine._runtime.CancelToken) set when the caller goes away
    # (server/rpc/calls.py): with it the runtime's own queue stops the wait for an instance.
    token: object | None = None

    def check(self, waiting_for: str) -> None:
        """Raise if the caller is gone (CancelledError) or out of time (TimeoutError)."""
        if self.cancelled is not None and self.cancelled():
            raise concurrent.futures.CancelledError(
                f"the client cancelled the request while {waiting_for}")
        if self.deadline is not None and time.monotonic() >= self.deadline:
            raise TimeoutError(f"the client's deadline passed while {waiting_for}")

    def remaining(self) -> float | None:
        return None if self.deadline is None else self.deadline - time.monotonic()


@dataclasses.dataclass(frozen=True)
class TensorInfo:
    """A graph's input or output, or a variable: name, dtype and shape (each dim an int or
    a symbol such as "batch"; None when not even the rank is known)."""

    name: str
    dtype: DType
    shape: tuple[Dim, ...] | None


@dataclasses.dataclass(frozen=True)
class GraphInfo:
    """A graph of a session: its inputs and outputs, node count, whether any signature is
    compiled (and how many are loaded), its gears and the device bytes its models hold."""

    graph_id: int
    name: str
    inputs: tuple[TensorInfo, ...]
    outputs: tuple[TensorInfo, ...]
    num_nodes: int
    compiled: bool
    gears: tuple[int, ...] = ()
    device_bytes: int = 0
    compiled_signatures: int = 0


@dataclasses.dataclass(frozen=True)
class SessionInfo:
    """A session as ListSessions reports it: id, options, creation time (epoch seconds),
    idle seconds, graph ids, device bytes held and runs in progress."""

    session_id: str
    options: SessionOptions
    created_at: float  # seconds since the epoch
    idle_seconds: float
    graph_ids: tuple[int, ...]
    device_bytes: int
    active_runs: int
