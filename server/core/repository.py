"""The model repository: a folder of models served over KServe v2.

    models/
      resnet18/              a folder: the model is named after it
        model.onnx           its one model file (.onnx, a frozen TensorFlow graph .pb, or an
                             offline model .om / .geom)
        config.yaml          optional: gears, instances, dynamic batching (model_config)
      mlp.onnx               a file: the model is named after its stem
      mlp.yaml               optional config beside it

Models load in the background at start (compiled for every gear ahead), each with its own
state: LOADING, then READY or UNAVAILABLE with the reason. One model loading or failing
does not stop the others from serving. RepositoryModelLoad (re)loads a model from the
folder, RepositoryModelUnload unloads it once its requests in flight are done.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import re
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor

from graphengine.api.types import SessionLimits
from graphengine.engine.errors import InvalidInput, NotFound, Unavailable

from ..logs import log_event
from ..timing import StageTimes
from . import model_config
from .served_model import VERSION, ModelState, ServedModel
from .session import CompileHook

_log = logging.getLogger("graphengine.server.core.repository")

MODEL_SUFFIXES = (".onnx", ".pb", ".om", ".geom")
CONFIG_NAMES = ("config.yaml", "config.yml")
_SAFE_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]*$")


@dataclasses.dataclass(frozen=True)
class ModelSource:
    name: str
    model_path: str
    config_path: str | None


@dataclasses.dataclass(frozen=True)
class ModelIndex:
    name: str
    version: str
    state: ModelState
    reason: str


def _stem(filename: str) -> str:
    return filename[:filename.rindex(".")]


def scan(root: str) -> tuple[dict[str, ModelSource], dict[str, str]]:
    """The models under `root`, and the names whose folder cannot be served (-> reason)."""
    sources: dict[str, ModelSource] = {}
    problems: dict[str, str] = {}
    for entry in sorted(os.listdir(root)):
        path = os.path.join(root, entry)
        if entry.startswith("."):
            continue
        if os.path.isdir(path):
            name = entry
            files = sorted(f for f in os.listdir(path) if f.endswith(MODEL_SUFFIXES))
            if len(files) != 1:
                problems[name] = (f"folder {path} holds {len(files)} model files "
                                  f"({', '.join(files) or 'none'}); it needs exactly one")
                continue
            config = next((os.path.join(path, c) for c in CONFIG_NAMES
                           if os.path.isfile(os.path.join(path, c))), None)
            source = ModelSource(name, os.path.join(path, files[0]), config)
        elif entry.endswith(MODEL_SUFFIXES):
            name = _stem(entry)
            config = next((os.path.join(root, name + s) for s in (".yaml", ".yml")
                           if os.path.isfile(os.path.join(root, name + s))), None)
            source = ModelSource(name, path, config)
        else:
            continue
        if not _SAFE_NAME.match(name):
            problems[name] = f"'{name}' is not a usable model name (letters, digits, '_.-')"
        elif name in sources:
            problems[name] = (f"two models are named '{name}': {sources.pop(name).model_path} "
                              f"and {source.model_path}")
        elif name not in problems:
            sources[name] = source
    return sources, problems


class _Slot:
    def __init__(self, name: str) -> None:
        self.name = name
        self.state = ModelState.UNAVAILABLE
        self.reason = ""
        self.model: ServedModel | None = None
        self.lock = threading.Lock()  # one load or unload of this name at a time


class ModelRepository:
    def __init__(self, root: str, *, device, limits: SessionLimits | None = None,
                 load_threads: int = 2, on_compile: CompileHook | None = None,
                 on_batch: Callable[[str, int], None] | None = None,
                 compile_cache=None) -> None:
        if not os.path.isdir(root):
            raise InvalidInput(f"model repository {root} is not a folder")
        self.root = root
        self._device = device
        self._limits = limits
        self._on_compile = on_compile
        self._on_batch = on_batch
        self._compile_cache = compile_cache  # a CompileCache shared by every model, or None
        self._slots: dict[str, _Slot] = {}
        self._lock = threading.Lock()
        self._loader = ThreadPoolExecutor(load_threads, thread_name_prefix="graphengine-load")

    # ---- loading -------------------------------------------------------------------------
    def start(self) -> None:
        """Scan the folder and load every model in the background."""
        sources, problems = scan(self.root)
        for name, reason in problems.items():
            slot = self._slot(name)
            slot.reason = reason
            log_event(_log, logging.WARNING, "model_unavailable", model=name, reason=reason)
        for name, source in sources.items():
            self._slot(name).state = ModelState.LOADING
            self._loader.submit(self._load_quietly, source)

    def _slot(self, name: str) -> _Slot:
        with self._lock:
            return self._slots.setdefault(name, _Slot(name))

    def _load_quietly(self, source: ModelSource) -> None:
        try:
            self._load(source, None)
        except Exception:
            pass  # the slot holds the reason; _load logged it

    def load(self, name: str, config_text: str | None = None) -> None:
        """(Re)load `name` from the folder, with `config_text` replacing its config file."""
        if not _SAFE_NAME.match(name):
            raise NotFound(f"model '{name}' is not in the repository")
        sources, problems = scan(self.root)
        if name in problems:
            raise InvalidInput(problems[name])
        if name not in sources:
            raise NotFound(f"model '{name}' is not in the repository {self.root}")
        self._load(sources[name], config_text)

    def _load(self, source: ModelSource, config_text: str | None) -> None:
        slot = self._slot(source.name)
        with slot.lock:
            old = slot.model
            if old is None:
                slot.state = ModelState.LOADING
            start = time.perf_counter()
            try:
                config = (model_config.parse_text(config_text, "the 'config' parameter")
                          if config_text is not None else model_config.load(source.config_path))
                model = ServedModel(source.name, source.model_path, config, device=self._device,
                                    limits=self._limits, on_compile=self._on_compile,
                                    on_batch=self._on_batch,
                                    compile_cache=self._compile_cache)
            except Exception as exc:
                if old is None:
                    slot.state, slot.reason = ModelState.UNAVAILABLE, str(exc)
                log_event(_log, logging.ERROR, "model_load_failed", model=source.name,
                          path=source.model_path, error=type(exc).__name__, message=str(exc))
                raise
            slot.model, slot.state, slot.reason = model, ModelState.READY, ""
        log_event(_log, logging.INFO, "model_ready", model=source.name, path=source.model_path,
                  gears=",".join(map(str, config.gears)) or "-", instances=config.instances,
                  batching=config.dynamic_batching is not None,
                  ms=f"{(time.perf_counter() - start) * 1e3:.0f}",
                  device_bytes=model.device_bytes)
        if old is not None:
            old.close()  # after the swap: new requests already go to the new model

    def unload(self, name: str) -> None:
        with self._lock:
            slot = self._slots.get(name)
        if slot is None:
            raise NotFound(f"model '{name}' is not in the repository")
        with slot.lock:
            model, slot.model = slot.model, None
            slot.state, slot.reason = ModelState.UNLOADING, ""
        if model is not None:
            model.close()
        with slot.lock:
            if slot.model is None:
                slot.state, slot.reason = ModelState.UNAVAILABLE, "unloaded"
        log_event(_log, logging.INFO, "model_unloaded", model=name)

    # ---- serving -------------------------------------------------------------------------
    def get(self, name: str, version: str = "") -> ServedModel:
        """The READY model `name`; NotFound or Unavailable (with its state) otherwise."""
        with self._lock:
            slot = self._slots.get(name)
        if slot is None:
            raise NotFound(f"model '{name}' is not in the repository")
        if version not in ("", VERSION):
            raise NotFound(f"model '{name}' has no version '{version}' (it has '{VERSION}')")
        model = slot.model
        if model is None:
            why = f": {slot.reason}" if slot.reason else ""
            raise Unavailable(f"model '{name}' is {slot.state.value}{why}")
        return model

    @contextlib.contextmanager
    def serving(self, name: str, version: str, times: StageTimes | None) -> Iterator[ServedModel]:
        """Borrow a ready model for one request; records the request in its statistics."""
        model = self.get(name, version)
        if times is not None:
            times.model = name
        model.enter()
        ok = False
        try:
            yield model
            ok = True
        finally:
            model.exit()
            if times is not None:
                model.stats.record_request(times, ok)

    def index(self, ready_only: bool = False) -> list[ModelIndex]:
        with self._lock:
            slots = sorted(self._slots.values(), key=lambda s: s.name)
        return [ModelIndex(s.name, VERSION, s.state, s.reason) for s in slots
                if not ready_only or s.state is ModelState.READY]

    def models(self, name: str = "") -> list[ServedModel]:
        with self._lock:
            slots = sorted(self._slots.values(), key=lambda s: s.name)
        return [s.model for s in slots if s.model is not None and (not name or s.name == name)]

    def all_ready(self) -> bool:
        with self._lock:
            return all(s.state is ModelState.READY for s in self._slots.values())

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
        self._loader.shutdown(wait=False, cancel_futures=True)
        for name in [e.name for e in self.index()]:
            with self._lock:
                slot = self._slots.get(name)
            model = slot.model if slot is not None else None
            if model is not None:
                slot.model = None
                model.close(timeout=0)
