"""Conversions between the session service's proto messages and the core's domain types.

Used by the servicer (proto -> domain -> proto) and by the client SDK (the reverse), so
both sides of the wire agree by construction. Tensors and tensor descriptions go through
graphengine.engine.wire, the one codec for those.

It imports the engine's plain modules only (report, wire, ir, errors): the client SDK loads
it without the compiler, the runtime or anything of the server.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from graphengine.api.types import GraphInfo, SessionInfo, SessionOptions, TensorInfo
from graphengine.engine import report as rp
from graphengine.engine import wire
from graphengine.engine.errors import InvalidInput
from graphengine.engine.ir import TensorMeta
from graphengine.v1 import graph_pb2, session_pb2


# ---- compile report ------------------------------------------------------------------
def report_to_pb(report: rp.CompileReport) -> session_pb2.CompileReport:
    m = report.memory
    return session_pb2.CompileReport(
        graph=report.graph,
        passes=[session_pb2.PassRecord(stage=p.stage, name=p.name, seconds=p.seconds,
                                       changed=p.changed, detail=p.detail)
                for p in report.passes],
        partitions=[session_pb2.PartitionRecord(index=p.index, engine=p.engine,
                                                nodes=p.nodes, inputs=p.inputs,
                                                outputs=p.outputs)
                    for p in report.partitions],
        placements=[session_pb2.PlacementRecord(node=p.node, op_type=p.op_type,
                                                engine=p.engine, rejections=p.rejections)
                    for p in report.placements],
        fusions=report.fusions,
        memory=session_pb2.MemoryPlanRecord(arena_bytes=m.arena_bytes,
                                            lower_bound_bytes=m.lower_bound_bytes,
                                            weight_bytes=m.weight_bytes, strategy=m.strategy),
        streams=report.streams, events=report.events, tasks=report.tasks,
        nodes_before=report.nodes_before, nodes_after=report.nodes_after,
        total_seconds=report.total_seconds, flops=report.flops,
    )


def report_from_pb(msg: session_pb2.CompileReport) -> rp.CompileReport:
    m = msg.memory
    return rp.CompileReport(
        graph=msg.graph,
        passes=[rp.PassRecord(p.stage, p.name, p.seconds, p.changed, p.detail)
                for p in msg.passes],
        partitions=[rp.PartitionRecord(p.index, p.engine, list(p.nodes), list(p.inputs),
                                       list(p.outputs)) for p in msg.partitions],
        placements=[rp.PlacementRecord(p.node, p.op_type, p.engine, list(p.rejections))
                    for p in msg.placements],
        fusions=list(msg.fusions),
        memory=rp.MemoryRecord(m.arena_bytes, m.lower_bound_bytes, m.weight_bytes, m.strategy),
        streams=msg.streams, events=msg.events, tasks=msg.tasks,
        nodes_before=msg.nodes_before, nodes_after=msg.nodes_after,
        total_seconds=msg.total_seconds, flops=msg.flops,
    )


# ---- graph info ----------------------------------------------------------------------
def tensor_info_to_pb(info: TensorInfo) -> graph_pb2.TensorDesc:
    return wire.desc_to_pb(info.name, TensorMeta(info.dtype, info.shape))


def graph_info_to_pb(info: GraphInfo) -> session_pb2.GraphInfo:
    return session_pb2.GraphInfo(
        graph_id=info.graph_id, name=info.name,
        inputs=[tensor_info_to_pb(t) for t in info.inputs],
        outputs=[tensor_info_to_pb(t) for t in info.outputs],
        num_nodes=info.num_nodes, compiled=info.compiled,
        gears=list(getattr(info, "gears", ())),
        device_bytes=getattr(info, "device_bytes", 0),
        compiled_signatures=getattr(info, "compiled_signatures", 0),
    )


def tensor_info_from_pb(desc: graph_pb2.TensorDesc) -> TensorInfo:
    shape = None if desc.unknown_rank else wire.shape_from_pb(desc.shape)
    return TensorInfo(desc.name, wire.dtype_from_pb(desc.dtype, f"tensor '{desc.name}'"), shape)


def graph_info_from_pb(msg: session_pb2.GraphInfo) -> GraphInfo:
    return GraphInfo(graph_id=msg.graph_id, name=msg.name,
                     inputs=tuple(tensor_info_from_pb(t) for t in msg.inputs),
                     outputs=tuple(tensor_info_from_pb(t) for t in msg.outputs),
                     num_nodes=msg.num_nodes, compiled=msg.compiled, gears=tuple(msg.gears),
                     device_bytes=msg.device_bytes,
                     compiled_signatures=msg.compiled_signatures)


# ---- sessions ------------------------------------------------------------------------
def session_info_to_pb(info: SessionInfo) -> session_pb2.SessionInfo:
    return session_pb2.SessionInfo(
        session_id=info.session_id, options=session_options_to_pb(info.options),
        created_unix=info.created_at, idle_seconds=info.idle_seconds,
        graph_ids=list(info.graph_ids), device_bytes=info.device_bytes,
        active_runs=info.active_runs)


def session_info_from_pb(msg: session_pb2.SessionInfo) -> SessionInfo:
    return SessionInfo(session_id=msg.session_id,
                       options=session_options_from_pb(msg.options),
                       created_at=msg.created_unix, idle_seconds=msg.idle_seconds,
                       graph_ids=tuple(msg.graph_ids), device_bytes=msg.device_bytes,
                       active_runs=msg.active_runs)


# ---- session options -----------------------------------------------------------------
def session_options_from_pb(msg: session_pb2.SessionOptions) -> SessionOptions:
    if msg.max_streams < 0:
        raise InvalidInput(f"session option max_streams must be >= 0, got {msg.max_streams}")
    if msg.memory_limit_bytes < 0:
        raise InvalidInput("session option memory_limit_bytes must be >= 0, "
                           f"got {msg.memory_limit_bytes}")
    if msg.instances < 0:
        raise InvalidInput(f"session option instances must be >= 0, got {msg.instances}")
    kwargs: dict[str, Any] = {"memory_limit_bytes": msg.memory_limit_bytes,
                              "options": dict(msg.options), "precision": msg.precision}
    if msg.max_streams:  # 0 on the wire means "the server's default"
        kwargs["max_streams"] = msg.max_streams
    if msg.instances:
        kwargs["instances"] = msg.instances
    return SessionOptions(**kwargs)


def session_options_to_pb(options: Any) -> session_pb2.SessionOptions:
    """From None, a mapping with SessionOptions' keys, or a SessionOptions(-like) object."""
    if options is None:
        return session_pb2.SessionOptions()
    if isinstance(options, session_pb2.SessionOptions):
        return options
    if isinstance(options, Mapping):
        unknown = set(options) - {"max_streams", "memory_limit_bytes", "options", "precision",
                                  "instances"}
        if unknown:
            raise TypeError(f"unknown session option(s): {', '.join(sorted(unknown))}")
        get = options.get
    else:
        def get(key: str, default: Any = None) -> Any:
            return getattr(options, key, default)
    return session_pb2.SessionOptions(
        max_streams=int(get("max_streams", 0) or 0),
        memory_limit_bytes=int(get("memory_limit_bytes", 0) or 0),
        options={str(k): str(v) for k, v in dict(get("options", None) or {}).items()},
        precision=str(get("precision", "") or ""),
        instances=int(get("instances", 0) or 0),
    )


