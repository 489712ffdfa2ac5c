"""Building and running the gRPC server.

`create_server(config)` returns a `grpc.Server` (bound, not yet started) and the port it
bound, for tests and embedding; `serve(config)` is the foreground daemon behind
`graphengine serve`: it prints a ready line, logs one structured line per event, serves
Prometheus metrics on `metrics_port` and KServe v2 HTTP/REST on `http_port`
(graphengine.server.rest), and on SIGTERM/SIGINT drains: health NOT_SERVING,
new work refused with UNAVAILABLE, work in flight finished within `grace_seconds`; then it
closes every session and returns exit code 0.

One port serves every gRPC service: graphengine.v1.GraphEngine (sessions),
inference.GRPCInferenceService (KServe v2 over the model repository), grpc.health.v1 and
reflection. Interceptors, outermost first: requests (drain admission, in-flight, stage
times, metrics), authentication (when tokens are configured), error mapping.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import signal
import sys
import threading
import time
from concurrent import futures
from typing import Any, TextIO

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from graphengine.api.session_ids import default_replica_id
from graphengine.api.types import SessionLimits
from graphengine.engine.errors import GraphEngineError
from graphengine.kserve.v2 import grpc_service_pb2_grpc
from graphengine.v1 import session_pb2_grpc

from .. import logs
from ..config import ServerConfig, format_address
from ..core.replica import Replica
from ..cpu_quota import cpu_budget
from ..lifecycle import Lifecycle
from ..metrics import Metrics
from .auth import TokenAuth
from .errors import ErrorInterceptor
from .interceptors import AuthInterceptor, RequestInterceptor
from .kserve_servicer import SERVICE_NAME as KSERVE_SERVICE
from .kserve_servicer import InferenceServicer
from .reflection_pool import reflection_pool
from .servicer import SERVICE_NAME, GraphEngineServicer

_log = logging.getLogger("graphengine.server")

READY_FORMAT = "graphengine serving on {address}"
HTTP_FORMAT = "graphengine http on {address}"
QUIET_SECONDS = 0.25  # draining: no refused call for this long means callers have gone
MAX_LINGER_SECONDS = 2.0
SERVING, NOT_SERVING = (health_pb2.HealthCheckResponse.SERVING,
                        health_pb2.HealthCheckResponse.NOT_SERVING)


@dataclasses.dataclass
class ServerParts:
    """Everything `serve` drives beyond the grpc.Server."""

    server: grpc.Server
    port: int
    health: health.HealthServicer
    sessions: Any
    lifecycle: Lifecycle
    metrics: Metrics
    repository: Any  # ModelRepository | None
    stream_executor: futures.ThreadPoolExecutor
    config: ServerConfig
    inference: Any = None  # the KServe servicer, which the HTTP front end serves too
    http: Any = None  # graphengine.server.rest.HttpServer while serve() runs one

    def ready(self) -> bool:
        """Readiness: serving and not draining; with strict_readiness, every model ready."""
        if self.lifecycle.draining:
            return False
        if self.config.strict_readiness and self.repository is not None:
            return self.repository.all_ready()
        return True

    def update_health(self) -> None:
        status = SERVING if self.ready() else NOT_SERVING
        for service in ("", SERVICE_NAME, KSERVE_SERVICE):
            self.health.set(service, status)


def device_memory_bytes() -> int:
    """The host device's memory: the machine's physical memory."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return 0


def device_threads(config: ServerConfig) -> tuple[int, str]:
    """The device's thread budget and where it came from: the config's, or for 0 the CPUs
    this process may use (affinity and cgroup quota: server/cpu_quota.py)."""
    if config.device_threads:
        return config.device_threads, "config"
    budget = cpu_budget()
    return budget.threads, budget.source


def make_device(config: ServerConfig) -> Any:
    """The device every session runs on, with the thread budget `device_threads` gives."""
    # Imported here so that loading the server module does not load the compiler and the
    # runtime before the configuration (logging, thread budget) is in place.
    from graphengine.engine.runtime import default_device

    return default_device(device_threads(config)[0])


def make_replica(config: ServerConfig) -> Replica:
    return Replica(config.replica_id or default_replica_id(), config.replica_address_format)


def _limits(config: ServerConfig) -> SessionLimits:
    return SessionLimits(max_graphs=config.max_graphs_per_session,
                         max_nodes=config.max_nodes_per_graph,
                         max_tensor_elements=config.tensor_element_limit,
                         device_memory_bytes=device_memory_bytes())


