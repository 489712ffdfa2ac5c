"""The graph construction API (GE's `ge::Graph` and `ge::op::*`): build a graph op by op.

    g = graphengine.Graph("mlp")
    x = g.input("x", "float32", ("batch", 64))
    h = ops.Relu(ops.Gemm(x, w1, b1, transB=1))
    g.output(ops.Softmax(ops.MatMul(h, w2), axis=-1), name="probs")
    session.add_graph(g)

Every call adds one node to an IR Graph and infers its outputs' dtype and shape at once with
the op's own schema, so a wrong arity, an unknown or mistyped attribute or inputs that do not
fit the op are refused at the call that makes them, naming the op, and `tensor.shape` is
known while the graph is built. The graph handed to a session is a copy of the IR
(`to_ir`), or the wire GraphDef (`to_graphdef`) for a remote one. The functions of
`graphengine.ops` are made from the op registry in `builder_ops.py`.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from . import ops as oplib
from .bounds import MAX_ELEMENTS, MAX_RANK
from .builder_ops import (
    arity_text,
    checked_attrs,
    docstring,
    required_outputs,
    signature,
    split_key,
    type_ties,
)
from .dtypes import DType
from .errors import GraphEngineError, InvalidGraph
from .ir import Dim, Node, TensorMeta, Value, ValueKind
from .ir import Graph as IRGraph

_SYMBOL = re.compile(r"^[A-Za-z_][A-Za-z0-9_.]*$")
MAX_NAME = 4096  # what the importers accept of a name (engine/importers/text.py)
MAX_OUTPUTS = 1 << 10  # outputs one builder call may ask a node for (Split's pieces)


class OpCallError(InvalidGraph, TypeError):
    """A builder call that does not fit its op: wrong arity, unknown or mistyped attribute.
    An InvalidGraph (INVALID_ARGUMENT) and, as Python's own wrong calls are, a TypeError."""


def as_dtype(dtype: Any) -> DType:
    """A DType from a DType, a numpy dtype or type, or a name ("float32", "int64")."""
    if isinstance(dtype, DType):
        return dtype
    if isinstance(dtype, str):
        try:
            return DType(dtype)
        except ValueError:
            pass
    try:
        return DType.from_numpy(dtype)
    except TypeError:
        known = ", ".join(d.value for d in DType)
        raise InvalidGraph(f"{dtype!r:.60} is not a dtype the engine knows (one of {known})"
                           ) from None


class Tensor:
    """One value of a graph under construction: its name, dtype and inferred shape.

    Arithmetic operators add nodes: `a + b` is `ops.Add(a, b)`, `a @ b` is `ops.MatMul`."""

    __slots__ = ("_graph", "_value")

    def __init__(self, graph: Graph, value: Value) -> None:
        self._graph = graph
        self._value = value

    @property
    def name(self) -> str:
        return self._value.name

    @property
    def graph(self) -> Graph:
        return self._graph

    @property
    def dtype(self) -> np.dtype:
        return self._value.meta.dtype.numpy

    @property
    def shape(self) -> tuple[Dim, ...] | None:
        """Each dim an int or a symbol (str); None when even the rank is unknown."""
        return self._value.meta.shape

    @property
    def meta(self) -> TensorMeta:
        return self._value.meta

    def _op(self, op_type: str, *inputs: Any) -> Tensor:
        return self._graph.add(op_type, inputs)  # type: ignore[return-value]

    def __add__(self, other: Any) -> Tensor:
        return self._op("Add", self, other)

    def __radd__(self, other: Any) -> Tensor:
        return self._op("Add", other, self)

    def __sub__(self, other: Any) -> Tensor:
        return self._op("Sub", self, other)

    def __rsub__(self, other: Any) -> Tensor:
        return self._op("Sub", other, self)

    def __mul__(self, other: Any) -> Tensor:
        return self._op("Mul", self, other)

    def __rmul__(self, other: Any) -> Tensor:
        return self._op("Mul", other, self)

    def __truediv__(self, other: Any) -> Tensor:
        return self._op("Div", self, other)

    def __rtruediv__(self, other: Any) -> Tensor:
        return self._op("Div", other, self)

    def __matmul__(self, other: Any) -> Tensor:
        return self._op("MatMul", self, other)

    def __rmatmul__(self, other: Any) -> Tensor:
        return self._op("MatMul", other, self)

    def __neg__(self) -> Tensor:
        return self._op("Neg", self)

    def __repr__(self) -> str:
        return f"Tensor({self.name!r}, {self._value.meta})"


