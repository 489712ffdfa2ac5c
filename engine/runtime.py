"""Stages 5 and 6, load and execute: CompiledModel -> native models -> outputs.

Device programs become native `_runtime.Model`s: weights taken once, kernels prepared once
for their exact shapes, and `instances` arenas so that that many requests run at once
(more queue). Their streams run on the device's shared worker lanes; no Python runs
between their kernels. Host programs run their nodes with the numpy reference kernels
between device launches, exchanging tensors through the cut edges.

Inputs that are C-contiguous arrays of the right dtype are read by the kernels in place,
and outputs are the arrays the last kernels wrote; anything else costs one copy, counted
in `stats().bytes_copied`.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import itertools
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence

import numpy as np

from graphengine import _runtime
from graphengine.errors import Cancelled, DeadlineExceeded

from .bounds import MemoryBudget, physical_memory_bytes
from .errors import ExecutionError, GraphEngineError, InvalidGraph, InvalidInput
from .gc_pause import paused
from .host_plan import HostPlan
from .model import CompiledModel, DeviceProgram, HostProgram, TensorSig, check_dataflow
from .provenance import check_cpu

_device_lock = threading.Lock()
_devices: dict[tuple[str, int], _runtime.Device] = {}


def default_device(threads: int = 0, backend: str = "host") -> _runtime.Device:
    """The process-wide device of `backend` (one per thread budget); its lanes start when
    a model first runs on it."""
    with _device_lock:
        key = (backend, threads)
        if key not in _devices:
            try:
                _devices[key] = _runtime.Device(threads, backend)
            except _runtime.InvalidArgument as exc:
                raise InvalidInput(str(exc), stage="load") from None
        return _devices[key]


def kernel_info(op: str, dtypes: Sequence[str], shapes: Sequence[Sequence[int]],
                attrs: Mapping | None = None, device: _runtime.Device | None = None) -> dict:
    """The device's answer for one node (default: the host backend's):
    {"supported", "reason", "preferred_format", "formats"}."""
    return (device or default_device()).kernel_info(
        op, list(dtypes), [list(s) for s in shapes], dict(attrs or {}))


def check_inputs(name: str, sigs: Sequence[TensorSig], inputs: Mapping[str, np.ndarray]
                 ) -> dict[str, np.ndarray]:
    """Match request tensors to the signature: names, dtypes, shapes (symbols bind once)."""
    expected = {s.name for s in sigs}
    extra = sorted(set(inputs) - expected)
    if extra:
        raise InvalidInput(f"unknown input '{extra[0]}'; the graph's inputs are "
                           f"{sorted(expected)}", graph=name, tensor=extra[0])
    bound: dict[str, int] = {}
    out = {}
    for sig in sigs:
        if sig.name not in inputs:
            raise InvalidInput(f"missing input '{sig.name}' (expected {sig})", graph=name,
                               tensor=sig.name)
        try:
            arr = np.asarray(inputs[sig.name])
        except (ValueError, TypeError) as exc:  # a ragged nested list, an object without
            # an array interface: numpy's own words name what is wrong with it
            raise InvalidInput(f"input '{sig.name}' is not an array: {exc}", graph=name,
                               tensor=sig.name) from None
        if arr.dtype != sig.dtype.numpy and arr.dtype.newbyteorder("=") == sig.dtype.numpy:
            arr = arr.astype(sig.dtype.numpy)  # the same values in the other byte order
        if arr.dtype != sig.dtype.numpy:
            raise InvalidInput(f"input '{sig.name}': expected dtype {sig.dtype.value}, got "
                               f"{arr.dtype.name}", graph=name, tensor=sig.name)
        ok = arr.ndim == len(sig.shape)
        for want, got in zip(sig.shape, arr.shape) if ok else ():
            if isinstance(want, str):
                ok = bound.setdefault(want, got) == got
            else:
                ok = want == got
            if not ok:
                break
        if not ok:
            raise InvalidInput(f"input '{sig.name}': expected shape {sig}, got "
                               f"{arr.dtype.name}[{','.join(map(str, arr.shape))}]",
                               graph=name, tensor=sig.name)
        out[sig.name] = arr
    return out


NativeError = _runtime.Error  # what the native runtime raises; native_error() words it


def native_error(exc: Exception, graph: str) -> GraphEngineError:
    """The engine's error for a native runtime exception raised running `graph`."""
    if isinstance(exc, _runtime.InvalidArgument):
        return InvalidInput(str(exc), graph=graph, stage="execute")
    if isinstance(exc, _runtime.DeadlineExceeded):
        return DeadlineExceeded(str(exc), graph=graph, stage="queue")
    if isinstance(exc, _runtime.Cancelled):
        return Cancelled(str(exc), graph=graph, stage="queue")
    return ExecutionError(str(exc), graph=graph, stage="execute")