def make_compile_cache(config: ServerConfig) -> Any:
    """The compile cache sessions and repository models share (None without a folder)."""
    if not config.compile_cache_dir:
        return None
    from graphengine.server.core.compile_cache import CompileCache

    cache = CompileCache(config.compile_cache_dir, config.compile_cache_max_bytes)
    logs.log_event(_log, logging.INFO, "compile_cache", dir=cache.root,
                   max_bytes=cache.max_bytes, bytes=cache.stats.bytes, writable=cache.writable)
    return cache


def make_session_manager(config: ServerConfig, metrics: Metrics | None = None,
                         replica: Replica | None = None, compile_cache: Any = None) -> Any:
    from graphengine.server.core.manager import SessionManager

    return SessionManager(device=make_device(config), max_sessions=config.max_sessions,
                          limits=_limits(config),
                          memory_limit_bytes=config.session_memory_limit_bytes,
                          idle_seconds=config.session_idle_seconds,
                          on_compile=metrics.observe_compile if metrics else None,
                          replica=replica, compile_cache=compile_cache)


def _credentials(config: ServerConfig) -> grpc.ServerCredentials:
    def read(path: str) -> bytes:
        try:
            with open(path, "rb") as f:
                return f.read()
        except OSError as exc:
            raise OSError(f"cannot read {path}: {exc.strerror}") from None

    client_ca = read(config.tls_client_ca_file) if config.tls_client_ca_file else None
    return grpc.ssl_server_credentials(
        [(read(config.tls_key_file), read(config.tls_cert_file))],
        root_certificates=client_ca, require_client_auth=client_ca is not None)


def load_plugins(config: ServerConfig) -> None:
    """The config's operator plugins, in order, before any graph or model is read: a plugin
    that does not load is InvalidPlugin, naming the file, and the server does not start."""
    if not config.plugins:
        return
    from graphengine.engine.ops.custom import load_plugin

    for path in config.plugins:
        ops = load_plugin(path)
        logs.log_event(_log, logging.INFO, "plugin_loaded", path=path, ops=",".join(ops))


def build_server(config: ServerConfig, session_manager: Any = None) -> ServerParts:
    load_plugins(config)
    lifecycle, metrics = Lifecycle(), Metrics()
    replica = make_replica(config)
    cache = make_compile_cache(config)
    sessions = (session_manager if session_manager is not None
                else make_session_manager(config, metrics, replica, cache))
    repository = None
    if config.model_repository:
        from graphengine.server.core.repository import ControlMode, ModelRepository

        repository = ModelRepository(config.model_repository, device=make_device(config),
                                     limits=_limits(config),
                                     load_threads=config.repository_load_threads,
                                     on_compile=metrics.observe_compile,
                                     on_batch=metrics.observe_batch,
                                     mode=ControlMode(config.model_control_mode),
                                     load_models=config.load_models,
                                     poll_seconds=config.repository_poll_seconds,
                                     compile_cache=cache)
    interceptors: list[grpc.ServerInterceptor] = [RequestInterceptor(
        lifecycle, metrics, ungated=frozenset({health.SERVICE_NAME, reflection.SERVICE_NAME}))]
    if config.auth:
        interceptors.append(AuthInterceptor(TokenAuth(config.auth_tokens),
                                            open_services=frozenset({health.SERVICE_NAME})))
    interceptors.append(ErrorInterceptor())
    server = grpc.server(
        futures.ThreadPoolExecutor(max_workers=config.worker_threads,
                                   thread_name_prefix="graphengine-rpc"),
        interceptors=interceptors,
        options=[
            ("grpc.max_send_message_length", config.max_message_bytes),
            ("grpc.max_receive_message_length", config.max_message_bytes),
            # Without this a second server on a busy port would "bind" it too and share
            # its traffic; we want a clear bind error instead.
            ("grpc.so_reuseport", 0),
        ],
    )
    streams = futures.ThreadPoolExecutor(max_workers=config.worker_threads,
                                         thread_name_prefix="graphengine-stream")
    common = {"max_tensor_elements": config.tensor_element_limit, "stream_executor": streams,
              "stream_max_inflight": config.stream_max_inflight, "lifecycle": lifecycle,
              "metrics": metrics}
    session_pb2_grpc.add_GraphEngineServicer_to_server(
        GraphEngineServicer(sessions, replica=replica, **common,
                            max_message_bytes=config.max_message_bytes), server)
    health_servicer = health.HealthServicer(experimental_non_blocking=True)
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    parts = ServerParts(server, 0, health_servicer, sessions, lifecycle, metrics, repository,
                        streams, config)
    parts.inference = InferenceServicer(repository, ready=parts.ready, **common)
    grpc_service_pb2_grpc.add_GRPCInferenceServiceServicer_to_server(parts.inference, server)
    reflection.enable_server_reflection(
        (SERVICE_NAME, KSERVE_SERVICE, health.SERVICE_NAME, reflection.SERVICE_NAME), server,
        pool=reflection_pool())
    _register_gauges(parts)
    if cache is not None:
        _register_cache_stats(metrics, cache)
    parts.update_health()

    address = format_address(config.host, config.port)
    try:
        if config.tls:
            port = server.add_secure_port(address, _credentials(config))
        else:
            port = server.add_insecure_port(address)
    except RuntimeError as exc:  # grpc raises on bind failure in recent versions
        raise OSError(f"cannot listen on {address}: {exc}") from None
    if port == 0:  # ... and returns 0 in older ones
        raise OSError(f"cannot listen on {address}: the address is in use or unavailable")
    parts.port = port
    return parts


