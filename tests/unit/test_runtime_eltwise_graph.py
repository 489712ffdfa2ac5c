"""The runtime's EltwiseGraph kernel: a register program over tiles, checked at load.

Each case runs on both ISA paths (the `isa` fixture): the AVX-512 build of the tile loop and
the baseline one, each held to numpy (float64 where the op is a transcendental).
"""

from __future__ import annotations

import numpy as np
import pytest

from graphengine import _runtime as rt
from graphengine.engine.ops.eltwise_graph import _compute
from tests.unit.test_runtime import SpecBuilder

RNG = np.random.default_rng(23)


def _spec(shapes, out_shape, ops, args, outputs, alphas=None, betas=None):
    """A one-task model: inputs of `shapes`, len(outputs) outputs of `out_shape`."""
    all_shapes = [list(s) for s in shapes] + [list(out_shape)] * len(outputs)
    step = max(256, -(-max(int(np.prod(s)) for s in all_shapes) * 4 // 64) * 64)
    n_in, n = len(shapes), len(ops)
    return {"name": "m", "arena_bytes": step * len(all_shapes), "num_streams": 1,
            "num_events": 0,
            "tensors": [{"name": f"t{i}", "dtype": "float32", "shape": s, "region": "arena",
                         "offset": step * i} for i, s in enumerate(all_shapes)],
            "tasks": [{"kind": "kernel", "name": "region", "op": "EltwiseGraph", "stream": 0,
                       "inputs": list(range(n_in)),
                       "outputs": list(range(n_in, n_in + len(outputs))),
                       "attrs": {"ops": ",".join(ops), "args": args,
                                 "alphas": alphas or [0.0] * n, "betas": betas or [0.0] * n,
                                 "results": outputs}}],
            "inputs": list(range(n_in)), "outputs": list(range(n_in, n_in + len(outputs)))}


def _attrs(ops, args, outputs, alphas=None, betas=None):
    n = len(ops)
    return {"ops": ops, "args": args, "alphas": alphas or [0.0] * n,
            "betas": betas or [0.0] * n, "results": outputs}


# The WKV step's shape: a running max, two exponentials of differences, a value read three
# times, two outputs (one of them also read inside).
_WKV_OPS = ["Add", "Max", "Sub", "Exp", "Sub", "Exp", "Mul", "Mul", "Add", "Add", "Div"]
_WKV_ARGS = [0, 1, -1,   # 3: k + time_first
             3, 2, -1,   # 4: m = max(., state)
             2, 4, -1,   # 5: state - m
             5, -1, -1,  # 6: e1
             3, 4, -1,   # 7: k' - m
             7, -1, -1,  # 8: e2
             6, 0, -1,   # 9: e1 * k
             8, 0, -1,   # 10: e2 * k
             9, 10, -1,  # 11: numerator
             6, 8, -1,   # 12: denominator
             11, 12, -1]  # 13: numerator / denominator


@pytest.mark.parametrize("domain,first,state", [
    ((1, 128), (128,), (1, 128)),            # rwkv at batch 1: one short tile
    ((3, 700), (700,), (3, 1)),              # tiles and a tail; a suffix and a prefix input
    ((2, 5, 37), (1, 5, 1), (2, 5, 37)),     # a per-channel input of [N, C, L]
    ((2, 40000), (), (2, 40000)),            # the parallel tiles; a scalar input
])
def test_dag_program_matches_numpy(isa, domain, first, state):
    dev = rt.Device()
    shapes = [domain, first, state]
    m = rt.Model(dev, _spec(shapes, domain, _WKV_OPS, _WKV_ARGS, [13, 12]))
    xs = [RNG.standard_normal(s).astype(np.float32) for s in shapes]
    got = m.execute(xs)
    want = _compute(xs, _attrs(_WKV_OPS, _WKV_ARGS, [13, 12]))
    for g, w in zip(got, want):
        assert g.shape == tuple(domain)
        np.testing.assert_allclose(g, w, rtol=2e-6, atol=1e-7)
    impl = m.profile()[0]["impl"]
    assert impl.startswith("avx512" if isa == "avx512" else "plain"), impl
    assert "11 ops" in impl


_SPECIAL = np.array([0.0, -0.0, 1.0, -1.0, 1e-30, -1e-30, 1e-40, -1e-40, 0.3, -0.3, 0.36,
                     -0.36, 20.0, -20.0, 88.0, 89.5, -87.0, -103.0, -110.0, 1e30, -1e30,
                     np.inf, -np.inf, np.nan], np.float32)


def _values() -> np.ndarray:
    grid = np.linspace(-12, 12, 4001, dtype=np.float32)
    wide = (RNG.standard_normal(2000) * 30).astype(np.float32)
    return np.concatenate([_SPECIAL, grid, wide]).astype(np.float32)


def _exact(op, x, alpha=0.0, beta=0.0):
    """The op in float64 on the float32 inputs; where the op scales its input first
    (Swish, HardSigmoid), the scaled input rounded to float32 as the kernel has it (exp
    would otherwise amplify the product's rounding into the comparison)."""
    from math import erf

    d = x.astype(np.float64)
    with np.errstate(all="ignore"):
        ax = (np.float32(alpha) * x).astype(np.float64)
        if op == "Gelu":  # the ONNX formula: NaN at -inf (-inf * 0), as the reference kernel
            return np.array([0.5 * v * (1 + erf(v / np.sqrt(2))) if np.isfinite(v) else
                             v * (0.5 * (1 + np.sign(v))) for v in d])
        return {
            "Exp": np.exp, "Log": np.log, "Tanh": np.tanh, "Sqrt": np.sqrt,
            "Sigmoid": lambda v: 1 / (1 + np.exp(-v)), "Reciprocal": lambda v: 1 / v,
            "Neg": np.negative, "Abs": np.abs, "Relu": lambda v: np.where(v < 0, 0, v),
            "LeakyRelu": lambda v: np.where(v < 0, alpha * v, v),
            "Elu": lambda v: np.where(v > 0, v, alpha * np.expm1(v)),
            "Swish": lambda v: v / (1 + np.exp(-ax)),
            "HardSigmoid": lambda v: np.clip(ax + beta, 0, 1),
            "HardSwish": lambda v: v * np.clip(v / 6 + 0.5, 0, 1),
            "Clip": lambda v: np.clip(v, alpha, beta),
            "GeluTanh": lambda v: 0.5 * v * (1 + np.tanh(np.sqrt(2 / np.pi)
                                                         * (v + 0.044715 * v ** 3))),
            "Pow": lambda v: np.power(v, alpha),
            "Softplus": lambda v: np.logaddexp(0, v),
            "Mish": lambda v: v * np.tanh(np.logaddexp(0, v)),
            "Sign": np.sign, "Round": np.round, "Softsign": lambda v: v / (1 + np.abs(v)),
            "Selu": lambda v: beta * np.where(v > 0, v, alpha * np.expm1(v)),
            "Celu": lambda v: np.where(v > 0, v, alpha * np.expm1(v / alpha)),
            "ThresholdedRelu": lambda v: np.where(v > alpha, v, 0.0),
            "Shrink": lambda v: np.where(v < -alpha, v + beta, np.where(v > alpha, v - beta, 0.0)),
        }[op](d)


# rtol against float64; atol where the float32 formula loses absolute bits the truth keeps:
# HardSigmoid's alpha x + beta near 0 (half an ulp of 0.5), GELU's 1 + erf or 1 + tanh
# near -1 (gelu.h: errors ~3.4e-7 absolute), results below 1e-36 (an exp that overflows
# float32 first)
@pytest.mark.parametrize("op,alpha,beta,rtol,atol", [
    ("Exp", 0, 0, 3e-7, 0), ("Log", 0, 0, 3e-7, 0), ("Tanh", 0, 0, 6e-7, 0),
    ("Sqrt", 0, 0, 1e-7, 0), ("Sigmoid", 0, 0, 5e-7, 0), ("Reciprocal", 0, 0, 1e-7, 0),
    ("Neg", 0, 0, 0, 0), ("Abs", 0, 0, 0, 0), ("Relu", 0, 0, 0, 0),
    ("LeakyRelu", 0.1, 0, 1e-7, 0), ("Elu", 1.3, 0, 5e-7, 0), ("Swish", 1.7, 0, 6e-7, 0),
    ("HardSigmoid", 0.2, 0.5, 1e-7, 3e-8), ("HardSwish", 0, 0, 2e-7, 6e-8),
    ("Clip", -0.5, 2.0, 0, 0), ("Gelu", 0, 0, 5e-7, 4e-7), ("GeluTanh", 0, 0, 1e-6, 1e-7),
    ("Pow", 2.0, 0, 1e-7, 0), ("Pow", 3.0, 0, 2e-7, 0), ("Pow", 0.5, 0, 1e-7, 0),
    ("Pow", -0.5, 0, 2e-7, 0), ("Pow", -1.0, 0, 1e-7, 0), ("Pow", 1.5, 0, 3e-7, 0),
    ("Softplus", 0, 0, 3e-7, 0), ("Mish", 0, 0, 8e-7, 0),
    ("Sign", 0, 0, 0, 0), ("Round", 0, 0, 0, 0), ("Softsign", 0, 0, 2e-7, 0),
    ("Selu", 1.6732632, 1.050701, 5e-7, 0), ("Celu", 1.3, 0, 5e-7, 0),
    ("ThresholdedRelu", 0.7, 0, 0, 0), ("Shrink", 0.5, 0.2, 1e-7, 3e-8),
])
def test_unary_ops_against_float64(isa, op, alpha, beta, rtol, atol):
    """Every unary instruction over a grid, wide values and the special ones (signed zeros,
    subnormals, the exp limits, infinities, NaN): within rtol (and atol) of float64, NaN
    exactly where float64 has NaN."""
    x = _values()
    if op in ("Log", "Sqrt") or (op == "Pow" and alpha != int(alpha)):
        x = np.concatenate([x, np.abs(x) * 1e-3, np.abs(x) * 1e3]).astype(np.float32)
    if op == "Round":  # halves (to even), and around 2^23, where every float is an integer
        big = np.float32(2 ** 23)
        x = np.concatenate([x, np.arange(-10.5, 11, 0.5), np.nextafter(big, 0) * np.array([1, -1]),
                            [big, -big, big + 1, 4194304.5, -4194304.5, 0.49999997]]
                           ).astype(np.float32)
    m = rt.Model(rt.Device(), _spec([x.shape], x.shape, [op], [0, -1, -1], [1],
                                    alphas=[alpha], betas=[beta]))
    (got,) = m.execute([x])
    with np.errstate(over="ignore"):
        want = _exact(op, x, alpha, beta).astype(np.float32)  # the truth rounded to float32
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want), err_msg=op)
    ok = ~np.isnan(want)
    np.testing.assert_allclose(got[ok], want[ok], rtol=rtol + 1e-7, atol=max(atol, 1e-36),
                               err_msg=op)
    if op in ("Tanh", "Neg", "Abs", "Sign", "Round"):  # the sign of zero (numpy's sign: +0)
        zeros = x == 0
        np.testing.assert_array_equal(np.signbit(got[zeros]), np.signbit(want[zeros]))


