"""Fusion row: chains of elementwise ops become one EltwiseChain kernel.

A chain is a run of device nodes, each reading the previous one's output (which nobody else
reads) as its running value: unary ops (Relu, Sigmoid, Tanh, Gelu, Clip with constant
bounds, ...) and Add/Sub/Mul/Div whose other operand has the output's shape or one element
(Sub/Div only with the running value on the left), or, where the device's chain kernel takes
it (`_channels_ok`), a constant with one value per channel (axis 1) of an output of rank 3 or
5+, which the layout pass leaves plain: a GroupNorm's affine and GELU after its
normalization (wav2vec2's first feature layer), one pass instead of three. The native kernel
runs the first step as a oneDNN primitive and the rest as its post-ops: one pass over memory
instead of one per op. The row runs after the epilogue rows, so an activation that a Conv
or MatMul can absorb goes there first. The whole chain is fused at its last node, so the
report shows one line per chain.
"""

from __future__ import annotations

import dataclasses
import functools

import numpy as np

from ...dtypes import DType
from ...ir import Graph, Node, Value
from ...ops.chain import BINARY_STEPS, STEP_OPS
from ...target import Target
from ...target import get as get_target
from .match import Fusion, on_device, rename_output, sole_producer

_COMMUTATIVE = {"Add", "Mul"}
_OPS = STEP_OPS - {"GeluTanh"}  # ONNX op types that can be a step


@dataclasses.dataclass
class _Step:
    op: str
    running: Value  # the value the step transforms
    operand: Value | None
    alpha: float
    beta: float


def _f32(v: Value | None) -> bool:
    return v is not None and v.meta is not None and v.meta.is_static and \
        v.meta.dtype is DType.FLOAT32


def _step(node: Node, running: Value | None = None) -> _Step | None:
    """`node` as one chain step (with `running` as its running value if given), or None."""
    op = node.op_type
    if op not in STEP_OPS or len(node.outputs) != 1 or not _f32(node.outputs[0]):
        return None
    out = node.outputs[0]
    alpha = beta = 0.0
    if op in BINARY_STEPS:
        if len(node.inputs) != 2 or not all(_f32(v) for v in node.inputs):
            return None
        a, b = node.inputs
        if running is None:  # the input of the output's shape (a chain's first step)
            running = b if op in _COMMUTATIVE and tuple(a.meta.shape) != tuple(
                out.meta.shape) else a
        if running is b and op in _COMMUTATIVE and running is not a:
            a, b = b, a
        if running is not a:
            return None
        operand = b
        if operand.meta.numel != 1 and tuple(operand.meta.shape) != tuple(out.meta.shape) \
                and not _per_channel(operand, out):
            return None
    else:
        x = node.input(0)
        if not _f32(x) or (running is not None and running is not x):
            return None
        running, operand = x, None
        if op == "Clip":
            lo, hi = node.input(1), node.input(2)
            if any(v is not None and (not v.is_constant or np.asarray(v.const).size != 1)
                   for v in (lo, hi)):
                return None
            alpha = float(np.asarray(lo.const).reshape(-1)[0]) if lo is not None else -np.inf
            beta = float(np.asarray(hi.const).reshape(-1)[0]) if hi is not None else np.inf
        elif op == "LeakyRelu":
            alpha = float(node.attrs.get("alpha", 0.01))
        elif op in ("Swish", "Elu"):
            alpha = float(node.attrs.get("alpha", 1.0))
        elif op == "HardSigmoid":
            alpha = float(node.attrs.get("alpha", 0.2))
            beta = float(node.attrs.get("beta", 0.5))
        elif op == "Gelu" and node.attrs.get("approximate", "none") == "tanh":
            op = "GeluTanh"
        elif op == "Gelu" and node.attrs.get("approximate", "none") != "none":
            return None
    if tuple(running.meta.shape) != tuple(out.meta.shape):
        return None  # the running value would broadcast: not an in-place chain
    return _Step(op, running, operand, alpha, beta)


