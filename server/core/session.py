"""Sessions: the in-process core of the service (no gRPC here).

A Session holds graphs; each graph compiles per input signature into a CompiledModel that
is loaded on the device (as one or more instances) and cached. A graph declared with gears
is compiled for each gear ahead and serves a run from the smallest gear that fits.
`graphengine.Session` is this class: embedded users and the gRPC servicer call the same code.
"""

from __future__ import annotations

import collections
import contextlib
import functools
import itertools
import os
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence

import numpy as np

from graphengine.api.types import (
    GraphInfo,
    RunControl,
    SessionInfo,
    SessionLimits,
    SessionOptions,
    TensorInfo,
)
from graphengine.engine import offline
from graphengine.engine.bounds import MemoryBudget
from graphengine.engine.dtypes import DType
from graphengine.engine.errors import InvalidInput, InvalidModel, NotFound, ResourceExhausted
from graphengine.engine.importers import load_model
from graphengine.engine.ir import Dim, Graph, TensorMeta
from graphengine.engine.model import CompiledModel, VariableSig
from graphengine.engine.pipeline import analyze, compile_graph, requested_shapes, variable_sigs
from graphengine.engine.report import CompileReport
from graphengine.engine.runtime import LoadedModel, RuntimeStats, default_device

from ..timing import StageTimes, stage
from . import gears as gearing
from .admission import Admission
from .compile_cache import CompileCache, open_cache
from .stateful import StatefulSession
from .variables import VariableStore

__all__ = ["Session", "SessionOptions", "GraphInfo", "TensorInfo", "SessionInfo"]

MAX_SIGNATURES = 8  # compiled signatures kept per graph (LRU), beyond its gears
MAX_SINK_ITERATIONS = 1 << 20  # run_graph(iterations=N): N runs in one call
POLL_SECONDS = 0.05  # how often a caller waiting for a compile looks at its cancel and deadline

CompileHook = Callable[[CompileReport, float], None]  # (report, load seconds)


class _GraphEntry:
    def __init__(self, graph_id: int, graph: Graph, gears: tuple[int, ...] = ()) -> None:
        self.graph_id = graph_id
        self.graph = graph
        self.lock = threading.Lock()  # guards `models`; held briefly
        self.compile_lock = threading.Lock()  # one compile at a time per graph
        self.models: collections.OrderedDict[tuple, LoadedModel] = collections.OrderedDict()
        self.last_report: CompileReport | None = None
        self.gears = gears
        self.batch_dim = _batch_dim(graph) if gears else None
        if gears and self.batch_dim is None:
            shapes = ", ".join(f"{v.name}: {v.meta}" for v in graph.inputs)
            raise InvalidInput(
                f"gears {list(gears)} need every input to start with one shared symbolic "
                f"batch dimension and have only static dimensions after it; the inputs are "
                f"{shapes}", graph=graph.name)
        if gears:
            _check_outputs_follow_batch(graph, self.batch_dim, gears)
        self.batched_outputs = {v.name for v in graph.outputs if v.meta is None or not
                                v.meta.shape or v.meta.shape[0] == self.batch_dim}
        # A graph with static inputs has one signature: its pool is found by this key
        # without looking at the request (the loaded model checks the inputs anyway).
        self.static_shapes: dict[str, tuple] | None = None if self.symbolic else {
            v.name: tuple(v.meta.shape) for v in graph.inputs}
        self.static_key = None if self.static_shapes is None else _signature_key(
            self.static_shapes)
        # (the input shapes in graph order, their pool) of the previous run; cleared when
        # the pool is evicted
        self.last_signature: tuple[tuple, LoadedModel] | None = None
        self.input_names = tuple(v.name for v in graph.inputs)
        self.variables: list[VariableSig] = variable_sigs(graph)
        # (read, written) variable names a run locks; None for a graph without variables
        self.locks: tuple[tuple[str, ...], tuple[str, ...]] | None = None
        self._lock_variables()

    def _lock_variables(self) -> None:
        if self.variables:
            if self.gears:
                raise InvalidInput(f"graph '{self.graph.name}' uses session variables, which "
                                   f"gears cannot run (a padded or chunked batch would run "
                                   f"its writes again); add it without gears",
                                   graph=self.graph.name)
            self.locks = (tuple(s.name for s in self.variables),
                          tuple(s.name for s in self.variables if s.written))

    @property
    def symbolic(self) -> bool:
        return any(v.meta is None or not v.meta.is_static for v in self.graph.inputs)

    def compile(self, options, shapes: Mapping[str, Sequence[Dim]],
                budget: MemoryBudget | None = None) -> CompiledModel:
        # analyzed (validated) when it was added, and a session never changes it after
        return compile_graph(self.graph, options, input_shapes=shapes, budget=budget,
                             validated=True)

    def analyze(self, options) -> CompileReport:
        return analyze(self.graph, options)

    def gear_shapes(self, gear: int) -> dict[str, tuple[int, ...]]:
        return {v.name: (gear, *v.meta.shape[1:]) for v in self.graph.inputs}