@pytest.mark.parametrize("op", ["Max", "Min", "Add", "Sub", "Mul", "Div"])
def test_binary_ops_propagate_nan_and_broadcast(isa, op):
    a = np.array([[1.0, np.nan, 3.0, -np.inf, 0.0], [np.nan, 2.0, -1.0, 5.0, np.inf]],
                 np.float32)
    b = np.array([np.nan, 1.0, 4.0, 2.0, 0.0], np.float32)  # a suffix input
    m = rt.Model(rt.Device(), _spec([a.shape, b.shape], a.shape, [op], [0, 1, -1], [2]))
    (got,) = m.execute([a, b])
    with np.errstate(all="ignore"):
        want = {"Max": np.maximum, "Min": np.minimum, "Add": np.add, "Sub": np.subtract,
                "Mul": np.multiply, "Div": np.divide}[op](a, b)
    np.testing.assert_array_equal(got, want)


def test_program_registers_are_reused():
    """A 400-instruction chain of alternating steps needs two registers (the tile's scratch
    is registers x 512 floats), and reads its input in every step."""
    n = 400
    ops, args = [], []
    for k in range(n):
        prev = 0 if k == 0 else k  # slot of the previous result (1 input: results at 1 + k)
        ops.append("Add" if k % 2 == 0 else "Mul")
        args += [prev, 0, -1]
    m = rt.Model(rt.Device(), _spec([(4, 9)], (4, 9), ops, args, [n]))
    x = (RNG.standard_normal((4, 9)) * 0.01).astype(np.float32)
    (got,) = m.execute([x])
    np.testing.assert_allclose(got, _compute([x], _attrs(ops, args, [n]))[0], rtol=1e-5)
    assert "2 registers" in m.profile()[0]["impl"], m.profile()[0]["impl"]