BodyRun = Callable[[Sequence[np.ndarray], dict[str, np.ndarray]], list[np.ndarray]]


def _body_runner(model: LoadedModel, outer_names: Sequence[str]) -> BodyRun:
    """A compiled control-flow body as `control.body_runner` calls it: the formal inputs by
    position (the body's inputs that are not enclosing values), enclosing values by name;
    its outputs in order. A body that is one device program (most) is one native call per
    iteration, its arguments and results routed by index; others run as any model does."""
    c = model.compiled
    outer_set = set(outer_names)
    formal = {s.name: k for k, s in enumerate(s for s in c.inputs if s.name not in outer_set)}
    names = [s.name for s in c.outputs]
    only = c.programs[0] if len(c.programs) == 1 else None
    if not isinstance(only, DeviceProgram) or c.row_counts:  # run() trims rows
        def run_model(formals: Sequence[np.ndarray], outer: dict[str, np.ndarray]
                      ) -> list[np.ndarray]:
            feed = {name: formals[k] for name, k in formal.items()}
            feed.update((s.name, outer[s.name]) for s in c.inputs if s.name not in formal)
            result = model.run(feed)
            return [result[name] for name in names]
        return run_model

    native = model.natives[only.index]
    args_from = [(formal.get(name, -1), name) for name in only.input_names]
    produced = {name: i for i, name in enumerate(only.output_names)}
    results_from = [("program", produced[src]) if src in produced else
                    ("constant", c.constants[src]) if src in c.constants else
                    ("formal", formal[src]) if src in formal else ("outer", src)
                    for src in c.output_sources]

    def run_native(formals: Sequence[np.ndarray], outer: dict[str, np.ndarray]
                   ) -> list[np.ndarray]:
        args = [formals[k] if k >= 0 else outer[name] for k, name in args_from]
        try:
            outs = native.execute(args)
        except _runtime.Error as exc:
            raise native_error(exc, c.name) from None
        return [outs[x] if kind == "program" else x.copy() if kind == "constant" else
                formals[x] if kind == "formal" else outer[x] for kind, x in results_from]
    return run_native


