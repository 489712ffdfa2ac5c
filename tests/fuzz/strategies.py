"""Shared generators for the fuzz tests: random valid graphs, their three encodings (IR Graph,
ONNX, GraphDef), a numpy reference run, and the checks every fuzz test makes.

A graph is first drawn as a `Spec` (inputs, constants, nodes, outputs), with every tensor's
shape computed here from the op's rules, independently of the engine's shape inference; the
encodings are built from the spec, so one draw serves every importer. Values are float32
(Gather indices int64); tensors stay small (at most MAX_NUMEL elements) so a compile takes
tens of milliseconds.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import signal
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper

from graphengine.engine.dtypes import DType
from graphengine.engine.errors import ErrorCode, GraphEngineError
from graphengine.engine.ir import Graph, TensorMeta
from graphengine.engine.ops import run_node

MAX_NUMEL = 2048
ONNX_OPSET = 20
# The codes a rejected input may carry: the caller's fault, or a limit; never INTERNAL.
DOMAIN_CODES = {ErrorCode.INVALID_ARGUMENT, ErrorCode.NOT_FOUND, ErrorCode.RESOURCE_EXHAUSTED,
                ErrorCode.FAILED_PRECONDITION, ErrorCode.UNIMPLEMENTED}
EXAMPLE_SECONDS = 20  # a hard wall per example (a hang is a finding, not a slow test)


# ---- the spec ---------------------------------------------------------------------------
@dataclasses.dataclass
class NodeSpec:
    op: str
    inputs: list[str]  # "" = an omitted optional input
    outputs: list[str]
    attrs: dict[str, Any]


@dataclasses.dataclass
class Spec:
    inputs: dict[str, tuple[int, ...]]  # float32 graph inputs
    consts: dict[str, np.ndarray]
    nodes: list[NodeSpec]
    outputs: list[str]
    shapes: dict[str, tuple[int, ...]]  # every tensor's shape, computed by the generator
    seed: int = 0

    def feeds(self, seed: int | None = None) -> dict[str, np.ndarray]:
        rng = np.random.default_rng(self.seed if seed is None else seed)
        return {k: rng.standard_normal(s).astype(np.float32) for k, s in self.inputs.items()}

    def describe(self) -> str:
        lines = [f"inputs {self.inputs}"]
        lines += [f"const {k}: {v.dtype}{list(v.shape)}" for k, v in self.consts.items()]
        lines += [f"{n.outputs} = {n.op}({n.inputs}) {n.attrs}" for n in self.nodes]
        lines.append(f"outputs {self.outputs}")
        return "\n".join(lines)


class _Builder:
    """The state of one draw: tensors so far, with their shapes."""

    def __init__(self, draw: Callable, rng: np.random.Generator) -> None:
        self.draw = draw
        self.rng = rng
        self.spec = Spec({}, {}, [], [], {})
        self.count = 0

    def name(self, prefix: str) -> str:
        self.count += 1
        return f"{prefix}{self.count}"

    def const(self, array: np.ndarray, prefix: str = "c") -> str:
        name = self.name(prefix)
        self.spec.consts[name] = array
        self.spec.shapes[name] = tuple(array.shape)
        return name

    def weights(self, *shape: int, scale: float | None = None) -> str:
        fan = max(1, int(np.prod(shape[1:])) if len(shape) > 1 else 1)
        w = self.rng.standard_normal(shape) * (scale if scale is not None else fan ** -0.5)
        return self.const(w.astype(np.float32), "w")

    def ints(self, values: Sequence[int]) -> str:
        return self.const(np.asarray(values, np.int64), "i")

    def node(self, op: str, inputs: list[str], shapes: Sequence[tuple[int, ...]],
             **attrs: Any) -> list[str]:
        outs = [self.name("t") for _ in shapes]
        self.spec.nodes.append(NodeSpec(op, inputs, outs, attrs))
        for o, s in zip(outs, shapes):
            self.spec.shapes[o] = tuple(int(d) for d in s)
        return outs

    def activations(self) -> list[str]:
        """Tensors a node may read: graph inputs and node outputs (not constants)."""
        return [*self.spec.inputs, *(o for n in self.spec.nodes for o in n.outputs)]


def _f32(lo: float, hi: float) -> st.SearchStrategy[float]:
    """A float in [lo, hi] that float32 holds exactly (attributes are float32 on the wire)."""
    return st.floats(lo, hi).map(lambda v: float(np.float32(v)))


def _numel(shape: Sequence[int]) -> int:
    return int(np.prod(shape, dtype=np.int64)) if shape else 1


def _fits(shape: Sequence[int]) -> bool:
    return all(d >= 1 for d in shape) and _numel(shape) <= MAX_NUMEL


# ---- one op each: (builder, input tensor) -> output names, or None when it does not apply --
UNARY = ["Relu", "Sigmoid", "Tanh", "Abs", "Neg", "Erf", "Softsign", "Identity"]
UNARY_ALPHA = {"LeakyRelu": (0.01, 0.3), "Elu": (0.5, 1.5), "Selu": None,
               "HardSigmoid": None, "Celu": (0.5, 2.0)}
BINARY = ["Add", "Sub", "Mul", "Max", "Min", "Div"]
REDUCE = ["ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceSumSquare", "ReduceL2"]


def _unary(b: _Builder, x: str) -> list[str] | None:
    op = b.draw(st.sampled_from(UNARY + list(UNARY_ALPHA) + ["Gelu", "Clip"]))
    shape = b.spec.shapes[x]
    if op == "Clip":
        lo = b.draw(_f32(-2, 0))
        hi = b.draw(_f32(0, 2))
        ins = [x, b.const(np.float32(lo)), b.const(np.float32(hi))]
        if b.draw(st.booleans()):
            ins[b.draw(st.sampled_from([1, 2]))] = ""
        while ins[-1] == "":
            ins.pop()
        return b.node("Clip", ins, [shape])
    attrs: dict[str, Any] = {}
    if op in UNARY_ALPHA and UNARY_ALPHA[op] is not None and b.draw(st.booleans()):
        attrs["alpha"] = b.draw(_f32(*UNARY_ALPHA[op]))
    if op == "Gelu" and b.draw(st.booleans()):
        attrs["approximate"] = "tanh"
    return b.node(op, [x], [shape], **attrs)


def _broadcast_shape(b: _Builder, shape: tuple[int, ...]) -> tuple[int, ...]:
    """A shape that broadcasts to `shape` (a suffix, with some dims made 1)."""
    k = b.draw(st.integers(0, len(shape)))
    suffix = list(shape[len(shape) - k:])
    return tuple(1 if b.draw(st.booleans()) else d for d in suffix)


def _binary(b: _Builder, x: str) -> list[str] | None:
    op = b.draw(st.sampled_from(BINARY))
    shape = b.spec.shapes[x]
    same = [t for t in b.activations() if b.spec.shapes[t] == shape]
    if op != "Div" and b.draw(st.booleans()):
        other = b.draw(st.sampled_from(same))  # may be x itself
    else:
        cshape = _broadcast_shape(b, shape)
        c = b.rng.standard_normal(cshape).astype(np.float32)
        if op == "Div":  # denominators away from zero
            c = (np.sign(c) + (c == 0)) * (0.5 + np.abs(c)).astype(np.float32)
        other = b.const(np.asarray(c, np.float32))
    ins = [x, other] if b.draw(st.booleans()) or op == "Div" else [other, x]
    return b.node(op, ins, [shape])


def _matmul(b: _Builder, x: str) -> list[str] | None:
    shape = b.spec.shapes[x]
    k = shape[-1]
    n = b.draw(st.integers(1, 12))
    if len(shape) == 1:
        out = (n,)
    else:
        out = (*shape[:-1], n)
    if not _fits(out):
        return None
    if b.draw(st.integers(0, 3)) == 0 and len(shape) >= 2:  # two activations: x @ x^T
        perm = list(range(len(shape)))
        perm[-1], perm[-2] = perm[-2], perm[-1]
        (xt,) = b.node("Transpose", [x], [tuple(shape[p] for p in perm)], perm=perm)
        out = (*shape[:-1], shape[-2])
        if not _fits(out):
            return None
        return b.node("MatMul", [x, xt], [out])
    return b.node("MatMul", [x, b.weights(k, n)], [out])


def _gemm(b: _Builder, x: str) -> list[str] | None:
    shape = b.spec.shapes[x]
    if len(shape) != 2:
        return None
    trans_a = b.draw(st.integers(0, 1))
    trans_b = b.draw(st.integers(0, 1))
    m, k = shape[::-1] if trans_a else shape
    n = b.draw(st.integers(1, 12))
    if not _fits((m, n)):
        return None
    w = b.weights(*((n, k) if trans_b else (k, n)))
    attrs: dict[str, Any] = {"transA": trans_a, "transB": trans_b}
    if b.draw(st.booleans()):
        attrs["alpha"] = b.draw(_f32(0.25, 2))
    ins = [x, w]
    if b.draw(st.booleans()):
        cshape = b.draw(st.sampled_from([(n,), (1, n), (m, n), (m, 1), ()]))
        ins.append(b.weights(*cshape, scale=1.0))
        if b.draw(st.booleans()):
            attrs["beta"] = b.draw(_f32(0.25, 2))
    return b.node("Gemm", ins, [(m, n)], **attrs)


def _window(b: _Builder, size: int, kmax: int, conv: bool) -> tuple[int, int, int, int, int]:
    """(kernel, stride, dilation, pad_begin, pad_end) for one spatial dim."""
    k = b.draw(st.integers(1, kmax))
    s = b.draw(st.integers(1, 2))
    d = b.draw(st.integers(1, 2)) if conv else 1
    pmax = k - 1 if not conv else k  # pools: a pad smaller than the kernel (ONNX's rule)
    p0 = b.draw(st.integers(0, min(pmax, 2)))
    p1 = b.draw(st.integers(0, min(pmax, 2)))
    return k, s, d, p0, p1


def _spatial(b: _Builder, x: str, conv: bool) -> tuple[Any, ...] | None:
    shape = b.spec.shapes[x]
    if len(shape) not in (3, 4):
        return None
    wins = [_window(b, size, 3, conv) for size in shape[2:]]
    outs = []
    for size, (k, s, d, p0, p1) in zip(shape[2:], wins):
        span = size + p0 + p1 - d * (k - 1) - 1
        if span < 0:
            return None
        outs.append(span // s + 1)
    return shape, wins, outs


def _conv(b: _Builder, x: str) -> list[str] | None:
    got = _spatial(b, x, conv=True)
    if got is None:
        return None
    shape, wins, outs = got
    c = shape[1]
    groups = b.draw(st.sampled_from([g for g in (1, 2, 3, c) if c % g == 0]))
    per = b.draw(st.integers(1, 3))
    o = groups * per
    out = (shape[0], o, *outs)
    if not _fits(out):
        return None
    w = b.weights(o, c // groups, *(k for k, *_ in wins))
    attrs = {"kernel_shape": [k for k, *_ in wins], "strides": [s for _, s, *_ in wins],
             "dilations": [d for _, _, d, *_ in wins],
             "pads": [p0 for *_, p0, _ in wins] + [p1 for *_, p1 in wins]}
    if groups > 1:
        attrs["group"] = groups
    ins = [x, w]
    if b.draw(st.booleans()):
        ins.append(b.weights(o, scale=1.0))
    return b.node("Conv", ins, [out], **attrs)


def _pool(b: _Builder, x: str) -> list[str] | None:
    op = b.draw(st.sampled_from(["MaxPool", "AveragePool", "GlobalAveragePool",
                                 "GlobalMaxPool"]))
    shape = b.spec.shapes[x]
    if op.startswith("Global"):
        if len(shape) < 3:
            return None
        return b.node(op, [x], [(*shape[:2], *[1] * (len(shape) - 2))])
    got = _spatial(b, x, conv=False)
    if got is None:
        return None
    shape, wins, outs = got
    attrs: dict[str, Any] = {"kernel_shape": [k for k, *_ in wins],
                             "strides": [s for _, s, *_ in wins],
                             "pads": [p0 for *_, p0, _ in wins] + [p1 for *_, p1 in wins]}
    if op == "AveragePool" and b.draw(st.booleans()):
        attrs["count_include_pad"] = 1
    return b.node(op, [x], [(*shape[:2], *outs)], **attrs)


def _factorizations(n: int, parts: int) -> list[list[int]]:
    if parts == 1:
        return [[n]]
    out = []
    for d in range(1, n + 1):
        if n % d == 0:
            out += [[d, *rest] for rest in _factorizations(n // d, parts - 1)]
        if len(out) > 64:
            break
    return out


def _reshape(b: _Builder, x: str) -> list[str] | None:
    shape = b.spec.shapes[x]
    numel = _numel(shape)
    rank = b.draw(st.integers(1, 4))
    new = list(b.draw(st.sampled_from(_factorizations(numel, rank))))
    target = list(new)
    if b.draw(st.booleans()):
        target[b.draw(st.integers(0, rank - 1))] = -1
    elif b.draw(st.booleans()):  # 0 copies the input's dim
        i = b.draw(st.integers(0, min(rank, len(shape)) - 1)) if shape else None
        if i is not None and shape[i] == new[i]:
            target[i] = 0
    op = b.draw(st.sampled_from(["Reshape", "Reshape", "Flatten"]))
    if op == "Flatten" and shape:
        axis = b.draw(st.integers(-len(shape), len(shape)))
        a = axis + len(shape) if axis < 0 else axis
        return b.node("Flatten", [x], [(_numel(shape[:a]), _numel(shape[a:]))], axis=axis)
    return b.node("Reshape", [x, b.ints(target)], [tuple(new)])


def _transpose(b: _Builder, x: str) -> list[str] | None:
    shape = b.spec.shapes[x]
    perm = b.draw(st.permutations(list(range(len(shape)))))
    return b.node("Transpose", [x], [tuple(shape[p] for p in perm)], perm=list(perm))


def _concat(b: _Builder, x: str) -> list[str] | None:
    shape = b.spec.shapes[x]
    if not shape:
        return None
    axis = b.draw(st.integers(-len(shape), len(shape) - 1))
    a = axis % len(shape)
    same = [t for t in b.activations()
            if len(b.spec.shapes[t]) == len(shape)
            and all(d == e for i, (d, e) in enumerate(zip(b.spec.shapes[t], shape)) if i != a)]
    parts = [x]
    for _ in range(b.draw(st.integers(1, 2))):
        if b.draw(st.booleans()):
            parts.append(b.draw(st.sampled_from(same)))
        else:
            cshape = list(shape)
            cshape[a] = b.draw(st.integers(1, 4))
            parts.append(b.weights(*cshape, scale=1.0))
    out = list(shape)
    out[a] = sum(b.spec.shapes[p][a] for p in parts)
    if not _fits(out):
        return None
    return b.node("Concat", parts, [tuple(out)], axis=axis)


def _slice(b: _Builder, x: str) -> list[str] | None:
    shape = b.spec.shapes[x]
    if not shape:
        return None
    axes = b.draw(st.lists(st.integers(0, len(shape) - 1), min_size=1, max_size=len(shape),
                           unique=True))
    starts, ends, steps = [], [], []
    probe = np.empty(shape, np.int8)
    index: list[slice] = [slice(None)] * len(shape)
    for a in axes:
        d = shape[a]
        step = b.draw(st.sampled_from([1, 1, 2, 3, -1, -2]))
        start = b.draw(st.integers(-d, d - 1))
        if step > 0:
            end = b.draw(st.sampled_from([d, 2**62, start + 1 + b.draw(st.integers(0, d))]))
        else:
            end = b.draw(st.sampled_from([-(2**62), -d - 1, start - 1 - b.draw(
                st.integers(0, d))]))
        starts.append(start)
        ends.append(end)
        steps.append(step)
        # ONNX clamps like Python's slice for these values (ends beyond either side).
        index[a] = slice(start, end, step)
    out = probe[tuple(index)].shape
    if not _fits(out):
        return None
    ins = [x, b.ints(starts), b.ints(ends)]
    named_axes = [a - len(shape) if b.draw(st.booleans()) else a for a in axes]
    if b.draw(st.booleans()) or any(s != 1 for s in steps):
        ins.append(b.ints(named_axes))
        if b.draw(st.booleans()) or any(s != 1 for s in steps):
            ins.append(b.ints(steps))
    elif axes != list(range(len(axes))):
        ins.append(b.ints(named_axes))
    return b.node("Slice", ins, [out])


def _reduce(b: _Builder, x: str) -> list[str] | None:
    op = b.draw(st.sampled_from(REDUCE))
    shape = b.spec.shapes[x]
    keep = b.draw(st.integers(0, 1))
    if not shape:
        return None
    if b.draw(st.integers(0, 4)) == 0:
        axes = list(range(len(shape)))
        ins = [x]
    else:
        axes = sorted(b.draw(st.lists(st.integers(0, len(shape) - 1), min_size=1,
                                      max_size=len(shape), unique=True)))
        ins = [x, b.ints([a - len(shape) if b.draw(st.booleans()) else a for a in axes])]
    out = tuple(1 if i in axes else d for i, d in enumerate(shape)) if keep else tuple(
        d for i, d in enumerate(shape) if i not in axes)
    return b.node(op, ins, [out], keepdims=keep)


def _softmax(b: _Builder, x: str) -> list[str] | None:
    shape = b.spec.shapes[x]
    if not shape:
        return None
    op = b.draw(st.sampled_from(["Softmax", "LogSoftmax"]))
    axis = b.draw(st.integers(-len(shape), len(shape) - 1))
    return b.node(op, [x], [shape], axis=axis)


def _layernorm(b: _Builder, x: str) -> list[str] | None:
    shape = b.spec.shapes[x]
    if not shape:
        return None
    axis = b.draw(st.integers(-len(shape), len(shape) - 1))
    norm = shape[axis:]
    if _numel(norm) < 2:  # a one-element row normalizes to exactly the bias
        return None
    ins = [x, b.weights(*norm, scale=1.0)]
    if b.draw(st.booleans()):
        ins.append(b.weights(*norm, scale=1.0))
    attrs: dict[str, Any] = {"axis": axis}
    if b.draw(st.booleans()):
        attrs["epsilon"] = b.draw(st.sampled_from([1e-5, 1e-3, 0.1]))
    return b.node("LayerNormalization", ins, [shape], **attrs)


def _batchnorm(b: _Builder, x: str) -> list[str] | None:
    shape = b.spec.shapes[x]
    if len(shape) < 2:
        return None
    c = shape[1]
    var = (b.rng.random(c) + 0.5).astype(np.float32)
    ins = [x, b.weights(c, scale=1.0), b.weights(c, scale=1.0), b.weights(c, scale=1.0),
           b.const(var)]
    return b.node("BatchNormalization", ins, [shape], epsilon=1e-5)


def _gather(b: _Builder, x: str) -> list[str] | None:
    shape = b.spec.shapes[x]
    if not shape:
        return None
    axis = b.draw(st.integers(-len(shape), len(shape) - 1))
    d = shape[axis]
    ishape = tuple(b.draw(st.lists(st.integers(1, 4), max_size=2)))
    idx = b.rng.integers(-d, d, size=ishape).astype(np.int64)
    a = axis % len(shape)
    out = (*shape[:a], *ishape, *shape[a + 1:])
    if not _fits(out) or not out:
        return None
    return b.node("Gather", [x, b.const(idx, "idx")], [out], axis=axis)


def _squeeze(b: _Builder, x: str) -> list[str] | None:
    shape = b.spec.shapes[x]
    if b.draw(st.booleans()) and len(shape) < 5:
        axis = b.draw(st.integers(-len(shape) - 1, len(shape)))
        a = axis % (len(shape) + 1)
        out = (*shape[:a], 1, *shape[a:])
        return b.node("Unsqueeze", [x, b.ints([axis])], [out])
    ones = [i for i, d in enumerate(shape) if d == 1]
    if not ones or len(shape) == 1:
        return None
    axes = b.draw(st.lists(st.sampled_from(ones), min_size=1, unique=True))
    if len(axes) == len(shape):
        axes = axes[:-1]
    return b.node("Squeeze", [x, b.ints(axes)], [tuple(d for i, d in enumerate(shape)
                                                        if i not in axes)])


def _split(b: _Builder, x: str) -> list[str] | None:
    shape = b.spec.shapes[x]
    if not shape:
        return None
    axis = b.draw(st.integers(-len(shape), len(shape) - 1))
    d = shape[axis]
    if d < 2:
        return None
    cut = b.draw(st.integers(1, d - 1))
    sizes = [cut, d - cut]
    outs = []
    for s in sizes:
        o = list(shape)
        o[axis] = s
        outs.append(tuple(o))
    return b.node("Split", [x, b.ints(sizes)], outs, axis=axis)


def _pad(b: _Builder, x: str) -> list[str] | None:
    shape = b.spec.shapes[x]
    if not shape:
        return None
    mode = b.draw(st.sampled_from(["constant", "constant", "reflect", "edge"]))
    limit = [d - 1 if mode == "reflect" else 2 for d in shape]
    pads = [b.draw(st.integers(0, min(2, m))) for m in limit * 2]
    out = tuple(d + pads[i] + pads[i + len(shape)] for i, d in enumerate(shape))
    if not _fits(out):
        return None
    ins = [x, b.ints(pads)]
    if mode == "constant" and b.draw(st.booleans()):
        ins.append(b.const(np.float32(b.draw(_f32(-2, 2)))))
    return b.node("Pad", ins, [out], mode=mode)


def _expand(b: _Builder, x: str) -> list[str] | None:
    shape = b.spec.shapes[x]
    if b.draw(st.booleans()):
        reps = [b.draw(st.integers(1, 2)) for _ in shape]
        out = tuple(d * r for d, r in zip(shape, reps))
        if not _fits(out) or not shape:
            return None
        return b.node("Tile", [x, b.ints(reps)], [out])
    lead = b.draw(st.lists(st.integers(1, 3), max_size=1))
    target = [*lead, *(b.draw(st.integers(1, 3)) if d == 1 else d for d in shape)]
    if not _fits(target):
        return None
    return b.node("Expand", [x, b.ints(target)], [tuple(target)])


OPS: dict[str, Callable[[_Builder, str], list[str] | None]] = {
    "unary": _unary, "binary": _binary, "matmul": _matmul, "gemm": _gemm, "conv": _conv,
    "pool": _pool, "reshape": _reshape, "transpose": _transpose, "concat": _concat,
    "slice": _slice, "reduce": _reduce, "softmax": _softmax, "layernorm": _layernorm,
    "batchnorm": _batchnorm, "gather": _gather, "squeeze": _squeeze, "split": _split,
    "pad": _pad, "expand": _expand,
}


@st.composite
def specs(draw, max_nodes: int = 8, ops: Sequence[str] = tuple(OPS)) -> Spec:
    """A random valid graph: 1-2 float32 inputs, a DAG of up to `max_nodes` op draws."""
    seed = draw(st.integers(0, 2**32 - 1))
    b = _Builder(draw, np.random.default_rng(seed))
    b.spec.seed = seed
    n_inputs = draw(st.integers(1, 2))
    first = None
    for k in range(n_inputs):
        if first is not None and draw(st.booleans()):
            shape = first  # a second input of the same shape (binary ops pair them)
        else:
            rank = draw(st.integers(1, 4))
            shape = tuple(draw(st.integers(1, 6)) for _ in range(rank))
            if rank == 4 and draw(st.booleans()):  # images big enough for convs and pools
                shape = (draw(st.integers(1, 2)), draw(st.integers(1, 4)),
                         draw(st.integers(3, 9)), draw(st.integers(3, 9)))
        first = first or shape
        b.spec.inputs[f"x{k}"] = shape
        b.spec.shapes[f"x{k}"] = shape
    for _ in range(draw(st.integers(1, max_nodes))):
        kind = draw(st.sampled_from(list(ops)))
        # Later nodes mostly read the newest tensor (chains), sometimes any (DAGs).
        acts = b.activations()
        x = acts[-1] if draw(st.integers(0, 2)) else draw(st.sampled_from(acts))
        if not b.spec.shapes[x] and kind not in ("unary", "binary", "reshape", "squeeze"):
            continue  # a scalar (a full reduction): most ops want a rank
        before = (len(b.spec.nodes), dict(b.spec.consts), dict(b.spec.shapes))
        if OPS[kind](b, x) is None:  # does not apply here: forget what it drew
            del b.spec.nodes[before[0]:]
            b.spec.consts, b.spec.shapes = before[1], before[2]
    if not b.spec.nodes:
        b.node("Relu", [b.activations()[-1]], [b.spec.shapes[b.activations()[-1]]])
    produced = [o for n in b.spec.nodes for o in n.outputs]
    outputs = list(b.spec.nodes[-1].outputs)
    extra = draw(st.lists(st.sampled_from(produced), max_size=2, unique=True))
    b.spec.outputs = outputs + [o for o in extra if o not in outputs]
    return b.spec


# ---- encodings ----------------------------------------------------------------------------
def to_ir(spec: Spec, name: str = "fuzz") -> Graph:
    g = Graph(name)
    g.opset = 28
    for k, s in spec.inputs.items():
        g.add_input(k, TensorMeta(DType.FLOAT32, s))
    for k, v in spec.consts.items():
        g.add_constant(k, v)
    for i, n in enumerate(spec.nodes):
        g.add_node(n.op, [g.values[v] if v else None for v in n.inputs], outputs=n.outputs,
                   attrs=dict(n.attrs), name=f"n{i}_{n.op}")
    g.outputs = [g.values[o] for o in spec.outputs]
    return g


def to_onnx(spec: Spec, name: str = "fuzz", opset: int = ONNX_OPSET):
    nodes = [helper.make_node(n.op, n.inputs, n.outputs, name=f"n{i}_{n.op}", **n.attrs)
             for i, n in enumerate(spec.nodes)]
    graph = helper.make_graph(
        nodes, name,
        [helper.make_tensor_value_info(k, TensorProto.FLOAT, s) for k, s in spec.inputs.items()],
        [helper.make_tensor_value_info(o, TensorProto.FLOAT, spec.shapes[o])
         for o in spec.outputs],
        [numpy_helper.from_array(v, k) for k, v in spec.consts.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)],
                             ir_version=9)


def to_graphdef(spec: Spec, name: str = "fuzz"):
    from graphengine.engine import wire
    from graphengine.engine.importers.graphdef import attr_to_pb
    from graphengine.v1 import graph_pb2 as pb

    gd = pb.GraphDef(name=name)
    for k, s in spec.inputs.items():
        gd.inputs.append(pb.TensorDesc(name=k, dtype=pb.DT_FLOAT32,
                                       shape=[pb.Dim(size=d) for d in s]))
    for o in spec.outputs:
        gd.outputs.append(pb.TensorDesc(name=o))
    for k, v in spec.consts.items():
        gd.constants.append(wire.tensor_to_pb(k, v))
    for i, n in enumerate(spec.nodes):
        nd = pb.NodeDef(name=f"n{i}_{n.op}", op_type=n.op, inputs=n.inputs, outputs=n.outputs)
        for key, value in n.attrs.items():
            nd.attrs[key].CopyFrom(attr_to_pb(value))
        gd.nodes.append(nd)
    return gd


# ---- the reference and the checks ---------------------------------------------------------
def reference(spec: Spec, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The graph run node by node with the engine's numpy reference kernels."""
    g = to_ir(spec)
    env: dict[str, np.ndarray] = {**spec.consts, **feeds}
    for node in g.nodes:
        outs = run_node(node, [env[v.name] if v is not None else None for v in node.inputs])
        for v, arr in zip(node.outputs, outs):
            env[v.name] = arr
    return {o: env[o] for o in spec.outputs}


