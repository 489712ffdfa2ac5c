"""The compiled model: the artifact stage 4 produces and stage 5 loads.

Everything here is plain data (names, numbers, numpy arrays) so that it can be written
to an offline model file and loaded without recompiling.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from .dtypes import DType
from .errors import InvalidGraph, bounded_text
from .ir import Dim
from .provenance import Provenance
from .report import CompileReport


@dataclasses.dataclass(frozen=True)
class TensorSig:
    name: str
    dtype: DType
    shape: tuple[Dim, ...]

    def __str__(self) -> str:
        return f"{self.dtype.value}[{','.join(str(d) for d in self.shape)}]"


@dataclasses.dataclass
class TensorSlot:
    name: str
    dtype: str
    shape: list[int]
    region: str  # "arena" | "weight" | "variable"
    offset: int  # bytes into the region (a variable: into that variable's bytes)
    format: str = ""  # "" = let the runtime choose; else "nchw" (plain) / "nhwc" ...
    # region "variable": the index of its variable in the program's `variables`
    variable: int = -1


# ModelSpec, TensorSlot and Task are the schema of a device program on both sides:
# runtime_ext/tools/gen_spec.py generates the native structs and their readers from them
# (runtime_ext/src/spec_gen.h, spec_read_gen.inc); a test fails when they are stale.
@dataclasses.dataclass
class Task:
    # "kernel" | "record" | "wait" | "copy", or control flow (engine/codegen/control.py):
    # "label" | "goto" | "switch" | "increment" | "slice_copy"
    kind: str
    name: str
    stream: int = 0
    op: str = dataclasses.field(default="", metadata={"required_when": ("kind", ("kernel",))})
    inputs: list[int] = dataclasses.field(default_factory=list)  # tensor indices; -1: omitted
    outputs: list[int] = dataclasses.field(default_factory=list)
    attrs: dict[str, Any] = dataclasses.field(default_factory=dict)
    event: int = dataclasses.field(default=-1,
                                   metadata={"required_when": ("kind", ("record", "wait"))})
    # a label task's id, or the label a goto / switch jumps to (in the same stream)
    label: int = dataclasses.field(default=-1, metadata={"required_when": (
        "kind", ("label", "goto", "switch"))})


@dataclasses.dataclass
class ModelSpec:
    """What a native Model is built from (`DeviceProgram.spec()`, as a dict): the arena, the
    weight region's segments, the tensors and tasks, and the streams that run them."""

    arena_bytes: int
    tensors: list[TensorSlot]
    tasks: list[Task]
    inputs: list[int]  # tensor indices of the model's inputs, in order
    outputs: list[int]
    name: str = ""  # for messages and profiles
    num_streams: int = 1
    num_events: int = 0
    # let the runtime store intermediate 4-D activations channels-last (its inputs and
    # outputs are NCHW either way); False is for comparisons and tests
    channels_last: bool = True
    threads_per_stream: int = 0  # OpenMP threads per stream's kernels; 0: threads / streams
    # the FLOPs of one launch (engine/flops.py's count over its tasks; 0: unknown): tells the
    # runtime a launch long by its work from one made long by a loaded machine's preemptions
    work_flops: int = 0
    # uint8 segments laid end to end, each 64-byte aligned; the native reader decides per
    # segment whether it is used in place or copied (module.cc), so it is read by hand
    weights: list[np.ndarray] = dataclasses.field(default_factory=list,
                                                  metadata={"native": "segments"})
    # the session's _runtime.Variable objects that tensors of region "variable" index:
    # bound, not copied (the model reads and writes their bytes in place)
    variables: list[Any] = dataclasses.field(default_factory=list,
                                             metadata={"native": "variables"})

    def to_dict(self) -> dict:
        """The dict `_runtime.Model` takes, field by field (weights as they are: never
        copied here). The native reader only reads it, so a task's attrs and lists are
        handed over as they are: `dataclasses.asdict` deep-copied every one of them, a
        tenth of some models' load."""
        out = {}
        for f in dataclasses.fields(self):
            v = getattr(self, f.name)
            if isinstance(v, list):
                v = [_slot_spec(x) if isinstance(x, TensorSlot) else
                     _task_spec(x) if isinstance(x, Task) else x for x in v]
            out[f.name] = v
        return out


@dataclasses.dataclass
class DeviceProgram:
    """A device partition, compiled: tensors laid out in an arena + weights, and tasks."""

    index: int
    tensors: list[TensorSlot]
    # The weight region: uint8 segments laid end to end, each starting 64-byte aligned; a
    # weight slot's offset is into that concatenation and inside one segment. Usually one
    # segment, or two when the weights of the imported file are used in place
    # (codegen/tasks.py): that file's weight buffer, then the compiler's own constants.
    weights: list[np.ndarray]
    arena_bytes: int
    num_streams: int
    num_events: int
    tasks: list[Task]
    inputs: list[int]
    outputs: list[int]
    # the session variables its tensors of region "variable" live in, by their `variable`
    # index: bound at load (LoadedModel), read and written in place
    variables: list[str] = dataclasses.field(default_factory=list)
    work_flops: int = 0  # of one launch (ModelSpec.work_flops)

    def __post_init__(self) -> None:
        if isinstance(self.weights, np.ndarray):  # one segment (and older offline files)
            self.weights = [self.weights]

    @property
    def weight_bytes(self) -> int:
        return sum(int(w.nbytes) for w in self.weights)

    @property
    def input_names(self) -> list[str]:
        return [self.tensors[i].name for i in self.inputs]

    @property
    def output_names(self) -> list[str]:
        return [self.tensors[i].name for i in self.outputs]

    def spec(self, name: str, variables: list[Any] | None = None) -> dict:
        """The dict the native runtime's Model constructor takes (a ModelSpec);
        `variables`: the session's `_runtime.Variable` of each name in `self.variables`."""
        return ModelSpec(name=f"{name}#{self.index}", arena_bytes=self.arena_bytes,
                         tensors=self.tensors, tasks=self.tasks, inputs=self.inputs,
                         outputs=self.outputs, num_streams=self.num_streams,
                         num_events=self.num_events, weights=self.weights,
                         work_flops=self.work_flops,
                         variables=list(variables or [])).to_dict()


