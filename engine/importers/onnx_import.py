"""ONNX ModelProto -> IR Graph.

Initializers and Constant nodes become graph constants; old-opset node forms are
rewritten to the canonical form (onnx_upgrade); subgraph attributes become nested Graphs.
A subgraph that reads a value of an enclosing graph gets it as an extra trailing input
of its own, and the node that owns the subgraph reads it as an extra trailing input too,
listed by name in the node's `_outer` attribute, so that def-use and liveness see it.
No shape inference happens here: the compiler does it.
"""

from __future__ import annotations

import heapq
import math
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from google.protobuf.message import DecodeError
from onnx import numpy_helper

from ..dtypes import DType, from_onnx
from ..errors import InvalidGraph, InvalidModel, bounded_text, decode_problem
from ..ir import Dim, Graph, TensorMeta, Value
from .onnx_functions import inline_functions
from .onnx_upgrade import NodeSpec, upgrade
from .onnx_wire import WeightBuffer, WireError, packed_field, split_weights
from .text import check_text

STANDARD_DOMAINS = ("", "ai.onnx")
ModelLike = bytes | str | os.PathLike | onnx.ModelProto


def import_onnx(model: ModelLike, name: str | None = None) -> Graph:
    """Build a Graph from an ONNX model given as a proto, serialized bytes or a file path."""
    proto, base_dir, weights = _load_split(model)
    if proto is None:
        proto, base_dir = load_proto(model)
    check_text(proto, "the model")
    opset = model_opset(proto)
    newest = int(onnx.defs.onnx_opset_version())
    if not 1 <= opset <= newest:
        raise InvalidModel(f"the model imports opset {opset} of the default ONNX domain; this "
                           f"importer reads opsets 1 to {newest}")
    graph_proto = inline_functions(proto)
    g = Graph(name or proto.graph.name or "model")
    g.opset = opset
    g.producer = {"framework": proto.producer_name, "version": proto.producer_version,
                  "exporter": f"ONNX IR {proto.ir_version}, opset {opset}"}
    _Scope(g, opset, base_dir, None).fill(graph_proto, weights)
    return g


def _load_split(model: ModelLike
                ) -> tuple[onnx.ModelProto | None, str | None, WeightBuffer | None]:
    """The model parsed with its large weights moved to one aligned buffer (onnx_wire);
    (None, None, None) when that does not apply, and load_proto takes over."""
    if isinstance(model, onnx.ModelProto):
        return None, None, None
    base_dir = None
    try:
        if isinstance(model, (str, os.PathLike)):
            path = Path(model)
            if not path.is_file():
                return None, None, None
            stripped, weights = split_weights(path=path)
            base_dir = str(path.parent)
        else:
            stripped, weights = split_weights(data=model)
        proto = onnx.ModelProto()
        proto.ParseFromString(stripped)
    except (WireError, OSError, DecodeError, RuntimeError, ValueError, TypeError):
        return None, None, None
    if not proto.HasField("graph") or not proto.ir_version:
        return None, None, None
    return proto, base_dir, weights


def load_proto(model: ModelLike) -> tuple[onnx.ModelProto, str | None]:
    if isinstance(model, onnx.ModelProto):
        return model, None
    if isinstance(model, (bytes, bytearray, memoryview)):
        proto = onnx.ModelProto()
        try:
            proto.ParseFromString(bytes(model))
        except (DecodeError, RuntimeError, ValueError) as exc:
            raise InvalidModel(decode_problem("bytes are not an ONNX model", "the model",
                                              exc, model)) from None
        if not proto.HasField("graph") or not proto.ir_version:
            raise InvalidModel("bytes are not an ONNX model: no graph or IR version found")
        return proto, None
    if isinstance(model, (str, os.PathLike)):
        path = Path(model)
        if not path.is_file():
            raise InvalidModel(f"model file '{path}' does not exist")
        try:
            proto = onnx.load(str(path), load_external_data=False)
        except (DecodeError, RuntimeError, ValueError, OSError) as exc:
            raise InvalidModel(decode_problem(f"'{path.name}' is not an ONNX model",
                                              f"the model in '{path.name}'", exc)) from None
        return proto, str(path.parent)
    raise InvalidModel(f"cannot import an ONNX model from {type(model).__name__}")


