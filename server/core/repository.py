"""The model repository: a folder of models served over KServe v2, version by version.

The folder's layouts (a model file, a folder, or Triton's version folders with
config.pbtxt) are read by repository_layout; which models load and when is the model
control mode (model_control). Each version of a model is a `ServedModel` with its own
state: LOADING, then READY or UNAVAILABLE with the reason. One model (or version) loading
or failing does not stop the others from serving. A request names a version or gets the
highest one that is ready.

A model's versions change in one order: the new ones load first, then those no longer
selected are unloaded, each after its requests in flight are done (a request holds its
model from lookup to answer: `serving`). A reload that fails leaves the version that
serves in place.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor

from graphengine.api.types import SessionLimits
from graphengine.engine.errors import FailedPrecondition, InvalidInput, NotFound, Unavailable

from ..logs import log_event
from ..timing import StageTimes
from . import repository_layout as layout
from .model_control import ALL_MODELS, ControlMode, Poller
from .repository_layout import MODEL_SUFFIXES, ModelSource, scan
from .served_model import VERSION, ModelState, ServedModel
from .session import CompileHook

__all__ = ["MODEL_SUFFIXES", "VERSION", "ControlMode", "ModelIndex", "ModelRepository",
           "ModelSource", "ModelState", "scan"]

_log = logging.getLogger("graphengine.server.core.repository")


@dataclasses.dataclass(frozen=True)
class ModelIndex:
    name: str
    version: str  # "" for a model with no version to show (not loaded, or broken whole)
    state: ModelState
    reason: str


class _Version:
    def __init__(self, number: int) -> None:
        self.number = number
        self.state = ModelState.LOADING
        self.reason = ""
        self.model: ServedModel | None = None
        self.stamp: tuple | None = None  # the files it was (or failed to be) loaded from


class _Slot:
    """One model name: its versions, and why it serves none when it does not."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.state = ModelState.UNAVAILABLE
        self.reason = ""
        self.versions: dict[int, _Version] = {}
        self.stamp: tuple | None = None  # the model's files as last synchronized
        self.lock = threading.Lock()  # one load or unload of this name at a time


