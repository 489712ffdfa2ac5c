"""The HTTP/1.1 server of the KServe v2 REST front end (the standard library's http.server).

One thread per connection (ThreadingHTTPServer), connections kept alive (HTTP/1.1, as
tritonclient.http's pooled geventhttpclient connections expect), TCP_NODELAY so a response
written as header + body is not held back by Nagle's algorithm. Bounds, all before the
work they size:

- connections at once: MAX_CONNECTIONS; one more gets 503 and is closed (REFUSERS at
  once; beyond those, and over TLS, it is closed without an answer);
- requests handled at once: the config's `worker_threads` (the others wait, their `queue`
  stage); an idle keep-alive connection is closed after IDLE_SECONDS, and so is one whose
  body stops arriving for that long;
- the request line and each header line (64 KiB), headers (100): http.server's own bounds
  (414, 431);
- a body: Content-Length <= `max_message_bytes` (else 413 and the connection closes,
  the body unread; an `Expect: 100-continue` request is refused before it is sent); a
  gzip/deflate body decompresses to at most as much (413); no chunked bodies (411);
- the JSON part and the tensors: tensors.parse_infer and the KServe codec.

Admission as on the gRPC port: while the server drains, every request but health is
refused with 503 and counted in flight until its response is written; with `auth_tokens`
every request but health needs `Authorization: Bearer <token>` (401). Over TLS when the
config has a certificate (the gRPC port's; a client CA makes client certificates
mandatory here too).
"""

from __future__ import annotations

import gzip
import logging
import re
import socket
import socketserver
import ssl
import threading
import time
import zlib
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import graphengine
from graphengine.engine.errors import Unauthenticated

from .. import logs
from ..config import ServerConfig
from ..rpc import auth
from ..rpc.errors import describe
from ..rpc.interceptors import DRAINING_MESSAGE
from ..timing import StageTimes
from . import routes
from .routes import HTTP_STATUS, HttpError, Request, Response

_log = logging.getLogger("graphengine.server.rest")

MAX_CONNECTIONS = 256
IDLE_SECONDS = 75.0  # a keep-alive connection's idle time (nginx's default) and read timeout
HANDSHAKE_SECONDS = 10.0
REFUSERS, REFUSE_SECONDS = 8, 2.0  # connections being refused at once, and their time
_BYTE_COUNT = re.compile(r"[0-9]{1,18}")
_EMPTY = memoryview(b"")
_WBITS = {"gzip": 16 + zlib.MAX_WBITS, "deflate": zlib.MAX_WBITS}


