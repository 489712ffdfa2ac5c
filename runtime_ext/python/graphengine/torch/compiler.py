"""The torch.compile backend: dynamo's FX graph -> AOT autograd's ATen graph (core ATen
decompositions, inference) -> supported regions compiled by GraphEngine, the rest eager.

    compiled = torch.compile(model, backend="graphengine")          # entry point
    compiled = torch.compile(model, backend=graphengine.torch.backend(server="host:7000"))

Parameters and buffers are frozen into the compiled graphs as constants (as TensorRT's and
TorchAir's backends do): changing a weight after the first call needs `torch._dynamo.reset()`.
"""

from __future__ import annotations

import atexit
import operator
import threading
import weakref
from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.fx
from torch._decomp import core_aten_decompositions
from torch._functorch.aot_autograd import aot_module_simplified
from torch._subclasses.fake_tensor import unset_fake_temporarily
from torch.fx.passes.infra.partitioner import CapabilityBasedPartitioner
from torch.fx.passes.operator_support import OperatorSupportBase

from graphengine.errors import FailedPrecondition, InvalidArgument

from . import aten_ops, aten_shapes  # noqa: F401  (register the converters)
from .convert import FxConverter, Unsupported, fake, target_name
from .report import CompileReport, Fallback, Partition
from .tensors import run_part

_LOCK = threading.Lock()
_LAST: list[CompileReport] = []
_OPEN: weakref.WeakSet = weakref.WeakSet()  # backends with a session, closed at exit
# Nodes that compute nothing by themselves: a region of only these is left to torch.
_TRIVIAL = {operator.getitem, operator.mul, operator.add, operator.sub, operator.floordiv,
            torch.ops.aten.sym_size.int, torch.ops.aten._assert_tensor_metadata.default}


class TrainingGraphError(FailedPrecondition):
    """A graph that needs gradients: the backend compiles inference graphs only."""


class UnsupportedGraphError(InvalidArgument):
    """fallback=False and some nodes cannot be converted (each named with its reason)."""


def last_report() -> CompileReport | None:
    """The report of the FX graph compiled last by any graphengine backend in this process."""
    with _LOCK:
        return _LAST[-1] if _LAST else None


