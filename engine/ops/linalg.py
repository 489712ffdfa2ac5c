"""Matrix ops: MatMul, Gemm, Einsum, Det, MatMulInteger."""

from __future__ import annotations

from typing import Any

import numpy as np

from ..dtypes import DType
from ..ir import Dim, Node, TensorMeta
from . import attrs as A
from .device_helpers import kernel, optional_index, reject
from .kernel_utils import exact_int32, widen
from .registry import DeviceKernel, OpSchema, register, shape_error
from .shape_helpers import (
    FLOATS,
    NUMERIC,
    broadcast,
    check_dtype,
    check_same_dtype,
    out,
    shape_in,
    sym,
)


def _same_dim(node: Node, a: Dim, b: Dim, what: str) -> None:
    if isinstance(a, int) and isinstance(b, int) and a != b:
        raise shape_error(node, f"{what}: {a} != {b}")


def matmul_shape(node: Node, sa: tuple[Dim, ...] | None,
                 sb: tuple[Dim, ...] | None) -> tuple[Dim, ...] | None:
    if sa is None or sb is None:
        return None
    if len(sa) == 0 or len(sb) == 0:
        raise shape_error(node, "MatMul inputs must have rank >= 1")
    a2 = (1,) + sa if len(sa) == 1 else sa
    b2 = sb + (1,) if len(sb) == 1 else sb
    _same_dim(node, a2[-1], b2[-2], "inner dims of MatMul differ")
    batch = broadcast(node, [a2[:-2], b2[:-2]])
    assert batch is not None
    dims = list(batch) + [a2[-2], b2[-1]]
    if len(sa) == 1:
        dims.pop(-2)
    if len(sb) == 1:
        dims.pop(-1)
    return tuple(dims)


def _matmul_infer(node: Node, a: dict[str, Any]) -> list[TensorMeta]:
    dt = check_dtype(node, 0, NUMERIC, "A")
    check_same_dtype(node, [0, 1])
    return [out(dt, matmul_shape(node, shape_in(node, 0), shape_in(node, 1)))]


def _matmul(ins: list[Any], a: dict[str, Any]) -> list[np.ndarray]:
    x, y = ins
    return [np.matmul(widen(x), widen(y)).astype(x.dtype)]


def _matmul_device(node: Node, a: dict[str, Any]) -> DeviceKernel | str:
    return reject(node) or kernel("MatMul", {}, (0, 1))


register(OpSchema("MatMul", 2, 2, _matmul_infer, _matmul, device=_matmul_device))


# ---- Gemm -----------------------------------------------------------------------------------
def _gemm_infer(node: Node, a: dict[str, Any]) -> list[TensorMeta]:
    dt = check_dtype(node, 0, NUMERIC, "A")
    check_same_dtype(node, [0, 1, 2])
    sa, sb = shape_in(node, 0), shape_in(node, 1)
    for i, s in ((0, sa), (1, sb)):
        if s is not None and len(s) != 2:
            raise shape_error(node, f"input {i} has rank {len(s)}, expected 2")
    if sa is None or sb is None:
        return [out(dt, None if sa is None and sb is None else (sym(node, 0), sym(node, 1)))]
    m, k = (sa[1], sa[0]) if a["transA"] else sa
    k2, n = (sb[1], sb[0]) if a["transB"] else sb
    _same_dim(node, k, k2, "inner dims of Gemm differ")
    sc = shape_in(node, 2)
    if sc is not None and broadcast(node, [sc, (m, n)]) != (m, n):
        raise shape_error(node, f"C shape {list(sc)} does not broadcast to {[m, n]}")
    return [out(dt, (m, n))]


def _gemm(ins: list[Any], a: dict[str, Any]) -> list[np.ndarray]:
    x, w = widen(ins[0]), widen(ins[1])
    x = x.T if a["transA"] else x
    w = w.T if a["transB"] else w
    y = a["alpha"] * (x @ w) if a["alpha"] != 1 else x @ w
    if len(ins) > 2 and ins[2] is not None:
        y = y + (a["beta"] * widen(ins[2]) if a["beta"] != 1 else widen(ins[2]))
    return [np.asarray(y).astype(ins[0].dtype)]


def _gemm_device(node: Node, a: dict[str, Any]) -> DeviceKernel | str:
    why = reject(node)
    if why:
        return why
    return kernel("Gemm", {"alpha": float(a["alpha"]), "beta": float(a["beta"]),
                           "transA": int(a["transA"]), "transB": int(a["transB"])},
                  (0, 1, optional_index(node, 2)))


register(OpSchema("Gemm", 2, 3, _gemm_infer, _gemm, device=_gemm_device, attrs={
    "alpha": A.f(1.0), "beta": A.f(1.0), "transA": A.i(0), "transB": A.i(0)}))


# ---- Einsum ---------------------------------------------------------------------------------
def parse_einsum(eq: str, n_inputs: int) -> tuple[list[str], str]:
    """Input terms and the explicit output term; '.' stands for an ellipsis."""
    eq = eq.replace(" ", "").replace("...", ".")
    lhs, _, rhs = eq.partition("->")
    terms = lhs.split(",")
    if len(terms) != n_inputs:
        raise ValueError(f"equation has {len(terms)} terms for {n_inputs} inputs")
    if "->" not in eq:
        letters = "".join(terms).replace(".", "")
        rhs = ("." if "." in lhs else "") + "".join(
            sorted(c for c in set(letters) if letters.count(c) == 1))
    return terms, rhs


