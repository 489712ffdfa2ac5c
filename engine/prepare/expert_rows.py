"""A mixture of experts' routed rows bounded by the token count, so the experts run on the
device.

transformers' eager experts (Mixtral, Qwen2/3-MoE, OLMoE, ...) pick each expert's tokens
with a NonZero of the router's one-hot mask, gather those rows, run the expert's MLP on them,
scale them by the routing weights and add them back with index_add_ (ScatterElements or
ScatterND). The NonZero's count is the data's, so everything after it ran as host steps: a
small Mixtral had 342 numpy steps a run between its device programs, 0.36x of ONNX Runtime.

Two rewrites, each exact where the unpadded graph runs:

- **pinned counts**: the exporter unrolls `for expert in experts_hit` by a Split of the hit
  list into as many parts as the trace saw; that Split fails unless the NonZero found exactly
  that many. When the mask can be nonzero at no more positions than that (routing.py: a
  one-hot of depth E + 1 over ids below E), a run that succeeds found exactly those
  positions, so the list is that constant. (Where a run would fail because some expert got no
  token, the rewritten graph runs and that expert adds nothing, as the eager module does.)
- **token-bounded selections**: a NonZero of a 2-D mask exclusive along one axis (at most one
  of a token's k slots picks a given expert: routing.py) has at most T rows, one per token.
  It becomes a padded selection of exactly T rows — the n picked tokens first, in token
  order, then the others; row i holds (the slot that picked the expert, or 0; its token) —
  a validity mask in token order and the count n. Every op after it must be row-wise (row i
  of each output reads row i of its inputs alone, whatever the row order), up to scatters
  back by the token coordinate; each such scatter becomes a Gather of the updates back into
  token order (row i of the selection is token order[i]; `position` is the inverse
  permutation) and a Where that keeps the target row where the token was not picked. The
  padding rows compute the expert on tokens it was not given and are dropped there (a
  Where, not a product: an overflow in them cannot leak). The real rows of a selection name
  distinct tokens, so the scatter's order never mattered and its reduction is kept.

The expert's MLP then runs on T rows on the device, of which the first n matter: each MatMul
of the tail whose folded rows start with the selection's is tagged (`_rows_count`: the node
giving n; `_rows_unit`: rows of the fold per selected row), and after fusion
optimize/routed_rows.py gives it n as an input: the kernel multiplies only the blocks of rows
n covers, the routed work rather than E / k times it. Above `MAX_ROWS` tokens, or
`MAX_TAIL_ELEMENTS` elements in the padded tail, the selection stays a host step and the
pass says why.
"""

from __future__ import annotations

import math

import numpy as np

from .. import ops
from ..ir import Graph, Node, Value
from ..ops.value_prop import known_value
from ..passes import PassResult
from .routing import always_zero, exclusive_axes

MAX_ROWS = 1 << 16
MAX_TAIL_ELEMENTS = 1 << 26

_ELEMENTWISE = frozenset({
    "Add", "Sub", "Mul", "Div", "Pow", "Max", "Min", "Where", "Equal", "Less", "Greater",
    "LessOrEqual", "GreaterOrEqual", "Not", "And", "Or", "Cast", "Neg", "Abs", "Relu",
    "Sigmoid", "Tanh", "Exp", "Log", "Sqrt", "Reciprocal", "Erf", "Gelu", "Softplus", "Floor",
    "Ceil", "Round", "Sign", "Clip", "HardSigmoid", "LeakyRelu", "Elu", "Selu", "Identity",
    "Sin", "Cos", "Mish", "HardSwish"})
# Shape arithmetic on the selection's shapes: the row count becomes T.
_SHAPE_OPS = frozenset({"Gather", "Concat", "Squeeze", "Unsqueeze", "Slice", "Add", "Sub",
                        "Mul", "Div", "Cast", "Reshape", "Identity", "Max", "Min", "Equal",
                        "Where", "ReduceProd", "Neg", "Abs"})
# Inputs that give shapes or positions, not data, by op.
_PARAMS = {"Reshape": {1}, "Expand": {1}, "Slice": {1, 2, 3, 4}, "ConstantOfShape": {0},
           "Split": {1}, "Squeeze": {1}, "Unsqueeze": {1}, "ReduceSum": {1}, "ReduceMax": {1},
           "ReduceMin": {1}, "ReduceMean": {1}}
