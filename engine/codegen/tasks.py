"""Task generation: lay each device partition out in memory and emit its tasks."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence

import numpy as np

from .. import ops
from ..errors import InvalidGraph
from ..flops import node_flops
from ..importers.onnx_wire import weight_buffer_of
from ..ir import Engine, Graph, Node, Value
from ..model import CompiledModel, DeviceProgram, HostProgram, HostStep, Program, Task, TensorSlot
from ..ops.variables import VARIABLE, WRITES
from ..optimize.layout import storage_nbytes
from ..partition import Partition, collect_partitions
from ..report import MemoryRecord
from ..target import Target
from ..target import get as get_target
from .control import CONTROL_OPS, NotOnDevice, expand_control, plan_control
from .memory import ALIGN, align, plan_storages
from .streams import START, assign_streams


def build_programs(graph: Graph, max_streams: int = 1, target: Target | None = None,
                   compile_bodies: Callable[[Node], dict[str, CompiledModel]] | None = None,
                   pin_inputs: bool = False) -> tuple[list[Program], MemoryRecord, int]:
    """Compile every partition for `target` (default: the host); returns the programs, the
    memory summary and task count. `compile_bodies(node)` gives a host control-flow node's
    bodies compiled as models of their own (the pipeline's, for the same options).
    `pin_inputs`: every device program's inputs stay live to its end (a control-flow body
    expanded into an enclosing program, codegen/control.py: its inputs must hold across
    iterations, and whatever lies in their bytes is a view of them)."""
    target = target or get_target()
    programs: list[Program] = []
    memory = MemoryRecord(strategy="")
    tasks = 0
    bound = variable_bindings(graph)
    for part in collect_partitions(graph):
        if part.engine is Engine.DEVICE:
            prog, plan_bound, strategy = _build_device(graph, part, max_streams,
                                                       target.max_weight_segments, bound,
                                                       pin_inputs)
            memory.arena_bytes += prog.arena_bytes
            memory.lower_bound_bytes += plan_bound
            memory.weight_bytes += prog.weight_bytes
            memory.strategy = strategy
            tasks += len(prog.tasks)
            programs.append(prog)
        else:
            programs.append(_build_host(part, compile_bodies))
            tasks += len(part.nodes)
    return programs, memory, tasks


def _build_host(part: Partition,
                compile_bodies: Callable[[Node], dict[str, CompiledModel]] | None
                ) -> HostProgram:
    steps, constants = [], {}
    for node in part.nodes:
        schema = ops.get(node.op_type, node)
        for v in node.inputs:
            if v is not None and v.is_constant:
                constants[v.name] = v.const
        steps.append(HostStep(node.name, node.op_type, schema.attrs_of(node),
                              [v.name if v is not None else None for v in node.inputs],
                              [o.name for o in node.outputs],
                              compile_bodies(node) if compile_bodies else {}))
    return HostProgram(part.index, steps, constants, [v.name for v in part.inputs],
                       [v.name for v in part.outputs])


# Arrays from this size on are taken in place (a segment of their own) when aligned.
IN_PLACE_BYTES = 1 << 20
# Packed arrays from this size on share a segment apart from the smaller ones.
PACK_APART = 1 << 16


def _view_source(node: Node) -> tuple[Value, int] | None:
    """(input, byte offset) when the build makes `node`'s output a view of that input's
    bytes (no task): an alias op of a computed tensor, or a Slice of whole samples."""
    offset = _leading_slice(node)
    if offset is not None:
        return node.inputs[0], offset
    schema = ops.get(node.op_type, node)
    src = node.input(schema.alias[0]) if 0 in schema.alias else None
    return (src, 0) if src is not None and not src.is_constant else None


def variable_bindings(graph: Graph) -> dict[Value, tuple[str, int]]:
    """The values that are a session variable's bytes, as (variable, byte offset): each
    Variable's output, a write's output (its variable after the write), and a device view
    of either. Every device program binds them in place; no copy crosses programs."""
    bound: dict[Value, tuple[str, int]] = {}
    for node in graph.nodes:
        if node.op_type == VARIABLE:
            bound[node.outputs[0]] = (str(node.attrs["variable"]), 0)
        elif node.op_type in WRITES and node.inputs[0] in bound:
            bound[node.outputs[0]] = bound[node.inputs[0]]
        elif node.meta.engine is Engine.DEVICE and node.inputs:
            view = _view_source(node)
            if view is not None and view[0] in bound:
                name, at = bound[view[0]]
                bound[node.outputs[0]] = (name, at + view[1])
    return bound


class _Layout:
    """Assigns tensor slots: activations share storages (views alias), weights pack, a
    session variable's values are its bytes."""

    def __init__(self, formats: bool = False, max_segments: int = 1) -> None:
        self.formats = formats  # layout assignment ran: every slot states its format
        self.max_segments = max_segments  # weight segments the target's model may take
        self.slots: list[TensorSlot] = []
        self.index: dict[Value, int] = {}
        self.storage: dict[Value, int] = {}  # value -> storage id (activations only)
        self.view_offset: dict[Value, int] = {}  # bytes into its storage (leading slices)
        self.storage_size: list[int] = []
        self.weights: list[tuple[int, np.ndarray]] = []  # (slot, C-contiguous array)
        # slots of expanded control flow (codegen/control.py): (slot, storage, bytes into it)
        self.placed: list[tuple[int, int, int]] = []
        self.variables: list[str] = []  # the variables the program binds, by slot index

    def variable(self, v: Value, binding: tuple[str, int]) -> int:
        if v not in self.index:
            name, offset = binding
            if name not in self.variables:
                self.variables.append(name)
            self.index[v] = len(self.slots)
            self.slots.append(TensorSlot(v.name, v.meta.dtype.value, list(v.meta.shape),
                                         "variable", offset, "nchw" if self.formats else "",
                                         self.variables.index(name)))
        return self.index[v]

    def weight(self, v: Value) -> int:
        if v not in self.index:
            arr = np.asarray(v.const, order="C")  # keeps 0-d scalars 0-d
            self.index[v] = len(self.slots)
            self.weights.append((len(self.slots), arr))
            self.slots.append(TensorSlot(v.name, arr.dtype.name, list(arr.shape), "weight",
                                         -1, "nchw" if self.formats else ""))
        return self.index[v]

    def activation(self, v: Value, alias_of: Value | None = None, offset: int = 0) -> int:
        if v not in self.index:
            if v.meta is None or not v.meta.is_static:
                raise InvalidGraph(f"tensor '{v.name}' has no static shape at build time",
                                   tensor=v.name)
            if alias_of is not None:
                self.storage[v] = self.storage[alias_of]
                at = self.view_offset.get(alias_of, 0) + offset
                if at:
                    self.view_offset[v] = at
            else:
                self.storage[v] = len(self.storage_size)
                self.storage_size.append(storage_nbytes(v) if self.formats else v.meta.nbytes)
            self.index[v] = len(self.slots)
            fmt = (v.format or "nchw") if self.formats else ""
            self.slots.append(TensorSlot(v.name, v.meta.dtype.value, list(v.meta.shape),
                                         "arena", -1, fmt))
        return self.index[v]

    def block(self) -> int:
        """A storage of no value (a control node's bodies and scratch; sized by the caller)."""
        self.storage_size.append(0)
        return len(self.storage_size) - 1

    def raw_activation(self, name: str, dtype: str, shape: list[int], fmt: str, storage: int,
                       offset: int) -> int:
        """A slot of no value at `offset` bytes into `storage` (set once storages are
        placed: `place_raw`)."""
        self.slots.append(TensorSlot(name, dtype, shape, "arena", -1, self._format(fmt)))
        self.placed.append((len(self.slots) - 1, storage, offset))
        return len(self.slots) - 1

    def raw_weight(self, name: str, arr: np.ndarray, fmt: str) -> int:
        """A weight slot of no value (a body's constant)."""
        arr = np.asarray(arr, order="C")
        self.weights.append((len(self.slots), arr))
        self.slots.append(TensorSlot(name, arr.dtype.name, list(arr.shape), "weight", -1,
                                     self._format(fmt)))
        return len(self.slots) - 1

    def _format(self, fmt: str) -> str:
        """A body's format as it is: a body may have formats where its enclosing program has
        none (no convolution outside it); the runtime then keeps those of "" plain."""
        return fmt or ("nchw" if self.formats else "")

    def place_raw(self, offsets: dict[int, int]) -> None:
        for slot, storage, offset in self.placed:
            self.slots[slot].offset = offsets[storage] + offset

    def segments(self) -> list[np.ndarray]:
        """The weight region's segments; sets every weight slot's offset.

        Weights that are views of the imported file's weight buffer (importers/onnx_wire)
        stay where they are when the program uses at least half of that buffer: the
        buffer becomes the first segment, used in place by the runtime. The largest other
        arrays that start 64-byte aligned (the BN-folded convolution weights,
        `aligned_empty`) are segments of their own, as many as the runtime takes; the rest
        (small, transformed or user-given constants) is packed into a new segment. Copying
        into fresh memory is most of a compile's time for big weights (every page is
        touched for the first time: resnet18's 47 MB of folded weights took 141 ms in one
        fresh process, under cProfile).
        """
        shared: np.ndarray | None = None
        inside: dict[int, int] = {}  # slot -> offset in the shared buffer
        candidates: dict[int, tuple[np.ndarray, list[tuple[int, int, int]]]] = {}
        for slot, arr in self.weights:
            buf = weight_buffer_of(arr)
            if buf is None or arr.nbytes == 0 or not arr.flags.c_contiguous:
                continue
            at = arr.ctypes.data - buf.ctypes.data
            if at < 0 or at + arr.nbytes > buf.nbytes or at % arr.dtype.itemsize:
                continue
            candidates.setdefault(buf.ctypes.data, (buf, []))[1].append((slot, at, arr.nbytes))
        for buf, uses in candidates.values():
            used = sum(n for _, n in {(at, n) for _, at, n in uses})
            if 2 * used >= buf.nbytes:  # one buffer at most: the graph has one import
                shared = buf
                inside = {s: at for s, at, _ in uses}
                break
        region = [shared] if shared is not None else []
        base = align(shared.nbytes) if shared is not None else 0
        # In place: the largest aligned arrays, one segment each; then the packed ones: the
        # arrays of PACK_APART bytes and more, and the small rest, apart when the runtime
        # takes both (the small constants are the ones that differ between input shapes, so
        # the first packed segment is the same bytes for every signature of a graph, and
        # codegen/shared_weights.py shares it).
        room = self.max_segments - len(region) - 1
        movable = [(slot, arr) for slot, arr in self.weights if slot not in inside
                   and arr.flags.c_contiguous and arr.nbytes >= IN_PLACE_BYTES
                   and arr.ctypes.data % ALIGN == 0]
        movable.sort(key=lambda sa: -sa[1].nbytes)
        chosen: list[int] = []  # addresses taken in place, largest first
        for _, arr in movable:
            if arr.ctypes.data not in chosen and len(chosen) < room:
                chosen.append(arr.ctypes.data)

        def packed() -> list[tuple[int, np.ndarray]]:
            taken = {slot for slot, arr in movable if arr.ctypes.data in chosen}
            return [(slot, arr) for slot, arr in self.weights
                    if slot not in inside and slot not in taken]

        rest = packed()
        big = [sa for sa in rest if sa[1].nbytes >= PACK_APART]
        if big and len(big) < len(rest) and room > 0:
            if len(chosen) == room:  # the smallest in place makes room for the second pack
                chosen.pop()
                rest = packed()
            groups = [[sa for sa in rest if sa[1].nbytes >= PACK_APART],
                      [sa for sa in rest if sa[1].nbytes < PACK_APART]]
        else:
            groups = [rest]
        borrowed: dict[int, int] = {}  # slot -> offset in the region
        by_address: dict[int, int] = {}  # the same array bytes under two slots: one segment
        for slot, arr in movable:
            key = arr.ctypes.data
            if key not in chosen:
                continue
            if key not in by_address:
                by_address[key] = base
                region.append(arr.reshape(-1).view(np.uint8))
                base += align(arr.nbytes)
            borrowed[slot] = by_address[key]
        for slot, at in list(inside.items()) + list(borrowed.items()):
            self.slots[slot].offset = at
        for group in groups:
            size = 0
            placed: list[tuple[np.ndarray, int]] = []  # (array, offset in the segment)
            for slot, arr in group:
                placed.append((arr, size))
                self.slots[slot].offset = base + size
                size += align(arr.nbytes)
            own = np.zeros(size, np.uint8)
            for arr, at in placed:
                own[at:at + arr.nbytes] = arr.reshape(-1).view(np.uint8)
            region.append(own)
            base += align(size)
        return region


