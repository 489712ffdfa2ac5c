"""KServe v2 HTTP/REST (the Open Inference Protocol's HTTP binding, Triton's HTTP API) on
a port of its own, over the same model repository and servicer as the gRPC port.

    routes.py   the endpoints: HTTP request -> the KServe message -> the gRPC servicer's
                method -> JSON (one table of routes; errors -> HTTP statuses)
    tensors.py  the infer body (JSON + Triton's binary tensor extension) <-> the message
                and numpy; protos as the HTTP API's JSON
    server.py   the HTTP/1.1 server: connections, keep-alive, TLS, body bounds, admission
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .routes import Endpoints
from .server import FrontEnd, HttpServer, tls_context

if TYPE_CHECKING:
    from ..rpc.app import ServerParts

__all__ = ["HttpServer", "serve_http"]


def serve_http(parts: ServerParts, port: int | None = None) -> HttpServer:
    """Serve `parts`' KServe servicer over HTTP on the config's host and `http_port` (or
    `port`: 0 picks a free one); returns the running server (`.port`, `.stop()`)."""
    config = parts.config

    def not_ready() -> str:
        if parts.lifecycle.draining:
            return "it is shutting down"
        return ("strict_readiness is on and not every repository model is READY "
                "(POST /v2/repository/index lists them)")

    endpoints = Endpoints(parts.inference, parts.repository, parts.ready, not_ready)
    front = FrontEnd(endpoints, config, parts.lifecycle, parts.metrics)
    return HttpServer(front, config.host, config.http_port if port is None else port,
                      tls_context(config)).start()
