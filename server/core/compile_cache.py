"""The compiled-model cache (GE's `graph_compiler_cache_dir`): compile once per folder.

A restarted server, another replica sharing the folder, or another session of the same
process finds a graph it has compiled before (same graph, signature, options, code and CPU:
`cache_key`) and loads the stored model instead of running stages 1-4.

    DIR/
      <key>.geom            an offline model file (engine/offline.py): one compiled signature
      <key>.lock            held (flock) while a process compiles that key, then removed
      <key>.geom.<rand>.tmp  a file being written; renamed into place when whole

Entries are the offline model format itself (`graphengine inspect DIR/<key>.geom` reads one),
written to a temporary file and renamed, so a reader sees a whole file or none. Each load
verifies the header magic, format version, length and CRC32 of every byte, the description,
and that the model is the one asked for (graph name, input signature, backend); an entry
that fails is logged, deleted and compiled again, never used. Crash safety rests on that
check, not on fsync: a torn write is a failed checksum.

Two processes compiling the same key at once would both pay for it: the second waits on the
key's lock (bounded by LOCK_WAIT_SECONDS) and then finds the first one's entry. The folder
is bounded (`max_bytes`): after each store the least recently used entries (by mtime, which
a hit refreshes; atime is unreliable under relatime/noatime) are deleted until the total
fits. A folder that is not writable is used read-only.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import threading
import time
import weakref
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

from graphengine.engine import offline
from graphengine.engine.bounds import check_int
from graphengine.engine.errors import GraphEngineError, InvalidInput
from graphengine.engine.ir import Graph
from graphengine.engine.model import CompiledModel

from ..logs import log_event
from . import cache_key

try:
    import fcntl
except ImportError:  # not POSIX: no cross-process lock, duplicate compiles stay possible
    fcntl = None  # type: ignore[assignment]

_log = logging.getLogger("graphengine.server.compile_cache")

ENTRY_SUFFIX = ".geom"
LOCK_SUFFIX = ".lock"
TMP_SUFFIX = ".tmp"
DEFAULT_MAX_BYTES = 4 << 30
MIN_MAX_BYTES = 1 << 20
MAX_MAX_BYTES = 1 << 50
LOCK_WAIT_SECONDS = 600.0  # waiting for another process's compile of the same key
POLL_SECONDS = 0.05
STALE_SECONDS = 3600.0  # a temporary or lock file this old belongs to no live writer


@dataclasses.dataclass
class CacheStats:
    hits: int = 0  # models loaded from the folder instead of compiled
    misses: int = 0  # compiles the cache could not spare (then stored)
    rejected: int = 0  # entries that failed verification: deleted and compiled again
    evictions: int = 0  # entries deleted to keep the folder within max_bytes
    bypassed: int = 0  # compiles of graphs the cache cannot key (custom operators)
    bytes: int = 0  # the folder's entries, as of the last store or eviction scan


class CompileCache:
    """A folder of compiled models keyed by `cache_key`; thread- and process-safe."""

    def __init__(self, root: str | os.PathLike, max_bytes: int = DEFAULT_MAX_BYTES) -> None:
        self.max_bytes = check_int("compile_cache_max_bytes", max_bytes, MIN_MAX_BYTES,
                                   MAX_MAX_BYTES)
        self.root = os.path.abspath(os.fspath(root))
        try:
            os.makedirs(self.root, exist_ok=True)
        except OSError as exc:
            raise InvalidInput(f"compile cache folder {self.root} cannot be created: "
                               f"{exc.strerror}") from None
        if not os.path.isdir(self.root):
            raise InvalidInput(f"compile cache folder {self.root} is not a folder")
        self.writable = os.access(self.root, os.W_OK | os.X_OK)
        if not self.writable:
            log_event(_log, logging.WARNING, "compile_cache_read_only", dir=self.root)
        self.stats = CacheStats()
        self._lock = threading.Lock()
        self._digests: weakref.WeakKeyDictionary[Graph, str | None] = (
            weakref.WeakKeyDictionary())
        with self._lock:
            self.stats.bytes = sum(size for _, size, _ in self._entries())

    # ---- the one call a session makes ----------------------------------------------------
    def fetch_or_compile(self, graph: Graph, shapes: Mapping[str, Sequence[Any] | None],
                         options: Any, compile: Callable[[], CompiledModel],
                         check: Callable[[], None] | None = None
                         ) -> tuple[CompiledModel, bool]:
        """The model of `graph` for `shapes` and `options`: from the folder if it holds a
        sound one (True), else compiled by `compile()` and stored (False). `check` is called
        while waiting for another process's compile of the same key (cancellation)."""
        key = self.key(graph, shapes, options)
        if key is None:
            self._count("bypassed")
            return compile(), False
        found = self.load(key, graph, shapes)
        if found is not None:
            return found, True
        with self._compiling(key, check):
            found = self.load(key, graph, shapes)  # another process compiled it meanwhile
            if found is not None:
                return found, True
            self._count("misses")
            started = time.perf_counter()
            compiled = compile()
            self.store(key, compiled, compile_seconds=time.perf_counter() - started)
        return compiled, False

    def key(self, graph: Graph, shapes: Mapping[str, Sequence[Any] | None], options: Any
            ) -> str | None:
        """The entry's key, or None for a graph that cannot be keyed (logged once)."""
        from graphengine.engine.target import get as get_target

        digest = self._digest(graph)
        if digest is None:
            return None
        parts = cache_key.key_parts(digest, shapes, options, get_target(options.target))
        return cache_key.make_key(parts)

    def _digest(self, graph: Graph) -> str | None:
        with self._lock:
            if graph in self._digests:
                return self._digests[graph]
        reason = cache_key.uncacheable_reason(graph)
        digest = None
        if reason is None:
            try:
                digest = cache_key.graph_digest(graph)
            except cache_key.Uncacheable as exc:
                reason = f"it holds {exc}, which the cache key cannot encode"
        if reason is not None:
            log_event(_log, logging.INFO, "compile_cache_bypass", graph=graph.name,
                      reason=reason)
        with self._lock:
            self._digests[graph] = digest
        return digest

    # ---- entries -------------------------------------------------------------------------
    def path(self, key: str) -> str:
        return os.path.join(self.root, key + ENTRY_SUFFIX)

    def load(self, key: str, graph: Graph, shapes: Mapping[str, Sequence[Any] | None]
             ) -> CompiledModel | None:
        """The verified model stored under `key`, or None (absent, or rejected)."""
        path = self.path(key)
        started = time.perf_counter()
        try:
            stored = offline.read_all(path)
            problem = _mismatch(stored, graph, shapes)
        except GraphEngineError as exc:
            if not os.path.exists(path):
                return None  # absent (or evicted as we looked): a plain miss
            problem = exc.message
        if problem is not None:
            self._reject(key, graph, problem)
            return None
        with contextlib.suppress(OSError):
            os.utime(path)  # most recently used: eviction goes oldest first
        self._count("hits")
        log_event(_log, logging.INFO, "compile_cache_hit", graph=graph.name, key=key,
                  signature=_signature_text(shapes),
                  ms=f"{(time.perf_counter() - started) * 1e3:.1f}")
        return stored.models[0]

    def _reject(self, key: str, graph: Graph, problem: str) -> None:
        self._count("rejected")
        log_event(_log, logging.WARNING, "compile_cache_rejected", graph=graph.name, key=key,
                  reason=problem, action="deleted; compiling again")
        if self.writable:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.path(key))

    def store(self, key: str, compiled: CompiledModel, compile_seconds: float = 0.0) -> None:
        """Write the entry (atomically), then evict down to max_bytes. A failure to write
        (a full disk) costs the cache, never the compile: logged, and the model serves."""
        if not self.writable:
            return
        path = self.path(key)
        try:
            size = offline.write(compiled, path)
        except (OSError, ValueError) as exc:
            log_event(_log, logging.WARNING, "compile_cache_store_failed",
                      graph=compiled.name, key=key, error=f"{type(exc).__name__}: {exc}")
            return
        if size > self.max_bytes:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)
            log_event(_log, logging.INFO, "compile_cache_skipped", graph=compiled.name,
                      key=key, bytes=size, max_bytes=self.max_bytes,
                      reason="larger than the whole cache")
            return
        log_event(_log, logging.INFO, "compile_cache_stored", graph=compiled.name, key=key,
                  bytes=size, compile_ms=f"{compile_seconds * 1e3:.0f}")
        self.evict(keep=key)

    def evict(self, keep: str | None = None) -> int:
        """Delete the least recently used entries until the folder fits max_bytes (never
        `keep`, the entry just stored); clear stale temporary and lock files. Returns the
        folder's entry bytes afterwards."""
        entries = sorted(self._entries())  # oldest first
        total = sum(size for _, size, _ in entries)
        for _mtime, size, path in entries:
            if total <= self.max_bytes:
                break
            key = os.path.basename(path)[:-len(ENTRY_SUFFIX)]
            if key == keep:
                continue
            try:
                os.unlink(path)
            except FileNotFoundError:  # another replica evicted it first
                total -= size
                continue
            except OSError:
                continue
            total -= size
            self._count("evictions")
            log_event(_log, logging.INFO, "compile_cache_evicted", key=key, bytes=size,
                      dir_bytes=total, max_bytes=self.max_bytes)
        self._clear_stale()
        with self._lock:
            self.stats.bytes = total
        return total

    def _entries(self) -> list[tuple[float, int, str]]:
        """(mtime, size, path) of every entry file now in the folder."""
        out = []
        try:
            names = os.listdir(self.root)
        except OSError:
            return out
        for name in names:
            if not name.endswith(ENTRY_SUFFIX):
                continue
            path = os.path.join(self.root, name)
            try:
                st = os.stat(path)
            except OSError:
                continue
            out.append((st.st_mtime, st.st_size, path))
        return out

    def _clear_stale(self) -> None:
        now = time.time()
        try:
            names = os.listdir(self.root)
        except OSError:
            return
        for name in names:
            path = os.path.join(self.root, name)
            if name.endswith(TMP_SUFFIX):
                with contextlib.suppress(OSError):
                    if now - os.stat(path).st_mtime > STALE_SECONDS:
                        os.unlink(path)
            elif name.endswith(LOCK_SUFFIX) and not os.path.exists(
                    path[:-len(LOCK_SUFFIX)] + ENTRY_SUFFIX):
                with contextlib.suppress(OSError):
                    if now - os.stat(path).st_mtime > STALE_SECONDS and _unheld(path):
                        os.unlink(path)

    @contextlib.contextmanager
    def _compiling(self, key: str, check: Callable[[], None] | None) -> Iterator[None]:
        """Hold the key's lock file while compiling it: another process (or session) wanting
        the same key waits here, then finds the entry instead of compiling it twice."""
        if fcntl is None or not self.writable:
            yield
            return
        lock_path = os.path.join(self.root, key + LOCK_SUFFIX)
        try:
            fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError:
            yield
            return
        locked = False
        try:
            deadline = time.monotonic() + LOCK_WAIT_SECONDS
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    locked = True
                    break
                except BlockingIOError:
                    if time.monotonic() > deadline:
                        log_event(_log, logging.WARNING, "compile_cache_lock_timeout",
                                  key=key, seconds=LOCK_WAIT_SECONDS)
                        break
                    if check is not None:
                        check()
                    time.sleep(POLL_SECONDS)
            yield
        finally:
            if locked:
                # Removed while held, after the entry is stored: a process that opens the
                # name afterwards makes a new lock file, but looks for the entry first.
                # (Only our own file: a waiter that got an already-removed one leaves alone
                # the name a later process made.)
                with contextlib.suppress(OSError):
                    if os.stat(lock_path).st_ino == os.fstat(fd).st_ino:
                        os.unlink(lock_path)
                fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)

    def _count(self, what: str) -> None:
        with self._lock:
            setattr(self.stats, what, getattr(self.stats, what) + 1)

    def snapshot(self) -> CacheStats:
        with self._lock:
            return dataclasses.replace(self.stats)