@pytest.mark.parametrize("change,message", [
    ({"ops": "Add,Cosh"}, "instruction 1: unknown op 'Cosh'"),
    ({"args": [0, 1, -1]}, "3 entries per instruction"),
    ({"args": [0, 1, -1, 3, -1, -1]}, r"instruction 1 \(Exp\): argument 0 slot 3 out of range"),
    ({"args": [0, -1, -1, 2, -1, -1]}, r"instruction 0 \(Add\): argument 1 slot -1 out of range"),
    ({"args": [0, 1, -1, 2, 0, -1]}, r"instruction 1 \(Exp\): takes 1 arguments"),
    ({"results": [1]}, r"output 0: slot 1 is not an instruction's result"),
    ({"results": [9]}, r"output 0: slot 9 is not an instruction's result"),
    ({"alphas": [0.0]}, "'alphas', 'betas' one"),
])
def test_bad_programs_are_refused_at_load(change, message):
    spec = _spec([(2, 3), (2, 3)], (2, 3), ["Add", "Exp"], [0, 1, -1, 2, -1, -1], [3])
    spec["tasks"][0]["attrs"].update(change)
    with pytest.raises(rt.InvalidArgument, match=r"node 'region' \(EltwiseGraph\): .*" + message):
        rt.Model(rt.Device(), spec)


