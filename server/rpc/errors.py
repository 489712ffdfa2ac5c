"""The one place where exceptions become gRPC statuses.

Servicers raise domain exceptions (graphengine.engine.errors) and never touch status
codes; `ErrorInterceptor` wraps every RPC handler of the server and turns:

- a `GraphEngineError` into the status named by its `ErrorCode` (the names are the gRPC
  status names), with the exception's message as details and its kind and context (graph,
  node, tensor, stage) as the standard google.rpc.Status details the client SDK reads back;
- a few built-in exceptions with an unambiguous meaning into their status (table below);
- anything else into INTERNAL with a short message, after logging the method name and
  the traceback, since it is a bug in the server rather than a fault of the request.

Requests are decoded here too, inside the handler rather than by gRPC, so that bytes that
are not the method's message get INVALID_ARGUMENT with the message type's name instead of
gRPC's generic INTERNAL. `describe` is the same mapping for a failure that does not end
the RPC (one run inside a stream).

An RPC a handler has already aborted with `context.abort()` passes through untouched.
"""

from __future__ import annotations

import concurrent.futures
import logging
import time
import uuid
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import grpc
from google.protobuf import any_pb2
from google.protobuf.message import DecodeError
from google.rpc import error_details_pb2, status_pb2

from graphengine.engine.errors import (
    NAME_CHARS,
    ErrorCode,
    GraphEngineError,
    InvalidInput,
    bounded_text,
    decode_problem,
)
from graphengine.errors import CONTEXT, DOMAIN

from ..logs import log_event

_log = logging.getLogger("graphengine.server.rpc")

STATUS_BY_CODE: dict[ErrorCode, grpc.StatusCode] = {c: grpc.StatusCode[c.name] for c in ErrorCode}

# Built-in exceptions whose meaning does not depend on where they were raised.
_BUILTIN_STATUS: tuple[tuple[type[BaseException], grpc.StatusCode], ...] = (
    (NotImplementedError, grpc.StatusCode.UNIMPLEMENTED),
    (MemoryError, grpc.StatusCode.RESOURCE_EXHAUSTED),
    # Waiting work stopped because the client cancelled or its deadline passed.
    (concurrent.futures.CancelledError, grpc.StatusCode.CANCELLED),
    (TimeoutError, grpc.StatusCode.DEADLINE_EXCEEDED),
)

# An error's kind and context travel as the standard google.rpc.Status details, in the
# trailer gRPC defines for them: one google.rpc.ErrorInfo (reason: the kind, domain:
# "graphengine", metadata: graph, node, tensor, stage), so clients in any language decode
# them with their gRPC library alone (graphengine.errors).
STATUS_DETAILS = "grpc-status-details-bin"


def status_for(exc: BaseException) -> grpc.StatusCode | None:
    """The status an exception maps to, or None for an unexpected (internal) one."""
    if isinstance(exc, GraphEngineError):
        return STATUS_BY_CODE[exc.code]
    for kind, status in _BUILTIN_STATUS:
        if isinstance(exc, kind):
            return status
    return None


# The status message travels in gRPC's trailers twice (8 KiB by default): as grpc-message
# (non-ASCII bytes percent-encoded, 3 bytes each) and inside the google.rpc.Status details
# (base64'd with the context), so a longer one would turn any error into an unrelated
# RESOURCE_EXHAUSTED: the message is held to MESSAGE_CHARS characters and MESSAGE_BYTES
# bytes of UTF-8, each context value to META_BYTES: at most 3 * 1000 + 4/3 * (1000 + 4 * 256
# + ~100) = ~5.8 KB on the wire (1500 bytes left 7.8 KB once the details carried it too).
MESSAGE_CHARS = 1000
MESSAGE_BYTES = 1000
META_BYTES = 256


def _fit(text: str, chars: int, max_bytes: int) -> str:
    """At most `chars` characters and `max_bytes` bytes of UTF-8, cut in the middle (the end
    of a message says what went wrong, its start where)."""
    out = bounded_text(text, chars)
    while len(out.encode("utf-8")) > max_bytes and chars > 16:
        chars = chars * max_bytes // len(out.encode("utf-8")) - 1
        out = bounded_text(text, chars)
    return out


def status_details(exc: BaseException, status: grpc.StatusCode, message: str) -> bytes:
    """The serialized google.rpc.Status for a domain error: its code and message as sent,
    with one ErrorInfo naming its kind and context (each value cut to META_BYTES)."""
    info = error_details_pb2.ErrorInfo(reason=getattr(exc, "error_type", type(exc).__name__),
                                       domain=DOMAIN)
    for key in CONTEXT:
        value = getattr(exc, key, None)
        if value:
            info.metadata[key] = _fit(value, NAME_CHARS, META_BYTES)
    detail = any_pb2.Any()
    detail.Pack(info)
    return status_pb2.Status(code=status.value[0], message=message,
                             details=[detail]).SerializeToString()


def _already_aborted(context: grpc.ServicerContext) -> bool:
    code = context.code()
    return code is not None and code != grpc.StatusCode.OK