def _mismatch(stored: offline.OfflineModel, graph: Graph,
              shapes: Mapping[str, Sequence[Any] | None]) -> str | None:
    """Why a sound file is still not this entry's model, or None."""
    if len(stored.models) != 1:
        return f"it holds {len(stored.models)} compiled signatures, an entry holds one"
    model = stored.models[0]
    if model.name != graph.name:
        return f"it holds graph '{model.name}', not '{graph.name}'"
    want = {k: tuple(v) for k, v in shapes.items() if v is not None}
    held = {s.name: tuple(s.shape) for s in model.inputs}
    if held != want:
        return (f"it was compiled for {_signature_text(held)}, not "
                f"{_signature_text(want)}")
    dtypes = {v.name: v.meta.dtype for v in graph.inputs if v.meta is not None}
    for s in model.inputs:
        if s.name in dtypes and s.dtype != dtypes[s.name]:
            return f"its input '{s.name}' is {s.dtype.value}, the graph's {dtypes[s.name].value}"
    return None


def _signature_text(shapes: Mapping[str, Sequence[Any] | None]) -> str:
    return ",".join(f"{k}[{'x'.join(map(str, v or ()))}]" for k, v in sorted(shapes.items()))


def _unheld(path: str) -> bool:
    """True when no process holds the lock file (so removing it loses nothing)."""
    if fcntl is None:
        return True
    try:
        fd = os.open(path, os.O_RDWR)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        fcntl.flock(fd, fcntl.LOCK_UN)
        return True
    except BlockingIOError:
        return False
    finally:
        os.close(fd)


def open_cache(value: CompileCache | str | os.PathLike | None,
               max_bytes: int = DEFAULT_MAX_BYTES) -> CompileCache | None:
    """A Session's `compile_cache` argument: a cache, a folder, or None (no cache)."""
    if value is None or isinstance(value, CompileCache):
        return value
    return CompileCache(value, max_bytes)


__all__ = ["CacheStats", "CompileCache", "DEFAULT_MAX_BYTES", "open_cache"]
