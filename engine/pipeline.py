"""GE's compile pipeline: stages 1 to 4 as named lists of passes, then the build."""

from __future__ import annotations

import dataclasses
import functools
import time
from collections.abc import Callable, Mapping, Sequence

import numpy as np

from . import (
    ops,  # noqa: F401  (registers every op schema)
    provenance,
)
from .bounds import MAX_DATA_PARALLEL, MAX_STREAMS, MemoryBudget, check_int, check_memory_budget
from .codegen import build_programs
from .codegen.control import CONTROL_OPS, NotOnDevice, plan_control
from .codegen.shared_weights import share_segments
from .errors import GraphEngineError, InvalidGraph, InvalidInput, bounded_text
from .flops import graph_flops
from .gc_pause import paused
from .host_blas import limit_blas_threads
from .ir import Dim, Engine, Graph, Node, TensorMeta, ValueKind
from .model import CompiledModel, DeviceProgram, TensorSig, VariableSig
from .ops import control
from .ops.variables import VARIABLE, WRITES, declared_meta, variable_of
from .optimize import assign_layouts, fuse, reshape_round_trips
from .optimize.batch_split import split_batch
from .optimize.layout import REGION_FORMATS
from .optimize.routed_rows import limit_routed_rows
from .optimize.subnormals import flush_subnormal_weights
from .partition import collect_partitions, partition_graph, place_nodes
from .passes import PassManager, ProgressHook, Stage
from .prepare import (
    WEIGHT_ONLY_PRODUCTS,
    bound_expert_selections,
    bound_selections,
    bounded_outputs,
    canonicalize,
    check_variables,
    deduplicate_constants,
    eliminate_common_subexpressions,
    eliminate_dead_nodes,
    eliminate_identities,
    fold_constants,
    infer_shapes,
    lower_integer_products,
    lower_weight_only_matmuls,
    order_variable_access,
    validate,
    widen_float16,
)
from .report import BodyRecord, CompileReport, PartitionRecord, PassRecord, PlacementRecord
from .target import Target
from .target import get as get_target
from .target import names as target_names


