"""Transformer ops: Attention, RotaryEmbedding, SwiGLU, LinearAttention,
CausalConvWithState, and FusedAttention (made by the compiler's attention fusion)."""

from __future__ import annotations

from typing import Any

import numpy as np

from ..ir import Dim, Node, TensorMeta
from . import attrs as A
from .device_helpers import kernel, reject
from .kernel_utils import is_bfloat16, onnx_np_dtype, opt, widen
from .registry import DeviceKernel, OpSchema, register, shape_error
from .shape_helpers import FLOATS, broadcast, check_dtype, meta_in, out, shape_in, sym


def _work_dtype(x: np.ndarray) -> np.dtype:
    """Compute in the input's float type like the ONNX reference; bfloat16 in float32."""
    return np.dtype(np.float32) if is_bfloat16(x.dtype) else x.dtype


def _heads(x: np.ndarray, n: int) -> np.ndarray:
    b, t, hd = x.shape
    return x.reshape(b, t, n, hd // n).transpose(0, 2, 1, 3)


# ---- Attention ------------------------------------------------------------------------------
def visible_keys(q_len: int, kv_len: int, offset: Any, a: dict[str, Any]
                 ) -> np.ndarray | None:
    """Causal/window visibility (q, kv) or (batch, 1, q, kv); None when unrestricted. `a`:
    is_causal, left_window_size, right_window_size (Attention's attributes, defaults filled
    in); prepare/attention_op.py builds the device steps' bias from it too."""
    left, right = a["left_window_size"], a["right_window_size"]
    if not a["is_causal"] and left < 0 and right < 0:
        return None
    i = np.arange(q_len).reshape(q_len, 1)
    j = np.arange(kv_len).reshape(1, kv_len)
    off = np.reshape(offset, (-1, 1, 1, 1)) if np.ndim(offset) else offset
    diff = (i + off) - j
    ok = np.ones(np.shape(diff), dtype=bool)
    if a["is_causal"]:
        ok &= diff >= 0
    if left >= 0:
        ok &= diff <= left
    if right >= 0:
        ok &= -diff <= right
    return ok


def attention(ins: list[Any], a: dict[str, Any]) -> list[np.ndarray]:
    q, k, v = ins[:3]
    def get(i: int) -> Any:
        return opt(ins, i)

    mask, past_k, past_v, nonpad = get(3), get(4), get(5), get(6)
    out_dtype = q.dtype
    wd = _work_dtype(q)
    three_d = q.ndim == 3
    if three_d:
        q, k, v = (_heads(x, n) for x, n in ((q, a["q_num_heads"]), (k, a["kv_num_heads"]),
                                            (v, a["kv_num_heads"])))
    q, k, v = (x.astype(wd) for x in (q, k, v))
    if past_k is not None:
        k = np.concatenate([past_k.astype(wd), k], axis=2)
        v = np.concatenate([past_v.astype(wd), v], axis=2)
    present_k, present_v = k, v
    b, hq, q_len, d = q.shape
    kv_len = k.shape[2]
    scale = a.get("scale")
    scale = 1 / np.sqrt(d) if scale is None else scale
    root = wd.type(np.sqrt(scale))

    bias = np.zeros((q_len, kv_len), dtype=wd)
    if mask is not None:
        pad = kv_len - mask.shape[-1]
        if mask.dtype == np.bool_:
            if pad > 0:
                mask = np.pad(mask, [(0, 0)] * (mask.ndim - 1) + [(0, pad)],
                              constant_values=False)
            bias = bias + np.where(mask, wd.type(0), wd.type(-np.inf))
        else:
            m = mask.astype(wd)
            if pad > 0:
                m = np.pad(m, [(0, 0)] * (m.ndim - 1) + [(0, pad)], constant_values=-np.inf)
            bias = bias + m
    if past_k is not None:
        offset: Any = past_k.shape[2]
    elif nonpad is not None:
        offset = np.asarray(nonpad).reshape(-1).astype(np.int64) - q_len
    else:
        offset = 0
    ok = visible_keys(q_len, kv_len, offset, a)
    if ok is not None:
        bias = bias + np.where(ok, wd.type(0), wd.type(-np.inf))
    if nonpad is not None:
        valid = np.arange(kv_len) < np.asarray(nonpad).reshape(-1, 1)
        bias = bias + np.where(valid, 0, -np.inf).astype(wd).reshape(-1, 1, 1, kv_len)

    hk = k.shape[1]
    if hq != hk:
        k, v = np.repeat(k, hq // hk, axis=1), np.repeat(v, hq // hk, axis=1)
    qk = np.matmul(q * root, np.swapaxes(k * root, -1, -2))
    cap = a["softcap"]
    if cap > 0:
        qk = (np.tanh(qk / wd.type(cap)) * wd.type(cap)).astype(wd)
    scores = qk + bias
    mode = a["qk_matmul_output_mode"]
    qk_out = scores if mode == 2 else qk
    prec = a.get("softmax_precision")
    s = scores.astype(onnx_np_dtype(prec)) if prec else scores
    top = np.max(s, axis=-1, keepdims=True)
    e = np.exp(s - np.where(np.isneginf(top), 0, top))
    total = np.sum(e, axis=-1, keepdims=True)
    probs = e / np.where(total == 0, 1, total)
    dead = np.isneginf(np.max(bias, axis=-1, keepdims=True))
    probs = np.where(dead, 0, probs)
    if mode == 3:
        qk_out = probs
    y = np.matmul(probs.astype(wd), v)
    if three_d:
        y = y.transpose(0, 2, 1, 3).reshape(b, q_len, -1)
    return [y.astype(out_dtype), present_k.astype(out_dtype), present_v.astype(out_dtype),
            np.broadcast_to(qk_out, (b, hq, q_len, kv_len)).astype(out_dtype)]


def _attention_infer(node: Node, a: dict[str, Any]) -> list[TensorMeta]:
    dt = check_dtype(node, 0, FLOATS, "Q")
    qs, ks, vs = (shape_in(node, i) for i in range(3))
    if qs is None or ks is None or vs is None:
        return [out(dt, None)] * 4
    if not len(qs) == len(ks) == len(vs) or len(qs) not in (3, 4):
        raise shape_error(node, "Q, K and V must all be 3-D or all be 4-D")
    past = shape_in(node, 4)
    past_len: Dim = past[2] if past is not None else 0
    if len(qs) == 4:
        b, hq, sq = qs[0], qs[1], qs[2]
        hk, skv, dk, dv = ks[1], ks[2], ks[3], vs[3]
    else:
        if a.get("q_num_heads") is None or a.get("kv_num_heads") is None:
            raise shape_error(node, "3-D inputs need q_num_heads and kv_num_heads")
        b, sq, hq, hk, skv = qs[0], qs[1], a["q_num_heads"], a["kv_num_heads"], ks[1]
        dk = ks[2] // hk if isinstance(ks[2], int) else sym(node, "dk")
        dv = vs[2] // hk if isinstance(vs[2], int) else sym(node, "dv")
    total = skv + past_len if isinstance(skv, int) and isinstance(past_len, int) \
        else sym(node, "total")
    y = (b, hq, sq, dv) if len(qs) == 4 else (
        b, sq, hq * dv if isinstance(hq, int) and isinstance(dv, int) else sym(node, "h"))
    return [out(dt, y), out(dt, (b, hk, total, dk)), out(dt, (b, hk, total, dv)),
            out(dt, (b, hq, sq, total))]


register(OpSchema("Attention", 3, 7, _attention_infer, attention, max_outputs=4, attrs={
    "is_causal": A.i(0), "kv_num_heads": A.i(), "q_num_heads": A.i(),
    "qk_matmul_output_mode": A.i(0), "scale": A.f(), "softcap": A.f(0.0),
    "softmax_precision": A.i(), "left_window_size": A.i(-1), "right_window_size": A.i(-1)}))


# ---- RotaryEmbedding ------------------------------------------------------------------------
def _rotary(ins: list[Any], a: dict[str, Any]) -> list[np.ndarray]:
    x, cos, sin = ins[:3]
    pos = ins[3] if len(ins) > 3 else None
    shape = x.shape
    t = np.transpose(x, (0, 2, 1, 3)) if x.ndim == 4 else x.reshape(
        shape[0], shape[1], a["num_heads"], -1)
    d = t.shape[3]
    rd = a["rotary_embedding_dim"] or d
    if pos is not None:
        cos, sin = cos[pos], sin[pos]
    cos, sin = cos[:, :, None, :], sin[:, :, None, :]
    rot, keep = t[..., :rd], t[..., rd:]
    if a["interleaved"]:
        x1, x2 = rot[..., 0::2], rot[..., 1::2]
    else:
        x1, x2 = rot[..., : rd // 2], rot[..., rd // 2:]
    real, imag = cos * x1 - sin * x2, sin * x1 + cos * x2
    if a["interleaved"]:
        rot = np.stack([real, imag], axis=-1).reshape(rot.shape)
    else:
        rot = np.concatenate([real, imag], axis=-1)
    y = np.concatenate([rot, keep], axis=-1).astype(x.dtype)
    return [y.reshape(shape) if x.ndim == 3 else np.transpose(y, (0, 2, 1, 3))]


register(OpSchema("RotaryEmbedding", 3, 4,
                  lambda node, a: [out(meta_in(node, 0).dtype, shape_in(node, 0))], _rotary,
                  attrs={"interleaved": A.i(0), "num_heads": A.i(),
                         "rotary_embedding_dim": A.i(0)}))


# ---- SwiGLU ---------------------------------------------------------------------------------
def _swiglu_infer(node: Node, a: dict[str, Any]) -> list[TensorMeta]:
    dt = check_dtype(node, 0, FLOATS, "A")
    sa, sb = shape_in(node, 0), shape_in(node, 1)
    if sa is not None and sb is not None and len(sa) != len(sb):
        raise shape_error(node, f"A {list(sa)} and B {list(sb)} must have identical shapes")
    return [out(dt, sa)]


def _swiglu(ins: list[Any], a: dict[str, Any]) -> list[np.ndarray]:
    x, g = ins
    wd = _work_dtype(x)
    xa = x.astype(wd)
    swish = xa * (1 / (1 + np.exp(-wd.type(a["alpha"]) * xa))).astype(wd)
    return [(swish * g.astype(wd)).astype(x.dtype)]


register(OpSchema("SwiGLU", 2, 2, _swiglu_infer, _swiglu, attrs={"alpha": A.f(1.0)}))


# ---- LinearAttention ----------------------------------------------------------------------
def _linear_attention(ins: list[Any], a: dict[str, Any]) -> list[np.ndarray]:
    q, k, v = ins[:3]
    def get(i: int) -> Any:
        return opt(ins, i)

    past, decay, beta = get(3), get(4), get(5)
    hq, hk = a["q_num_heads"], a["kv_num_heads"]
    rule = a["update_rule"]
    b, t, _ = q.shape
    dk, dv = q.shape[-1] // hq, v.shape[-1] // hk
    q4, k4, v4 = (_heads(x, n).astype(np.float32) for x, n in ((q, hq), (k, hk), (v, hk)))
    if decay is not None:
        decay4 = (decay.reshape(b, t, hk, 1).transpose(0, 2, 1, 3) if decay.shape[-1] == hk
                  else _heads(decay, hk)).astype(np.float32)
    if beta is not None:
        beta4 = beta.reshape(b, t, beta.shape[-1], 1).transpose(0, 2, 1, 3).astype(np.float32)
    state = (past.astype(np.float32).copy() if past is not None
             else np.zeros((b, hk, dk, dv), np.float32))
    scale = a["scale"] or 1.0 / np.sqrt(dk)
    outs = np.zeros((b, hq, t, dv), np.float32)
    for i in range(t):
        kt, vt = k4[:, :, i], v4[:, :, i]
        if rule in ("gated", "gated_delta"):
            state = state * np.exp(decay4[:, :, i])[..., None]
        if rule in ("delta", "gated_delta"):
            vt = beta4[:, :, i] * (vt - np.einsum("bhdm,bhd->bhm", state, kt))
        state = state + kt[..., :, None] * vt[..., None, :]
        read = state if hq == hk else np.repeat(state, hq // hk, axis=1)
        outs[:, :, i] = scale * np.einsum("bhd,bhdm->bhm", q4[:, :, i], read)
    y = outs.transpose(0, 2, 1, 3).reshape(b, t, hq * dv).astype(q.dtype)
    return [y, state.astype(past.dtype if past is not None else q.dtype)]


def _linear_attention_infer(node: Node, a: dict[str, Any]) -> list[TensorMeta]:
    dt = check_dtype(node, 0, FLOATS, "query")
    qs, vs = shape_in(node, 0), shape_in(node, 2)
    if qs is None or vs is None:
        return [out(dt, None), out(dt, None)]
    hq, hk = a["q_num_heads"], a["kv_num_heads"]
    dk = qs[2] // hq if isinstance(qs[2], int) else sym(node, "dk")
    dv = vs[2] // hk if isinstance(vs[2], int) else sym(node, "dv")
    hidden = hq * dv if isinstance(dv, int) else sym(node, "h")
    past = meta_in(node, 3)
    return [out(dt, (qs[0], qs[1], hidden)),
            out(past.dtype if past else dt, (qs[0], hk, dk, dv))]


register(OpSchema("LinearAttention", 3, 6, _linear_attention_infer, _linear_attention,
                  max_outputs=2, attrs={
                      "chunk_size": A.i(64), "kv_num_heads": A.i(A.REQUIRED),
                      "q_num_heads": A.i(A.REQUIRED), "scale": A.f(0.0),
                      "update_rule": A.s("gated_delta")}))


# ---- CausalConvWithState -----------------------------------------------------------------
def _causal_conv(ins: list[Any], a: dict[str, Any]) -> list[np.ndarray]:
    x, w = ins[0], ins[1]
    def get(i: int) -> Any:
        return opt(ins, i)

    bias, past = get(2), get(3)
    b, c, _ = x.shape
    k = w.shape[2]
    pad = np.zeros((b, c, k - 1), x.dtype) if past is None else past
    full = np.concatenate([pad, x], axis=2)
    wide = full.astype(np.float64)
    n = x.shape[2]
    y = sum(wide[:, :, j:j + n] * w[None, :, 0, j:j + 1].astype(np.float64) for j in range(k))
    if bias is not None:
        y = y + bias.astype(np.float64)[None, :, None]
    y = np.asarray(y).astype(x.dtype)
    if a["activation"] in ("silu", "swish"):
        y32 = y.astype(np.float32)
        y = (y32 / (1 + np.exp(-y32))).astype(x.dtype)
    return [y, full[:, :, full.shape[2] - (k - 1):]]


def _causal_conv_infer(node: Node, a: dict[str, Any]) -> list[TensorMeta]:
    dt = check_dtype(node, 0, FLOATS, "input")
    xs, ws = shape_in(node, 0), shape_in(node, 1)
    if xs is None or ws is None:
        return [out(dt, xs), out(dt, None)]
    state = ws[2] - 1 if isinstance(ws[2], int) else sym(node, "k")
    return [out(dt, xs), out(dt, (xs[0], xs[1], state))]


register(OpSchema("CausalConvWithState", 2, 4, _causal_conv_infer, _causal_conv,
                  max_outputs=2, attrs={"activation": A.s("none")}))


# ---- FusedAttention -------------------------------------------------------------------------
# Made by engine/optimize/fusion/attention.py from MatMul, scale, mask Add, Softmax, MatMul and
# the Transposes around them; runs as one native kernel (runtime_ext/src/host/kernels_attention.cc).
# Q, K, V are read as stored; each perm is a Transpose the fusion absorbed (identity if none):
#   Y = transpose(softmax(scale * Q' @ K' + mask, axis=-1) @ V', out_perm)
# with Q' = transpose(Q, q_perm) [B,H,Sq,D], K' = transpose(K, k_perm) [B,Hkv,D,Sk] and
# V' = transpose(V, v_perm) [B,Hkv,Sk,Dv]; the optional mask broadcasts to [B,H,Sq,Sk].
# Grouped-query attention: Hkv may divide H, query head h reading key/value head h // (H/Hkv)
# (the repeat_kv the fusion absorbed). With `nan_to_zero` a NaN probability is 0 (torch's
# export of scaled_dot_product_attention: Where(IsNaN(P), 0, P), a row that sees no key).
IDENTITY4 = (0, 1, 2, 3)
_PERMS = ("q_perm", "k_perm", "v_perm", "out_perm")


def _perm(node: Node | None, a: dict[str, Any], key: str) -> tuple[int, ...]:
    p = tuple(int(x) for x in a.get(key, IDENTITY4))
    if sorted(p) != list(IDENTITY4):
        msg = f"attribute '{key}' must be a permutation of 0..3, got {list(p)}"
        if node is None:
            raise ValueError(msg)
        raise shape_error(node, msg)
    return p


def _fused_attention(ins: list[Any], a: dict[str, Any]) -> list[np.ndarray]:
    q, k, v = (widen(x) for x in ins[:3])
    mask = opt(ins, 3)
    qp, kp, vp, op = (_perm(None, a, key) for key in _PERMS)
    q, k, v = np.transpose(q, qp), np.transpose(k, kp), np.transpose(v, vp)
    group = q.shape[1] // k.shape[1]
    if group > 1:
        k, v = np.repeat(k, group, axis=1), np.repeat(v, group, axis=1)
    scores = np.matmul(q, k) * q.dtype.type(a["scale"])
    if mask is not None:
        scores = scores + widen(mask).astype(q.dtype)
    e = np.exp(scores - np.max(scores, axis=-1, keepdims=True))
    probs = e / np.sum(e, axis=-1, keepdims=True)
    if int(a.get("nan_to_zero", 0)):
        probs = np.where(np.isnan(probs), probs.dtype.type(0), probs)
    y = np.matmul(probs, v)
    return [np.ascontiguousarray(np.transpose(y, op)).astype(ins[0].dtype)]


def _fused_attention_infer(node: Node, a: dict[str, Any]) -> list[TensorMeta]:
    dt = check_dtype(node, 0, FLOATS, "Q")
    for i, what in ((1, "K"), (2, "V"), (3, "mask")):
        if node.input(i) is not None and check_dtype(node, i, FLOATS, what) != dt:
            raise shape_error(node, f"{what} must have Q's dtype {dt.value}")
    qp, kp, vp, op = (_perm(node, a, key) for key in _PERMS)
    qs, ks, vs = (shape_in(node, i) for i in range(3))
    if qs is None or ks is None or vs is None:
        return [out(dt, None)]
    if not len(qs) == len(ks) == len(vs) == 4:
        raise shape_error(node, "Q, K and V must be 4-D")
    q4, k4, v4 = ([s[i] for i in p] for s, p in ((qs, qp), (ks, kp), (vs, vp)))
    b, h, sq, d = q4
    hkv, sk, dv = k4[1], k4[3], v4[3]
    if isinstance(h, int) and isinstance(hkv, int) and (hkv < 1 or h % hkv):
        raise shape_error(node, f"K's heads ({hkv}) must divide Q's ({h})")
    for what, got, want in (("K", k4, [b, hkv, d, sk]), ("V", v4, [b, hkv, sk, dv])):
        if any(isinstance(x, int) and isinstance(y, int) and x != y for x, y in zip(got, want)):
            raise shape_error(node, f"{what} seen through its perm is {got}, expected {want} "
                                    f"for Q seen as [B,H,Sq,D] {q4}")
    scores = (b, h, sq, sk)
    ms = shape_in(node, 3)
    if ms is not None and (len(ms) > 4 or broadcast(node, [ms, scores]) != scores):
        raise shape_error(node, f"mask {list(ms)} does not broadcast to the scores {list(scores)}")
    o = (b, h, sq, dv)
    return [out(dt, [o[i] for i in op])]


def _fused_attention_device(node: Node, a: dict[str, Any]) -> DeviceKernel | str:
    why = reject(node)
    if why:
        return why
    attrs = {"scale": float(a["scale"])}
    attrs.update({key: list(_perm(node, a, key)) for key in _PERMS})
    if int(a.get("nan_to_zero", 0)):
        attrs["nan_to_zero"] = 1
    return kernel("FusedAttention", attrs, (0, 1, 2) if node.input(3) is None else (0, 1, 2, 3))


register(OpSchema("FusedAttention", 3, 4, _fused_attention_infer, _fused_attention,
                  device=_fused_attention_device, attrs={
                      "scale": A.f(A.REQUIRED), "q_perm": A.ints(list(IDENTITY4)),
                      "k_perm": A.ints(list(IDENTITY4)), "v_perm": A.ints(list(IDENTITY4)),
                      "out_perm": A.ints(list(IDENTITY4)), "nan_to_zero": A.i(0)}))


# ---- Rope: the rotary embedding (rotate-half or interleaved pairs), fused --------------------
ROPE = "graphengine.Rope"


def _rotary_dim(node: Node, a: dict[str, Any], d: Any) -> Any:
    """The rotated prefix of X's last axis (d): attribute rotary_dim, 0 for all of it."""
    r = int(a.get("rotary_dim", 0))
    if isinstance(d, int) and (r < 0 or r > d or r % 2):
        raise shape_error(node, f"rotary_dim {r} must be even and at most X's last axis ({d})")
    return r or d


def _rope_infer(node: Node, a: dict[str, Any]) -> list[TensorMeta]:
    dt = check_dtype(node, 0, FLOATS, "X")
    xs, cs, ss = (shape_in(node, i) for i in range(3))
    if xs is not None and cs is not None and ss is not None:
        d = xs[-1] if xs else None
        r = _rotary_dim(node, a, d)
        lead = tuple(xs[:-1])
        if not xs or (isinstance(r, int) and r % 2) or \
                broadcast(node, [lead, tuple(cs[:-1]), tuple(ss[:-1])]) != lead:
            raise shape_error(node, f"X {list(xs)} needs an even rotated part whose leading "
                                    f"axes cos {list(cs)} and sin {list(ss)} broadcast to")
        if cs[-1] != r or ss[-1] != r:
            raise shape_error(node, f"cos {list(cs)} and sin {list(ss)} must span the rotated "
                                    f"part of X's last axis ({r})")
    return [out(dt, xs)]


def _rope(ins: list[Any], a: dict[str, Any]) -> list[np.ndarray]:
    """x * cos + rotate(x) * sin on the first rotary_dim elements of the last axis (all when
    0); the rest is copied. rotate_half(x) = concat(-x[..., h:], x[..., :h]); with
    `interleaved`, the pairs (x[2i], x[2i+1]) turn: rotate(x)[2i] = -x[2i+1],
    rotate(x)[2i+1] = x[2i] (GPT-J's rotate_every_two)."""
    x, cos, sin = ins
    r = int(a.get("rotary_dim", 0)) or x.shape[-1]
    part, rest = x[..., :r], x[..., r:]
    if int(a.get("interleaved", 0)):
        rotated = np.stack([-part[..., 1::2], part[..., 0::2]], axis=-1).reshape(part.shape)
    else:
        h = r // 2
        rotated = np.concatenate([-part[..., h:], part[..., :h]], axis=-1)
    y = (part * cos + rotated * sin).astype(x.dtype)
    return [np.concatenate([y, rest], axis=-1) if rest.shape[-1] else y]


def _rope_device(node: Node, a: dict[str, Any]) -> DeviceKernel | str:
    attrs = {k: int(a.get(k, 0)) for k in ("rotary_dim", "interleaved") if int(a.get(k, 0))}
    return reject(node) or kernel("Rope", attrs, (0, 1, 2))


register(OpSchema(ROPE, 3, 3, _rope_infer, _rope, device=_rope_device,
                  attrs={"rotary_dim": A.i(0), "interleaved": A.i(0)}))
