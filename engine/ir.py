"""The graph IR: values (tensors) and nodes (ops) with def-use tracking.

A Value is produced by at most one node (or is a graph input or a constant) and knows its
users; a Node's inputs are set only through methods that keep the users of the producers
in step. `Graph.lint()` checks all of it and is run after every pass in tests.
"""

from __future__ import annotations

import contextlib
import dataclasses
import enum
import functools
import heapq
import itertools
import math
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import numpy as np

from .dtypes import DType
from .errors import InvalidGraph

Dim = int | str  # a fixed size, or a named symbol such as "batch"


@dataclasses.dataclass(frozen=True)
class TensorMeta:
    """What shape inference knows about a value: dtype and shape (None: unknown rank)."""

    dtype: DType
    shape: tuple[Dim, ...] | None

    # is_static and numel are asked of every value by nearly every pass (~12 k times in one
    # compile of a 500-node net): a meta is frozen, so each is worked out once and kept
    # (cached_property writes the instance's dict, past the frozen __setattr__; fields,
    # equality and hashing do not see it).
    @functools.cached_property
    def is_static(self) -> bool:
        return self.shape is not None and all(isinstance(d, int) for d in self.shape)

    @property
    def rank(self) -> int | None:
        return None if self.shape is None else len(self.shape)

    @functools.cached_property
    def numel(self) -> int:
        """The element count, exact (Python ints: a product past int64 is not wrapped)."""
        if not self.is_static:
            raise ValueError(f"numel of non-static shape {self.shape}")
        return math.prod(self.shape)  # type: ignore[arg-type]

    @property
    def nbytes(self) -> int:
        return self.numel * self.dtype.itemsize

    def __str__(self) -> str:
        if self.shape is None:
            return f"{self.dtype.value}[?]"
        return f"{self.dtype.value}[{','.join(str(d) for d in self.shape)}]"


class ValueKind(enum.Enum):
    INPUT = "input"
    CONSTANT = "constant"
    INTERMEDIATE = "intermediate"


class Engine(enum.Enum):
    DEVICE = "device"  # native runtime kernels (GE's AI Core role)
    HOST = "host"  # numpy reference kernels on the host (GE's AI CPU role)


@dataclasses.dataclass
class NodeMeta:
    """The one slot where passes record what they computed about a node."""

    engine: Engine | None = None
    partition: int | None = None
    stream: int | None = None
    fused: tuple[str, ...] = ()  # names of the source nodes folded into this one
    rejections: tuple[str, ...] = ()  # why engines before `engine` declined
    # a control-flow node's bodies compiled during placement, by attribute (CompiledModel):
    # expanded into its device program when it is placed there (codegen/control.py), else
    # run per branch or iteration by its host step
    bodies: dict[str, Any] = dataclasses.field(default_factory=dict)
    # what shape inference last read and gave (prepare/infer_shapes.py), to skip a node
    # that is as it was when inference runs again
    inferred: tuple | None = dataclasses.field(default=None, compare=False, repr=False,
                                               metadata={"offline": False})

    def copy(self) -> NodeMeta:
        """A shallow copy (what dataclasses.replace makes, without calling __init__)."""
        meta = NodeMeta.__new__(NodeMeta)
        meta.__dict__.update(self.__dict__)
        return meta


_PLAIN = (str, int, float, bool, type(None))


def plain_attrs(attrs: dict) -> bool:
    """Whether every attribute is a number, string, None or a flat list of them: what a
    key made of the attributes' repr stands for exactly (an array's repr elides)."""
    for value in attrs.values():
        leaves = value if isinstance(value, (list, tuple)) else (value,)
        if not all(isinstance(x, _PLAIN) for x in leaves):
            return False
    return True


