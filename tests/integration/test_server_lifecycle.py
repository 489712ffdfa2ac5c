"""SIGTERM in the middle of load: health goes NOT_SERVING, every request either completes
or gets UNAVAILABLE (none lost, none hung), streams end with UNAVAILABLE after answering
what they took, and the process exits 0. Idle sessions expire."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

from graphengine.clients import Client
from graphengine.clients import errors as ce
from tests import zoo

from .ge_models import simple_graphdef


def test_sigterm_under_load(server_process, tmp_path) -> None:
    proc = server_process("--grace-seconds", "20")
    model = zoo.resnet(depths=(1, 1), width=32, image=96, classes=10, batch=1)
    x = zoo.random_inputs(model, seed=1)
    client = Client(proc.address, timeout=60)
    session = client.session()
    gid = session.add_graph(model)
    session.compile_graph(gid)
    expected = session.run_graph(gid, x)["output"]

    outcomes: list[list[str]] = [[] for _ in range(12)]
    stop = threading.Event()

    def load(k: int) -> None:
        while True:
            try:
                out = session.run_graph(gid, x)
                np.testing.assert_allclose(out["output"], expected, rtol=1e-5, atol=1e-5)
                outcomes[k].append("OK")
            except ce.ClientError as exc:
                outcomes[k].append(exc.code.name)
                return
            if stop.is_set():
                return

    stream_answers: dict[str, str] = {}
    stream_end: list[str] = []
    sent: list[str] = []

    def stream() -> None:
        def requests():
            i = 0
            while not stop.is_set():
                sent.append(f"s{i}")
                yield f"s{i}", x
                i += 1
                time.sleep(0.002)
        try:
            for result in session.run_graph_stream(gid, requests()):
                stream_answers[result.request_id] = (
                    "OK" if result.error is None else result.error.code.name)
            stream_end.append("OK")
        except ce.ClientError as exc:
            stream_end.append(exc.code.name)

    health: list[str] = []

    def watch_health() -> None:
        with Client(proc.address, timeout=2) as probe:
            while not stop.is_set():
                try:
                    health.append(probe.health())
                except ce.ClientError as exc:
                    health.append(exc.code.name)
                time.sleep(0.005)

    threads = [threading.Thread(target=load, args=(k,)) for k in range(len(outcomes))]
    threads += [threading.Thread(target=stream), threading.Thread(target=watch_health)]
    for t in threads:
        t.start()
    deadline = time.monotonic() + 60  # real load first: every client has had an answer
    while not (all(outcomes) and stream_answers and "SERVING" in health):
        assert time.monotonic() < deadline, "no load before the signal"
        time.sleep(0.05)
    code = proc.terminate(timeout=60)
    stop.set()
    for t in threads:
        t.join(timeout=30)
        assert not t.is_alive(), "a client hung"
    client.close()

    assert code == 0, proc.logs()
    for k, seen in enumerate(outcomes):
        assert seen and seen[-1] == "UNAVAILABLE", (k, seen[-3:])
        assert set(seen[:-1]) <= {"OK"}, (k, seen)
    assert stream_end == ["UNAVAILABLE"], stream_end
    assert set(stream_answers.values()) <= {"OK", "UNAVAILABLE"}
    assert "OK" in stream_answers.values()
    # Answers came for requests that were sent, each once, in order of sending within reason.
    assert set(stream_answers) <= set(sent)
    assert "SERVING" in health and "NOT_SERVING" in health, health[-10:]
    logs = proc.logs()
    assert "event=shutdown signal=SIGTERM" in logs and "event=drained unfinished=0" in logs


def test_idle_sessions_expire(server_process, tmp_path) -> None:
    config = tmp_path / "c.yaml"
    config.write_text("session_idle_seconds: 1.0\n")
    proc = server_process("--config", str(config))
    with Client(proc.address, timeout=30) as client:
        kept, idle = client.session(), client.session()
        gid = kept.add_graph(simple_graphdef())
        a = np.ones((2, 3), np.float32)
        idle.add_graph(simple_graphdef())
        deadline = time.monotonic() + 3.5
        while time.monotonic() < deadline:  # `kept` stays in use, `idle` does not
            kept.run_graph(gid, {"input_a": a, "input_b": a})
            time.sleep(0.1)
        ids = [s.session_id for s in client.list_sessions()]
        assert kept.id in ids and idle.id not in ids
        with pytest.raises(ce.NotFound):
            idle.graph_info(1)
    assert proc.terminate() == 0
    assert f"event=session_expired session={idle.id}" in proc.logs()