@pytest.mark.parametrize("domain,shape", [
    ((2, 3, 4, 5), (3, 1, 5)),      # coordinate attention's [C, 1, W] of [N, C, H, W]
    ((2, 3, 4, 5), (2, 1, 1, 5)),   # a mask [B, 1, 1, S] of [B, H, L, S]
    ((2, 3, 4, 5), (2, 3, 1, 5)),
    ((3, 1, 4, 7), (3, 1, 1, 7)),   # a unit axis of the domain inside the gap
])
def test_two_runs_the_second_ending_at_the_last_axis(isa, domain, shape):
    m = rt.Model(rt.Device(), _spec([domain, shape], domain, ["Mul", "Sub"],
                                    [0, 1, -1, 2, 1, -1], [3]))
    x, w = (RNG.standard_normal(s).astype(np.float32) for s in (domain, shape))
    (got,) = m.execute([x, w])
    np.testing.assert_array_equal(got, x * w - w)


@pytest.mark.parametrize("shape", [(7,), (2, 1, 5, 1, 1), (2, 1, 5, 1, 3), (6, 2)])
def test_inputs_that_are_no_contiguous_broadcast_are_refused(shape):
    """Against [2, 4, 5, 6, 3]: [7] and [6, 2] do not broadcast; [2, 1, 5, 1, 1] is two runs
    of which the second does not end at the last axis; [2, 1, 5, 1, 3] three runs."""
    spec = _spec([(2, 4, 5, 6, 3), shape], (2, 4, 5, 6, 3), ["Add"], [0, 1, -1], [2])
    with pytest.raises(rt.InvalidArgument, match="over a contiguous run"):
        rt.Model(rt.Device(), spec)


def test_outputs_must_share_the_domain():
    spec = _spec([(2, 3)], (2, 3), ["Exp", "Neg"], [0, -1, -1, 1, -1, -1], [1, 2])
    spec["tensors"][2]["shape"] = [3, 2]
    with pytest.raises(rt.InvalidArgument, match="must have output 0's shape"):
        rt.Model(rt.Device(), spec)


def test_too_many_instructions_are_refused():
    n = 8193
    spec = _spec([(2,)], (2,), ["Neg"] * n, [0, -1, -1] + [k for j in range(1, n)
                                                            for k in (j, -1, -1)], [n])
    with pytest.raises(rt.InvalidArgument, match="at most 8192"):
        rt.Model(rt.Device(), spec)


