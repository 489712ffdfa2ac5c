"""Structured logs: one line per event, `key=value` pairs, easy to grep and to parse."""

from __future__ import annotations

import logging
import sys
from typing import Any, TextIO

_FORMAT = "ts=%(asctime)s level=%(levelname)s logger=%(name)s %(message)s"


def configure(level: str, stream: TextIO | None = None) -> None:
    """Send graphengine's logs to `stream` (stderr) at `level`.

    Only our own logger tree is configured, so embedding the server in a process with its
    own logging setup does not change how that process logs.
    """
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(logging.Formatter(_FORMAT, datefmt="%Y-%m-%dT%H:%M:%S"))
    root = logging.getLogger("graphengine")
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level)
    root.propagate = False


def _quote(value: Any) -> str:
    text = str(value)
    # Quote only when needed, so that simple values stay readable.
    if text == "" or any(c in text for c in ' "=\n\t'):
        return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'
    return text


def kv(event: str, **fields: Any) -> str:
    """`event=<event> k1=v1 k2="v 2"`: the message body of one structured log line."""
    parts = [f"event={_quote(event)}"]
    parts += [f"{k}={_quote(v)}" for k, v in fields.items()]
    return " ".join(parts)


def log_event(logger: logging.Logger, level: int, event: str, **fields: Any) -> None:
    if logger.isEnabledFor(level):
        logger.log(level, kv(event, **fields))
