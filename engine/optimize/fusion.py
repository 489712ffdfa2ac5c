"""Operator fusion as a table of (pattern, rewrite) rows run by one driver.

Fusions act only inside one device partition: both ends of every fused edge must be on
the device engine and in the same partition, and the intermediate value must have no
other reader. Fused nodes record the names of what they absorbed in `meta.fused`; the
driver returns one line per fusion for the compile report.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import numpy as np

from ..codegen.memory import aligned_empty
from ..ir import Engine, Graph, Node, Value
from ..passes import PassResult
from .fusion_conv_block import match_conv_block, rewrite_conv_block
from .fusion_conv_dw import match_conv_dw, rewrite_conv_dw
from .fusion_conv_head import match_conv_head, rewrite_conv_head


@dataclasses.dataclass(frozen=True)
class Fusion:
    name: str
    # match(node) -> a context for rewrite, or None; `node` is the pattern's last node.
    match: Callable[[Graph, Node], object | None]
    rewrite: Callable[[Graph, Node, object], str]  # returns a description


def _on_device(*nodes: Node) -> bool:
    part = nodes[0].meta.partition
    return all(n.meta.engine is Engine.DEVICE and n.meta.partition == part for n in nodes)


def _sole_producer(graph: Graph, v: Value | None, op_types: set[str]) -> Node | None:
    """The producer of v when it is one of op_types and v has no other reader."""
    if v is None or v.producer is None or v.producer.op_type not in op_types:
        return None
    if len(v.users) != 1 or v in graph.outputs or len(v.producer.outputs) != 1:
        return None
    return v.producer


def _absorb(graph: Graph, keep: Node, gone: Node) -> None:
    """`gone` read only keep's output; keep now produces gone's output value."""
    out = gone.outputs[0]
    old = keep.outputs[0]
    gone.set_inputs([])
    # keep takes over gone's output so names of graph outputs and readers stay stable.
    graph.nodes.remove(gone)
    graph._node_names.discard(gone.name)
    gone.graph = None  # type: ignore[assignment]
    out.producer, out.index = keep, 0
    keep.outputs[0] = out
    if old.name in graph.values and old is not out:
        del graph.values[old.name]
    keep.meta.fused = keep.meta.fused + (gone.name,) + gone.meta.fused


# ---- Conv + BatchNormalization ---------------------------------------------------------
def _match_conv_bn(graph: Graph, bn: Node):
    if bn.op_type != "BatchNormalization" or len(bn.outputs) != 1:
        return None
    conv = _sole_producer(graph, bn.input(0), {"Conv"})
    if conv is None or not _on_device(conv, bn) or conv.attrs.get("_activation") \
            or conv.attrs.get("_dw"):
        return None
    params = [bn.input(i) for i in range(1, 5)]
    if not all(p is not None and p.is_constant for p in params):
        return None
    w, b = conv.input(1), conv.input(2)
    if w is None or not w.is_constant or (b is not None and not b.is_constant):
        return None
    return conv


def _rewrite_conv_bn(graph: Graph, bn: Node, conv: Node) -> str:
    scale, bias, mean, var = (bn.input(i).const.astype(np.float64) for i in range(1, 5))
    eps = float(bn.attrs.get("epsilon", 1e-5))
    w = conv.input(1).const
    factor = scale / np.sqrt(var + eps)
    # The per-channel factor in float64, the product in float32 for float32 weights (one
    # rounding, like the unfused Conv then BatchNormalization; a float64 pass over every
    # weight took a fifth of resnet18's compile).
    wide = np.float32 if w.dtype == np.float32 else np.float64
    shape = (-1, *([1] * (w.ndim - 1)))
    # Written into an aligned array the runtime takes in place (one copy of the weights
    # fewer at load: resnet18's 47 MB).
    new_w = aligned_empty(w.shape, w.dtype)
    np.multiply(w.astype(wide, copy=False), factor.astype(wide).reshape(shape), out=new_w,
                casting="same_kind")
    old_b = conv.input(2).const.astype(np.float64) if conv.input(2) is not None else 0.0
    new_b = ((old_b - mean) * factor + bias).astype(w.dtype)
    inputs = [conv.input(0), graph.add_constant(None, new_w), graph.add_constant(None, new_b)]
    conv.set_inputs(inputs)
    _absorb(graph, conv, bn)
    return f"Conv+BatchNormalization: {conv.name} absorbed {bn.name}"


# ---- MatMul + bias Add -----------------------------------------------------------------
def _match_bias(graph: Graph, add: Node):
    if add.op_type != "Add":
        return None
    for i in (0, 1):
        mm = _sole_producer(graph, add.input(i), {"MatMul"})
        bias = add.input(1 - i)
        if (mm is None or not _on_device(mm, add) or mm.attrs.get("_has_bias")
                or mm.attrs.get("_activation") or mm.attrs.get("_sum")):
            continue
        out = mm.outputs[0].meta
        if (bias is not None and bias.is_constant and bias.const.ndim == 1 and out is not None
                and out.shape and bias.const.shape[0] == out.shape[-1]
                and bias.const.dtype == np.float32):
            return mm, bias
    return None


def _rewrite_bias(graph: Graph, add: Node, ctx) -> str:
    mm, bias = ctx
    mm.set_inputs([mm.input(0), mm.input(1), bias])
    mm.attrs["_has_bias"] = 1
    _absorb(graph, mm, add)
    return f"MatMul+bias: {mm.name} absorbed {add.name}"


# ---- residual Add into Conv (oneDNN sum post-op) ----------------------------------------
def _match_residual(graph: Graph, add: Node):
    if add.op_type != "Add":
        return None
    for i in (0, 1):
        conv = _sole_producer(graph, add.input(i), {"Conv", "Gemm", "MatMul"})
        other = add.input(1 - i)
        if conv is None or not _on_device(conv, add) or conv.attrs.get("_activation") \
                or conv.attrs.get("_sum") or conv.attrs.get("_dw") or other is None \
                or other.is_constant:
            continue
        if other.meta == conv.outputs[0].meta and other.meta is not None:
            return conv, other
    return None


def _rewrite_residual(graph: Graph, add: Node, ctx) -> str:
    conv, other = ctx
    inputs = list(conv.inputs)
    if conv.op_type in ("Conv", "Gemm"):  # input 2 is their optional bias: keep its slot
        inputs += [None] * (3 - len(inputs))
    conv.attrs["_sum"] = 1
    conv.attrs["_sum_input"] = len(inputs)
    conv.set_inputs(inputs + [other])
    _absorb(graph, conv, add)
    return f"{conv.op_type}+Add(residual): {conv.name} absorbed {add.name}"


# ---- activation epilogue ---------------------------------------------------------------
_ACTIVATIONS = {"Relu", "Clip", "Sigmoid", "Tanh", "Gelu", "LeakyRelu", "HardSwish"}


def _match_activation(graph: Graph, act: Node):
    if act.op_type not in _ACTIVATIONS:
        return None
    prod = _sole_producer(graph, act.input(0), {"Conv", "Gemm", "MatMul"})
    if prod is None or not _on_device(prod, act) or prod.attrs.get("_activation") \
            or prod.attrs.get("_dw"):
        return None
    attrs: dict = {"_activation": act.op_type}
    if act.op_type == "Clip":
        lo, hi = act.input(1), act.input(2)
        if (lo is not None and not lo.is_constant) or (hi is not None and not hi.is_constant):
            return None
        attrs["_activation_alpha"] = float(lo.const) if lo is not None else float("-inf")
        attrs["_activation_beta"] = float(hi.const) if hi is not None else float("inf")
    elif act.op_type == "LeakyRelu":
        attrs["_activation_alpha"] = float(act.attrs.get("alpha", 0.01))
    elif act.op_type == "Gelu":
        if act.attrs.get("approximate", "none") == "tanh":
            attrs["_activation"] = "GeluTanh"
    return prod, attrs


def _rewrite_activation(graph: Graph, act: Node, ctx) -> str:
    prod, attrs = ctx
    prod.attrs.update(attrs)
    _absorb(graph, prod, act)
    return f"{prod.op_type}+{act.op_type}: {prod.name} absorbed {act.name}"


# ---- Erf-form GELU: x * 0.5 * (1 + erf(x / sqrt(2))) -----------------------------------
def _const_close(v: Value | None, target: float) -> bool:
    return (v is not None and v.is_constant and v.const.size == 1
            and abs(float(v.const.reshape(())) - target) < 1e-4 * max(1.0, abs(target)))


def _other(node: Node, v: Value) -> Value | None:
    a, b = node.input(0), node.input(1)
    return b if a is v else a if b is v else None


def _match_gelu(graph: Graph, last: Node):
    # last = Mul(Mul(x, Add(Erf(Div(x, sqrt2)), 1)), 0.5) or Mul(x, Mul(Add(...), 0.5)) etc.
    if last.op_type != "Mul":
        return None
    for inner_v, half in ((last.input(0), last.input(1)), (last.input(1), last.input(0))):
        if not _const_close(half, 0.5):
            continue
        mul = _sole_producer(graph, inner_v, {"Mul"})
        if mul is None:
            continue
        for add_v in (mul.input(0), mul.input(1)):
            add = _sole_producer(graph, add_v, {"Add"})
            if add is None:
                continue
            x = _other(mul, add_v)
            for erf_v in (add.input(0), add.input(1)):
                erf = _sole_producer(graph, erf_v, {"Erf"})
                if erf is None or not _const_close(_other(add, erf_v), 1.0):
                    continue
                div = _sole_producer(graph, erf.input(0), {"Div", "Mul"})
                if div is None or div.input(0) is not x:
                    continue
                scale = 2 ** 0.5 if div.op_type == "Div" else 2 ** -0.5
                if _const_close(div.input(1), scale):
                    nodes = [div, erf, add, mul, last]
                    if _on_device(*nodes) and x is not None:
                        return x, nodes
    return None


def _rewrite_gelu(graph: Graph, last: Node, ctx) -> str:
    x, nodes = ctx
    out = last.outputs[0]
    gelu = graph.add_node("Gelu", [x], attrs={"approximate": "none"},
                          name=graph.unique_name("gelu"), after=last)
    gelu.meta.engine, gelu.meta.partition = last.meta.engine, last.meta.partition
    gelu.outputs[0].meta = out.meta
    graph.replace_all_uses(out, gelu.outputs[0])
    for n in reversed(nodes):
        graph.remove_node(n)
    _rename_output(graph, gelu.outputs[0], out.name)
    gelu.meta.fused = tuple(n.name for n in nodes)
    return f"Erf-GELU: {len(nodes)} nodes -> {gelu.name}"


# ---- decomposed LayerNorm: (x - mean) / sqrt(var + eps) * gamma + beta -----------------
def _axes_is_last(node: Node, rank: int) -> bool:
    axes = node.input(1)
    if axes is None or not axes.is_constant or not node.attrs.get("keepdims", 1):
        return False
    vals = [int(a) for a in np.asarray(axes.const).reshape(-1)]
    return vals in ([-1], [rank - 1])


def _mean_of(graph: Graph, v: Value | None) -> Node | None:
    node = v.producer if v is not None else None
    if node is None or node.op_type != "ReduceMean" or node.input(0) is None:
        return None
    meta = node.input(0).meta
    return node if meta is not None and meta.rank and _axes_is_last(node, meta.rank) else None


def _match_layernorm(graph: Graph, div: Node):
    if div.op_type != "Div":
        return None
    d, s = div.input(0), div.input(1)
    sub = d.producer if d is not None else None
    if sub is None or sub.op_type != "Sub" or len(set(d.users)) != 2:
        return None
    x, mean = sub.input(0), _mean_of(graph, sub.input(1))
    if mean is None or mean.input(0) is not x:
        return None
    sqrt = _sole_producer(graph, s, {"Sqrt"})
    add = _sole_producer(graph, sqrt.input(0), {"Add"}) if sqrt else None
    if add is None:
        return None
    var_v, eps_v = add.input(0), add.input(1)
    if eps_v is None or not eps_v.is_constant:
        var_v, eps_v = eps_v, var_v
    var = _mean_of(graph, var_v)
    if var is None or eps_v is None or not eps_v.is_constant or len(var_v.users) != 1:
        return None
    sq = _sole_producer(graph, var.input(0), {"Pow", "Mul"})
    if sq is None or sq.input(0) is not d or not (
            (sq.op_type == "Pow" and _const_close(sq.input(1), 2.0))
            or (sq.op_type == "Mul" and sq.input(1) is d)):
        return None
    nodes = [mean, sub, sq, var, add, sqrt, div]
    if len(mean.outputs[0].users) != 1 or not _on_device(*nodes):
        return None
    eps = float(np.asarray(eps_v.const).reshape(-1)[0])
    return x, eps, nodes


def _rewrite_layernorm(graph: Graph, div: Node, ctx) -> str:
    x, eps, nodes = ctx
    width = int(x.meta.shape[-1])
    out = div.outputs[0]
    scale = graph.add_constant(None, np.ones(width, np.float32))
    bias = graph.add_constant(None, np.zeros(width, np.float32))
    # absorb a following affine Mul(gamma) + Add(beta) when present
    tail, absorbed = div, []
    mul = out.users[0] if len(out.users) == 1 and out not in graph.outputs else None
    if mul is not None and mul.op_type == "Mul":
        gamma = _other(mul, out)
        if gamma is not None and gamma.is_constant and gamma.const.shape == (width,):
            scale, tail, absorbed = gamma, mul, [mul]
            o = mul.outputs[0]
            plus = o.users[0] if len(o.users) == 1 and o not in graph.outputs else None
            beta = _other(plus, o) if plus is not None and plus.op_type == "Add" else None
            if beta is not None and beta.is_constant and beta.const.shape == (width,):
                bias, tail, absorbed = beta, plus, [mul, plus]
    final = tail.outputs[0]
    ln = graph.add_node("LayerNormalization", [x, scale, bias],
                        attrs={"axis": -1, "epsilon": eps}, name=graph.unique_name("layernorm"),
                        after=tail)
    ln.meta.engine, ln.meta.partition = div.meta.engine, div.meta.partition
    ln.outputs[0].meta = final.meta
    graph.replace_all_uses(final, ln.outputs[0])
    for n in reversed(nodes + absorbed):
        graph.remove_node(n)
    _rename_output(graph, ln.outputs[0], final.name)
    ln.meta.fused = tuple(n.name for n in nodes + absorbed)
    return f"LayerNorm: {len(nodes) + len(absorbed)} nodes -> {ln.name}"


def _rename_output(graph: Graph, v: Value, name: str) -> None:
    if name in graph.values:
        return
    del graph.values[v.name]
    v.name = name
    graph.values[name] = v


from .fusion_attention import ATTENTION  # noqa: E402  (it uses the helpers above)
from .fusion_eltwise import ELTWISE_CHAIN  # noqa: E402

FUSIONS: list[Fusion] = [
    Fusion("conv_bn", _match_conv_bn, _rewrite_conv_bn),
    Fusion("erf_gelu", _match_gelu, _rewrite_gelu),
    Fusion("layernorm", _match_layernorm, _rewrite_layernorm),
    ATTENTION,
    Fusion("matmul_bias", _match_bias, _rewrite_bias),
    Fusion("residual_add", _match_residual, _rewrite_residual),
    Fusion("activation", _match_activation, _rewrite_activation),
    Fusion("conv_dw", match_conv_dw, rewrite_conv_dw),  # after activation: both carry theirs
    Fusion("conv_block", match_conv_block, rewrite_conv_block),  # after conv_dw: ends its node
    Fusion("conv_head", match_conv_head, rewrite_conv_head),  # after activation (the Conv's)
    ELTWISE_CHAIN,  # last: epilogues of Conv/MatMul take their activations first
]


def fuse(graph: Graph, table: list[Fusion] | None = None) -> PassResult:
    applied: list[str] = []
    for row in table or FUSIONS:
        for node in list(graph.nodes):
            if node.graph is not graph:  # removed by an earlier rewrite
                continue
            ctx = row.match(graph, node)
            if ctx is not None:
                applied.append(row.rewrite(graph, node, ctx))
    graph.fusions += applied
    return PassResult(graph, bool(applied), f"{len(applied)} fusions")
