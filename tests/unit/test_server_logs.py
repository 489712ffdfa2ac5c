"""Structured logs: the same fields as key=value pairs or as one JSON object per line."""

from __future__ import annotations

import io
import json
import logging

from graphengine.server import logs


def _emit(fmt: str) -> str:
    root = logging.getLogger("graphengine")
    saved = (list(root.handlers), root.level, root.propagate)
    stream = io.StringIO()
    logs.configure("INFO", stream, fmt=fmt)
    log = logging.getLogger("graphengine.test")
    logs.log_event(log, logging.INFO, "model_ready", model="resnet 18", ms=12, ok=True)
    logs.log_event(log, logging.DEBUG, "hidden", x=1)  # below the level: not written
    try:
        raise ValueError("boom")
    except ValueError as exc:
        logs.log_event(log, logging.ERROR, "failed", exc_info=exc, ref="abc")
    root.handlers[:], root.level, root.propagate = saved  # as the other tests expect it
    return stream.getvalue()


def test_key_value_lines() -> None:
    lines = _emit("kv").splitlines()
    assert 'event=model_ready model="resnet 18" ms=12 ok=True' in lines[0]
    assert "level=INFO logger=graphengine.test" in lines[0]
    assert "hidden" not in "".join(lines) and "ValueError: boom" in "".join(lines)


def test_json_lines() -> None:
    text = _emit("json")
    first, second = (json.loads(line) for line in text.splitlines()[:2])
    assert first["event"] == "model_ready" and first["model"] == "resnet 18"
    assert first["ms"] == 12 and first["ok"] is True and first["level"] == "INFO"
    assert second["event"] == "failed" and "ValueError: boom" in second["exc"]
