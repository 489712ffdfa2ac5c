"""A NonMaxSuppression's selection sized by its bound, so it and its tail stay on the device.

NonMaxSuppression's output count depends on the data: its `selected_indices` [K, 3] has no
static shape, so the device program ended before it, and every op after it (a detector's
Gathers of the selected boxes, scores and labels) ran as a host step, one Python round trip
each: on a small detector that tail cost more than the network.

K is bounded, though: at most batches x classes x min(max_output_boxes_per_class, boxes)
rows. When the limit is a constant, the node becomes `graphengine.PaddedNonMaxSuppression`
(ops/detection.py; device kernel kernels_nms.cc): the selection in M rows (the selected
ones first, zero rows after them) and the count K. What reads the selection runs on all M
rows, on the device like any static-shaped op, provided every op of the tail is row-wise
along axis 0 — row r of each output depends only on row r of the padded inputs — so the
first K rows are exactly what the unpadded graph computes; the graph's outputs among them
keep their first K rows at run time (`CompiledModel.row_counts`). The zero rows must also be
harmless: every index an index-reading op takes from them is checked here, at compile time,
by running the tail's reference kernels on the one padding row (an out-of-range index there
would fail runs the unpadded graph does not).

Any other reader of the selection (a reduction over the rows, a Shape, a TopK, a Reshape
that moves rows) keeps the node as it was: a host step.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from .. import ops
from ..ir import Graph, Node, Value, ValueKind
from ..ops.detection import PADDED_NMS, padded_rows
from ..passes import PassResult
from ..target import Target
from ..target import get as get_target

# The padded selection may not be larger than this many rows: past it, the tail's work on
# padding could cost more than the host round trips it saves.
MAX_ROWS = 1 << 16

# Elementwise ops that are row-wise when every padded operand has the output's rank.
_ELEMENTWISE = frozenset({"Add", "Sub", "Mul", "Max", "Min", "Cast", "Neg", "Abs", "Relu",
                          "Sigmoid", "Exp", "Sqrt", "Floor", "Ceil", "Identity", "Tanh"})
# The node's attribute listing the positions of the graph outputs its count trims.
TRIMS = "_trims"


def _rank(v: Value | None) -> int | None:
    return None if v is None or v.meta is None or v.meta.shape is None else len(v.meta.shape)


def _static(v: Value | None) -> bool:
    return v is not None and v.meta is not None and v.meta.is_static


def _row_wise(node: Node, padded: set[Value]) -> bool:
    """Whether row r of each output reads only row r of `node`'s padded inputs, the padded
    rows along axis 0 of the inputs and outputs alike."""
    ins = [v for v in node.inputs if v is not None]
    rank = _rank(node.outputs[0]) if len(node.outputs) == 1 else None
    if rank is None or rank < 1:
        return False
    if node.op_type in _ELEMENTWISE:
        for v in ins:
            if v in padded:
                if _rank(v) != rank:
                    return False
            elif not _static(v) or (len(v.meta.shape) == rank and v.meta.shape[0] != 1):
                return False  # another operand's rows would meet the padded ones
        return True
    data, idx = node.input(0), node.input(1)
    if node.op_type == "Gather":
        r = _rank(data)
        if r is None or not r:
            return False
        axis = node.attrs.get("axis", 0)
        axis = axis + r if axis < 0 else axis
        if idx in padded and data not in padded:  # picking rows of data by padded indices
            return axis == 0 and _static(data) and (_rank(idx) or 0) >= 1
        if data in padded and idx not in padded:  # columns of the padded rows
            return axis != 0 and _static(idx)
        return False
    if node.op_type == "GatherND":
        return (idx in padded and data not in padded and _static(data)
                and node.attrs.get("batch_dims", 0) == 0 and (_rank(idx) or 0) >= 2)
    return False


# Ops a shape of the padded rows may pass through on its way to a Reshape's target.
_SHAPE_STEPS = frozenset({"Concat", "Gather", "Unsqueeze", "Squeeze", "Slice", "Cast"})
# A row count no real shape has: the shapes of padded values are evaluated with it, so a
# Reshape target that keeps it first keeps the rows.
_ROWS = 1_000_003


def _shape_value(node: Node, known: dict[Value, np.ndarray]) -> np.ndarray | None:
    """The value of a node of a shape chain with the padded rows counted as _ROWS, from
    the values before it (`known`) and constants; None when another value feeds it."""
    if node.op_type == "Shape":
        dims = node.inputs[0].meta.shape
        if dims is None or any(not isinstance(d, int) for d in dims[1:]):
            return None
        full = np.array([_ROWS, *dims[1:]], np.int64)
        start, end = node.attrs.get("start", 0), node.attrs.get("end")
        return full[start:end]
    args = []
    for v in node.inputs:
        if v is None:
            args.append(None)
        elif v in known:
            args.append(known[v])
        elif v.is_constant:
            args.append(np.asarray(v.const))
        else:
            return None
    try:
        return np.asarray(ops.get(node.op_type).compute(args, ops.node_attrs(node))[0])
    except Exception:  # a chain the reference refuses keeps the host step
        return None


def _keeps_rows(node: Node, target: np.ndarray | None) -> bool:
    """Whether a Reshape of padded rows to `target` (evaluated with _ROWS rows) keeps axis 0
    as the rows: the target starts with the row count (or -1) and the rest holds one row."""
    x = node.input(0)
    if target is None or target.ndim != 1 or target.size < 1 or x.meta.shape is None \
            or any(not isinstance(d, int) for d in x.meta.shape[1:]) \
            or node.attrs.get("allowzero", 0):
        return False
    rest = [int(d) for d in target[1:]]
    per_row = int(np.prod(x.meta.shape[1:], dtype=np.int64))
    known = int(np.prod([d for d in rest if d > 0], dtype=np.int64))
    if int(target[0]) == -1:  # the rows inferred: the rest must hold exactly one row
        return all(d > 0 for d in rest) and known == per_row
    free = rest.count(-1)  # the rows given: one inferred dimension of the row may remain
    return int(target[0]) == _ROWS and all(d > 0 or d == -1 for d in rest) and (
        known == per_row if free == 0 else free == 1 and known > 0 and per_row % known == 0)


def _tail(sel: Value) -> list[Node] | None:
    """The nodes that read the selection, directly or through each other, when every one
    is row-wise; else None. A Shape of padded rows may feed, through shape steps, the
    target of a Reshape that keeps the rows (torch's `view(idx.shape[0], -1)` of picked
    boxes): once the selection is padded the shape is the padded row count, which such a
    Reshape only passes along. Any other reader of such a shape (a count the graph
    outputs) keeps the host step: it would read the padded count."""
    padded = {sel}
    shapes: dict[Value, np.ndarray] = {}
    tail: list[Node] = []
    frontier = [sel]
    while frontier:
        v = frontier.pop()
        for user in v.users:
            if user in tail:
                continue
            if v in shapes and user.op_type == "Reshape" and v is user.input(1):
                continue  # a target: the Reshape joins through its data (checked below)
            tail.append(user)
            if (user.op_type == "Shape" and v in padded) \
                    or (v in shapes and user.op_type in _SHAPE_STEPS):
                value = _shape_value(user, shapes)
                if value is None or len(user.outputs) != 1:
                    return None
                shapes[user.outputs[0]] = value
            elif v in shapes:
                return None  # a shape of the padded rows read by anything else
            else:
                padded.update(user.outputs)
            frontier.extend(user.outputs)
    for value in shapes:  # read by shape steps and the targets of padded Reshapes only
        for user in value.users:
            chain = len(user.outputs) == 1 and user.outputs[0] in shapes
            target = user.op_type == "Reshape" and user.input(1) is value \
                and user.input(0) in padded and user.input(0) is not value
            if not (chain or target):
                return None
    for n in tail:
        if n.op_type == "Shape" or n.outputs[0] in shapes:
            if any(o in n.graph.outputs for o in n.outputs):
                return None
            continue
        if n.op_type == "Reshape" and n.input(0) in padded:
            t = n.input(1)
            target = shapes.get(t) if t in shapes else (
                np.asarray(t.const).reshape(-1) if t is not None and t.is_constant else None)
            if not _keeps_rows(n, target):
                return None
            continue
        if not _row_wise(n, padded):
            return None
    return tail


def _padding_is_harmless(sel: Value, tail: list[Node], order: Callable[[Node], int]) -> bool:
    """Runs the tail's reference kernels on the one padding row (zeros): an op whose data
    the graph computes reads zeros of its shape, so what is checked is every index the
    padding gives, not values. False when one fails (an index out of range)."""
    rows: dict[Value, np.ndarray | None] = {sel: np.zeros((1, 3), np.int64)}
    for node in sorted(tail, key=order):
        args = []
        for i, v in enumerate(node.inputs):
            if v is None:
                args.append(None)
            elif v in rows:
                row = rows[v]
                if row is None:  # data-dependent padding: only harmless where it is data
                    if node.op_type in ("Gather", "GatherND") and i == 1:
                        return False
                    row = np.zeros((1,) + tuple(v.meta.shape[1:]), v.meta.dtype.numpy)
                args.append(row)
            elif v.is_constant:
                args.append(np.asarray(v.const))
            else:
                args.append(np.zeros(v.meta.shape, v.meta.dtype.numpy))
        try:
            with np.errstate(all="ignore"):
                outs = ops.get(node.op_type).compute(args, ops.node_attrs(node))
        except Exception:  # any failure on the padding row keeps the host step
            return False
        known = all(v is None or v in rows and rows[v] is not None or v.is_constant
                    for v in node.inputs)
        for v, o in zip(node.outputs, outs):
            rows[v] = np.asarray(o) if known else None
    return True


def bound_selections(graph: Graph, target: Target | None = None) -> PassResult:
    """NonMaxSuppression with a constant limit and a row-wise tail as the padded selection
    the device runs (module docstring)."""
    target = target or get_target()
    done = 0
    position = {n: i for i, n in enumerate(graph.nodes)}
    for node in list(graph.nodes):
        if node.op_type != "NonMaxSuppression" or len(node.outputs) != 1:
            continue
        boxes, scores, limit = node.input(0), node.input(1), node.input(2)
        if not (_static(boxes) and _static(scores) and limit is not None and limit.is_constant
                and np.asarray(limit.const).size == 1 and len(boxes.meta.shape) == 3
                and len(scores.meta.shape) == 3):
            continue
        if any(node.input(i) is not None and not (_static(node.input(i))
                                                  and node.input(i).meta.numel == 1)
               for i in (3, 4)):
            continue
        rows = padded_rows(boxes.meta.shape, scores.meta.shape,
                           int(np.asarray(limit.const).reshape(-1)[0]))
        if not 0 < rows <= MAX_ROWS:
            continue
        try:
            info = target.kernel_info(
                "PaddedNonMaxSuppression", [boxes.meta.dtype.value, scores.meta.dtype.value],
                [list(boxes.meta.shape), list(scores.meta.shape)], {})
        except Exception:  # a device that cannot say keeps the host step
            continue
        if not info.get("supported"):
            continue
        sel = node.outputs[0]
        tail = _tail(sel)
        if tail is None or not _padding_is_harmless(sel, tail, position.__getitem__):
            continue
        padded = {sel, *(o for n in tail for o in n.outputs)}
        trims = [i for i, v in enumerate(graph.outputs) if v in padded]
        new = graph.add_node(PADDED_NMS, list(node.inputs), outputs=0,
                             attrs={"center_point_box": node.attrs.get("center_point_box", 0),
                                    "rows": rows, TRIMS: trims},
                             name=graph.unique_name(node.name), after=node)
        graph.hand_over_outputs(node, [new])  # the selection keeps its name and readers
        # the count is the node's second output, and an output of the graph (so that the
        # program making it hands it out); the compiled model trims by it and hides it
        count = graph._new_value(graph.unique_name(f"{sel.name}_count"),
                                 ValueKind.INTERMEDIATE)
        count.producer, count.index = new, 1
        new.outputs.append(count)
        graph.outputs.append(count)
        done += 1
    return PassResult(graph, done > 0, f"{done} NonMaxSuppression selections bounded")


def bounded_outputs(graph: Graph, output_names: list[str]) -> dict[str, str]:
    """After compilation: each graph output a bounded selection trims (by its name in
    `output_names`, the graph's own outputs in order), and the value holding its count."""
    counts: dict[str, str] = {}
    for node in graph.nodes:
        if node.op_type == PADDED_NMS:
            for i in node.attrs.get(TRIMS, ()):
                if 0 <= i < len(output_names):
                    counts[output_names[i]] = node.outputs[1].name
    return counts
