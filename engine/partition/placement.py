"""Engine placement: ask each engine, in cost order, whether it takes the node.

Policy lives in the per-engine predicates; this pass only records the first engine that
accepts and every rejection's reason (the report shows them). The device predicate lowers
the node to a runtime kernel (the op schema's `device` rule) and then asks the runtime's
kernel info store (the target's `kernel_info`, engine/target.py) whether that kernel runs
these dtypes and shapes; the device's reason is kept when it declines.
"""

from __future__ import annotations

from collections.abc import Callable

from .. import ops
from ..errors import InvalidGraph
from ..ir import Engine, Graph, Node, plain_attrs
from ..passes import PassResult
from ..target import Target
from ..target import get as get_target

# A predicate returns None when the engine accepts the node, else the reason it declines.
Predicate = Callable[[Node], "str | None"]


def device_accepts(node: Node, target: Target | None = None,
                   answers: dict | None = None) -> str | None:
    """`answers`: the kernel info store's answers so far, by question (place_nodes keeps
    one per compile: a network repeats its layers, and each question costs a native call,
    for a convolution the creation of a oneDNN primitive descriptor)."""
    schema = ops.get(node.op_type, node)
    if schema.device is None:
        return f"no device kernel for {node.op_type}"
    for v in list(node.inputs) + node.outputs:
        if v is not None and (v.meta is None or not v.meta.is_static):
            return f"tensor '{v.name}' has no static shape"
    try:
        verdict = schema.device(node, schema.attrs_of(node))
    except Exception as exc:  # a lowering that cannot handle the node declines it
        return f"device lowering failed: {exc}"
    if isinstance(verdict, str):
        return verdict
    if verdict.op in ("Copy", "Variable"):  # a task kind / a variable's bytes, not kernels
        return None
    # GE's kernel info store: the device itself says whether it runs this kernel on these
    # dtypes and shapes (and which layout it prefers, for optimize/layout.py).
    target = target or get_target()
    dtypes, shapes = [], []
    for i in verdict.inputs:
        v = node.inputs[i] if 0 <= i < len(node.inputs) else None
        dtypes.append(v.meta.dtype.value if v is not None else "")
        shapes.append(list(v.meta.shape) if v is not None else [])
    key = _question(verdict.op, dtypes, shapes, verdict.attrs) if answers is not None else None
    info = answers.get(key) if key is not None else None
    if info is None:
        try:
            info = target.kernel_info(verdict.op, dtypes, shapes, verdict.attrs)
        except Exception as exc:  # attrs the runtime cannot even read: it declines the node
            return f"runtime kernel info for '{verdict.op}' failed: {exc}"
        if key is not None:
            answers[key] = info
    if not info["supported"]:
        return f"runtime kernel '{verdict.op}': {info['reason']}"
    return None


def _question(op: str, dtypes: list, shapes: list, attrs) -> tuple | None:
    """A kernel info question as a key, or None when its attributes hold anything but
    numbers, strings and lists of them (then it is asked every time). Floats by repr:
    -0.0 and nan stay themselves."""
    attrs = attrs or {}
    if not plain_attrs(attrs):
        return None
    return op, tuple(dtypes), tuple(tuple(s) for s in shapes), repr(sorted(attrs.items()))


def host_accepts(node: Node) -> str | None:
    # The numpy reference kernels run every registered op, except those of a session's
    # variables: those live in the device's memory.
    if ops.get(node.op_type, node).stateful:
        return "a session variable lives in the device's memory; the host cannot reach it"
    return None


ENGINES: list[tuple[Engine, Predicate]] = [
    (Engine.DEVICE, device_accepts),
    (Engine.HOST, host_accepts),
]


def place_nodes(graph: Graph, engines: list[tuple[Engine, Predicate]] | None = None,
                target: Target | None = None, control: Predicate | None = None) -> PassResult:
    """`control`: the device predicate of If, Loop and Scan (the pipeline's: their bodies
    compiled for the device, codegen/control.py); without it they stay on the host."""
    if engines is None:
        answers: dict = {}

        def device(node: Node) -> str | None:
            if control is not None and node.op_type in ops.control.BODY_ATTRS:
                return control(node)
            return device_accepts(node, target, answers)

        engines = [(Engine.DEVICE, device) if e is Engine.DEVICE and accepts is device_accepts
                   else (e, accepts) for e, accepts in ENGINES]
    counts: dict[Engine, int] = {}
    for node in graph.nodes:
        rejections = []
        for engine, accepts in engines:
            reason = accepts(node)
            if reason is None:
                node.meta.engine = engine
                break
            rejections.append(f"{engine.value}: {reason}")
        else:
            raise InvalidGraph(f"no engine runs node '{node.name}' ({node.op_type}): "
                               f"{'; '.join(rejections)}", graph=graph.name, node=node.name)
        node.meta.rejections = tuple(rejections)
        counts[node.meta.engine] = counts.get(node.meta.engine, 0) + 1
    detail = ", ".join(f"{e.value} {c}" for e, c in counts.items())
    return PassResult(graph, True, detail)