@dataclasses.dataclass(frozen=True)
class CompileOptions:
    """How a graph compiles. A session's `options` mapping, the CLI's `--option KEY=VALUE`
    and a repository model's `options` set them by name, values as strings (`"true"`,
    `"0"`); an unknown name is refused, listing the known ones.

    - `max_streams` (`1`): streams of a device program, 1..64 (the session option sets it).
    - `fold_constants` (`true`): evaluate nodes whose inputs are all constants at compile
      time.
    - `fuse` (`true`): the fusion table (Conv+BatchNorm, activation epilogues, attention,
      elementwise chains, ...) inside device partitions.
    - `layouts` (`true`): keep activations in one convolution format between TransData
      nodes.
    - `layout_format` (`auto`): that format: `auto` (nhwc: measured faster than the blocked
      formats on most depthwise CNNs too), `nhwc`, `nChw8c` or `nChw16c`.
    - `batch_split` (`true`): run memory-bound, sample-separable graphs in cache-sized
      sub-batches.
    - `data_parallel` (`0`): >= 2 splits a compute-heavy separable batch into that many
      chunks, each on a stream of its own (a session sets its device's threads; `0` off).
    - `target` (`host`): the backend compiled for (`graphengine._runtime.backends()`:
      `host`, oneDNN on the CPU; `ref`, the portable reference backend); what the device
      lacks runs on the host engine.
    - `widen_float16` (`true`): compute float16 models in float32 on the device; `false`
      keeps half precision (on the host).
    - `weight_only_products` (`bf16x2`): how weight-only 8-bit MatMuls (MatMulQWeight)
      multiply where the CPU has native bfloat16 (AMX or AVX512_BF16) and X has 8 rows or
      more: `bf16x2`, X as the sum of two bfloat16 terms (relative error <= 2^-18, about
      float32's) times the exact weights, float32 sums; `bf16`, one term (<= 2^-9, twice as
      fast); `float32`, float32 activations everywhere.
    """

    max_streams: int = 1
    fold_constants: bool = True
    fuse: bool = True
    layouts: bool = True  # keep activations in one format between TransData nodes
    # that format: "auto" (nhwc), "nhwc", "nChw8c", "nChw16c"
    layout_format: str = "auto"
    # run memory-bound separable graphs in cache-sized sub-batches (see batch_split.py)
    batch_split: bool = True
    # >= 2: split a compute-heavy separable batch into that many chunks run at once, each on
    # its own stream with one share of the threads (a session sets its device's threads)
    data_parallel: int = 0
    # the backend compiled for (engine/target.py): what placement, layout, fusion and task
    # generation may use
    target: str = "host"
    # compute float16 in float32 (prepare/widen.py): the device's kernels take float32
    widen_float16: bool = True
    # weight-only 8-bit MatMuls' products (prepare/weight_only.py): "bf16x2", "bf16",
    # "float32"
    weight_only_products: str = "bf16x2"

    def __post_init__(self) -> None:
        # Both size work before any pass runs (a stream is a worker thread and a column of
        # every vector clock; a chunk clones the graph): refused here, not after gigabytes.
        check_int("compile option 'max_streams'", self.max_streams, 1, MAX_STREAMS)
        check_int("compile option 'data_parallel'", self.data_parallel, 0, MAX_DATA_PARALLEL)
        if self.target not in target_names():
            raise InvalidInput(f"compile option 'target' must be one of {target_names()}, got "
                               f"{self.target!r}")
        if self.weight_only_products not in WEIGHT_ONLY_PRODUCTS:
            raise InvalidInput(f"compile option 'weight_only_products' must be one of "
                               f"{list(WEIGHT_ONLY_PRODUCTS)}, got {self.weight_only_products!r}")
        if self.layout_format not in REGION_FORMATS:
            raise InvalidInput(f"compile option 'layout_format' must be one of "
                               f"{list(REGION_FORMATS)}, got {self.layout_format!r}")
    lint: bool = False  # lint the graph after every pass (tests turn it on)

    @classmethod
    def from_mapping(cls, values: Mapping[str, object] | None) -> CompileOptions:
        if not values:
            return cls()
        fields = {f.name: f.type for f in dataclasses.fields(cls)}
        kw = {}
        for key, raw in values.items():
            if key not in fields:
                raise InvalidInput(f"unknown compile option '{key}'; known: {sorted(fields)}")
            kw[key] = _coerce(key, raw, getattr(cls(), key))
        return cls(**kw)


def _coerce(key: str, raw: object, default: object) -> object:
    if isinstance(default, bool):
        if isinstance(raw, str):
            if raw.lower() not in ("true", "false", "1", "0"):
                raise InvalidInput(f"compile option '{key}' must be true or false, got {raw!r}")
            return raw.lower() in ("true", "1")
        return bool(raw)
    if isinstance(default, int):
        try:
            return int(raw)  # type: ignore[arg-type]
        except (TypeError, ValueError):
            raise InvalidInput(f"compile option '{key}' must be an integer, got {raw!r}") from None
    return raw


def prepare_stage(options: CompileOptions, budget: MemoryBudget | None = None,
                  target: Target | None = None) -> Stage:
    """`target` is the device the int8 kernels are asked of (None: the default one)."""
    passes = [infer_shapes]
    if budget is not None:  # right after inference: before anything folds or allocates
        passes.append(functools.partial(check_memory_budget, budget=budget))
    if options.widen_float16:
        passes.append(widen_float16)
    passes += [canonicalize, functools.partial(lower_integer_products, target=target),
               functools.partial(lower_weight_only_matmuls, target=target,
                                 products=options.weight_only_products),
               eliminate_identities]
    if options.fold_constants:
        passes.append(fold_constants)
    # subnormal weights: before fusion folds them into normal-sized but still negligible
    # ones (again after it, for those the folding makes)
    passes += [flush_subnormal_weights, deduplicate_constants,
               eliminate_common_subexpressions, eliminate_dead_nodes,
               functools.partial(bound_selections, target=target), bound_expert_selections]
    return Stage("prepare", passes, repeat_until_stable=True, settle=infer_shapes)


