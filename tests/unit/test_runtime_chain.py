"""The runtime's EltwiseChain kernel: one oneDNN primitive with post-ops, checked at load."""

from __future__ import annotations

import numpy as np
import pytest

from graphengine import _runtime as rt

RNG = np.random.default_rng(5)


def _chain_spec(ops, operands, n_operands=1, alphas=None, shape=(2, 3)):
    step = max(256, -(-int(np.prod(shape)) * 4 // 64) * 64)
    spec = {"name": "m", "arena_bytes": step * (n_operands + 2), "num_streams": 1,
            "num_events": 0,
            "tensors": [{"name": f"t{i}", "dtype": "float32", "shape": list(shape),
                         "region": "arena", "offset": step * i} for i in range(n_operands + 2)],
            "tasks": [{"kind": "kernel", "name": "chain", "op": "EltwiseChain", "stream": 0,
                       "inputs": list(range(n_operands + 1)), "outputs": [n_operands + 1],
                       "attrs": {"ops": ops, "operands": operands,
                                 "alphas": alphas or [0.0] * len(operands),
                                 "betas": [0.0] * len(operands)}}],
            "inputs": list(range(n_operands + 1)), "outputs": [n_operands + 1]}
    return spec


def test_runtime_chain_runs_and_checks_its_spec():
    dev = rt.Device()
    m = rt.Model(dev, _chain_spec("Add,Relu,Mul", [1, -1, 0]))
    x, z = (RNG.standard_normal((2, 3)).astype(np.float32) for _ in range(2))
    (y,) = m.execute([x, z])
    np.testing.assert_allclose(y, np.maximum(x + z, 0) * x, rtol=1e-6)
    bad = [("Add,Cosh", [1, -1], "step 1: unknown op 'Cosh'"),
           ("Add,Relu", [1], "one entry per step"),
           ("Add,Relu", [5, -1], r"operand index 5 out of range \[0, 2\)"),
           ("Relu,Relu", [-1, 1], r"step 1 \(Relu\): takes no operand"),
           ("Mul", [-1], r"step 0 \(Mul\): needs an operand")]
    for ops, operands, message in bad:
        with pytest.raises(rt.InvalidArgument, match=r"node 'chain' \(EltwiseChain\): .*"
                                                     + message):
            rt.Model(dev, _chain_spec(ops, operands, alphas=[0.0] * len(operands)))
    wrong = _chain_spec("Add", [1])
    wrong["tensors"][1]["shape"] = [3, 2]
    with pytest.raises(rt.InvalidArgument, match="must have the output's shape"):
        rt.Model(dev, wrong)


@pytest.mark.parametrize("channel_shape", [(4, 1), (1, 4, 1)])
def test_runtime_chain_takes_per_channel_operands_of_a_plain_output(channel_shape):
    """A GroupNorm's affine and GELU after its normalization: [C, 1] operands of [N, C, L]
    broadcast along axis 1, beside a full-size and a scalar operand."""
    dev = rt.Device()
    spec = _chain_spec("Mul,Add,Gelu,Add,Mul", [1, 2, -1, 3, 4], n_operands=4, shape=(2, 4, 37))
    spec["tensors"][1]["shape"] = list(channel_shape)
    spec["tensors"][2]["shape"] = list(channel_shape)
    spec["tensors"][4]["shape"] = []
    m = rt.Model(dev, spec)
    x, full = (RNG.standard_normal((2, 4, 37)).astype(np.float32) for _ in range(2))
    w, b = (RNG.standard_normal(channel_shape).astype(np.float32) for _ in range(2))
    k = np.float32(0.75)
    (y,) = m.execute([x, w, b, full, np.asarray(k)])
    from math import erf
    h = (x * w + b).astype(np.float64)
    gelu = 0.5 * h * (1 + np.vectorize(erf)(h / np.sqrt(2)))
    np.testing.assert_allclose(y, (gelu + full) * k, rtol=1e-5, atol=1e-5)
    assert m.profile()[0]["impl"].startswith("oneDNN jit"), m.profile()  # never ref:any
    # not per-channel: another count, a channel axis other than 1, or a stored format
    for shape in [(3, 1), (1, 37), (2, 1, 1)]:
        bad = _chain_spec("Mul", [1], shape=(2, 4, 37))
        bad["tensors"][1]["shape"] = list(shape)
        with pytest.raises(rt.InvalidArgument, match="one per channel"):
            rt.Model(dev, bad)
    nhwc = _chain_spec("Mul", [1], shape=(2, 4, 3, 5))
    nhwc["tensors"][1]["shape"] = [1, 4, 1, 1]
    for t in (0, 2):
        nhwc["tensors"][t]["format"] = "nhwc"
    with pytest.raises(rt.InvalidArgument):
        rt.Model(dev, nhwc)


def test_runtime_chain_with_scalar_operand_and_empty_tensors():
    dev = rt.Device()
    spec = _chain_spec("Mul,Sigmoid,Sub", [1, -1, 0])
    spec["tensors"][1]["shape"] = []  # one element: a per-tensor operand
    m = rt.Model(dev, spec)
    x = RNG.standard_normal((2, 3)).astype(np.float32)
    k = np.float32(1.7)
    (y,) = m.execute([x, np.asarray(k)])
    np.testing.assert_allclose(y, 1 / (1 + np.exp(-x * k)) - x, rtol=1e-5, atol=1e-6)
    empty = rt.Model(dev, _chain_spec("Add,Relu", [1, -1], shape=(0, 3)))
    (y,) = empty.execute([np.zeros((0, 3), np.float32)] * 2)
    assert y.shape == (0, 3)


@pytest.mark.parametrize("lead", ["Relu", "Sigmoid", "Exp", "Sqrt", "Neg", "HardSwish"])
def test_a_unary_led_chain_runs_jit_and_matches_its_steps_alone(lead):
    """oneDNN has no jit eltwise with post-ops: a chain led by a unary step is led by an
    exact `x * 1`, so it runs the jit binary (not `ref:any`, several times slower), and gives
    each element what the step's own kernel gives, special values included."""
    dev = rt.Device()
    chain = rt.Model(dev, _chain_spec(f"{lead},Mul", [-1, 1], alphas=[0.0, 0.0],
                                      shape=(4, 1024)))
    (impl,) = {t["impl"] for t in chain.profile()}
    assert "ref" not in impl and "jit" in impl, impl
    alone = {"name": "m", "arena_bytes": 65536, "num_streams": 1, "num_events": 0,
             "tensors": [{"name": f"t{i}", "dtype": "float32", "shape": [4, 1024],
                          "region": "arena", "offset": 16384 * i} for i in range(2)],
             "tasks": [{"kind": "kernel", "name": "u", "op": lead, "stream": 0,
                        "inputs": [0], "outputs": [1], "attrs": {}}],
             "inputs": [0], "outputs": [1]}
    single = rt.Model(dev, alone)
    x = RNG.standard_normal((4, 1024)).astype(np.float32) * 4
    x[0, :6] = [np.nan, np.inf, -np.inf, 0.0, -0.0, 1e-30]
    two = np.full((4, 1024), 2, np.float32)
    (y,) = chain.execute([x, two])
    (u,) = single.execute([x])
    np.testing.assert_array_equal(y, u * 2)


def _one_task(op, shapes, out_shape, attrs=None, consts=None):
    """A one-task model: inputs of `shapes`, one float32 output."""
    tensors, offset = [], 0
    for i, shape in enumerate([*shapes, out_shape]):
        tensors.append({"name": f"t{i}", "dtype": "float32", "shape": list(shape),
                        "region": "arena", "offset": offset})
        offset += max(64, -(-int(np.prod(shape)) * 4 // 64) * 64)
    n = len(shapes)
    return {"name": "m", "arena_bytes": offset, "num_streams": 1, "num_events": 0,
            "tensors": tensors,
            "tasks": [{"kind": "kernel", "name": "k", "op": op, "stream": 0,
                       "inputs": list(range(n)), "outputs": [n], "attrs": attrs or {}}],
            "inputs": list(range(n)), "outputs": [n]}


@pytest.mark.parametrize("rows", [16, 4096])  # below and above the loops' size
def test_small_elementwise_and_reductions_skip_onednn_and_agree_with_large(rows):
    """A oneDNN primitive's execute costs ~2 us before any work: small plain Mul/Add/Sub/Div,
    reductions and Neg/Abs/Sqrt run on the runtime's loops (a decoder of hidden 64 has dozens
    per token), larger ones on oneDNN, except sums and means over short trailing rows, the
    loop's at any size; both give numpy's answer."""
    dev = rt.Device()
    x = RNG.standard_normal((rows, 64)).astype(np.float32)
    x[0, :3] = [np.nan, np.inf, -np.inf]
    s = (RNG.random((rows, 1)) + 0.5).astype(np.float32)
    cases = [
        ("Mul", [x, s], {}, x * s),
        ("Div", [x, s], {}, x / s),
        ("ReduceMean", [x], {"axes": [1], "keepdims": 1}, x.mean(axis=1, keepdims=True)),
        ("ReduceSum", [x], {"axes": [1], "keepdims": 1}, x.sum(axis=1, keepdims=True)),
        ("Neg", [x], {}, -x),
        ("Abs", [x], {}, np.abs(x)),
        ("Sqrt", [np.abs(x)], {}, np.sqrt(np.abs(x))),
    ]
    for op, ins, attrs, want in cases:
        m = rt.Model(dev, _one_task(op, [a.shape for a in ins], want.shape, attrs))
        (impl,) = {t["impl"] for t in m.profile()}
        # a reduction of rows of 64 (at most 1024) is the loop's at any size
        onednn = rows > 16 and not op.startswith("Reduce")
        assert ("oneDNN" in impl) == onednn, (op, rows, impl)
        with np.errstate(invalid="ignore"):
            (got,) = m.execute(ins)
        np.testing.assert_allclose(got, want, rtol=2e-6, atol=1e-5, equal_nan=True,
                                   err_msg=op)


@pytest.mark.parametrize("op, attrs", [("Relu", {}), ("LeakyRelu", {"alpha": 0.1}),
                                       ("LeakyRelu", {"alpha": -0.5})])
def test_small_relus_give_onednn_s_bits(op, attrs):
    """Small Relu / LeakyRelu run on the loops and give what oneDNN's relu gives, bit for
    bit, special values included (a Relu of NaN or -inf is 0 there, not numpy's NaN)."""
    dev = rt.Device()
    x = RNG.standard_normal(20000).astype(np.float32) * 3
    x[:8] = [np.nan, np.inf, -np.inf, 0.0, -0.0, 1e-45, -1e-45, -3.0]
    small = rt.Model(dev, _one_task(op, [(64,)], (64,), attrs))
    large = rt.Model(dev, _one_task(op, [(20000,)], (20000,), attrs))
    assert "oneDNN" not in small.profile()[0]["impl"]
    assert "oneDNN" in large.profile()[0]["impl"]
    (a,) = small.execute([x[:64].copy()])
    (b,) = large.execute([x])
    np.testing.assert_array_equal(a.view(np.uint32), b[:64].view(np.uint32))


@pytest.mark.parametrize("rows, width", [(1, 96), (3, 257), (1, 4096), (2, 4096), (64, 1024)])
def test_small_layer_norms_run_on_rows_and_agree_with_onednn_s(rows, width):
    """LayerNormalization of at most 4096 elements on the runtime's rows (oneDNN's call
    cost more than a keyword spotter's whole layer), larger ones on oneDNN; both agree with
    numpy's float64 answer."""
    dev = rt.Device()
    x = (RNG.standard_normal((rows, width)) * 3 + 1).astype(np.float32)
    g = RNG.standard_normal(width).astype(np.float32)
    b = RNG.standard_normal(width).astype(np.float32)
    m = rt.Model(dev, _one_task("LayerNormalization", [x.shape, g.shape, b.shape], x.shape,
                                {"axis": -1, "epsilon": 1e-5}))
    assert ("oneDNN" in m.profile()[0]["impl"]) == (x.size > 4096)
    (got,) = m.execute([x, g, b])
    x64 = x.astype(np.float64)
    mean = x64.mean(axis=1, keepdims=True)
    want = (x64 - mean) / np.sqrt(x64.var(axis=1, keepdims=True) + 1e-5) * g + b
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=2e-5)


@pytest.mark.parametrize("shape, axis", [((1, 96), -1), ((3, 257), -1), ((8, 32, 128), -1),
                                         ((64, 1024), -1), ((2, 5, 8), 1), ((4, 3), 0)])
def test_rms_norm_rows_agree_with_numpy_in_float64(shape, axis):
    """RMSNormalization over the trailing axes from `axis`, on one thread for a small input
    and split over the rows for a large one (8 x 32 x 128 and 64 x 1024 are past the
    small-op size), equal to numpy's float64 answer."""
    dev = rt.Device()
    x = (RNG.standard_normal(shape) * 3 + 0.5).astype(np.float32)
    g = RNG.standard_normal(shape[axis:]).astype(np.float32)
    m = rt.Model(dev, _one_task("RMSNormalization", [x.shape, g.shape], x.shape,
                                {"axis": axis, "epsilon": 1e-6}))
    (got,) = m.execute([x, g])
    x64 = x.astype(np.float64)
    axes = tuple(range(axis % len(shape), len(shape)))
    want = x64 / np.sqrt((x64 * x64).mean(axis=axes, keepdims=True) + 1e-6) * g
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=2e-5)


def test_rms_norm_refuses_a_scale_of_another_size_and_a_bad_epsilon():
    dev = rt.Device()
    with pytest.raises(rt.InvalidArgument, match="Scale shape"):
        rt.Model(dev, _one_task("RMSNormalization", [(2, 8), (4,)], (2, 8), {"axis": -1}))
    with pytest.raises(rt.InvalidArgument, match="epsilon"):
        rt.Model(dev, _one_task("RMSNormalization", [(2, 8), (8,)], (2, 8),
                                {"axis": -1, "epsilon": -1.0}))