def _kernel_task(node: Node, layout: _Layout, ins: Sequence[int], outs: Sequence[int]) -> Task:
    schema = ops.get(node.op_type, node)
    kernel = schema.device(node, schema.attrs_of(node))
    if isinstance(kernel, str):
        raise InvalidGraph(f"node '{node.name}' ({node.op_type}) was placed on the device but "
                           f"its lowering declines: {kernel}", node=node.name)
    attrs = dict(kernel.attrs)
    inputs = [ins[i] if i >= 0 else -1 for i in kernel.inputs]
    # Fused epilogues of a Conv/MatMul/Gemm (see optimize/fusion/) travel as "_"-prefixed node
    # attributes; fused kernels (ConvBlock...) are ops of their own, lowered by their schemas.
    if node.attrs.get("_has_bias"):
        attrs["has_bias"] = 1
        inputs.append(ins[2])
    for key in ("_activation", "_activation_alpha", "_activation_beta", "_activation2",
                "_activation2_alpha", "_activation2_beta", "_activation_scale",
                "_activation_shift", "_integer_operands", "_bf16_activations"):
        if key in node.attrs:
            attrs[key[1:]] = node.attrs[key]
    if node.attrs.get("_sum"):
        attrs["sum"] = 1
        inputs.append(ins[node.attrs["_sum_input"]])
    if node.attrs.get("_mul"):  # after the residual: the runtime takes the last input first
        attrs["mul"] = 1
        inputs.append(ins[node.attrs["_mul_input"]])
    if "_rows_input" in node.attrs:  # the routed rows' count (optimize/routed_rows.py), last
        attrs["rows"] = 1
        attrs["rows_unit"] = int(node.attrs["_rows_unit"])
        inputs.append(ins[node.attrs["_rows_input"]])
    return Task("kernel", node.name, 0, kernel.op, inputs, list(outs), attrs)