def _register_gauges(parts: ServerParts) -> None:
    m, sessions, repo = parts.metrics, parts.sessions, parts.repository

    def safe(fn):  # a stand-in core in tests may lack an attribute: report nothing then
        def read() -> dict:
            try:
                return fn()
            except (AttributeError, TypeError):
                return {}
        return read

    m.gauge("graphengine_sessions", safe(lambda: {(): len(sessions)}))
    m.gauge("graphengine_inflight_requests", lambda: {(): parts.lifecycle.inflight})
    m.gauge("graphengine_loaded_models", safe(lambda: {
        ("session",): sessions.loaded_models,
        ("repository",): repo.loaded_models if repo is not None else 0}))
    m.gauge("graphengine_device_memory_bytes", safe(lambda: {
        ("sessions",): sessions.device_bytes,
        ("repository",): repo.device_bytes if repo is not None else 0}))
    if repo is not None:
        m.gauge("graphengine_repository_models",
                lambda: {(state,): n for state, n in repo.state_counts().items()})
        _register_model_stats(m, repo, safe)


def _register_cache_stats(m: Metrics, cache: Any) -> None:
    """The compile cache's counters, read once per scrape."""
    def families() -> dict[str, dict]:
        s = cache.snapshot()
        return {"graphengine_compile_cache_hits": {(): s.hits},
                "graphengine_compile_cache_misses": {(): s.misses},
                "graphengine_compile_cache_rejected": {(): s.rejected},
                "graphengine_compile_cache_evictions": {(): s.evictions},
                "graphengine_compile_cache_bytes": {(): s.bytes}}

    m.gauges(families, ["graphengine_compile_cache_hits", "graphengine_compile_cache_misses",
                        "graphengine_compile_cache_rejected",
                        "graphengine_compile_cache_evictions",
                        "graphengine_compile_cache_bytes"])


def _register_model_stats(m, repo, safe) -> None:
    """The runtime's statistics of each repository model, read once per scrape."""

    @safe
    def families() -> dict[str, dict]:
        stats: dict = {}
        for sm in repo.models():  # a model's versions added up: the labels name the model
            own = sm.session.runtime_stats()
            stats[sm.name] = stats[sm.name] + own if sm.name in stats else own
        return {
            "graphengine_model_runs": {(n,): s.runs for n, s in stats.items()},
            "graphengine_model_device_seconds": {(n,): s.device_seconds
                                                 for n, s in stats.items()},
            "graphengine_model_stream_busy_seconds": {
                (n, str(i)): v for n, s in stats.items()
                for i, v in enumerate(s.stream_seconds)},
            "graphengine_model_io_bytes": {
                key: v for n, s in stats.items() for key, v in
                (((n, "in_place"), s.bytes_zero_copy), ((n, "copied"), s.bytes_copied))},
            "graphengine_model_memory_bytes": {
                key: v for n, s in stats.items() for key, v in
                (((n, "arena"), s.arena_bytes), ((n, "weights"), s.weight_bytes),
                 ((n, "prepared"), s.prepared_bytes))},
        }

    m.gauges(families, ["graphengine_model_runs", "graphengine_model_device_seconds",
                        "graphengine_model_stream_busy_seconds", "graphengine_model_io_bytes",
                        "graphengine_model_memory_bytes"])


def start_background(parts: ServerParts) -> None:
    """Model loading and idle-session expiry."""
    if parts.repository is not None:
        parts.repository.start()
    start_reaper = getattr(parts.sessions, "start_reaper", None)
    if start_reaper is not None:
        start_reaper()