def test_a_long_program_over_few_elements_shares_its_tiles():
    """RWKV's recurrence at batch 8: 1,024 elements, hundreds of instructions. The work, not
    the element count, decides: smaller tiles, one per thread of a two-thread device; the
    result is the same as one thread's."""
    n = 400
    ops = ["Mul" if k % 2 else "Add" for k in range(n)]
    args = [a for k in range(n) for a in ((0 if k == 0 else k), 0, -1)]
    x = (RNG.standard_normal((8, 128)) * 0.01).astype(np.float32)
    outs = {}
    for threads in (1, 2):
        m = rt.Model(rt.Device(threads=threads), _spec([(8, 128)], (8, 128), ops, args, [n]))
        (outs[threads],) = m.execute([x])
        impl = m.profile()[0]["impl"]
        assert ("2 threads" in impl) == (threads == 2), impl
    np.testing.assert_array_equal(outs[1], outs[2])
    np.testing.assert_allclose(outs[2], _compute([x], _attrs(ops, args, [n]))[0], rtol=1e-5)


def _stored(b: SpecBuilder, t: int, name: str, shape, fmt: str) -> int:
    """Tensor t as `fmt` (a TransData task into a new tensor), or t itself for plain."""
    if fmt == "nchw":
        return t
    s = b.tensor(name, "float32", shape)
    b.tensors[s]["format"] = fmt
    b.kernel("TransData", [t], [s], src_format="nchw", dst_format=fmt)
    return s


@pytest.mark.parametrize("fmt,shape,scale_n", [
    ("nhwc", (2, 12, 9, 7), 2),      # 12 channels: periods crossing the 512-float tiles
    ("nhwc", (2, 12, 9, 7), 1),
    ("nhwc", (3, 40, 3, 5, 2), 3),   # 5-D, stored N, D, H, W, C
    ("nChw16c", (2, 32, 6, 5), 2),   # [N, C / 16, 1, 1, 16]: two runs of the stored order
    ("nChw16c", (2, 32, 6, 5), 1),
    ("nChw8c", (3, 24, 4, 9), 3),
    ("nchw", (2, 12, 9, 7), 2),
])
def test_per_channel_operands_against_a_stored_format(isa, fmt, shape, scale_n):
    """MicroNet's dynamic shift-max as one region: max(x * a1 + r * b1, x * a2 + r * b2)
    with per-sample per-channel [N, C, 1, 1] coefficients (or [1, C, 1, 1]) read plain
    against a domain stored NHWC or blocked, between TransData tasks."""
    b = SpecBuilder("shift_max")
    scale = (scale_n, shape[1]) + (1,) * (len(shape) - 2)
    xs = [b.input(n, "float32", shape) for n in ("x", "r")]
    cs = [b.input(n, "float32", scale) for n in ("a1", "b1", "a2", "b2")]
    stored = [_stored(b, t, f"s{k}", shape, fmt) for k, t in enumerate(xs)]
    y = b.tensor("y", "float32", shape)
    if fmt != "nchw":
        b.tensors[y]["format"] = fmt
    ops = ["Mul", "Mul", "Add", "Mul", "Mul", "Add", "Max"]
    args = [0, 2, -1, 1, 3, -1, 6, 7, -1, 0, 4, -1, 1, 5, -1, 9, 10, -1, 8, 11, -1]
    b.kernel("EltwiseGraph", [*stored, *cs], [y], ops=",".join(ops), args=args,
             alphas=[0.0] * 7, betas=[0.0] * 7, results=[12])
    out = y
    if fmt != "nchw":
        out = b.tensor("out", "float32", shape)
        b.kernel("TransData", [y], [out], src_format=fmt, dst_format="nchw")
    b.outputs = [out]
    m = b.load()
    x, r = (RNG.standard_normal(shape).astype(np.float32) for _ in range(2))
    a1, b1, a2, b2 = (RNG.standard_normal(scale).astype(np.float32) for _ in range(4))
    (got,) = m.execute([x, r, a1, b1, a2, b2])
    want = np.maximum(x * a1 + r * b1, x * a2 + r * b2)
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)
    if fmt != "nchw":
        assert m.formats["y"] == fmt


@pytest.mark.parametrize("span,domain", [(3, (700, 3)), (12, (95, 12)), (700, (3, 700)),
                                         (40, (2, 900, 40))])