def stages(options: CompileOptions, budget: MemoryBudget | None = None,
           target: Target | None = None, graph_name: str = "") -> list[Stage]:
    """Stages 1-3; `target` (default: the one `options.target` names) is what placement,
    fusion and layout may use."""
    target = target or get_target(options.target)
    control = functools.partial(_place_control, options=options, budget=budget,
                                graph_name=graph_name)
    return [
        Stage("validate", [validate]),
        prepare_stage(options, budget, target),
        # reads of a session variable before its writes (ordering inputs, snapshots):
        # before placement, so that partitions inherit the order
        Stage("variables", [check_variables, order_variable_access]),
        Stage("partition", [functools.partial(place_nodes, target=target, control=control),
                            partition_graph]),
        Stage("optimize", [reshape_round_trips]
              + ([functools.partial(fuse, target=target)] if options.fuse else [])
              + [flush_subnormal_weights, limit_routed_rows,
                 functools.partial(split_batch, enabled=options.batch_split,
                                   parallel=options.data_parallel),
                 functools.partial(assign_layouts, enabled=options.layouts,
                                   fmt=options.layout_format, target=target)]),
    ]


def _given_shape(graph: Graph, name: str, shape: object) -> tuple[int, ...]:
    """A shape from a request: a sequence of integers (numpy's included), else InvalidInput."""
    if isinstance(shape, (str, bytes)) or not isinstance(shape, Sequence | np.ndarray):
        raise InvalidInput(f"input_shapes['{name}'] must be a list of dims, got "
                           f"{type(shape).__name__}", graph=graph.name, tensor=name)
    dims = []
    for d in shape:
        if isinstance(d, (bool, np.bool_)) or not isinstance(d, (int, np.integer)):
            raise InvalidInput(f"input_shapes['{name}']: dim {d!r} is not an integer",
                               graph=graph.name, tensor=name)
        dims.append(int(d))
    return tuple(dims)


def requested_shapes(graph: Graph, given: Mapping[str, Sequence[int]] | None
                     ) -> dict[str, tuple[Dim, ...] | None]:
    """Every input's shape for a compile asked for with `given` (some inputs' shapes): a
    given shape as it is (checked by bind_shapes), an input left out takes its declared
    shape with the symbols the given ones bind ({"x": (2, 3)} binds "b" in x[b,3] and so
    y[b,3] becomes (2, 3)). An input left out whose shape still has a symbol no given input
    binds is the caller's error, named (the CLI compiles for the shapes of an input file)."""
    given = dict(given or {})
    names = {v.name for v in graph.inputs}
    for name in given:
        if name not in names:
            raise InvalidInput(f"input_shapes names '{name}', which is not an input of the "
                               f"graph; inputs are {sorted(names)}", graph=graph.name,
                               tensor=str(name))
    bound: dict[str, int] = {}
    for v in graph.inputs:
        if v.name in given and v.meta.shape is not None:
            shape = _given_shape(graph, v.name, given[v.name])
            given[v.name] = shape
            for d, s in zip(v.meta.shape, shape):
                if isinstance(d, str):
                    bound.setdefault(d, s)
    shapes: dict[str, tuple[Dim, ...] | None] = dict(given)
    for v in graph.inputs:
        if v.name in given:
            continue
        declared = v.meta.shape
        if not given:  # nothing asked: the declared signature, symbols and all
            shapes[v.name] = declared
            continue
        filled = None if declared is None else tuple(
            bound.get(d, d) if isinstance(d, str) else d for d in declared)
        if filled is None or any(isinstance(d, str) for d in filled):
            raise InvalidInput(f"input_shapes lacks input '{v.name}' (declared {v.meta}), "
                               f"whose shape the given inputs do not fix; give a shape for "
                               f"every input with symbolic dims", graph=graph.name,
                               tensor=v.name)
        shapes[v.name] = filled
    return shapes