class Value:
    __slots__ = ("name", "kind", "producer", "index", "users", "meta", "const", "format")

    def __init__(self, name: str, kind: ValueKind, meta: TensorMeta | None = None,
                 const: np.ndarray | None = None) -> None:
        # Physical layout chosen by layout assignment ("nhwc"...); "" = plain row-major.
        self.format = ""
        self.name = name
        self.kind = kind
        self.producer: Node | None = None
        self.index = 0
        self.users: list[Node] = []
        self.meta = meta
        self.const = const

    @property
    def is_constant(self) -> bool:
        return self.const is not None

    def __repr__(self) -> str:
        return f"Value({self.name!r}, {self.meta})"


class Node:
    __slots__ = ("name", "op_type", "attrs", "_inputs", "outputs", "meta", "graph")

    def __init__(self, graph: Graph, name: str, op_type: str, attrs: dict[str, Any]) -> None:
        self.graph = graph
        self.name = name
        self.op_type = op_type
        self.attrs = attrs
        self._inputs: tuple[Value | None, ...] = ()
        self.outputs: list[Value] = []
        self.meta = NodeMeta()

    @property
    def inputs(self) -> tuple[Value | None, ...]:
        return self._inputs

    def set_inputs(self, values: Sequence[Value | None]) -> None:
        for v in self._inputs:
            if v is not None:
                v.users.remove(self)
        self._inputs = tuple(values)
        for v in self._inputs:
            if v is not None:
                v.users.append(self)

    def replace_input(self, old: Value, new: Value) -> None:
        self.set_inputs([new if v is old else v for v in self._inputs])

    def input(self, i: int) -> Value | None:
        """The i-th input, or None when absent (omitted optional or past the end)."""
        return self._inputs[i] if i < len(self._inputs) else None

    def attr(self, key: str, default: Any = None) -> Any:
        return self.attrs.get(key, default)

    def __repr__(self) -> str:
        ins = ", ".join(v.name if v else "" for v in self._inputs)
        outs = ", ".join(v.name for v in self.outputs)
        return f"Node({self.name!r}: {self.op_type}({ins}) -> {outs})"