class Backend:
    """A torch.compile backend (callable as `backend(gm, example_inputs)`).

    `server`: None compiles and runs in this process (a `graphengine.Session`); "host:port"
    in a session on that server (`graphengine.Client`), opened on first use. `fallback`:
    leave nodes GraphEngine cannot take to eager torch (else refuse the graph). Other keyword
    options are the session's (`graphengine.SessionOptions`: threads, ...). `reports` holds
    one CompileReport per FX graph compiled."""

    def __init__(self, server: str | None = None, *, fallback: bool = True,
                 **options: Any) -> None:
        self.server = server
        self.fallback = fallback
        self.options = options
        self.reports: list[CompileReport] = []
        self._session: Any = None
        self._client: Any = None
        self._lock = threading.Lock()
        _OPEN.add(self)

    @property
    def session(self) -> Any:
        """The session compiled regions run in: an in-process Session, or a session on
        `server`, opened on first use."""
        with self._lock:
            if self._session is None:
                if self.server is None:
                    from graphengine.server.core.session import Session
                    self._session = Session(self.options or None)
                else:
                    from graphengine.clients.client import Client
                    self._client = Client(self.server)
                    self._session = self._client.session(self.options or None)
            return self._session

    def close(self) -> None:
        """Close the session (and the client); done at exit anyway."""
        with self._lock:
            if self._session is not None:
                self._session.close()
            if self._client is not None:
                self._client.close()
            self._session = self._client = None

    def __call__(self, gm: torch.fx.GraphModule, example_inputs: Sequence[Any]) -> Callable:
        if torch.is_grad_enabled() and any(isinstance(t, torch.Tensor) and t.requires_grad
                                           for t in example_inputs):
            names = [n.name for n, t in zip(_placeholders(gm), example_inputs)
                     if isinstance(t, torch.Tensor) and t.requires_grad]
            raise TrainingGraphError(
                f"graphengine compiles inference graphs: run the model under "
                f"torch.no_grad() or torch.inference_mode() (inputs needing gradients: "
                f"{', '.join(names[:5])}{' ...' if len(names) > 5 else ''})")
        # What aot_module_simplified passes the forward compiler: the module's own params
        # and buffers (lifted first), then dynamo's inputs; static ones are frozen.
        own = [*dict(gm.named_parameters(remove_duplicate=False)).values(),
               *dict(gm.named_buffers(remove_duplicate=False)).values()]
        full = [*own, *example_inputs]
        frozen = [i < len(own) or _is_static(t) for i, t in enumerate(full)]

        def forward_compiler(fw: torch.fx.GraphModule, fake_args: Sequence[Any]) -> Callable:
            with unset_fake_temporarily():  # the weights are read as real tensors
                return self._compile(fw, full, frozen)

        def backward_compiler(bw: torch.fx.GraphModule, _: Sequence[Any]) -> Callable:
            raise TrainingGraphError("graphengine compiles inference graphs; the backward "
                                     "graph is not supported (use torch.no_grad())")

        return aot_module_simplified(gm, example_inputs, fw_compiler=forward_compiler,
                                     bw_compiler=backward_compiler,
                                     decompositions=core_aten_decompositions())

    # ---- the forward graph ---------------------------------------------------------------
    def _compile(self, fw: torch.fx.GraphModule, full: list[Any], frozen: list[bool]
                 ) -> Callable:
        holders = _placeholders(fw)
        report = CompileReport(graph=f"graph{len(self.reports)}",
                               where=self.server or "in-process")
        report.dynamic = any(isinstance(fake(p), torch.SymInt) or (
            isinstance(fake(p), torch.Tensor) and any(isinstance(d, torch.SymInt)
                                                      for d in fake(p).shape))
            for p in holders)
        calls = [n for n in fw.graph.nodes if n.op == "call_function"]
        report.nodes = len(calls)
        if len(holders) != len(full):
            raise Unsupported(f"the forward graph has {len(holders)} inputs, the call "
                              f"{len(full)}")  # aot's calling convention changed
        # by node name: fusing the regions rebuilds the graph's nodes, names stay
        constants = {p.name: t for p, t, f in zip(holders, full, frozen)
                     if f and isinstance(t, torch.Tensor)}
        for n in fw.graph.nodes:
            if n.op == "get_attr":
                constants[n.name] = _attr(fw, n.target)
        reasons = _probe(fw, holders, constants)
        if reasons and not self.fallback:
            raise UnsupportedGraphError("graphengine cannot convert: " + "; ".join(
                f"{n.name} ({target_name(n)}): {r}" for n, r in reasons.items()))
        supported = {n for n in calls if n not in reasons}
        partitioner = CapabilityBasedPartitioner(fw, _Support(supported),
                                                 allows_single_node_partition=True)
        parts = [p for p in partitioner.propose_partitions()
                 if any(n.target not in _TRIVIAL for n in p.nodes)]
        if parts:
            fw = partitioner.fuse_partitions(parts, prefix="graphengine_")
        for node in list(fw.graph.nodes):
            if node.op == "call_module" and node.target.startswith("graphengine_"):
                self._compile_part(fw, node, constants, report, reasons)
        fw.recompile()
        report.fallbacks = [Fallback(n.name, target_name(n), r) for n, r in reasons.items()]
        report.compiled = report.nodes - len(reasons)
        self.reports.append(report)
        with _LOCK:
            _LAST[:] = [report]
        return fw

    def _compile_part(self, fw: torch.fx.GraphModule, node: torch.fx.Node,
                      constants: dict, report: CompileReport, reasons: dict) -> None:
        sub: torch.fx.GraphModule = getattr(fw, node.target)
        holders = _placeholders(sub)
        outer = dict(zip(holders, node.args))
        sub_constants = {h: constants[o.name] for h, o in outer.items()
                         if isinstance(o, torch.fx.Node) and o.name in constants}
        conv = FxConverter(f"torch_{report.graph}_{node.target}", sub_constants)
        calls = [n for n in sub.graph.nodes if n.op == "call_function"]
        try:
            conv.add_placeholders(holders)
            for n in calls:
                try:
                    conv.convert(n)
                except Unsupported as exc:
                    raise Unsupported(f"{n.name} ({target_name(n)}): {exc}") from None
            out = next(n for n in sub.graph.nodes if n.op == "output").args[0]
            multi = isinstance(out, (tuple, list))
            names = conv.output(list(out) if multi else [out])
            graph_id = self.session.add_graph(conv.g, name=conv.g.name)
        except Exception as exc:  # the region stays an eager FX module; say why
            for n in calls:
                reasons.setdefault(n, f"its region could not be compiled: {exc}")
            return
        feeds = [(h.name, i) for i, h in enumerate(holders) if h in conv.inputs]
        setattr(fw, node.target, _CompiledPart(self.session, graph_id, feeds, names, multi))
        report.partitions.append(Partition(
            node.target, graph_id, len(calls),
            tuple(f"{t.name}: {t.meta}" for t in conv.g.inputs), len(names)))