def bind_shapes(graph: Graph, shapes: Mapping[str, Sequence[int]] | None) -> Graph:
    """A copy of the graph with concrete shapes for the named inputs."""
    g = graph.copy()
    for name, shape in (shapes or {}).items():
        v = g.values.get(name)
        if v is None or v.kind is not ValueKind.INPUT:
            raise InvalidInput(f"input_shapes names '{name}', which is not an input of the "
                               f"graph; inputs are {[i.name for i in g.inputs]}",
                               graph=g.name, tensor=name)
        declared = v.meta.shape
        shape = _given_shape(g, name, shape)
        if declared is not None and (len(declared) != len(shape) or any(
                isinstance(d, int) and d != s for d, s in zip(declared, shape))):
            raise InvalidInput(f"input '{name}': shape {list(shape)} does not fit the declared "
                               f"{v.meta}", graph=g.name, tensor=name)
        if any(s < 0 for s in shape):
            raise InvalidInput(f"input '{name}': negative dimension in {list(shape)}",
                               graph=g.name, tensor=name)
        v.meta = TensorMeta(v.meta.dtype, shape)
    for v in g.values.values():  # drop inferred metas so they are redone with the new shapes
        if v.kind is ValueKind.INTERMEDIATE:
            v.meta = None
    return g


@paused
def analyze(graph: Graph, options: CompileOptions | None = None) -> CompileReport:
    """Validate and infer shapes (symbolic dims allowed) without building anything.

    The graph's values take their inferred types (intermediates too: a compile's
    bind_shapes drops those before it infers at concrete shapes); nothing else of it
    changes. A graph with session variables is analyzed on a copy (checking them merges
    duplicate declarations).
    """
    options = options or CompileOptions()
    pm = PassManager(lint=options.lint)
    # In place, not on a copy: the copy (3-5 ms for a 1,000-node graph, and its cycles for
    # the collector afterwards) was ~5% of a small model's add_graph + compile + first run.
    # Validation and inference write nothing but value metas and inference's memo.
    in_place = not any(n.op_type == VARIABLE for n in graph.nodes)
    g = graph if in_place else graph.copy()
    start = time.perf_counter()
    g = pm.run_stage(Stage("validate", [validate]), g)
    g = pm.run_stage(Stage("prepare", [infer_shapes, check_variables]), g)
    # The outputs take the inferred types: a producer's declared output shapes are hints it
    # may get wrong (tf2onnx names the outputs' batch `unk__215` where the inputs say
    # `unk__214`; older producers write -1), and whoever asks which outputs follow the
    # batch (gears) must get what the graph computes.
    if not in_place:
        for declared, inferred in zip(graph.outputs, g.outputs):
            declared.meta = inferred.meta
    return CompileReport(graph=graph.name, passes=pm.records, nodes_before=len(graph.nodes),
                         nodes_after=len(g.nodes), total_seconds=time.perf_counter() - start)