def model_opset(proto: onnx.ModelProto) -> int:
    for entry in proto.opset_import:
        if entry.domain in STANDARD_DOMAINS:
            return int(entry.version)
    return int(onnx.defs.onnx_opset_version())


# ---- types and tensors --------------------------------------------------------------------
def type_meta(tp: onnx.TypeProto, name: str, what: str) -> TensorMeta | None:
    """TensorMeta of a declared type; None when the element type is not given."""
    kind = tp.WhichOneof("value")
    if kind is None:
        return None
    if kind == "optional_type" and tp.optional_type.elem_type.HasField("tensor_type"):
        return type_meta(tp.optional_type.elem_type, name, what)  # an absent value is None
    if kind != "tensor_type":
        raise InvalidModel(f"{what} '{name}' has {kind.replace('_', ' ')}, only tensors are "
                           f"supported", tensor=name)
    tt = tp.tensor_type
    if not tt.elem_type:
        return None
    dtype = element_type(tt.elem_type, name, what)
    if not tt.HasField("shape"):
        return TensorMeta(dtype, None)
    # A dim without a value or a name, and a negative dim_value (older producers such as
    # keras2onnx wrote -1 for "unknown"), is a symbol of its own.
    dims: list[Dim] = []
    for i, d in enumerate(tt.shape.dim):
        if d.HasField("dim_value") and d.dim_value >= 0:
            dims.append(int(d.dim_value))
        elif d.dim_param:
            dims.append(d.dim_param)
        else:
            dims.append(f"{name}_d{i}")
    return TensorMeta(dtype, tuple(dims))


def element_type(code: int, name: str, what: str) -> DType:
    try:
        return from_onnx(code)
    except TypeError:
        known = code in onnx.TensorProto.DataType.values()
        type_name = onnx.TensorProto.DataType.Name(code) if known else str(code)
        raise InvalidModel(f"{what} '{name}' has unsupported element type {type_name}",
                           tensor=name) from None


_RAW_DTYPES = {
    onnx.TensorProto.FLOAT: np.dtype("<f4"), onnx.TensorProto.DOUBLE: np.dtype("<f8"),
    onnx.TensorProto.INT64: np.dtype("<i8"), onnx.TensorProto.INT32: np.dtype("<i4"),
    onnx.TensorProto.FLOAT16: np.dtype("<f2"), onnx.TensorProto.INT8: np.dtype("i1"),
    onnx.TensorProto.UINT8: np.dtype("u1"), onnx.TensorProto.BOOL: np.dtype("?"),
}


def tensor_array(t: onnx.TensorProto, base_dir: str | None) -> np.ndarray:
    element_type(t.data_type, t.name, "tensor")
    if t.data_location == onnx.TensorProto.EXTERNAL and base_dir is None:
        raise InvalidModel(f"tensor '{t.name}' uses external data but the model was not "
                           f"loaded from a file", tensor=t.name)
    if t.data_location == onnx.TensorProto.EXTERNAL:
        _check_external_location(t, base_dir)
    fast = _RAW_DTYPES.get(t.data_type)
    if fast is not None and t.data_location != onnx.TensorProto.EXTERNAL and \
            t.HasField("raw_data"):
        # Weights arrive as raw little-endian bytes: a read-only view, no copy, no parse.
        # The count exactly (an int64 product of hostile dims wraps, even to the length
        # given), and math.prod, not np.prod: ~6 us a tensor, every Constant node's.
        count = math.prod(t.dims)
        raw = t.raw_data
        if len(raw) != count * fast.itemsize:
            raise InvalidModel(f"tensor '{t.name}': raw data has {len(raw)} bytes, dims "
                               f"{list(t.dims)} need {count * fast.itemsize}", tensor=t.name)
        return np.frombuffer(raw, dtype=fast).reshape(tuple(t.dims))
    listed = _listed_array(t)
    if listed is not None:
        return listed
    try:
        arr = numpy_helper.to_array(t, base_dir or "")
    except (OSError, ValueError) as exc:
        raise InvalidModel(f"tensor '{t.name}': cannot read its data: {exc}",
                           tensor=t.name) from None
    if arr.dtype.kind in "US":
        arr = arr.astype(object)
    if arr.dtype == object:
        arr = np.vectorize(lambda v: v.decode("utf-8") if isinstance(v, bytes) else v,
                           otypes=[object])(arr) if arr.size else arr
    return arr


