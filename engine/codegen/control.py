"""Control flow on the device: If, Loop and Scan as labels and jumps in a device program.

GE keeps a training or inference loop on the device: If and While become label and
stream-switch tasks. Here an If, Loop or Scan whose bodies each compile to at most one
device program (nothing for the host, one stream) is placed on the device
(`plan_control` says whether, and why not), and task generation expands it in place, on
the stream its step runs on (`expand_control`):

    If    switch(cond is false -> ELSE); then-body; copy its outputs; goto END
          ELSE: else-body; copy its outputs; END
    Loop  i = 0; cond = cond input (or true); state = initial values
          TOP: switch(i >= M -> END); switch(cond is false -> END); body
          scan outputs written at slice i; state = body's state; cond = body's cond; i += 1
          goto TOP; END: outputs = state
    Scan  the same, over a counter against the scan length, each scan input's slice read
          at slice i (length - 1 - i when reversed) before the body

The runtime runs a jump by setting its stream's program counter (runtime_ext/src/
model_control.cc): a branch or an iteration costs a few task dispatches, not a return to
the host.

Memory: each body keeps the memory plan its own compile made, with its inputs live to the
end of the body (`compile_graph(pin_inputs=True)`), so that a value copied into a body input
holds across iterations and every body tensor that starts inside an input's bytes is a view
of that input. One block of the enclosing arena, live over the control node's step alone,
holds the body arenas (an If's two branches share it: one runs) and a few scratch tensors
(a Scan's counter, state a body does not read). The enclosing values a body reads are not
copied: the body's tensors inside such an input's bytes are pointed at the enclosing tensor.
So the enclosing plan sees the control node as one step that reads its inputs and writes
its outputs, and the bodies' internal tensors never meet its other buffers.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Sequence

import numpy as np

from ..dtypes import DType
from ..errors import InvalidGraph
from ..ir import Node, TensorMeta
from ..model import CompiledModel, DeviceProgram, Task, TensorSig
from ..ops import control
from .memory import align

CONTROL_OPS = frozenset(control.BODY_ATTRS)
# A Loop whose trip count comes from the run (or that only a condition ends) may jump back
# at most this many times a run; past it the run fails naming the node (as a host loop of
# that length would never end). Nested loops multiply their bounds, up to MAX_JUMP_LIMIT.
MAX_DEVICE_TRIPS = 1 << 31
MAX_JUMP_LIMIT = 1 << 62


class NotOnDevice(Exception):
    """Why a control-flow node stays on the host (placement's rejection reason)."""


@dataclasses.dataclass
class _Body:
    key: str
    model: CompiledModel
    program: DeviceProgram | None
    formals: list[str]  # its own inputs (Loop: i, cond, state...; Scan: state..., slices...)
    outer: dict[str, int]  # an enclosing value's input name -> position in the node's inputs

    def sig(self, name: str) -> TensorSig:
        return next(s for s in self.model.inputs if s.name == name)

    def location(self, name: str) -> tuple:
        """Where the value `name` lives in this body: ("arena", start, end) in its arena, or
        a tag no arena range meets (a scratch holder, an enclosing value, a constant)."""
        prog = self.program
        for names, slots in ((prog.output_names, prog.outputs),
                             (prog.input_names, prog.inputs)) if prog else ():
            if name in names:
                slot = prog.tensors[slots[names.index(name)]]
                if slot.region == "arena":
                    return ("arena", slot.offset, slot.offset + _nbytes(slot.dtype, slot.shape))
                return ("weight", name)
        return ("scratch" if name in self.formals else "other", name)


@dataclasses.dataclass
class ControlPlan:
    op: str
    bodies: dict[str, _Body]
    bound: int = 1  # Loop, Scan: iterations at most
    scan_in: list[tuple[int, bool]] = dataclasses.field(default_factory=list)  # axis, reversed
    scan_out: list[tuple[int, bool]] = dataclasses.field(default_factory=list)


def _nbytes(dtype: str, shape: Sequence[int]) -> int:
    return int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize


def _static(meta: TensorMeta | None) -> tuple[DType, tuple[int, ...]] | None:
    return None if meta is None or not meta.is_static else (meta.dtype, tuple(meta.shape))


def _one(meta: TensorMeta | None, dtype: DType) -> bool:
    return meta is not None and meta.is_static and meta.dtype is dtype and meta.numel == 1


def _overlap(a: tuple, b: tuple) -> bool:
    if a[0] == "arena" and b[0] == "arena":
        return a[1] < b[2] and b[1] < a[2] and a[1] < a[2] and b[1] < b[2]
    return a[0] == "scratch" and a == b


def plan_control(node: Node, compiled: dict[str, CompiledModel]) -> ControlPlan:
    """How `node` runs on the device with its bodies `compiled` (by attribute), or
    NotOnDevice saying why it cannot."""
    names = list(node.attrs.get("_outer") or [])
    n_formal = len(node.inputs) - len(names)
    bodies: dict[str, _Body] = {}
    for key in control.BODY_ATTRS[node.op_type]:
        model = compiled.get(key)
        if model is None:
            raise NotOnDevice(f"body '{key}' was not compiled")
        host = [p for p in model.programs if not isinstance(p, DeviceProgram)]
        if host:
            ops_ = sorted({p.op_type for p in model.report.placements if p.engine != "device"})
            raise NotOnDevice(f"body '{key}' needs the host for {', '.join(ops_[:8])}")
        if len(model.programs) > 1:
            raise NotOnDevice(f"body '{key}' is {len(model.programs)} device programs")
        prog = model.programs[0] if model.programs else None
        if prog is not None and (prog.num_streams > 1 or prog.num_events):
            raise NotOnDevice(f"body '{key}' runs on {prog.num_streams} streams")
        if prog is not None and prog.variables:
            raise NotOnDevice(f"body '{key}' reads or writes session variables")
        if model.row_counts:
            raise NotOnDevice(f"body '{key}' has outputs whose rows the data decides")
        graph = node.attrs[key]
        formals = [v.name for v in graph.inputs if v.name not in names]
        body = _Body(key, model, prog, formals,
                     {name: n_formal + k for k, name in enumerate(names)})
        inputs = {s.name for s in model.inputs}
        for src in model.output_sources:
            if not (prog and src in prog.output_names) and src not in inputs and \
                    src not in model.constants:
                raise NotOnDevice(f"body '{key}' output '{src}' comes from nowhere on the device")
        if any(f not in inputs for f in formals):
            raise NotOnDevice(f"body '{key}' has inputs its compile dropped")
        bodies[key] = body
    plan = ControlPlan(node.op_type, bodies)
    outs = [_static(o.meta) for o in node.outputs]
    ins = [None if v is None else v.meta for v in node.inputs]
    if node.op_type == "If":
        if not _one(ins[0], DType.BOOL):
            raise NotOnDevice("its condition is not one bool element")
        for body in bodies.values():
            got = [(s.dtype, tuple(s.shape)) for s in body.model.outputs]
            if got != outs:
                raise NotOnDevice(f"branch '{body.key}' gives {got}, the If's outputs are {outs}")
    elif node.op_type == "Loop":
        _plan_loop(node, plan, n_formal, ins, outs)
    else:
        _plan_scan(node, plan, n_formal, ins, outs)
    return plan


def _carried(body: _Body, n: int, first_in: int, first_out: int, outs: list, ins: list) -> None:
    """State k: body input first_in + k, body output first_out + k, node output k, node
    input first_in + k (Loop: after M and cond) keep one type."""
    for k in range(n):
        types = {_static(ins[first_in + k]), outs[k],
                 (body.sig(body.formals[first_in + k]).dtype,
                  tuple(body.sig(body.formals[first_in + k]).shape)),
                 (body.model.outputs[first_out + k].dtype,
                  tuple(body.model.outputs[first_out + k].shape))}
        if len(types) != 1:
            raise NotOnDevice(f"carried state {k} changes type between iterations")


def _check_copies(body: _Body, copies: list[tuple[str, str]]) -> None:
    """The copies that end an iteration (body output -> body input) run one after another:
    none may read what another writes (state exchanged between iterations)."""
    locs = [(body.location(src), body.location(dst)) for src, dst in copies]
    for a, (src, _) in enumerate(locs):
        for b, (_, dst) in enumerate(locs):
            if a != b and _overlap(src, dst):
                raise NotOnDevice("carried values are exchanged between iterations")


def _plan_loop(node: Node, plan: ControlPlan, n_formal: int, ins: list, outs: list) -> None:
    body = plan.bodies["body"]
    n = n_formal - 2
    if n < 0 or len(body.formals) != n + 2:
        raise NotOnDevice("its body's inputs do not match the Loop's")
    if ins[0] is not None and not _one(ins[0], DType.INT64):
        raise NotOnDevice("its trip count is not one int64 element")
    if ins[1] is not None and not _one(ins[1], DType.BOOL):
        raise NotOnDevice("its condition is not one bool element")
    o = body.model.outputs
    if not o or o[0].dtype is not DType.BOOL or int(np.prod(o[0].shape)) != 1:
        raise NotOnDevice("its body's condition is not one bool element")
    _carried(body, n, 2, 1, outs, ins)
    scans = len(node.outputs) - n
    trips = control.static_trip_count(node, node.attrs)
    if scans and trips is None:
        raise NotOnDevice("its scan outputs' length is known only at run time")
    for j in range(scans):
        s = o[1 + n + j]
        if outs[n + j] != (s.dtype, (trips, *s.shape)):
            raise NotOnDevice(f"scan output {j} is not {trips} of the body's {s}")
    _check_copies(body, [(body.model.output_sources[1 + k], body.formals[2 + k])
                         for k in range(n)] +
                  [(body.model.output_sources[0], body.formals[1])])
    if trips is not None:
        plan.bound = trips
    elif node.input(0) is not None and node.input(0).is_constant:
        plan.bound = max(int(np.asarray(node.input(0).const).reshape(-1)[0]), 0)
    else:
        plan.bound = MAX_DEVICE_TRIPS
    plan.bound = min(plan.bound, MAX_DEVICE_TRIPS)


def _plan_scan(node: Node, plan: ControlPlan, n_formal: int, ins: list, outs: list) -> None:
    a = node.attrs
    if a.get("_batched"):
        raise NotOnDevice("Scan-8's batched form runs on the host")
    body = plan.bodies["body"]
    m = a["num_scan_inputs"]
    n = n_formal - m
    if n < 0 or len(body.formals) != n_formal:
        raise NotOnDevice("its body's inputs do not match the Scan's")
    _carried(body, n, 0, 0, outs, ins)
    k_out = len(node.outputs) - n
    axes_in = list(a.get("scan_input_axes") or [0] * m)
    dirs_in = list(a.get("scan_input_directions") or [0] * m)
    axes_out = list(a.get("scan_output_axes") or [0] * k_out)
    dirs_out = list(a.get("scan_output_directions") or [0] * k_out)
    if not (len(axes_in) == len(dirs_in) == m and len(axes_out) == len(dirs_out) == k_out):
        raise NotOnDevice("its scan axes or directions do not match its inputs and outputs")
    lengths = set()
    for j in range(m):
        shape = ins[n + j].shape
        ax = axes_in[j] + len(shape) if axes_in[j] < 0 else axes_in[j]
        if not 0 <= ax < len(shape):
            raise NotOnDevice(f"scan input {j}'s axis is out of range")
        lengths.add(shape[ax])
        plan.scan_in.append((ax, bool(dirs_in[j])))
    if len(lengths) != 1:
        raise NotOnDevice(f"its scan inputs have lengths {sorted(lengths)}")
    length = lengths.pop()
    for j in range(k_out):
        s = body.model.outputs[n + j]
        rank = len(s.shape) + 1
        ax = axes_out[j] + rank if axes_out[j] < 0 else axes_out[j]
        if not 0 <= ax < rank:
            raise NotOnDevice(f"scan output {j}'s axis is out of range")
        shape = list(s.shape)
        shape.insert(ax, length)
        if outs[n + j] != (s.dtype, tuple(shape)):
            raise NotOnDevice(f"scan output {j} is not {length} of the body's {s}")
        plan.scan_out.append((ax, bool(dirs_out[j])))
    _check_copies(body, [(body.model.output_sources[k], body.formals[k]) for k in range(n)])
    plan.bound = length


# ---- expansion ------------------------------------------------------------------------------
@dataclasses.dataclass
class _Embedded:
    tasks: list[Task]  # the body's own, renamed and renumbered
    copy_in: list[Task]  # enclosing values the body reads that could not be pointed at
    holders: dict[str, int]  # its own inputs' slots
    outputs: list[int]  # each output's slot
    moved: set[int]  # outputs the body writes straight into the enclosing outputs


class _Expansion:
    """The tasks and slots of one control node, in its enclosing program's layout
    (codegen/tasks._Layout)."""

    def __init__(self, node: Node, layout, ins: Sequence[int], labels: Iterator[int]) -> None:
        self.node, self.layout, self.ins, self.labels = node, layout, ins, labels
        self.block = layout.block()
        self.size = 0  # bytes of the block in use
        self.tasks: list[Task] = []

    def scratch(self, name: str, dtype: str, shape: Sequence[int]) -> int:
        at = align(self.size)
        self.size = at + _nbytes(dtype, shape)
        return self.layout.raw_activation(f"{self.node.name}/{name}", dtype, list(shape),
                                          "", self.block, at)

    def const(self, name: str, value: np.ndarray) -> int:
        return self.layout.raw_weight(f"{self.node.name}/{name}", value, "")

    def task(self, kind: str, inputs: Sequence[int] = (), outputs: Sequence[int] = (),
             label: int = -1, **attrs: object) -> None:
        self.tasks.append(Task(kind, self.node.name, 0, "", list(inputs), list(outputs),
                               dict(attrs), label=label))

    def copy(self, src: int, dst: int) -> None:
        if not self.same(src, dst):
            self.task("copy", [src], [dst])

    def same(self, a: int, b: int) -> bool:
        """Slots a and b are the same bytes (a body output that is a view of its input)."""
        where = {slot: (sid, off) for slot, sid, off in self.layout.placed if slot in (a, b)}
        return a == b or (len(where) == 2 and where[a] == where[b])

    def embed(self, body: _Body, base: int, scale: int, into: bool = False) -> _Embedded:
        """Body `body`'s slots and tasks in the enclosing program: its arena at `base` in the
        block; a backward goto's limit times `scale` (the iterations that run it). `into`: its
        outputs may be written straight into the node's (an If's: nothing else is written
        while it runs, and the node's outputs share no bytes with what is live then)."""
        layout, node, prog = self.layout, self.node, body.program
        mapping: dict[int, int] = {}
        copy_in: list[Task] = []
        tasks: list[Task] = []
        moved: set[int] = set()
        prefix = f"{node.name}/{body.key}/"
        if prog is not None:
            pointed = []  # (start, end, enclosing storage, offset): inputs read in place
            for idx in prog.inputs:
                slot = prog.tensors[idx]
                pos = body.outer.get(slot.name)
                if pos is None:
                    continue
                v = node.inputs[pos]
                size = _nbytes(slot.dtype, slot.shape)
                if v is not None and v in layout.storage and size and \
                        (v.format or "nchw") == (slot.format or "nchw"):
                    pointed.append((slot.offset, slot.offset + size, layout.storage[v],
                                    layout.view_offset.get(v, 0)))
            for k, src in enumerate(body.model.output_sources if into else ()):
                span = _movable(prog, src, [(a, b) for a, b, *_ in pointed])
                if span is not None:
                    pointed.append((*span, layout.storage[node.outputs[k]], 0))
                    moved.add(k)
            for idx, slot in enumerate(prog.tensors):
                name = prefix + slot.name
                if slot.region == "weight":
                    mapping[idx] = layout.raw_weight(name, _weight_array(prog, slot),
                                                     slot.format)
                    continue
                at = next(((sid, off + slot.offset - start) for start, end, sid, off in pointed
                           if start <= slot.offset < end), None)
                storage, offset = at if at is not None else (self.block, base + slot.offset)
                mapping[idx] = layout.raw_activation(name, slot.dtype, list(slot.shape),
                                                     slot.format, storage, offset)
            for idx in prog.inputs:  # enclosing values not pointed at: copied in once
                pos = body.outer.get(prog.tensors[idx].name)
                start = prog.tensors[idx].offset
                if pos is not None and not any(s == start for s, *_ in pointed):
                    copy_in.append(Task("copy", node.name, 0, "", [self.ins[pos]],
                                        [mapping[idx]]))
            relabel: dict[int, int] = {}
            for t in prog.tasks:
                attrs = dict(t.attrs)
                if t.kind == "goto" and "limit" in attrs:
                    attrs["limit"] = min(int(attrs["limit"]) * max(scale, 1), MAX_JUMP_LIMIT)
                label = -1 if t.label < 0 else relabel.setdefault(t.label, next(self.labels))
                tasks.append(Task(t.kind, prefix + t.name, 0, t.op,
                                  [mapping[i] if i >= 0 else -1 for i in t.inputs],
                                  [mapping[o] if o >= 0 else -1 for o in t.outputs],
                                  attrs, t.event, label))
        holders: dict[str, int] = {}
        for name in body.formals:
            if prog is not None and name in prog.input_names:
                holders[name] = mapping[prog.inputs[prog.input_names.index(name)]]
            else:
                sig = body.sig(name)
                holders[name] = self.scratch(f"{body.key}/{name}", sig.dtype.value, sig.shape)
        outputs = []
        for src in body.model.output_sources:
            if prog is not None and src in prog.output_names:
                outputs.append(mapping[prog.outputs[prog.output_names.index(src)]])
            elif src in holders:
                outputs.append(holders[src])
            elif src in body.outer:
                outputs.append(self.ins[body.outer[src]])
            else:
                outputs.append(self.const(f"{body.key}/{src}", body.model.constants[src]))
        return _Embedded(tasks, copy_in, holders, outputs, moved)


def _movable(prog: DeviceProgram, name: str, taken: list[tuple[int, int]]
             ) -> tuple[int, int] | None:
    """The arena bytes of program output `name` when every arena tensor that meets them lies
    inside them (the output, its views, tensors that held those bytes before it) and no
    range in `taken` meets them: then all of it may live elsewhere."""
    if name not in prog.output_names:
        return None
    slot = prog.tensors[prog.outputs[prog.output_names.index(name)]]
    start, end = slot.offset, slot.offset + _nbytes(slot.dtype, slot.shape)
    if slot.region != "arena" or start == end:
        return None
    for t in prog.tensors:
        a, b = t.offset, t.offset + _nbytes(t.dtype, t.shape)
        if t.region == "arena" and a < end and start < b and a < b and \
                not (start <= a and b <= end):
            return None
    if any(a < end and start < b for a, b in taken):
        return None
    return start, end


def _weight_array(prog: DeviceProgram, slot) -> np.ndarray:
    """A weight slot's bytes in the program's segments, as its dtype and shape (a view)."""
    size = _nbytes(slot.dtype, slot.shape)
    if size == 0:
        return np.zeros(slot.shape, np.dtype(slot.dtype))
    start = 0
    for seg in prog.weights:
        if start <= slot.offset and slot.offset + size <= start + seg.nbytes:
            at = slot.offset - start
            raw = seg.reshape(-1).view(np.uint8)[at:at + size]
            return raw.view(np.dtype(slot.dtype)).reshape(slot.shape)
        start += align(seg.nbytes)
    raise InvalidGraph(f"weight '{slot.name}' lies outside its program's weight segments",
                       tensor=slot.name)


def expand_control(node: Node, plan: ControlPlan, layout, ins: Sequence[int],
                   outs: Sequence[int], labels: Iterator[int]) -> tuple[list[Task], int]:
    """The tasks that run `node` on the device (their stream left 0 for the caller to set),
    and the storage id of its block (sized) in `layout`."""
    x = _Expansion(node, layout, ins, labels)
    x.size = align(max((b.program.arena_bytes for b in plan.bodies.values() if b.program),
                       default=0))
    if plan.op == "If":
        _expand_if(x, plan, outs)
    elif plan.op == "Loop":
        _expand_loop(x, plan, outs)
    else:
        _expand_scan(x, plan, outs)
    layout.storage_size[x.block] = x.size
    return x.tasks, x.block


def _expand_if(x: _Expansion, plan: ControlPlan, outs: Sequence[int]) -> None:
    then = x.embed(plan.bodies["then_branch"], 0, 1, into=True)
    other = x.embed(plan.bodies["else_branch"], 0, 1, into=True)
    on_else, end = next(x.labels), next(x.labels)
    x.task("switch", [x.ins[0]], label=on_else, test="false")
    for branch, last in ((then, False), (other, True)):
        x.tasks += branch.copy_in + branch.tasks
        for k, (src, dst) in enumerate(zip(branch.outputs, outs)):
            if k not in branch.moved:
                x.copy(src, dst)
        if not last:
            x.task("goto", label=end)
            x.task("label", label=on_else)
    x.task("label", label=end)


def _loop_tail(x: _Expansion, body: _Embedded, counter: int, top: int, end: int,
               bound: int, copies: list[tuple[int, int]]) -> None:
    for src, dst in copies:
        x.copy(src, dst)
    x.task("increment", [counter], [counter])
    x.task("goto", label=top, limit=max(bound, 1))
    x.task("label", label=end)


def _expand_loop(x: _Expansion, plan: ControlPlan, outs: Sequence[int]) -> None:
    spec = plan.bodies["body"]
    body = x.embed(spec, 0, plan.bound)
    f = spec.formals
    n = len(f) - 2
    i, cond = body.holders[f[0]], body.holders[f[1]]
    x.tasks += body.copy_in
    x.copy(x.const("zero", np.zeros((), np.int64)), i)
    x.copy(x.ins[1] if x.ins[1] >= 0 else x.const("true", np.ones((), np.bool_)), cond)
    for k in range(n):
        x.copy(x.ins[2 + k], body.holders[f[2 + k]])
    top, end = next(x.labels), next(x.labels)
    x.task("label", label=top)
    if x.ins[0] >= 0:
        x.task("switch", [i, x.ins[0]], label=end, test="ge")
    if x.ins[1] >= 0 or not x.same(body.outputs[0], cond):  # else the condition stays true
        x.task("switch", [cond], label=end, test="false")
    x.tasks += body.tasks
    for j, dst in enumerate(outs[n:]):
        x.task("slice_copy", [body.outputs[1 + n + j], i], [dst], mode="write", axis=0,
               reverse=0)
    _loop_tail(x, body, i, top, end, plan.bound,
               [(body.outputs[1 + k], body.holders[f[2 + k]]) for k in range(n)] +
               [(body.outputs[0], cond)])
    for k in range(n):
        x.copy(body.holders[f[2 + k]], outs[k])


def _expand_scan(x: _Expansion, plan: ControlPlan, outs: Sequence[int]) -> None:
    spec = plan.bodies["body"]
    body = x.embed(spec, 0, plan.bound)
    f = spec.formals
    n = len(f) - len(plan.scan_in)
    t = x.scratch("counter", "int64", ())
    length = x.const("length", np.array(plan.bound, np.int64))
    x.tasks += body.copy_in
    x.copy(x.const("zero", np.zeros((), np.int64)), t)
    for k in range(n):
        x.copy(x.ins[k], body.holders[f[k]])
    top, end = next(x.labels), next(x.labels)
    x.task("label", label=top)
    x.task("switch", [t, length], label=end, test="ge")
    for j, (ax, rev) in enumerate(plan.scan_in):
        x.task("slice_copy", [x.ins[n + j], t], [body.holders[f[n + j]]], mode="read",
               axis=ax, reverse=int(rev))
    x.tasks += body.tasks
    for j, (ax, rev) in enumerate(plan.scan_out):
        x.task("slice_copy", [body.outputs[n + j], t], [outs[n + j]], mode="write", axis=ax,
               reverse=int(rev))
    _loop_tail(x, body, t, top, end, plan.bound,
               [(body.outputs[k], body.holders[f[k]]) for k in range(n)])
    for k in range(n):
        x.copy(body.holders[f[k]], outs[k])


__all__ = ["CONTROL_OPS", "ControlPlan", "NotOnDevice", "expand_control", "plan_control",
           "MAX_DEVICE_TRIPS"]
