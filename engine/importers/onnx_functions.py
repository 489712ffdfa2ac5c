"""Inline calls of model-local ONNX functions (ModelProto.functions) into the main graph."""

from __future__ import annotations

import itertools

import onnx

from ..errors import InvalidModel, bounded_text

# Nodes the inlined graph may hold: a function that calls another twice, a few levels deep,
# multiplies a file of kilobytes into millions of nodes (2**depth), so the expansion is
# counted first and refused past this, before any node is built.
MAX_INLINED_NODES = 1 << 20
MAX_CALL_DEPTH = 64  # functions calling functions (each level is a recursion here)


def inline_functions(model: onnx.ModelProto) -> onnx.GraphProto:
    """The main graph with every call of a model-local function replaced by its body.
    A function that calls itself (directly or through others) and an expansion past
    MAX_INLINED_NODES are the model's error (InvalidModel), named by the functions."""
    if not model.functions:
        return model.graph
    funcs = {(f.domain, f.name): f for f in model.functions}
    total = _Sizer(funcs).nodes(model.graph.node, ())
    if total > MAX_INLINED_NODES:
        raise InvalidModel(f"model-local functions expand the graph to {total} nodes; at "
                           f"most {MAX_INLINED_NODES} are inlined")
    graph = onnx.GraphProto()
    graph.CopyFrom(model.graph)
    _inline_graph(graph, funcs, itertools.count())
    return graph


class _Sizer:
    """The nodes inlining would build, counted from each function's size once (no copies),
    with recursion found on the way: the checks run before any node is built."""

    def __init__(self, funcs: dict) -> None:
        self.funcs = funcs
        self.sizes: dict[tuple[str, str], int] = {}

    def nodes(self, nodes, calls: tuple[tuple[str, str], ...]) -> int:
        total = 0
        for node in nodes:
            total += 1
            for a in node.attribute:
                for sg in ([a.g] if a.type == onnx.AttributeProto.GRAPH else list(a.graphs)):
                    total += self.nodes(sg.node, calls)
            key = (node.domain, node.op_type)
            if key in self.funcs:
                total += self.function(key, calls)
            if total > MAX_INLINED_NODES:  # enough to refuse; also stops the arithmetic
                return total
        return total

    def function(self, key: tuple[str, str], calls: tuple[tuple[str, str], ...]) -> int:
        if key in calls:
            raise InvalidModel(f"model-local function {_chain(calls + (key,))} calls itself: "
                               f"a recursive function cannot be inlined")
        if len(calls) >= MAX_CALL_DEPTH:
            raise InvalidModel(f"model-local functions call each other more than "
                               f"{MAX_CALL_DEPTH} deep: {_chain(calls + (key,))}")
        if key not in self.sizes:
            self.sizes[key] = self.nodes(self.funcs[key].node, calls + (key,))
        return self.sizes[key]


def _inline_graph(graph: onnx.GraphProto, funcs: dict, counter: itertools.count) -> None:
    nodes = _expand(list(graph.node), funcs, counter)
    del graph.node[:]
    graph.node.extend(nodes)


def _expand(nodes: list[onnx.NodeProto], funcs: dict, counter: itertools.count
            ) -> list[onnx.NodeProto]:
    result: list[onnx.NodeProto] = []
    for node in nodes:
        for a in node.attribute:
            for sg in ([a.g] if a.type == onnx.AttributeProto.GRAPH else list(a.graphs)):
                _inline_graph(sg, funcs, counter)
        key = (node.domain, node.op_type)
        fn = funcs.get(key)
        if fn is None:
            result.append(node)
            continue
        body = _instantiate(node, fn, next(counter))
        result += _expand(body, funcs, counter)
    return result


def _chain(calls: tuple[tuple[str, str], ...]) -> str:
    """'local.F -> local.G -> ...' for the functions being inlined."""
    return bounded_text(" -> ".join(f"{d}.{n}" if d else n for d, n in calls), 600)


def _instantiate(call: onnx.NodeProto, fn: onnx.FunctionProto, k: int) -> list[onnx.NodeProto]:
    prefix = f"{call.name or fn.name}__{k}/"
    names: dict[str, str] = {}
    for formal, actual in zip(fn.input, list(call.input) + [""] * len(fn.input)):
        names[formal] = actual
    for formal, actual in zip(fn.output, list(call.output) + [""] * len(fn.output)):
        names[formal] = actual or prefix + formal
    given = {a.name: a for a in call.attribute}
    defaults = {a.name: a for a in fn.attribute_proto}

    def rename(name: str) -> str:
        if not name:
            return name
        if name not in names:
            names[name] = prefix + name
        return names[name]

    body: list[onnx.NodeProto] = []
    for n in fn.node:
        m = onnx.NodeProto()
        m.CopyFrom(n)
        m.name = prefix + (n.name or n.op_type)
        m.input[:] = [rename(i) for i in n.input]
        m.output[:] = [rename(o) for o in n.output]
        attrs = []
        for a in m.attribute:
            if a.ref_attr_name:
                src = given.get(a.ref_attr_name) or defaults.get(a.ref_attr_name)
                if src is None:
                    continue  # unset optional attribute: the op's default applies
                b = onnx.AttributeProto()
                b.CopyFrom(src)
                b.name = a.name
                attrs.append(b)
            else:
                attrs.append(a)
        del m.attribute[:]
        m.attribute.extend(attrs)
        body.append(m)
    return body