def onnxruntime_run(model, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray] | None:
    """ONNX Runtime's outputs, or None where it refuses the model (not our oracle then)."""
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    opts.log_severity_level = 4
    try:
        sess = ort.InferenceSession(model.SerializeToString(), opts,
                                    providers=["CPUExecutionProvider"])
        names = [o.name for o in sess.get_outputs()]
        return dict(zip(names, sess.run(names, feeds)))
    except Exception:
        return None


def assert_close(got: np.ndarray, want: np.ndarray, what: str) -> None:
    """rtol 1e-3 / atol 1e-4 of the output's scale (max |want|, at least 1)."""
    got = np.asarray(got)
    want = np.asarray(want)
    assert got.shape == want.shape, f"{what}: shape {got.shape}, reference {want.shape}"
    assert got.dtype == want.dtype, f"{what}: dtype {got.dtype}, reference {want.dtype}"
    finite = np.isfinite(want)
    scale = max(1.0, float(np.max(np.abs(want[finite]), initial=0.0)))
    np.testing.assert_allclose(got, want, rtol=1e-3, atol=1e-4 * scale, equal_nan=True,
                               err_msg=what)


class Hang(BaseException):
    """An example ran past EXAMPLE_SECONDS."""


@contextlib.contextmanager
def time_limit(seconds: float = EXAMPLE_SECONDS) -> Iterator[None]:
    """Raise Hang in the main thread after `seconds` (a hang must fail, not stall CI)."""
    def on_alarm(signum, frame):
        raise Hang(f"example still running after {seconds} s")

    previous = signal.signal(signal.SIGALRM, on_alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def check_domain_error(exc: BaseException, what: str) -> None:
    """A rejected input must be a GraphEngineError with a domain code and a message."""
    if not isinstance(exc, GraphEngineError):
        raise AssertionError(f"{what}: raw {type(exc).__name__} instead of a domain error: "
                             f"{exc}") from exc
    assert exc.code in DOMAIN_CODES, f"{what}: code {exc.code.name}: {exc}"
    assert str(exc).strip() and exc.message.strip(), f"{what}: empty message"


@contextlib.contextmanager
def accepted_or_domain_error(what: str) -> Iterator[None]:
    """The body may succeed or raise a domain error; anything else fails the example."""
    try:
        with time_limit():
            yield
    except Hang:
        raise
    except (Exception, RecursionError, MemoryError) as exc:
        check_domain_error(exc, what)


def run_session(session, model: Any, feeds: dict[str, np.ndarray]
                ) -> dict[str, np.ndarray]:
    """add_graph + compile_graph + run_graph on `session`; removes the graph afterwards."""
    gid = session.add_graph(model)
    try:
        session.compile_graph(gid)
        return session.run_graph(gid, feeds)
    finally:
        session.remove_graph(gid)


def import_and_run(session, model: Any, what: str, compile_first: bool = True) -> None:
    """add_graph (+ compile_graph) + a run on inputs that fit the signature the session
    reports: each step may succeed or be a domain error (accepted_or_domain_error)."""
    with accepted_or_domain_error(what):
        gid = session.add_graph(model)
        try:
            if compile_first:
                session.compile_graph(gid)
            session.run_graph(gid, dummy_feeds(session, gid))
        finally:
            session.remove_graph(gid)


def dummy_feeds(session, gid: int, seed: int = 0, batch: int = 2) -> dict[str, np.ndarray]:
    """Inputs that fit a graph's declared signature (symbols become `batch`)."""
    rng = np.random.default_rng(seed)
    feeds = {}
    for t in session.graph_info(gid).inputs:
        shape = tuple(d if isinstance(d, int) else batch for d in (t.shape or ()))
        if math.prod(shape) > 1 << 20:
            shape = tuple(min(d, 4) for d in shape)
        dt = t.dtype.numpy
        if dt.kind == "f":
            feeds[t.name] = rng.standard_normal(shape).astype(dt)
        elif dt.kind in "iub":
            feeds[t.name] = rng.integers(0, 2, shape).astype(dt)
        else:
            feeds[t.name] = np.zeros(shape, dt)
    return feeds


def examples(n: int):
    """Settings for a test's bounded example count; `make fuzz`'s long profile multiplies it
    by GE_FUZZ_SCALE (profiles: tests/fuzz/conftest.py)."""
    import os

    from hypothesis import settings

    if os.environ.get("GE_FUZZ_PROFILE", "ci") == "long":
        n *= int(os.environ.get("GE_FUZZ_SCALE", "40"))
    return settings(max_examples=n)