class LoadedModel:
    """A compiled model resident on a device, ready to execute.

    `instances` arenas share one copy of the weights and of the prepared kernels: that many
    `execute()` calls run at once; more wait for a free instance. `execute_async()` returns
    a `concurrent.futures.Future`. `execute(..., iterations=N)` is sink mode: N runs in one
    launch over a queue of inputs.

    `host_budget()` gives the memory a host program's run may hold at once (a session's:
    what its quota has left; by default the machine's): its kernels size outputs from data
    (a Tile's repeats, a Range's limit), so the bound is kept as they allocate.
    """

    @paused
    def __init__(self, compiled: CompiledModel, device: _runtime.Device | None = None,
                 instances: int = 1,
                 host_budget: Callable[[], MemoryBudget | None] | None = None,
                 variables: Mapping[str, _runtime.Variable] | None = None) -> None:
        if not isinstance(instances, int) or instances < 1:
            raise InvalidInput(f"instances must be a positive integer, got {instances!r}",
                               graph=compiled.name, stage="load")
        check_dataflow(compiled)
        self.compiled = compiled
        self.device = device or default_device(backend=compiled.backend)
        if self.device.name != compiled.backend:
            raise InvalidInput(f"model '{compiled.name}' was compiled for backend "
                               f"'{compiled.backend}', not for a '{self.device.name}' device",
                               graph=compiled.name, stage="load")
        check_cpu(compiled.name, compiled.provenance, self.device.caps.get("isa", ""))
        self.instances = instances
        self.host_budget = host_budget or _machine_budget
        self.natives: dict[int, _runtime.Model] = {}
        variables = variables or {}
        for prog in compiled.programs:
            if isinstance(prog, DeviceProgram):
                missing = [n for n in prog.variables if n not in variables]
                if missing:
                    raise InvalidGraph(f"model '{compiled.name}' uses variable '{missing[0]}', "
                                       f"which it was not given", graph=compiled.name,
                                       stage="load")
                try:
                    self.natives[prog.index] = _runtime.Model(
                        self.device, prog.spec(compiled.name,
                                               [variables[n] for n in prog.variables]),
                        instances)
                except _runtime.Error as exc:
                    raise InvalidGraph(str(exc), graph=compiled.name, stage="load") from None
        # Control-flow steps whose bodies were compiled: each body is a model of its own,
        # loaded beside this one (same device, instances and budget); the step's attributes
        # carry the runners (control.body_runner) that feed it.
        self.bodies: dict[tuple[int, int], dict[str, LoadedModel]] = {}
        self._step_attrs: dict[tuple[int, int], dict] = {}
        for prog in compiled.programs:
            if isinstance(prog, HostProgram):
                for i, step in enumerate(prog.steps):
                    if step.bodies:
                        loaded = {key: LoadedModel(body, self.device, instances,
                                                   host_budget=self.host_budget)
                                  for key, body in step.bodies.items()}
                        self.bodies[prog.index, i] = loaded
                        outer = step.attrs.get("_outer") or ()
                        self._step_attrs[prog.index, i] = {
                            **step.attrs, "_bodies": {key: _body_runner(m, outer)
                                                      for key, m in loaded.items()}}
        self._host_plans = {
            prog.index: HostPlan(prog, compiled.name,
                                 {i: attrs for (p, i), attrs in self._step_attrs.items()
                                  if p == prog.index})
            for prog in compiled.programs if isinstance(prog, HostProgram)}
        self._executor: concurrent.futures.ThreadPoolExecutor | None = None
        self._lock = threading.Lock()
        self._runs = 0
        self._iterations = 0
        self._seconds = 0.0
        # outputs whose rows the data decides: trimmed to their counts (values the programs
        # hand out beside the outputs, dropped from what a run returns)
        self._row_counts = dict(compiled.row_counts)
        self._count_keys = tuple(sorted(set(self._row_counts.values())))
        self._fast = self._fast_plan()
        # A model that is one device program fed by the graph's inputs runs a request in one
        # native call that takes and returns the dicts: run_named(inputs) -> outputs (folded
        # constant outputs as copies), or a RunMismatch for the general path to word or
        # convert (run()).
        self.direct = None
        if self._fast is not None:
            native, feed, _, outs = self._fast
            native.bind_names([name for name, _, _ in feed],
                              [(name, i) for name, i, _ in outs if i >= 0],
                              {name: const for name, i, const in outs if i < 0})
            self.direct = native.run_named
        # A model of several programs whose first is a device program fed by exactly the
        # graph's inputs (a detector: the network, then a host tail after its
        # NonMaxSuppression): that program runs by the same one-call check, its outputs
        # come back as the dict the later programs read (`head`).
        self.head = None
        if self.direct is None:
            self.head = self._head_call()

    def _fast_plan(self):
        """For a model that is one device program fed by the graph's inputs: what a call
        must check, and where each output comes from, so execute() can skip the general
        path (checks that give the same answers, in fewer steps)."""
        prog = self._sink_program()
        c = self.compiled
        if prog is None or any(isinstance(d, str) for s in c.inputs for d in s.shape) or \
                sorted(prog.input_names) != sorted(s.name for s in c.inputs):
            return None
        sigs = {s.name: (s.dtype.numpy, tuple(s.shape)) for s in c.inputs}
        feed = [(n, *sigs[n]) for n in prog.input_names]
        outs = []
        for name, src in zip((s.name for s in c.outputs), c.output_sources):
            if src in c.constants:
                outs.append((name, -1, c.constants[src]))
            else:
                outs.append((name, prog.output_names.index(src), None))
        for src in self._count_keys:
            if src not in prog.output_names:
                return None
            outs.append((src, prog.output_names.index(src), None))
        return self.natives[prog.index], feed, len(c.inputs), outs

    def _head_call(self):
        c = self.compiled
        first = c.programs[0] if len(c.programs) > 1 else None
        if not isinstance(first, DeviceProgram) or first.variables or \
                any(isinstance(d, str) for s in c.inputs for d in s.shape) or \
                sorted(first.input_names) != sorted(s.name for s in c.inputs):
            return None
        native = self.natives[first.index]
        native.bind_names(list(first.input_names),
                          [(name, i) for i, name in enumerate(first.output_names)], None)
        return native.run_named

    @property
    def device_bytes(self) -> int:
        """Device memory held: every instance's arenas plus one copy of the weights (and
        those of the control-flow bodies it loaded)."""
        return sum(p.arena_bytes * self.instances + p.weight_bytes
                   for p in self.compiled.programs if isinstance(p, DeviceProgram)) + \
            sum(m.device_bytes for loaded in self.bodies.values() for m in loaded.values())

    # ---- execution ----------------------------------------------------------------------
    def execute(self, inputs: Mapping[str, np.ndarray] | Sequence[Mapping[str, np.ndarray]],
                output_names: Sequence[str] | None = None, *, iterations: int = 1,
                return_all: bool = False) -> dict[str, np.ndarray] | list[dict[str, np.ndarray]]:
        """Run the model; returns {output name: array}.

        With `iterations=N` (sink mode) `inputs` is one mapping used by every iteration or
        a sequence of N mappings; the result is the last iteration's outputs, or a list of
        every iteration's with `return_all=True`. A model that is one device program runs
        all N iterations in one native launch; otherwise they run one after the other.
        """
        if iterations == 1 and not return_all and isinstance(inputs, Mapping):
            return self.run(inputs, output_names)
        start = time.perf_counter()
        if not isinstance(iterations, int) or iterations < 1:
            raise InvalidInput(f"iterations must be a positive integer, got {iterations!r}",
                               graph=self.compiled.name)
        per_iteration = not isinstance(inputs, Mapping)
        if per_iteration:
            if isinstance(inputs, (str, bytes)) or not isinstance(inputs, Iterable):
                raise InvalidInput(f"inputs must be a mapping of input name to array (or one "
                                   f"such mapping per iteration), got "
                                   f"{type(inputs).__name__}", graph=self.compiled.name)
            feeds = list(itertools.islice(inputs, iterations + 1))
            if len(feeds) != iterations or not all(isinstance(f, Mapping) for f in feeds):
                raise InvalidInput(f"expected {iterations} input mappings (one per iteration) "
                                   f"or one mapping, got {type(inputs).__name__} of "
                                   f"{len(feeds)}", graph=self.compiled.name)
        else:
            feeds = [inputs]
        if iterations == 1:
            result: dict | list = self._execute_once(feeds[0], output_names)
            if return_all:
                result = [result]
        elif self._sink_program() is not None:
            result = self._execute_sink(feeds, output_names, iterations, return_all)
        else:
            results = [self._execute_once(feeds[i if per_iteration else 0], output_names)
                       for i in range(iterations)]
            result = results if return_all else results[-1]
        self._count(iterations, start)
        return result

    def _count(self, iterations: int, start: float) -> None:
        """One call of `iterations` that began at `start` (perf_counter), unless the model is
        one native program, whose native model counts its own launches."""
        if self._fast is not None:
            return
        with self._lock:
            self._runs += 1
            self._iterations += iterations
            self._seconds += time.perf_counter() - start

    def execute_async(self, inputs, output_names: Sequence[str] | None = None, *,
                      iterations: int = 1, return_all: bool = False
                      ) -> concurrent.futures.Future:
        """`execute()` on a worker thread; the Future holds its result or its exception."""
        with self._lock:
            if self._executor is None:
                self._executor = concurrent.futures.ThreadPoolExecutor(
                    max_workers=self.instances, thread_name_prefix=f"ge-{self.compiled.name}")
            executor = self._executor
        return executor.submit(self.execute, inputs, output_names, iterations=iterations,
                               return_all=return_all)

    def close(self) -> None:
        """Waits for async runs, then lets the native models go."""
        with self._lock:
            executor, self._executor = self._executor, None
        if executor is not None:
            executor.shutdown(wait=True)
        self.natives = {}
        self._fast = self.direct = self.head = None  # they hold a native model too
        for loaded in self.bodies.values():
            for m in loaded.values():
                m.close()

    def run(self, inputs: Mapping[str, np.ndarray], output_names: Sequence[str] | None = None,
            control=None, times=None) -> dict[str, np.ndarray]:
        """One run: the path every caller takes (Session.run_graph in-process, over gRPC and
        KServe, batching, `execute`).

        A model that is one device program runs in one native call that checks the inputs
        itself (`direct`); only when they are not exactly its signature does Python look at
        them, to word the error or convert what numpy can (lists, other byte orders) for the
        general path. `control.deadline` and `control.token` (a `_runtime.CancelToken` set
        when the caller goes away) end the wait for a free instance inside the runtime's own
        queue with DeadlineExceeded / Cancelled, and nothing runs; `times` (StageTimes)
        receives the queue and execute seconds."""
        direct = self.direct
        if direct is not None and control is None and times is None:
            try:
                result = direct(inputs)  # counted by the native model
            except _runtime.Error as exc:
                raise native_error(exc, self.compiled.name) from None
            if type(result) is dict:
                if self._count_keys:
                    result = self._trim_rows(result, result, drop=True)
                return result if output_names is None else self._select(result, output_names)
            return self._execute_general(inputs, output_names, None)
        head = self.head
        if head is not None and control is None and times is None:
            start = time.perf_counter()
            try:
                env = head(inputs)
            except _runtime.Error as exc:
                raise native_error(exc, self.compiled.name) from None
            if type(env) is dict:
                env.update(inputs)  # exactly the graph's inputs: run_named checked them
                result = self._run_rest(env, output_names)
                self._count(1, start)
                return result
            return self._execute_general(inputs, output_names, None)
        limits = {"queue": 0.0, "deadline": getattr(control, "deadline", None),
                  "token": getattr(control, "token", None)}
        start = time.perf_counter()
        try:
            if direct is not None:
                result = self._call(None, inputs, limits)
                if type(result) is dict:
                    if self._count_keys:
                        result = self._trim_rows(result, result, drop=True)
                    return result if output_names is None else self._select(result,
                                                                            output_names)
            return self._execute_general(inputs, output_names, limits)
        finally:
            if times is not None:
                times.add("queue", limits["queue"])
                times.add("execute", time.perf_counter() - start - limits["queue"])

    def _execute_general(self, inputs, output_names: Sequence[str] | None,
                         limits: dict | None) -> dict[str, np.ndarray]:
        """Inputs that are not exactly the signature, or a model of several programs: the
        inputs are checked (and worded, or converted) in Python, then each program runs."""
        if not isinstance(inputs, Mapping):
            raise InvalidInput(f"inputs must be a mapping of input name to array, got "
                               f"{type(inputs).__name__}", graph=self.compiled.name)
        start = time.perf_counter()
        result = self._execute_once(inputs, output_names, limits)
        self._count(1, start)
        return result

    def _execute_once(self, inputs: Mapping[str, np.ndarray],
                      output_names: Sequence[str] | None,
                      limits: dict | None = None) -> dict[str, np.ndarray]:
        c = self.compiled
        env: dict[str, np.ndarray] = dict(check_inputs(c.name, c.inputs, inputs))
        for prog in c.programs:
            if isinstance(prog, DeviceProgram):
                self._run_device(prog, env, limits)
            else:
                self._run_host(prog, env)
        return self._pick_outputs(env, output_names)

    def _run_rest(self, env: dict[str, np.ndarray], output_names: Sequence[str] | None
                  ) -> dict[str, np.ndarray]:
        """The programs after the head, then the outputs."""
        for prog in self.compiled.programs[1:]:
            if isinstance(prog, DeviceProgram):
                self._run_device(prog, env)
            else:
                self._host_plans[prog.index].run(env, self.host_budget())
        return self._pick_outputs(env, output_names)

    def _select(self, result: dict[str, np.ndarray], output_names: Sequence[str]
                ) -> dict[str, np.ndarray]:
        """The named outputs of a direct run's result (every one for an empty list)."""
        if not output_names:
            return result
        for name in output_names:
            if name not in result:
                names = [s.name for s in self.compiled.outputs]
                raise InvalidInput(f"unknown output '{name}'; the graph's outputs are {names}",
                                   graph=self.compiled.name, tensor=name)
        return {name: result[name] for name in output_names}

    def _pick_outputs(self, env: Mapping[str, np.ndarray],
                      output_names: Sequence[str] | None) -> dict[str, np.ndarray]:
        c = self.compiled
        names = [s.name for s in c.outputs]
        wanted = list(output_names) if output_names else names
        result = {}
        for name in wanted:
            if name not in names:
                raise InvalidInput(f"unknown output '{name}'; the graph's outputs are {names}",
                                   graph=c.name, tensor=name)
            src = c.output_sources[names.index(name)]
            result[name] = c.constants[src].copy() if src in c.constants else env[src]
        return self._trim_rows(result, env) if self._count_keys else result

    def _trim_rows(self, result: dict[str, np.ndarray], counts: Mapping[str, np.ndarray],
                   drop: bool = False) -> dict[str, np.ndarray]:
        """The outputs whose rows the data decides, cut to their first `count` rows (read
        from `counts`; `drop`: the count values are removed from `result`)."""
        seen: dict[str, int] = {}
        for name, src in self._row_counts.items():
            arr = result.get(name)
            if arr is None:
                continue
            k = seen.get(src)
            if k is None:  # one int64 the program wrote (a file's other shapes count as 0)
                flat = np.asarray(counts[src]).reshape(-1)
                k = seen[src] = int(flat[0]) if flat.size and flat.dtype.kind in "iu" else 0
            result[name] = arr[:max(0, min(k, len(arr)))]
        if drop:
            for src in self._count_keys:
                result.pop(src, None)
        return result

    def _sink_program(self) -> DeviceProgram | None:
        """The one device program a whole-model sink launch can run, if the model is one."""
        c = self.compiled
        if len(c.programs) != 1 or not isinstance(c.programs[0], DeviceProgram):
            return None
        prog = c.programs[0]
        graph_inputs = {s.name for s in c.inputs}
        produced = set(prog.output_names) | set(c.constants)
        if not set(prog.input_names) <= graph_inputs or not set(c.output_sources) <= produced:
            return None
        return prog

    def _execute_sink(self, feeds: list[Mapping[str, np.ndarray]],
                      output_names: Sequence[str] | None, iterations: int,
                      return_all: bool) -> dict | list[dict]:
        c = self.compiled
        prog = self._sink_program()
        assert prog is not None
        lists = []
        for feed in feeds:
            env = check_inputs(c.name, c.inputs, feed)
            lists.append([env[n] for n in prog.input_names])
        args = lists if len(lists) > 1 else lists[0]
        outs = self._call(self.natives[prog.index], args, iterations=iterations,
                          return_all=return_all)
        per_iter = outs if return_all else [outs]
        results = [self._pick_outputs(dict(zip(prog.output_names, o)), output_names)
                   for o in per_iter]
        return results if return_all else results[0]

    def _call(self, native: _runtime.Model | None, args, limits: dict | None = None, **kw):
        """native.execute (or, for native None, the bound one-call `direct` with a dict of
        inputs); `limits` (run's) adds the caller's deadline and cancel token, and collects
        the time spent waiting for an instance."""
        timing: dict = {}
        if limits is not None:
            if limits["deadline"] is not None:
                kw["deadline"] = max(0.0, limits["deadline"] - time.monotonic())
            kw["cancel"] = limits["token"]
            kw["timing"] = timing
        try:
            return native.execute(args, **kw) if native is not None else self.direct(args, **kw)
        except _runtime.Error as exc:
            raise native_error(exc, self.compiled.name) from None
        finally:
            if limits is not None:
                limits["queue"] += timing.get("queue_seconds", 0.0)

    def _run_device(self, prog: DeviceProgram, env: dict[str, np.ndarray],
                    limits: dict | None = None) -> None:
        # Arrays go to the runtime as they are: it reads usable ones in place and converts
        # (and counts) the rest once.
        outs = self._call(self.natives[prog.index], [env[n] for n in prog.input_names],
                          limits)
        env.update(zip(prog.output_names, outs))

    def _run_host(self, prog: HostProgram, env: dict[str, np.ndarray]) -> None:
        self._host_plans[prog.index].run(env, self.host_budget())

    # ---- statistics ---------------------------------------------------------------------
    def stats(self) -> RuntimeStats:
        """Runs and time of this model, plus totals over its device programs' native
        statistics (`programs` keeps each native model's own)."""
        programs = {idx: m.stats() for idx, m in self.natives.items()}
        if self._fast is not None and programs:  # each call is one launch of its native model
            (only,) = programs.values()
            runs, iterations, seconds = only["runs"], only["iterations"], only["seconds"]
        else:
            with self._lock:
                runs, iterations, seconds = self._runs, self._iterations, self._seconds
        native = programs.values()
        streams = max((p["streams"] for p in native), default=0)
        return RuntimeStats(
            runs=runs, iterations=iterations, seconds=seconds, instances=self.instances,
            device_seconds=sum(p["seconds"] for p in native),
            stream_seconds=tuple(sum(p["stream_seconds"][i] for p in native
                                     if i < len(p["stream_seconds"])) for i in range(streams)),
            streams=streams,
            **{key: sum(p[key] for p in native) for key in _NATIVE_TOTALS},
            programs=programs)


