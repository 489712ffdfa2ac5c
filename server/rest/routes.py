"""The KServe v2 HTTP/REST endpoints (Triton's HTTP API): a table of routes over the gRPC
KServe servicer.

Each endpoint builds the KServe message the gRPC method takes, calls the same servicer
method (graphengine.server.rpc.kserve_servicer) and writes its answer as JSON, so both
protocols share one model repository, one inference path (decoding bounds, batching,
statistics) and one set of error messages. Health (`/v2/health/*`) is answered here
without admission, authentication or metrics, as gRPC health checking is.

Errors are domain exceptions mapped to HTTP statuses in one table (`HTTP_STATUS`, the
mapping google.rpc.Code documents, but RESOURCE_EXHAUSTED -> 413: this server raises it
only for a request too big for it, never for a rate); the body is `{"error": "..."}`.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Mapping
from typing import Any
from urllib.parse import unquote

from graphengine.engine.errors import InvalidInput, NotFound, bounded_text
from graphengine.kserve.v2 import grpc_service_pb2 as pb

from ..core.served_model import ServedModel
from ..rpc.kserve_servicer import InferenceServicer
from ..timing import StageTimes
from . import tensors

JSON = "application/json"
BINARY = "application/octet-stream"

# gRPC status name -> HTTP status.
HTTP_STATUS: dict[str, int] = {
    "OK": 200, "CANCELLED": 499, "UNKNOWN": 500, "INVALID_ARGUMENT": 400,
    "DEADLINE_EXCEEDED": 504, "NOT_FOUND": 404, "ALREADY_EXISTS": 409,
    "PERMISSION_DENIED": 403, "UNAUTHENTICATED": 401, "RESOURCE_EXHAUSTED": 413,
    "FAILED_PRECONDITION": 400, "ABORTED": 409, "OUT_OF_RANGE": 400, "UNIMPLEMENTED": 501,
    "INTERNAL": 500, "UNAVAILABLE": 503, "DATA_LOSS": 500,
}


class HttpError(Exception):
    """A failure of the HTTP exchange itself (the route, a header, the body's size): its
    status, message, the gRPC status name it counts under, and whether the connection must
    close (a body left unread would be taken for the next request)."""

    def __init__(self, status: int, message: str, code: str, *, close: bool = False,
                 headers: tuple[tuple[str, str], ...] = ()) -> None:
        super().__init__(message)
        self.status, self.message, self.code = status, message, code
        self.close, self.headers = close, headers


@dataclasses.dataclass(frozen=True)
class Request:
    params: Mapping[str, str]  # name, version: from the path, unquoted
    body: memoryview
    headers: Any  # email.message.Message: case-insensitive get()
    times: StageTimes | None


@dataclasses.dataclass
class Response:
    status: int = 200
    parts: list[bytes | memoryview] = dataclasses.field(default_factory=list)
    content_type: str = JSON
    headers: list[tuple[str, str]] = dataclasses.field(default_factory=list)
    compressible: bool = False  # an infer response: gzip/deflate when the client accepts it


def json_response(value: Any, status: int = 200) -> Response:
    return Response(status, [tensors.dumps(value)])


def error_response(status: int, message: str,
                   headers: tuple[tuple[str, str], ...] = ()) -> Response:
    return Response(status, [tensors.dumps({"error": message})], headers=list(headers))


class Endpoints:
    """The handlers; each takes a Request and returns a Response or raises."""

    def __init__(self, inference: InferenceServicer, repository: Any,
                 ready: Callable[[], bool], ready_reason: Callable[[], str]) -> None:
        self._kserve = inference
        self._repo = repository
        self._ready = ready
        self._ready_reason = ready_reason

    # ---- health (no admission, no authentication) --------------------------------------
    def live(self, req: Request) -> Response:
        return Response()

    def ready(self, req: Request) -> Response:
        if self._ready():
            return Response()
        return error_response(503, f"the server is not ready: {self._ready_reason()}")

    # ---- metadata --------------------------------------------------------------------
    def server_metadata(self, req: Request) -> Response:
        return json_response(tensors.proto_json(
            self._kserve.ServerMetadata(pb.ServerMetadataRequest(), None)))

    def model_ready(self, req: Request) -> Response:
        self._model(req)  # NotFound (404) or Unavailable with the model's state (503)
        return Response()

    def model_metadata(self, req: Request) -> Response:
        return json_response(tensors.proto_json(self._kserve.ModelMetadata(
            pb.ModelMetadataRequest(name=req.params["name"], version=req.params["version"]),
            None)))

    def model_config(self, req: Request) -> Response:
        # Triton's HTTP API answers the ModelConfig itself, gRPC wraps it in a response.
        return json_response(tensors.proto_json(self._kserve.ModelConfig(
            pb.ModelConfigRequest(name=req.params["name"], version=req.params["version"]),
            None).config))

    def statistics(self, req: Request) -> Response:
        return json_response(tensors.proto_json(self._kserve.ModelStatistics(
            pb.ModelStatisticsRequest(name=req.params.get("name", ""),
                                      version=req.params.get("version", "")), None)))

    def _model(self, req: Request) -> ServedModel:
        name = req.params["name"]
        if self._repo is None:
            raise NotFound(f"model '{name}' is not served: the server has no model repository")
        return self._repo.get(name, req.params["version"])

    # ---- inference -------------------------------------------------------------------
    def infer(self, req: Request) -> Response:
        call = tensors.parse_infer(req.params["name"], req.params["version"], req.body,
                                   req.headers.get(tensors.HEADER_LENGTH))

        def encode(model: ServedModel, outputs: Mapping[str, Any], names: Any) -> Response:
            header, parts = tensors.encode_outputs(call, model.name, model.version, outputs,
                                                   names)
            if not parts:
                return Response(parts=[header], compressible=True)
            return Response(parts=[header, *parts], content_type=BINARY, compressible=True,
                            headers=[(tensors.HEADER_LENGTH, str(len(header)))])

        return self._kserve.infer(call.request, None, req.times, raw=call.raw, encode=encode)

    # ---- the model repository extension ----------------------------------------------
    def repository_index(self, req: Request) -> Response:
        doc = _body_object(req.body, "the repository index request")
        ready = doc.get("ready", False)
        if not isinstance(ready, bool):
            raise InvalidInput("the repository index request: 'ready' must be a boolean")
        index = self._kserve.RepositoryIndex(pb.RepositoryIndexRequest(ready=ready), None)
        return json_response([tensors.proto_json(m) for m in index.models])

    def load(self, req: Request) -> Response:
        doc = _body_object(req.body, "the load request")
        params = doc.get("parameters", {})
        if not isinstance(params, dict):
            raise InvalidInput("the load request: 'parameters' must be an object")
        request = pb.RepositoryModelLoadRequest(model_name=req.params["name"])
        for key, value in params.items():
            if key == "config" and not isinstance(value, str):
                raise InvalidInput("the load request: parameter 'config' must be a string "
                                   "(the model's configuration as JSON or YAML)")
            # Every parameter travels, so that the servicer names any it does not support.
            request.parameters[key].string_param = value if isinstance(value, str) else ""
        self._kserve.RepositoryModelLoad(request, None)
        return Response()

    def unload(self, req: Request) -> Response:
        _body_object(req.body, "the unload request")  # unload_dependents: no ensembles here
        self._kserve.RepositoryModelUnload(
            pb.RepositoryModelUnloadRequest(model_name=req.params["name"]), None)
        return Response()


def _body_object(body: memoryview, what: str) -> dict:
    if not len(body):
        return {}
    doc = tensors.loads(body, what)
    if not isinstance(doc, dict):
        raise InvalidInput(f"{what} must be a JSON object")
    return doc


@dataclasses.dataclass(frozen=True)
class Route:
    method: str
    pattern: re.Pattern[str]
    handler: Callable[[Endpoints, Request], Response]
    api: str | None  # the operation's name in metrics and logs; None: a health check


_MODEL = r"/v2/models/(?P<name>[^/]+)(?:/versions/(?P<version>[^/]+))?"


def _route(method: str, path: str, handler: Callable[[Endpoints, Request], Response],
           api: str | None) -> Route:
    return Route(method, re.compile(path), handler, api)


# First match wins: /v2/models/stats is the statistics of every model, not a model "stats".
ROUTES: tuple[Route, ...] = (
    _route("GET", r"/v2/health/live", Endpoints.live, None),
    _route("GET", r"/v2/health/ready", Endpoints.ready, None),
    _route("GET", r"/v2", Endpoints.server_metadata, "ServerMetadata"),
    _route("GET", r"/v2/models/stats", Endpoints.statistics, "ModelStatistics"),
    _route("GET", _MODEL, Endpoints.model_metadata, "ModelMetadata"),
    _route("GET", _MODEL + "/ready", Endpoints.model_ready, "ModelReady"),
    _route("GET", _MODEL + "/config", Endpoints.model_config, "ModelConfig"),
    _route("GET", _MODEL + "/stats", Endpoints.statistics, "ModelStatistics"),
    _route("POST", _MODEL + "/infer", Endpoints.infer, "ModelInfer"),
    _route("POST", r"/v2/repository/index", Endpoints.repository_index, "RepositoryIndex"),
    _route("POST", r"/v2/repository/models/(?P<name>[^/]+)/load", Endpoints.load,
           "RepositoryModelLoad"),
    _route("POST", r"/v2/repository/models/(?P<name>[^/]+)/unload", Endpoints.unload,
           "RepositoryModelUnload"),
)


def match(method: str, path: str) -> tuple[Route, dict[str, str]]:
    """The route of `method path` and its parameters (unquoted); HttpError 404 for a path
    no route has, 405 (with Allow) for a method the path's routes do not take."""
    allowed = []
    for route in ROUTES:
        found = route.pattern.fullmatch(path)
        if found is None:
            continue
        if route.method != method:
            allowed.append(route.method)
            continue
        params = {k: unquote(v or "", errors="strict") for k, v in found.groupdict().items()}
        return route, params
    shown = bounded_text(path, 200)
    if allowed:
        raise HttpError(405, f"{method} is not allowed on {shown}; use {', '.join(allowed)}",
                        "UNIMPLEMENTED", headers=(("Allow", ", ".join(allowed)),))
    raise HttpError(404, f"no KServe v2 endpoint at {shown}", "NOT_FOUND")