def _output_off_batch(graph: Graph, batch: str | None):
    """The first output whose first dimension shape inference cannot show to be `batch`."""
    for v in graph.outputs:
        shape = v.meta.shape if v.meta is not None else None
        if not shape or shape[0] != batch:
            return v
    return None


def _check_outputs_follow_batch(graph: Graph, batch: str | None, gears: tuple[int, ...]
                                ) -> None:
    """Gears pad a run's inputs to the gear and slice the outputs back: only right when every
    output's first dimension is the inputs' batch, as shape inference proves it. An output it
    cannot prove that of would return padded rows as if they were results: refused here."""
    v = _output_off_batch(graph, batch)
    if v is not None:
        shown = "unknown" if v.meta is None or v.meta.shape is None else list(v.meta.shape)
        raise InvalidInput(
            f"gears {list(gears)} cannot apply: output '{v.name}' has shape {shown}, and its "
            f"first dimension cannot be shown to be the inputs' batch '{batch}', so padded "
            f"rows could not be told from results; compile without gears (one signature "
            f"per batch size)", graph=graph.name, tensor=v.name)


def _signature_key(shapes: Mapping[str, Sequence[Dim]]) -> tuple:
    return tuple(sorted((k, tuple(v)) for k, v in shapes.items()))


def _share_batch_symbol(graph: Graph) -> None:
    """Gears say every input's first dim is the one batch (a geared run checks they agree);
    tf2onnx names it per input (`unk__156`, `unk__157`): give them all the first one's name,
    so inference can show the outputs follow it. Only where every first dim is a symbol and
    the rest static, as gears need anyway."""
    shapes = [v.meta.shape if v.meta is not None else None for v in graph.inputs]
    if not shapes or any(not s or not isinstance(s[0], str)
                         or any(isinstance(d, str) for d in s[1:]) for s in shapes):
        return
    for v, shape in zip(graph.inputs, shapes):
        v.meta = TensorMeta(v.meta.dtype, (shapes[0][0], *shape[1:]))


def _batch_dim(graph: Graph) -> str | None:
    """The symbol every input's first dimension shares, if the rest is static."""
    dims = set()
    for v in graph.inputs:
        shape = v.meta.shape if v.meta else None
        if not shape or not isinstance(shape[0], str) or any(isinstance(d, str)
                                                             for d in shape[1:]):
            return None
        dims.add(shape[0])
    return dims.pop() if len(dims) == 1 else None


class _OfflineEntry(_GraphEntry):
    """An offline model: compiled already for its stored signatures, never recompiled."""

    def __init__(self, graph_id: int, stored: offline.OfflineModel, name: str | None) -> None:
        graph = stored.signature_graph(name)
        gear = stored.gear
        # Stored gears of the batch dimension serve runs like compiled-ahead gears.
        # (padded runs only where every output follows that batch; else exact signatures)
        batched = (gear is not None and _batch_dim(graph) == gear.dim
                   and _output_off_batch(graph, gear.dim) is None)
        super().__init__(graph_id, graph, tuple(sorted(gear.values)) if batched else ())
        self.offline = stored
        sigs: dict[str, VariableSig] = {}
        for m in stored.models:
            for sig in m.variables:
                have = sigs.setdefault(sig.name, sig)
                if sig.written and not have.written:
                    sigs[sig.name] = sig
        self.variables = list(sigs.values())
        self._lock_variables()

    def compile(self, options, shapes: Mapping[str, Sequence[Dim]],
                budget: MemoryBudget | None = None) -> CompiledModel:
        return self.offline.find(shapes)  # the stored model, or an error naming the gears

    def analyze(self, options) -> CompileReport:
        return self.offline.models[0].report


