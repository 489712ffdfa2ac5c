"""Model control: which repository models load, and when (Triton's three modes).

- `none`: every model in the repository loads at start. RepositoryModelLoad / Unload
  still (re)load and unload a model, as they did before modes existed.
- `explicit`: only the models named at start (`--load-model NAME`, config `load_models`;
  `*` for all) load; then RepositoryModelLoad / Unload decide.
- `poll`: every model loads at start, then the folder is scanned every
  `repository_poll_seconds`: new models and versions load, changed ones reload, removed ones
  unload (after their requests in flight), a broken change leaves what serves alone. The
  folder is the only authority: RepositoryModelLoad / Unload are refused.
"""

from __future__ import annotations

import enum
import logging
import threading
from collections.abc import Callable

from ..logs import log_event

_log = logging.getLogger("graphengine.server.core.model_control")

MIN_POLL_SECONDS = 0.1
MAX_POLL_SECONDS = 86400.0
ALL_MODELS = "*"


class ControlMode(enum.Enum):
    NONE = "none"
    POLL = "poll"
    EXPLICIT = "explicit"


class Poller:
    """Calls `poll` every `seconds` on a thread of its own until `stop`; a poll that fails
    is logged and the next one runs on time."""

    def __init__(self, poll: Callable[[], None], seconds: float) -> None:
        self._poll = poll
        self.seconds = seconds
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True,
                                        name="graphengine-repository-poll")

    def start(self) -> None:
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self.seconds):
            try:
                self._poll()
            except Exception as exc:  # the poller must outlive any one bad scan
                log_event(_log, logging.ERROR, "repository_poll_failed",
                          error=type(exc).__name__, message=str(exc))

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(timeout=5)
