"""Shared fixtures: the real server process, and an in-process server over a fake core.

`server` starts `graphengine serve --port 0` as a subprocess (the real daemon, real port),
waits for its ready line and yields "127.0.0.1:PORT"; at the end it sends SIGTERM and
checks the exit code is 0. `fake_server` serves a scripted stand-in for the session core
in-process, for tests of the wire layer (servicer, error mapping, client, CLI) that must
not depend on the compiler.
"""

from __future__ import annotations

import dataclasses
import itertools
import os
import queue
import re
import signal
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import numpy as np
import pytest

from graphengine.engine.dtypes import DType
from graphengine.engine.errors import NotFound
from graphengine.engine.report import CompileReport, MemoryRecord, PassRecord

READY = re.compile(r"^graphengine serving on (?P<address>\S+:\d+)$")
HTTP_READY = re.compile(r"^graphengine http on (?P<address>\S+:\d+)$")
START_TIMEOUT = 120.0  # the first start may import (and JIT-load) the whole engine


class ServerProcess:
    """A `graphengine serve` subprocess; stdout is watched for the ready line. Its KServe
    HTTP port is a free one (`http_address`), unless the arguments say otherwise."""

    def __init__(self, *args: str) -> None:
        self.http_address: str | None = None
        # Kept open for the process's lifetime (closed in cleanup), hence no `with`.
        self.log = tempfile.NamedTemporaryFile(
            prefix="graphengine-server-", suffix=".log", delete=False)
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "graphengine.cli", "serve", "--port", "0", "--http-port", "0",
             *args],
            stdout=subprocess.PIPE, stderr=self.log, text=True,
            env={**os.environ, "PYTHONUNBUFFERED": "1"})
        self._lines: queue.Queue[str | None] = queue.Queue()
        # A reader thread keeps the pipe drained so the server can never block on stdout.
        threading.Thread(target=self._read, daemon=True).start()
        self.address = self._wait_ready()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self._lines.put(line.rstrip("\n"))
        self._lines.put(None)

    def _wait_ready(self) -> str:
        while True:
            try:
                line = self._lines.get(timeout=START_TIMEOUT)
            except queue.Empty:
                self.kill()
                raise RuntimeError(
                    f"server not ready after {START_TIMEOUT}s\n{self.logs()}") from None
            if line is None:
                code = self.proc.wait()
                raise RuntimeError(f"server exited with {code} before ready\n{self.logs()}")
            match = READY.match(line)
            if match:
                return match["address"]
            match = HTTP_READY.match(line)
            if match:
                self.http_address = match["address"]

    def logs(self) -> str:
        with open(self.log.name, encoding="utf-8", errors="replace") as f:
            return f.read()

    def terminate(self, timeout: float = 60.0) -> int:
        """SIGTERM, then the exit code (killing it if it does not stop in time)."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def cleanup(self) -> None:
        self.kill()
        self.log.close()
        os.unlink(self.log.name)


@pytest.fixture(scope="session")
def server() -> Iterator[str]:
    proc = ServerProcess()
    try:
        yield proc.address
        code = proc.terminate()
        assert code == 0, f"server exited with {code} on SIGTERM\n{proc.logs()}"
    finally:
        proc.cleanup()


@pytest.fixture
def server_process() -> Iterator[Any]:
    """Start-your-own: a factory for tests that need a private server (e.g. to stop it)."""
    started: list[ServerProcess] = []

    def start(*args: str) -> ServerProcess:
        started.append(ServerProcess(*args))
        return started[-1]

    yield start
    for proc in started:
        proc.cleanup()


# ---- a scripted stand-in for the session core -----------------------------------------
@dataclasses.dataclass(frozen=True)
class FakeTensorInfo:
    name: str
    dtype: DType
    shape: tuple[int | str, ...] | None


@dataclasses.dataclass(frozen=True)
class FakeGraphInfo:
    graph_id: int
    name: str
    inputs: tuple[FakeTensorInfo, ...]
    outputs: tuple[FakeTensorInfo, ...]
    num_nodes: int
    compiled: bool


class FakeSession:
    """Doubles "input" into "output" and returns "aux" = [0, 1, 2]; records every call."""

    def __init__(self, manager: FakeSessionManager, options: Any) -> None:
        self.id = f"fake-{next(manager.ids)}"
        self.options = options
        self.manager = manager
        self.graphs: dict[int, str] = {}
        self.models: dict[int, Any] = {}
        self.compiled: set[int] = set()
        self.calls: list[tuple[str, Any]] = []
        self._ids = itertools.count(1)

    def _enter(self, method: str, args: Any) -> None:
        self.calls.append((method, args))
        exc = self.manager.raise_on.get(method)
        if exc is not None:
            raise exc

    def _graph(self, graph_id: int) -> str:
        if graph_id not in self.graphs:
            raise NotFound(f"graph {graph_id} not found in session '{self.id}'")
        return self.graphs[graph_id]

    def add_graph(self, model: Any, name: str | None = None, gears: Any = None) -> int:
        self._enter("add_graph", (model, name) if gears is None else (model, name, gears))
        graph_id = next(self._ids)
        self.graphs[graph_id] = name or "fake_graph"
        self.models[graph_id] = model
        return graph_id

    def compile_graph(self, graph_id: int,
                      input_shapes: Mapping[str, Sequence[int]] | None = None) -> CompileReport:
        self._enter("compile_graph", (graph_id, input_shapes))
        name = self._graph(graph_id)
        self.compiled.add(graph_id)
        return CompileReport(graph=name, passes=[PassRecord("prepare", "validate", 0.001, False)],
                             memory=MemoryRecord(1024, 512, 256, "greedy"), streams=1,
                             tasks=3, nodes_before=3, nodes_after=2, total_seconds=0.01)

    def run_graph(self, graph_id: int, inputs: Mapping[str, np.ndarray],
                  output_names: Sequence[str] | None = None, *, iterations: int = 1,
                  return_all: bool = False, control: Any = None,
                  times: Any = None) -> dict[str, np.ndarray]:
        self._enter("run_graph", (graph_id, dict(inputs), output_names))
        self._graph(graph_id)
        outputs = {"output": np.asarray(inputs["input"]) * 2,
                   "aux": np.arange(3, dtype=np.int64)}
        return {n: outputs[n] for n in output_names} if output_names else outputs

    def remove_graph(self, graph_id: int) -> None:
        self._enter("remove_graph", graph_id)
        self._graph(graph_id)
        del self.graphs[graph_id]

    def graph_info(self, graph_id: int) -> FakeGraphInfo:
        self._enter("graph_info", graph_id)
        return FakeGraphInfo(
            graph_id, self._graph(graph_id),
            (FakeTensorInfo("input", DType.FLOAT32, ("batch", 4)),),
            (FakeTensorInfo("output", DType.FLOAT32, ("batch", 4)),
             FakeTensorInfo("aux", DType.INT64, (3,))),
            num_nodes=3, compiled=graph_id in self.compiled)

    def close(self) -> None:
        self._enter("close", None)


class FakeSessionManager:
    """The SessionManager API over FakeSessions; `raise_on[method] = exc` injects failures
    (method names of Session and of the manager: "create", "get", "close_session")."""

    def __init__(self) -> None:
        self.ids = itertools.count(1)
        self.sessions: dict[str, FakeSession] = {}
        self.raise_on: dict[str, BaseException] = {}
        self.closed_all = False

    def create(self, options: Any = None, owner: str | None = None) -> FakeSession:
        if "create" in self.raise_on:
            raise self.raise_on["create"]
        session = FakeSession(self, options)
        self.sessions[session.id] = session
        return session

    def get(self, session_id: str, owner: str | None = None) -> FakeSession:
        if "get" in self.raise_on:
            raise self.raise_on["get"]
        if session_id not in self.sessions:
            raise NotFound(f"session '{session_id}' not found")
        return self.sessions[session_id]

    def close(self, session_id: str, owner: str | None = None) -> None:
        if "close_session" in self.raise_on:
            raise self.raise_on["close_session"]
        self.get(session_id).close()
        del self.sessions[session_id]

    def list(self, owner: str | None = None) -> list[FakeSession]:
        return list(self.sessions.values())

    def close_all(self) -> None:
        self.closed_all = True
        self.sessions.clear()


@dataclasses.dataclass
class FakeServer:
    address: str
    core: FakeSessionManager


@pytest.fixture
def fake_server() -> Iterator[FakeServer]:
    from graphengine.server.config import ServerConfig
    from graphengine.server.rpc.app import create_server

    core = FakeSessionManager()
    grpc_server, port = create_server(ServerConfig(port=0, max_tensor_elements=1000), core)
    grpc_server.start()
    try:
        yield FakeServer(f"127.0.0.1:{port}", core)
    finally:
        grpc_server.stop(None)