@paused
def compile_graph(graph: Graph, options: CompileOptions | None = None,
                  input_shapes: Mapping[str, Sequence[int]] | None = None,
                  on_pass: ProgressHook | None = None, budget: MemoryBudget | None = None,
                  on_stage: Callable[[str, Graph], None] | None = None,
                  pin_inputs: bool = False, validated: bool = False) -> CompiledModel:
    """Run stages 1-4 on a copy of `graph`; the graph itself is left untouched.

    `budget`: the bytes the caller can still load; a graph whose largest tensor at these
    shapes exceeds it is refused right after shape inference (bounds.check_memory_budget).

    `on_pass(stage, record)` is called as each stage starts (record None) and after every
    pass, for progress displays. `on_stage(stage, graph)` is handed the compile's own graph
    after each of stages 1-3 (the same object, changed in place by the stages after it: copy
    it to keep that stage's state; never change it): `graphengine dump-graph` draws it.

    `pin_inputs` keeps every device program's inputs live to its end (a control-flow body
    the enclosing program expands, codegen/control.py).

    `validated`: `analyze` validated this very graph and nothing has changed it since (a
    session's graphs: analyzed when added, never changed after), so stage 1's validation is
    not run again.
    """
    options = options or CompileOptions()
    # constant folding's numpy matmuls: a threaded BLAS's pool spun on into the first run
    limit_blas_threads(1)
    start = time.perf_counter()
    output_names = [v.name for v in graph.outputs]
    g = bind_shapes(graph, input_shapes)
    for v in g.inputs:
        if v.meta is None or not v.meta.is_static:
            raise InvalidInput(f"input '{v.name}' has symbolic shape {v.meta}: give a concrete "
                               f"shape to compile", graph=g.name, tensor=v.name)
    pm = PassManager(lint=options.lint, on_pass=on_pass)
    flops = 0.0
    target = get_target(options.target)
    source_ops: dict[str, str] = {}  # node name -> op type before stage 3 (fusion)
    for stage in stages(options, budget, target, graph.name):
        if validated and stage.name == "validate":
            t0 = time.perf_counter()
            g.toposort()  # the order validation would have checked (analysis sorted a copy
            # of a graph with variables, not the graph)
            pm.record(PassRecord("validate", "validate", time.perf_counter() - t0, False,
                                 "validated when the graph was added"))
            continue
        g = pm.run_stage(stage, g)
        if stage.name == "prepare":  # shapes known, constants folded, nothing fused yet
            flops = graph_flops(g)
        elif stage.name == "partition":
            source_ops = {n.name: n.op_type for n in g.nodes}
        if on_stage:
            on_stage(stage.name, g)
    if on_pass:
        on_pass("build", None)
    t0 = time.perf_counter()
    bodies: list[BodyRecord] = []
    programs, memory, ntasks = build_programs(
        g, options.max_streams, target,
        functools.partial(_compile_bodies, options=options, budget=budget, records=bodies,
                          graph_name=graph.name), pin_inputs=pin_inputs)
    pm.record(_record("build", "plan_memory+generate_tasks", t0, memory))
    share_segments(graph, programs)
    bodies += [BodyRecord(n.name, n.op_type, key, True,
                          f"on the device: {m.report.tasks} tasks between labels and jumps "
                          f"in the enclosing device program")
               for n in g.nodes if n.meta.engine is Engine.DEVICE and n.op_type in CONTROL_OPS
               for key, m in n.meta.bodies.items()]
    report = CompileReport(
        graph=graph.name, passes=pm.records, fusions=list(g.fusions),
        memory=memory, tasks=ntasks,
        streams=max((p.num_streams for p in programs if isinstance(p, DeviceProgram)), default=0),
        events=sum(p.num_events for p in programs if isinstance(p, DeviceProgram)),
        nodes_before=len(graph.nodes), nodes_after=len(g.nodes), flops=flops, bodies=bodies)
    for part in collect_partitions(g):
        report.partitions.append(PartitionRecord(
            part.index, part.engine.value, [n.name for n in part.nodes],
            [v.name for v in part.inputs], [v.name for v in part.outputs]))
    report.placements = [PlacementRecord(n.name, n.op_type, n.meta.engine.value,
                                         list(n.meta.rejections), fused_ops(n, source_ops))
                         for n in g.nodes]
    constants = {v.name: v.const for v in g.outputs if v.is_constant}
    for v in g.outputs:
        if v.meta is None:
            raise InvalidGraph(f"output '{v.name}' has no inferred type", graph=g.name)
    row_counts = bounded_outputs(g, output_names)
    public = g.outputs[:len(output_names)]  # the rest: row counts (prepare/bounded_rows.py)
    compiled = CompiledModel(
        name=graph.name,
        inputs=[TensorSig(v.name, v.meta.dtype, tuple(v.meta.shape)) for v in g.inputs],
        outputs=[TensorSig(n, v.meta.dtype, _declared_rows(graph, k, v.meta.shape)
                           if n in row_counts else tuple(v.meta.shape) if v.meta.shape else ())
                 for k, (n, v) in enumerate(zip(output_names, public))],
        output_sources=[v.name for v in public], programs=programs, constants=constants,
        report=report, backend=target.backend, row_counts=row_counts,
        provenance=provenance.record(
            graph.producer, (t.op for p in programs if isinstance(p, DeviceProgram)
                             for t in p.tasks if t.kind == "kernel"),
            target.backend, _kernel_library(target.backend)),
        variables=variable_sigs(g))
    if on_stage is None:  # nobody was handed g: it is the compile's own, and done with
        g.release()
    report.total_seconds = time.perf_counter() - start
    return compiled


