"""Structured logs: one line per event, as `key=value` pairs or as one JSON object.

Every event goes through `log_event(logger, level, event, **fields)`; the fields travel on
the log record, so the `kv` and `json` formats show the same data. Timestamps are UTC in
ISO 8601 with milliseconds (`2026-11-27T00:22:01.123Z`), whatever the host's time zone.
"""

from __future__ import annotations

import json
import logging
import sys
import time
from typing import Any, TextIO

_KV_FORMAT = "ts=%(asctime)s level=%(levelname)s logger=%(name)s %(message)s"


class UtcFormatter(logging.Formatter):
    """`%(asctime)s` is the record's time in UTC: `YYYY-MM-DDTHH:MM:SS.mmmZ`."""

    def formatTime(self, record: logging.LogRecord, datefmt: str | None = None) -> str:
        seconds = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
        return f"{seconds}.{int(record.msecs):03d}Z"


class JsonFormatter(UtcFormatter):
    """{"ts", "level", "logger", "event", <fields>...}; a traceback goes in "exc"."""

    def format(self, record: logging.LogRecord) -> str:
        fields = getattr(record, "ge_fields", None)
        out: dict[str, Any] = {"ts": self.formatTime(record), "level": record.levelname,
                               "logger": record.name}
        if fields is None:
            out["message"] = record.getMessage()
        else:
            out.update({k: v if isinstance(v, (int, float, bool)) or v is None else str(v)
                        for k, v in fields.items()})
        if record.exc_info:
            out["exc"] = self.formatException(record.exc_info)
        return json.dumps(out, ensure_ascii=False)


def configure(level: str, stream: TextIO | None = None, fmt: str = "kv") -> None:
    """Send graphengine's logs to `stream` (stderr) at `level`, in format `fmt`.

    Only our own logger tree is configured, so embedding the server in a process with its
    own logging setup does not change how that process logs.
    """
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(JsonFormatter() if fmt == "json" else UtcFormatter(_KV_FORMAT))
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


def log_event(logger: logging.Logger, level: int, event: str, exc_info: Any = None,
              **fields: Any) -> None:
    if logger.isEnabledFor(level):
        logger.log(level, kv(event, **fields), exc_info=exc_info,
                   extra={"ge_fields": {"event": event, **fields}})