_REDUCE = frozenset({"ReduceSum", "ReduceMax", "ReduceMin", "ReduceMean"})
_SCATTERS = frozenset({"ScatterElements", "ScatterND"})
_COMBINE = {"add": "Add", "mul": "Mul", "max": "Max", "min": "Min"}


class _Refused(Exception):
    """Why a selection stays a host step."""


# What a graph the analysis did not foresee may raise inside it (numpy on odd axes, a
# missing attribute): the selection then stays a host step, with the error as the reason.
_ANALYSIS_ERRORS = (ValueError, IndexError, TypeError, KeyError, AttributeError)


def _shape(v: Value | None):
    return None if v is None or v.meta is None else v.meta.shape


def _norm(axis: int, rank: int) -> int:
    return axis + rank if axis < 0 else axis


def _ints(v: Value | None) -> list[int] | None:
    k = known_value(v) if v is not None else None
    if k is None or np.asarray(k).dtype == object:
        return None
    return [int(x) for x in np.asarray(k).reshape(-1)]


# ---- pinned counts ---------------------------------------------------------------------
def _pinned_count(node: Node) -> int | None:
    """S when the NonZero's only reader splits all its results into constant parts."""
    users = node.outputs[0].users
    if len(users) != 1:
        return None
    split, axis = users[0], 1
    if split.op_type == "Transpose" and list(split.attrs.get("perm") or []) == [1, 0] \
            and len(split.outputs[0].users) == 1:
        split, axis = split.outputs[0].users[0], 0
    if split.op_type != "Split" or split.input(1) is None:
        return None
    sizes = _ints(split.input(1))
    if sizes is None or _norm(int(split.attrs.get("axis", 0)), 2) != axis:
        return None
    return sum(sizes)


def _pin(graph: Graph, node: Node) -> bool:
    count = _pinned_count(node)
    try:
        zero = always_zero(node.input(0)) if count is not None else None
    except _ANALYSIS_ERRORS:  # a mask this analysis misreads is a host step, not an error
        return False
    if zero is None or zero.ndim == 0:
        return False
    where = np.stack(np.nonzero(~zero)).astype(np.int64)
    if where.shape[1] != count:
        return False
    graph.replace_all_uses(node.outputs[0], graph.add_constant(None, where))
    graph.remove_node(node)
    return True