def test_periodic_inputs_fill_every_tile(isa, span, domain):
    """An input whose one run ends at the last axis is a period of `span` floats repeated
    over the tiles, from any phase (the loader copies its first period, then doubles)."""
    shape = (span,)
    m = rt.Model(rt.Device(), _spec([domain, shape], domain, ["Sub"], [0, 1, -1], [2]))
    x, w = (RNG.standard_normal(s).astype(np.float32) for s in (domain, shape))
    (got,) = m.execute([x, w])
    np.testing.assert_array_equal(got, x - w)


@pytest.mark.parametrize("shape,gates,gate_fmt", [
    ((2, 24, 10, 7), [(2, 24, 10, 1), (2, 24, 1, 7)], "nhwc"),  # coordinate attention
    ((1, 40, 6, 9), [(1, 40, 6, 1), (1, 40, 1, 9)], "nhwc"),
    ((2, 24, 10, 7), [(2, 1, 10, 7), (1, 1, 10, 7)], "nhwc"),   # per-pixel maps, NHWC
    ((2, 24, 10, 7), [(2, 1, 10, 7)], "nchw"),                  # ... and plain: same bytes
    ((2, 12, 3, 5, 4), [(2, 12, 3, 1, 4), (2, 12, 1, 5, 4)], "nhwc"),  # 5-D
    ((2, 32, 6, 5), [(2, 32, 6, 1), (2, 32, 1, 5)], "nChw16c"),  # blocked: [N, C/16, H, 1, 16]
])
def test_broadcasts_stored_in_the_domain_format(isa, shape, gates, gate_fmt):
    """x * sigmoid(g1) * sigmoid(g2) with gates broadcast over some spatial axes, stored as
    the domain is (or a one-channel map plain, its bytes the same): read by runs of the
    stored order, between TransData tasks; results are numpy's."""
    fmt = "nChw16c" if gate_fmt == "nChw16c" else "nhwc"
    b = SpecBuilder("gated")
    names = ["x"] + [f"g{k}" for k in range(len(gates))]
    plain = [b.input(n, "float32", s) for n, s in zip(names, [shape, *gates])]
    stored = [_stored(b, t, f"s{k}", s, fmt if k == 0 else gate_fmt)
              for k, (t, s) in enumerate(zip(plain, [shape, *gates]))]
    y = b.tensor("y", "float32", shape)
    b.tensors[y]["format"] = fmt
    n = len(gates)
    ops, args = [], []
    for k in range(n):  # sigmoid of each gate
        ops.append("Sigmoid")
        args += [1 + k, -1, -1]
    prev = 0
    for k in range(n):  # x * s0 * s1 ...
        ops.append("Mul")
        args += [prev, 1 + n + k, -1]
        prev = 1 + n + n + k
    b.kernel("EltwiseGraph", stored, [y], ops=",".join(ops), args=args,
             alphas=[0.0] * len(ops), betas=[0.0] * len(ops), results=[prev])
    out = b.tensor("out", "float32", shape)
    b.kernel("TransData", [y], [out], src_format=fmt, dst_format="nchw")
    b.outputs = [out]
    m = b.load()
    feeds = [RNG.standard_normal(s).astype(np.float32) for s in [shape, *gates]]
    (got,) = m.execute(feeds)
    want = feeds[0]
    for g in feeds[1:]:
        want = want / (1.0 + np.exp(-g.astype(np.float64)))
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_a_plain_broadcast_against_a_stored_domain_is_refused():
    """[N, C, H, 1] stored plain is not the bytes of its NHWC form: refused at load, named."""
    b = SpecBuilder("gated")
    x = b.input("x", "float32", (2, 8, 4, 5))
    g = b.input("gate", "float32", (2, 8, 4, 1))
    sx = b.tensor("sx", "float32", (2, 8, 4, 5))
    b.tensors[sx]["format"] = "nhwc"
    b.kernel("TransData", [x], [sx], src_format="nchw", dst_format="nhwc")
    y = b.tensor("y", "float32", (2, 8, 4, 5))
    b.tensors[y]["format"] = "nhwc"
    b.kernel("EltwiseGraph", [sx, g], [y], ops="Mul", args=[0, 1, -1], alphas=[0.0],
             betas=[0.0], results=[2])
    out = b.tensor("out", "float32", (2, 8, 4, 5))
    b.kernel("TransData", [y], [out], src_format="nhwc", dst_format="nchw")
    b.outputs = [out]
    with pytest.raises(rt.InvalidArgument, match="input 'gate' .* must have the output's shape"):
        b.load()
