"""Building and running the gRPC server.

`create_server(config)` returns a `grpc.Server` (bound, not yet started) and the port it
bound, for tests and embedding; `serve(config)` is the foreground daemon behind
`graphengine serve`: it prints a ready line, logs one key=value line per event, and on
SIGTERM/SIGINT reports NOT_SERVING, drains in-flight RPCs for `grace_seconds`, closes
every session and returns exit code 0.
"""

from __future__ import annotations

import dataclasses
import logging
import signal
import sys
import threading
from concurrent import futures
from typing import Any, TextIO

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from graphengine.v1 import session_pb2_grpc

from . import logs
from .config import ServerConfig, format_address
from .errors import ErrorInterceptor
from .servicer import SERVICE_NAME, GraphEngineServicer

_log = logging.getLogger("graphengine.server")

READY_FORMAT = "graphengine serving on {address}"


@dataclasses.dataclass
class ServerParts:
    """What `serve` needs beyond the grpc.Server: the health state and the session core."""

    server: grpc.Server
    port: int
    health: health.HealthServicer
    sessions: Any


def make_session_manager(config: ServerConfig) -> Any:
    # Imported here so that loading the server module does not load the compiler and the
    # runtime before the configuration (logging, thread budget) is in place.
    from graphengine.server.session import SessionManager

    return SessionManager(device=make_device(config), max_sessions=config.max_sessions)


def make_device(config: ServerConfig) -> Any:
    """The device every session runs on, with the configured thread budget (0: all cores)."""
    from graphengine.engine.runtime import default_device

    return default_device(config.device_threads)


def build_server(config: ServerConfig, session_manager: Any = None) -> ServerParts:
    sessions = session_manager if session_manager is not None else make_session_manager(config)
    server = grpc.server(
        futures.ThreadPoolExecutor(max_workers=config.worker_threads,
                                   thread_name_prefix="graphengine-rpc"),
        interceptors=[ErrorInterceptor()],
        options=[
            ("grpc.max_send_message_length", config.max_message_bytes),
            ("grpc.max_receive_message_length", config.max_message_bytes),
            # Without this a second server on a busy port would "bind" it too and share
            # its traffic; we want a clear bind error instead.
            ("grpc.so_reuseport", 0),
        ],
    )
    session_pb2_grpc.add_GraphEngineServicer_to_server(
        GraphEngineServicer(sessions, max_tensor_elements=config.tensor_element_limit), server)

    health_servicer = health.HealthServicer(experimental_non_blocking=True)
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    for service in ("", SERVICE_NAME):
        health_servicer.set(service, health_pb2.HealthCheckResponse.SERVING)

    reflection.enable_server_reflection(
        (SERVICE_NAME, health.SERVICE_NAME, reflection.SERVICE_NAME), server)

    address = format_address(config.host, config.port)
    try:
        port = server.add_insecure_port(address)
    except RuntimeError as exc:  # grpc raises on bind failure in recent versions
        raise OSError(f"cannot listen on {address}: {exc}") from None
    if port == 0:  # ... and returns 0 in older ones
        raise OSError(f"cannot listen on {address}: the address is in use or unavailable")
    return ServerParts(server, port, health_servicer, sessions)


def create_server(config: ServerConfig, session_manager: Any = None) -> tuple[grpc.Server, int]:
    """A server with every service registered and its port bound; call `.start()` on it.

    With `config.port == 0` a free port is picked; the returned port is the bound one.
    """
    parts = build_server(config, session_manager)
    return parts.server, parts.port


def serve(config: ServerConfig, ready_stream: TextIO | None = None) -> int:
    """Run in the foreground until SIGTERM or SIGINT; returns the process exit code."""
    logs.configure(config.log_level)
    try:
        parts = build_server(config)
    except OSError as exc:  # the port: an operator's problem, not a bug worth a traceback
        logs.log_event(_log, logging.ERROR, "start_failed", error=type(exc).__name__,
                       message=str(exc))
        return 1
    stop_requested = threading.Event()
    received: list[str] = []

    def on_signal(signum: int, frame: Any) -> None:
        received.append(signal.Signals(signum).name)
        if stop_requested.is_set():
            # A second signal while draining: the operator does not want to wait.
            logs.log_event(_log, logging.WARNING, "forced_stop", signal=received[-1])
            parts.server.stop(None)
        stop_requested.set()

    previous = {s: signal.signal(s, on_signal) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        parts.server.start()
        address = format_address(config.host, parts.port)
        logs.log_event(_log, logging.INFO, "serving", address=address,
                       workers=config.worker_threads, max_message_bytes=config.max_message_bytes,
                       max_sessions=config.max_sessions, device_threads=config.device_threads)
        out = ready_stream or sys.stdout
        out.write(READY_FORMAT.format(address=address) + "\n")
        out.flush()
        while not stop_requested.wait(0.5):
            pass
        _shutdown(parts, config.grace_seconds, received[0] if received else "unknown")
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return 0


def _shutdown(parts: ServerParts, grace: float, reason: str) -> None:
    logs.log_event(_log, logging.INFO, "shutdown", signal=reason, grace_seconds=grace)
    # Load balancers watching health stop sending work before the port closes.
    parts.health.enter_graceful_shutdown()
    parts.server.stop(grace).wait()
    logs.log_event(_log, logging.INFO, "drained")
    try:
        parts.sessions.close_all()
    except Exception as exc:
        logs.log_event(_log, logging.ERROR, "close_sessions_failed",
                       error=type(exc).__name__, message=str(exc))
    logs.log_event(_log, logging.INFO, "stopped")