class FrontEnd:
    """What the handler threads share: the endpoints, admission, bounds and metrics."""

    def __init__(self, endpoints: routes.Endpoints, config: ServerConfig, lifecycle: Any,
                 metrics: Any) -> None:
        self.endpoints = endpoints
        self.lifecycle = lifecycle
        self.metrics = metrics
        self.max_body = config.max_message_bytes
        self.auth = auth.TokenAuth(config.auth_tokens) if config.auth else None
        self.slots = threading.BoundedSemaphore(config.worker_threads)

    def identify(self, headers: Any) -> str | None:
        if self.auth is None:
            return None
        values = headers.get_all("Authorization") or []
        try:
            return self.auth.identify([(auth.METADATA_KEY, v) for v in values])
        except Unauthenticated as exc:  # its message says what was wrong
            raise HttpError(401, str(exc), "UNAUTHENTICATED",
                            headers=(("WWW-Authenticate", "Bearer"),)) from None

    def failure(self, exc: BaseException, api: str) -> tuple[int, str, str, tuple]:
        """(HTTP status, message, gRPC status name, headers) for a failed request; logs it
        (with the traceback under a reference when it is a bug) like the gRPC side."""
        if isinstance(exc, HttpError):
            logs.log_event(_log, logging.INFO, "http_error", api=api, status=exc.status,
                           message=exc.message)
            return exc.status, exc.message, exc.code, exc.headers
        status, message = describe(exc, api)
        return HTTP_STATUS[status.name], message, status.name, ()


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    timeout = IDLE_SECONDS
    server: _Server

    def version_string(self) -> str:
        return f"graphengine/{graphengine.__version__}"

    def setup(self) -> None:
        if isinstance(self.request, ssl.SSLSocket):
            self.request.settimeout(HANDSHAKE_SECONDS)
            self.request.do_handshake()
        super().setup()

    # http.server logs to stderr; ours go to the structured log, at DEBUG (per request).
    def log_request(self, code: Any = "-", size: Any = "-") -> None:
        pass

    def log_message(self, format: str, *args: Any) -> None:
        logs.log_event(_log, logging.DEBUG, "http_connection", peer=self.client_address[0],
                       message=format % args)

    def send_error(self, code: int, message: str | None = None,
                   explain: str | None = None) -> None:
        """http.server's own refusals (a malformed request line, headers too long, a method
        no route takes) as JSON like every other error; the connection closes."""
        self._send(routes.error_response(code, message or self.responses[code][0]),
                   close=True)

    def handle_expect_100(self) -> bool:
        size = self.headers.get("Content-Length", "").strip()
        if _BYTE_COUNT.fullmatch(size) and int(size) > self.server.front.max_body:
            self.send_error(413, _too_large(int(size), self.server.front.max_body))
            return False
        return super().handle_expect_100()

    def do_GET(self) -> None:  # http.server calls do_<METHOD>
        self._serve("GET")

    def do_POST(self) -> None:
        self._serve("POST")

    # ---- one request -------------------------------------------------------------------
    def _serve(self, method: str) -> None:
        arrived = time.perf_counter()
        front = self.server.front
        self._body_pending = bool(self.headers.get("Content-Length", "0").strip() != "0"
                                  or self.headers.get("Transfer-Encoding"))
        try:
            route, params = routes.match(method, self.path.split("?", 1)[0])
        except HttpError as exc:
            self._send(routes.error_response(exc.status, exc.message, exc.headers),
                       close=self._body_pending)
            return
        if route.api is None:  # health: always answered, never authenticated or counted
            self._send(route.handler(front.endpoints, Request(params, _EMPTY, self.headers,
                                                              None)), close=self._body_pending)
            return
        times = StageTimes(f"http:{route.api}", arrived)
        code, admitted = "OK", False
        try:
            identity = front.identify(self.headers)
            body = self._read_body(front.max_body)
            if not front.lifecycle.enter():
                raise HttpError(503, DRAINING_MESSAGE, "UNAVAILABLE", close=True)
            admitted = True
            waited = time.perf_counter()
            with front.slots:
                times.add("queue", time.perf_counter() - waited)
                token = auth.bind_identity(identity)
                try:
                    response = route.handler(front.endpoints,
                                             Request(params, body, self.headers, times))
                finally:
                    auth.unbind_identity(token)
        except Exception as exc:
            status, message, code, headers = front.failure(exc, times.api)
            response = routes.error_response(status, message, headers)
            close = self._body_pending or (isinstance(exc, HttpError) and exc.close)
        else:
            close = False
        try:
            self._send(response, close=close)
        finally:
            if admitted:
                front.lifecycle.exit()
            front.metrics.observe_request(times, code)
            logs.log_event(_log, logging.DEBUG, "http", method=method, path=self.path[:200],
                           status=response.status, code=code, model=times.model or "-",
                           ms=f"{times.total() * 1e3:.2f}")

    def _read_body(self, limit: int) -> memoryview:
        """The request body, its size bounded before a byte of it is held (and decoded)."""
        if self.headers.get("Transfer-Encoding") is not None:
            raise HttpError(411, "chunked request bodies are not supported: send "
                                 "Content-Length", "INVALID_ARGUMENT", close=True)
        values = {v.strip() for v in self.headers.get_all("Content-Length") or ()}
        if not values:
            return _EMPTY
        text = values.pop()
        if values or not _BYTE_COUNT.fullmatch(text):
            raise HttpError(400, "Content-Length is not one byte count", "INVALID_ARGUMENT",
                            close=True)
        size = int(text)
        if size > limit:
            raise HttpError(413, _too_large(size, limit), "RESOURCE_EXHAUSTED", close=True)
        view = memoryview(bytearray(size))
        got = 0
        while got < size:
            n = self.rfile.readinto(view[got:])
            if not n:
                raise HttpError(400, f"the body ended after {got} of its {size} bytes",
                                "INVALID_ARGUMENT", close=True)
            got += n
        self._body_pending = False
        return _decoded(view, self.headers.get("Content-Encoding"), limit)

    def _send(self, response: Response, close: bool = False) -> None:
        parts, encoding = response.parts, None
        if response.compressible and response.status == 200:
            encoding = _accepted(self.headers.get("Accept-Encoding", ""))
            if encoding is not None:
                data = b"".join(parts)
                parts = [gzip.compress(data, 6) if encoding == "gzip" else zlib.compress(data)]
        self.send_response(response.status)
        self.send_header("Content-Type", response.content_type)
        self.send_header("Content-Length", str(sum(memoryview(p).nbytes for p in parts)))
        for key, value in response.headers:
            self.send_header(key, value)
        if encoding is not None:
            self.send_header("Content-Encoding", encoding)
        if close or self.server.front.lifecycle.draining:
            self.send_header("Connection", "close")  # http.server then closes it
        self.end_headers()
        for part in parts:
            self.wfile.write(part)