# ---- token-bounded selections ----------------------------------------------------------
class _Tail:
    """The nodes after a selection and what each of their values is: padded rows (the row
    axis where the selection's count symbol stands), or shape arithmetic on them."""

    def __init__(self, sel: Value, token_axis: int, rows: int) -> None:
        self.sym = sel.meta.shape[1]
        self.sel, self.token_axis, self.rows = sel, token_axis, rows
        self.nodes: list[Node] = []
        self.sinks: list[Node] = []
        self.values: set[Value] = set()
        self.coords: dict[Value, int] = {}  # value -> the selection coordinate it holds
        self.coord_axis: dict[Value, int] = {sel: 0}  # value -> axis listing coordinates
        stack = [sel]
        seen: set[Node] = set()
        while stack:
            for user in stack.pop().users:
                if user in seen:
                    continue
                seen.add(user)
                if self._scatter_back(user):
                    self.sinks.append(user)
                    continue
                self.nodes.append(user)
                self.values.update(user.outputs)
                stack.extend(user.outputs)

    def row(self, v: Value | None) -> int | None:
        shape = _shape(v)
        if shape is None:
            raise _Refused(f"'{v.name}' has no known shape")
        hits = [i for i, d in enumerate(shape) if d == self.sym]
        if len(hits) > 1:
            raise _Refused(f"'{v.name}' has the row count on two axes")
        return hits[0] if hits else None

    def _scatter_back(self, node: Node) -> bool:
        return node.op_type in _SCATTERS and all(
            _shape(node.input(i)) is not None and self.sym in _shape(node.input(i))
            for i in (1, 2))

    def _padded(self, v: Value | None) -> bool:
        return v is not None and v.meta is not None and v.meta.shape is not None \
            and self.sym in v.meta.shape

    def check(self, graph: Graph, order: dict[Node, int]) -> None:
        self.nodes.sort(key=order.__getitem__)
        outputs = set(graph.outputs)
        for node in self.nodes:
            for o in node.outputs:
                if o in outputs:
                    raise _Refused(f"'{o.name}' is a graph output")
                if self._padded(o):
                    self.row(o)
                    if any(not isinstance(d, int) for d in o.meta.shape if d != self.sym):
                        raise _Refused(f"'{o.name}' has another unknown dim")
                elif o.meta is None or not o.meta.is_static:
                    raise _Refused(f"'{o.name}' has no static shape")
            self._check_node(node)
            self._tag(node)
        for node in self.sinks:
            self._check_sink(node)

    # -- one node
    def _kind(self, node: Node, i: int) -> str:
        v = node.input(i)
        if v is None:
            return "none"
        if self._padded(v):
            return "rows"
        return "shape" if v in self.values else "outer"

    def _check_node(self, node: Node) -> None:
        op = node.op_type
        kinds = [self._kind(node, i) for i in range(len(node.inputs))]
        params = _PARAMS.get(op, set())
        for i, k in enumerate(kinds):
            if k == "shape" and i not in params and not self._shape_node(node):
                raise _Refused(f"{op} '{node.name}' reads the selection's shape as data")
        out_rows = [self._padded(o) for o in node.outputs]
        if "rows" not in kinds and not any(out_rows):
            if op not in _SHAPE_OPS:
                raise _Refused(f"{op} '{node.name}' computes on the selection's shape")
            return
        if op == "Shape":
            return
        if op == "Expand" and kinds[0] == "outer" or op == "ConstantOfShape":
            return  # the same value on every row
        if not all(out_rows):
            raise _Refused(f"{op} '{node.name}' is not row-wise")
        out = node.outputs[0]
        ro, rank = self.row(out), len(out.meta.shape)
        if op in _ELEMENTWISE:
            if op in ("Div", "Mod") and out.meta.dtype.value not in ("float32", "float64",
                                                                      "float16", "bfloat16"):
                raise _Refused(f"integer {op} '{node.name}' over padding rows")
            for i, k in enumerate(kinds):
                v = node.input(i)
                if k == "rows":
                    if self.row(v) + rank - len(v.meta.shape) != ro:
                        raise _Refused(f"{op} '{node.name}' meets rows of another axis")
                elif k == "outer":
                    j = ro - (rank - len(v.meta.shape))
                    if j >= 0 and v.meta.shape[j] != 1:
                        raise _Refused(f"{op} '{node.name}' meets other rows")
            return
        if op in ("Transpose", "Identity"):
            return
        x = node.input(0)
        rx = self.row(x) if kinds[0] == "rows" else None
        if op in ("Squeeze", "Unsqueeze", "Split"):
            if kinds[0] != "rows" or (node.input(1) is not None and _ints(node.input(1)) is None):
                raise _Refused(f"{op} '{node.name}' has unknown axes")
            if op == "Split" and _norm(int(node.attrs.get("axis", 0)), len(x.meta.shape)) == rx:
                raise _Refused(f"Split '{node.name}' cuts the rows")
            return
        if op == "Slice":
            axes = _ints(node.input(3)) if node.input(3) is not None else None
            if kinds[0] != "rows" or axes is None or any(
                    _ints(node.input(i)) is None for i in (1, 2, 4) if node.input(i) is not None):
                raise _Refused(f"Slice '{node.name}' has unknown bounds")
            if rx in [_norm(a, len(x.meta.shape)) for a in axes]:
                raise _Refused(f"Slice '{node.name}' cuts the rows")
            return
        if op in ("Reshape", "Flatten", "Expand") and kinds[0] == "rows":
            xs, os_ = x.meta.shape, out.meta.shape
            if op == "Expand":
                if rx + rank - len(xs) != ro:
                    raise _Refused(f"Expand '{node.name}' moves the rows")
                return
            if math.prod(xs[:rx]) != 1 or math.prod(os_[:ro]) != 1 \
                    or math.prod(xs[rx + 1:]) != math.prod(os_[ro + 1:]):
                raise _Refused(f"{op} '{node.name}' moves the rows")
            return
        if op == "Gather":
            data, idx = node.input(0), node.input(1)
            axis = _norm(int(node.attrs.get("axis", 0)), len(data.meta.shape))
            if kinds[1] == "rows" and kinds[0] == "outer" and data.meta.is_static:
                return
            if kinds[0] == "rows" and kinds[1] == "outer" and axis != rx:
                return
            raise _Refused(f"Gather '{node.name}' mixes rows")
        if op == "GatherND":
            idx = node.input(1)
            if kinds[0] == "outer" and kinds[1] == "rows" and not node.attrs.get("batch_dims") \
                    and self.row(idx) != len(idx.meta.shape) - 1:
                return
            raise _Refused(f"GatherND '{node.name}' mixes rows")
        if op == "MatMul":
            a, b = node.input(0), node.input(1)
            if kinds == ["rows", "outer"] and len(b.meta.shape) == 2 \
                    and rx < len(a.meta.shape) - 1:
                return
            if kinds == ["outer", "rows"] and len(b.meta.shape) == 2 and self.row(b) == 1:
                return
            raise _Refused(f"MatMul '{node.name}' contracts the rows")
        if op == "Concat":
            axis = _norm(int(node.attrs.get("axis", 0)), rank)
            if all(k == "rows" for k in kinds) and axis != ro \
                    and all(self.row(v) == ro for v in node.inputs):
                return
            raise _Refused(f"Concat '{node.name}' joins rows")
        if op in ("Softmax", "LogSoftmax") and kinds[0] == "rows":
            if _norm(int(node.attrs.get("axis", -1)), rank) != ro:
                return
        if op in _REDUCE and kinds[0] == "rows" and node.input(1) is not None:
            axes = _ints(node.input(1))
            if axes and rx not in [_norm(a, len(x.meta.shape)) for a in axes]:
                return
        raise _Refused(f"{op} '{node.name}' is not row-wise")

    def _shape_node(self, node: Node) -> bool:
        return node.op_type in _SHAPE_OPS and not any(self._padded(o) for o in node.outputs)

    # -- which selection coordinate a value holds
    def _tag(self, node: Node) -> None:
        op, x = node.op_type, node.input(0)
        if x in self.coord_axis:
            axis = self.coord_axis[x]
            if op == "Transpose":
                perm = list(node.attrs.get("perm") or range(len(x.meta.shape))[::-1])
                self.coord_axis[node.outputs[0]] = perm.index(axis)
            elif op == "Split" and _norm(int(node.attrs.get("axis", 0)),
                                         len(x.meta.shape)) == axis:
                start = 0
                for o in node.outputs:
                    if o.meta.shape[axis] == 1:
                        self.coords[o] = start
                    start += o.meta.shape[axis]
            elif op == "Gather" and _norm(int(node.attrs.get("axis", 0)),
                                          len(x.meta.shape)) == axis:
                q = _ints(node.input(1))
                if q is not None and len(q) == 1:
                    self.coords[node.outputs[0]] = q[0]
            return
        if x in self.coords and op in ("Squeeze", "Unsqueeze", "Reshape", "Expand",
                                       "Identity", "Flatten") \
                or op == "Cast" and x in self.coords \
                and node.outputs[0].meta.dtype.value in ("int32", "int64"):
            self.coords[node.outputs[0]] = self.coords[x]

    # -- a scatter back into the token rows
    def _check_sink(self, node: Node) -> None:
        data, idx, upd = node.inputs
        if data in self.values or self._padded(data) or data.meta is None \
                or not data.meta.is_static:
            raise _Refused(f"{node.op_type} '{node.name}' scatters into computed rows")
        if self.coords.get(idx) != self.token_axis:
            raise _Refused(f"{node.op_type} '{node.name}' scatters by other indices")
        dshape, ushape = data.meta.shape, upd.meta.shape
        if node.op_type == "ScatterElements":
            axis = _norm(int(node.attrs.get("axis", 0)), len(dshape))
            ok = (self.row(upd) == axis == self.row(idx) and idx.meta.shape == ushape
                  and len(ushape) == len(dshape)
                  and all(u == d for i, (u, d) in enumerate(zip(ushape, dshape)) if i != axis))
        else:
            axis = 0
            ok = (len(idx.meta.shape) == 2 and idx.meta.shape[1] == 1 and self.row(idx) == 0
                  and self.row(upd) == 0 and tuple(ushape[1:]) == tuple(dshape[1:]))
        if not ok or dshape[axis] != self.rows:
            raise _Refused(f"{node.op_type} '{node.name}' does not write whole token rows")
        node.attrs["_token_axis"] = axis

    def elements(self) -> int:
        total = 0
        for v in self.values:
            if self._padded(v):
                total += math.prod(self.rows if d == self.sym else d for d in v.meta.shape)
        return total