# Element types whose listed values (not raw_data) are a packed field of little-endian
# fixed-width numbers: TensorProto.float_data (4) and double_data (10).
_PACKED = {onnx.TensorProto.FLOAT: (4, "float_data", np.dtype("<f4")),
           onnx.TensorProto.DOUBLE: (10, "double_data", np.dtype("<f8"))}


def _listed_array(t: onnx.TensorProto) -> np.ndarray | None:
    """A float or double tensor written as a list of values (PaddlePaddle's exporter writes
    every weight so) read from its serialized bytes as one buffer: reading the repeated
    field converts a Python float per element (~120 ns each: ppocr_cls's 134 k weights took
    16 ms of a 0.15-s compile+load). None when the tensor is not such a list, and the
    general reader takes it (its messages for a short list)."""
    packed = _PACKED.get(t.data_type)
    if packed is None or t.data_location == onnx.TensorProto.EXTERNAL or t.HasField("raw_data"):
        return None
    number, attr, dtype = packed
    count = math.prod(t.dims)
    if count < 64 or len(getattr(t, attr)) != count:
        return None
    try:
        payload = packed_field(t.SerializeToString(), number)
    except WireError:
        return None
    if payload is None or len(payload) != count * dtype.itemsize:
        return None
    return np.frombuffer(payload, dtype=dtype).reshape(tuple(t.dims))


def _check_external_location(t: onnx.TensorProto, base_dir: str) -> None:
    """External data must lie in the model's own folder: a location that is absolute or
    climbs out of it ('../../etc/passwd') would read the server's files. Refused naming the
    tensor and the location as written, never the server's own paths."""
    entries = {e.key: e.value for e in t.external_data}
    location = entries.get("location", "")
    base = Path(base_dir).resolve()
    target = (base / location).resolve()
    if (not location or Path(location).is_absolute() or "\0" in location
            or not target.is_relative_to(base)):
        raise InvalidModel(f"tensor '{t.name}': external data location '{location[:200]}' "
                           f"is not a file inside the model's folder", tensor=t.name)
    for key in ("offset", "length"):
        value = entries.get(key, "0")
        if not value.isdigit():
            raise InvalidModel(f"tensor '{t.name}': external data {key} '{value[:40]}' is not "
                               f"a non-negative integer", tensor=t.name)
    if not target.is_file():
        raise InvalidModel(f"tensor '{t.name}': external data file '{location[:200]}' is not "
                           f"beside the model", tensor=t.name)


def moved_array(t: onnx.TensorProto, raw: np.ndarray, base_dir: str | None) -> np.ndarray:
    """An initializer whose raw_data onnx_wire moved to `raw` (uint8): a read-only view."""
    element_type(t.data_type, t.name, "tensor")
    fast = _RAW_DTYPES.get(t.data_type)
    if fast is None or t.data_location == onnx.TensorProto.EXTERNAL:
        t.raw_data = raw.tobytes()  # rare types: let the general reader decode them
        return tensor_array(t, base_dir)
    count = math.prod(t.dims)  # exactly, as tensor_array
    if raw.nbytes != count * fast.itemsize:
        raise InvalidModel(f"tensor '{t.name}': raw data has {raw.nbytes} bytes, dims "
                           f"{list(t.dims)} need {count * fast.itemsize}", tensor=t.name)
    out = raw.view(fast).reshape(tuple(t.dims))
    out.flags.writeable = False
    return out


def sparse_array(sp: onnx.SparseTensorProto, base_dir: str | None) -> np.ndarray:
    values = tensor_array(sp.values, base_dir)
    indices = tensor_array(sp.indices, base_dir).astype(np.int64)
    dense = np.zeros(tuple(sp.dims), dtype=values.dtype)
    if indices.ndim == 1:
        dense.reshape(-1)[indices] = values
    else:
        dense[tuple(indices.T)] = values
    return dense