def describe(exc: BaseException, method: str) -> tuple[grpc.StatusCode, str]:
    """The status and message a client gets for `exc`; logs it (with the traceback when
    it is internal, under a reference the message quotes)."""
    status = status_for(exc)
    if status is None:
        # A correlation id ties the client's short message to the full traceback here.
        ref = uuid.uuid4().hex[:12]
        log_event(_log, logging.ERROR, "rpc_internal_error", exc_info=exc, method=method,
                  ref=ref, type=type(exc).__name__)
        return grpc.StatusCode.INTERNAL, (f"internal error in {method.rsplit('/', 1)[-1]} "
                                          f"({type(exc).__name__}; server log ref {ref})")
    message = _fit(str(exc) or type(exc).__name__, MESSAGE_CHARS, MESSAGE_BYTES)
    log_event(_log, logging.INFO, "rpc_error", method=method, code=status.name,
              error=type(exc).__name__, message=message)
    return status, message


def abort_for(exc: Exception, context: grpc.ServicerContext, method: str) -> None:
    """Fail the RPC for `exc`; always raises (that is how gRPC aborts a handler)."""
    if _already_aborted(context):
        raise exc
    status, message = failure_for(exc, context, method)
    context.abort(status, message)


def failure_for(exc: Exception, context: grpc.ServicerContext, method: str
                ) -> tuple[grpc.StatusCode, str]:
    """The status and message to abort with; sets the error's context as trailing metadata.

    The wrappers below abort *after* their `except` block: aborting inside it would chain
    the exception, whose traceback holds the handler's frames (and through them the
    session core) in a reference cycle that only the garbage collector can break.
    """
    status, message = describe(exc, method)
    if status_for(exc) is not None:
        context.set_trailing_metadata(((STATUS_DETAILS, status_details(exc, status, message)),))
    return status, message


def _decoder(deserializer: Callable[[bytes], Any] | None) -> Callable[[bytes], Any]:
    if deserializer is None:
        return lambda data: data
    owner = getattr(deserializer, "__self__", None)
    descriptor = getattr(owner, "DESCRIPTOR", None)
    what = descriptor.full_name if descriptor is not None else "request"

    def decode(data: bytes) -> Any:
        try:
            return deserializer(data)
        except (DecodeError, ValueError, TypeError) as exc:
            raise InvalidInput(decode_problem(f"malformed request: {len(data)} bytes that are "
                                              f"not a valid {what} message", f"the {what} "
                                              f"request", exc, data)) from None
    return decode


def _decoding(requests: Iterable[bytes], decode: Callable[[bytes], Any]) -> Iterator[Any]:
    for data in requests:
        yield decode(data)


def _wrap_unary_response(fn: Callable, method: str, decode: Callable[[Any], Any]) -> Callable:
    def handler(request_or_iterator: Any, context: grpc.ServicerContext) -> Any:
        start = time.perf_counter()
        try:
            response = fn(decode(request_or_iterator), context)
        except Exception as exc:
            if _already_aborted(context):
                raise
            failure = failure_for(exc, context, method)
        else:
            log_event(_log, logging.DEBUG, "rpc", method=method, code="OK",
                      ms=f"{(time.perf_counter() - start) * 1e3:.2f}")
            return response
        context.abort(*failure)
    return handler


def _wrap_stream_response(fn: Callable, method: str, decode: Callable[[Any], Any]) -> Callable:
    def handler(request_or_iterator: Any, context: grpc.ServicerContext) -> Iterator[Any]:
        try:
            yield from fn(decode(request_or_iterator), context)
            return
        except Exception as exc:
            if _already_aborted(context):
                raise
            failure = failure_for(exc, context, method)
        context.abort(*failure)
    return handler


class ErrorInterceptor(grpc.ServerInterceptor):
    """Applies the mapping above to every method of every service on the server."""

    def intercept_service(self, continuation: Callable, handler_call_details: Any) -> Any:
        handler = continuation(handler_call_details)
        if handler is None:
            return None
        method = handler_call_details.method
        # Rebuilt through grpc's public factories rather than namedtuple internals. gRPC
        # hands the handler raw bytes; the wrapper decodes them (see the module docstring).
        decode_one = _decoder(handler.request_deserializer)

        def decode_many(requests: Iterable[bytes]) -> Iterator[Any]:
            return _decoding(requests, decode_one)

        codec = {"request_deserializer": None,
                 "response_serializer": handler.response_serializer}
        if handler.unary_unary is not None:
            return grpc.unary_unary_rpc_method_handler(
                _wrap_unary_response(handler.unary_unary, method, decode_one), **codec)
        if handler.stream_unary is not None:
            return grpc.stream_unary_rpc_method_handler(
                _wrap_unary_response(handler.stream_unary, method, decode_many), **codec)
        if handler.unary_stream is not None:
            return grpc.unary_stream_rpc_method_handler(
                _wrap_stream_response(handler.unary_stream, method, decode_one), **codec)
        if handler.stream_stream is not None:
            return grpc.stream_stream_rpc_method_handler(
                _wrap_stream_response(handler.stream_stream, method, decode_many), **codec)
        return handler
