"""Torch-free zoo builders, second part: transformers and a tf2onnx-style model.

Imported (and so registered) by ``models_onnx.py``; see there for the builder helpers.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
from catalog import Built
from models_onnx import _G, F32, I64, INT64_MAX, B, _zoo, conv, gelu, image_feeds
from onnx import TensorProto, helper

__all__: list[str] = []


def _ids_feeds(vocab: int, **seqs: int):
    """``inputs(batch, seed)``: int64 token ids in [0, vocab) for each named input."""

    def inputs(batch: int, seed: int) -> dict:
        rng = np.random.default_rng(seed)
        return {k: rng.integers(0, vocab, (batch, s)).astype(np.int64) for k, s in seqs.items()}

    return inputs


def _linear(g: _G, x: str, cin: int, cout: int, scope: str, bias: bool = True) -> str:
    """torch Linear: MatMul with the transposed weight, then Add(bias, y)."""
    w = g.init(f"{scope}.weight_t", g.normal((cin, cout), 1.0 / math.sqrt(cin)))
    y = g.op("MatMul", [x, w], scope=f"/{scope}")
    if bias:
        y = g.op("Add", [g.init(f"{scope}.bias", g.normal((cout,), 0.02)), y], scope=f"/{scope}")
    return y


def _rms_norm(g: _G, x: str, h: int, scope: str, eps: float = 1e-6) -> str:
    """LlamaRMSNorm / T5LayerNorm as torch exports it: Pow, ReduceMean, Add, Sqrt, Div, Mul."""
    s = f"/{scope}"
    v = g.reduce("ReduceMean", g.op("Pow", [x, g.f32(s, 2.0)], scope=s), [-1], s, keepdims=1)
    r = g.op("Div", [g.f32(s, 1.0), g.op("Sqrt", [g.op("Add", [v, g.f32(s, eps)], scope=s)])])
    y = g.op("Mul", [x, r], scope=s)
    return g.op("Mul", [g.init(f"{scope}.weight", g.uniform((h,), 0.8, 1.2)), y], scope=s)


def _layer_norm(g: _G, x: str, h: int, scope: str, output: str | None = None) -> str:
    w = g.init(f"{scope}.weight", g.uniform((h,), 0.8, 1.2))
    b = g.init(f"{scope}.bias", g.normal((h,), 0.05))
    return g.op(
        "LayerNormalization", [x, w, b], scope=f"/{scope}", output=output, axis=-1, epsilon=1e-5
    )


def _heads(g: _G, x: str, n: int, d: int, scope: str) -> str:
    """[B, S, n*d] -> [B, n, S, d]: Reshape (shape from Shape chains) + Transpose."""
    b, s = g.dims(x, [0, 1], scope)
    x = g.op("Reshape", [x, g.shape_of([b, s, n, d], scope)], scope=scope)
    return g.op("Transpose", [x], scope=scope, perm=[0, 2, 1, 3])


def _merge(g: _G, x: str, hidden: int, scope: str) -> str:
    x = g.op("Transpose", [x], scope=scope, perm=[0, 2, 1, 3])
    b, s = g.dims(x, [0, 1], scope)
    return g.op("Reshape", [x, g.shape_of([b, s, hidden], scope)], scope=scope)


def _attend(g: _G, q, k, v, scope, scale: float | None, bias: list[str]) -> str:
    kt = g.op("Transpose", [k], scope=scope, perm=[0, 1, 3, 2])
    sc = g.op("MatMul", [q, kt], scope=scope)
    if scale is not None:
        sc = g.op("Div", [sc, g.f32(scope, scale)], scope=scope)
    for b in bias:
        sc = g.op("Add", [sc, b], scope=scope)
    p = g.op("Softmax", [sc], scope=scope, axis=-1)
    return g.op("MatMul", [p, v], scope=scope)


def _causal_mask(g: _G, ids: str, scope: str) -> str:
    """HF's causal mask: full(min) -> triu(diagonal=1) -> [1, 1, S, S] (ConstantOfShape, Trilu)."""
    (s,) = g.dims(ids, [1], scope)
    full = g.op(
        "ConstantOfShape",
        [g.op("Concat", [s, s], scope=scope, axis=0)],
        scope=scope,
        value=helper.make_tensor("value", TensorProto.FLOAT, [1], [np.finfo(np.float32).min]),
    )
    tri = g.op("Trilu", [full, g.i64(scope, 1)], scope=scope, upper=1)
    return g.unsq(tri, [0, 1], scope)


