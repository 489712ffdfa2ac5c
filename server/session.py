"""Sessions: the in-process core of the service (no gRPC here).

A Session holds graphs; each graph compiles per input signature into a CompiledModel that
is loaded on the device once and cached. `graphengine.Session` is this class: embedded
users and the gRPC servicer call the same code.
"""

from __future__ import annotations

import collections
import itertools
import threading
import time
import uuid
from collections.abc import Mapping, Sequence

import numpy as np

from graphengine.engine.dtypes import DType
from graphengine.engine.errors import InvalidInput, NotFound, ResourceExhausted
from graphengine.engine.importers import load_model
from graphengine.engine.ir import Dim, Graph
from graphengine.engine.pipeline import analyze, compile_graph
from graphengine.engine.report import CompileReport
from graphengine.engine.runtime import LoadedModel, default_device

from .types import GraphInfo, SessionOptions, TensorInfo

__all__ = ["Session", "SessionManager", "SessionOptions", "GraphInfo", "TensorInfo"]

MAX_SIGNATURES = 8  # compiled signatures kept per graph (LRU)


class _GraphEntry:
    def __init__(self, graph_id: int, graph: Graph) -> None:
        self.graph_id = graph_id
        self.graph = graph
        self.lock = threading.Lock()  # one compile at a time per graph
        self.models: collections.OrderedDict[tuple, LoadedModel] = collections.OrderedDict()
        self.last_report: CompileReport | None = None

    @property
    def symbolic(self) -> bool:
        return any(v.meta is None or not v.meta.is_static for v in self.graph.inputs)


