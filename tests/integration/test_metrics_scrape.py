"""The Prometheus endpoint of the real server: it scrapes in the text format, and its
histograms and counters move under load."""

from __future__ import annotations

import re
import socket
import urllib.request

import numpy as np
from prometheus_client.parser import text_string_to_metric_families

from graphengine.clients import Client
from graphengine.clients import errors as ce

from .ge_models import simple_graphdef

A = np.ones((2, 3), np.float32)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _scrape(port: int) -> dict[tuple[str, tuple], float]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        assert response.headers["Content-Type"].startswith("text/plain")
        text = response.read().decode()
    samples = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            samples[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return samples


def _count(samples, api: str, stage: str) -> float:
    key = ("graphengine_request_duration_seconds_count",
           (("api", api), ("model", ""), ("stage", stage)))
    return samples.get(key, 0.0)


def test_histograms_move_under_load(server_process) -> None:
    port = _free_port()
    proc = server_process("--metrics-port", str(port))
    with Client(proc.address, timeout=30) as client, client.session() as sess:
        gid = sess.add_graph(simple_graphdef())
        sess.run_graph(gid, {"input_a": A, "input_b": A})
        before = _scrape(port)
        for _ in range(25):
            sess.run_graph(gid, {"input_a": A, "input_b": A})
        try:
            sess.run_graph(gid, {"input_a": A})
        except ce.InvalidArgument:
            pass
        after = _scrape(port)
        for stage in ("queue", "input_copy", "execute", "output_copy", "total"):
            assert _count(after, "RunGraph", stage) - _count(before, "RunGraph", stage) >= 25
        key = ("graphengine_request_duration_seconds_sum",
               (("api", "RunGraph"), ("model", ""), ("stage", "execute")))
        assert after[key] > before[key]
        errors = ("graphengine_errors_total", (("api", "RunGraph"), ("code", "INVALID_ARGUMENT")))
        assert after[errors] == before.get(errors, 0.0) + 1
        assert after[("graphengine_sessions", ())] == 1
        assert after[("graphengine_device_memory_bytes", (("owner", "sessions"),))] > 0
        compile_stages = {dict(labels)["stage"] for name, labels in after
                          if name == "graphengine_compile_duration_seconds_count"}
        assert {"validate", "prepare", "partition", "build", "load", "total"} <= compile_stages
        assert after[("process_resident_memory_bytes", ())] > 0
    assert proc.terminate() == 0
    assert re.search(rf"metrics_port={port}\b", proc.logs())