class Session(Admission, StatefulSession):
    """A context for graphs and their loaded models; thread-safe.

    `limits` are the server's (graphs, nodes, tensor sizes, device size); `on_compile` is
    told about every compile with its report and load time (the server's metrics): not
    about a model loaded from an offline file or the compile cache, which compiled nothing.
    `compile_cache`: a folder (or a `CompileCache`) where compiled models are kept and
    found again by this and later sessions and processes (server/core/compile_cache.py).
    """

    def __init__(self, options: SessionOptions | Mapping | None = None, *, device=None,
                 session_id: str | None = None, owner: str | None = None,
                 limits: SessionLimits | None = None,
                 on_compile: CompileHook | None = None,
                 compile_cache: CompileCache | str | os.PathLike | None = None) -> None:
        self.options = SessionOptions.coerce(options)
        self.id = session_id or uuid.uuid4().hex
        self.owner = owner
        self.device = device or default_device()
        self._compile_options = self.options.compile_options(self.device.threads)
        self.limits = limits or SessionLimits()
        self._on_compile = on_compile
        self.compile_cache = open_cache(compile_cache)
        self.created_at = time.time()
        self.last_used = time.monotonic()
        self._graphs: dict[int, _GraphEntry] = {}
        self._ids = itertools.count(1)
        self._lock = threading.RLock()
        self._active = 0  # compiles (and runs other than run_graph's) in progress
        # One entry per run_graph call in progress: list.append/pop are atomic, so the
        # end of a run (when the caller's caches are cold) takes no lock.
        self._inflight: list[None] = []
        self._reserved = 0  # device bytes admitted but not loaded yet
        # the session's variables, shared by its graphs (server/core/variables.py)
        self._variables = VariableStore(self.device, f"session '{self.id}'", self._reserving)
        self.closed = False

    # ---- graphs -----------------------------------------------------------------------
    def add_graph(self, model, name: str | None = None, gears: Sequence[int] | None = None
                  ) -> int:
        """Import a graph (ONNX path/bytes/ModelProto, GraphDef or a file Graph.save wrote,
        graphengine.Graph (the builder's: a copy is taken), IR Graph, or offline model
        bytes/path); returns its id.

        The graph is validated and its shapes inferred now, so a malformed graph is
        rejected here with the node that is wrong. An offline model (detected by its magic)
        is already compiled: it runs without compiling. `gears`: batch sizes to compile
        ahead for a graph whose inputs share a symbolic first dimension.
        """
        self._touch()
        wanted = gearing.normalize(gears)
        self._check_graph_count()
        stored = offline.maybe_load(model)
        if stored is None:
            graph = load_model(model, name=name)
            self._check_graph_size(graph)
            if wanted:
                _share_batch_symbol(graph)
            analyze(graph, self._compile_options)
            entry = _GraphEntry(0, graph, wanted)
            for g in entry.gears:  # each gear's tensors, before any is compiled
                self._gear_call(g, self._check_shapes, entry, entry.gear_shapes(g))
        else:
            entry = _OfflineEntry(0, stored, name)
            self._check_graph_size(entry.graph)
            if wanted and wanted != entry.gears:
                raise InvalidInput(f"offline model '{stored.name}' runs the gears it was "
                                   f"compiled for ({list(entry.gears)}), not {list(wanted)}",
                                   graph=stored.name)
        with self._lock:
            self._check_open()
            self._check_graph_count()
            graph_id = entry.graph_id = next(self._ids)
        if entry.variables:  # made now if new (and admitted), else checked against the graph's
            self._variables.declare(entry.variables, graph_id, entry.graph.name)
        with self._lock:
            self._check_open()
            self._graphs[graph_id] = entry
        return graph_id

    def import_model(self, data: bytes, name: str | None = None) -> int:
        """Add an offline model (the bytes `export_model` returns); returns its graph id."""
        if not offline.is_offline_model(data):
            head = bytes(memoryview(data)[:4])
            raise InvalidModel(f"not an offline model: it starts with {head!r}, an offline "
                               f"model with {offline.MAGIC!r}")
        return self.add_graph(data, name=name)

    def remove_graph(self, graph_id: int) -> None:
        """Drop a graph and its loaded models (NotFound for an unknown id); the variables
        only it used stay in the session."""
        self._touch()
        with self._lock:
            self._entry(graph_id)
            del self._graphs[graph_id]
        self._variables.release(graph_id)

    def graph_info(self, graph_id: int) -> GraphInfo:
        """The graph's name, inputs and outputs (dtype, shape with symbols), node count,
        gears, and whether and how often it is compiled (`GraphInfo`)."""
        entry = self._entry(graph_id)
        g = entry.graph

        def infos(values) -> tuple[TensorInfo, ...]:
            return tuple(TensorInfo(v.name, v.meta.dtype if v.meta else DType.FLOAT32,
                                    v.meta.shape if v.meta else None) for v in values)

        with entry.lock:
            pools = list(entry.models.values())
        return GraphInfo(graph_id, g.name, infos(g.inputs), infos(g.outputs), len(g.nodes),
                         bool(pools), entry.gears, sum(p.device_bytes for p in pools),
                         len(pools))

    def batched_outputs(self, graph_id: int) -> set[str]:
        """Outputs of a geared graph whose first dimension is the batch."""
        entry = self._entry(graph_id)
        return set(entry.batched_outputs) if entry.gears else set()

    def list_graphs(self) -> list[GraphInfo]:
        """`graph_info` of every graph of the session, by id."""
        with self._lock:
            ids = list(self._graphs)
        return [self.graph_info(i) for i in ids]

    # ---- compile and run --------------------------------------------------------------
    def compile_graph(self, graph_id: int,
                      input_shapes: Mapping[str, Sequence[int]] | None = None) -> CompileReport:
        """Compile (and load) for the declared shapes, every gear, or `input_shapes`.

        A graph with symbolic dims, no gears and no shapes given is validated now and
        compiled per concrete signature on first run.
        """
        self._touch()
        entry = self._entry(graph_id)
        with self._running():
            if entry.gears and not input_shapes:
                pools = [self._gear_pool(entry, g) for g in entry.gears]
                return pools[-1].compiled.report
            if entry.symbolic and not input_shapes:
                report = entry.analyze(self._compile_options)
                entry.last_report = report
                return report
            return self._pool_for(entry, self._shapes(entry, input_shapes)).compiled.report

    def run_graph(self, graph_id: int, inputs: Mapping[str, np.ndarray],
                  output_names: Sequence[str] | None = None, *,
                  iterations: int = 1, return_all: bool = False,
                  control: RunControl | None = None,
                  times: StageTimes | None = None) -> dict[str, np.ndarray]:
        """Outputs by name, in graph order or in the order of `output_names`.

        `iterations=N` is sink mode (GE's iterations_per_loop): the graph runs N times in
        one call (one native launch when the compiled model is one device program). An
        input with one more axis than the graph declares, of length N, gives one slice per
        iteration; an input of the declared rank is reused by every iteration. The result
        is the last iteration's outputs, or with `return_all=True` every iteration's,
        stacked on a new leading axis of length N.

        `control`: the caller's deadline and cancellation, checked while the run waits
        (for a compile or a free instance); `times` receives the run's stage times.
        """
        if type(iterations) is not int or iterations != 1 or return_all:
            return self._run_sink(graph_id, inputs, output_names, iterations, return_all,
                                  control, times)
        # The per-request path: kept lean (a small model runs in tens of microseconds, and
        # after a long one the caller's caches are cold, so each Python step costs more),
        # so no lock (even an uncontended one measured ~6 us here: dict.get and
        # list.append are atomic, and a run that starts as close() runs is like one that
        # started just before it: it holds its model and finishes) and no generator context
        # managers; the model's run() checks the inputs natively in the same call that runs
        # them. (A session with a run in progress is not idle, so last_used is only set
        # when the run ends.)
        self._check_open()
        entry = self._graphs.get(graph_id)
        if entry is None:
            raise NotFound(f"graph {graph_id} not found in session '{self.id}'")
        if type(inputs) is not dict and not isinstance(inputs, Mapping):
            raise InvalidInput(f"inputs must be a mapping of input name to array, got "
                               f"{type(inputs).__name__}", graph=entry.graph.name)
        self._inflight.append(None)
        try:
            if entry.gears:
                return self._run_geared(entry, inputs, output_names, control, times)
            if entry.static_key is not None:
                model = entry.models.get(entry.static_key)
                if model is None:
                    model = self._pool_for(entry, entry.static_shapes, control, times)
            else:
                shapes = []
                for name in entry.input_names:
                    x = inputs.get(name)
                    if x is None:
                        meta = entry.graph.values[name].meta
                        raise InvalidInput(f"missing input '{name}' (expected {meta})",
                                           graph=entry.graph.name, tensor=name)
                    shapes.append(x.shape if type(x) is np.ndarray else np.shape(x))
                key = tuple(shapes)
                last = entry.last_signature
                if last is not None and last[0] == key:
                    model = last[1]
                else:
                    model = self._pool_for(entry, dict(zip(entry.input_names, key)), control,
                                           times)
                    entry.last_signature = (key, model)
            if control is not None:
                control.check(f"starting a run of '{entry.graph.name}'")
            if entry.locks is None:
                return model.run(inputs, output_names, control, times)
            with self._variables.locked(*entry.locks, control,
                                        what=f"a run of '{entry.graph.name}'"):
                return model.run(inputs, output_names, control, times)
        finally:
            self._inflight.pop()
            self.last_used = time.monotonic()

    def _run_sink(self, graph_id: int, inputs: Mapping[str, np.ndarray],
                  output_names: Sequence[str] | None, iterations: int, return_all: bool,
                  control: RunControl | None, times: StageTimes | None
                  ) -> dict[str, np.ndarray]:
        """run_graph's sink mode: the inputs split into N feeds, run as one launch."""
        self._check_open()
        entry = self._graphs.get(graph_id)
        if entry is None:
            raise NotFound(f"graph {graph_id} not found in session '{self.id}'")
        name = entry.graph.name
        if type(iterations) is bool or not isinstance(iterations, (int, np.integer)) or \
                not 1 <= iterations <= MAX_SINK_ITERATIONS:
            raise InvalidInput(f"iterations must be an integer in [1, {MAX_SINK_ITERATIONS}], "
                               f"got {iterations!r}", graph=name)
        iterations = int(iterations)
        if not isinstance(inputs, Mapping):
            raise InvalidInput(f"inputs must be a mapping of input name to array, got "
                               f"{type(inputs).__name__}", graph=name)
        shared: dict[str, np.ndarray] = {}
        sliced: dict[str, np.ndarray] = {}
        for key, value in inputs.items():
            try:
                x = np.asarray(value)
            except (ValueError, TypeError) as exc:  # a ragged list, an object numpy refuses
                raise InvalidInput(f"input '{key}' is not an array: {exc}", graph=name,
                                   tensor=key) from None
            v = entry.graph.values.get(key)
            rank = len(v.meta.shape) if v is not None and v.meta is not None and \
                v.meta.shape is not None else None
            if rank is not None and x.ndim == rank + 1:
                if x.shape[0] != iterations:
                    raise InvalidInput(
                        f"input '{key}' has shape {list(x.shape)}: its leading axis gives one "
                        f"slice per iteration, so it must be {iterations} long (or the "
                        f"input has rank {rank}, reused by every iteration)",
                        graph=name, tensor=key)
                sliced[key] = x
            else:
                shared[key] = x  # the declared rank (or unknown): the usual checks word it
        feeds = [{**shared, **{k: x[i] for k, x in sliced.items()}}
                 for i in range(iterations if sliced else 1)]
        self._inflight.append(None)
        try:
            if entry.gears:  # a gear per batch: each iteration takes the usual path
                results = [self._run_geared(entry, feeds[i if sliced else 0], output_names,
                                            control, times) for i in range(iterations)]
            else:
                shapes = {k: np.shape(x) for k, x in feeds[0].items()}
                shapes = {k: shapes[k] for k in entry.input_names if k in shapes}
                if len(shapes) != len(entry.input_names):
                    missing = [k for k in entry.input_names if k not in shapes][0]
                    raise InvalidInput(f"missing input '{missing}' "
                                       f"(expected {entry.graph.values[missing].meta})",
                                       graph=name, tensor=missing)
                model = self._pool_for(entry, shapes, control, times)
                self._check_sink_outputs(model, iterations if return_all else 1)
                if control is not None:
                    control.check(f"starting a run of '{name}'")
                with stage(times, "execute"), self._variables.locked(
                        *(entry.locks or ((), ())), control, what=f"a run of '{name}'"):
                    out = model.execute(feeds if sliced else feeds[0], output_names,
                                        iterations=iterations, return_all=return_all)
                if not return_all:
                    return out
                results = out
            if not return_all:
                return results[-1]
            with stage(times, "output_copy"):
                return {k: np.stack([r[k] for r in results]) for k in results[0]}
        finally:
            self._inflight.pop()
            self.last_used = time.monotonic()

    def _check_sink_outputs(self, model: LoadedModel, copies: int) -> None:
        """Refuses a sink run whose outputs (every iteration's, with return_all) would not
        fit what the session may still hold, before anything runs."""
        budget = self._budget()
        if budget is None:
            return
        nbytes = 0
        for spec in model.compiled.outputs:
            if all(isinstance(d, int) for d in spec.shape):
                nbytes += int(np.prod(spec.shape, dtype=np.int64)) * spec.dtype.itemsize
        if nbytes * copies > budget.bytes:
            raise ResourceExhausted(
                f"graph '{model.compiled.name}': {copies} iterations of outputs need "
                f"{nbytes * copies} bytes, more than the session may hold: {budget.reason}")

    def _run_geared(self, entry: _GraphEntry, inputs: Mapping[str, np.ndarray],
                    output_names: Sequence[str] | None, control: RunControl | None,
                    times: StageTimes | None) -> dict[str, np.ndarray]:
        names = [v.name for v in entry.graph.inputs]
        unknown = sorted(set(inputs) - set(names))
        if unknown:
            raise InvalidInput(f"unknown input '{unknown[0]}'; the graph's inputs are {names}",
                               graph=entry.graph.name, tensor=unknown[0])
        rows = gearing.batch_rows(entry.graph.name, inputs, names)
        chunks = []
        for start, stop, gear in gearing.plan(rows, entry.gears):
            pool = self._gear_pool(entry, gear, control, times)
            with stage(times, "input_copy"):
                feed = {k: gearing.pad(np.asarray(inputs[k])[start:stop], gear) for k in names}
            if control is not None:
                control.check(f"starting a run of '{entry.graph.name}'")
            out = pool.run(feed, output_names, control, times)
            with stage(times, "output_copy"):
                chunks.append({k: v[:stop - start] if k in entry.batched_outputs
                               and np.ndim(v) and v.shape[0] == gear else v
                               for k, v in out.items()})
        return gearing.concat(chunks, entry.batched_outputs)

    def export_model(self, graph_id: int,
                     input_shapes: Mapping[str, Sequence[int]] | None = None) -> bytes:
        """The graph compiled (every gear, or the given signature) as offline model bytes."""
        self._touch()
        entry = self._entry(graph_id)
        with self._running():
            if isinstance(entry, _OfflineEntry) and not input_shapes:
                return offline.save(entry.offline.models, gear=entry.offline.gear)
            if entry.gears and not input_shapes:
                models = [self._gear_pool(entry, g).compiled for g in entry.gears]
                return offline.save(models, gear=offline.Gear(entry.batch_dim, entry.gears))
            if entry.symbolic and not input_shapes:
                raise InvalidInput(f"graph {graph_id} has symbolic inputs and no gears: give "
                                   f"input_shapes to export it", graph=entry.graph.name)
            return offline.save(self._pool_for(entry, self._shapes(entry, input_shapes)).compiled)

    @staticmethod
    def _shapes(entry: _GraphEntry, input_shapes: Mapping[str, Sequence[int]] | None) -> dict:
        return requested_shapes(entry.graph, input_shapes)

    def _gear_pool(self, entry: _GraphEntry, gear: int, control: RunControl | None = None,
                   times: StageTimes | None = None) -> LoadedModel:
        return self._gear_call(gear, self._pool_for, entry, entry.gear_shapes(gear), control,
                               times)

    def _pool_for(self, entry: _GraphEntry, shapes: Mapping[str, Sequence[Dim]],
                  control: RunControl | None = None, times: StageTimes | None = None
                  ) -> LoadedModel:
        key = _signature_key(shapes)
        with entry.lock:
            pool = entry.models.get(key)
            if pool is not None:
                entry.models.move_to_end(key)
                return pool
        self._check_shapes(entry, shapes)
        t0 = time.perf_counter()
        while not entry.compile_lock.acquire(timeout=POLL_SECONDS):
            if control is not None:
                control.check(f"waiting for graph '{entry.graph.name}' to compile")
        try:
            with entry.lock:
                pool = entry.models.get(key)
            if pool is not None:  # compiled while this run waited
                if times is not None:
                    times.add("queue", time.perf_counter() - t0)
                return pool
            compiled, compiled_here = self._compile(entry, shapes, control)
            nbytes = compiled.device_bytes * self.options.instances
            self._admit(nbytes, entry)
            try:
                t_load = time.perf_counter()
                pool = LoadedModel(compiled, self._device_for(compiled), self.options.instances,
                                   host_budget=self._budget,
                                   variables=self._variables.natives(
                                       s.name for s in compiled.variables))
                load_seconds = time.perf_counter() - t_load
                with entry.lock:
                    entry.models[key] = pool
                    entry.last_report = compiled.report
                    while len(entry.models) > MAX_SIGNATURES + len(entry.gears):
                        _, evicted = entry.models.popitem(last=False)
                        if entry.last_signature and entry.last_signature[1] is evicted:
                            entry.last_signature = None  # let its memory go now
            finally:
                with self._lock:
                    self._reserved -= nbytes
        finally:
            entry.compile_lock.release()
        if self._on_compile is not None and compiled_here:
            self._on_compile(compiled.report, load_seconds)
        return pool

    def _compile(self, entry: _GraphEntry, shapes: Mapping[str, Sequence[Dim]],
                 control: RunControl | None) -> tuple[CompiledModel, bool]:
        """The model for `shapes` and whether it was compiled here (not read from an offline
        file or the compile cache)."""
        def compile_now() -> CompiledModel:
            return entry.compile(self._compile_options, shapes, self._budget())

        if isinstance(entry, _OfflineEntry):
            return compile_now(), False
        if self.compile_cache is None:
            return compile_now(), True
        check = None if control is None else functools.partial(
            control.check, f"waiting for graph '{entry.graph.name}' to compile elsewhere")
        compiled, cached = self.compile_cache.fetch_or_compile(
            entry.graph, shapes, self._compile_options, compile_now, check)
        return compiled, not cached

    def _device_for(self, compiled: CompiledModel):
        """The session's device, or for a model compiled for another backend (compile option
        `target`), that backend's device with the same thread budget."""
        if compiled.backend == self.device.name:
            return self.device
        return default_device(self.device.threads, backend=compiled.backend)

    @property
    def device_bytes(self) -> int:
        """Device memory the session holds: its loaded models and its variables."""
        with self._lock:
            entries = list(self._graphs.values())
        total = self._variables.nbytes
        for e in entries:
            with e.lock:
                total += sum(p.device_bytes for p in e.models.values())
        return total

    def runtime_stats(self) -> RuntimeStats:
        """The runtime's statistics (engine.runtime.RuntimeStats) summed over every loaded
        model of the session: each graph, signature and gear."""
        with self._lock:
            entries = list(self._graphs.values())
        total = RuntimeStats()
        for e in entries:
            with e.lock:
                pools = list(e.models.values())
            for model in pools:
                total += model.stats()
        return total

    @property
    def loaded_models(self) -> int:
        """Loaded models: one per graph, compiled signature and gear."""
        with self._lock:
            entries = list(self._graphs.values())
        return sum(len(e.models) for e in entries)

    # ---- lifecycle --------------------------------------------------------------------
    def info(self) -> SessionInfo:
        """The session's id, options, age, idleness, graphs, device bytes and runs in
        progress (`SessionInfo`, what ListSessions answers)."""
        with self._lock:
            ids = tuple(self._graphs)
            active = self._active + len(self._inflight)
        return SessionInfo(self.id, self.options, self.created_at, self.idle_seconds(), ids,
                           self.device_bytes, active)

    def idle_seconds(self) -> float:
        """Seconds since the session was last used; 0 while it compiles or runs (the
        server closes sessions idle past `session_idle_seconds`)."""
        with self._lock:
            if self._active or self._inflight:
                return 0.0
        return time.monotonic() - self.last_used

    def close(self) -> None:
        """Drop every graph and loaded model: their device memory is freed once runs in
        progress (which hold their model) finish."""
        with self._lock:
            self.closed = True
            self._graphs.clear()
        self._variables.close()

    def __enter__(self) -> Session:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    @contextlib.contextmanager
    def _running(self) -> Iterator[None]:
        with self._lock:
            self._active += 1
        try:
            yield
        finally:
            with self._lock:
                self._active -= 1
            self._touch()

    def _touch(self) -> None:
        self.last_used = time.monotonic()

    def _check_open(self) -> None:
        if self.closed:
            raise NotFound(f"session '{self.id}' is closed")

    def _entry(self, graph_id: int) -> _GraphEntry:
        with self._lock:
            self._check_open()
            entry = self._graphs.get(graph_id)
        if entry is None:
            raise NotFound(f"graph {graph_id} not found in session '{self.id}'")
        return entry
