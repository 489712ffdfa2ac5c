"""The session table: create, find, list and close sessions; expire idle ones.

A session belongs to the identity that created it; every other identity gets NOT_FOUND
for it, exactly as for an id that does not exist (a session id is not a capability).
With a `replica` (graphengine.server.core.replica), session ids name this replica, and an
id naming another one is NOT_FOUND saying which replica holds it (SessionElsewhere).
Sessions unused for `idle_seconds` (with no run in progress) are closed by a reaper thread,
which frees their device memory.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import weakref

from graphengine.api.types import SessionLimits, SessionOptions
from graphengine.engine.errors import NotFound, ResourceExhausted

from ..logs import log_event
from .replica import Replica
from .session import CompileHook, Session

_log = logging.getLogger("graphengine.server.sessions")


class SessionManager:
    def __init__(self, device=None, max_sessions: int = 0, *,
                 limits: SessionLimits | None = None, memory_limit_bytes: int = 0,
                 idle_seconds: float = 0.0, on_compile: CompileHook | None = None,
                 replica: Replica | None = None, compile_cache=None) -> None:
        if device is None:
            from graphengine.engine.runtime import default_device

            device = default_device()
        self.device = device
        self.max_sessions = max_sessions
        self.limits = limits or SessionLimits()
        self.memory_limit_bytes = memory_limit_bytes  # per session: default and ceiling
        self.idle_seconds = idle_seconds
        self._on_compile = on_compile
        self.replica = replica
        self.compile_cache = compile_cache  # a CompileCache every session shares, or None
        self._sessions: dict[str, Session] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._reaper: threading.Thread | None = None

    def create(self, options=None, owner: str | None = None) -> Session:
        options = SessionOptions.coerce(options)
        ceiling = self.memory_limit_bytes
        if ceiling:
            if options.memory_limit_bytes > ceiling:
                raise ResourceExhausted(f"memory_limit_bytes {options.memory_limit_bytes} "
                                        f"exceeds the server's per-session limit of {ceiling}")
            if not options.memory_limit_bytes:
                options = dataclasses.replace(options, memory_limit_bytes=ceiling)
        session = Session(options, device=self.device, owner=owner, limits=self.limits,
                          on_compile=self._on_compile, compile_cache=self.compile_cache,
                          session_id=self.replica.new_session_id() if self.replica else None)
        with self._lock:
            if self.max_sessions and len(self._sessions) >= self.max_sessions:
                raise ResourceExhausted(f"the server holds its maximum of {self.max_sessions} "
                                        f"sessions; close one first")
            self._sessions[session.id] = session
        return session

    def get(self, session_id: str, owner: str | None = None) -> Session:
        with self._lock:
            session = self._sessions.get(session_id)
        if session is None and self.replica is not None:
            elsewhere = self.replica.elsewhere(session_id)
            if elsewhere is not None:
                raise elsewhere
        if session is None or session.owner != owner:
            raise NotFound(f"session '{session_id}' not found")
        return session

    def close(self, session_id: str, owner: str | None = None) -> None:
        session = self.get(session_id, owner)
        with self._lock:
            self._sessions.pop(session_id, None)
        session.close()

    def list(self, owner: str | None = None) -> list[Session]:
        with self._lock:
            return [s for s in self._sessions.values() if s.owner == owner]

    def __len__(self) -> int:
        with self._lock:
            return len(self._sessions)

    def _all(self) -> list[Session]:
        with self._lock:
            return list(self._sessions.values())

    @property
    def device_bytes(self) -> int:
        return sum(s.device_bytes for s in self._all())

    @property
    def loaded_models(self) -> int:
        return sum(s.loaded_models for s in self._all())

    def close_all(self) -> None:
        self.stop_reaper()
        with self._lock:
            sessions = list(self._sessions.values())
            self._sessions.clear()
        for s in sessions:
            s.close()

    # ---- idle expiry ---------------------------------------------------------------------
    def expire_idle(self) -> list[str]:
        """Close every session idle longer than `idle_seconds`; returns their ids."""
        if self.idle_seconds <= 0:
            return []
        expired = []
        with self._lock:
            for sid, s in list(self._sessions.items()):
                if s.idle_seconds() >= self.idle_seconds:
                    expired.append(self._sessions.pop(sid))
        for s in expired:
            s.close()
            log_event(_log, logging.INFO, "session_expired", session=s.id,
                      idle_seconds=self.idle_seconds)
        return [s.id for s in expired]

    def start_reaper(self) -> None:
        if self.idle_seconds <= 0 or self._reaper is not None:
            return
        interval = min(max(self.idle_seconds / 4, 0.05), 30.0)
        # The thread holds the manager weakly: a manager nobody uses any more (an embedding
        # that forgot close_all) is freed, sessions and device with it, and the thread ends.
        manager, stop = weakref.ref(self), self._stop

        def reap() -> None:
            while not stop.wait(interval):
                alive = manager()
                if alive is None:
                    return
                try:
                    alive.expire_idle()
                except Exception as exc:  # keep reaping; a bug here must not kill the server
                    log_event(_log, logging.ERROR, "session_reaper_failed", exc_info=exc,
                              error=type(exc).__name__)
                del alive

        self._reaper = threading.Thread(target=reap, name="graphengine-session-reaper",
                                        daemon=True)
        self._reaper.start()

    def stop_reaper(self) -> None:
        self._stop.set()
        if self._reaper is not None:
            self._reaper.join(timeout=5)
            self._reaper = None
