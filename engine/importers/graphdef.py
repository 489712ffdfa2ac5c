"""The project's own wire IR (graphengine.v1.GraphDef) <-> IR Graph."""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import numpy as np

from graphengine.v1 import graph_pb2 as pb

from .. import wire
from ..errors import InvalidGraph, InvalidInput, InvalidModel
from ..ir import Graph, TensorMeta, Value
from ..wire import (
    desc_to_pb,
    dtype_from_pb,
    shape_from_pb,
    tensor_from_pb,
    tensor_to_pb,
)
from .text import check_text

WIRE_DTYPES = wire.WIRE_DTYPES  # not float8, int4 and the like

# The canonical op forms the schemas implement are those of the newest ONNX opset.
CANONICAL_OPSET = 28


def import_graphdef(gd: pb.GraphDef) -> Graph:
    check_text(gd, "the graph")
    g = Graph(gd.name or "graph")
    g.opset = CANONICAL_OPSET
    g.producer = {"framework": "graphengine", "exporter": "graphengine.v1.GraphDef"}
    for t in gd.constants:
        if not t.name or t.name in g.values:
            raise InvalidGraph(f"constant '{t.name}' is unnamed or defined twice",
                               graph=g.name, tensor=t.name)
        g.add_constant(t.name, _wire(tensor_from_pb, g, t))
    for d in gd.inputs:
        if d.name in g.values:
            raise InvalidGraph(f"graph input '{d.name}' is defined more than once",
                               graph=g.name, tensor=d.name)
        g.add_input(d.name, _desc_meta(d, g))
    used: set[str] = set()
    for nd in _ordered(gd.nodes, set(g.values)):
        ins: list[Value | None] = []
        for name in nd.inputs:
            if not name:
                ins.append(None)
            elif name in g.values:
                ins.append(g.values[name])
            else:
                raise InvalidGraph(f"node '{nd.name or nd.op_type}' reads tensor '{name}', "
                                   f"which no input, constant or node defines",
                                   graph=g.name, node=nd.name or None, tensor=name)
        attrs = {k: attr_from_pb(v) for k, v in nd.attrs.items()}
        name = nd.name if nd.name and nd.name not in used else None
        node = g.add_node(nd.op_type, ins, outputs=list(nd.outputs), attrs=attrs, name=name)
        used.add(node.name)
    outputs = []
    for d in gd.outputs:
        v = g.values.get(d.name)
        if v is None:
            raise InvalidGraph(f"graph output '{d.name}' is never produced", graph=g.name,
                               tensor=d.name)
        if v.meta is None and d.dtype:
            v.meta = _desc_meta(d, g)
        outputs.append(v)
    g.outputs = outputs
    return g


def export_graphdef(graph: Graph) -> pb.GraphDef:
    for v in graph.values.values():
        if v.meta is not None and v.meta.dtype not in WIRE_DTYPES:
            raise InvalidGraph(f"tensor '{v.name}' has dtype {v.meta.dtype.value}, which the "
                               f"GraphDef wire format cannot carry", graph=graph.name,
                               tensor=v.name)
    gd = pb.GraphDef(name=graph.name)
    gd.inputs.extend(desc_to_pb(v.name, v.meta) for v in graph.inputs)
    gd.outputs.extend(desc_to_pb(v.name, v.meta) for v in graph.outputs)
    gd.constants.extend(tensor_to_pb(v.name, v.const) for v in graph.constants())
    for n in graph.nodes:
        nd = pb.NodeDef(name=n.name, op_type=n.op_type,
                        inputs=[v.name if v is not None else "" for v in n.inputs],
                        outputs=[o.name for o in n.outputs])
        for key, value in n.attrs.items():
            try:
                nd.attrs[key].CopyFrom(attr_to_pb(value))
            except TypeError as exc:
                raise InvalidGraph(f"node '{n.name}': attribute '{key}' cannot be written to a "
                                   f"GraphDef: {exc}", graph=graph.name, node=n.name) from None
        gd.nodes.append(nd)
    return gd


# A GraphDef file in protobuf's text format (graphengine.Graph.save picks it by the name).
TEXT_SUFFIXES = (".pbtxt", ".txt")
MAX_FILE_BYTES = 1 << 31  # protobuf's own bound on one message
GRAPHDEF_FIRST_BYTE = b"\x0a"  # field 1 (name), length-delimited


def read_graphdef_text(path: str | os.PathLike) -> pb.GraphDef:
    """The GraphDef in a text-format file."""
    from google.protobuf import text_format

    try:
        with open(path, "rb") as f:
            data = f.read(MAX_FILE_BYTES + 1)
    except OSError as exc:
        raise InvalidModel(f"cannot read model file '{os.path.basename(path)}': "
                           f"{exc.strerror}") from None
    if len(data) > MAX_FILE_BYTES:
        raise InvalidModel(f"'{os.path.basename(path)}' is larger than {MAX_FILE_BYTES} bytes")
    try:
        return text_format.Parse(data.decode("utf-8"), pb.GraphDef())
    except (text_format.ParseError, UnicodeDecodeError) as exc:
        raise InvalidModel(f"'{os.path.basename(path)}' is not a GraphDef in text format: "
                           f"{exc}") from None