class ModelRepository:
    def __init__(self, root: str, *, device, limits: SessionLimits | None = None,
                 load_threads: int = 2, on_compile: CompileHook | None = None,
                 on_batch: Callable[[str, int], None] | None = None,
                 mode: ControlMode = ControlMode.NONE, load_models: Sequence[str] = (),
                 poll_seconds: float = 15.0, compile_cache=None) -> None:
        if not os.path.isdir(root):
            raise InvalidInput(f"model repository {root} is not a folder")
        self.root = root
        self.mode = mode
        self._startup = tuple(load_models)
        self._device = device
        self._limits = limits
        self._on_compile = on_compile
        self._on_batch = on_batch
        self._compile_cache = compile_cache  # a CompileCache shared by every model, or None
        self._slots: dict[str, _Slot] = {}
        self._lock = threading.Lock()  # the table: slots, versions, models, states
        self._closed = False
        self._loader = ThreadPoolExecutor(load_threads, thread_name_prefix="graphengine-load")
        self._poller = Poller(self.poll_once, poll_seconds) if mode is ControlMode.POLL \
            else None

    # ---- loading -------------------------------------------------------------------------
    def start(self) -> None:
        """Scan the folder and load what the mode says, in the background."""
        sources, problems = scan(self.root)
        for name, reason in problems.items():
            self._problem(self._slot(name), reason)
        wanted = list(sources)
        if self.mode is ControlMode.EXPLICIT and ALL_MODELS not in self._startup:
            wanted = list(dict.fromkeys(self._startup))
        for name in wanted:
            if name in sources:
                self._slot(name).state = ModelState.LOADING
                self._loader.submit(self._sync_quietly, sources[name])
            elif name not in problems:
                self._problem(self._slot(name), f"model '{name}' (--load-model) is not in "
                                                f"the repository {self.root}")
        if self._poller is not None:
            self._poller.start()

    def _slot(self, name: str) -> _Slot:
        with self._lock:
            return self._slots.setdefault(name, _Slot(name))

    def _problem(self, slot: _Slot, reason: str, log: bool = True) -> None:
        """The model as a whole cannot load: said once per new reason; what serves stays."""
        with self._lock:
            changed = slot.reason != reason
            slot.stamp = None  # once the problem is gone, the next look reads the files
            if not any(v.model is not None for v in slot.versions.values()):
                slot.state = ModelState.UNAVAILABLE
            slot.reason = reason
        if changed and log:
            log_event(_log, logging.WARNING, "model_unavailable", model=slot.name,
                      reason=reason)

    def _sync_quietly(self, source: ModelSource) -> None:
        try:
            self._sync(source, None, force=False)
        except Exception:
            pass  # the slot holds the reason; _sync logged it

    def load(self, name: str, config_text: str | None = None) -> None:
        """(Re)load every selected version of `name` from the folder, `config_text`
        replacing its configuration file; raises what the first failure raised."""
        self._check_control("RepositoryModelLoad")
        source = self._source(name)
        failure = self._sync(source, config_text, force=True)
        if failure is not None:
            raise failure

    def _check_control(self, what: str) -> None:
        if self.mode is ControlMode.POLL:
            raise FailedPrecondition(f"{what} is refused: the model control mode is poll, "
                                     f"so the repository folder decides what is loaded")

    def _source(self, name: str) -> ModelSource:
        if not layout.SAFE_NAME.match(name):
            raise NotFound(f"model '{name}' is not in the repository")
        sources, problems = scan(self.root)
        if name in problems:
            raise InvalidInput(problems[name])
        if name not in sources:
            raise NotFound(f"model '{name}' is not in the repository {self.root}")
        return sources[name]

    def _sync(self, source: ModelSource, config_text: str | None, *, force: bool
              ) -> Exception | None:
        """Make the loaded versions of `source` what its files say: load new and changed
        (all, with `force`), then unload the rest. Returns the first version's failure."""
        slot = self._slot(source.name)
        with slot.lock:
            stamp = layout.model_stamp(source)
            if not force and config_text is None and stamp == slot.stamp:
                return None  # nothing changed since the last look
            slot.stamp = stamp
            try:
                plan = layout.plan(source, config_text)
            except Exception as exc:
                self._problem(slot, str(exc), log=False)
                slot.stamp = stamp  # said once: the next look retries only if files change
                log_event(_log, logging.ERROR, "model_load_failed", model=source.name,
                          error=type(exc).__name__, message=str(exc))
                raise
            with self._lock:
                slot.reason = ""
                for number in plan.files:  # listed as LOADING until each is loaded
                    slot.versions.setdefault(number, _Version(number))
            for warning in plan.warnings:
                log_event(_log, logging.WARNING, "model_config_ignored", model=source.name,
                          message=warning)
            config_key = config_text if config_text is not None else stamp[1]
            failure = None
            for number, path in sorted(plan.files.items()):
                version_dir = os.path.dirname(path) if source.versioned else path
                version_stamp = (config_key, layout.stamp(version_dir))
                entry = slot.versions.get(number)
                if not force and entry is not None and entry.stamp == version_stamp:
                    continue
                error = self._load_version(slot, number, path, plan.config, version_stamp)
                failure = failure or error
            for number, reason in plan.problems.items():
                self._close_version(slot, number, keep=reason)
            for number in [n for n in slot.versions if n not in plan.files
                           and n not in plan.problems]:
                self._close_version(slot, number, keep=None)
            with self._lock:
                slot.state = (ModelState.READY if any(v.model is not None for v in
                                                      slot.versions.values())
                              else ModelState.UNAVAILABLE)
            return failure

    def _load_version(self, slot: _Slot, number: int, path: str, config, stamp: tuple
                      ) -> Exception | None:
        with self._lock:
            entry = slot.versions.setdefault(number, _Version(number))
            if entry.model is None:
                entry.state = ModelState.LOADING
        start = time.perf_counter()
        try:
            model = ServedModel(slot.name, path, config, version=str(number),
                                device=self._device, limits=self._limits,
                                on_compile=self._on_compile, on_batch=self._on_batch,
                                compile_cache=self._compile_cache)
        except Exception as exc:
            with self._lock:
                entry.stamp = stamp
                if entry.model is None:
                    entry.state, entry.reason = ModelState.UNAVAILABLE, str(exc)
            log_event(_log, logging.ERROR, "model_load_failed", model=slot.name,
                      version=number, path=path, error=type(exc).__name__, message=str(exc))
            return exc
        with self._lock:
            old = entry.model
            if self._closed:
                old, model = model, None  # the repository closed while this loaded
            else:
                entry.model, entry.state, entry.reason, entry.stamp = (
                    model, ModelState.READY, "", stamp)
                slot.state = ModelState.READY
        if model is not None:
            log_event(_log, logging.INFO, "model_ready", model=slot.name, version=number,
                      path=path, gears=",".join(map(str, config.gears)) or "-",
                      instances=config.instances, batching=config.dynamic_batching is not None,
                      ms=f"{(time.perf_counter() - start) * 1e3:.0f}",
                      device_bytes=model.device_bytes)
        if old is not None:
            old.close()  # after the swap: new requests already go to the new model
        return None

    def _close_version(self, slot: _Slot, number: int, keep: str | None) -> None:
        """Unload a version (after its requests in flight); `keep`: the reason it stays
        listed as UNAVAILABLE, None: forget it."""
        with self._lock:
            entry = slot.versions.get(number)
            if entry is None and keep is None:
                return
            entry = entry or slot.versions.setdefault(number, _Version(number))
            model, entry.model = entry.model, None
            entry.state = ModelState.UNLOADING if model is not None else ModelState.UNAVAILABLE
            entry.reason = keep or ""
        if model is not None:
            model.close()
            log_event(_log, logging.INFO, "model_unloaded", model=slot.name, version=number)
        with self._lock:
            if keep is None:
                slot.versions.pop(number, None)
            else:
                entry.state = ModelState.UNAVAILABLE
            if not any(v.model is not None for v in slot.versions.values()):
                slot.state = ModelState.UNAVAILABLE

    def unload(self, name: str) -> None:
        """Unload every version of `name` (each after its requests in flight)."""
        self._check_control("RepositoryModelUnload")
        with self._lock:
            slot = self._slots.get(name)
        if slot is None:
            if layout.SAFE_NAME.match(name) and name in scan(self.root)[0]:
                return  # in the folder but not loaded: nothing to do
            raise NotFound(f"model '{name}' is not in the repository")
        with slot.lock:
            for number in list(slot.versions):
                self._close_version(slot, number, keep=None)
            with self._lock:
                slot.state, slot.reason, slot.stamp = ModelState.UNAVAILABLE, "unloaded", None
        log_event(_log, logging.INFO, "model_unloaded", model=name)

    def poll_once(self) -> None:
        """One look at the folder (the poll mode's tick): load new and changed models and
        versions, unload removed ones."""
        sources, problems = scan(self.root)
        for source in sources.values():
            try:
                self._sync(source, None, force=False)
            except Exception:
                pass  # logged, and the slot holds the reason
        for name, reason in problems.items():
            self._problem(self._slot(name), reason)
        with self._lock:
            gone = [s for n, s in self._slots.items() if n not in sources and n not in problems]
        for slot in gone:
            with slot.lock:
                for number in list(slot.versions):
                    self._close_version(slot, number, keep=None)
                with self._lock:
                    if self._slots.get(slot.name) is slot:
                        del self._slots[slot.name]
            log_event(_log, logging.INFO, "model_removed", model=slot.name)

    # ---- serving -------------------------------------------------------------------------
    def _find(self, name: str, version: str) -> ServedModel:
        """Under self._lock: the READY model `name` at `version` ("": the highest ready)."""
        slot = self._slots.get(name)
        if slot is None:
            raise NotFound(f"model '{name}' is not in the repository")
        if version == "":
            ready = [v for v in slot.versions.values() if v.model is not None]
            if ready:
                return max(ready, key=lambda v: v.number).model  # type: ignore[return-value]
            latest = max(slot.versions.values(), key=lambda v: v.number, default=None)
            state, reason = ((latest.state, latest.reason) if latest is not None and not
                             slot.reason else (slot.state, slot.reason))
            why = f": {reason}" if reason else ""
            raise Unavailable(f"model '{name}' is {state.value}{why}")
        number = layout.parse_version(version)
        entry = slot.versions.get(number) if number is not None else None
        if entry is None:
            have = ", ".join(f"'{n}'" for n in sorted(slot.versions)) or "none"
            raise NotFound(f"model '{name}' has no version '{version:.40}' (it has {have})")
        if entry.model is None:
            why = f": {entry.reason}" if entry.reason else ""
            raise Unavailable(f"model '{name}' version {version} is {entry.state.value}{why}")
        return entry.model

    def get(self, name: str, version: str = "") -> ServedModel:
        """The READY model `name` (at `version`); NotFound or Unavailable (with its state)."""
        with self._lock:
            return self._find(name, version)

    @contextlib.contextmanager
    def serving(self, name: str, version: str, times: StageTimes | None) -> Iterator[ServedModel]:
        """Borrow a ready model for one request; records the request in its statistics.
        The lookup and the borrow are one step under the table's lock, so a version being
        swapped or unloaded is either borrowed (and waited for) or not found."""
        with self._lock:
            model = self._find(name, version)
            model.enter()
        if times is not None:
            times.model = name
        ok = False
        try:
            yield model
            ok = True
        finally:
            model.exit()
            if times is not None:
                model.stats.record_request(times, ok)

    def versions(self, name: str) -> list[str]:
        """The ready versions of `name`, ascending."""
        with self._lock:
            slot = self._slots.get(name)
            numbers = sorted(n for n, v in (slot.versions.items() if slot else ())
                             if v.model is not None)
        return [str(n) for n in numbers]

    def index(self, ready_only: bool = False) -> list[ModelIndex]:
        """One entry per version; a model with none shows its own state; models in the
        folder that were never loaded (explicit mode) are UNAVAILABLE, not loaded. A READY
        version of a model whose last change failed to load says so in its reason."""
        entries: list[ModelIndex] = []
        with self._lock:
            for slot in sorted(self._slots.values(), key=lambda s: s.name):
                if not slot.versions:
                    entries.append(ModelIndex(slot.name, "", slot.state, slot.reason))
                for number, v in sorted(slot.versions.items()):
                    reason = v.reason
                    if v.model is not None and slot.reason:
                        reason = f"serving, but the model's last change did not load: " \
                                 f"{slot.reason}"
                    entries.append(ModelIndex(slot.name, str(number), v.state, reason))
            known = set(self._slots)
        if not ready_only:
            try:
                on_disk = set(scan(self.root)[0])
            except OSError:  # the folder went away: what is loaded is still the answer
                on_disk = set()
            for name in sorted(on_disk - known):
                entries.append(ModelIndex(name, "", ModelState.UNAVAILABLE, "not loaded"))
            entries.sort(key=lambda e: e.name)
        return [e for e in entries if not ready_only or e.state is ModelState.READY]

    def models(self, name: str = "", version: str = "") -> list[ServedModel]:
        """The loaded models (every version), by name and version."""
        with self._lock:
            return [v.model for s in sorted(self._slots.values(), key=lambda s: s.name)
                    if not name or s.name == name
                    for n, v in sorted(s.versions.items())
                    if v.model is not None and (not version or str(n) == version)]

    def all_ready(self) -> bool:
        with self._lock:
            return all(s.state is ModelState.READY and all(
                v.state is ModelState.READY for v in s.versions.values())
                for s in self._slots.values())

    def state_counts(self) -> dict[str, int]:
        counts = {s.value: 0 for s in ModelState}
        for entry in self.index():
            counts[entry.state.value] += 1
        return counts

    @property
    def device_bytes(self) -> int:
        return sum(m.device_bytes for m in self.models())

    @property
    def loaded_models(self) -> int:
        return sum(m.session.loaded_models for m in self.models())

    def close(self) -> None:
        if self._poller is not None:
            self._poller.stop()
        self._loader.shutdown(wait=False, cancel_futures=True)
        with self._lock:
            self._closed = True
            models = [v.model for s in self._slots.values() for v in s.versions.values()
                      if v.model is not None]
            for s in self._slots.values():
                for v in s.versions.values():
                    v.model = None
        for model in models:
            model.close(timeout=0)
