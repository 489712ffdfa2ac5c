"""float16 computed in float32: the device's kernels take float32, so a float16 model ran
every op on the host (a Keras CNN exported in half precision: 3 ms against ONNX Runtime's
0.26).

The graph's float16 data becomes float32 where it enters: float16 constants (and float16
tensors in attributes, ConstantOfShape's value) are widened once at compile time, float16
inputs pass through a Cast, and every op then computes in float32 without rounding between
ops. What the model says about precision is kept where it says it: a Cast from a wider
type to float16 still rounds (a Cast to float16 and back), and each float16 output is
rounded once at the end, keeping its name and type. This is what ONNX Runtime does on a CPU
without half-precision kernels (a float32 kernel between Casts, the Casts between two such
kernels removed), so results agree to the last float16 step.

Left alone: a graph with control-flow bodies (their formal types would change under them)
and one that reinterprets float16 bits (BitCast). `CompileOptions.widen_float16=False`
keeps half precision (on the host).
"""

from __future__ import annotations

import numpy as np

from .. import ops
from ..dtypes import DType
from ..ir import Graph, Node, TensorMeta, Value, ValueKind
from ..passes import PassResult
from .infer_shapes import infer_shapes

_F16_CODE, _F32_CODE = 10, 1  # ONNX TensorProto FLOAT16, FLOAT
_TYPE_ATTRS = ("to", "dtype", "output_datatype")


def _f16(v: Value | None) -> bool:
    return v is not None and v.meta is not None and v.meta.dtype is DType.FLOAT16


def _widened(meta: TensorMeta) -> TensorMeta:
    return TensorMeta(DType.FLOAT32, meta.shape)


def _cast(node: Node) -> bool:
    return node.op_type == "Cast" and node.attrs.get("to") == _F16_CODE


def _settled(graph: Graph, v: Value) -> bool:
    """A float16 value the pass leaves as it is: what an explicit Cast narrows, read back
    by a Cast to float32 (the rounding the model asked for), or a graph output, or an input
    read only by the Cast that widens it."""
    return all(u.op_type == "Cast" and u.attrs.get("to") == _F32_CODE for u in v.users) and (
        v.kind is ValueKind.INPUT or v in graph.outputs
        or (v.producer is not None and _cast(v.producer)
            and not _f16(v.producer.inputs[0])))


def _why_not(graph: Graph) -> str | None:
    for node in graph.nodes:
        if node.op_type == "BitCast":
            return f"node '{node.name}' reinterprets bits (BitCast)"
        if ops.get(node.op_type, node).stateful:  # a variable keeps the dtype it was made with
            return f"node '{node.name}' ({node.op_type}) reads or writes a session variable"
        if any(isinstance(a, Graph) for a in node.attrs.values()):
            return f"node '{node.name}' ({node.op_type}) has a body"
    return None


def _rename(graph: Graph, v: Value, name: str) -> None:
    del graph.values[v.name]
    v.name = name
    graph.values[name] = v


def widen_float16(graph: Graph) -> PassResult:
    pending = [v for v in graph.values.values() if _f16(v) and not _settled(graph, v)]
    if not pending:
        return PassResult(graph, False, "no float16 to widen")
    why = _why_not(graph)
    if why:
        return PassResult(graph, False, f"float16 kept: {why}")
    outputs = [v for v in graph.outputs if _f16(v)]
    inputs = [v for v in graph.inputs if _f16(v) and not _settled(graph, v)]
    constants = [v for v in graph.constants() if _f16(v)]
    # 1. an explicit narrowing Cast keeps its rounding: Cast(to f16) -> Cast(to f32);
    #    a Cast from float16 to float16 becomes a no-op of the widened type
    for node in list(graph.nodes):
        if _cast(node) and not _settled(graph, node.outputs[0]):
            if _f16(node.inputs[0]):
                node.attrs["to"] = _F32_CODE
                continue
            narrow = node.outputs[0]
            back = graph.add_node("Cast", [narrow], attrs={"to": _F32_CODE},
                                  name=graph.unique_name(f"{node.name}_f32"), after=node)
            graph.replace_all_uses(narrow, back.outputs[0])
            back.set_inputs([narrow])  # replace_all_uses moved the Cast's own input too
            graph.outputs = [narrow if v is back.outputs[0] else v for v in graph.outputs]
            back.outputs[0].meta = _widened(narrow.meta)
    # 2. other nodes' float16 type attributes and tensors
    for node in graph.nodes:
        if node.op_type == "Cast":
            continue
        for key, a in list(node.attrs.items()):
            if key in _TYPE_ATTRS and a == _F16_CODE:
                node.attrs[key] = _F32_CODE
            elif isinstance(a, np.ndarray) and a.dtype == np.float16:
                node.attrs[key] = a.astype(np.float32)
    # 3. constants widened once; inputs through a Cast
    for v in constants:
        v.const = np.asarray(v.const, np.float32)
        v.meta = _widened(v.meta)
    first = graph.nodes[0] if graph.nodes else None
    for v in inputs:
        wide = graph.add_node("Cast", [], attrs={"to": _F32_CODE},
                              name=graph.unique_name(f"{v.name}_f32"))
        graph.nodes.remove(wide)
        graph.nodes.insert(graph.nodes.index(first) if first is not None else 0, wide)
        graph.replace_all_uses(v, wide.outputs[0])
        wide.set_inputs([v])
        graph.outputs = [v if o is wide.outputs[0] else o for o in graph.outputs]
        wide.outputs[0].meta = _widened(v.meta)
    infer_shapes(graph)
    # 4. each float16 output rounded once at the end, under its own name
    rounded = 0
    for v in outputs:
        if v.meta is None or v.meta.dtype is not DType.FLOAT32 or v.kind is ValueKind.INPUT:
            continue
        name = v.name
        _rename(graph, v, graph.unique_name(f"{name}_f32"))
        cast = graph.add_node("Cast", [v], attrs={"to": _F16_CODE}, outputs=[name],
                              name=graph.unique_name(f"{name}_f16"))
        cast.outputs[0].meta = TensorMeta(DType.FLOAT16, v.meta.shape)
        graph.outputs = [cast.outputs[0] if o is v else o for o in graph.outputs]
        rounded += 1
    return PassResult(graph, True, f"float16 computed in float32: {len(constants)} constants, "
                                   f"{len(inputs)} inputs widened, {rounded} outputs rounded")