def constant_value(node: onnx.NodeProto, base_dir: str | None) -> np.ndarray:
    """The array a Constant node produces, from whichever value_* attribute it has."""
    for a in node.attribute:
        if a.name == "value":
            return tensor_array(a.t, base_dir)
        if a.name == "sparse_value":
            return sparse_array(a.sparse_tensor, base_dir)
        if a.name == "value_float":
            return np.array(a.f, dtype=np.float32)
        if a.name == "value_floats":
            return np.array(list(a.floats), dtype=np.float32)
        if a.name == "value_int":
            return np.array(a.i, dtype=np.int64)
        if a.name == "value_ints":
            return np.array(list(a.ints), dtype=np.int64)
        if a.name == "value_string":
            return np.array(a.s.decode("utf-8"), dtype=object)
        if a.name == "value_strings":
            return np.array([s.decode("utf-8") for s in a.strings], dtype=object)
    raise InvalidGraph(f"Constant node '{node.name}' has no value attribute", node=node.name)


# ---- one graph scope ----------------------------------------------------------------------
class _Scope:
    """Imports one GraphProto into `g`; `parent` resolves names of enclosing graphs."""

    def __init__(self, g: Graph, opset: int, base_dir: str | None,
                 parent: _Scope | None) -> None:
        self.g = g
        self.opset = opset
        self.base_dir = base_dir
        self.parent = parent
        self.outer: list[str] = []  # enclosing-scope names this graph reads
        self.node_names: set[str] = set()

    def fill(self, gp: onnx.GraphProto, weights: WeightBuffer | None = None) -> None:
        g = self.g
        init_names = set()
        for i, t in enumerate(gp.initializer):
            span = weights.spans[i] if weights is not None and i < len(weights.spans) else None
            if span is None:
                array = tensor_array(t, self.base_dir)
            else:
                array = moved_array(t, weights.data[span[0]:span[0] + span[1]], self.base_dir)
            self._add_const(t.name, array)
            init_names.add(t.name)
        for sp in gp.sparse_initializer:
            self._add_const(sp.values.name, sparse_array(sp, self.base_dir))
            init_names.add(sp.values.name)
        for vi in gp.input:
            if vi.name in init_names:
                continue  # IR < 4 lists initializers as inputs too: they are constants
            if vi.name in g.values:
                raise InvalidGraph(f"graph input '{vi.name}' is declared twice",
                                   graph=g.name, tensor=vi.name)
            meta = type_meta(vi.type, vi.name, "input")
            if meta is None and self.parent is None:
                raise InvalidModel(f"input '{vi.name}' has no element type", tensor=vi.name)
            g.add_input(vi.name, meta)  # type: ignore[arg-type]
        for node in _topological(gp, set(g.values)):
            self._add_node(node)
        outputs = []
        for vi in gp.output:
            v = self._lookup(vi.name, f"graph output '{vi.name}'")
            if v.meta is None:
                try:
                    v.meta = type_meta(vi.type, vi.name, "output")
                except InvalidModel:
                    v.meta = None
            outputs.append(v)
        g.outputs = outputs

    def _add_const(self, name: str, array: np.ndarray) -> Value:
        if name in self.g.values:
            raise InvalidGraph(f"tensor '{name}' is defined more than once", graph=self.g.name,
                               tensor=name)
        return self.g.add_constant(name, array)

    def _lookup(self, name: str, what: str, node: str | None = None) -> Value:
        v = self.g.values.get(name)
        if v is not None:
            return v
        if self.parent is not None and self.parent.resolves(name):
            outer = self.parent.resolve(name)
            if outer.const is not None:  # a weight: copy the constant, no data edge needed
                return self.g.add_constant(name, outer.const)
            self.outer.append(name)
            return self.g.add_input(name, outer.meta)  # type: ignore[arg-type]
        where = f"node '{node}'" if node else what
        raise InvalidGraph(f"{where} reads tensor '{name}', which no input, initializer or "
                           f"node defines", graph=self.g.name, node=node, tensor=name)

    def resolves(self, name: str) -> bool:
        if name in self.g.values:
            return True
        return self.parent is not None and self.parent.resolves(name)

    def resolve(self, name: str) -> Value:
        return self._lookup(name, f"tensor '{name}'")

    def _add_node(self, node: onnx.NodeProto) -> None:
        g = self.g
        if node.op_type == "Constant" and node.domain in STANDARD_DOMAINS:
            self._add_const(node.output[0], constant_value(node, self.base_dir))
            return
        name = node.name if node.name and node.name not in self.node_names else None
        label = node.name or f"<unnamed {node.op_type}>"
        inputs: list[Value | str | None] = [
            self._lookup(i, "", label) if i else None for i in node.input]
        attrs, outer = self._attributes(node, name or node.op_type)
        outputs = list(node.output)
        while outputs and not outputs[-1]:
            outputs.pop()
        outputs = [o or g.unique_name(f"{name or node.op_type.lower()}_unused") for o in outputs]
        op_type = node.op_type
        if node.domain not in STANDARD_DOMAINS:
            op_type = f"{node.domain}.{node.op_type}"
            attrs["_domain"] = node.domain
        if outer:
            attrs["_outer"] = outer
            inputs += [self._lookup(n, "", label) for n in outer]
        specs = [NodeSpec(op_type, inputs, outputs, attrs, name)]
        if node.domain in STANDARD_DOMAINS:
            try:
                specs = upgrade(g, specs[0], self.opset)
            except (TypeError, ValueError, KeyError, IndexError) as exc:
                # An old-opset form rewritten before its schema checks it: a missing or
                # mistyped attribute (Pad without pads, Clip min="abc", TopK without k).
                what = (f"attribute {exc} is missing" if isinstance(exc, KeyError)
                        else f"an attribute is malformed ({exc})")
                raise InvalidGraph(f"node '{label}' ({node.op_type}): its opset-{self.opset} "
                                   f"form cannot be read: {what}",
                                   graph=g.name, node=label) from None
        for spec in specs:
            ins = [g.values[i] if isinstance(i, str) else i for i in spec.inputs]
            n = g.add_node(spec.op_type, ins, outputs=spec.outputs, attrs=spec.attrs,
                           name=spec.name if spec.name not in self.node_names else None)
            self.node_names.add(n.name)

    def _attributes(self, node: onnx.NodeProto, owner: str) -> tuple[dict[str, Any], list[str]]:
        attrs: dict[str, Any] = {}
        outer: list[str] = []
        for a in node.attribute:
            if a.name.startswith("_"):  # the compiler's own (_outer, _bodies, fused epilogues)
                raise InvalidGraph(f"node '{owner}' ({node.op_type}): attribute names "
                                   f"starting with '_' are reserved, got "
                                   f"'{bounded_text(a.name, 100)}'", graph=self.g.name,
                                   node=owner)
            if a.type == onnx.AttributeProto.GRAPH:
                attrs[a.name] = self._subgraph(a.g, f"{owner}.{a.name}", outer)
            elif a.type == onnx.AttributeProto.GRAPHS:
                attrs[a.name] = [self._subgraph(sg, f"{owner}.{a.name}{k}", outer)
                                 for k, sg in enumerate(a.graphs)]
            else:
                try:
                    attrs[a.name] = attribute_value(a, self.base_dir)
                except (UnicodeDecodeError, _AbsurdAttribute) as exc:
                    why = "is not UTF-8 text" if isinstance(exc, UnicodeDecodeError) else exc
                    raise InvalidGraph(f"node '{owner}' ({node.op_type}): attribute "
                                       f"'{a.name}' {why}", graph=self.g.name,
                                       node=owner) from None
        return attrs, outer

    def _subgraph(self, gp: onnx.GraphProto, name: str, outer: list[str]) -> Graph:
        sub = Graph(gp.name or name)
        sub.opset = self.opset
        scope = _Scope(sub, self.opset, self.base_dir, self)
        scope.fill(gp)
        outer += [n for n in scope.outer if n not in outer]
        return sub


