"""The graphengine.v1.GraphEngine servicer: proto -> domain types -> core -> proto.

Thin on purpose. Sessions, graphs, compilation and execution belong to the in-process
core (graphengine.server.core.session / .manager), which knows nothing of gRPC; errors are
domain exceptions that the ErrorInterceptor (graphengine.server.rpc.errors) maps to statuses,
so no method here touches a status code. The caller's identity (graphengine.server.rpc.auth)
owns the sessions it creates.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator
from concurrent.futures import Executor
from typing import Any

import grpc

from graphengine.api import convert
from graphengine.api.types import RunControl
from graphengine.engine.errors import InvalidInput, InvalidModel
from graphengine.v1 import session_pb2 as se
from graphengine.v1 import session_pb2_grpc

from ..core.replica import Replica
from ..lifecycle import Lifecycle
from ..logs import log_event
from ..timing import StageTimes, stage
from . import calls
from .streams import StreamRunner
from .variables import VariableMethods

_log = logging.getLogger("graphengine.server.rpc.servicer")

SERVICE_NAME = se.DESCRIPTOR.services_by_name["GraphEngine"].full_name


class GraphEngineServicer(VariableMethods, session_pb2_grpc.GraphEngineServicer):
    """Serves a SessionManager. `max_tensor_elements` bounds every decoded RunGraph input;
    streams run their items on `stream_executor`, at most `stream_max_inflight` at once;
    `max_message_bytes` is the largest message the server sends (GetVariables' bound)."""

    def __init__(self, session_manager: Any, *, max_tensor_elements: int | None = None,
                 stream_executor: Executor | None = None, stream_max_inflight: int = 32,
                 lifecycle: Lifecycle | None = None, metrics: Any = None,
                 replica: Replica | None = None, max_message_bytes: int = 256 << 20) -> None:
        self._sessions = session_manager
        self._replica = replica
        self._max_elements = max_tensor_elements
        self._max_message_bytes = max_message_bytes
        self._executor = stream_executor
        self._max_inflight = stream_max_inflight
        self._lifecycle = lifecycle or Lifecycle()
        self._metrics = metrics

    def _session(self, session_id: str) -> Any:
        if not session_id:
            raise InvalidInput("session_id is empty")
        return self._sessions.get(session_id, calls.identity())

    # ---- sessions ----------------------------------------------------------------------
    def CreateSession(self, request: se.CreateSessionRequest, context: Any
                      ) -> se.CreateSessionResponse:
        options = convert.session_options_from_pb(request.options)
        session = self._sessions.create(options, owner=calls.identity())
        log_event(_log, logging.INFO, "session_created", session=session.id,
                  identity=calls.identity() or "-")
        return se.CreateSessionResponse(session_id=session.id)

    def CloseSession(self, request: se.CloseSessionRequest, context: Any
                     ) -> se.CloseSessionResponse:
        if not request.session_id:
            raise InvalidInput("session_id is empty")
        self._sessions.close(request.session_id, calls.identity())
        log_event(_log, logging.INFO, "session_closed", session=request.session_id)
        return se.CloseSessionResponse()

    def ListSessions(self, request: se.ListSessionsRequest, context: Any
                     ) -> se.ListSessionsResponse:
        sessions = self._sessions.list(calls.identity())
        return se.ListSessionsResponse(
            sessions=[convert.session_info_to_pb(s.info()) for s in sessions])

    def GetServerInfo(self, request: se.GetServerInfoRequest, context: Any
                      ) -> se.GetServerInfoResponse:
        if self._replica is None:
            return se.GetServerInfoResponse()
        return se.GetServerInfoResponse(replica_id=self._replica.replica_id,
                                        address=self._replica.address)

    # ---- graphs ------------------------------------------------------------------------
    def AddGraph(self, request: se.AddGraphRequest, context: Any) -> se.AddGraphResponse:
        session = self._session(request.session_id)
        which = request.WhichOneof("model")
        if which == "graph":
            model: Any = request.graph
        elif which == "onnx_model":
            if not request.onnx_model:
                raise InvalidModel("onnx_model is empty")
            model = request.onnx_model
        else:
            raise InvalidInput("AddGraph needs a model: set either `graph` or `onnx_model`")
        extra = {"gears": list(request.gears)} if request.gears else {}
        graph_id = session.add_graph(model, name=request.name or None, **extra)
        info = session.graph_info(graph_id)
        log_event(_log, logging.INFO, "graph_added", session=session.id, graph_id=graph_id,
                  name=info.name, nodes=info.num_nodes, source=which)
        return se.AddGraphResponse(graph_id=graph_id, info=convert.graph_info_to_pb(info))

    def RemoveGraph(self, request: se.RemoveGraphRequest, context: Any
                    ) -> se.RemoveGraphResponse:
        self._session(request.session_id).remove_graph(request.graph_id)
        return se.RemoveGraphResponse()

    def CompileGraph(self, request: se.CompileGraphRequest, context: Any
                     ) -> se.CompileGraphResponse:
        session = self._session(request.session_id)
        shapes = convert.input_shapes_from_pb(request.input_shapes)
        report = session.compile_graph(request.graph_id, shapes)
        log_event(_log, logging.INFO, "graph_compiled", session=session.id,
                  graph_id=request.graph_id, ms=f"{report.total_seconds * 1e3:.1f}",
                  nodes_before=report.nodes_before, nodes_after=report.nodes_after)
        return se.CompileGraphResponse(report=convert.report_to_pb(report))

    def GetGraphInfo(self, request: se.GetGraphInfoRequest, context: Any
                     ) -> se.GetGraphInfoResponse:
        info = self._session(request.session_id).graph_info(request.graph_id)
        return se.GetGraphInfoResponse(info=convert.graph_info_to_pb(info))

    def ExportModel(self, request: se.ExportModelRequest, context: Any
                    ) -> se.ExportModelResponse:
        session = self._session(request.session_id)
        shapes = convert.input_shapes_from_pb(request.input_shapes)
        data = session.export_model(request.graph_id, shapes)
        log_event(_log, logging.INFO, "model_exported", session=session.id,
                  graph_id=request.graph_id, bytes=len(data))
        return se.ExportModelResponse(offline_model=data)

    def ImportModel(self, request: se.ImportModelRequest, context: Any
                    ) -> se.ImportModelResponse:
        session = self._session(request.session_id)
        if not request.offline_model:
            raise InvalidModel("offline_model is empty")
        graph_id = session.import_model(request.offline_model, name=request.name or None)
        info = session.graph_info(graph_id)
        log_event(_log, logging.INFO, "model_imported", session=session.id, graph_id=graph_id,
                  name=info.name, bytes=len(request.offline_model))
        return se.ImportModelResponse(graph_id=graph_id, info=convert.graph_info_to_pb(info))

    # ---- runs --------------------------------------------------------------------------
    def RunGraph(self, request: se.RunGraphRequest, context: Any) -> se.RunGraphResponse:
        return se.RunGraphResponse(
            outputs=self._run(request, calls.run_control(context), calls.times()))

    def _run(self, request: se.RunGraphRequest, control: RunControl,
             times: StageTimes | None) -> list:
        session = self._session(request.session_id)
        with stage(times, "input_copy"):
            inputs = convert.tensors_from_pb(request.inputs, self._max_elements)
        wanted = list(request.output_names)
        if len(set(wanted)) != len(wanted):
            raise InvalidInput(f"output_names has duplicates: {wanted}")
        outputs = session.run_graph(request.graph_id, inputs, wanted or None,
                                    iterations=max(1, request.iterations),
                                    return_all=request.return_all, control=control,
                                    times=times)
        # The core returns graph order by default; requested names come back as asked.
        names = wanted or list(outputs)
        missing = [n for n in names if n not in outputs]
        if missing:
            raise InvalidInput(f"graph {request.graph_id} produced no output named {missing}")
        with stage(times, "output_copy"):
            return convert.tensors_to_pb({n: outputs[n] for n in names})

    def RunGraphStream(self, request_iterator: Iterable[se.RunGraphRequest], context: Any
                       ) -> Iterator[se.RunGraphStreamResponse]:
        if self._executor is None:
            raise NotImplementedError("this server runs no stream executor")
        control = calls.run_control(context)

        def handle(request: se.RunGraphRequest, times: StageTimes) -> se.RunGraphStreamResponse:
            return se.RunGraphStreamResponse(request_id=request.request_id,
                                             outputs=self._run(request, control, times))

        def error_item(request: se.RunGraphRequest | None, status: grpc.StatusCode,
                       message: str) -> se.RunGraphStreamResponse:
            return se.RunGraphStreamResponse(
                request_id=request.request_id if request is not None else "",
                error=se.RunError(code=status.name, message=message))

        runner = StreamRunner(method=f"/{SERVICE_NAME}/RunGraphStream", executor=self._executor,
                              max_inflight=self._max_inflight, lifecycle=self._lifecycle,
                              handle=handle, error_item=error_item,
                              observe=self._metrics.observe_request if self._metrics else None)
        yield from runner.serve(request_iterator, context)