def _index_chains_ok(tail: _Tail, grid: np.ndarray) -> bool:
    """Runs what computes the tail's indices on every coordinate of the mask: an index
    the padding rows give must be in range as any selected row's is. False when an index
    reads computed data (its padding rows are the data's) or a kernel fails."""
    feeds: set[Value] = set()
    stack = [n.input(1) for n in tail.nodes + tail.sinks if n.op_type in
             ("Gather", "GatherND", "ScatterElements", "ScatterND")]
    while stack:
        v = stack.pop()
        if v is None or v in feeds or v not in tail.values:
            continue
        feeds.add(v)
        if v.producer.op_type != "Shape":  # a shape reads no values
            stack.extend(v.producer.inputs)
    values: dict[Value, np.ndarray] = {tail.sel: grid}
    count = grid.shape[1]
    for node in tail.nodes:
        if not any(o in feeds for o in node.outputs):
            continue
        if node.op_type == "Shape":
            dims = [count if d == tail.sym else d for d in node.input(0).meta.shape]
            values[node.outputs[0]] = ops.get("Shape").compute(
                [np.broadcast_to(np.zeros((), np.uint8), dims)], ops.node_attrs(node))[0]
            continue
        args = []
        for v in node.inputs:
            if v is None:
                args.append(None)
            elif v in values:
                args.append(values[v])
            elif v.is_constant:
                args.append(np.asarray(v.const))
            else:
                return False  # an index that data decides
        try:
            with np.errstate(all="ignore"):
                outs = ops.get(node.op_type).compute(args, ops.node_attrs(node))
        except Exception:  # any failure over the grid keeps the host step
            return False
        values.update(zip(node.outputs, (np.asarray(o) for o in outs)))
    for node in tail.nodes:
        if node.op_type in ("Gather", "GatherND") and node.input(1) in values:
            data = node.input(0)
            args = [np.zeros(data.meta.shape, data.meta.dtype.numpy), values[node.input(1)]]
            try:
                ops.get(node.op_type).compute(args, ops.node_attrs(node))
            except Exception:  # out of range on some coordinate
                return False
    return True