class Graph:
    def __init__(self, name: str = "graph") -> None:
        self.name = name
        self.inputs: list[Value] = []
        self.outputs: list[Value] = []
        self.nodes: list[Node] = []
        self.values: dict[str, Value] = {}
        self.opset = 17  # the ONNX opset whose op semantics the nodes follow
        # Where the graph came from, as its importer read it: {"framework", "exporter",
        # "version"} (engine/provenance.py; recorded in the compiled model)
        self.producer: dict[str, str] = {}
        # What stage 3 did, for the build and the report (set on the compile's copy).
        self.fusions: list[str] = []
        self.layouts_assigned = False
        self._node_names: set[str] = set()
        self._counter = itertools.count()
        self._added: list[Node] | None = None  # nodes add_node made (recording_additions)

    # ---- construction -------------------------------------------------------------
    def unique_name(self, prefix: str) -> str:
        while True:
            name = f"{prefix}_{next(self._counter)}"
            if name not in self.values and name not in self._node_names:
                return name

    def _new_value(self, name: str, kind: ValueKind, **kw) -> Value:
        if not name:
            raise InvalidGraph("a tensor has an empty name", graph=self.name)
        if name in self.values:
            raise InvalidGraph(f"tensor '{name}' is defined more than once", graph=self.name,
                               tensor=name)
        v = Value(name, kind, **kw)
        self.values[name] = v
        return v

    def add_input(self, name: str, meta: TensorMeta) -> Value:
        v = self._new_value(name, ValueKind.INPUT, meta=meta)
        self.inputs.append(v)
        return v

    def add_constant(self, name: str | None, array: np.ndarray) -> Value:
        array = np.asarray(array)
        name = name or self.unique_name("const")
        meta = TensorMeta(DType.from_numpy(array.dtype), tuple(int(d) for d in array.shape))
        return self._new_value(name, ValueKind.CONSTANT, meta=meta, const=array)

    def add_node(self, op_type: str, inputs: Sequence[Value | None], *,
                 outputs: Sequence[str] | int = 1, attrs: dict[str, Any] | None = None,
                 name: str | None = None, after: Node | None = None) -> Node:
        """Create a node; outputs are names, or a count of fresh names.

        The node is appended, or inserted right after `after` when given.
        """
        name = name or self.unique_name(op_type.lower())
        if name in self._node_names:
            raise InvalidGraph(f"node name '{name}' is used twice", graph=self.name, node=name)
        node = Node(self, name, op_type, dict(attrs or {}))
        self._node_names.add(name)
        out_names = ([self.unique_name(f"{node.name}_out") for _ in range(outputs)]
                     if isinstance(outputs, int) else list(outputs))
        for i, out in enumerate(out_names):
            v = self._new_value(out, ValueKind.INTERMEDIATE)
            v.producer, v.index = node, i
            node.outputs.append(v)
        node.set_inputs(inputs)
        if after is None:
            self.nodes.append(node)
        else:
            self.nodes.insert(self.nodes.index(after) + 1, node)
        if self._added is not None:
            self._added.append(node)
        return node

    @contextlib.contextmanager
    def recording_additions(self) -> Iterator[list[Node]]:
        """Yields the list of the nodes add_node makes while the block runs, in the order
        made (an order their inputs allow: each reads only nodes made before it)."""
        outer, self._added = self._added, []
        try:
            yield self._added
        finally:
            added, self._added = self._added, outer
            if outer is not None:
                outer.extend(added)

    # ---- mutation -------------------------------------------------------------------
    def input_as_constant(self, v: Value, array: np.ndarray) -> None:
        """Input `v` becomes a constant of value `array` (its name, readers and type kept):
        a body's enclosing value that is a constant of the enclosing graph."""
        if v not in self.inputs:
            raise InvalidGraph(f"'{v.name}' is not an input", graph=self.name, tensor=v.name)
        self.inputs.remove(v)
        v.kind, v.const = ValueKind.CONSTANT, np.asarray(array)

    def replace_all_uses(self, old: Value, new: Value) -> None:
        for user in list(dict.fromkeys(old.users)):
            user.replace_input(old, new)
        self.outputs = [new if v is old else v for v in self.outputs]

    def hand_over_outputs(self, old: Node, news: Sequence[Node]) -> None:
        """Each of `news` takes over the output value of `old` at its position, as its next
        output (a node made with no outputs: its first; one node handed the outputs of several
        old ones in turn: its outputs in that order), so the value keeps its name (a graph
        output's too) and readers; then `old` goes."""
        for k, (out, new) in enumerate(zip(list(old.outputs), news)):
            spare = self._new_value(self.unique_name(f"{out.name}_replaced"), out.kind)
            spare.producer, spare.index = old, k
            old.outputs[k] = spare
            out.producer, out.index = new, len(new.outputs)
            new.outputs.append(out)
        self.remove_node(old)

    def remove_node(self, node: Node) -> None:
        for out in node.outputs:
            if out.users or out in self.outputs:
                raise InvalidGraph(f"cannot remove node '{node.name}': output '{out.name}' "
                                   f"is still used", graph=self.name, node=node.name)
        node.set_inputs([])
        for out in node.outputs:
            del self.values[out.name]
            out.producer = None  # no node <-> value cycle left for the collector
        self.nodes.remove(node)
        self._node_names.discard(node.name)
        node.graph = None  # type: ignore[assignment]

    def remove_nodes(self, nodes: Sequence[Node]) -> None:
        """Remove `nodes` at once (one pass over the node list, not one a node): their
        outputs may be read only among them."""
        gone = set(nodes)
        for node in nodes:
            for out in node.outputs:
                if out in self.outputs or any(u not in gone for u in out.users):
                    raise InvalidGraph(f"cannot remove node '{node.name}': output "
                                       f"'{out.name}' is still used", graph=self.name,
                                       node=node.name)
        for node in nodes:
            node.set_inputs([])
        for node in nodes:
            for out in node.outputs:
                del self.values[out.name]
                out.producer = None
            self._node_names.discard(node.name)
            node.graph = None  # type: ignore[assignment]
        self.nodes = [n for n in self.nodes if n not in gone]

    def remove_unused_constants(self) -> int:
        dead = [v for v in self.values.values()
                if v.kind is ValueKind.CONSTANT and not v.users and v not in self.outputs]
        for v in dead:
            del self.values[v.name]
        return len(dead)

    def producer_map(self) -> dict[Node, list[Node]]:
        return {n: [v.producer for v in n.inputs if v is not None and v.producer is not None]
                for n in self.nodes}

    def toposort(self) -> None:
        """Order nodes so every producer precedes its users (stable); raise on a cycle."""
        index = {n: i for i, n in enumerate(self.nodes)}
        if self._in_order(index):  # the stable sort of a sorted list is that list: the
            return  # usual case (the pass manager sorts after every pass that changed)
        pending = {n: len({v.producer for v in n.inputs
                           if v is not None and v.producer is not None}) for n in self.nodes}
        ready = [n for n in self.nodes if pending[n] == 0]
        order: list[Node] = []
        heap = [(index[n], id(n), n) for n in ready]
        heapq.heapify(heap)
        while heap:
            _, _, n = heapq.heappop(heap)
            order.append(n)
            for user in dict.fromkeys(u for out in n.outputs for u in out.users):
                if user not in pending:
                    continue
                pending[user] -= 1
                if pending[user] == 0:
                    heapq.heappush(heap, (index[user], id(user), user))
        if len(order) != len(self.nodes):
            stuck = [n for n in self.nodes if pending[n] > 0]
            cycle = self._find_cycle(stuck)
            raise InvalidGraph("the graph has a cycle: " + " -> ".join(cycle),
                               graph=self.name, node=cycle[0])
        self.nodes = order

    def _in_order(self, index: dict[Node, int]) -> bool:
        """Whether every node's producers (all of them in the graph) come before it."""
        if len(index) != len(self.nodes):
            return False
        for i, n in enumerate(self.nodes):
            for v in n.inputs:
                if v is not None and v.producer is not None and \
                        index.get(v.producer, len(index)) >= i:
                    return False
        return True

    def _find_cycle(self, stuck: list[Node]) -> list[str]:
        stuck_set = set(stuck)
        start = stuck[0]
        path: list[Node] = []
        seen: dict[Node, int] = {}
        node = start
        while node not in seen:
            seen[node] = len(path)
            path.append(node)
            preds = [v.producer for v in node.inputs
                     if v is not None and v.producer in stuck_set]
            node = preds[0]
        cyc = path[seen[node]:][::-1]
        return [n.name for n in cyc] + [cyc[0].name]

    # ---- queries --------------------------------------------------------------------
    def node(self, name: str) -> Node:
        for n in self.nodes:
            if n.name == name:
                return n
        raise KeyError(name)

    def constants(self) -> list[Value]:
        return [v for v in self.values.values() if v.kind is ValueKind.CONSTANT]

    def lint(self) -> None:
        """Check ownership, def-use consistency and topological order; raise InvalidGraph."""
        def fail(msg: str, node: Node | None = None) -> None:
            raise InvalidGraph(f"lint: {msg}", graph=self.name,
                               node=node.name if node else None)

        seen: set[Value] = set(self.inputs) | set(self.constants())
        names: set[str] = set()
        node_set = set(self.nodes)
        for n in self.nodes:
            if n.graph is not self:
                fail(f"node '{n.name}' belongs to another graph", n)
            if n.name in names:
                fail(f"node name '{n.name}' is used twice", n)
            names.add(n.name)
            for v in n.inputs:
                if v is None:
                    continue
                if self.values.get(v.name) is not v:
                    fail(f"node '{n.name}' reads '{v.name}', which is not in the graph", n)
                if v not in seen:
                    fail(f"node '{n.name}' reads '{v.name}' before it is produced", n)
                if n not in v.users:
                    fail(f"'{v.name}' does not list its user '{n.name}'", n)
            for i, out in enumerate(n.outputs):
                if out.producer is not n or out.index != i:
                    fail(f"output '{out.name}' of '{n.name}' has a wrong producer", n)
                if self.values.get(out.name) is not out:
                    fail(f"output '{out.name}' of '{n.name}' is not registered", n)
                seen.add(out)
        for v in self.values.values():
            for u in v.users:
                if u not in node_set:
                    fail(f"'{v.name}' lists user '{u.name}', which is not in the graph")
                if v not in u.inputs:
                    fail(f"'{v.name}' lists user '{u.name}', which does not read it")
        for v in self.inputs:
            if v.kind is not ValueKind.INPUT:
                fail(f"graph input '{v.name}' is not an input value")
        for v in self.outputs:
            if v not in seen:
                fail(f"graph output '{v.name}' is never produced")

    # ---- copying --------------------------------------------------------------------
    def copy(self) -> Graph:
        """A structural copy; constant arrays are shared (they are never mutated)."""
        g = Graph(self.name)
        g.opset = self.opset
        g.producer = dict(self.producer)
        g._counter = itertools.count(next(self._counter))  # unique_name checks clashes
        vmap: dict[Value, Value] = {}
        for v in self.inputs:
            vmap[v] = g.add_input(v.name, v.meta)
        # The source graph's names are unique and its nodes in order (its own invariants),
        # so values and nodes are made directly, without add_node's checks and fresh
        # names: a compile copies the graph twice (analyze, bind_shapes).
        values = g.values
        for v in self.constants():
            nv = vmap[v] = Value(v.name, ValueKind.CONSTANT, v.meta, v.const)
            values[v.name] = nv
        for n in self.nodes:
            nn = Node(g, n.name, n.op_type, dict(n.attrs))
            nn.meta = n.meta.copy()
            ins = tuple(vmap[v] if v is not None else None for v in n.inputs)
            for i, o in enumerate(n.outputs):
                no = vmap[o] = values[o.name] = Value(o.name, ValueKind.INTERMEDIATE, o.meta)
                no.producer, no.index = nn, i
                nn.outputs.append(no)
            nn._inputs = ins
            for v in ins:
                if v is not None:
                    v.users.append(nn)
            g._node_names.add(n.name)
            g.nodes.append(nn)
        g.outputs = [vmap[v] for v in self.outputs]
        return g

    def release(self) -> None:
        """Break the links between this graph's nodes and values (each node's graph,
        inputs and outputs; each value's producer and users) and empty it, so reference
        counting frees them as soon as nothing else holds them. A compile does this to
        its own copy once the model is built: tens of thousands of objects in cycles
        otherwise wait for the collector, which then walks them all (2-10 ms a compile).
        Body graphs held in attributes are left as they are (they are shared)."""
        for n in self.nodes:
            n._inputs = ()
            n.outputs = []
            n.graph = None  # type: ignore[assignment]
        for v in self.values.values():
            v.producer = None
            v.users = []
        self.nodes = []
        self.values = {}
        self.inputs = []
        self.outputs = []
        self._node_names = set()

    def __repr__(self) -> str:
        return f"Graph({self.name!r}, {len(self.nodes)} nodes)"

    def summary(self) -> str:
        lines = [f"graph {self.name}"]
        lines += [f"  input {v.name}: {v.meta}" for v in self.inputs]
        for n in self.nodes:
            ins = ", ".join(v.name if v else "_" for v in n.inputs)
            outs = ", ".join(f"{o.name}: {o.meta}" for o in n.outputs)
            lines.append(f"  {n.name} = {n.op_type}({ins}) -> {outs}")
        lines += [f"  output {v.name}" for v in self.outputs]
        return "\n".join(lines)


def iter_values(nodes: Iterable[Node]) -> Iterable[Value]:
    for n in nodes:
        yield from (v for v in n.inputs if v is not None)
        yield from n.outputs
