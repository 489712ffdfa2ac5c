"""Value propagation for small shape tensors, so shape inference sees through
Shape -> Gather -> Unsqueeze -> Concat -> Reshape chains without constant folding.

Any op constant folding evaluates is evaluated here too once its inputs are known numbers
(a mobile ViT's unfold computes ceil(h / p) * p through Cast, Div, Ceil and Mul): a value
inference cannot know becomes a fresh symbol, and a Reshape to it leaves every shape after
it unknown until the prepare stage has folded the chain and gone round once more (a
whole sweep of inference, folding and merging again).

A known value is a small numpy array; entries of shape-derived values may be symbol
strings (object dtype), e.g. Shape of float32[batch,128] is ["batch", 128].
"""

from __future__ import annotations

import contextlib
import math

import numpy as np

from ..ir import Graph, Value
from . import registry, symdims
from .api import run_node

_MAX_ELEMENTS = 64
_INT_CODES = {6, 7}  # ONNX TensorProto INT32, INT64 (Cast's "to")
# How far back a value is followed. Only small tensors are followed (<= _MAX_ELEMENTS), and
# a sweep keeps what it derived, so a deep chain costs its length once. 12 stopped short
# of Encodec's conv padding (~20 deep: Shape, Gather, Cast, the frame count with Ceil, the
# ideal length, Cast, pads): each layer was known only a folding round after the last.
_MAX_DEPTH = 32
_STRUCTURAL = {"Gather", "Unsqueeze", "Squeeze", "Concat", "Slice", "Reshape", "Identity",
               "Flatten", "Expand", "Transpose"}
_ARITHMETIC = {"Add", "Sub", "Mul", "Div", "Cast", "Equal", "Where", "Max", "Min", "Neg",
               "Abs", "Range", "ConstantOfShape", "ReduceProd", "ReduceSum", "Mod"}


# How often known_value has looked past a value to its producer: shape inference's memo
# (prepare/infer_shapes.py) keeps only what was inferred from the node's own inputs.
looked_upstream = 0

# During one shape inference sweep over a graph (`sweep`), the values derived so far from
# that graph's nodes, by value: (depth, value or None). A sweep goes in topological order,
# so what a value is derived from is final when it is first asked for; several readers
# (the Reshapes of every layer) ask for the same Shape -> Gather -> Concat chain. A value
# found with depth to spare is found again with more; one not found is not found with less.
_derived: dict[Value, tuple[int, np.ndarray | None]] | None = None
_swept = None  # the graph of that sweep: a control-flow body's values are not kept


@contextlib.contextmanager
def sweep(graph):
    """Keeps derived values for the nodes of `graph` while shape inference runs over it."""
    global _derived, _swept
    outer = _derived, _swept
    _derived, _swept = {}, graph
    try:
        yield
    finally:
        _derived, _swept = outer


def known_value(v: Value | None, depth: int = 0) -> np.ndarray | None:
    """The value of `v` when inference can know it (constant, or derived from shapes)."""
    global looked_upstream
    if v is None:
        return None
    if v.const is not None:
        return np.asarray(v.const)
    node = v.producer
    if node is None or depth > _MAX_DEPTH:
        return None
    looked_upstream += 1
    kept = _derived is not None and node.graph is _swept
    if kept:
        seen = _derived.get(v)
        if seen is not None and (depth <= seen[0] if seen[1] is not None else depth >= seen[0]):
            return None if seen[1] is None else seen[1].copy()  # each reader its own array
    val = _derive(v, node, depth)
    if kept:
        _derived[v] = (depth, None if val is None else val.copy())
    return val


def _derive(v: Value, node, depth: int) -> np.ndarray | None:
    # small tensors of any rank: torch's exporter computes Pad's pads through a [n, 2]
    # Reshape and a Transpose
    if v.meta is not None and (v.meta.shape is None or not v.meta.is_static
                               or v.meta.numel > _MAX_ELEMENTS):
        return None
    op = node.op_type
    if op == "Shape":
        return _shape_value(node)
    if op == "Size":
        src = node.inputs[0].meta if node.inputs[0] is not None else None
        if src is None or not src.is_static:
            return None
        return np.array(math.prod(src.shape), dtype=np.int64)  # type: ignore[arg-type]
    if op not in _STRUCTURAL and op not in _ARITHMETIC and not _evaluable(node):
        return None
    ins = []
    for x in node.inputs:
        if x is None:
            ins.append(None)
            continue
        val = known_value(x, depth + 1)
        if val is None or val.size > _MAX_ELEMENTS:
            return None
        ins.append(_as_ints(val))
    if op == "Cast" and ins[0].dtype == object and node.attrs.get("to") in _INT_CODES:
        return ins[0]  # dims cast between integer types stay the same dims
    if op in _FAST:
        res = _FAST[op](node, ins)
        if res is not None:
            return _as_ints(res)
    if op not in _STRUCTURAL and any(x is not None and x.dtype == object for x in ins):
        res = _symbolic(op, ins)  # the few forms exporters use to compute shapes
        return None if res is None else _as_ints(res)
    try:
        res = run_node(node, ins)[v.index]
    except Exception:
        return None
    if res.dtype.kind in "US":
        res = res.astype(object)
    return _as_ints(res) if res.size <= _MAX_ELEMENTS else None


