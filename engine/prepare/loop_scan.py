"""A Loop whose iterations are independent, written as the same ops over all of them at once
(a canonicalize row).

torch exports `nn.EmbeddingBag` (and its functional form) as a Loop over the bags: the body
gathers the bag's `[start, end)` slice of the flat indices, looks the rows up, multiplies by
the per-sample weights and sums them; the iterations' results are stacked (the Loop's scan
output). A Loop is a host step that runs its body through the interpreter once per
iteration: an unseen DLRM ran at 0.10x of ONNX Runtime at batch 8, a fastText classifier
likewise.

When the trip count is a known number T, the loop carries no state (only scan outputs) and
its condition stays true, the body's ops are lifted to a leading axis of T: the iteration
number becomes the vector 0..T-1, a value that depends on it (a "lifted" value) gets the
leading axis, and each op is rewritten for it (axes shifted by one, an invariant operand
broadcast from the right). A Slice whose bounds depend on the iteration is taken when the
bounds are known numbers for every iteration (computed by running the body's own nodes for
each i) and every slice has the same length: then it is one Gather of the [T, L] table of
positions. Bags of different lengths, or bounds only the run knows (an EmbeddingBag's
offsets input), stay whole rows plus the bounds until a sum or mean over the bag's rows,
which becomes a [T, L] 0/1 mask (position in [start, end)) times the rows: the same sums,
in another order (a mean divides by the bag's length; an empty bag's mean is 0, as ONNX
Runtime's and torch's).
Anything else (state carried between iterations, an op the lifting does not know, a ragged
value leaving the loop) keeps the Loop. Otherwise exact: every element is computed by the
same operations, only for all iterations at once.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from ..ir import Graph, Node, Value
from ..ops import value_prop
from ..ops.api import run_node
from .steps import replace_outputs

MAX_TRIPS = 1 << 14  # iterations a Loop may have to be lifted
_MAX_KNOWN = 1 << 16  # elements of the per-iteration index values computed at compile time
_MAX_KNOWN_TRIPS = 1 << 12  # iterations whose index values are computed one by one
_MAX_MASK = 1 << 24  # elements of a ragged sum's [T, rows] mask (64 MB of float32)

_ELEMENTWISE = frozenset({
    "Add", "Sub", "Mul", "Div", "Pow", "Max", "Min", "Mod", "Equal", "Less", "Greater",
    "LessOrEqual", "GreaterOrEqual", "And", "Or", "Xor", "Where", "Cast", "Relu", "Neg",
    "Abs", "Exp", "Log", "Sqrt", "Reciprocal", "Sigmoid", "Tanh", "Not", "Identity", "Floor",
    "Ceil", "Clip", "Erf", "Sin", "Cos"})
_REDUCE = frozenset({"ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd"})


@dataclasses.dataclass
class _Lv:
    """A body value in the lifted program: the enclosing graph's value (None while only
    planning), whether it carries the leading iteration axis, its per-iteration rank, and
    its per-iteration values when the compile knows them."""
    value: Value | None
    lifted: bool
    rank: int
    known: list[np.ndarray] | None = None
    # A ragged slice: iteration i's value is rows [S_i, E_i) of `value` (which then holds
    # every row, not lifted); (key, S, E, rows) with key the body's (starts, ends) values,
    # S, E the lifted [T, 1] bounds, clamped, and rows the count of `value`'s rows.
    segment: tuple | None = None


class _Refuse(Exception):
    pass


def _const_ints(v: Value | None) -> list[int] | None:
    if v is None:
        return None
    val = value_prop.known_value(v)
    return None if val is None or val.dtype == object else [int(x) for x in val.reshape(-1)]


def _axes(n: Node) -> list[int] | None:
    """The axes input of an Unsqueeze, Squeeze or reduction ([] when absent: the importer
    turns every older opset's axes attribute into this input)."""
    return _const_ints(n.input(1)) if len(n.inputs) > 1 and n.input(1) is not None else []


def _trips(node: Node) -> int | None:
    body = node.attrs.get("body")
    if node.op_type != "Loop" or not isinstance(body, Graph):
        return None
    outer = list(node.attrs.get("_outer") or [])
    if len(node.inputs) != 2 + len(outer) or len(body.inputs) != 2 + len(outer) \
            or len(body.outputs) != 1 + len(node.outputs) or not node.outputs:
        return None  # state carried between iterations, or no scan output
    m = _const_ints(node.input(0))
    if m is None or len(m) != 1 or not 1 <= m[0] <= MAX_TRIPS:
        return None
    cond = node.input(1)
    if cond is not None:
        c = value_prop.known_value(cond)
        if c is None or c.dtype == object or not bool(np.asarray(c).reshape(-1)[0]):
            return None
    return m[0]


class _Lifter:
    def __init__(self, graph: Graph | None, node: Node, trips: int) -> None:
        self.graph, self.node, self.trips = graph, node, trips
        self.env: dict[Value, _Lv] = {}

    # ---- building (graph is None while planning: only ranks and known values) -----------
    def const(self, array: np.ndarray) -> _Lv:
        v = None if self.graph is None else self.graph.add_constant(None, np.asarray(array))
        return _Lv(v, False, np.ndim(array), [np.asarray(array)])

    def emit(self, op: str, ins: list[_Lv | None], attrs: dict, rank: int, lifted: bool,
             name: str) -> _Lv:
        if self.graph is None:
            return _Lv(None, lifted, rank)
        new = self.graph.add_node(op, [None if x is None else x.value for x in ins],
                                  attrs=attrs, name=self.graph.unique_name(name))
        return _Lv(new.outputs[0], lifted, rank)

    def axes_const(self, axes: list[int]) -> _Lv:
        return self.const(np.asarray(axes, np.int64))

    # ---- the body ---------------------------------------------------------------------
    def run(self) -> list[_Lv]:
        body: Graph = self.node.attrs["body"]
        it, cond, *captured = body.inputs
        t = self.trips
        self.env[it] = _Lv(None if self.graph is None else self.graph.add_constant(
            None, np.arange(t, dtype=np.int64)), True, 0,
            [np.asarray(i, np.int64) for i in range(t)])
        self.env[cond] = self.const(np.asarray(True))
        for v, outer in zip(captured, self.node.inputs[2:]):
            if v.meta is None or v.meta.shape is None:
                raise _Refuse
            val = value_prop.known_value(outer)
            self.env[v] = _Lv(outer, False, len(v.meta.shape),
                              None if val is None or val.dtype == object else [val])
        for v in body.constants():
            self.env[v] = _Lv(None if self.graph is None else self.graph.add_constant(
                None, v.const), False, np.ndim(v.const), [np.asarray(v.const)])
        for n in body.nodes:
            if any(isinstance(a, Graph) for a in n.attrs.values()) or len(n.outputs) != 1 \
                    or n.outputs[0].meta is None or n.outputs[0].meta.shape is None:
                raise _Refuse
            ins = [None if v is None else self.env[v] for v in n.inputs]
            if any(x is not None and x.segment is not None for x in ins):
                out = self.lift_segment(n, ins)
            elif any(x is not None and x.lifted for x in ins):
                out = self.lift(n, ins)
            else:
                out = self.copy(n, ins)
            out.known = self.known(n, ins)
            self.env[n.outputs[0]] = out
        cond_out = self.env[body.outputs[0]]
        if not cond_out.known or not all(bool(np.asarray(k).reshape(-1)[0])
                                         for k in cond_out.known):
            raise _Refuse  # the condition may turn false: an early exit
        outs = [self.env[v] for v in body.outputs[1:]]
        if any(lv.segment is not None for lv in outs):
            raise _Refuse  # a ragged value leaves the loop
        return [self.stacked(lv, v) for lv, v in zip(outs, body.outputs[1:])]

    def known(self, n: Node, ins: list[_Lv | None]) -> list[np.ndarray] | None:
        """The node's value in every iteration, when its inputs' are known and small."""
        if any(x is not None and (x.known is None or x.segment is not None) for x in ins) \
                or n.op_type not in _ELEMENTWISE | {"Gather", "Unsqueeze", "Squeeze",
                                                    "Slice", "Concat", "Reshape", "Shape",
                                                    "Constant", "Range"}:
            return None
        per = 1 if not any(x is not None and x.lifted for x in ins) else self.trips
        if per > _MAX_KNOWN_TRIPS:
            return None  # (a ragged sum needs no known bounds)
        out = []
        size = 0
        for i in range(per):
            args = [None if x is None else x.known[i if x.lifted else 0] for x in ins]
            try:
                res = np.asarray(run_node(n, args)[0])
            except Exception:
                return None
            size += res.size
            if size > _MAX_KNOWN or res.dtype == object:
                return None
            out.append(res)
        return out

    def copy(self, n: Node, ins: list[_Lv | None]) -> _Lv:
        rank = len(n.outputs[0].meta.shape)
        return self.emit(n.op_type, ins, dict(n.attrs), rank, False, n.name)

    def stacked(self, lv: _Lv, v: Value) -> _Lv:
        if lv.lifted:
            return lv
        # invariant: the same value in every iteration, stacked T times
        if v.meta is None or not v.meta.is_static:
            raise _Refuse
        one = self.emit("Unsqueeze", [lv, self.axes_const([0])], {}, lv.rank + 1, True,
                        f"{self.node.name}_stack")
        shape = self.const(np.asarray([self.trips, *v.meta.shape], np.int64))
        return self.emit("Expand", [one, shape], {}, lv.rank, True, f"{self.node.name}_stack")

    # ---- one op whose inputs include a lifted value -----------------------------------
    def lift(self, n: Node, ins: list[_Lv | None]) -> _Lv:
        op, a = n.op_type, n.attrs
        rank = len(n.outputs[0].meta.shape)
        name = f"{n.name}_lifted"
        if op in _ELEMENTWISE:
            if any(x is not None and not x.lifted and x.rank > rank for x in ins):
                raise _Refuse  # an invariant operand wider than the result
            # a lifted operand of fewer axes than the result broadcasts from the right in
            # each iteration: its iteration axis must stay first, so unit axes go after it
            ins = [self.emit("Unsqueeze", [x, self.axes_const(list(range(1, 1 + rank - x.rank)))],
                             {}, rank, True, f"{n.name}_align")
                   if x is not None and x.lifted and x.rank < rank else x for x in ins]
            return self.emit(op, ins, dict(a), rank, True, name)
        if op in ("Unsqueeze", "Squeeze"):
            x = ins[0]
            axes = _axes(n)
            if axes is None or not x.lifted or (op == "Squeeze" and not axes):
                raise _Refuse
            span = rank if op == "Unsqueeze" else x.rank
            shifted = [(ax % span) + 1 for ax in axes]
            return self.emit(op, [x, self.axes_const(shifted)], {}, rank, True, name)
        if op == "Transpose":
            perm = list(a.get("perm") or range(ins[0].rank - 1, -1, -1))
            return self.emit(op, [ins[0]], {"perm": [0] + [p + 1 for p in perm]}, rank, True,
                             name)
        if op in _REDUCE:
            x = ins[0]
            axes = _axes(n)
            if axes is None or not x.lifted or any(y is not None and y.lifted for y in ins[1:]):
                raise _Refuse
            if not axes:
                if a.get("noop_with_empty_axes", 0):
                    return x
                axes = list(range(x.rank))
            shifted = [(ax % x.rank) + 1 for ax in axes]
            return self.emit(op, [x, self.axes_const(shifted)],
                             {"keepdims": int(a.get("keepdims", 1))}, rank, True, name)
        if op == "Gather":
            data, idx = ins
            axis = int(a.get("axis", 0)) % data.rank
            if data.lifted and not idx.lifted:
                return self.emit(op, [data, idx], {"axis": axis + 1}, rank, True, name)
            if idx.lifted and not data.lifted and axis == 0:
                return self.emit(op, [data, idx], {"axis": 0}, rank, True, name)
            raise _Refuse
        if op == "Slice":
            return self.lift_slice(n, ins, rank, name)
        raise _Refuse

    # ---- ragged slices: bags whose bounds the run decides -------------------------------
    def segment(self, n: Node, data: _Lv, starts: _Lv, ends: _Lv, dim: int, rank: int) -> _Lv:
        """Rows [s_i, e_i) of `data` for every i, the bounds known only at run time (an
        EmbeddingBag's offsets input): kept as `data` whole plus the bounds, until a sum or
        mean over the rows makes it a [T, rows] mask times the rows."""
        if self.trips * dim > _MAX_MASK:
            raise _Refuse  # the [T, rows] mask would not be small
        if not (starts.lifted and ends.lifted) or starts.rank != 1 or ends.rank != 1 \
                or n.input(1).meta is None or n.input(1).meta.shape != (1,) \
                or n.input(2).meta is None or n.input(2).meta.shape != (1,):
            raise _Refuse
        bounds = []
        for b in (starts, ends):  # ONNX Slice: a negative bound counts from the end, clamped
            if self.graph is None:
                bounds.append(None)
                continue
            big = self.const(np.asarray(dim, np.int64))
            zero = self.const(np.asarray(0, np.int64))
            neg = self.emit("Less", [b, zero], {}, 1, True, f"{n.name}_neg")
            wrapped = self.emit("Add", [b, big], {}, 1, True, f"{n.name}_wrap")
            v = self.emit("Where", [neg, wrapped, b], {}, 1, True, f"{n.name}_bound")
            v = self.emit("Max", [v, zero], {}, 1, True, f"{n.name}_lo")
            bounds.append(self.emit("Min", [v, big], {}, 1, True, f"{n.name}_hi"))
        key = (n.input(1), n.input(2))
        return _Lv(data.value, True, rank, None, (key, bounds[0], bounds[1], dim))

    def lift_segment(self, n: Node, ins: list[_Lv | None]) -> _Lv:
        op, a = n.op_type, n.attrs
        segs = [x for x in ins if x is not None and x.segment is not None]
        seg = segs[0].segment
        if any(x.segment[0] != seg[0] for x in segs):
            raise _Refuse  # rows of different bags
        rank = len(n.outputs[0].meta.shape)
        name = f"{n.name}_rows"
        if op == "Gather" and ins[1] is not None and ins[1].segment is not None \
                and not ins[0].lifted and int(a.get("axis", 0)) % ins[0].rank == 0:
            out = self.emit(op, ins, {"axis": 0}, rank, False, name)
            return dataclasses.replace(out, lifted=True, segment=seg)
        if op == "Unsqueeze" and ins[0].segment is not None:
            axes = _axes(n)
            if axes is None or any(ax % rank == 0 for ax in axes):
                raise _Refuse
            out = self.emit(op, [ins[0], self.axes_const([ax % rank for ax in axes])], {},
                            rank, False, name)
            return dataclasses.replace(out, lifted=True, segment=seg)
        if op in _ELEMENTWISE and op != "Where":
            for x in ins:  # the other operands: rows of the same bags, or broadcast over rows
                if x is None:
                    continue
                if x.rank != rank if x.segment is not None else (x.lifted or x.rank >= rank):
                    raise _Refuse
            out = self.emit(op, ins, dict(a), rank, False, name)
            return dataclasses.replace(out, lifted=True, segment=seg)
        if op in ("ReduceSum", "ReduceMean") and ins[0].segment is not None:
            axes = _axes(n)
            x = n.input(0)
            if not axes or [ax % ins[0].rank for ax in axes] != [0] \
                    or x.meta is None or x.meta.dtype.numpy != np.float32 \
                    or any(y is not None and y.lifted for y in ins[1:]):
                raise _Refuse
            rest = list(x.meta.shape[1:])
            if not all(isinstance(d, int) for d in rest):
                raise _Refuse
            return self.bag_sum(ins[0], op == "ReduceMean", int(a.get("keepdims", 1)), rest,
                                rank, name)
        raise _Refuse

    def bag_sum(self, rows: _Lv, mean: bool, keepdims: int, rest: list[int], rank: int,
                name: str) -> _Lv:
        """Per bag, the sum (mean) of its rows: a [T, L] 0/1 mask times the rows [L, rest]."""
        if self.graph is None:
            return _Lv(None, True, rank)
        _, lo, hi, dim = rows.segment
        positions = self.const(np.arange(dim, dtype=np.int64).reshape(1, dim))
        inside = self.emit("And", [self.emit("GreaterOrEqual", [positions, lo], {}, 1, True,
                                             f"{name}_from"),
                                   self.emit("Less", [positions, hi], {}, 1, True,
                                             f"{name}_to")], {}, 1, True, f"{name}_in")
        mask = self.emit("Cast", [inside], {"to": 1}, 1, True, f"{name}_mask")
        flat = self.emit("Reshape", [rows, self.const(np.asarray([dim, -1], np.int64))], {},
                         1, False, f"{name}_flat")
        total = self.emit("MatMul", [mask, flat], {}, 1, True, f"{name}_sum")
        if mean:  # an empty bag's mean is 0 (ONNX Runtime's and torch's), not 0/0
            count = self.emit("ReduceSum", [mask, self.axes_const([1])], {"keepdims": 1}, 1,
                              True, f"{name}_count")
            count = self.emit("Max", [count, self.const(np.asarray(1.0, np.float32))], {}, 1,
                              True, f"{name}_count1")
            total = self.emit("Div", [total, count], {}, 1, True, f"{name}_mean")
        out_shape = [self.trips] + ([1] if keepdims else []) + rest
        return self.emit("Reshape", [total, self.const(np.asarray(out_shape, np.int64))], {},
                         rank, True, name)

    def lift_slice(self, n: Node, ins: list[_Lv | None], rank: int, name: str) -> _Lv:
        data, rest = ins[0], ins[1:]
        if data.lifted:
            if any(x is not None and x.lifted for x in rest):
                raise _Refuse
            if len(n.inputs) > 3 and n.input(3) is not None:
                axes = _const_ints(n.input(3))
            else:  # every axis from the first, as many as there are starts
                axes = None if rest[0].known is None else list(range(rest[0].known[0].size))
            if axes is None:
                raise _Refuse
            shifted = self.axes_const([(ax % data.rank) + 1 for ax in axes])
            args = [data, rest[0], rest[1], shifted] + ([rest[3]] if len(rest) > 3 else [])
            return self.emit("Slice", args, {}, rank, True, name)
        # bounds that move with the iteration over an invariant tensor: one Gather of the
        # positions, when every slice is as long as the others
        if n.input(0).meta is None or not n.input(0).meta.is_static:
            raise _Refuse
        if len(n.inputs) > 4 and n.input(4) is not None:
            steps = _const_ints(n.input(4))
            if steps is None or any(s != 1 for s in steps):
                raise _Refuse
        starts, ends = rest[0], rest[1]
        axes_lv = rest[2] if len(rest) > 2 else None
        if axes_lv is not None and (axes_lv.lifted or axes_lv.known is None):
            raise _Refuse
        axes = [0] if axes_lv is None else [int(x) for x in axes_lv.known[0].reshape(-1)]
        dim = int(n.input(0).meta.shape[0])
        if len(axes) != 1 or axes[0] % data.rank != 0:
            raise _Refuse  # a slice along the first axis only
        if starts.known is None or ends.known is None:
            return self.segment(n, data, starts, ends, dim, rank)
        bounds = []
        for i in range(self.trips):
            s = int(starts.known[i if starts.lifted else 0].reshape(-1)[0])
            e = int(ends.known[i if ends.lifted else 0].reshape(-1)[0])
            s = min(max(s + dim if s < 0 else s, 0), dim)
            e = min(max(e + dim if e < 0 else e, 0), dim)
            bounds.append((s, max(e, s)))
        length = bounds[0][1] - bounds[0][0]
        if any(e - s != length for s, e in bounds):  # ragged: as if the run decided them
            return self.segment(n, data, starts, ends, dim, rank)
        table = np.asarray([np.arange(s, e) for s, e in bounds], np.int64).reshape(
            self.trips, length)
        return self.emit("Gather", [data, self.const(table)], {"axis": 0}, rank, True, name)


def scan_loop(node: Node) -> bool:
    trips = _trips(node)
    if trips is None:
        return False
    try:
        _Lifter(None, node, trips).run()
    except _Refuse:
        return False
    return True


def as_lifted_ops(graph: Graph, node: Node) -> None:
    outs = _Lifter(graph, node, _trips(node)).run()
    values = {}
    for k, lv in enumerate(outs):
        v = lv.value
        if v.producer is None or v in values.values():  # a constant, or one value twice
            v = graph.add_node("Identity", [v], name=graph.unique_name(
                f"{node.name}_scan{k}")).outputs[0]
        values[k] = v
    replace_outputs(graph, node, values)
