"""Weight-only quantized MatMuls: MatMul(X, Cast(W) * S) (or (Cast(W) - Z) * S, or
DequantizeLinear(W, S, Z)) with constant 8-bit W becomes MatMulQWeight(X, W, S, Z), which the
device runs with W kept 8-bit.

quantize_dynamic's and exporters' weight compression writes the weights as int8 / uint8
constants with a float32 scale per column; folding the Cast and the Mul makes them float32,
4 bytes a weight read on every run. At a few rows (a text encoder at batch 1: 24 x 384 x
1536) the product is bound by that read, and the 8-bit form reads a quarter of it. The
kernel decompresses each weight to exactly the folded constant's value (float32(w - z) * s),
so the products are those of the folded MatMul, summed in another order."""

from __future__ import annotations

import numpy as np

from ..dtypes import DType
from ..ir import Graph, Node, TensorMeta, Value
from ..partition.placement import device_accepts
from ..passes import PassResult
from ..target import Target

_ONNX_FLOAT = 1
# compile option `weight_only_products` -> the kernel's `bf16_activations` (bfloat16 terms of
# X; 0: float32 X)
WEIGHT_ONLY_PRODUCTS = {"bf16x2": 2, "bf16": 1, "float32": 0}


def _float_const(v: Value | None) -> np.ndarray | None:
    if v is None or not v.is_constant:
        return None
    a = np.asarray(v.const)
    return a if a.dtype == np.float32 else None


def _per_column(a: np.ndarray, n: int) -> np.ndarray | None:
    """a as [1] or [n] when it is one value or varies only along the last of [.., n]."""
    if a.size == 1:
        return a.reshape(1)
    if a.ndim >= 1 and a.shape[-1] == n and a.size == n:
        return a.reshape(n)
    return None


def _dequantize_source(node: Node, n: int):
    """(W, S, Z) when `node` (MatMul's B) is DequantizeLinear(W, S[, Z]) of a constant 8-bit
    W [K, n] to float32, per tensor or per column (axis 1), unblocked: its value is
    float32((w - z) * s), the kernel's."""
    w, s = node.input(0), _float_const(node.input(1))
    if w is None or not w.is_constant or s is None or node.attrs.get("block_size", 0) or \
            node.attrs.get("output_dtype", 0) not in (0, _ONNX_FLOAT):
        return None
    wq = np.asarray(w.const)
    if wq.dtype not in (np.int8, np.uint8) or wq.ndim != 2 or wq.shape[1] != n:
        return None
    if s.size != 1 and (s.ndim != 1 or node.attrs.get("axis", 1) not in (1, -1)):
        return None
    s = _per_column(s, n)
    zv = node.input(2) if len(node.inputs) > 2 else None
    z = None
    if zv is not None:
        if not zv.is_constant:
            return None
        z = np.asarray(zv.const)
        if z.dtype != wq.dtype or z.shape != np.asarray(node.input(1).const).shape:
            return None
        z = _per_column(z, n)
    return None if s is None else (w, s, z)


def _source(node: Node, n: int):
    """(W, S, Z) when `node` (MatMul's B) is a DequantizeLinear (`_dequantize_source`) or
    Mul(Cast(W), S) or Mul(Sub(Cast(W), Zf), S) (either operand order of the Mul) with
    constant 8-bit W [K, n], S float32 and Zf a float32 of W's integers, one value or one
    per column; else None."""
    if node is not None and node.op_type == "DequantizeLinear":
        return _dequantize_source(node, n)
    if node is None or node.op_type != "Mul" or len(node.inputs) != 2:
        return None
    for i in (0, 1):
        s = _float_const(node.input(1 - i))
        inner = node.input(i).producer if node.input(i) is not None else None
        if s is None or inner is None:
            continue
        s = _per_column(s, n)
        zf = None
        if inner.op_type == "Sub" and len(inner.inputs) == 2:
            zf = _float_const(inner.input(1))
            inner = inner.input(0).producer if inner.input(0) is not None else None
            if zf is None or inner is None:
                continue
            zf = _per_column(zf, n)
            if zf is None:
                continue
        if s is None or inner.op_type != "Cast" or inner.attrs.get("to") != _ONNX_FLOAT:
            continue
        w = inner.input(0)
        if w is None or not w.is_constant:
            continue
        wq = np.asarray(w.const)
        if wq.dtype not in (np.int8, np.uint8) or wq.ndim != 2 or wq.shape[1] != n:
            continue
        z = None
        if zf is not None:
            info = np.iinfo(wq.dtype)
            if not np.all(np.isfinite(zf)) or np.any(zf != np.round(zf)) or \
                    zf.min() < info.min or zf.max() > info.max:
                continue
            z = zf.astype(wq.dtype)
        return w, s, z
    return None


def lower_weight_only_matmuls(graph: Graph, target: Target | None = None,
                              products: str = "bf16x2") -> PassResult:
    """MatMul of a float32 X and 8-bit weights dequantized in the graph -> MatMulQWeight,
    where the device's kernel info store takes it (it needs AVX-512); else the graph is left
    for fold_constants, which makes the weights float32.

    `products` (compile option `weight_only_products`) becomes each node's
    `_bf16_activations`, the bfloat16 terms X is written as: the kernel may then multiply in
    bfloat16 (`kernels_wq.cc`), which holds every centred weight (an integer of magnitude
    <= 255) exactly, with float32 sums and the scale applied in float32 after them. One term
    rounds X to 8 significant bits (relative error <= 2^-9: a MiniLM's hidden states moved
    by 1.8e-3 of their scale over six layers, past the zoo's 1e-3); two (x = hi + lo + r,
    |r| <= 2^-18 |x|) are about float32's rounding at twice the products. It does so where
    the CPU multiplies bfloat16 natively (AMX or AVX512_BF16) and X has 8 rows or more (a
    shape rule of the kernel's); elsewhere the float32 kernel runs."""
    terms = WEIGHT_ONLY_PRODUCTS[products]
    done = 0
    for node in list(graph.nodes):
        if node.op_type != "MatMul" or len(node.inputs) != 2 or len(node.outputs) != 1:
            continue
        x, b, y = node.input(0), node.input(1), node.outputs[0]
        if x is None or b is None or b.is_constant or x.meta is None or b.meta is None or \
                y.meta is None or not y.meta.is_static or x.meta.dtype is not DType.FLOAT32 or \
                len(b.meta.shape) != 2 or len(x.meta.shape) < 2:
            continue
        found = _source(b.producer, int(b.meta.shape[1]))
        if found is None:
            continue
        w, s, z = found
        ins = [x, w, graph.add_constant(None, s)]
        if z is not None:
            ins.append(graph.add_constant(None, z))
        new = graph.add_node("MatMulQWeight", ins, outputs=0,
                             attrs={"_bf16_activations": terms} if terms else {},
                             name=graph.unique_name(f"{node.name}_qweight"))
        probe = graph.add_node("MatMulQWeight", ins, name=graph.unique_name("probe"))
        probe.outputs[0].meta = TensorMeta(DType.FLOAT32, tuple(y.meta.shape))
        why = device_accepts(probe, target)
        graph.remove_node(probe)
        if why is not None:
            graph.remove_node(new)
            continue
        graph.hand_over_outputs(node, [new])
        done += 1
    return PassResult(graph, done > 0, f"{done} weight-only quantized MatMuls kept 8-bit")
