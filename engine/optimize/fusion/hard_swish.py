"""Fusion row hard_swish: HardSwish spelled out with a Clip becomes the HardSwish op.

Paddle2ONNX (PP-LCNet, PP-OCR's detectors and recognizers) and older PyTorch exports write
hardswish as `x * Clip(x + 3, 0, 6) / 6`: four nodes the activation row cannot fold into
the Conv before them, so the chain row ran them as a pass of their own over every
activation (24 of them in ppocrv4_det). The form is matched by structure (the probe of
activation_form takes analytic ops only): Add of 3, Clip to [0, 6], a Mul by x and a Div by
6 or a Mul by 1/6, the scaling before or after the Mul by x.
"""

from __future__ import annotations

from ...ir import Graph, Node, Value
from .match import Fusion, const_close, on_device, replace_region


def _only_reader(graph: Graph, v: Value, reader: Node) -> bool:
    return v.producer is not None and len(v.producer.outputs) == 1 \
        and v not in graph.outputs and set(v.users) == {reader} and len(v.users) == 1


def _sixth(node: Node) -> Value | None:
    """What `node` divides by 6 (Div by 6, or Mul by 1/6 in either order), else None."""
    if node.op_type == "Div" and const_close(node.input(1), 6.0):
        return node.input(0)
    if node.op_type == "Mul":
        for i in (0, 1):
            if const_close(node.input(1 - i), 1.0 / 6.0):
                return node.input(i)
    return None


def _clip_of(graph: Graph, v: Value | None, reader: Node) -> tuple[Value, list[Node]] | None:
    """(x, [Add, Clip]) when v = Clip(x + 3, 0, 6) and `reader` is its only reader."""
    if v is None or not _only_reader(graph, v, reader) or v.producer.op_type != "Clip":
        return None
    clip = v.producer
    if len(clip.inputs) == 1:  # opset < 11: the bounds are attributes
        bounds = (clip.attrs.get("min"), clip.attrs.get("max"))
        if bounds != (0.0, 6.0):
            return None
    elif len(clip.inputs) != 3 or not const_close(clip.input(1), 0.0) \
            or not const_close(clip.input(2), 6.0):
        return None
    a = clip.input(0)
    if a is None or not _only_reader(graph, a, clip) or a.producer.op_type != "Add":
        return None
    add = a.producer
    for i in (0, 1):
        if const_close(add.input(1 - i), 3.0) and add.input(i) is not None \
                and not add.input(i).is_constant:
            return add.input(i), [add, clip]
    return None


def _x_times_clip(graph: Graph, mul: Node) -> tuple[Value, list[Node]] | None:
    """(x, nodes up to mul) when mul = x * Clip(x + 3, 0, 6) (either order) or
    x * (Clip(x + 3, 0, 6) / 6)."""
    if mul.op_type != "Mul" or len(mul.outputs) != 1:
        return None
    for i in (0, 1):
        x, c = mul.input(i), mul.input(1 - i)
        found = _clip_of(graph, c, mul)
        if found is not None and found[0] is x:
            return x, [*found[1], mul]
    return None


def _match_hard_swish(graph: Graph, last: Node):
    if last.op_type not in ("Div", "Mul") or len(last.outputs) != 1:
        return None
    m = _sixth(last)
    if m is not None and m.producer is not None and _only_reader(graph, m, last):
        found = _x_times_clip(graph, m.producer)  # (x * clip) / 6
        if found is not None:
            x, nodes = found
            return x, [*nodes, last]
    if last.op_type == "Mul":  # x * (clip / 6)
        for i in (0, 1):
            x, d = last.input(i), last.input(1 - i)
            if d is None or d.producer is None or not _only_reader(graph, d, last):
                continue
            c = _sixth(d.producer)
            found = _clip_of(graph, c, d.producer) if c is not None else None
            if found is not None and found[0] is x:
                return x, [*found[1], d.producer, last]
    return None


def _rewrite_hard_swish(graph: Graph, last: Node, ctx) -> str:
    x, nodes = ctx
    node = replace_region(graph, last, nodes, "HardSwish", [x], {})
    return f"HardSwish({'+'.join(n.op_type for n in nodes)}): {node.name}"


def _match(graph: Graph, last: Node):
    ctx = _match_hard_swish(graph, last)
    return ctx if ctx is not None and on_device(*ctx[1]) else None


ROW = Fusion("hard_swish", _match, _rewrite_hard_swish, produces=("HardSwish",))