class _CompiledPart(torch.nn.Module):
    """A region of the FX graph, run as one graph of the session."""

    def __init__(self, session: Any, graph_id: int, feeds: list[tuple[str, int]],
                 outputs: list[Any], multi: bool) -> None:
        super().__init__()
        self.session, self.graph_id, self.feeds = session, graph_id, feeds
        self.outputs, self.multi = outputs, multi

    def forward(self, *args: Any) -> Any:
        return run_part(self.session, self.graph_id, self.feeds, self.outputs, self.multi, args)


class _Support(OperatorSupportBase):
    def __init__(self, supported: set[torch.fx.Node]) -> None:
        self.supported = supported

    def is_node_supported(self, submodules: Any, node: torch.fx.Node) -> bool:
        return node in self.supported


def _probe(fw: torch.fx.GraphModule, holders: list[torch.fx.Node], constants: dict
           ) -> dict[torch.fx.Node, str]:
    """Each call node converted on its own (inputs it cannot get become graph inputs):
    the nodes that fail, with why."""
    attrs = [n for n in fw.graph.nodes if n.op == "get_attr"]
    conv = FxConverter("probe", {n: constants[n.name] for n in holders + attrs
                                 if n.name in constants}, probe=True)
    conv.add_placeholders(holders + attrs)
    reasons: dict[torch.fx.Node, str] = {}
    for n in fw.graph.nodes:
        if n.op != "call_function":
            continue
        try:
            conv.convert(n)
        except Unsupported as exc:
            reasons[n] = str(exc)
        except Exception as exc:  # the builder refused it: shapes, dtypes, attributes
            reasons[n] = f"{type(exc).__name__}: {exc}"
    return reasons


def _placeholders(gm: torch.fx.GraphModule) -> list[torch.fx.Node]:
    return [n for n in gm.graph.nodes if n.op == "placeholder"]


def _is_static(t: Any) -> bool:
    """A parameter or buffer dynamo passes as an input (it marks them static)."""
    return isinstance(t, torch.nn.Parameter) or getattr(
        t, "_dynamo_static_input_type", None) is not None


def _attr(gm: torch.nn.Module, target: str) -> Any:
    for part in target.split("."):
        gm = getattr(gm, part)
    return gm


@atexit.register
def _close_all() -> None:
    # dynamo's caches keep the compiled regions (and so the sessions' native models) alive
    # to the end; unload them before the interpreter tears the runtime's types down
    for b in list(_OPEN):
        b.close()


def backend(server: str | None = None, **options: Any) -> Backend:
    """A torch.compile backend compiling in this process (server=None) or in a session on
    a GraphEngine server ("host:port"); see `Backend`."""
    return Backend(server, **options)


_DEFAULT: Backend | None = None


def registered_backend(gm: torch.fx.GraphModule, example_inputs: Sequence[Any]) -> Callable:
    """`torch.compile(model, backend="graphengine")`: one in-process backend per process."""
    global _DEFAULT
    with _LOCK:
        if _DEFAULT is None:
            _DEFAULT = Backend()
    return _DEFAULT(gm, example_inputs)