def _declared_rows(graph: Graph, k: int, shape: tuple) -> tuple:
    """Output k's shape as the data decides it: the bound's rows are the graph's declared
    leading dim (a symbol) again."""
    meta = graph.outputs[k].meta
    first = meta.shape[0] if meta is not None and meta.shape else None
    return (first if isinstance(first, str) else f"{graph.outputs[k].name}_rows",
            *shape[1:])


def variable_sigs(graph: Graph) -> list[VariableSig]:
    """The session variables `graph` declares (Variable nodes), in node order; `written`
    for those it writes."""
    written = {variable_of(n.outputs[0]) for n in graph.nodes if n.op_type in WRITES}
    sigs: dict[str, VariableSig] = {}
    for n in graph.nodes:
        if n.op_type == VARIABLE and n.attrs["variable"] not in sigs:
            meta = declared_meta(n)
            value = n.attrs.get("value")
            sigs[n.attrs["variable"]] = VariableSig(
                n.attrs["variable"], meta.dtype, tuple(meta.shape),
                n.attrs["variable"] in written, None if value is None else np.asarray(value))
    return list(sigs.values())


def _kernel_library(backend: str) -> str:
    """The kernel library a native backend reports ("oneDNN 3.2.0"), or ""."""
    from .runtime import default_device

    try:
        return str(default_device(backend=backend).caps.get("library", ""))
    except GraphEngineError:  # a compile-only target without a device
        return ""


def fused_ops(node: Node, source_ops: Mapping[str, str]) -> list[str]:
    """The op types of the source nodes a fused node computes, in the order they were folded
    in (the node's own first when it was one of them); [] for a node nothing was fused into.
    Nodes that fusion made and a later row folded again are left out: their sources are
    listed too (`meta.fused` keeps them)."""
    if not node.meta.fused:
        return []
    names = ((node.name,) if node.name in source_ops else ()) + node.meta.fused
    return [source_ops[name] for name in names if name in source_ops]


def _compile_body(node: Node, key: str, metas: list[TensorMeta], options: CompileOptions,
                  budget: MemoryBudget | None, graph_name: str,
                  pin_inputs: bool = False) -> CompiledModel:
    """Body `key` of a control-flow node compiled as a model of its own for the signature
    `metas` (control.body_signatures): enclosing values that are constants become its own."""
    names = list(node.attrs.get("_outer") or [])
    passed = node.inputs[len(node.inputs) - len(names):] if names else ()
    constants = {name: v.const for name, v in zip(names, passed)
                 if v is not None and v.is_constant}
    body = node.attrs[key].copy()
    body.name = f"{graph_name}/{node.name}/{key}"
    for v, meta in zip(list(body.inputs), metas):
        v.meta = meta
        if v.name in constants:  # the body's own constant: folded, packed at load
            body.input_as_constant(v, constants[v.name])
    return compile_graph(body, options, budget=budget, pin_inputs=pin_inputs)


