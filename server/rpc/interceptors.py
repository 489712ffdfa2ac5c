"""Server interceptors other than error mapping (graphengine.server.rpc.errors):

- `RequestInterceptor` (outermost): notes when a call arrived, refuses new work with
  UNAVAILABLE while the server drains, counts the call in flight until it ends, gives it a
  `StageTimes` for the layers below to fill, and reports its latency by stage and its
  final status code to the metrics.
- `AuthInterceptor`: checks the bearer token and binds the caller's identity for the
  handler (graphengine.server.rpc.auth).

Health checking stays outside both (always answered, never authenticated), so probes keep
working during a drain and without a token. Each interceptor wraps the handler gRPC found;
the wrapper runs on the worker thread, inside the call's own contextvars context.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from typing import Any

import grpc

from graphengine.engine.errors import Unauthenticated

from .. import timing
from ..lifecycle import Lifecycle
from ..logs import log_event
from . import auth

_log = logging.getLogger("graphengine.server.rpc")

DRAINING_MESSAGE = "the server is shutting down and takes no new work; retry elsewhere"


def _service_of(method: str) -> str:
    return method.lstrip("/").split("/", 1)[0]


def rewrap(handler: grpc.RpcMethodHandler,
           around: Callable[[Callable, bool], Callable]) -> grpc.RpcMethodHandler:
    """The same handler with its behaviour replaced by `around(behaviour, streams_out)`."""
    codec = {"request_deserializer": handler.request_deserializer,
             "response_serializer": handler.response_serializer}
    if handler.unary_unary is not None:
        return grpc.unary_unary_rpc_method_handler(around(handler.unary_unary, False), **codec)
    if handler.stream_unary is not None:
        return grpc.stream_unary_rpc_method_handler(around(handler.stream_unary, False),
                                                    **codec)
    if handler.unary_stream is not None:
        return grpc.unary_stream_rpc_method_handler(around(handler.unary_stream, True), **codec)
    return grpc.stream_stream_rpc_method_handler(around(handler.stream_stream, True), **codec)


def _final_code(context: grpc.ServicerContext, failed: bool) -> str:
    code = context.code()
    if code is None:
        return "UNKNOWN" if failed else "OK"
    return code.name


class RequestInterceptor(grpc.ServerInterceptor):
    """Admission during drain, in-flight accounting, stage timing and request metrics."""

    def __init__(self, lifecycle: Lifecycle, metrics: Any,
                 ungated: frozenset[str] = frozenset()) -> None:
        self._lifecycle = lifecycle
        self._metrics = metrics
        self._ungated = ungated

    def intercept_service(self, continuation: Callable, handler_call_details: Any) -> Any:
        arrived = time.perf_counter()  # runs when the call arrives, before it waits for a worker
        handler = continuation(handler_call_details)
        method = handler_call_details.method
        if handler is None or _service_of(method) in self._ungated:
            return handler
        api = method.rsplit("/", 1)[-1]
        return rewrap(handler, lambda fn, streams: (self._stream if streams else self._unary)(
            fn, method, api, arrived))

    def _admit(self, context: grpc.ServicerContext, api: str, arrived: float
               ) -> timing.StageTimes:
        if not self._lifecycle.enter():
            self._metrics.observe_request(timing.StageTimes(api, arrived), "UNAVAILABLE")
            context.abort(grpc.StatusCode.UNAVAILABLE, DRAINING_MESSAGE)
        times = timing.StageTimes(api, arrived)
        times.add("queue", time.perf_counter() - arrived)
        if not context.is_active():  # cancelled while it waited for a worker thread
            self._lifecycle.exit()
            self._metrics.observe_request(times, "CANCELLED")
            context.abort(grpc.StatusCode.CANCELLED, "the client cancelled the call")
        return times

    def _done(self, context: grpc.ServicerContext, method: str, times: timing.StageTimes,
              failed: bool) -> None:
        self._lifecycle.exit()
        code = _final_code(context, failed)
        self._metrics.observe_request(times, code)
        log_event(_log, logging.DEBUG, "rpc", method=method, code=code,
                  identity=auth.current_identity() or "-", model=times.model or "-",
                  ms=f"{times.total() * 1e3:.2f}")

    def _unary(self, fn: Callable, method: str, api: str, arrived: float) -> Callable:
        def handler(request: Any, context: grpc.ServicerContext) -> Any:
            times = self._admit(context, api, arrived)
            token = timing.bind(times)
            failed = True
            try:
                response = fn(request, context)
                failed = False
                return response
            finally:
                timing.unbind(token)
                self._done(context, method, times, failed)
        return handler

    def _stream(self, fn: Callable, method: str, api: str, arrived: float) -> Callable:
        def handler(request: Any, context: grpc.ServicerContext) -> Iterator[Any]:
            times = self._admit(context, api, arrived)
            token = timing.bind(times)
            failed = True
            try:
                yield from fn(request, context)
                failed = False
            finally:
                timing.unbind(token)
                self._done(context, method, times, failed)
        return handler


class AuthInterceptor(grpc.ServerInterceptor):
    """UNAUTHENTICATED unless the call carries a valid bearer token; binds its identity."""

    def __init__(self, tokens: auth.TokenAuth, open_services: frozenset[str]) -> None:
        self._auth = tokens
        self._open = open_services

    def intercept_service(self, continuation: Callable, handler_call_details: Any) -> Any:
        handler = continuation(handler_call_details)
        if handler is None or _service_of(handler_call_details.method) in self._open:
            return handler
        return rewrap(handler, lambda fn, streams: (self._stream if streams else self._unary)(
            fn, handler_call_details.method))

    def _identify(self, context: grpc.ServicerContext, method: str) -> str:
        try:
            return self._auth.identify(context.invocation_metadata())
        except Unauthenticated as exc:
            reason = str(exc)
        # Aborted outside the `except`, so the abort does not chain (and keep) the error.
        log_event(_log, logging.INFO, "rpc_unauthenticated", method=method,
                  peer=context.peer(), reason=reason)
        context.abort(grpc.StatusCode.UNAUTHENTICATED, reason)
        raise AssertionError("unreachable: abort raises")

    def _unary(self, fn: Callable, method: str) -> Callable:
        def handler(request: Any, context: grpc.ServicerContext) -> Any:
            token = auth.bind_identity(self._identify(context, method))
            try:
                return fn(request, context)
            finally:
                auth.unbind_identity(token)
        return handler

    def _stream(self, fn: Callable, method: str) -> Callable:
        def handler(request: Any, context: grpc.ServicerContext) -> Iterator[Any]:
            token = auth.bind_identity(self._identify(context, method))
            try:
                yield from fn(request, context)
            finally:
                auth.unbind_identity(token)
        return handler