class Session:
    """A context for graphs and their loaded models; thread-safe."""

    def __init__(self, options: SessionOptions | Mapping | None = None, *, device=None,
                 session_id: str | None = None, owner: str | None = None) -> None:
        self.options = SessionOptions.coerce(options)
        self._compile_options = self.options.compile_options()
        self.id = session_id or uuid.uuid4().hex
        self.owner = owner
        self.device = device or default_device()
        self.created_at = time.time()
        self.last_used = time.monotonic()
        self._graphs: dict[int, _GraphEntry] = {}
        self._ids = itertools.count(1)
        self._lock = threading.RLock()
        self.closed = False

    # ---- graphs -----------------------------------------------------------------------
    def add_graph(self, model, name: str | None = None) -> int:
        """Import a graph (ONNX path/bytes/ModelProto, GraphDef, or IR Graph); returns its id.

        The graph is validated and its shapes inferred now, so a malformed graph is
        rejected here with the node that is wrong.
        """
        self._touch()
        graph = load_model(model, name=name)
        analyze(graph, self._compile_options)
        with self._lock:
            self._check_open()
            graph_id = next(self._ids)
            self._graphs[graph_id] = _GraphEntry(graph_id, graph)
        return graph_id

    def remove_graph(self, graph_id: int) -> None:
        self._touch()
        with self._lock:
            self._entry(graph_id)
            del self._graphs[graph_id]

    def graph_info(self, graph_id: int) -> GraphInfo:
        entry = self._entry(graph_id)
        g = entry.graph

        def infos(values) -> tuple[TensorInfo, ...]:
            return tuple(TensorInfo(v.name, v.meta.dtype if v.meta else DType.FLOAT32,
                                    v.meta.shape if v.meta else None) for v in values)

        return GraphInfo(graph_id, g.name, infos(g.inputs), infos(g.outputs), len(g.nodes),
                         bool(entry.models))

    def list_graphs(self) -> list[GraphInfo]:
        with self._lock:
            ids = list(self._graphs)
        return [self.graph_info(i) for i in ids]

    # ---- compile and run --------------------------------------------------------------
    def compile_graph(self, graph_id: int,
                      input_shapes: Mapping[str, Sequence[int]] | None = None) -> CompileReport:
        """Compile (and load) for the declared shapes, or for `input_shapes`.

        A graph with symbolic dims and no shapes given is validated now and compiled per
        concrete signature on first run.
        """
        self._touch()
        entry = self._entry(graph_id)
        if entry.symbolic and not input_shapes:
            report = analyze(entry.graph, self._compile_options)
            entry.last_report = report
            return report
        shapes = dict(input_shapes or {})
        for v in entry.graph.inputs:
            shapes.setdefault(v.name, v.meta.shape)
        return self._model_for(entry, shapes).compiled.report

    def run_graph(self, graph_id: int, inputs: Mapping[str, np.ndarray],
                  output_names: Sequence[str] | None = None) -> dict[str, np.ndarray]:
        self._touch()
        entry = self._entry(graph_id)
        shapes = {}
        for v in entry.graph.inputs:
            if v.name not in inputs:
                raise InvalidInput(f"missing input '{v.name}' (expected {v.meta})",
                                   graph=entry.graph.name, tensor=v.name)
            arr = inputs[v.name]
            shapes[v.name] = tuple(np.shape(arr))
        if not entry.symbolic:
            shapes = {v.name: v.meta.shape for v in entry.graph.inputs}
        model = self._model_for(entry, shapes)
        return model.execute(inputs, output_names)

    def _model_for(self, entry: _GraphEntry, shapes: Mapping[str, Sequence[Dim]]) -> LoadedModel:
        key = tuple(sorted((k, tuple(v)) for k, v in shapes.items()))
        with entry.lock:
            model = entry.models.get(key)
            if model is not None:
                entry.models.move_to_end(key)
                return model
            compiled = compile_graph(entry.graph, self._compile_options,
                                     input_shapes=shapes)
            self._admit(compiled.device_bytes, entry)
            model = LoadedModel(compiled, self.device)
            entry.models[key] = model
            entry.last_report = compiled.report
            while len(entry.models) > MAX_SIGNATURES:
                entry.models.popitem(last=False)
            return model

    def _admit(self, nbytes: int, entry: _GraphEntry) -> None:
        limit = self.options.memory_limit_bytes
        if limit <= 0:
            return
        used = self.device_bytes
        if used + nbytes > limit:
            raise ResourceExhausted(
                f"loading graph {entry.graph_id} ('{entry.graph.name}') needs {nbytes} bytes of "
                f"device memory; session '{self.id}' uses {used} of its {limit} byte limit, "
                f"{max(0, limit - used)} left", graph=entry.graph.name, stage="load")

    @property
    def device_bytes(self) -> int:
        with self._lock:
            entries = list(self._graphs.values())
        return sum(m.device_bytes for e in entries for m in list(e.models.values()))

    # ---- lifecycle --------------------------------------------------------------------
    def close(self) -> None:
        with self._lock:
            self.closed = True
            self._graphs.clear()  # frees every loaded model (and its device memory)

    def __enter__(self) -> Session:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _touch(self) -> None:
        self.last_used = time.monotonic()

    def _check_open(self) -> None:
        if self.closed:
            raise NotFound(f"session '{self.id}' is closed")

    def _entry(self, graph_id: int) -> _GraphEntry:
        with self._lock:
            self._check_open()
            entry = self._graphs.get(graph_id)
        if entry is None:
            raise NotFound(f"graph {graph_id} not found in session '{self.id}'")
        return entry


class SessionManager:
    """Creates, finds and closes sessions; a session is visible only to its owner."""

    def __init__(self, device=None, max_sessions: int = 0) -> None:
        self.device = device or default_device()
        self.max_sessions = max_sessions
        self._sessions: dict[str, Session] = {}
        self._lock = threading.Lock()

    def create(self, options=None, owner: str | None = None) -> Session:
        session = Session(options, device=self.device, owner=owner)
        with self._lock:
            if self.max_sessions and len(self._sessions) >= self.max_sessions:
                raise ResourceExhausted(f"the server holds its maximum of {self.max_sessions} "
                                        f"sessions; close one first")
            self._sessions[session.id] = session
        return session

    def get(self, session_id: str, owner: str | None = None) -> Session:
        with self._lock:
            session = self._sessions.get(session_id)
        if session is None or session.owner != owner:
            raise NotFound(f"session '{session_id}' not found")
        return session

    def close(self, session_id: str, owner: str | None = None) -> None:
        session = self.get(session_id, owner)
        with self._lock:
            self._sessions.pop(session_id, None)
        session.close()

    def list(self, owner: str | None = None) -> list[Session]:
        with self._lock:
            return [s for s in self._sessions.values() if s.owner == owner]

    def close_all(self) -> None:
        with self._lock:
            sessions = list(self._sessions.values())
            self._sessions.clear()
        for s in sessions:
            s.close()