class Graph:
    """A graph built op by op. `session.add_graph(graph)` (in-process or remote) takes it."""

    def __init__(self, name: str = "graph") -> None:
        from graphengine import __version__

        from .importers.graphdef import CANONICAL_OPSET

        self._ir = IRGraph(checked_name(name, "graph name"))
        self._ir.opset = CANONICAL_OPSET  # the op forms the schemas implement
        self._ir.producer = {"framework": "graphengine", "exporter": "graphengine.Graph",
                             "version": __version__}

    @property
    def name(self) -> str:
        return self._ir.name

    @property
    def inputs(self) -> list[Tensor]:
        return [Tensor(self, v) for v in self._ir.inputs]

    @property
    def outputs(self) -> list[Tensor]:
        return [Tensor(self, v) for v in self._ir.outputs]

    @property
    def nodes(self) -> list[Node]:
        """The IR nodes so far, in the order they were added (read them, do not edit)."""
        return list(self._ir.nodes)

    def input(self, name: str, dtype: Any, shape: Sequence[Dim | None]) -> Tensor:
        """A graph input. Dims are ints or symbols (str: "batch", "seq"); inputs that name
        the same symbol share that size at run time. None makes a fresh symbol."""
        name = checked_name(name, "input name")
        if isinstance(shape, (str, bytes)) or not isinstance(shape, Iterable):
            raise InvalidGraph(f"input '{name}': shape must be a sequence of dims, "
                               f"got {shape!r:.60}", graph=self.name, tensor=name)
        dims: list[Dim] = []
        for i, d in enumerate(shape):
            if i >= MAX_RANK:
                raise InvalidGraph(f"input '{name}' has more than {MAX_RANK} dims",
                                   graph=self.name, tensor=name)
            if d is None:
                d = f"{name}_d{i}"
            if isinstance(d, (bool, np.bool_)) or not isinstance(d, (int, np.integer, str)):
                raise InvalidGraph(f"input '{name}': dim {i} is {d!r:.40}; a dim is an int "
                                   "or a symbol name", graph=self.name, tensor=name)
            if isinstance(d, str):
                if not _SYMBOL.match(d) or len(d) > 256:
                    raise InvalidGraph(f"input '{name}': dim {i} symbol {d!r:.40} is not a "
                                       "name (letters, digits, '_' and '.')",
                                       graph=self.name, tensor=name)
            elif not 0 <= int(d) <= MAX_ELEMENTS:
                raise InvalidGraph(f"input '{name}': dim {i} is {int(d)}, outside "
                                   f"[0, {MAX_ELEMENTS}]", graph=self.name, tensor=name)
            dims.append(d if isinstance(d, str) else int(d))
        meta = TensorMeta(as_dtype(dtype), tuple(dims))
        self._check_free(name)
        return Tensor(self, self._ir.add_input(name, meta))

    def constant(self, array: Any, name: str | None = None) -> Tensor:
        """A constant tensor (a copy of `array`: later changes to it do not reach the graph).
        Python floats become float32, the engine's float; numpy arrays keep their dtype."""
        arr = np.array(array)
        if arr.dtype == np.float64 and not isinstance(array, (np.ndarray, np.generic)):
            arr = arr.astype(np.float32)
        if arr.dtype == object or arr.dtype.kind in "US":
            raise InvalidGraph(f"constant {name or ''}: a {type(array).__name__} is not a "
                               "numeric array", graph=self.name)
        as_dtype(arr.dtype)
        if arr.ndim > MAX_RANK:
            raise InvalidGraph(f"constant {name or ''}: rank {arr.ndim} is above {MAX_RANK}",
                               graph=self.name)
        if name is not None:
            name = checked_name(name, "constant name")
            self._check_free(name)
        return Tensor(self, self._ir.add_constant(name, arr))

    def variable(self, name: str, initial: Any = None, *, shape: Sequence[int] | None = None,
                 dtype: Any = None) -> Tensor:
        """A session variable (ops/variables.py): the named tensor of the session that runs
        the graph, shared by its graphs and kept on the device between runs. `initial` (an
        array) gives its dtype, shape and the value a session that has no variable of this
        name creates it with; or give `shape` and `dtype` for one created zero-filled. The
        Tensor is a reference: read it, or write it with ops.Assign / AssignAdd /
        AssignSlice, whose outputs are the variable after the write."""
        name = checked_name(name, "variable name")
        attrs: dict[str, Any] = {"variable": name}
        if initial is not None:
            arr = np.array(initial)
            if arr.dtype == np.float64 and not isinstance(initial, (np.ndarray, np.generic)):
                arr = arr.astype(np.float32)
            if (shape is not None and tuple(shape) != arr.shape) or \
                    (dtype is not None and as_dtype(dtype).numpy != arr.dtype):
                raise InvalidGraph(f"variable '{name}': the initial value is "
                                   f"{arr.dtype.name}{list(arr.shape)}, not the shape and dtype "
                                   f"given", graph=self.name)
            attrs.update(dtype=arr.dtype.name, shape=[int(d) for d in arr.shape], value=arr)
        elif shape is None or dtype is None:
            raise InvalidGraph(f"variable '{name}': give an initial value, or a shape and a "
                               f"dtype (zero-filled)", graph=self.name)
        else:
            if isinstance(shape, (str, bytes)) or not isinstance(shape, Iterable) or any(
                    isinstance(d, (bool, np.bool_)) or not isinstance(d, (int, np.integer))
                    for d in shape):
                raise InvalidGraph(f"variable '{name}': shape must be a sequence of ints, got "
                                   f"{shape!r:.60}", graph=self.name)
            attrs.update(dtype=as_dtype(dtype).value, shape=[int(d) for d in shape])
        # the node (and its value) is "variable.<name>": the variable's own name stays free
        # for the graph's tensors (an output "token" beside the variable "token")
        node = f"variable.{name}"
        if node in self._ir.values or node in {n.name for n in self._ir.nodes}:
            node = self._ir.unique_name(node)
        return self.add("Variable", [], attrs, name=node)  # type: ignore[return-value]

    def output(self, tensor: Tensor, name: str | None = None) -> Tensor:
        """Mark `tensor` a graph output, named `name` when given: a node's value is renamed,
        an input, constant or value already an output is passed through an Identity."""
        self._own(tensor, "output")
        value = tensor._value
        if name is not None and name != value.name:
            name = checked_name(name, "output name")
            self._check_free(name)
            if value.kind is ValueKind.INTERMEDIATE and value not in self._ir.outputs:
                del self._ir.values[value.name]
                value.name = name
                self._ir.values[name] = value
            else:
                node = self._ir.add_node("Identity", [value], outputs=[name],
                                         name=self._ir.unique_name("output"))
                node.outputs[0].meta = value.meta
                value = node.outputs[0]
        if value in self._ir.outputs:
            raise InvalidGraph(f"'{value.name}' is already an output of graph '{self.name}'",
                               graph=self.name, tensor=value.name)
        self._ir.outputs.append(value)
        return Tensor(self, value)

    @property
    def producer(self) -> dict[str, str]:
        """Where the graph comes from, recorded in compiled models (engine/provenance.py):
        {"framework", "exporter", "version"}; a converter that builds graphs sets its own."""
        return self._ir.producer

    @producer.setter
    def producer(self, info: dict[str, str]) -> None:
        self._ir.producer = {k: str(info.get(k, ""))[:200]
                             for k in ("framework", "exporter", "version")}

    def to_ir(self) -> IRGraph:
        """A copy of the graph as the compiler's IR (later building does not change it)."""
        if not self._ir.outputs:
            raise InvalidGraph(f"graph '{self.name}' has no outputs: call output() first",
                               graph=self.name)
        return self._ir.copy()

    def to_graphdef(self):
        """The graph as the session API's wire message (graphengine.v1.GraphDef)."""
        from .importers.graphdef import export_graphdef

        return export_graphdef(self.to_ir())

    def save(self, path: str | os.PathLike) -> None:
        """Write the graph to a file `add_graph(path)` and `graphengine compile` read back:
        a binary GraphDef, or its text form when the name ends in .pbtxt or .txt."""
        from .importers.graphdef import TEXT_SUFFIXES

        gd = self.to_graphdef()
        if str(path).endswith(TEXT_SUFFIXES):
            from google.protobuf import text_format

            data = text_format.MessageToString(gd).encode()
        else:
            data = gd.SerializeToString(deterministic=True)
        with open(path, "wb") as f:
            f.write(data)

    def add(self, op_type: str, inputs: Sequence[Any], attrs: dict[str, Any] | None = None,
            *, outputs: int | Sequence[str] | None = None, name: str | None = None
            ) -> Tensor | tuple[Tensor, ...]:
        """Add one node of any registered op (`graphengine.ops` functions call this): the
        node's outputs, as one Tensor or a tuple of them."""
        schema = oplib.get(op_type)
        label = f"ops.{op_type.rpartition('.')[2]}()"
        attrs = checked_attrs(schema, label, dict(attrs or {}), OpCallError, self.name)
        if name is not None:
            name = checked_name(name, "node name")
        inputs = list(inputs)
        _check_arity(schema, label, inputs, self.name)
        before = set(self._ir.values)
        node = None
        try:
            values = self._inputs(op_type, label, inputs)
            count = _output_count(schema, label, attrs, values, outputs, self.name)
            for out in count if isinstance(count, list) else ():
                self._check_free(out)
            node_name = name or self._ir.unique_name(label[4:-2])
            if isinstance(count, int):  # outputs named after the node: Relu_3, TopK_4.1
                count = [node_name] if count == 1 else [f"{node_name}.{k}" for k in range(count)]
                for out in count:
                    self._check_free(out)
            node = self._ir.add_node(op_type, values, outputs=count, attrs=attrs,
                                     name=node_name)
            metas = oplib.infer_node(node)
        except Exception as exc:
            # The graph stays as it was: the node and the constants made for it go.
            if node is not None:
                self._ir.remove_node(node)
            for key in set(self._ir.values) - before:
                del self._ir.values[key]
            if isinstance(exc, GraphEngineError):
                raise
            raise InvalidGraph(f"{label}: shape inference failed: {type(exc).__name__}: "
                               f"{exc}", graph=self.name, node=label) from exc
        for out, meta in zip(node.outputs, metas):
            out.meta = meta
        result = tuple(Tensor(self, o) for o in node.outputs)
        return result[0] if len(result) == 1 else result

    # ---- helpers ------------------------------------------------------------------------
    def _check_free(self, name: str) -> None:
        if name in self._ir.values:
            raise InvalidGraph(f"graph '{self.name}' already has a tensor named '{name}'",
                               graph=self.name, tensor=name)

    def _own(self, tensor: Any, what: str) -> None:
        if not isinstance(tensor, Tensor):
            raise InvalidGraph(f"graph '{self.name}': {what} must be a Tensor of this graph, "
                               f"got {type(tensor).__name__}", graph=self.name)
        if tensor._graph is not self:
            raise InvalidGraph(f"graph '{self.name}': tensor '{tensor.name}' belongs to graph "
                               f"'{tensor._graph.name}'", graph=self.name, tensor=tensor.name)

    def _inputs(self, op_type: str, label: str, inputs: Sequence[Any]) -> list[Value | None]:
        """Tensors as they are; arrays and Python numbers as constants. A Python number
        takes the dtype of the tensor input its ONNX type constraint ties it to (Mul(x_f16,
        2.0) is float16); a numpy array keeps its own."""
        ties = type_ties(op_type, len(inputs))
        dtypes: dict[str, DType] = {}
        for i, x in enumerate(inputs):
            if isinstance(x, Tensor):
                self._own(x, f"input {i} of {label}")
                if ties[i] is not None:
                    dtypes.setdefault(ties[i], x.meta.dtype)
        values: list[Value | None] = []
        for i, x in enumerate(inputs):
            if x is None or isinstance(x, Tensor):
                values.append(None if x is None else x._value)
                continue
            want = dtypes.get(ties[i]) if ties[i] is not None else None
            values.append(self._literal(x, want, label, i))
        return values

    def _literal(self, x: Any, want: DType | None, label: str, i: int) -> Value:
        if isinstance(x, (np.ndarray, np.generic)):
            return self.constant(x)._value
        try:
            arr = np.array(x)
        except Exception as exc:
            raise OpCallError(f"{label}: input {i} is a {type(x).__name__}, not a Tensor or "
                              f"an array ({exc})", graph=self.name) from None
        if arr.dtype == object or arr.dtype.kind not in "iufb":
            raise OpCallError(f"{label}: input {i} ({type(x).__name__}) is not a Tensor or "
                              "a numeric array", graph=self.name)
        if want is not None and (want.is_float or arr.dtype.kind in "iub"):
            arr = arr.astype(want.numpy)
        return self.constant(arr)._value

    def __repr__(self) -> str:
        return (f"Graph({self.name!r}: {len(self._ir.inputs)} inputs, "
                f"{len(self._ir.nodes)} nodes, {len(self._ir.outputs)} outputs)")