_SLOT_FIELDS = tuple(f.name for f in dataclasses.fields(TensorSlot))
_TASK_FIELDS = tuple(f.name for f in dataclasses.fields(Task))


def _slot_spec(slot: TensorSlot) -> dict:
    spec = {name: getattr(slot, name) for name in _SLOT_FIELDS}
    if not spec["format"]:
        del spec["format"]
    if spec["variable"] < 0:
        del spec["variable"]
    return spec


def _task_spec(task: Task) -> dict:
    return {name: getattr(task, name) for name in _TASK_FIELDS}


@dataclasses.dataclass
class HostStep:
    name: str
    op_type: str
    attrs: dict[str, Any]
    inputs: list[str | None]
    outputs: list[str]
    # a control-flow step's bodies compiled for the device, by attribute ("then_branch",
    # "body"): the runtime loads each and the step runs it per branch taken or iteration;
    # a body not here is interpreted
    bodies: dict[str, CompiledModel] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass
class HostProgram:
    """A host partition: nodes run one by one with the numpy reference kernels."""

    index: int
    steps: list[HostStep]
    constants: dict[str, np.ndarray]
    input_names: list[str]
    output_names: list[str]


Program = DeviceProgram | HostProgram


@dataclasses.dataclass(frozen=True)
class VariableSig:
    """A session variable a compiled model reads (and, `written`, writes): what the session
    binds at load, and creates from `initial` (None: zeros) when it has none of the name."""

    name: str
    dtype: DType
    shape: tuple[int, ...]
    written: bool = False
    initial: np.ndarray | None = None

    @property
    def nbytes(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64)) * self.dtype.itemsize


@dataclasses.dataclass
class CompiledModel:
    name: str
    inputs: list[TensorSig]
    outputs: list[TensorSig]
    output_sources: list[str]  # the internal value each output is read from
    programs: list[Program]
    constants: dict[str, np.ndarray]  # graph outputs that folded to constants
    report: CompileReport
    backend: str = "host"  # the native backend its device programs load on (Target.backend)
    # producer, compiler/runtime/kernel-library versions, CPU features (engine/provenance.py);
    # None in offline files written before it was recorded
    provenance: Provenance | None = None
    variables: list[VariableSig] = dataclasses.field(default_factory=list)
    # Outputs whose rows the data decides (a NonMaxSuppression's selection and what reads
    # it, computed in the rows of its bound: prepare/bounded_rows.py): output name -> the
    # value holding how many of its leading rows are the answer (one int64), which the
    # programs make beside the outputs.
    row_counts: dict[str, str] = dataclasses.field(default_factory=dict)

    @property
    def device_bytes(self) -> int:
        """Device memory a loaded instance holds: arenas plus weights."""
        return sum(p.arena_bytes + p.weight_bytes for p in self.programs
                   if isinstance(p, DeviceProgram))


def check_dataflow(compiled: CompiledModel) -> None:
    """Every name a program, step or output reads is made before it: by the signature, a
    folded constant, an earlier program or step. The compiler builds models so; a model
    read from a file is checked here, at load, so that an inconsistent one is refused
    naming the tensor instead of failing a run with a KeyError (found by the fuzz harness)."""
    made = {s.name for s in compiled.inputs} | set(compiled.constants)

    def need(name: object, where: str, local: dict | None = None) -> None:
        if name not in made and (local is None or name not in local):
            raise InvalidGraph(f"{where} reads tensor '{bounded_text(name, 200)}', which "
                               f"nothing before it makes", graph=compiled.name, stage="load")

    indices = [p.index for p in compiled.programs]
    if len(set(indices)) != len(indices):
        raise InvalidGraph(f"program indices {indices[:16]} repeat", graph=compiled.name,
                           stage="load")
    for prog in compiled.programs:
        if isinstance(prog, DeviceProgram):
            count = len(prog.tensors)
            for i in (*prog.inputs, *prog.outputs):
                if not 0 <= i < count:
                    raise InvalidGraph(f"device program {prog.index} names tensor slot {i} "
                                       f"of {count}", graph=compiled.name, stage="load")
            for name in prog.input_names:
                need(name, f"device program {prog.index}")
            made.update(prog.output_names)
        else:  # a host program's constants are its own steps' alone
            for step in prog.steps:
                for name in step.inputs:
                    if name is not None:
                        need(name, f"host step '{bounded_text(step.name, 200)}'",
                             prog.constants)
                made.update(step.outputs)
    if len(compiled.output_sources) != len(compiled.outputs):
        raise InvalidGraph(f"{len(compiled.outputs)} outputs but {len(compiled.output_sources)} "
                           f"output sources", graph=compiled.name, stage="load")
    public = {s.name for s in compiled.outputs}
    for name, src in compiled.row_counts.items():
        if name not in public:
            raise InvalidGraph(f"row_counts names '{bounded_text(name, 200)}', which is not an "
                               f"output", graph=compiled.name, stage="load")
        need(src, f"the row count of output '{bounded_text(name, 200)}'")
    for name in compiled.output_sources:
        need(name, "the model's outputs")
