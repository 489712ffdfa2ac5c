"""Draining in-process: the run in flight finishes, new work and new streams are refused
with UNAVAILABLE, health says NOT_SERVING, and the sessions are closed at the end."""

from __future__ import annotations

import threading
import time

import grpc
import numpy as np
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from graphengine.clients import Client
from graphengine.clients import errors as ce
from graphengine.server.config import ServerConfig
from graphengine.server.lifecycle import Lifecycle
from graphengine.server.rpc.app import _shutdown, build_server
from tests.conftest import FakeSessionManager


def test_lifecycle_counts_and_refuses() -> None:
    life = Lifecycle()
    assert life.enter() and life.inflight == 1
    assert not life.wait_idle(0.05)
    life.exit()
    assert life.wait_idle(0.05) and life.inflight == 0
    life.begin_drain()
    assert life.draining and not life.enter()


def test_quiet_period_counts_from_the_drain_start() -> None:
    # Before any refusal the drain must not count as quiet already: otherwise a SIGTERM
    # that arrives while every worker is busy closes the port at once, and callers (and
    # health probes) queued behind the busy workers never see NOT_SERVING.
    life = Lifecycle()
    time.sleep(0.02)
    life.begin_drain()
    assert not life.quiet_for(0.01)
    time.sleep(0.03)
    assert life.quiet_for(0.01)


@pytest.fixture
def served():
    core = FakeSessionManager()
    parts = build_server(ServerConfig(port=0, grace_seconds=10), core)
    parts.server.start()
    yield parts, core, f"127.0.0.1:{parts.port}"
    parts.server.stop(None)


def test_drain_finishes_in_flight_work_and_refuses_new(served) -> None:
    parts, core, address = served
    x = np.ones(3, np.float32)
    client = Client(address, timeout=30)
    session = client.session()
    gid = session.add_graph(b"model")
    fake = core.sessions[session.id]
    entered, release = threading.Event(), threading.Event()
    original = fake.run_graph

    def slow_run(*args, **kwargs):
        entered.set()
        release.wait(10)
        return original(*args, **kwargs)

    fake.run_graph = slow_run
    results: list = []
    runner = threading.Thread(target=lambda: results.append(session.run_graph(gid, {"input": x})))
    runner.start()
    assert entered.wait(10)

    stopper = threading.Thread(target=_shutdown,
                               args=(parts, 10.0, "SIGTERM", threading.Event()))
    stopper.start()
    deadline = time.monotonic() + 5
    while not parts.lifecycle.draining and time.monotonic() < deadline:
        time.sleep(0.01)
    with grpc.insecure_channel(address) as channel:
        status = health_pb2_grpc.HealthStub(channel).Check(
            health_pb2.HealthCheckRequest(service=""), timeout=5).status
    assert status == health_pb2.HealthCheckResponse.NOT_SERVING
    with pytest.raises(ce.Unavailable, match="shutting down"):
        session.graph_info(gid)
    with pytest.raises(ce.Unavailable, match="shutting down"):
        list(session.run_graph_stream(gid, [("a", {"input": x})]))

    release.set()
    runner.join(10)
    stopper.join(20)
    assert not stopper.is_alive()
    np.testing.assert_array_equal(results[0]["output"], 2 * x)  # the run in flight finished
    assert core.closed_all
    client.close()
