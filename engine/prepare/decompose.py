"""Ops with no device kernel written as device ops (canonicalize rows), so that they do not
leave the device program as host steps between two halves of it.

- Trilu of a static [..., M, N] by a constant k: Where(mask, x, 0) with the constant
  [M, N] mask of the kept triangle (Qwen3-Next's chunked delta rule: three Trilus a layer,
  each a host step cutting the device program).
- ReduceLogSumExp of float32: m = ReduceMax(x) (kept dims), s = m where m is finite else 0,
  Log(ReduceSum(Exp(x - s))) + s. The shift keeps exp from overflowing (the plain form is
  inf from x > 88 in float32; the reference computes wider); where m is infinite the shift
  is 0 and the plain form's result stands (a row of -inf: log 0 = -inf; a +inf: +inf), and
  a NaN goes through as NaN (Reformer's LSH attention normalizes by one).
- Sum, Mean, Max and Min of several inputs: the binary op left to right (the reference's
  order), Mean then divided by the count (tf2onnx writes TensorFlow's AddN as a Sum).
"""

from __future__ import annotations

import numpy as np

from ..ir import Graph, Node
from .steps import chain, replace_outputs

MAX_MASK = 1 << 24  # elements of a Trilu's constant mask


def _trilu_k(node: Node) -> int | None:
    if len(node.inputs) < 2 or node.input(1) is None:
        return 0
    k = node.input(1)
    if not k.is_constant or np.asarray(k.const).size != 1:
        return None
    return int(np.asarray(k.const).reshape(-1)[0])


def static_trilu(node: Node) -> bool:
    x = node.input(0)
    if node.op_type != "Trilu" or x is None or x.meta is None or not x.meta.is_static \
            or len(x.meta.shape) < 2 or len(node.outputs) != 1:
        return False
    m, n = x.meta.shape[-2:]
    return _trilu_k(node) is not None and 0 < m * n <= MAX_MASK


def as_masked_where(graph: Graph, node: Node) -> None:
    x = node.inputs[0]
    m, n = x.meta.shape[-2:]
    k = _trilu_k(node)
    upper = int(node.attrs.get("upper", 1)) != 0
    diag = np.arange(n)[None, :] - np.arange(m)[:, None]  # j - i
    keep = diag >= k if upper else diag <= k
    step = chain(graph, node)
    out = step("Where", [graph.add_constant(None, keep),
                         x, graph.add_constant(None, np.zeros((), x.meta.dtype.numpy))])
    replace_outputs(graph, node, {0: out})


def float_logsumexp(node: Node) -> bool:
    x, y = node.input(0), node.outputs[0] if len(node.outputs) == 1 else None
    return node.op_type == "ReduceLogSumExp" and x is not None and y is not None \
        and x.meta is not None and x.meta.dtype.numpy == np.float32 \
        and y.meta is not None and y.meta.is_static


def as_stable_steps(graph: Graph, node: Node) -> None:
    x, y = node.inputs[0], node.outputs[0]
    keep = int(node.attrs.get("keepdims", 1))
    noop = {"noop_with_empty_axes": node.attrs["noop_with_empty_axes"]} \
        if "noop_with_empty_axes" in node.attrs else {}
    axes = list(node.inputs[1:2]) if len(node.inputs) > 1 and node.input(1) is not None else []
    if "axes" in node.attrs:  # the attribute form (opset < 18)
        axes = [graph.add_constant(None, np.asarray(node.attrs["axes"], np.int64))]
    step = chain(graph, node)
    top = step("ReduceMax", [x, *axes], keepdims=1, **noop)
    shift = step("Where", [step("IsInf", [top]), graph.add_constant(None, np.float32(0)), top])
    total = step("ReduceSum", [step("Exp", [step("Sub", [x, shift])]), *axes], keepdims=keep,
                 **noop)
    if not keep:
        shift = step("Reshape", [shift, graph.add_constant(None, np.asarray(y.meta.shape,
                                                                              np.int64))])
    out = step("Add", [step("Log", [total]), shift])
    replace_outputs(graph, node, {0: out})


_PAIRWISE = {"Sum": "Add", "Mean": "Add", "Max": "Max", "Min": "Min"}


def variadic_of_several(node: Node) -> bool:
    ins = node.inputs
    if node.op_type not in _PAIRWISE or len(ins) < 2 or len(node.outputs) != 1 \
            or any(v is None or v.meta is None for v in ins):
        return False
    if node.op_type in ("Max", "Min") and len(ins) == 2:
        return False  # the device's binary op as it is
    return node.op_type != "Mean" or ins[0].meta.dtype.numpy == np.float32


def as_pairwise_steps(graph: Graph, node: Node) -> None:
    step = chain(graph, node)
    acc = node.inputs[0]
    for x in node.inputs[1:]:
        acc = step(_PAIRWISE[node.op_type], [acc, x])
    if node.op_type == "Mean":
        acc = step("Div", [acc, graph.add_constant(None, np.float32(len(node.inputs)))])
    replace_outputs(graph, node, {0: acc})
