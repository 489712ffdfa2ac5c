"""The native FusedAttention kernel (runtime_ext/src/host/kernels_attention.cc) against numpy:
strided Q/K/V and output layouts, mask broadcasts, load-time validation, kernel_info."""

from __future__ import annotations

import numpy as np
import pytest

from graphengine import _runtime as rt
from tests.unit.test_runtime import DEVICE, SpecBuilder, run_op

RNG = np.random.default_rng(11)
BSHD = [0, 2, 1, 3]  # [B,S,H,D] storage seen as [B,H,S,D]; also its own inverse
K_BSHD = [0, 2, 3, 1]  # [B,S,H,D] storage seen as K^T [B,H,D,S]


def randn(*shape) -> np.ndarray:
    return RNG.standard_normal(shape).astype(np.float32)


def reference(q, k, v, mask, scale, q_perm, k_perm, v_perm, out_perm) -> np.ndarray:
    s = np.transpose(q, q_perm).astype(np.float64) @ np.transpose(k, k_perm) * scale
    if mask is not None:
        s = s + mask
    p = np.exp(s - s.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    return np.transpose(p @ np.transpose(v, v_perm), out_perm).astype(np.float32)


def run_attention(q, k, v, mask=None, scale=0.3, q_perm=BSHD, k_perm=K_BSHD, v_perm=BSHD,
                  out_perm=BSHD):
    o = (np.transpose(q, q_perm).shape[:3]) + (np.transpose(v, v_perm).shape[3],)
    y_shape = tuple(o[i] for i in out_perm)
    ins = [q, k, v] + ([mask] if mask is not None else [])
    got = run_op("FusedAttention", ins, y_shape, scale=scale, q_perm=q_perm, k_perm=k_perm,
                 v_perm=v_perm, out_perm=out_perm)
    want = reference(q, k, v, mask, scale, q_perm, k_perm, v_perm, out_perm)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
    return got


@pytest.mark.parametrize("b,sq,sk,h,d,dv", [
    (1, 128, 128, 4, 64, 64), (2, 7, 7, 3, 5, 5), (3, 1, 9, 2, 4, 6), (1, 17, 3, 1, 1, 2)])
@pytest.mark.parametrize("mask", [None, "b11k", "11qk", "bhqk", "k", "scalar", "1h11"])
def test_matches_numpy_for_shapes_and_mask_broadcasts(b, sq, sk, h, d, dv, mask):
    q, k, v = randn(b, sq, h, d), randn(b, sk, h, d), randn(b, sk, h, dv)
    shapes = {"b11k": (b, 1, 1, sk), "11qk": (1, 1, sq, sk), "bhqk": (b, h, sq, sk),
              "k": (sk,), "scalar": (), "1h11": (1, h, 1, 1)}
    m = None if mask is None else randn(*shapes[mask])
    y = run_attention(q, k, v, m)
    assert y.shape == (b, sq, h, dv)


def test_any_operand_layout():
    # Layouts oneDNN cannot read strided as they are (the kernel copies those dense first):
    # Q stored [B,D,S,H], K stored [H,B,S,D] (its K^T view has a strided innermost dim),
    # V already [B,H,S,Dv], Y written as [B,H,Dv,S].
    b, s, h, d = 2, 6, 3, 4
    q, k, v = randn(b, d, s, h), randn(h, b, s, d), randn(b, h, s, d)
    y = run_attention(q, k, v, randn(1, 1, s, s), scale=1.0, q_perm=[0, 3, 2, 1],
                      k_perm=[1, 0, 3, 2], v_perm=[0, 1, 2, 3], out_perm=[0, 1, 3, 2])
    assert y.shape == (b, h, d, s)


def test_constant_key_and_mask_and_extreme_mask_values():
    b, s, h, d = 1, 5, 2, 3
    q, v = randn(b, s, h, d), randn(b, s, h, d)
    k = randn(b, s, h, d)
    mask = np.zeros((b, 1, 1, s), np.float32)
    mask[..., -2:] = -1e9  # padded keys: no weight at all
    builder = SpecBuilder("attn")
    qi, vi = builder.input("q", "float32", q.shape), builder.input("v", "float32", v.shape)
    ki, mi = builder.const("k", k), builder.const("mask", mask)
    yi = builder.tensor("y", "float32", (b, s, h, d))
    builder.outputs = [yi]
    builder.kernel("FusedAttention", [qi, ki, vi, mi], [yi], scale=0.5, q_perm=BSHD,
                   k_perm=K_BSHD, v_perm=BSHD, out_perm=BSHD)
    (y,) = builder.load().execute([q, v])
    np.testing.assert_allclose(y, reference(q, k, v, mask, 0.5, BSHD, K_BSHD, BSHD, BSHD),
                               rtol=1e-4, atol=1e-5)
    # the result only depends on the first s-2 keys
    v2 = v.copy()
    v2[:, -2:] = 100.0
    (y2,) = builder.load().execute([q, v2])
    np.testing.assert_allclose(y2, y, rtol=1e-5, atol=1e-6)


def test_instances_run_concurrently_with_their_own_scores():
    b, s, h, d = 2, 32, 4, 8
    builder = SpecBuilder("attn")
    ins = [builder.input(n, "float32", (b, s, h, d)) for n in "qkv"]
    yi = builder.tensor("y", "float32", (b, s, h, d))
    builder.outputs = [yi]
    builder.kernel("FusedAttention", ins, [yi], scale=0.35, q_perm=BSHD, k_perm=K_BSHD,
                   v_perm=BSHD, out_perm=BSHD)
    model = rt.Model(DEVICE, builder.spec(), 3)
    feeds = [[randn(b, s, h, d) for _ in range(3)] for _ in range(6)]
    import concurrent.futures

    with concurrent.futures.ThreadPoolExecutor(6) as pool:
        results = list(pool.map(lambda f: model.execute(f)[0], feeds))
    for f, y in zip(feeds, results, strict=True):
        np.testing.assert_allclose(y, reference(*f, None, 0.35, BSHD, K_BSHD, BSHD, BSHD),
                                   rtol=1e-4, atol=1e-5)
    assert model.stats()["workspace_bytes"] >= 3 * b * h * s * s * 4  # scores per instance


# ---- load-time validation ----------------------------------------------------------------
def load_attention(shapes, out_shape, name="attn", dtypes=None, **attrs):
    builder = SpecBuilder("bad")
    dtypes = dtypes or ["float32"] * len(shapes)
    ins = [builder.input(f"x{i}", dt, s) for i, (s, dt) in enumerate(zip(shapes, dtypes))]
    yi = builder.tensor("y", "float32", out_shape)
    builder.outputs = [yi]
    builder.kernel("FusedAttention", ins, [yi], name=name, **attrs)
    return builder.load()


GOOD = {"scale": 0.5, "q_perm": BSHD, "k_perm": K_BSHD, "v_perm": BSHD, "out_perm": BSHD}
QKV = [(1, 4, 2, 3)] * 3


@pytest.mark.parametrize("attrs,message", [
    ({k: v for k, v in GOOD.items() if k != "scale"}, "attribute 'scale' is required"),
    ({**GOOD, "scale": float("inf")}, "attribute 'scale' must be a finite"),
    ({**GOOD, "q_perm": [0, 2, 1]}, r"attribute 'q_perm' must list 4 axes, got \[0,2,1\]"),
    ({**GOOD, "k_perm": [0, 2, 3, 3]},
     r"attribute 'k_perm' must be a permutation of 0..3, got \[0,2,3,3\]"),
    ({**GOOD, "v_perm": [0, 1, 2, 7]}, "attribute 'v_perm' must be a permutation"),
    ({**GOOD, "out_perm": "0213"}, "attribute 'out_perm' must be a list of ints"),
])
def test_bad_attributes_fail_to_load_naming_the_node(attrs, message):
    with pytest.raises(rt.InvalidArgument, match=r"node 'attn' \(FusedAttention\): " + message):
        load_attention(QKV, (1, 4, 2, 3), **attrs)


@pytest.mark.parametrize("shapes,out_shape,dtypes,message", [
    ([(1, 4, 2, 3), (1, 4, 2, 5), (1, 4, 2, 3)], (1, 4, 2, 3), None,
     r"K seen through k_perm is \[1,2,5,4\]"),
    ([(1, 4, 2, 3), (1, 4, 2, 3), (1, 6, 2, 3)], (1, 4, 2, 3), None,
     r"V seen through v_perm is \[1,2,6,3\] but must be \[B,Hkv,Sk,Dv\] = \[1,2,4,Dv\]"),
    # grouped-query attention: K's heads (2) must divide Q's (3), V's equal K's
    ([(1, 4, 3, 3), (1, 4, 2, 3), (1, 4, 2, 3)], (1, 4, 3, 3), None,
     r"K seen through k_perm is \[1,2,3,4\] .* with Hkv dividing H = 3"),
    ([(1, 4, 4, 3), (1, 4, 2, 3), (1, 4, 1, 3)], (1, 4, 4, 3), None,
     r"V seen through v_perm is \[1,1,4,3\] but must be \[B,Hkv,Sk,Dv\] = \[1,2,4,Dv\]"),
    ([(1, 4, 6), (1, 4, 2, 3), (1, 4, 2, 3)], (1, 4, 2, 3), None, "Q must have rank 4"),
    (QKV, (1, 4, 2, 3), ["float32", "float64", "float32"], "K 'x1' must be float32"),
    (QKV + [(1, 3, 4, 4)], (1, 4, 2, 3), None,
     r"mask shape \[1,3,4,4\] does not broadcast to the scores \[1,2,4,4\]"),
    (QKV + [(3, 1, 1, 1, 4)], (1, 4, 2, 3), None, "mask shape .* does not broadcast"),
    (QKV, (1, 2, 4, 3), None, r"output shape \[1,2,4,3\] does not match computed \[1,4,2,3\]"),
    ([(1, 0, 2, 3)] * 3, (1, 0, 2, 3), None, "empty tensors are not supported"),
    ([(1, 4, 2, 3)] * 2, (1, 4, 2, 3), None, "expected 3 to 4 inputs, got 2"),
])
def test_bad_shapes_fail_to_load_naming_the_node(shapes, out_shape, dtypes, message):
    with pytest.raises(rt.InvalidArgument, match=r"node 'attn' \(FusedAttention\): " + message):
        load_attention(shapes, out_shape, dtypes=dtypes, **GOOD)


def test_huge_scores_are_refused():
    big = (1, 1 << 18, 1, 1)
    with pytest.raises(rt.InvalidArgument, match="attention scores .* are too large"):
        load_attention([big, big, big], big, **GOOD)


# ---- kernel_info -------------------------------------------------------------------------
def test_kernel_info_checks_like_load():
    ki = rt.kernel_info
    info = ki("FusedAttention", ["float32"] * 4, [[2, 8, 4, 16]] * 3 + [[2, 1, 1, 8]], GOOD)
    assert info["supported"] and info["formats"] == ["nchw"], info
    bhsd = ki("FusedAttention", ["float32"] * 3, [[2, 4, 8, 16]] * 3,
              {"scale": 1.0, "k_perm": [0, 1, 3, 2]})
    assert bhsd["supported"], bhsd
    no_scale = ki("FusedAttention", ["float32"] * 3, [[2, 8, 4, 16]] * 3, {})
    assert not no_scale["supported"] and "'scale' is required" in no_scale["reason"]
    bad_mask = ki("FusedAttention", ["float32"] * 4, [[2, 8, 4, 16]] * 3 + [[3, 1, 1, 8]], GOOD)
    assert not bad_mask["supported"] and "mask shape [3,1,1,8]" in bad_mask["reason"]
    f64 = ki("FusedAttention", ["float64"] * 3, [[2, 8, 4, 16]] * 3, GOOD)
    assert not f64["supported"] and "float32" in f64["reason"]
    rank3 = ki("FusedAttention", ["float32"] * 3, [[8, 4, 16]] * 3, GOOD)
    assert not rank3["supported"] and "rank 4" in rank3["reason"]
    assert "FusedAttention" in rt.supported_ops()