def _bound(graph: Graph, node: Node, order: dict[Node, int]) -> str | None:
    """Rewrites the selection; None when done, else why not."""
    try:
        found = _analyse(graph, node, order)
    except _ANALYSIS_ERRORS as e:
        return f"not analysed ({type(e).__name__}: {e})"
    if isinstance(found, str):
        return found
    tail, slot = found
    _rewrite(graph, node, tail, slot)
    return None


def _analyse(graph: Graph, node: Node, order: dict[Node, int]) -> tuple[_Tail, int | None] | str:
    """The checked tail and the slot axis of a selection the rewrite is exact for, else why
    not."""
    mask, sel = node.input(0), node.outputs[0]
    shape = _shape(mask)
    if len(shape) == 2:
        excl = exclusive_axes(mask)
        if not excl & {0, 1}:
            return "a token can appear in more than one row"
        slot = min(excl & {0, 1})
        token_axis = 1 - slot
    else:
        slot, token_axis = None, 0
    rows = shape[token_axis]
    if rows > MAX_ROWS:
        return f"{rows} token rows is more than {MAX_ROWS}"
    try:
        tail = _Tail(sel, token_axis, rows)
        tail.check(graph, order)
    except _Refused as e:
        return str(e)
    if not tail.sinks:
        return "nothing scatters its rows back"
    if tail.elements() > MAX_TAIL_ELEMENTS:
        return f"the padded tail holds {tail.elements()} elements, over {MAX_TAIL_ELEMENTS}"
    if math.prod(shape) > MAX_ROWS * 64:  # the index check below walks every coordinate
        return f"a mask of {math.prod(shape)} elements is more than {MAX_ROWS * 64}"
    grid = np.stack(np.nonzero(np.ones(shape, bool))).astype(np.int64)
    if not _index_chains_ok(tail, grid):
        return "an index the padding rows give is out of range or data-dependent"
    return tail, slot