# Entries of one list attribute: kernel shapes, pads and axes have a few, a tree ensemble's
# node lists up to hundreds of thousands; more is not a model but a way to make the importer
# build huge Python lists from a small message.
MAX_ATTRIBUTE_ENTRIES = 1 << 22


class _AbsurdAttribute(ValueError):
    pass


def attribute_value(a: onnx.AttributeProto, base_dir: str | None) -> Any:
    """The Python value of an attribute; raises UnicodeDecodeError for text that is not
    UTF-8 and _AbsurdAttribute for a list longer than MAX_ATTRIBUTE_ENTRIES."""
    t = onnx.AttributeProto
    count = max(len(a.ints), len(a.floats), len(a.strings), len(a.tensors))
    if count > MAX_ATTRIBUTE_ENTRIES:
        raise _AbsurdAttribute(f"has {count} entries, more than the {MAX_ATTRIBUTE_ENTRIES} an "
                               f"attribute may have")
    if a.type == t.INT:
        return int(a.i)
    if a.type == t.FLOAT:
        return float(a.f)
    if a.type == t.STRING:
        return a.s.decode("utf-8")
    if a.type == t.INTS:
        return [int(x) for x in a.ints]
    if a.type == t.FLOATS:
        return [float(x) for x in a.floats]
    if a.type == t.STRINGS:
        return [s.decode("utf-8") for s in a.strings]
    if a.type == t.TENSOR:
        return tensor_array(a.t, base_dir)
    if a.type == t.SPARSE_TENSOR:
        return sparse_array(a.sparse_tensor, base_dir)
    if a.type == t.TENSORS:
        return [tensor_array(x, base_dir) for x in a.tensors]
    if a.type == t.TYPE_PROTO:
        return a.tp.SerializeToString()
    raise InvalidGraph(f"attribute '{a.name}' has unsupported type "
                       f"{t.AttributeType.Name(a.type)}")