def _cost(node: Node) -> float:
    """A rough FLOP count, to balance streams; only ratios matter."""
    flops = node_flops(node)
    if flops:
        return flops
    out = node.outputs[0].meta
    return float(out.numel) if out is not None and out.is_static and out.numel else 1.0


def _leading_slice(node: Node) -> int | None:
    """For a Slice that keeps whole samples (static bounds on axis 0 only, step 1, of a
    computed tensor), the byte offset of its output in the input: a contiguous block, since
    axis 0 is outermost in every storage format, so the output is a view and no task runs.
    None for any other node."""
    if node.op_type != "Slice" or len(node.inputs) < 3:
        return None
    x = node.inputs[0]
    bounds = node.inputs[1:]
    if x is None or x.is_constant or x.meta is None or not x.meta.is_static or not x.meta.rank:
        return None
    if any(b is not None and not b.is_constant for b in bounds):
        return None
    starts = np.asarray(bounds[0].const).reshape(-1)
    axes = np.asarray(bounds[2].const).reshape(-1) if len(bounds) > 2 and bounds[2] is not None \
        else np.arange(len(starts))
    steps = np.asarray(bounds[3].const).reshape(-1) if len(bounds) > 3 and bounds[3] is not None \
        else np.ones(len(starts), np.int64)
    n = x.meta.shape[0]
    if len(starts) != 1 or len(axes) != 1 or int(axes[0]) not in (0, -x.meta.rank) \
            or int(steps[0]) != 1 or n <= 0:
        return None
    out = node.outputs[0].meta
    if out is None or not out.is_static or tuple(out.shape[1:]) != tuple(x.meta.shape[1:]):
        return None
    start = int(starts[0])
    start = min(max(start + n if start < 0 else start, 0), n)
    if start + out.shape[0] > n:
        return None
    return start * (storage_nbytes(x) // n)


def _copies(node: Node, schema: ops.OpSchema) -> bool:
    """A node the device runs as a copy task (graphengine.Snapshot: a value kept apart)."""
    if schema.device is None:
        return False
    kernel = schema.device(node, schema.attrs_of(node))
    return not isinstance(kernel, str) and kernel.op == "Copy"


class _Step:
    """One task-producing node of a device partition (views produce no task)."""

    def __init__(self, node: Node, ins: list[int], outs: list[int], copy: bool) -> None:
        self.node, self.ins, self.outs, self.copy = node, ins, outs, copy
        self.deps: set[int] = set()
        self.tasks: list[Task] | None = None  # a control-flow node's (codegen/control.py)


# Ops whose runtime kernels take a residual (`_sum`) that may be the output's own bytes: they
# read each residual element before writing its output (the oneDNN sum post-op adds what the
# destination holds; kernels_conv.cc and kernels_matmul.cc skip their copy when the two are
# one buffer).
_SUM_IN_PLACE = frozenset({"Conv", "MatMul", "Gemm"})


def _sum_in_place(steps: list[_Step], layout: _Layout, defined: dict[int, int],
                  uses: dict[int, set[int]], inputs: Sequence[Value],
                  outputs: Sequence[Value]) -> None:
    """A Conv/MatMul with a fused residual writes its output into the residual's storage
    when it is that storage's last reader: the runtime then skips copying the residual into
    the output (ResNet-50 at batch 1: 3.2 MB moved before each of layer1's three sums), and
    the arena holds one buffer instead of two. The output's storage (with its views) is
    merged into the residual's; every other reader of the residual's bytes is made a
    dependency of the step, so on any stream they have read it before it is overwritten.
    Not for a residual that is a view into a larger storage, a program input or output, or
    also another input of the same node (the output may be a program output: the merged
    storage is then live to the end)."""
    kept = {layout.storage[v] for v in list(inputs) + list(outputs) if v in layout.storage}
    members: dict[int, list[Value]] | None = None  # storage -> its values, made on first use
    for index, step in enumerate(steps):
        node = step.node
        if node.op_type not in _SUM_IN_PLACE or not node.attrs.get("_sum") \
                or step.tasks is not None or step.copy:
            continue
        at = int(node.attrs["_sum_input"])
        r = node.input(at)
        out = node.outputs[0]
        if r is None or r not in layout.storage or out not in layout.storage:
            continue
        rid, oid = layout.storage[r], layout.storage[out]
        if rid in kept or rid == oid or layout.view_offset.get(r, 0) \
                or layout.storage_size[rid] != layout.storage_size[oid] \
                or max(uses.get(rid, {index})) != index or defined.get(oid) != index:
            continue
        others = [v for i, v in enumerate(node.inputs) if v is not None
                  and i != at and layout.storage.get(v) == rid]
        if others or layout.slots[layout.index[r]].format != layout.slots[layout.index[out]].format:
            continue
        step.deps.update(u for u in uses[rid] if u != index)
        if members is None:
            members = {}
            for v, sid in layout.storage.items():
                members.setdefault(sid, []).append(v)
        for v in members.get(oid, []):
            layout.storage[v] = rid
        members.setdefault(rid, []).extend(members.pop(oid, []))
        uses[rid] |= uses.pop(oid, set())
        del defined[oid]
        layout.storage_size[oid] = 0


def _build_device(graph: Graph, part: Partition, max_streams: int = 1,
                  max_segments: int = 1, bound: dict[Value, tuple[str, int]] | None = None,
                  pin_inputs: bool = False
                  ) -> tuple[DeviceProgram, int, str]:
    layout = _Layout(formats=graph.layouts_assigned, max_segments=max_segments)
    bound = bound or {}
    inputs = [v for v in part.inputs if v not in bound]  # a variable is bound, not fed
    for v in inputs:
        layout.activation(v)
    steps: list[_Step] = []
    defined: dict[int, int] = {layout.storage[v]: START for v in inputs}  # storage -> step
    uses: dict[int, set[int]] = {}
    labels = itertools.count()
    # A variable's value -> the step that made it (START: the value the run starts with).
    # Readers depend on it; the write after them is ordered by its ordering inputs.
    version: dict[Value, int] = {}
    for node in part.nodes:
        ins, reads, after = [], [], set()
        for v in node.inputs:
            if v is None:
                ins.append(-1)
            elif v.is_constant:
                ins.append(layout.weight(v))
            elif v in bound:
                ins.append(layout.variable(v, bound[v]))
                after.add(version.get(v, START))
            else:
                ins.append(layout.activation(v))
                reads.append(layout.storage[v])
        if node.op_type in CONTROL_OPS:  # placed on the device: labels, jumps, its bodies
            step = _Step(node, ins, [layout.activation(o) for o in node.outputs], copy=False)
            try:
                plan = plan_control(node, node.meta.bodies)
            except NotOnDevice as exc:
                raise InvalidGraph(f"node '{node.name}' ({node.op_type}) was placed on the "
                                   f"device but cannot run there: {exc}",
                                   node=node.name) from None
            step.tasks, block = expand_control(node, plan, layout, ins, step.outs, labels)
            defined[block] = len(steps)
            uses.setdefault(block, set()).add(len(steps))
        else:
            schema = ops.get(node.op_type, node)
            out0 = node.outputs[0] if node.outputs else None
            if out0 in bound and node.op_type not in WRITES:
                # a Variable, or a view of a variable's bytes: no task
                layout.variable(out0, bound[out0])
                src = node.inputs[0] if node.inputs else None
                version[out0] = version.get(src, START) if src is not None else START
                continue
            view = _view_source(node)
            src, offset = view if view is not None else (None, 0)
            outs = [layout.variable(out, bound[out]) if out in bound else
                    layout.activation(out, alias_of=src if view and i == 0 else None,
                                      offset=offset)
                    for i, out in enumerate(node.outputs)]
            if view:
                continue  # the output is the input's bytes under another shape: no task
            step = _Step(node, ins, outs, copy=0 in schema.alias or _copies(node, schema))
        index = len(steps)
        step.deps.update(after)
        for sid in reads:
            step.deps.add(defined[sid])
            uses.setdefault(sid, set()).add(index)
        for out in node.outputs:
            if out in bound:
                version[out] = index
            else:
                defined[layout.storage[out]] = index
        steps.append(step)
    _sum_in_place(steps, layout, defined, uses, inputs, part.outputs)
    # Streams a pass chose (the data-parallel batch split's chunks) are kept.
    hints = [s.node.meta.stream for s in steps]
    chosen = [h for h in hints if h is not None]
    if chosen:
        max_streams = max(max_streams, max(chosen) + 1)
    sched = assign_streams([sorted(s.deps) for s in steps], [_cost(s.node) for s in steps],
                           max_streams, hints if chosen else None)
    tasks: list[Task] = []
    for i, step in enumerate(steps):
        stream = sched.stream[i]
        tasks += [Task("wait", step.node.name, stream, event=e) for e in sched.waits[i]]
        if step.tasks is not None:
            for task in step.tasks:
                task.stream = stream
            tasks += step.tasks
        elif step.copy:
            tasks.append(Task("copy", step.node.name, stream, "", step.ins[:1], step.outs[:1]))
        else:
            task = _kernel_task(step.node, layout, step.ins, step.outs)
            task.stream = stream
            tasks.append(task)
        tasks += [Task("record", step.node.name, stream, event=e) for e in sched.records[i]]
    # A variable's value leaves the program only for a host node or the graph's outputs
    # (another device program binds the variable itself).
    graph_outputs = set(graph.outputs)
    outputs = [v for v in part.outputs if v not in bound or v in graph_outputs or any(
        u.meta.engine is not Engine.DEVICE for u in v.users)]
    for v in outputs:
        if v not in bound:
            uses.setdefault(layout.storage[v], set()).add(sched.end)  # live until copied out
    if pin_inputs:
        for v in inputs:
            uses.setdefault(layout.storage[v], set()).add(sched.end)
    plan = plan_storages(layout.storage_size, defined, uses, sched)
    for v, idx in layout.index.items():
        if layout.slots[idx].region == "arena":
            layout.slots[idx].offset = plan.offsets[layout.storage[v]] + \
                layout.view_offset.get(v, 0)
    layout.place_raw(plan.offsets)
    prog = DeviceProgram(
        index=part.index, tensors=layout.slots, weights=layout.segments(),
        arena_bytes=plan.arena_bytes, num_streams=sched.num_streams,
        num_events=sched.num_events, tasks=tasks,
        inputs=[layout.index[v] for v in inputs],
        outputs=[layout.index[v] for v in outputs], variables=layout.variables,
        work_flops=int(sum(node_flops(s.node) for s in steps)))
    return prog, plan.lower_bound, plan.strategy