def _rewrite(graph: Graph, node: Node, tail: _Tail, slot: int | None) -> None:
    mask, sel = node.input(0), node.outputs[0]
    base = graph.unique_name(node.name)

    def add(op: str, ins: list, at: Node = node, **attrs) -> Value:
        return graph.add_node(op, ins, attrs=attrs, name=graph.unique_name(f"{base}_{op}"),
                              after=at).outputs[0]

    def const(a) -> Value:
        return graph.add_constant(None, np.asarray(a))

    rows = tail.rows
    picked = mask if mask.meta.dtype.value == "bool" else add("Cast", [mask], to=9)
    if slot is None:
        valid = picked
    else:
        ones = add("Cast", [picked], to=1)
        where = add("ArgMax", [ones], axis=slot, keepdims=0)
        any_ = add("ReduceMax", [ones, const(np.array([slot], np.int64))], keepdims=0)
        valid = add("Cast", [any_], to=9)
    order, position, count = _order_picked_first(graph, add, const, valid, rows)
    tokens = add("Reshape", [order, const(np.array([1, rows], np.int64))])
    if slot is None:
        new_sel = tokens
    else:
        where = add("Gather", [where, order], axis=0)
        where = add("Reshape", [where, const(np.array([1, rows], np.int64))])
        parts = [where, tokens] if slot == 0 else [tokens, where]
        new_sel = add("Concat", parts, axis=0)
    graph.replace_all_uses(sel, new_sel)
    graph.remove_node(node)
    _tag_products(tail, count)
    for sink in tail.sinks:
        axis = sink.attrs.pop("_token_axis")
        data, _, upd = sink.inputs
        view = [1] * len(data.meta.shape)
        view[axis] = rows
        keep = add("Reshape", [valid, const(np.array(view, np.int64))], at=sink)
        upd = add("Gather", [upd, position], at=sink, axis=axis)  # back into token order
        reduction = sink.attrs.get("reduction", "none")
        new = upd if reduction == "none" else add(_COMBINE[reduction], [data, upd], at=sink)
        where = graph.add_node("Where", [keep, new, data], outputs=0, after=sink,
                               name=graph.unique_name(f"{sink.name}_rows"))
        graph.hand_over_outputs(sink, [where])


def _order_picked_first(graph: Graph, add, const, valid: Value, rows: int
                        ) -> tuple[Value, Value, Node]:
    """(order, position, the node giving the count n) of a [rows] validity mask: order
    lists the picked tokens in token order and then the others (a permutation), position
    is its inverse (token t is row position[t]), n the picked tokens ([1], int64)."""
    flags = add("Cast", [valid], to=7)
    picked_upto = add("CumSum", [flags, const(np.array(0, np.int64))])  # picked in 0..t
    count = add("ReduceSum", [flags, const(np.array([0], np.int64))], keepdims=1)
    one = const(np.array(1, np.int64))
    tokens = const(np.arange(rows, dtype=np.int64))
    # a picked token is row (picked before it); another is row n + (others before it)
    as_picked = add("Sub", [picked_upto, one])
    as_other = add("Sub", [add("Add", [count, tokens]), picked_upto])
    position = add("Where", [valid, as_picked, as_other])
    order = add("ScatterElements", [tokens, position, tokens], axis=0)
    return order, position, count.producer


def _tag_products(tail: _Tail, count: Node) -> None:
    """Tags the tail's MatMuls whose folded rows start with the selection's: only the first
    n * unit of them matter (module docstring)."""
    for node in tail.nodes:
        if node.op_type != "MatMul" or not tail._padded(node.input(0)) \
                or tail._padded(node.input(1)):
            continue
        shape = node.input(0).meta.shape
        at = tail.row(node.input(0))
        inner = shape[at + 1:-1]
        if at >= len(shape) - 1 or any(d != 1 for d in shape[:at]) \
                or not all(isinstance(d, int) for d in inner):
            continue
        node.attrs["_rows_count"] = count.name
        node.attrs["_rows_unit"] = math.prod(inner)


def bound_expert_selections(graph: Graph) -> PassResult:
    """Mixture-of-experts selections as the padded rows the device runs (module docstring)."""
    pinned, bounded, kept = 0, 0, []
    order: dict[Node, int] = {}
    for node in list(graph.nodes):
        if node.op_type != "NonZero" or node.graph is None:
            continue
        if _pin(graph, node):
            pinned += 1
            continue
        shape, sel = _shape(node.input(0)), _shape(node.outputs[0])
        if shape is None or not node.input(0).meta.is_static or len(shape) not in (1, 2) \
                or sel is None or len(sel) != 2 or isinstance(sel[1], int):
            continue  # not a selection of rows this pass bounds
        if not order:
            order = {n: i for i, n in enumerate(graph.nodes)}
        why = _bound(graph, node, order)
        if why is None:
            bounded += 1
            order = {}  # the graph changed
        else:
            kept.append(f"'{node.name}': {why}")
    msg = f"{bounded} expert selections bounded by their token rows, {pinned} counts pinned"
    if kept:
        msg += f"; kept on the host: {'; '.join(kept[:4])}" + (" ..." if len(kept) > 4 else "")
    return PassResult(graph, bounded + pinned > 0, msg)
