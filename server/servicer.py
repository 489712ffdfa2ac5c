"""The graphengine.v1.GraphEngine servicer: proto -> domain types -> core -> proto.

Thin on purpose. Sessions, graphs, compilation and execution belong to the in-process
core (graphengine.server.session), which knows nothing of gRPC; errors are domain
exceptions that the ErrorInterceptor (graphengine.server.errors) maps to statuses, so no
method here touches a status code.
"""

from __future__ import annotations

import logging
from typing import Any

from graphengine.engine.errors import InvalidInput, InvalidModel
from graphengine.v1 import session_pb2 as se
from graphengine.v1 import session_pb2_grpc

from . import convert
from .logs import log_event

_log = logging.getLogger("graphengine.server.servicer")

SERVICE_NAME = se.DESCRIPTOR.services_by_name["GraphEngine"].full_name


class GraphEngineServicer(session_pb2_grpc.GraphEngineServicer):
    """Serves a SessionManager. `max_tensor_elements` bounds every decoded RunGraph input."""

    def __init__(self, session_manager: Any, *, max_tensor_elements: int | None = None) -> None:
        self._sessions = session_manager
        self._max_elements = max_tensor_elements

    def _session(self, session_id: str) -> Any:
        if not session_id:
            raise InvalidInput("session_id is empty")
        return self._sessions.get(session_id)

    def CreateSession(self, request: se.CreateSessionRequest, context: Any
                      ) -> se.CreateSessionResponse:
        options = convert.session_options_from_pb(request.options)
        session = self._sessions.create(options)
        log_event(_log, logging.INFO, "session_created", session=session.id)
        return se.CreateSessionResponse(session_id=session.id)

    def CloseSession(self, request: se.CloseSessionRequest, context: Any
                     ) -> se.CloseSessionResponse:
        if not request.session_id:
            raise InvalidInput("session_id is empty")
        self._sessions.close(request.session_id)
        log_event(_log, logging.INFO, "session_closed", session=request.session_id)
        return se.CloseSessionResponse()

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
        graph_id = session.add_graph(model, name=request.name or None)
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

    def RunGraph(self, request: se.RunGraphRequest, context: Any) -> se.RunGraphResponse:
        session = self._session(request.session_id)
        inputs = convert.tensors_from_pb(request.inputs, self._max_elements)
        wanted = list(request.output_names)
        if len(set(wanted)) != len(wanted):
            raise InvalidInput(f"output_names has duplicates: {wanted}")
        outputs = session.run_graph(request.graph_id, inputs, wanted or None)
        # The core returns graph order by default; requested names come back as asked.
        names = wanted or list(outputs)
        missing = [n for n in names if n not in outputs]
        if missing:
            raise InvalidInput(f"graph {request.graph_id} produced no output named {missing}")
        return se.RunGraphResponse(
            outputs=convert.tensors_to_pb({n: outputs[n] for n in names}))

    def GetGraphInfo(self, request: se.GetGraphInfoRequest, context: Any
                     ) -> se.GetGraphInfoResponse:
        info = self._session(request.session_id).graph_info(request.graph_id)
        return se.GetGraphInfoResponse(info=convert.graph_info_to_pb(info))