def checked_name(name: Any, what: str) -> str:
    if not isinstance(name, str) or not name or len(name) > MAX_NAME:
        raise InvalidGraph(f"{what} must be a non-empty string of at most {MAX_NAME} "
                           f"characters, got {name!r:.60}")
    if any(ord(c) < 32 for c in name):
        raise InvalidGraph(f"{what} {name!r:.60} holds control characters")
    return name


def _check_arity(schema: oplib.OpSchema, label: str, inputs: list[Any], graph: str) -> None:
    given = len(inputs)
    while given and inputs[given - 1] is None:
        given -= 1
    if given < schema.min_inputs or 0 <= schema.max_inputs < given:
        raise OpCallError(f"{label}: {schema.name} takes "
                          f"{arity_text(schema.min_inputs, schema.max_inputs)} inputs, got "
                          f"{given}", graph=graph)
    for i in range(schema.min_inputs):
        if inputs[i] is None:
            raise OpCallError(f"{label}: input {i} of {schema.name} is required, got None",
                              graph=graph)


def _output_count(schema: oplib.OpSchema, label: str, attrs: dict[str, Any],
                  values: list[Value | None], outputs: int | Sequence[str] | None,
                  graph: str) -> int | list[str]:
    """How many outputs the node gets: as asked, or the op's required ones (those ONNX does
    not mark optional: TopK's values and indices; Split: its num_outputs or the length of
    its constant split sizes)."""
    if outputs is None:
        outputs = max(1, schema.min_outputs, required_outputs(schema.name))
        split = values[1] if schema.name == "Split" and len(values) > 1 else None
        if schema.name == "Split" and attrs.get("num_outputs"):
            outputs = attrs["num_outputs"]
        elif split is not None and split.is_constant:
            outputs = max(1, split.const.size)
    if isinstance(outputs, (int, np.integer)) and not isinstance(outputs, bool):
        count, names = int(outputs), None
    elif isinstance(outputs, Sequence) and not isinstance(outputs, (str, bytes)):
        names = [checked_name(o, "output name") for o in outputs]
        count = len(names)
        if len(set(names)) < count:
            raise OpCallError(f"{label}: outputs= names a tensor twice", graph=graph)
    else:
        raise OpCallError(f"{label}: outputs= must be a count or a list of names, got "
                          f"{outputs!r:.60}", graph=graph)
    high = MAX_OUTPUTS if schema.max_outputs < 0 else min(schema.max_outputs, MAX_OUTPUTS)
    if not max(1, schema.min_outputs) <= count <= high:
        raise OpCallError(f"{label}: {count} outputs asked; {schema.name} has "
                          f"{arity_text(max(1, schema.min_outputs), high)}", graph=graph)
    return count if names is None else names