def _too_large(size: int, limit: int) -> str:
    return (f"the request body is {size} bytes, over the server's max_message_bytes "
            f"of {limit}")


def _decoded(body: memoryview, encoding: str | None, limit: int) -> memoryview:
    name = (encoding or "identity").strip().lower()
    if name == "identity":
        return body
    wbits = _WBITS.get(name)
    if wbits is None:
        raise HttpError(415, f"Content-Encoding '{name[:40]}' is not supported (gzip, deflate "
                             f"or identity)", "INVALID_ARGUMENT")
    inflater = zlib.decompressobj(wbits)
    try:
        data = inflater.decompress(body, limit + 1)
    except zlib.error as exc:
        raise HttpError(400, f"the {name} body does not decompress: {exc}",
                        "INVALID_ARGUMENT") from None
    if len(data) > limit:
        raise HttpError(413, f"the {name} body decompresses to more than the server's "
                             f"max_message_bytes of {limit}", "RESOURCE_EXHAUSTED")
    if not inflater.eof or inflater.unused_data:
        raise HttpError(400, f"the {name} body is {'truncated' if not inflater.eof else ''}"
                             f"{'followed by other bytes' if inflater.unused_data else ''}",
                        "INVALID_ARGUMENT")
    return memoryview(data)


def _accepted(header: str) -> str | None:
    """gzip or deflate if the client's Accept-Encoding takes it (q > 0), else None."""
    taken = set()
    for item in header.split(","):
        coding, _, params = item.strip().partition(";")
        q = params.strip()
        if q.startswith("q=") and q[2:].strip() in ("0", "0.0", "0.00", "0.000"):
            continue
        taken.add(coding.strip().lower())
    return next((c for c in ("gzip", "deflate") if c in taken), None)


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False  # stop() closes the connections instead of joining their threads
    request_queue_size = 128

    def __init__(self, host: str, port: int, front: FrontEnd,
                 tls: ssl.SSLContext | None) -> None:
        self.front = front
        self._tls = tls
        self._slots = threading.BoundedSemaphore(MAX_CONNECTIONS)
        self._refusers = threading.BoundedSemaphore(REFUSERS)
        self._open: set[socket.socket] = set()
        self._open_lock = threading.Lock()
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM,
                                   flags=socket.AI_PASSIVE)
        self.address_family = infos[0][0]
        super().__init__(infos[0][4][:2], _Handler)

    def server_bind(self) -> None:
        # http.server's would look up the host's FQDN, a DNS call that may hang the start.
        if self.address_family == socket.AF_INET6:
            try:  # "::" serves IPv4 too, as the gRPC port does
                self.socket.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
            except OSError:
                pass
        socketserver.TCPServer.server_bind(self)
        self.server_name, self.server_port = self.server_address[:2]

    def get_request(self) -> tuple[socket.socket, Any]:
        sock, address = self.socket.accept()
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if self._tls is not None:  # the handshake runs on the connection's thread
            sock = self._tls.wrap_socket(sock, server_side=True,
                                         do_handshake_on_connect=False)
        return sock, address

    def process_request(self, request: Any, client_address: Any) -> None:
        if not self._slots.acquire(blocking=False):
            if self._tls is None and self._refusers.acquire(blocking=False):
                threading.Thread(target=self._refuse, args=(request,), daemon=True,
                                 name="graphengine-http-refuse").start()
            else:  # a TLS connection, or a flood: closed at once, no handshake spent
                self.shutdown_request(request)
            return
        with self._open_lock:
            self._open.add(request)
        try:
            super().process_request(request, client_address)
        except BaseException:
            self._release(request)
            raise

    def _refuse(self, sock: socket.socket) -> None:
        """Over MAX_CONNECTIONS: 503, after reading the request (closing a socket with
        unread bytes resets it, and the client would lose the answer)."""
        body = routes.tensors.dumps({"error": f"the server holds its maximum of "
                                              f"{MAX_CONNECTIONS} HTTP connections; retry"})
        try:
            sock.settimeout(REFUSE_SECONDS)
            sock.recv(65536)
            sock.sendall(b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json"
                         b"\r\nConnection: close\r\nContent-Length: %d\r\n\r\n%s"
                         % (len(body), body))
            sock.shutdown(socket.SHUT_WR)
            while sock.recv(65536):
                pass
        except OSError:
            pass
        finally:
            sock.close()
            self._refusers.release()

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._release(request)

    def _release(self, request: Any) -> None:
        with self._open_lock:
            self._open.discard(request)
        self._slots.release()

    def handle_error(self, request: Any, client_address: Any) -> None:
        # A peer that went away, a failed TLS handshake, a read timeout: the connection ends.
        logs.log_event(_log, logging.DEBUG, "http_connection_error", peer=client_address[0],
                       exc_info=True)

    def close_connections(self) -> None:
        with self._open_lock:
            open_now = list(self._open)
        for sock in open_now:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


def tls_context(config: ServerConfig) -> ssl.SSLContext | None:
    if not config.tls:
        return None
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        context.load_cert_chain(config.tls_cert_file, config.tls_key_file)
        if config.tls_client_ca_file:
            context.load_verify_locations(config.tls_client_ca_file)
            context.verify_mode = ssl.CERT_REQUIRED
    except (OSError, ssl.SSLError) as exc:
        raise OSError(f"HTTP port: cannot use the TLS files: {exc}") from None
    return context


class HttpServer:
    """Serves a FrontEnd on host:port in a daemon thread."""

    def __init__(self, front: FrontEnd, host: str, port: int,
                 tls: ssl.SSLContext | None = None) -> None:
        try:
            self._server = _Server(host, port, front, tls)
        except OSError as exc:
            raise OSError(f"cannot listen on HTTP port {host}:{port}: "
                          f"{exc.strerror or exc}") from None
        self.port: int = self._server.server_address[1]
        self._thread = threading.Thread(target=self._server.serve_forever, args=(0.2,),
                                        name="graphengine-http", daemon=True)

    def start(self) -> HttpServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop accepting, close the listening socket and every open connection."""
        if self._thread.is_alive():
            self._server.shutdown()
        self._server.server_close()
        self._server.close_connections()