def _place_control(node: Node, *, options: CompileOptions, budget: MemoryBudget | None,
                   graph_name: str) -> str | None:
    """Placement's device predicate for an If, Loop or Scan: None when its bodies compile
    for the device whole (one single-stream device program each, static per-iteration
    types, codegen/control.plan_control), so that it runs there as labels and jumps; else
    why not (it stays a host step). The bodies compiled are kept (`node.meta.bodies`) for
    the expansion, or for the host step."""
    for v in [*node.inputs, *node.outputs]:
        if v is not None and (v.meta is None or not v.meta.is_static):
            return f"tensor '{v.name}' has no static shape"
    wanted = control.body_signatures(node)
    body_options = dataclasses.replace(options, max_streams=1, data_parallel=0)
    node.meta.bodies = {}
    for key in control.BODY_ATTRS[node.op_type]:
        if key not in wanted:
            return f"body '{key}': its inputs have no single static signature"
        try:
            node.meta.bodies[key] = _compile_body(node, key, wanted[key], body_options,
                                                  budget, graph_name, pin_inputs=True)
        except GraphEngineError as exc:
            return f"body '{key}': compiling it failed: {bounded_text(exc.message, 300)}"
    try:
        plan_control(node, node.meta.bodies)
    except NotOnDevice as exc:
        return str(exc)
    return None


def _compile_bodies(node: Node, *, options: CompileOptions, budget: MemoryBudget | None,
                    records: list[BodyRecord], graph_name: str) -> dict[str, CompiledModel]:
    """A host control-flow node's bodies compiled, each for the one signature it runs with
    (see control.body_signatures), as a model of its own: the node's step then runs device
    programs per branch or iteration instead of interpreting the body node by node. A body
    that cannot be compiled so is interpreted, and the record says why. Bodies placement
    compiled (single-stream) are reused when the options ask for one stream."""
    wanted = control.body_signatures(node)
    compiled: dict[str, CompiledModel] = {}
    for key in control.BODY_ATTRS.get(node.op_type, ()):
        if key not in wanted:
            records.append(BodyRecord(node.name, node.op_type, key, False,
                                      "its inputs have no single static signature"))
            continue
        model = node.meta.bodies.get(key) if options.max_streams == 1 else None
        try:
            model = model or _compile_body(node, key, wanted[key], options, budget, graph_name)
        except GraphEngineError as exc:  # e.g. a branch these shapes never take
            records.append(BodyRecord(node.name, node.op_type, key, False,
                                      f"compiling it failed: {bounded_text(exc.message, 300)}"))
            continue
        changed = [o for i, o in control.body_carries(node)
                   if o >= len(model.outputs) or i >= len(model.inputs) or
                   (model.outputs[o].dtype, tuple(model.outputs[o].shape)) !=
                   (model.inputs[i].dtype, tuple(model.inputs[i].shape))]
        if changed:
            records.append(BodyRecord(node.name, node.op_type, key, False,
                                      f"carried state {changed[0]} changes type between "
                                      f"iterations"))
            continue
        device = [p for p in model.programs if isinstance(p, DeviceProgram)]
        records.append(BodyRecord(node.name, node.op_type, key, True,
                                  f"{len(device)} device and {len(model.programs) - len(device)}"
                                  f" host programs, {model.report.tasks} tasks"))
        compiled[key] = model
    return compiled


def _record(stage: str, name: str, t0: float, memory) -> PassRecord:
    return PassRecord(stage, name, time.perf_counter() - t0, True,
                      f"arena {memory.arena_bytes} B, lower bound {memory.lower_bound_bytes} B")


__all__ = ["CompileOptions", "compile_graph", "analyze", "stages"]