# The steps of an exporter's shape chain (Shape -> Gather -> Unsqueeze -> Concat ->
# Reshape), taken directly for the forms they have there: run_node's dispatch (attributes
# with defaults, an errstate, the kernel's own checks) cost ~8 us a step, on ~600 steps of
# a transformer's sweep. Any other form returns None and goes through run_node, which
# gives these forms the same values.
def _fast_gather(node, ins: list) -> np.ndarray | None:
    if len(ins) != 2 or ins[0] is None or ins[1] is None:
        return None
    data, idx = ins
    if data.ndim != 1 or idx.ndim > 1 or idx.dtype.kind not in "iu" or \
            node.attrs.get("axis", 0) not in (0, -1):
        return None
    n = data.shape[0]
    if not all(-n <= i < n for i in idx.reshape(-1).tolist()):
        return None  # out of range: run_node's kernel says so, and the value stays unknown
    return np.asarray(data[idx], dtype=data.dtype)


def _fast_unsqueeze(node, ins: list) -> np.ndarray | None:
    if len(ins) != 2 or ins[0] is None or ins[1] is None or ins[0].ndim != 0 or \
            ins[1].reshape(-1).tolist() not in ([0], [-1]):
        return None
    return ins[0].reshape(1)


def _fast_concat(node, ins: list) -> np.ndarray | None:
    if not ins or node.attrs.get("axis") not in (0, -1) or \
            any(x is None or x.ndim != 1 or x.dtype != ins[0].dtype for x in ins):
        return None
    return np.concatenate(ins)


_FAST = {"Gather": _fast_gather, "Unsqueeze": _fast_unsqueeze, "Concat": _fast_concat}


def _evaluable(node) -> bool:
    """Whether constant folding would evaluate the node (deterministic, no side effects),
    and it holds no body graph to run."""
    if not registry.has(node.op_type) or not registry.get(node.op_type).foldable:
        return False
    for a in node.attrs.values():
        if isinstance(a, Graph) or (isinstance(a, list) and any(isinstance(x, Graph) for x in a)):
            return False
    return True


def _sym_equal(a, b):
    if isinstance(a, str) and isinstance(b, str) and a == b:
        return True
    if isinstance(a, str) != isinstance(b, str):  # a dim is never negative
        n = b if isinstance(a, str) else a
        return False if int(n) < 0 else None
    return None if isinstance(a, str) else bool(a == b)


def _sym_add(a, b):
    if isinstance(a, str) and not isinstance(b, str) and int(b) == 0:
        return a
    if isinstance(b, str) and not isinstance(a, str) and int(a) == 0:
        return b
    return None


_SYMBOLIC = {"Mul": symdims.mul, "Div": symdims.div, "Equal": _sym_equal, "Add": _sym_add}


def _symbolic(op: str, ins: list) -> np.ndarray | None:
    """Shape arithmetic over symbol entries: products and exact quotients (symdims), a
    comparison with a negative constant (torch's `Where(Equal(shape, -1), 1, shape)` for
    expand), adding zero, and Where with a known condition; None when not known."""
    if op == "Where":
        cond, x, y = ins
        if cond is None or cond.dtype == object:
            return None
        return np.where(cond.astype(bool), x, y).astype(object)
    fn = _SYMBOLIC.get(op)
    if fn is None or len(ins) != 2 or any(x is None for x in ins):
        return None
    a, b = np.broadcast_arrays(*(x.astype(object) for x in ins))
    res = [fn(p, q) for p, q in zip(a.reshape(-1), b.reshape(-1))]
    if any(r is None for r in res):
        return None
    return np.array(res, dtype=bool if op == "Equal" else object).reshape(a.shape)


def _shape_value(node) -> np.ndarray | None:
    src = node.inputs[0].meta if node.inputs[0] is not None else None
    if src is None or src.shape is None:
        return None
    rank = len(src.shape)
    start = node.attrs.get("start", 0)
    end = node.attrs.get("end", rank)
    start = min(max(start + rank if start < 0 else start, 0), rank)
    end = min(max(end + rank if end < 0 else end, 0), rank)
    dims = list(src.shape[start:max(end, start)])
    if all(isinstance(d, int) for d in dims):
        return np.array(dims, dtype=np.int64)
    return np.array(dims, dtype=object)


def _as_ints(val: np.ndarray) -> np.ndarray:
    """Object arrays whose entries are all ints become int64 (symbols keep object)."""
    if val.dtype == object and all(isinstance(x, (int, np.integer)) for x in val.reshape(-1)):
        return val.astype(np.int64)
    return val