def saved_graphdef(model: Any) -> pb.GraphDef | None:
    """The GraphDef in `model` (bytes or a path) when it is exactly one, as
    graphengine.Graph.save writes it, else None. Protobuf parses most bytes as something, so
    it must also serialize back to the same bytes and have outputs and nodes with op types.
    Its first byte is field 1's tag as a string (the graph's name), 0x0a, where an ONNX
    model's is ir_version's, 0x08: an ONNX file is never read twice."""
    if isinstance(model, (str, os.PathLike)):
        try:
            if os.path.getsize(model) > MAX_FILE_BYTES:
                return None
            with open(model, "rb") as f:
                if f.read(1) != GRAPHDEF_FIRST_BYTE:
                    return None
                data = GRAPHDEF_FIRST_BYTE + f.read()
        except OSError:
            return None
    elif isinstance(model, (bytes, bytearray, memoryview)):
        if bytes(memoryview(model)[:1]) != GRAPHDEF_FIRST_BYTE:
            return None
        data = bytes(model)
    else:
        return None
    gd = pb.GraphDef()
    try:
        gd.ParseFromString(data)
    except Exception:  # DecodeError, or upb's RuntimeError on malformed text fields
        return None
    if (not gd.outputs or not all(n.op_type for n in gd.nodes)
            or gd.SerializeToString(deterministic=True) != data):
        return None
    return gd


def attr_from_pb(a: pb.AttrValue) -> Any:
    kind = a.WhichOneof("value")
    if kind == "i":
        return int(a.i)
    if kind == "f":
        return float(a.f)
    if kind == "s":
        return a.s
    if kind == "ints":
        return [int(x) for x in a.ints.values]
    if kind == "floats":
        return [float(x) for x in a.floats.values]
    if kind == "strings":
        return list(a.strings.values)
    if kind == "tensor":
        return tensor_from_pb(a.tensor)
    return None


def attr_to_pb(value: Any) -> pb.AttrValue:
    if isinstance(value, (bool, int, np.integer)):
        return pb.AttrValue(i=int(value))
    if isinstance(value, (float, np.floating)):
        return pb.AttrValue(f=float(value))
    if isinstance(value, str):
        return pb.AttrValue(s=value)
    if isinstance(value, np.ndarray):
        return pb.AttrValue(tensor=tensor_to_pb("", value))
    if isinstance(value, (list, tuple)):
        if all(isinstance(x, str) for x in value) and value:
            return pb.AttrValue(strings=pb.AttrValue.Strings(values=list(value)))
        if all(isinstance(x, (bool, int, np.integer)) for x in value):
            return pb.AttrValue(ints=pb.AttrValue.Ints(values=[int(x) for x in value]))
        if all(isinstance(x, (int, float, np.integer, np.floating)) for x in value):
            return pb.AttrValue(floats=pb.AttrValue.Floats(values=[float(x) for x in value]))
    raise TypeError(f"unsupported attribute value of type {type(value).__name__}")


def _desc_meta(d: pb.TensorDesc, g: Graph) -> TensorMeta:
    dtype = _wire(dtype_from_pb, g, d.dtype, f"tensor '{d.name}'")
    return TensorMeta(dtype, shape_from_pb(d.shape))


def _wire(fn: Any, g: Graph, *args: Any) -> Any:
    try:
        return fn(*args)
    except InvalidInput as exc:
        raise InvalidGraph(exc.message, graph=g.name, tensor=exc.tensor) from None


def _ordered(nodes: Sequence[pb.NodeDef], known: set[str]) -> list[pb.NodeDef]:
    """Producers before users (stable); unresolvable inputs are reported by the caller."""
    producer = {o: k for k, nd in enumerate(nodes) for o in nd.outputs}
    order: list[int] = []
    state = [0] * len(nodes)  # 0 new, 1 visiting, 2 done

    def visit(k: int) -> None:
        stack = [(k, iter(nodes[k].inputs))]
        state[k] = 1
        while stack:
            cur, it = stack[-1]
            for name in it:
                p = producer.get(name)
                if p is None or name in known or state[p] == 2:
                    continue
                if state[p] == 1:
                    raise InvalidGraph(f"the graph has a cycle through node "
                                       f"'{nodes[p].name or nodes[p].op_type}'",
                                       node=nodes[p].name or None)
                state[p] = 1
                stack.append((p, iter(nodes[p].inputs)))
                break
            else:
                stack.pop()
                state[cur] = 2
                order.append(cur)

    for k in range(len(nodes)):
        if state[k] == 0:
            visit(k)
    return [nodes[k] for k in order]