# ----------------------------------------------------------------------------------------------
# 4. Llama with grouped-query attention
# ----------------------------------------------------------------------------------------------


@_zoo(
    "llama_gqa",
    "text",
    notes="opset 18, 2 decoder layers, hidden 64, 4 query / 2 KV heads: RMSNorm "
    "(Pow/ReduceMean(axes input)/Add/Sqrt/Div/Mul), RoPE from constant cos/sin tables "
    "gathered by Range positions, rotate_half (Slice/Neg/Concat), repeat_kv "
    "(Unsqueeze/Expand/Reshape), causal mask (ConstantOfShape/Trilu), SiLU MLP, tied LM head "
    "(Transpose of the embedding table)",
)
def build_llama_gqa(folder: Path) -> Built:
    g = _G(104, opset=18)
    vocab, hidden, nh, nkv, seq, inter, max_pos = 256, 64, 4, 2, 16, 128, 64
    d, rep = hidden // nh, nh // nkv
    ids = g.input("input_ids", I64, [B, seq])
    table = g.init("model.embed_tokens.weight", g.normal((vocab, hidden), 1.0 / math.sqrt(hidden)))
    x = g.op("Gather", [table, ids], scope="/model/embed_tokens")
    # rotary tables gathered by position_ids = arange(seq)[None]
    sr = "/model/rotary_emb"
    inv = 1.0 / (10000 ** (np.arange(0, d, 2, dtype=np.float64) / d))
    ang = np.arange(max_pos)[:, None] * inv[None, :]
    emb = np.concatenate([ang, ang], axis=-1)
    n_s = g.op("Gather", [g.op("Shape", [ids], scope=sr), g.i64(sr, 1)], scope=sr, axis=0)
    pos = g.unsq(g.op("Range", [g.i64(sr, 0), n_s, g.i64(sr, 1)], scope=sr), [0], sr)
    cos_t = g.init("model.rotary_emb.cos_cached", np.cos(emb).astype(np.float32))
    sin_t = g.init("model.rotary_emb.sin_cached", np.sin(emb).astype(np.float32))
    cos = g.unsq(g.op("Gather", [cos_t, pos], scope=sr), [1], sr)  # [1, 1, S, d]
    sin = g.unsq(g.op("Gather", [sin_t, pos], scope=sr), [1], sr)
    mask = _causal_mask(g, ids, "/model/mask")

    def rope(t, scope):
        half = lambda a, b: g.op(  # noqa: E731
            "Slice",
            [t, g.i64(scope, [a]), g.i64(scope, [b]), g.i64(scope, [-1]), g.i64(scope, [1])],
            scope=scope,
        )
        rot = g.op(
            "Concat",
            [g.op("Neg", [half(d // 2, INT64_MAX)], scope=scope), half(0, d // 2)],
            scope=scope,
            axis=-1,
        )
        return g.op(
            "Add",
            [g.op("Mul", [t, cos], scope=scope), g.op("Mul", [rot, sin], scope=scope)],
            scope=scope,
        )

    def repeat_kv(t, scope):
        b, _, s, dd = g.dims(t, [0, 1, 2, 3], scope)
        t = g.unsq(t, [2], scope)
        t = g.op("Expand", [t, g.shape_of([b, nkv, rep, s, dd], scope)], scope=scope)
        return g.op("Reshape", [t, g.shape_of([b, nkv * rep, s, dd], scope)], scope=scope)

    for li in range(2):
        p = f"model.layers.{li}"
        sa = f"/{p}/self_attn"
        h = _rms_norm(g, x, hidden, f"{p}.input_layernorm")
        q = _heads(g, _linear(g, h, hidden, nh * d, f"{p}.self_attn.q_proj", False), nh, d, sa)
        k = _heads(g, _linear(g, h, hidden, nkv * d, f"{p}.self_attn.k_proj", False), nkv, d, sa)
        v = _heads(g, _linear(g, h, hidden, nkv * d, f"{p}.self_attn.v_proj", False), nkv, d, sa)
        q, k = rope(q, f"{sa}/rope_q"), rope(k, f"{sa}/rope_k")
        k, v = repeat_kv(k, f"{sa}/repeat_k"), repeat_kv(v, f"{sa}/repeat_v")
        a = _merge(g, _attend(g, q, k, v, sa, math.sqrt(d), [mask]), hidden, sa)
        a = _linear(g, a, hidden, hidden, f"{p}.self_attn.o_proj", False)
        x = g.op("Add", [x, a], scope=f"/{p}")
        h = _rms_norm(g, x, hidden, f"{p}.post_attention_layernorm")
        gate = _linear(g, h, hidden, inter, f"{p}.mlp.gate_proj", False)
        gate = g.op("Mul", [gate, g.op("Sigmoid", [gate], scope=f"/{p}/mlp/act_fn")])
        up = _linear(g, h, hidden, inter, f"{p}.mlp.up_proj", False)
        down = _linear(
            g,
            g.op("Mul", [gate, up], scope=f"/{p}/mlp"),
            inter,
            hidden,
            f"{p}.mlp.down_proj",
            False,
        )
        x = g.op("Add", [x, down], scope=f"/{p}")
    x = _rms_norm(g, x, hidden, "model.norm")
    wt = g.op("Transpose", [table], scope="/lm_head", perm=[1, 0])  # tied to the embedding
    g.op("MatMul", [x, wt], scope="/lm_head", output="logits")
    g.output("logits", F32, [B, seq, vocab])
    g.save(folder, "llama_gqa")
    return Built(inputs=_ids_feeds(vocab, input_ids=seq))


# ----------------------------------------------------------------------------------------------
# 11. Swin window attention
# ----------------------------------------------------------------------------------------------


def _swin_tables(hw: int, ws: int, shift: int):
    """Relative position index [ws*ws, ws*ws] and the shifted-window mask [nW, N, N]."""
    c = np.stack(np.meshgrid(np.arange(ws), np.arange(ws), indexing="ij")).reshape(2, -1)
    rel = (c[:, :, None] - c[:, None, :]).transpose(1, 2, 0) + (ws - 1)
    index = rel[..., 0] * (2 * ws - 1) + rel[..., 1]
    img = np.zeros((hw, hw))
    cnt = 0
    for hs in (slice(0, -ws), slice(-ws, -shift), slice(-shift, None)):
        for wsl in (slice(0, -ws), slice(-ws, -shift), slice(-shift, None)):
            img[hs, wsl] = cnt
            cnt += 1
    win = img.reshape(hw // ws, ws, hw // ws, ws).transpose(0, 2, 1, 3).reshape(-1, ws * ws)
    mask = np.where(win[:, None, :] != win[:, :, None], -100.0, 0.0).astype(np.float32)
    return index.astype(np.int64), mask


@_zoo(
    "swin_window",
    "vision",
    notes="Swin: patch-embed Conv, NHWC LayerNormalization, torch.roll as Slice+Concat, window "
    "partition/reverse Reshape/Transpose/Reshape with -1, qkv split by Gather, relative "
    "position bias (Gather of a table by a constant index), shifted-window mask added "
    "through a 5-d Reshape, erf GELU MLP",
)
def build_swin_window(folder: Path) -> Built:
    g = _G(111, opset=17)
    c, heads, ws, hw, shift_by = 32, 2, 4, 8, 2
    hd, n, nw = c // heads, ws * ws, (hw // ws) ** 2
    index, shift_mask = _swin_tables(hw, ws, shift_by)
    x = g.input("input", F32, [B, 3, 32, 32])
    x = conv(g, x, 3, c, 4, "features.0.0", stride=4, pad=0, gain=1.0)
    x = g.op("Transpose", [x], scope="/features.0.1", perm=[0, 2, 3, 1])  # [B, 8, 8, C]
    x = _layer_norm(g, x, c, "features.0.2")

    def roll(t, shift, axis, scope):
        k = (-shift) % hw
        sl = lambda a, b: g.op(  # noqa: E731
            "Slice",
            [t, g.i64(scope, [a]), g.i64(scope, [b]), g.i64(scope, [axis]), g.i64(scope, [1])],
            scope=scope,
        )
        return g.op("Concat", [sl(k, INT64_MAX), sl(0, k)], scope=scope, axis=axis)

    for bi, shift in enumerate((0, shift_by)):
        p = f"features.1.{bi}"
        sa = f"/{p}/attn"
        h = _layer_norm(g, x, c, f"{p}.norm1")
        if shift:
            h = roll(roll(h, -shift, 1, sa), -shift, 2, sa)
        h = g.op("Reshape", [h, g.i64(sa, [-1, hw // ws, ws, hw // ws, ws, c])], scope=sa)
        h = g.op("Transpose", [h], scope=sa, perm=[0, 1, 3, 2, 4, 5])
        h = g.op("Reshape", [h, g.i64(sa, [-1, n, c])], scope=sa)  # [B*nW, N, C]
        qkv = _linear(g, h, c, 3 * c, f"{p}.attn.qkv")
        qkv = g.op("Reshape", [qkv, g.i64(sa, [-1, n, 3, heads, hd])], scope=sa)
        qkv = g.op("Transpose", [qkv], scope=sa, perm=[2, 0, 3, 1, 4])
        q, k, v = (g.op("Gather", [qkv, g.i64(sa, i)], scope=sa, axis=0) for i in range(3))
        q = g.op("Mul", [q, g.f32(sa, hd**-0.5)], scope=sa)
        table = g.init(
            f"{p}.attn.relative_position_bias_table", g.normal(((2 * ws - 1) ** 2, heads), 0.5)
        )
        rb = g.op("Gather", [table, g.init(f"{p}.attn.relative_position_index", index)], sa)
        rb = g.op("Transpose", [rb], scope=sa, perm=[2, 0, 1])
        rb = g.unsq(rb, [0], sa)  # [1, heads, N, N]
        kt = g.op("Transpose", [k], scope=sa, perm=[0, 1, 3, 2])
        sc = g.op("Add", [g.op("MatMul", [q, kt], scope=sa), rb], scope=sa)
        if shift:
            sc = g.op("Reshape", [sc, g.i64(sa, [-1, nw, heads, n, n])], scope=sa)
            m = g.init(f"{p}.attn.attn_mask", shift_mask[None, :, None])  # [1, nW, 1, N, N]
            sc = g.op("Add", [sc, m], scope=sa)
            sc = g.op("Reshape", [sc, g.i64(sa, [-1, heads, n, n])], scope=sa)
        a = g.op("MatMul", [g.op("Softmax", [sc], scope=sa, axis=-1), v], scope=sa)
        a = g.op("Transpose", [a], scope=sa, perm=[0, 2, 1, 3])
        a = g.op("Reshape", [a, g.i64(sa, [-1, n, c])], scope=sa)
        a = _linear(g, a, c, c, f"{p}.attn.proj")
        a = g.op("Reshape", [a, g.i64(sa, [-1, hw // ws, hw // ws, ws, ws, c])], scope=sa)
        a = g.op("Transpose", [a], scope=sa, perm=[0, 1, 3, 2, 4, 5])
        a = g.op("Reshape", [a, g.i64(sa, [-1, hw, hw, c])], scope=sa)
        if shift:
            a = roll(roll(a, shift, 1, sa), shift, 2, sa)
        x = g.op("Add", [x, a], scope=f"/{p}")
        h = _layer_norm(g, x, c, f"{p}.norm2")
        h = gelu(g, _linear(g, h, c, 4 * c, f"{p}.mlp.0"), f"/{p}/mlp.1")
        x = g.op("Add", [x, _linear(g, h, 4 * c, c, f"{p}.mlp.3")], scope=f"/{p}")
    x = _layer_norm(g, x, c, "norm")
    x = g.op("Transpose", [x], scope="/permute", perm=[0, 3, 1, 2])
    x = g.op("Flatten", [g.op("GlobalAveragePool", [x], scope="/avgpool")], scope="", axis=1)
    w = g.init("head.weight", g.normal((10, c), 1.0 / math.sqrt(c)))
    bb = g.init("head.bias", g.normal((10,), 0.02))
    g.op("Gemm", [x, w, bb], scope="/head", output="output", alpha=1.0, beta=1.0, transB=1)
    g.output("output", F32, [B, 10])
    g.save(folder, "swin_window")
    return Built(inputs=image_feeds("input", 3, 32, 32))


# ----------------------------------------------------------------------------------------------
# 8. tf2onnx-style model with renamed batch dims
# ----------------------------------------------------------------------------------------------


@_zoo(
    "renamed_dims",
    "vision",
    notes="tf2onnx layout (opset 13): NHWC input with batch 'unk__214', outputs with batch "
    "'unk__215', internal value_info with other names (unk__216..219); Transpose to NCHW, "
    "Conv/Relu, ReduceMean over H,W (keepdims 0), MatMul + Add, Softmax",
)
def build_renamed_dims(folder: Path) -> Built:
    g = _G(108, opset=13)
    x = g.input("input_1", F32, ["unk__214", 32, 32, 3])
    x = g.op("Transpose", [x], scope="model/conv2d/Conv2D__6", perm=[0, 3, 1, 2])
    g.value_info.append(helper.make_tensor_value_info(x, F32, ["unk__216", 3, 32, 32]))
    x = g.op("Relu", [conv(g, x, 3, 16, 3, "model/conv2d/Conv2D", stride=2, pad=[0, 0, 1, 1])])
    g.value_info.append(helper.make_tensor_value_info(x, F32, ["unk__217", 16, 16, 16]))
    x = g.op("Relu", [conv(g, x, 16, 32, 3, "model/conv2d_1/Conv2D", stride=2, pad=[0, 0, 1, 1])])
    x = g.op("Transpose", [x], scope="model/conv2d_1/Relu__12", perm=[0, 2, 3, 1])
    g.value_info.append(helper.make_tensor_value_info(x, F32, ["unk__218", 8, 8, 32]))
    x = g.reduce("ReduceMean", x, [1, 2], "model/global_average_pooling2d/Mean", keepdims=0)
    g.value_info.append(helper.make_tensor_value_info(x, F32, ["unk__219", 32]))
    w = g.init("model/dense/MatMul/ReadVariableOp:0", g.normal((32, 10), 1.5 / math.sqrt(32)))
    x = g.op("MatMul", [x, w], scope="model/dense/MatMul")
    b = g.init("model/dense/BiasAdd/ReadVariableOp:0", g.normal((10,), 0.05))
    g.op("Add", [x, b], scope="model/dense/BiasAdd", output="logits")
    g.op("Softmax", ["logits"], scope="model/dense/Softmax", output="probs", axis=-1)
    g.output("logits", F32, ["unk__215", 10])
    g.output("probs", F32, ["unk__215", 10])
    g.save(folder, "renamed_dims")
    return Built(
        inputs=image_feeds("input_1", 32, 32, 3, channel_axis=-1), producer="tf2onnx layout"
    )


# ----------------------------------------------------------------------------------------------
# 13. T5-like encoder-decoder
# ----------------------------------------------------------------------------------------------


def _t5_buckets(q_len: int, k_len: int, bidirectional: bool, nb: int = 32, maxd: int = 64):
    rel = np.arange(k_len)[None, :] - np.arange(q_len)[:, None]
    out = np.zeros_like(rel)
    if bidirectional:
        nb //= 2
        out += (rel > 0) * nb
        rel = np.abs(rel)
    else:
        rel = -np.minimum(rel, 0)
    exact = nb // 2
    large = exact + (
        np.log(np.maximum(rel, 1) / exact) / math.log(maxd / exact) * (nb - exact)
    ).astype(np.int64)
    large = np.minimum(large, nb - 1)
    return (out + np.where(rel < exact, rel, large)).astype(np.int64)


@_zoo(
    "t5_like_encdec",
    "text",
    notes="1+1 layer encoder-decoder, hidden 32, 4 heads, encoder seq 12, decoder seq 8: T5 "
    "RMSNorm, unscaled attention with relative position bias (Gather of a table by constant "
    "buckets), causal mask, cross-attention, Relu FFN, tied LM head scaled by d^-0.5",
)
def build_t5_like_encdec(folder: Path) -> Built:
    g = _G(113, opset=17)
    vocab, hidden, nh, se, sd, ff = 128, 32, 4, 12, 8, 64
    d = hidden // nh
    ids = g.input("input_ids", I64, [B, se])
    dids = g.input("decoder_input_ids", I64, [B, sd])
    table = g.init("shared.weight", g.normal((vocab, hidden), 1.0))

    def attn(x, kv, scope, bias):
        s = f"/{scope}"
        q = _heads(g, _linear(g, x, hidden, hidden, f"{scope}.q", False), nh, d, s)
        k = _heads(g, _linear(g, kv, hidden, hidden, f"{scope}.k", False), nh, d, s)
        v = _heads(g, _linear(g, kv, hidden, hidden, f"{scope}.v", False), nh, d, s)
        a = _merge(g, _attend(g, q, k, v, s, None, bias), hidden, s)
        return _linear(g, a, hidden, hidden, f"{scope}.o", False)

    def pos_bias(scope, q_len, k_len, bidir):
        t = g.init(f"{scope}.relative_attention_bias.weight", g.normal((32, nh), 0.5))
        idx = g.init(f"{scope}.buckets", _t5_buckets(q_len, k_len, bidir))
        pb = g.op("Gather", [t, idx], scope=f"/{scope}")
        return g.unsq(g.op("Transpose", [pb], scope=f"/{scope}", perm=[2, 0, 1]), [0], f"/{scope}")

    def ffn(x, scope):
        h = g.op("Relu", [_linear(g, x, hidden, ff, f"{scope}.wi", False)], scope=f"/{scope}")
        return _linear(g, h, ff, hidden, f"{scope}.wo", False)

    # encoder
    x = g.op("Gather", [table, ids], scope="/encoder/embed_tokens")
    eb = pos_bias("encoder.block.0.layer.0.SelfAttention", se, se, True)
    p = "encoder.block.0"
    h = _rms_norm(g, x, hidden, f"{p}.layer.0.layer_norm")
    x = g.op("Add", [x, attn(h, h, f"{p}.layer.0.SelfAttention", [eb])], scope=f"/{p}")
    h = _rms_norm(g, x, hidden, f"{p}.layer.1.layer_norm")
    x = g.op("Add", [x, ffn(h, f"{p}.layer.1.DenseReluDense")], scope=f"/{p}")
    enc = _rms_norm(g, x, hidden, "encoder.final_layer_norm")
    g.op("Identity", [enc], scope="/encoder", output="encoder_last_hidden_state")
    # decoder
    y = g.op("Gather", [table, dids], scope="/decoder/embed_tokens")
    db = pos_bias("decoder.block.0.layer.0.SelfAttention", sd, sd, False)
    mask = _causal_mask(g, dids, "/decoder/mask")
    p = "decoder.block.0"
    h = _rms_norm(g, y, hidden, f"{p}.layer.0.layer_norm")
    y = g.op("Add", [y, attn(h, h, f"{p}.layer.0.SelfAttention", [db, mask])], scope=f"/{p}")
    h = _rms_norm(g, y, hidden, f"{p}.layer.1.layer_norm")
    y = g.op("Add", [y, attn(h, enc, f"{p}.layer.1.EncDecAttention", [])], scope=f"/{p}")
    h = _rms_norm(g, y, hidden, f"{p}.layer.2.layer_norm")
    y = g.op("Add", [y, ffn(h, f"{p}.layer.2.DenseReluDense")], scope=f"/{p}")
    y = _rms_norm(g, y, hidden, "decoder.final_layer_norm")
    y = g.op("Mul", [y, g.f32("", hidden**-0.5)], scope="")
    wt = g.op("Transpose", [table], scope="/lm_head", perm=[1, 0])
    g.op("MatMul", [y, wt], scope="/lm_head", output="logits")
    g.output("logits", F32, [B, sd, vocab])
    g.output("encoder_last_hidden_state", F32, [B, se, hidden])
    g.save(folder, "t5_like_encdec")
    return Built(inputs=_ids_feeds(vocab, input_ids=se, decoder_input_ids=sd))
