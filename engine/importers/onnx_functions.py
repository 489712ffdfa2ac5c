"""Inline calls of model-local ONNX functions (ModelProto.functions) into the main graph."""

from __future__ import annotations

import itertools

import onnx


def inline_functions(model: onnx.ModelProto) -> onnx.GraphProto:
    """The main graph with every call of a model-local function replaced by its body."""
    if not model.functions:
        return model.graph
    funcs = {(f.domain, f.name): f for f in model.functions}
    counter = itertools.count()
    graph = onnx.GraphProto()
    graph.CopyFrom(model.graph)
    _inline_graph(graph, funcs, counter)
    return graph


def _inline_graph(graph: onnx.GraphProto, funcs: dict, counter: itertools.count) -> None:
    nodes = _expand(list(graph.node), funcs, counter, depth=0)
    del graph.node[:]
    graph.node.extend(nodes)


def _expand(nodes: list[onnx.NodeProto], funcs: dict, counter: itertools.count,
            depth: int) -> list[onnx.NodeProto]:
    if depth > 32:
        raise ValueError("model-local functions call each other too deeply (recursion?)")
    result: list[onnx.NodeProto] = []
    for node in nodes:
        for a in node.attribute:
            for sg in ([a.g] if a.type == onnx.AttributeProto.GRAPH else list(a.graphs)):
                _inline_graph(sg, funcs, counter)
        fn = funcs.get((node.domain, node.op_type))
        if fn is None:
            result.append(node)
            continue
        body = _instantiate(node, fn, next(counter))
        result += _expand(body, funcs, counter, depth + 1)
    return result


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