def _free_names(gp: onnx.GraphProto) -> set[str]:
    """Names a graph (with its nested subgraphs) reads but does not define."""
    defined = {t.name for t in gp.initializer} | {i.name for i in gp.input}
    defined |= {sp.values.name for sp in gp.sparse_initializer}
    used: set[str] = set()
    for n in gp.node:
        used |= {i for i in n.input if i}
        for a in n.attribute:
            for sg in ([a.g] if a.type == onnx.AttributeProto.GRAPH else list(a.graphs)):
                used |= _free_names(sg)
        defined |= set(n.output)
    used |= {o.name for o in gp.output}
    return used - defined


_GRAPH_ATTRS = (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS)


def _already_sorted(gp: onnx.GraphProto, known: set[str]) -> list[onnx.NodeProto] | None:
    """The nodes as they are when every input some node produces comes from an earlier node
    (exporters write them so): one pass over names, where the sort's dependency lists and
    heap took ~4 us a node (18 ms of a 4,146-node import); None otherwise."""
    nodes = list(gp.node)
    outputs = [list(n.output) for n in nodes]
    produced = {o for outs in outputs for o in outs if o}
    defined: set[str] = set()
    for n, outs in zip(nodes, outputs):
        for i in n.input:
            if i and i in produced and i not in defined and i not in known:
                return None
        if n.attribute and any(a.type in _GRAPH_ATTRS for a in n.attribute):
            for a in n.attribute:
                for sg in ([a.g] if a.type == onnx.AttributeProto.GRAPH else list(a.graphs)):
                    if any(x in produced and x not in defined and x not in known
                           for x in _free_names(sg)):
                        return None
        defined.update(outs)
    return nodes


def _topological(gp: onnx.GraphProto, known: set[str]) -> Iterable[onnx.NodeProto]:
    """Nodes in an order where producers come first (stable; ONNX files are usually sorted).

    Inputs nobody produces are left for _lookup to report as dangling.
    """
    in_order = _already_sorted(gp, known)
    if in_order is not None:
        return in_order
    producer: dict[str, int] = {}
    for k, n in enumerate(gp.node):
        for o in n.output:
            if o:
                producer.setdefault(o, k)
    users: list[list[int]] = [[] for _ in gp.node]
    waiting = [0] * len(gp.node)
    for k, n in enumerate(gp.node):
        names = {i for i in n.input if i}
        for a in n.attribute:
            for sg in ([a.g] if a.type == onnx.AttributeProto.GRAPH else list(a.graphs)):
                names |= _free_names(sg)
        deps = {producer[x] for x in names if x in producer and x not in known}
        deps.discard(k)
        waiting[k] = len(deps)
        for d in deps:
            users[d].append(k)
    ready = [k for k in range(len(gp.node)) if waiting[k] == 0]
    heapq.heapify(ready)
    order: list[int] = []
    while ready:
        k = heapq.heappop(ready)
        order.append(k)
        for u in users[k]:
            waiting[u] -= 1
            if waiting[u] == 0:
                heapq.heappush(ready, u)
    if len(order) != len(gp.node):
        stuck = [gp.node[k].name or gp.node[k].op_type for k in range(len(gp.node))
                 if waiting[k] > 0]
        raise InvalidGraph(f"the graph has a cycle among nodes {', '.join(stuck[:5])}")
    return [gp.node[k] for k in order]