def _einsum_infer(node: Node, a: dict[str, Any]) -> list[TensorMeta]:
    n = len(node.inputs)
    dt = check_dtype(node, 0, NUMERIC, "Inputs")
    check_same_dtype(node, range(n))
    try:
        terms, rhs = parse_einsum(a["equation"], n)
    except ValueError as exc:
        raise shape_error(node, str(exc)) from None
    shapes = [shape_in(node, i) for i in range(n)]
    if any(s is None for s in shapes):
        return [out(dt, None)]
    sizes: dict[str, Dim] = {}
    ell: list[tuple[Dim, ...]] = []
    for term, shape in zip(terms, shapes):
        assert shape is not None
        n_ell = len(shape) - len(term.replace(".", ""))
        if "." not in term and n_ell != 0:
            raise shape_error(node, f"term '{term}' has {len(term)} letters for rank "
                                    f"{len(shape)}")
        pos = 0
        for c in term:
            if c == ".":
                ell.append(tuple(shape[pos:pos + n_ell]))
                pos += n_ell
                continue
            d = shape[pos]
            if c in sizes and isinstance(sizes[c], int) and isinstance(d, int) and \
                    sizes[c] != d and 1 not in (sizes[c], d):
                raise shape_error(node, f"label '{c}' has sizes {sizes[c]} and {d}")
            if c not in sizes or sizes[c] == 1:
                sizes[c] = d
            pos += 1
    ell_shape = broadcast(node, ell) if ell else ()
    dims: list[Dim] = []
    for c in rhs:
        dims += list(ell_shape or ()) if c == "." else [sizes[c]]
    return [out(dt, dims)]


def _einsum(ins: list[Any], a: dict[str, Any]) -> list[np.ndarray]:
    arrays = [widen(x) for x in ins]
    return [np.asarray(np.einsum(a["equation"], *arrays)).astype(ins[0].dtype)]


register(OpSchema("Einsum", 1, -1, _einsum_infer, _einsum,
                  attrs={"equation": A.s(A.REQUIRED)}))


# ---- Det / MatMulInteger --------------------------------------------------------------------
def _det_infer(node: Node, a: dict[str, Any]) -> list[TensorMeta]:
    dt = check_dtype(node, 0, FLOATS, "X")
    s = shape_in(node, 0)
    if s is None:
        return [out(dt, None)]
    if len(s) < 2:
        raise shape_error(node, f"input has rank {len(s)}, expected at least 2")
    _same_dim(node, s[-1], s[-2], "Det needs square matrices")
    return [out(dt, s[:-2])]


register(OpSchema("Det", 1, 1, _det_infer, lambda ins, a: [
    np.asarray(np.linalg.det(widen(ins[0]))).astype(ins[0].dtype)]))


def _mmi_infer(node: Node, a: dict[str, Any]) -> list[TensorMeta]:
    check_dtype(node, 0, {DType.INT8, DType.UINT8}, "A")
    check_dtype(node, 1, {DType.INT8, DType.UINT8}, "B")
    return [out(DType.INT32, matmul_shape(node, shape_in(node, 0), shape_in(node, 1)))]


def zero_point_sub(x: np.ndarray, zp: np.ndarray | None, axis_from_end: int | None = None
                   ) -> np.ndarray:
    x = x.astype(np.int32)
    if zp is None:
        return x
    zp = np.asarray(zp).astype(np.int32)
    if zp.ndim == 1 and zp.size > 1 and axis_from_end is not None:
        shape = [1] * x.ndim
        shape[x.ndim - axis_from_end] = zp.size
        zp = zp.reshape(shape)
    return x - zp


def _mmi(ins: list[Any], a: dict[str, Any]) -> list[np.ndarray]:
    za = ins[2] if len(ins) > 2 else None
    zb = ins[3] if len(ins) > 3 else None
    x = zero_point_sub(ins[0], za, 1)  # A: per-row zero points
    if za is not None and np.size(za) > 1:
        x = ins[0].astype(np.int32) - np.asarray(za).astype(np.int32).reshape(-1, 1)
    y = zero_point_sub(ins[1], zb, 1)
    # float64 products through BLAS, exact (see kernel_utils.exact_int32)
    return [exact_int32(np.matmul(x.astype(np.float64), y.astype(np.float64)))]


def _mmi_device(node: Node, a: dict[str, Any]) -> DeviceKernel | str:
    """The int8 kernel takes its column sums and zero points at load: B and B's zero point
    must be constants. Dtypes, shapes and the CPU are the runtime's to judge."""
    why = reject(node)
    if why:
        return why
    for i, what in ((1, "B"), (3, "B's zero point")):
        v = node.input(i)
        if v is not None and not v.is_constant:
            return f"device MatMulInteger needs {what} constant"
    return kernel("MatMulInteger", {}, (0, 1, optional_index(node, 2), optional_index(node, 3)))


register(OpSchema("MatMulInteger", 2, 4, _mmi_infer, _mmi, device=_mmi_device))