def create_server(config: ServerConfig, session_manager: Any = None) -> tuple[grpc.Server, int]:
    """A server with every service registered and its port bound; call `.start()` on it.

    With `config.port == 0` a free port is picked; the returned port is the bound one.
    Repository models start loading (in the background) right away.
    """
    parts = build_server(config, session_manager)
    start_background(parts)
    return parts.server, parts.port


def serve(config: ServerConfig, ready_stream: TextIO | None = None) -> int:
    """Run in the foreground until SIGTERM or SIGINT; returns the process exit code."""
    logs.configure(config.log_level, fmt=config.log_format)
    try:
        parts = build_server(config)
        metrics_port = (parts.metrics.start_http(config.host, config.metrics_port)
                        if config.metrics_port else 0)
        if config.http_port >= 0:
            from graphengine.server.rest import serve_http

            parts.http = serve_http(parts)
    except (OSError, GraphEngineError) as exc:  # an operator's problem: no traceback
        logs.log_event(_log, logging.ERROR, "start_failed", error=type(exc).__name__,
                       message=str(exc))
        return 1
    stop_requested, forced = threading.Event(), threading.Event()
    received: list[str] = []

    def on_signal(signum: int, frame: Any) -> None:
        received.append(signal.Signals(signum).name)
        if stop_requested.is_set():
            # A second signal while draining: the operator does not want to wait.
            logs.log_event(_log, logging.WARNING, "forced_stop", signal=received[-1])
            forced.set()
        stop_requested.set()

    previous = {s: signal.signal(s, on_signal) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        parts.server.start()
        start_background(parts)
        address = format_address(config.host, parts.port)
        threads, threads_from = device_threads(config)
        replica = make_replica(config)
        logs.log_event(_log, logging.INFO, "serving", address=address,
                       workers=config.worker_threads, max_message_bytes=config.max_message_bytes,
                       max_sessions=config.max_sessions, device_threads=threads,
                       device_threads_from=threads_from, replica=replica.replica_id,
                       advertised=replica.address or "-",
                       metrics_port=metrics_port,
                       http_port=parts.http.port if parts.http is not None else -1,
                       tls=config.tls,
                       identities=len(config.auth_tokens),
                       model_repository=config.model_repository or "-")
        out = ready_stream or sys.stdout
        if parts.http is not None:  # before the ready line: ready means both are serving
            out.write(HTTP_FORMAT.format(address=format_address(config.host, parts.http.port))
                      + "\n")
        out.write(READY_FORMAT.format(address=address) + "\n")
        out.flush()
        while not stop_requested.wait(0.5):
            parts.update_health()  # readiness follows the repository's models
        _shutdown(parts, config.grace_seconds, received[0] if received else "unknown", forced)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return 0


def _shutdown(parts: ServerParts, grace: float, reason: str, forced: threading.Event) -> None:
    logs.log_event(_log, logging.INFO, "shutdown", signal=reason, grace_seconds=grace,
                   inflight=parts.lifecycle.inflight)
    # Load balancers watching health stop sending work; new RPCs get UNAVAILABLE.
    parts.lifecycle.begin_drain()
    parts.health.enter_graceful_shutdown()
    deadline = time.monotonic() + grace
    while not parts.lifecycle.wait_idle(0.1):
        if forced.is_set() or time.monotonic() >= deadline:
            break
    left = parts.lifecycle.inflight
    # Keep the port open (refusing) until callers stop arriving, so that each one gets our
    # UNAVAILABLE rather than a connection torn down under a call it has just sent.
    linger_until = min(deadline, time.monotonic() + MAX_LINGER_SECONDS)
    while (not forced.is_set() and time.monotonic() < linger_until
           and not parts.lifecycle.quiet_for(QUIET_SECONDS)):
        time.sleep(0.05)
    # RPCs still queued for a worker are refused UNAVAILABLE by then; stop() waits for them.
    remaining = 0.0 if forced.is_set() else max(0.0, deadline - time.monotonic())
    parts.server.stop(max(remaining, 0.5) if not forced.is_set() else None).wait()
    if parts.http is not None:
        parts.http.stop()
    logs.log_event(_log, logging.INFO, "drained", unfinished=left)
    parts.stream_executor.shutdown(wait=False, cancel_futures=True)
    try:
        if parts.repository is not None:
            parts.repository.close()
        parts.sessions.close_all()
    except Exception as exc:
        logs.log_event(_log, logging.ERROR, "close_sessions_failed",
                       error=type(exc).__name__, message=str(exc))
    parts.metrics.stop_http()
    logs.log_event(_log, logging.INFO, "stopped")