# ---- requests ------------------------------------------------------------------------
def input_shapes_from_pb(
        items: Iterable[session_pb2.InputShape]) -> dict[str, tuple[int, ...]] | None:
    shapes: dict[str, tuple[int, ...]] = {}
    for item in items:
        if item.name in shapes:
            raise InvalidInput(f"input shape for '{item.name}' is given twice",
                               tensor=item.name)
        if any(d < 0 for d in item.shape):
            raise InvalidInput(f"input shape for '{item.name}' has a negative dimension: "
                               f"{list(item.shape)}", tensor=item.name)
        shapes[item.name] = tuple(int(d) for d in item.shape)
    return shapes or None  # None: compile with the declared shapes


def input_shapes_to_pb(
        shapes: Mapping[str, Sequence[int]] | None) -> list[session_pb2.InputShape]:
    return [session_pb2.InputShape(name=k, shape=[int(d) for d in v])
            for k, v in (shapes or {}).items()]


def tensors_from_pb(tensors: Iterable[graph_pb2.Tensor],
                    max_elements: int | None = None) -> dict[str, np.ndarray]:
    arrays: dict[str, np.ndarray] = {}
    for t in tensors:
        if not t.name:
            raise InvalidInput("a tensor in the request has no name")
        if t.name in arrays:
            raise InvalidInput(f"tensor '{t.name}' is given twice", tensor=t.name)
        arrays[t.name] = wire.tensor_from_pb(t, max_elements)
    return arrays


def tensors_to_pb(arrays: Mapping[str, np.ndarray]) -> list[graph_pb2.Tensor]:
    return [wire.tensor_to_pb(name, np.asarray(a)) for name, a in arrays.items()]