# ---- the op functions of graphengine.ops ---------------------------------------------------
def op_function(op_key: str) -> Any:
    """The builder function of one registered op: inputs positional, attributes keyword-only,
    plus `name=` (the node's name) and `outputs=` (a count or names)."""
    schema = oplib.get(op_key)
    op = split_key(op_key)[1]
    label = f"ops.{op}()"
    attr_keys = set(schema.attrs)

    def build(*inputs: Any, name: str | None = None, outputs: Any = None, **attrs: Any) -> Any:
        unknown = sorted(set(attrs) - attr_keys)
        if unknown:
            known = ", ".join(sorted(attr_keys)) or "none"
            raise OpCallError(f"{label}: {op_key} has no attribute '{unknown[0]}' (its "
                              f"attributes: {known})")
        graph = next((x.graph for x in inputs if isinstance(x, Tensor)), None)
        if graph is None:
            raise OpCallError(f"{label}: no input is a Tensor, so there is no graph to add "
                              "the node to (make constants with graph.constant())")
        return graph.add(op_key, inputs, attrs, outputs=outputs, name=name)

    build.__name__ = build.__qualname__ = op if op.isidentifier() else "op"
    build.__signature__ = signature(op_key)  # type: ignore[attr-defined]
    build.__doc__ = docstring(op_key)
    build.op_type = op_key  # type: ignore[attr-defined]
    return build


__all__ = ["Graph", "OpCallError", "Tensor", "as_dtype", "checked_name", "op_function"]
