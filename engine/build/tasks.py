"""Task generation: lay each device partition out in memory and emit its tasks."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from .. import ops
from ..errors import InvalidGraph
from ..ir import Engine, Graph, Node, Value
from ..model import DeviceProgram, HostProgram, HostStep, Program, Task, TensorSlot
from ..partition import Partition, collect_partitions
from ..report import MemoryRecord
from .memory import Buffer, align, plan_memory


def build_programs(graph: Graph) -> tuple[list[Program], MemoryRecord, int]:
    """Compile every partition; returns the programs, the memory summary and task count."""
    programs: list[Program] = []
    memory = MemoryRecord(strategy="")
    tasks = 0
    for part in collect_partitions(graph):
        if part.engine is Engine.DEVICE:
            prog, plan_bound, strategy = _build_device(graph, part)
            memory.arena_bytes += prog.arena_bytes
            memory.lower_bound_bytes += plan_bound
            memory.weight_bytes += int(prog.weights.nbytes)
            memory.strategy = strategy
            tasks += len(prog.tasks)
            programs.append(prog)
        else:
            programs.append(_build_host(part))
            tasks += len(part.nodes)
    return programs, memory, tasks


def _build_host(part: Partition) -> HostProgram:
    steps, constants = [], {}
    for node in part.nodes:
        schema = ops.get(node.op_type, node)
        for v in node.inputs:
            if v is not None and v.is_constant:
                constants[v.name] = v.const
        steps.append(HostStep(node.name, node.op_type, schema.attrs_of(node),
                              [v.name if v is not None else None for v in node.inputs],
                              [o.name for o in node.outputs]))
    return HostProgram(part.index, steps, constants, [v.name for v in part.inputs],
                       [v.name for v in part.outputs])


class _Layout:
    """Assigns tensor slots: activations share storages (views alias), weights pack."""

    def __init__(self) -> None:
        self.slots: list[TensorSlot] = []
        self.index: dict[Value, int] = {}
        self.storage: dict[Value, int] = {}  # value -> storage id (activations only)
        self.storage_size: list[int] = []
        self.weights: list[np.ndarray] = []
        self.weight_bytes = 0

    def weight(self, v: Value) -> int:
        if v not in self.index:
            arr = np.asarray(v.const, order="C")  # keeps 0-d scalars 0-d
            self.index[v] = len(self.slots)
            self.slots.append(TensorSlot(v.name, arr.dtype.name, list(arr.shape), "weight",
                                         self.weight_bytes))
            raw = arr.reshape(-1).view(np.uint8)
            pad = align(raw.nbytes) - raw.nbytes
            self.weights.append(raw)
            if pad:
                self.weights.append(np.zeros(pad, np.uint8))
            self.weight_bytes += raw.nbytes + pad
        return self.index[v]

    def activation(self, v: Value, alias_of: Value | None = None) -> int:
        if v not in self.index:
            if v.meta is None or not v.meta.is_static:
                raise InvalidGraph(f"tensor '{v.name}' has no static shape at build time",
                                   tensor=v.name)
            if alias_of is not None:
                self.storage[v] = self.storage[alias_of]
            else:
                self.storage[v] = len(self.storage_size)
                self.storage_size.append(v.meta.nbytes)
            self.index[v] = len(self.slots)
            self.slots.append(TensorSlot(v.name, v.meta.dtype.value, list(v.meta.shape),
                                         "arena", -1))
        return self.index[v]

    def blob(self) -> np.ndarray:
        return np.concatenate(self.weights) if self.weights else np.zeros(0, np.uint8)


def _kernel_task(node: Node, layout: _Layout, ins: Sequence[int], outs: Sequence[int]) -> Task:
    schema = ops.get(node.op_type, node)
    kernel = schema.device(node, schema.attrs_of(node))
    if isinstance(kernel, str):
        raise InvalidGraph(f"node '{node.name}' ({node.op_type}) was placed on the device but "
                           f"its lowering declines: {kernel}", node=node.name)
    attrs = dict(kernel.attrs)
    inputs = [ins[i] if i >= 0 else -1 for i in kernel.inputs]
    # Fused epilogues (see optimize/fusion.py) travel as "_"-prefixed node attributes.
    if node.attrs.get("_has_bias"):
        attrs["has_bias"] = 1
        inputs.append(ins[2])
    for key in ("_activation", "_activation_alpha", "_activation_beta"):
        if key in node.attrs:
            attrs[key[1:]] = node.attrs[key]
    if node.attrs.get("_sum"):
        attrs["sum"] = 1
        inputs.append(ins[node.attrs["_sum_input"]])
    return Task("kernel", node.name, 0, kernel.op, inputs, list(outs), attrs)


def _build_device(graph: Graph, part: Partition) -> tuple[DeviceProgram, int, str]:
    layout = _Layout()
    for v in part.inputs:
        layout.activation(v)
    tasks: list[Task] = []
    first: dict[int, int] = {layout.storage[v]: 0 for v in part.inputs}
    last: dict[int, int] = dict(first)
    for step, node in enumerate(part.nodes, start=1):
        ins = []
        for v in node.inputs:
            if v is None:
                ins.append(-1)
            elif v.is_constant:
                ins.append(layout.weight(v))
            else:
                ins.append(layout.activation(v))
                last[layout.storage[v]] = step
        schema = ops.get(node.op_type, node)
        src = node.input(schema.alias[0]) if 0 in schema.alias else None
        view = src is not None and not src.is_constant and len(node.outputs) >= 1
        outs = []
        for i, out in enumerate(node.outputs):
            outs.append(layout.activation(out, alias_of=src if view and i == 0 else None))
            sid = layout.storage[out]
            first.setdefault(sid, step)
            last[sid] = max(last.get(sid, step), step)
        if view:
            continue  # the output is the input's bytes under another shape: no task
        if 0 in schema.alias:
            tasks.append(Task("copy", node.name, 0, "", ins[:1], outs[:1], {}))
        else:
            tasks.append(_kernel_task(node, layout, ins, outs))
    end = len(part.nodes) + 1
    for v in part.outputs:
        last[layout.storage[v]] = end  # live until copied out
    buffers = [Buffer(sid, layout.storage_size[sid], first.get(sid, 0), last.get(sid, 0))
               for sid in range(len(layout.storage_size))]
    plan = plan_memory(buffers)
    for v, idx in layout.index.items():
        if layout.slots[idx].region == "arena":
            layout.slots[idx].offset = plan.offsets[layout.storage[v]]
    prog = DeviceProgram(
        index=part.index, tensors=layout.slots, weights=layout.blob(),
        arena_bytes=plan.arena_bytes, num_streams=1, num_events=0, tasks=tasks,
        inputs=[layout.index[v] for v in part.inputs],
        outputs=[layout.index[v] for v in part.outputs])
    return prog, plan.lower_bound, plan.strategy