def _per_channel(operand: Value, out: Value) -> bool:
    """A constant with one value per channel (axis 1, C > 1) of `out`, which the chain
    kernel reads as [1, C, 1] against [N, C, rest] when the device takes it. Not of a 4-D
    output: that is a convolution region's (NHWC or blocked), where a per-channel Mul or Add
    runs in the region's format and a chain that took it would run plain between two
    conversions."""
    shape, y = tuple(operand.meta.shape), tuple(out.meta.shape)
    if not operand.is_constant or len(y) < 3 or len(y) == 4 or len(shape) > len(y) \
            or y[1] < 2:
        return False
    padded = (1,) * (len(y) - len(shape)) + shape
    return all(d == (y[1] if i == 1 else 1) for i, d in enumerate(padded)) and _channels_ok()


def _channels_ok() -> bool:
    return _takes_channels(get_target())


@functools.lru_cache(maxsize=8)
def _takes_channels(target: Target) -> bool:
    """Whether the target's chain kernel takes a per-channel operand (a runtime built before
    it did refuses the probe: its chains then stop at such a step, as before)."""
    if not target.runs("EltwiseChain"):
        return False
    info = target.kernel_info("EltwiseChain", ["float32", "float32"], [[1, 4, 3], [4, 1]],
                              {"ops": "Mul", "operands": [1], "alphas": [0.0], "betas": [0.0]})
    return bool(info.get("supported"))


def _link(graph: Graph, node: Node) -> tuple[Node, _Step] | None:
    """The chainable node `node` continues, and node's step with that node's output as
    its running value; None when node starts a chain."""
    for running in dict.fromkeys(v for v in node.inputs if v is not None):
        prev = sole_producer(graph, running, _OPS)
        if prev is None or not on_device(prev, node) or not any(
                _step(prev, r) is not None for r in prev.inputs if r is not None):
            continue
        step = _step(node, running)
        if step is not None:
            return prev, step
    return None


def match_chain(graph: Graph, node: Node):
    """At the last node of a chain of two or more steps: the chain's nodes and steps."""
    if node.op_type not in _OPS or _step(node) is None:
        return None
    out = node.outputs[0]
    if len(out.users) == 1 and out not in graph.outputs:
        reader = out.users[0]
        link = _link(graph, reader) if reader.op_type in _OPS else None
        if link is not None and link[0] is node:
            return None  # the chain goes on: fuse it at its end
    nodes, steps = [node], []
    cur = node
    while (link := _link(graph, cur)) is not None:
        prev, step = link
        steps.insert(0, step)
        nodes.insert(0, prev)
        cur = prev
    first = _step(nodes[0])
    if len(nodes) < 2 or first is None:
        return None
    steps.insert(0, first)
    return nodes, steps


def rewrite_chain(graph: Graph, node: Node, ctx) -> str:
    nodes, steps = ctx
    start = steps[0].running
    inputs: list[Value] = [start]
    operands = []
    for s in steps:
        if s.operand is None:
            operands.append(-1)
            continue
        if s.operand not in inputs:
            inputs.append(s.operand)
        operands.append(inputs.index(s.operand))
    final = node.outputs[0]
    chain = graph.add_node("EltwiseChain", inputs, attrs={
        "ops": [s.op for s in steps], "operands": operands,
        "alphas": [s.alpha for s in steps], "betas": [s.beta for s in steps]},
        name=graph.unique_name("eltwise_chain"), after=node)
    chain.meta.engine, chain.meta.partition = node.meta.engine, node.meta.partition
    chain.outputs[0].meta = final.meta
    chain.meta.fused = tuple(name for n in nodes for name in (n.name, *n.meta.fused))
    graph.replace_all_uses(final, chain.outputs[0])
    for n in reversed(nodes):
        graph.remove_node(n)
    rename_output(graph, chain.outputs[0], final.name)
    return f"EltwiseChain({'+'.join(s.op for s in steps)}): {len(nodes)} nodes -> {chain.name}"


ROW = Fusion("eltwise_chain", match_chain, rewrite_chain, produces=("EltwiseChain",))