_NATIVE_TOTALS = ("bytes_copied", "bytes_zero_copy", "arena_bytes", "weight_bytes",
                  "prepared_bytes", "prepared_borrowed_bytes", "workspace_bytes", "failures",
                  "tasks")


@dataclasses.dataclass(frozen=True)
class RuntimeStats:
    """What a loaded model (or a session's models, added up) did and holds.

    runs / iterations / seconds: calls, sink iterations and their wall time; device_seconds:
    the native launches' time; stream_seconds: busy time per stream index; bytes_copied /
    bytes_zero_copy: input and output bytes copied vs bound in place; arena / weight /
    prepared / workspace bytes: device memory by kind (arenas of every instance);
    prepared_borrowed_bytes: of the prepared bytes, those another live model of the device
    prepared from the same weights (held once: a graph's programs for other input shapes
    share their weights, codegen/shared_weights.py); failures
    and tasks of the native models; `programs`: each native model's own statistics, by
    program index (empty in a sum)."""

    runs: int = 0
    iterations: int = 0
    seconds: float = 0.0
    instances: int = 0
    device_seconds: float = 0.0
    stream_seconds: tuple[float, ...] = ()
    streams: int = 0
    bytes_copied: int = 0
    bytes_zero_copy: int = 0
    arena_bytes: int = 0
    weight_bytes: int = 0
    prepared_bytes: int = 0
    prepared_borrowed_bytes: int = 0
    workspace_bytes: int = 0
    failures: int = 0
    tasks: int = 0
    programs: Mapping[int, dict] = dataclasses.field(default_factory=dict)

    def __add__(self, other: RuntimeStats) -> RuntimeStats:
        """The two added up (stream by stream for stream_seconds; programs dropped)."""
        if not isinstance(other, RuntimeStats):
            return NotImplemented
        a, b = self.stream_seconds, other.stream_seconds
        longest = max(len(a), len(b))
        summed = {f.name: getattr(self, f.name) + getattr(other, f.name)
                  for f in dataclasses.fields(self)
                  if f.name not in ("stream_seconds", "streams", "programs")}
        return RuntimeStats(**summed, streams=max(self.streams, other.streams),
                            stream_seconds=tuple((a[i] if i < len(a) else 0.0)
                                                 + (b[i] if i < len(b) else 0.0)
                                                 for i in range(longest)))


def _machine_budget() -> MemoryBudget | None:
    total = physical_memory_bytes()
    return MemoryBudget(total, f"the machine has {total}") if total else None


def load(compiled: CompiledModel, device: _runtime.Device | None = None,
         instances: int = 1) -> LoadedModel:
    return LoadedModel(compiled, device, instances)
