"""A fifth set of unseen models: architectures neither the zoo, build.py, fresh.py, third.py nor
fourth.py holds.

README section (the table the set would add to README.md). Families: GQA = GQA decoders
with RoPE + RMSNorm, GPT2 = GPT-2-like decoders, DWSE = depthwise / squeeze-excitation convnets,
EMB = embedding-heavy, WIN = window / hierarchical attention, VIT = small ViTs, AUD = 1-D conv
audio, OTH = others.

| name | family | what it exercises |
|---|---|---|
| `lfm2` | GQA | gated short-conv blocks (causal depthwise Conv1d k3) + GQA attn, q/k norm |
| `recurrent_gemma` | GQA | RG-LRU recurrence (24-step scan unrolled), local MQA (16), soft-cap |
| `llama4_text` | GQA | chunked attn (16) + NoPE global layer, L2 q/k norm, attn temperature, MoE |
| `glm4` | GQA | sandwich RMSNorms (pre + post attention/MLP), half interleaved rotary, qkv bias |
| `hunyuan_dense` | GQA | q/k RMSNorm after RoPE, NTK-alpha RoPE base, 6:2 GQA |
| `persimmon` | GPT2 | LayerNorm decoder, per-head q/k LayerNorm, half rotary, squared ReLU |
| `gpt_neox_japanese` | GPT2 | dense biases split off and added after the residual, full rotary |
| `modernbert_decoder` | GPT2 | bias-free LN/Linear, sliding (16) / global layers, GeGLU, head LN |
| `inceptionnext` | DWSE | channel split: identity / 3x3 / 1x11 / 11x1 depthwise, Concat, BN |
| `convmixer` | DWSE | 7x7 s7 patchify, residual 9x9 depthwise, GELU then BN (post-activation) |
| `fastvit` | DWSE | train-time RepMixer (mixer - norm), MobileOne branches, ConvFFN, CPE + MHSA |
| `mobilenext` | DWSE | sandglass blocks (depthwise at the wide ends), half-channel shortcut |
| `coordatt_mbv2` | DWSE | coordinate attention (H / W pools, Split, two sigmoid maps), 160x128 |
| `eca_cbam` | DWSE | ECA (Conv1d over channels), CBAM (avg+max channel MLP, 7x7 spatial) |
| `autoint` | EMB | one table + in-graph offsets, dense fields as value*vector, field attention |
| `fibinet` | EMB | SENET field re-weighting, bilinear interactions over 120 gathered pairs |
| `bert4rec` | EMB | bidirectional item transformer, padding mask, tied scores (4002 items) |
| `dssm` | EMB | masked trigram bags (30000 x 96 tables), tanh towers, cosine, softmax |
| `timesformer` | VIT | divided space-time attention on 4 frames (temporal, then spatial) |
| `vit_mae` | VIT | MAE masking from a noise input (argsort twice, gather), encoder + decoder |
| `crossvit` | VIT | two patch-size branches (one on a resized image), CLS cross-attention |
| `tnt` | VIT | inner pixel-token transformer per patch, projected into the outer tokens |
| `efficientvit_msra` | WIN | cascaded group attention (dw conv on q, attn biases), 7x7 windows |
| `crossformer` | WIN | cross-scale embedding, short/long-distance groups, in-graph DPB MLP |
| `halonet` | WIN | blocked local attention with halo (Unfold stride b), relative logits |
| `biformer` | WIN | bi-level routing: region TopK, gathered key/value regions, LCE dw conv |
| `demucs_lite` | AUD | Conv1d k8 s4 + GLU encoder, BiLSTM, ConvTranspose1d decoder with skips |
| `vocos` | AUD | ConvNeXt-1d blocks, exp magnitude + cos/sin phase spectrum head |
| `jasper_dr` | AUD | Conv1d k11..29 blocks, dense residuals (1x1 conv + BN of all earlier) |
| `dprnn` | AUD | 50%-overlap chunking, intra- and inter-chunk BiLSTMs, overlap-add, gated masks |
| `esrgan` | OTH | RRDB dense blocks (Concat growth), nearest x2 + PixelShuffle x2 upsampling |
| `raft_lite` | OTH | all-pairs correlation, GridSample lookups, 3 ConvGRU iters, convex upsample |
| `fcos` | OTH | FPN P3-P7, shared GroupNorm towers, per-level scales, point-grid box decode |
| `pointnet2` | OTH | farthest point sampling unrolled (ArgMax), ball query by TopK, grouping |
| `rwkv` | OTH | RWKV-4 token shift, WKV recurrence unrolled over 24 steps, squared ReLU |
| `vqvae` | OTH | codebook distances by MatMul, ArgMin + Gather (int64 codes out), ConvTranspose2d |

The dynamo exporter is used where the legacy one fails: `glm4` (legacy: "All tensors must
have the same rank" assertion) and `llama4_text` (legacy graph: a CumSum over bool that ONNX
Runtime refuses). `llama4_text`'s rotary embedding is rebuilt with real cos/sin tensors (the
same rotation): HF writes it with `torch.polar` / `view_as_complex`, which neither exporter
takes. `vocos` stops at the complex spectrum (no inverse STFT). No tried architecture had to
be dropped.

Usage: python fifth.py NAME      (builds one model into $GE_UNSEEN_DIR/NAME/)
       python fifth.py --list
       python fifth.py --bench-layout  (writes $GE_UNSEEN_DIR/cache/zoo/NAME/ for each built
                                        model, so that GE_MODEL_CACHE=$GE_UNSEEN_DIR/cache
                                        benchmarks/bench_zoo.py benches them)
Build this set into its own directory (e.g. GE_UNSEEN_DIR=/work/unseen9), not the other sets'.
Same files as build.py (whose export + ORT check this reuses): model.onnx (opset 17, dynamic
batch axis), inputs.npz (batch-1 feeds), export.txt.
"""

import math
import os
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from fresh import SE, cba, custom, decoder, divisible, randomize_norms
from third import Attention, mlp

from build import hf, image_inputs, main, text_inputs

_TOKENS = dict(pad_token_id=0, bos_token_id=1, eos_token_id=2)


# ================================================================ GQA decoders (RoPE, RMSNorm)
def m_lfm2():
    """LFM2: a hybrid of gated short-convolution blocks (in_proj to B, C, x; B * x through a
    causal depthwise Conv1d k3; C * y; out_proj) and GQA attention blocks (q/k RMSNorm, 6:2
    heads) in the pattern conv, conv, attn, conv, attn; SwiGLU, RMSNorm, tied head."""
    from transformers import Lfm2Config

    cfg = Lfm2Config(
        vocab_size=1000,
        hidden_size=192,
        intermediate_size=512,
        num_hidden_layers=5,
        num_attention_heads=6,
        num_key_value_heads=2,
        max_position_embeddings=256,
        conv_L_cache=3,
        layer_types=["conv", "conv", "full_attention", "conv", "full_attention"],
        block_auto_adjust_ff_dim=False,
        **_TOKENS,
    )
    wrap, inp, outs = decoder("Lfm2ForCausalLM", cfg, seq=48)
    _rand_rms(wrap)
    return wrap, inp, outs


def m_recurrent_gemma():
    """RecurrentGemma (Griffin): residual blocks alternating RG-LRU recurrent mixers (Linear
    branches, causal depthwise Conv1d k4, input + recurrence gates from block-diagonal
    einsums, a = exp(-8 r softplus(param)), sqrt(1 - a^2) input scaling, a 24-step
    linear scan unrolled) and local MQA (window 16, half rotary); GeGLU MLP, (1+w) RMSNorm,
    sqrt(d) scaled embeddings, tanh logit soft-cap."""
    from transformers import RecurrentGemmaConfig

    cfg = RecurrentGemmaConfig(
        num_hidden_layers=3,
        vocab_size=1000,
        hidden_size=128,
        intermediate_size=384,
        num_attention_heads=4,
        num_key_value_heads=1,
        lru_width=128,
        attention_window_size=16,
        conv1d_width=4,
        logits_soft_cap=30.0,
        block_types=["recurrent", "attention", "recurrent"],
        **_TOKENS,
    )
    wrap, inp, outs = decoder("RecurrentGemmaForCausalLM", cfg, seq=24)
    _rand_rms(wrap)
    return wrap, inp, outs


def m_llama4_text():
    """Llama 4 text decoder: chunked local attention (chunk 16) on RoPE layers and global
    attention without RoPE on every 4th layer (NoPE, with attention-temperature tuning by
    log(floor(pos / floor_scale) + 1)), parameter-free L2 q/k norm, complex-pair (interleaved)
    RoPE, MoE layers of 4 experts top-1 (sigmoid router scores scaling the input) + a shared
    expert, dense SwiGLU layers between; seq 48."""
    from transformers import Llama4TextConfig

    cfg = Llama4TextConfig(
        vocab_size=1000,
        hidden_size=128,
        intermediate_size=256,
        intermediate_size_mlp=384,
        num_hidden_layers=4,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=32,
        max_position_embeddings=256,
        num_local_experts=4,
        num_experts_per_tok=1,
        interleave_moe_layer_step=2,
        attention_chunk_size=16,
        no_rope_layer_interval=4,
        floor_scale=8,
        attn_scale=0.1,
        attn_temperature_tuning=True,
        use_qk_norm=True,
        **_TOKENS,
    )
    import transformers.models.llama4.modeling_llama4 as L4

    # HF builds the rotary factors with torch.polar / view_as_complex, which neither exporter
    # takes: the same rotation of (even, odd) pairs written with real cos/sin tensors.
    def rope_forward(self, x, position_ids):
        f = position_ids[..., None].float() * self.inv_freq.to(x.device, torch.float)
        return torch.stack([f.cos(), f.sin()], -1) * self.attention_scaling

    def apply_rotary_emb(xq, xk, cs):
        c, s = cs[:, :, None, :, 0], cs[:, :, None, :, 1]

        def rot(x):
            x = x.float().reshape(*x.shape[:-1], -1, 2)
            a, b = x[..., 0], x[..., 1]
            return torch.stack([a * c - b * s, a * s + b * c], -1).flatten(3)

        return rot(xq).type_as(xq), rot(xk).type_as(xk)

    L4.Llama4TextRotaryEmbedding.forward = rope_forward
    L4.apply_rotary_emb = apply_rotary_emb
    wrap, inp, outs = decoder("Llama4ForCausalLM", cfg, seq=48)
    _rand_rms(wrap)
    return wrap, inp, outs


def m_glm4():
    """GLM-4: sandwich norms (RMSNorm before and after both attention and MLP), half rotary
    on interleaved pairs, q/k/v biases, fused gate_up_proj, 8:2 GQA."""
    from transformers import Glm4Config

    cfg = Glm4Config(
        vocab_size=1000,
        hidden_size=128,
        intermediate_size=352,
        num_hidden_layers=3,
        num_attention_heads=8,
        num_key_value_heads=2,
        head_dim=16,
        max_position_embeddings=256,
        attention_bias=True,
        **_TOKENS,
    )
    wrap, inp, outs = decoder("Glm4ForCausalLM", cfg, seq=56)
    _rand_rms(wrap)
    return wrap, inp, outs


def m_hunyuan_dense():
    """HunYuan dense v1: q/k RMSNorm applied after the rotary embedding, dynamic-NTK "alpha"
    RoPE scaling (base * alpha^(d/(d-2))), 6:2 GQA with head_dim 32, SwiGLU."""
    from transformers import HunYuanDenseV1Config

    cfg = HunYuanDenseV1Config(
        vocab_size=1000,
        hidden_size=192,
        intermediate_size=448,
        num_hidden_layers=3,
        num_attention_heads=6,
        num_key_value_heads=2,
        head_dim=32,
        max_position_embeddings=256,
        rope_parameters={
            "rope_type": "dynamic",
            "rope_theta": 10000.0,
            "alpha": 8.0,
            "factor": 1.0,
        },
        eod_token_id=3,
        **_TOKENS,
    )
    wrap, inp, outs = decoder("HunYuanDenseV1ForCausalLM", cfg, seq=40)
    _rand_rms(wrap)
    return wrap, inp, outs


def _rand_rms(m, seed=9):
    """RMSNorm weights of 1 (or 0 for (1+w) forms) made to matter."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for n, p in m.named_parameters():
            if "norm" in n and p.dim() == 1 and float(p.std()) == 0:
                p.add_(torch.empty(p.shape).uniform_(-0.3, 0.3, generator=g))
    return m


# ================================================================ GPT-2-like decoders
def m_persimmon():
    """Persimmon: LayerNorm (with bias) decoder, fused query_key_value, per-head LayerNorm on
    q and k, partial rotary (half the head dim), squared-ReLU MLP, final LayerNorm."""
    from transformers import PersimmonConfig

    cfg = PersimmonConfig(
        vocab_size=1000,
        hidden_size=128,
        intermediate_size=512,
        num_hidden_layers=3,
        num_attention_heads=4,
        max_position_embeddings=256,
        qk_layernorm=True,
        hidden_act="relu2",
        rope_parameters={
            "rope_type": "default",
            "rope_theta": 25000.0,
            "partial_rotary_factor": 0.5,
        },
        hidden_dropout=0.0,
        attention_dropout=0.0,
        **_TOKENS,
    )
    wrap, inp, outs = decoder("PersimmonForCausalLM", cfg, seq=48)
    randomize_norms(wrap)
    return wrap, inp, outs


def m_gpt_neox_japanese():
    """GPT-NeoX-Japanese: pre-LN decoder whose attention and MLP dense outputs have their
    biases split off and added after the residual sum (dense_bias), rotary on the full head
    dim, a 4x MLP (intermediate_multiple_size)."""
    from transformers import GPTNeoXJapaneseConfig

    cfg = GPTNeoXJapaneseConfig(
        vocab_size=1000,
        hidden_size=128,
        num_hidden_layers=3,
        num_attention_heads=4,
        intermediate_multiple_size=4,
        max_position_embeddings=256,
        attention_dropout=0.0,
        hidden_dropout=0.0,
        **_TOKENS,
    )
    wrap, inp, outs = decoder("GPTNeoXJapaneseForCausalLM", cfg, seq=48)
    randomize_norms(wrap)
    with torch.no_grad():
        g = torch.Generator().manual_seed(11)
        for n, p in wrap.named_parameters():
            if n.endswith("dense_bias"):
                p.uniform_(-0.2, 0.2, generator=g)
    return wrap, inp, outs


def m_modernbert_decoder():
    """ModernBERT decoder: bias-free LayerNorms and Linears, RoPE, alternating sliding-window
    (local window 16) / global causal layers, GeGLU MLP, embedding LayerNorm, a prediction
    head (dense - GELU - LayerNorm) before the tied decoder."""
    from transformers import ModernBertDecoderConfig

    cfg = ModernBertDecoderConfig(
        vocab_size=1000,
        hidden_size=128,
        intermediate_size=384,
        num_hidden_layers=4,
        num_attention_heads=4,
        max_position_embeddings=256,
        local_attention=16,
        layer_types=["sliding_attention", "full_attention"] * 2,
        embedding_dropout=0.0,
        mlp_dropout=0.0,
        attention_dropout=0.0,
        **_TOKENS,
    )
    wrap, inp, outs = decoder("ModernBertDecoderForCausalLM", cfg, seq=48)
    with torch.no_grad():  # bias-free LayerNorms
        g = torch.Generator().manual_seed(12)
        for mod in wrap.modules():
            if isinstance(mod, nn.LayerNorm):
                mod.weight.uniform_(0.7, 1.3, generator=g)
    return wrap, inp, outs


# ================================================================ depthwise + squeeze-excitation
class InceptionNeXt(nn.Module):
    """InceptionNeXt-like MetaNeXt: the token mixer splits the channels four ways - an
    identity part, a 3x3 depthwise conv, a 1x11 and an 11x1 depthwise band conv (1/8 of the
    channels each) - then Concat; BatchNorm, 1x1 MLP (4x, GELU), layer scale; 4x4 patchify,
    BN + 2x2 stride-2 downsampling, MLP head with LayerNorm; 128x128."""

    class Mixer(nn.Module):
        def __init__(self, d, band=11):
            super().__init__()
            gc = d // 8
            self.split = (d - 3 * gc, gc, gc, gc)
            self.sq = nn.Conv2d(gc, gc, 3, 1, 1, groups=gc)
            self.w = nn.Conv2d(gc, gc, (1, band), 1, (0, band // 2), groups=gc)
            self.h = nn.Conv2d(gc, gc, (band, 1), 1, (band // 2, 0), groups=gc)

        def forward(self, x):
            i, a, b, c = torch.split(x, self.split, 1)
            return torch.cat([i, self.sq(a), self.w(b), self.h(c)], 1)

    class Block(nn.Module):
        def __init__(self, d):
            super().__init__()
            self.mix, self.bn = InceptionNeXt.Mixer(d), nn.BatchNorm2d(d)
            self.mlp = nn.Sequential(nn.Conv2d(d, 4 * d, 1), nn.GELU(), nn.Conv2d(4 * d, d, 1))
            self.g = nn.Parameter(torch.full((1, d, 1, 1), 0.5))

        def forward(self, x):
            return x + self.g * self.mlp(self.bn(self.mix(x)))

    def __init__(self, dims=(32, 64, 128, 256), depths=(1, 1, 3, 1), classes=100):
        super().__init__()
        layers = [nn.Conv2d(3, dims[0], 4, 4), nn.BatchNorm2d(dims[0])]
        for i, (d, n) in enumerate(zip(dims, depths)):
            if i:
                layers += [nn.BatchNorm2d(dims[i - 1]), nn.Conv2d(dims[i - 1], d, 2, 2)]
            layers += [InceptionNeXt.Block(d) for _ in range(n)]
        self.body = nn.Sequential(*layers)
        self.head = nn.Sequential(
            nn.Linear(dims[-1], 3 * dims[-1]),
            nn.GELU(),
            nn.LayerNorm(3 * dims[-1]),
            nn.Linear(3 * dims[-1], classes),
        )

    def forward(self, x):
        return self.head(self.body(x).mean((2, 3)))


def m_inceptionnext():
    return custom(InceptionNeXt, image_inputs(128), ["logits"], init_gain=1.0)


class ConvMixer(nn.Module):
    """ConvMixer-192/6: a 7x7 stride-7 patch embedding, then blocks of a residual 9x9 depthwise
    conv and a 1x1 pointwise conv, each followed by GELU and BatchNorm (post-activation BN),
    on a 16x16 map of a 112x112 image; GAP + Linear."""

    def __init__(self, d=192, depth=6, k=9, patch=7, classes=100):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, d, patch, patch), nn.GELU(), nn.BatchNorm2d(d))
        self.dw = nn.ModuleList(
            nn.Sequential(nn.Conv2d(d, d, k, 1, k // 2, groups=d), nn.GELU(), nn.BatchNorm2d(d))
            for _ in range(depth)
        )
        self.pw = nn.ModuleList(
            nn.Sequential(nn.Conv2d(d, d, 1), nn.GELU(), nn.BatchNorm2d(d)) for _ in range(depth)
        )
        self.fc = nn.Linear(d, classes)

    def forward(self, x):
        x = self.stem(x)
        for dw, pw in zip(self.dw, self.pw):
            x = pw(x + dw(x))
        return self.fc(x.mean((2, 3)))


def m_convmixer():
    return custom(ConvMixer, image_inputs(112), ["logits"], init_gain=1.0)


class FastViT(nn.Module):
    """FastViT-like in its train-time (unreparameterised) form: MobileOne stem (parallel 3x3 /
    1x1 conv-BN branches, a BN identity branch on the depthwise layer), RepMixer token mixing
    x + ls * (BN(dwconv3x3 branches)(x) - BN(x)), ConvFFN (7x7 depthwise + BN, 1x1 GELU
    MLP), large-kernel patch embeddings (7x7 stride-2 depthwise with a parallel 3x3, then a
    MobileOne 1x1), a 7x7 depthwise conditional position encoding and multi-head attention
    blocks in the last stage; 128x128."""

    class MobileOne(nn.Module):
        def __init__(self, cin, cout, k, s, groups, branches=2, act=True):
            super().__init__()
            self.convs = nn.ModuleList(
                cba(cin, cout, k, s, groups, act=None) for _ in range(branches)
            )
            self.scale = cba(cin, cout, 1, s, groups, act=None) if k > 1 else None
            self.skip = nn.BatchNorm2d(cout) if cin == cout and s == 1 else None
            self.act = nn.GELU() if act else nn.Identity()

        def forward(self, x):
            y = sum(c(x) for c in self.convs)
            if self.scale is not None:
                y = y + self.scale(x)
            if self.skip is not None:
                y = y + self.skip(x)
            return self.act(y)

    class RepMixer(nn.Module):
        def __init__(self, d):
            super().__init__()
            self.norm = FastViT.MobileOne(d, d, 3, 1, d, branches=0, act=False)
            self.mixer = FastViT.MobileOne(d, d, 3, 1, d, branches=1, act=False)
            self.ls = nn.Parameter(torch.full((d, 1, 1), 0.5))

        def forward(self, x):
            return x + self.ls * (self.mixer(x) - self.norm(x))

    class ConvFFN(nn.Module):
        def __init__(self, d, r=3):
            super().__init__()
            self.dw = cba(d, d, 7, 1, d, act=None)
            self.f = nn.Sequential(nn.Conv2d(d, r * d, 1), nn.GELU(), nn.Conv2d(r * d, d, 1))
            self.ls = nn.Parameter(torch.full((d, 1, 1), 0.5))

        def forward(self, x):
            return x + self.ls * self.f(self.dw(x))

    class Embed(nn.Module):
        def __init__(self, cin, cout):
            super().__init__()
            self.large = cba(cin, cout, 7, 2, cin, act=None)
            self.small = cba(cin, cout, 3, 2, cin, act=None)
            self.pw = FastViT.MobileOne(cout, cout, 1, 1, 1, branches=1)

        def forward(self, x):
            return self.pw(F.gelu(self.large(x) + self.small(x)))

    class AttnBlock(nn.Module):
        def __init__(self, d, heads):
            super().__init__()
            self.bn, self.att = nn.BatchNorm2d(d), Attention(d, heads)
            self.ffn = FastViT.ConvFFN(d)
            self.ls = nn.Parameter(torch.full((d, 1, 1), 0.5))

        def forward(self, x):
            n, c, h, w = x.shape
            y = self.att(self.bn(x).flatten(2).transpose(1, 2)).transpose(1, 2)
            return self.ffn(x + self.ls * y.reshape(n, c, h, w))

    def __init__(self, dims=(32, 64, 128, 256), depths=(1, 2, 3, 1), classes=100):
        super().__init__()
        M = FastViT.MobileOne
        self.stem = nn.Sequential(
            M(3, dims[0], 3, 2, 1), M(dims[0], dims[0], 3, 2, dims[0]), M(dims[0], dims[0], 1, 1, 1)
        )
        layers = []
        for i, (d, n) in enumerate(zip(dims, depths)):
            if i:
                layers.append(FastViT.Embed(dims[i - 1], d))
            if i == len(dims) - 1:
                layers.append(_CPE(d))
                layers += [FastViT.AttnBlock(d, 4) for _ in range(n)]
            else:
                for _ in range(n):
                    layers += [FastViT.RepMixer(d), FastViT.ConvFFN(d)]
        self.body = nn.Sequential(*layers)
        self.head = M(dims[-1], 2 * dims[-1], 3, 1, dims[-1], branches=1)
        self.fc = nn.Linear(2 * dims[-1], classes)

    def forward(self, x):
        return self.fc(self.head(self.body(self.stem(x))).mean((2, 3)))


class _CPE(nn.Module):
    """Conditional position encoding: x + depthwise 7x7 conv(x)."""

    def __init__(self, d, k=7):
        super().__init__()
        self.conv = nn.Conv2d(d, d, k, 1, k // 2, groups=d)

    def forward(self, x):
        return x + self.conv(x)


def m_fastvit():
    return custom(FastViT, image_inputs(128), ["logits"], init_gain=0.7)


class MobileNeXt(nn.Module):
    """MobileNeXt: sandglass blocks - depthwise 3x3 + BN + ReLU6 on the wide input, a linear 1x1
    reduction, a 1x1 expansion + ReLU6, a second (strided) depthwise 3x3 + BN on the wide
    output - with the shortcut at the high-dimensional ends and only on the first half of the
    channels (identity tensor multiplier 0.5: Slice, Add, Concat); 144x144."""

    class Sandglass(nn.Module):
        def __init__(self, cin, cout, s, t):
            super().__init__()
            mid = divisible(cin / t)
            self.f = nn.Sequential(
                cba(cin, cin, 3, 1, cin, act=nn.ReLU6),
                cba(cin, mid, act=None),
                cba(mid, cout, act=nn.ReLU6),
                cba(cout, cout, 3, s, cout, act=None),
            )
            self.res = s == 1 and cin == cout
            self.half = cout // 2

        def forward(self, x):
            y = self.f(x)
            if not self.res:
                return y
            return torch.cat([y[:, : self.half] + x[:, : self.half], y[:, self.half :]], 1)

    def __init__(self, classes=100):
        super().__init__()
        S = MobileNeXt.Sandglass
        self.stem = cba(3, 32, 3, 2, act=nn.ReLU6)
        cfg = [  # cin, cout, s, t
            (32, 96, 2, 2),
            (96, 144, 1, 6),
            (144, 144, 1, 6),
            (144, 192, 2, 6),
            (192, 192, 1, 6),
            (192, 288, 2, 6),
            (288, 288, 1, 6),
            (288, 384, 1, 6),
            (384, 576, 2, 6),
            (576, 576, 1, 6),
            (576, 960, 1, 6),
        ]
        self.blocks = nn.Sequential(*[S(*c) for c in cfg])
        self.fc = nn.Linear(960, classes)

    def forward(self, x):
        return self.fc(self.blocks(self.stem(x)).mean((2, 3)))


def m_mobilenext():
    return custom(MobileNeXt, image_inputs(144), ["logits"], init_gain=1.0)


class CoordAttNet(nn.Module):
    """MobileNetV2 with coordinate attention after each depthwise conv: average pools along W
    and along H (two directional maps), concatenated along space, a shared 1x1 conv + BN +
    hard-swish, split back, two 1x1 convs + sigmoid, x * a_h * a_w; 160x128 (non-square)."""

    class CA(nn.Module):
        def __init__(self, c, r=8):
            super().__init__()
            mid = max(8, c // r)
            self.conv = cba(c, mid, act=nn.Hardswish)
            self.ah, self.aw = nn.Conv2d(mid, c, 1), nn.Conv2d(mid, c, 1)

        def forward(self, x):
            h, w = x.shape[2:]
            xh = x.mean(3, keepdim=True)  # (n, c, h, 1)
            xw = x.mean(2, keepdim=True).transpose(2, 3)  # (n, c, w, 1)
            y = self.conv(torch.cat([xh, xw], 2))
            yh, yw = torch.split(y, [h, w], 2)
            return x * torch.sigmoid(self.ah(yh)) * torch.sigmoid(self.aw(yw.transpose(2, 3)))

    class IR(nn.Module):
        def __init__(self, cin, cout, s, e):
            super().__init__()
            mid = cin * e
            self.f = nn.Sequential(
                cba(cin, mid, act=nn.ReLU6) if e > 1 else nn.Identity(),
                cba(mid, mid, 3, s, mid, act=nn.ReLU6),
                CoordAttNet.CA(mid),
                cba(mid, cout, act=None),
            )
            self.res = s == 1 and cin == cout

        def forward(self, x):
            return x + self.f(x) if self.res else self.f(x)

    def __init__(self, classes=100):
        super().__init__()
        R = CoordAttNet.IR
        self.stem = cba(3, 32, 3, 2, act=nn.ReLU6)
        cfg = [(32, 16, 1, 1), (16, 24, 2, 6), (24, 24, 1, 6), (24, 32, 2, 6), (32, 32, 1, 6)]
        cfg += [(32, 64, 2, 6), (64, 64, 1, 6), (64, 96, 1, 6), (96, 160, 2, 6), (160, 320, 1, 6)]
        self.blocks = nn.Sequential(*[R(*c) for c in cfg])
        self.head = cba(320, 1280, act=nn.ReLU6)
        self.fc = nn.Linear(1280, classes)

    def forward(self, x):
        return self.fc(self.head(self.blocks(self.stem(x))).mean((2, 3)))


def m_coordatt_mbv2():
    return custom(CoordAttNet, image_inputs(160, 128), ["logits"], init_gain=1.0)


class ECACBAMNet(nn.Module):
    """An MBConv net mixing two attention modules: ECA (global average pool, a Conv1d over the
    channel axis with a kernel size adapted to the width (3/5/7), sigmoid) in the first stages
    and CBAM (channel attention from a shared MLP over avg- and max-pooled descriptors, then
    spatial attention from a 7x7 conv on the channel mean and max) in the later ones; SiLU,
    5x5 depthwise in stage 3; 128x128."""

    class ECA(nn.Module):
        def __init__(self, c):
            super().__init__()
            k = int(abs(math.log2(c) / 2 + 0.5))
            k = k if k % 2 else k + 1
            self.conv = nn.Conv1d(1, 1, k, 1, k // 2, bias=False)

        def forward(self, x):
            y = self.conv(x.mean((2, 3)).unsqueeze(1))  # (n, 1, c)
            return x * torch.sigmoid(y).transpose(1, 2).unsqueeze(-1)

    class CBAM(nn.Module):
        def __init__(self, c, r=8):
            super().__init__()
            self.mlp = nn.Sequential(nn.Linear(c, c // r), nn.ReLU(), nn.Linear(c // r, c))
            self.spatial = cba(2, 1, 7, act=None)

        def forward(self, x):
            a = self.mlp(x.mean((2, 3))) + self.mlp(x.amax((2, 3)))
            x = x * torch.sigmoid(a)[:, :, None, None]
            s = torch.cat([x.mean(1, keepdim=True), x.amax(1, keepdim=True)], 1)
            return x * torch.sigmoid(self.spatial(s))

    class MB(nn.Module):
        def __init__(self, cin, cout, k, s, e, att):
            super().__init__()
            mid = cin * e
            A = ECACBAMNet.ECA if att == "eca" else ECACBAMNet.CBAM
            self.f = nn.Sequential(
                cba(cin, mid, act=nn.SiLU),
                cba(mid, mid, k, s, mid, act=nn.SiLU),
                A(mid),
                cba(mid, cout, act=None),
            )
            self.res = s == 1 and cin == cout

        def forward(self, x):
            return x + self.f(x) if self.res else self.f(x)

    def __init__(self, classes=100):
        super().__init__()
        B = ECACBAMNet.MB
        self.stem = cba(3, 24, 3, 2, act=nn.SiLU)
        cfg = [
            (24, 24, 3, 1, 1, "eca"),
            (24, 40, 3, 2, 4, "eca"),
            (40, 40, 3, 1, 4, "eca"),
            (40, 64, 5, 2, 4, "eca"),
            (64, 64, 5, 1, 4, "cbam"),
            (64, 112, 3, 2, 4, "cbam"),
            (112, 112, 3, 1, 4, "cbam"),
            (112, 192, 3, 2, 4, "cbam"),
        ]
        self.blocks = nn.Sequential(*[B(*c) for c in cfg])
        self.head = cba(192, 768, act=nn.SiLU)
        self.fc = nn.Linear(768, classes)

    def forward(self, x):
        return self.fc(self.head(self.blocks(self.stem(x))).mean((2, 3)))


def m_eca_cbam():
    return custom(ECACBAMNet, image_inputs(128), ["logits"], init_gain=1.0)


# ================================================================ embedding-heavy
AUTOINT_CARDS = (1000, 300, 50, 12, 7, 24, 2000, 90, 400, 5, 31, 150, 3000, 60)


class AutoInt(nn.Module):
    """AutoInt: 14 categorical fields looked up in one shared table through in-graph offsets
    (a Cumsum-derived constant added to the ids), 4 dense features embedded as value * vector,
    3 interacting layers of multi-head self-attention over the 18 field embeddings (2 heads,
    a residual projection, ReLU), a flattened Linear output plus a small DNN; sigmoid."""

    def __init__(self, d=16, n_dense=4, layers=3, heads=2, att=32):
        super().__init__()
        offs = torch.tensor((0,) + AUTOINT_CARDS[:-1]).cumsum(0)
        self.register_buffer("offs", offs, False)
        self.emb = nn.Embedding(sum(AUTOINT_CARDS), d)
        self.dense = nn.Parameter(torch.randn(n_dense, d) * 0.5)
        self.heads = heads
        self.layers = nn.ModuleList()
        din = d
        for _ in range(layers):
            self.layers.append(
                nn.ModuleDict(
                    {
                        "q": nn.Linear(din, att, bias=False),
                        "k": nn.Linear(din, att, bias=False),
                        "v": nn.Linear(din, att, bias=False),
                        "res": nn.Linear(din, att, bias=False),
                    }
                )
            )
            din = att
        f = len(AUTOINT_CARDS) + n_dense
        self.out = nn.Linear(f * att, 1)
        self.dnn = nn.Sequential(nn.Linear(f * d, 128), nn.ReLU(), nn.Linear(128, 1))
        nn.init.normal_(self.emb.weight, std=0.5)

    def forward(self, cats, dense):  # (N, 14) int64, (N, 4) float
        x = torch.cat([self.emb(cats + self.offs), dense.unsqueeze(-1) * self.dense], 1)
        e0 = x
        n, f, _ = x.shape
        for lay in self.layers:
            q, k, v = (lay[t](x).reshape(n, f, self.heads, -1).transpose(1, 2) for t in "qkv")
            a = (q @ k.transpose(-2, -1)).softmax(-1)
            x = F.relu((a @ v).transpose(1, 2).reshape(n, f, -1) + lay["res"](x))
        return torch.sigmoid(self.out(x.flatten(1)) + self.dnn(e0.flatten(1))).squeeze(1)


def m_autoint():
    g = torch.Generator().manual_seed(81)
    cats = torch.stack([torch.randint(0, c, (1,), generator=g) for c in AUTOINT_CARDS], 1)
    inp = {"cats": cats, "dense": torch.randn(1, 4, generator=g)}
    return custom(AutoInt, inp, ["ctr"], init_gain=1.0)


class FiBiNET(nn.Module):
    """FiBiNET: 16 fields (16 tables, d 12); a SENET layer (mean over d -> FC 16->4->16 ReLU
    -> field weights) re-weights the embeddings; "field-each" bilinear interactions
    (v_i W_i) * v_j over all 120 pairs i < j, gathered by index lists, on both the original and
    the SENET embeddings; concatenated into a DNN; plus a first-order term; sigmoid."""

    def __init__(self, fields=16, d=12, r=4):
        super().__init__()
        self.cards = [100 + 613 * i % 4000 for i in range(fields)]
        self.emb = nn.ModuleList(nn.Embedding(c, d) for c in self.cards)
        self.lin = nn.ModuleList(nn.Embedding(c, 1) for c in self.cards)
        self.se = nn.Sequential(
            nn.Linear(fields, fields // r), nn.ReLU(), nn.Linear(fields // r, fields), nn.ReLU()
        )
        self.W = nn.Parameter(torch.randn(fields, d, d) / d**0.5)
        i, j = torch.triu_indices(fields, fields, 1)
        self.register_buffer("pi", i, False)
        self.register_buffer("pj", j, False)
        npair = len(i)
        self.dnn = nn.Sequential(
            nn.Linear(2 * npair * d, 256),
            nn.ReLU(),
            nn.Linear(256, 128),
            nn.ReLU(),
            nn.Linear(128, 1),
        )
        for e in list(self.emb) + list(self.lin):
            nn.init.normal_(e.weight, std=0.5)

    def bilinear(self, e):  # (N, F, d) -> (N, P * d)
        vw = torch.einsum("nfd,fde->nfe", e, self.W)
        return (vw[:, self.pi] * e[:, self.pj]).flatten(1)

    def forward(self, cats):  # (N, 16) int64
        e = torch.stack([m(cats[:, i]) for i, m in enumerate(self.emb)], 1)
        w = self.se(e.mean(2))
        v = e * w.unsqueeze(-1)
        first = sum(m(cats[:, i]) for i, m in enumerate(self.lin)).squeeze(1)
        z = self.dnn(torch.cat([self.bilinear(e), self.bilinear(v)], 1)).squeeze(1)
        return torch.sigmoid(first + z)


def m_fibinet():
    g = torch.Generator().manual_seed(82)
    cards = [100 + 613 * i % 4000 for i in range(16)]
    cats = torch.stack([torch.randint(0, c, (1,), generator=g) for c in cards], 1)
    return custom(FiBiNET, {"cats": cats}, ["ctr"], init_gain=1.0)


class BERT4Rec(nn.Module):
    """BERT4Rec: a 50-step item history (ids 1..4000, 0 = left padding, 4001 = [mask] at the
    last position), item + learned position embeddings, LayerNorm, 2 bidirectional post-LN
    transformer layers with a key-padding mask (GELU FFN), an output projection + GELU +
    LayerNorm and scores against the tied item embeddings (+ bias) at every position."""

    def __init__(self, items=4000, d=64, heads=2, layers=2, t=50):
        super().__init__()
        self.heads = heads
        self.emb = nn.Embedding(items + 2, d, padding_idx=0)
        self.pos = nn.Parameter(torch.randn(1, t, d) * 0.2)
        self.ln = nn.LayerNorm(d)
        self.layers = nn.ModuleList(
            nn.ModuleDict(
                {
                    "qkv": nn.Linear(d, 3 * d),
                    "o": nn.Linear(d, d),
                    "n1": nn.LayerNorm(d),
                    "ff": mlp(d, 4),
                    "n2": nn.LayerNorm(d),
                }
            )
            for _ in range(layers)
        )
        self.proj = nn.Sequential(nn.Linear(d, d), nn.GELU(), nn.LayerNorm(d))
        self.bias = nn.Parameter(torch.zeros(items + 2).uniform_(-0.1, 0.1))
        nn.init.normal_(self.emb.weight, std=0.5)

    def forward(self, seq):  # (N, T) int64
        n, t = seq.shape
        keep = (seq > 0)[:, None, None, :]
        x = self.ln(self.emb(seq) + self.pos)
        h = self.heads
        for lay in self.layers:
            q, k, v = lay["qkv"](x).reshape(n, t, 3, h, -1).permute(2, 0, 3, 1, 4)
            a = q @ k.transpose(-2, -1) * q.shape[-1] ** -0.5
            a = a.masked_fill(~keep, -1e4).softmax(-1)
            x = lay["n1"](x + lay["o"]((a @ v).transpose(1, 2).reshape(n, t, -1)))
            x = lay["n2"](x + lay["ff"](x))
        return self.proj(x) @ self.emb.weight.t() + self.bias


def m_bert4rec():
    g = torch.Generator().manual_seed(83)
    seq = torch.randint(1, 4001, (1, 50), generator=g)
    seq[0, :14] = 0  # left padding
    seq[0, -1] = 4001  # [mask]: predict the next item
    return custom(BERT4Rec, {"item_seq": seq}, ["scores"], init_gain=1.0)


class DSSM(nn.Module):
    """DSSM two-tower retrieval: a query of up to 24 hashed letter-trigram ids and 5 candidate
    documents of up to 40 ids each (0 = padding), each bag summed through a 30000 x 96
    embedding with a mask and divided by sqrt(length), separate tanh MLP towers (96-256-128),
    cosine similarity scaled by a learned gamma, softmax over the candidates."""

    def __init__(self, vocab=30000, d=96):
        super().__init__()
        self.qe, self.de = nn.Embedding(vocab, d), nn.Embedding(vocab, d)
        self.qt = nn.Sequential(nn.Linear(d, 256), nn.Tanh(), nn.Linear(256, 128), nn.Tanh())
        self.dt = nn.Sequential(nn.Linear(d, 256), nn.Tanh(), nn.Linear(256, 128), nn.Tanh())
        self.gamma = nn.Parameter(torch.tensor(8.0))
        nn.init.normal_(self.qe.weight, std=0.3)
        nn.init.normal_(self.de.weight, std=0.3)

    @staticmethod
    def bag(emb, ids):
        m = (ids > 0).float().unsqueeze(-1)
        return (emb(ids) * m).sum(-2) / m.sum(-2).clamp(min=1).sqrt()

    def forward(self, query, docs):  # (N, 24), (N, 5, 40) int64
        q = F.normalize(self.qt(self.bag(self.qe, query)), dim=-1)
        d = F.normalize(self.dt(self.bag(self.de, docs)), dim=-1)
        cos = (d * q.unsqueeze(1)).sum(-1)
        return (self.gamma * cos).softmax(-1), cos


def m_dssm():
    g = torch.Generator().manual_seed(84)
    q = torch.randint(1, 30000, (1, 24), generator=g)
    q[0, 17:] = 0
    docs = torch.randint(1, 30000, (1, 5, 40), generator=g)
    lens = torch.tensor([40, 12, 33, 5, 26])
    docs = docs * (torch.arange(40) < lens[:, None]).long()
    return custom(DSSM, {"query": q, "docs": docs}, ["probs", "cosine"], init_gain=1.0)


# ================================================================ small ViTs
def m_timesformer():
    """TimeSformer: divided space-time attention - per layer a temporal attention over the 4
    frames of each patch position (with a temporal Linear), then spatial attention over the
    patches of each frame with the CLS token repeated per frame and averaged back; learned
    space and time embeddings; 4 frames of 64x64 (patch 16)."""
    from transformers import TimesformerConfig

    cfg = TimesformerConfig(
        image_size=64,
        patch_size=16,
        num_frames=4,
        hidden_size=192,
        num_hidden_layers=3,
        num_attention_heads=4,
        intermediate_size=512,
        attention_type="divided_space_time",
    )
    g = torch.Generator().manual_seed(91)
    inp = {"pixel_values": torch.randn(1, 4, 3, 64, 64, generator=g)}
    wrap, inp, outs = hf("TimesformerModel", cfg, inp, ["last_hidden_state"], jit=True)
    randomize_norms(wrap)
    return wrap, inp, outs


def m_vit_mae():
    """ViT-MAE pre-training forward with the shuffle noise as an input: argsort of the noise
    (twice: shuffle and restore), GatherElements of the kept 25% of the 8x8 patches, encoder on
    the visible tokens, mask tokens appended and unshuffled by the restore indices, a narrower
    decoder (fixed 2-D sin-cos positions) predicting the pixels of every patch; 128x128."""
    from transformers import ViTMAEConfig

    cfg = ViTMAEConfig(
        hidden_size=192,
        num_hidden_layers=4,
        num_attention_heads=4,
        intermediate_size=512,
        image_size=128,
        patch_size=16,
        decoder_num_attention_heads=4,
        decoder_hidden_size=128,
        decoder_num_hidden_layers=2,
        decoder_intermediate_size=256,
        mask_ratio=0.75,
    )
    g = torch.Generator().manual_seed(92)
    inp = {
        "pixel_values": image_inputs(128)["pixel_values"],
        "noise": torch.rand(1, 64, generator=g),
    }
    wrap, inp, outs = hf("ViTMAEForPreTraining", cfg, inp, ["logits", "mask"], jit=True)
    randomize_norms(wrap)
    return wrap, inp, outs


def _vit_block(d, heads, r=4):
    return nn.ModuleList([nn.LayerNorm(d), Attention(d, heads), nn.LayerNorm(d), mlp(d, r)])


def _run_blocks(x, blocks):
    for n1, att, n2, ff in blocks:
        x = x + att(n1(x))
        x = x + ff(n2(x))
    return x


class CrossViT(nn.Module):
    """CrossViT-like dual-branch ViT: a small-patch branch (patch 12 on the 96x96 image, 64
    tokens, d 96) and a large-patch branch (the image bilinearly resized to 112x112, patch 16,
    49 tokens, d 192), each with CLS + learned positions and its own blocks; cross-attention
    fusion where each branch's CLS, projected to the other width, attends over the other
    branch's patch tokens (query = CLS only) and is projected back; the two heads averaged."""

    def __init__(self, ds=96, dl=192, heads=3, fuse=2, classes=100):
        super().__init__()
        self.ps, self.pl = nn.Conv2d(3, ds, 12, 12), nn.Conv2d(3, dl, 16, 16)
        self.cls_s = nn.Parameter(torch.randn(1, 1, ds) * 0.5)
        self.cls_l = nn.Parameter(torch.randn(1, 1, dl) * 0.5)
        self.pos_s = nn.Parameter(torch.randn(1, 65, ds) * 0.2)
        self.pos_l = nn.Parameter(torch.randn(1, 50, dl) * 0.2)
        self.stages = nn.ModuleList()
        for _ in range(fuse):
            self.stages.append(
                nn.ModuleDict(
                    {
                        "s": nn.ModuleList([_vit_block(ds, heads, 3)]),
                        "l": nn.ModuleList([_vit_block(dl, heads, 3) for _ in range(2)]),
                        "s2l": nn.Sequential(nn.LayerNorm(ds), nn.GELU(), nn.Linear(ds, dl)),
                        "l2s": nn.Sequential(nn.LayerNorm(dl), nn.GELU(), nn.Linear(dl, ds)),
                        "att_l": Attention(dl, heads),
                        "att_s": Attention(ds, heads),
                        "back_s": nn.Sequential(nn.LayerNorm(dl), nn.GELU(), nn.Linear(dl, ds)),
                        "back_l": nn.Sequential(nn.LayerNorm(ds), nn.GELU(), nn.Linear(ds, dl)),
                    }
                )
            )
        self.ns, self.nl = nn.LayerNorm(ds), nn.LayerNorm(dl)
        self.hs, self.hl = nn.Linear(ds, classes), nn.Linear(dl, classes)

    def forward(self, x):
        n = x.shape[0]
        xl = F.interpolate(x, size=(112, 112), mode="bilinear", align_corners=False)
        s = self.ps(x).flatten(2).transpose(1, 2)
        l_ = self.pl(xl).flatten(2).transpose(1, 2)
        s = torch.cat([self.cls_s.expand(n, -1, -1), s], 1) + self.pos_s
        l_ = torch.cat([self.cls_l.expand(n, -1, -1), l_], 1) + self.pos_l
        for st in self.stages:
            s, l_ = _run_blocks(s, st["s"]), _run_blocks(l_, st["l"])
            cs = st["s2l"](s[:, :1])  # small CLS in the large width
            cs = cs + st["att_l"](cs, torch.cat([cs, l_[:, 1:]], 1))
            cl = st["l2s"](l_[:, :1])
            cl = cl + st["att_s"](cl, torch.cat([cl, s[:, 1:]], 1))
            s = torch.cat([s[:, :1] + st["back_s"](cs), s[:, 1:]], 1)
            l_ = torch.cat([l_[:, :1] + st["back_l"](cl), l_[:, 1:]], 1)
        return (self.hs(self.ns(s[:, 0])) + self.hl(self.nl(l_[:, 0]))) / 2


def m_crossvit():
    return custom(CrossViT, image_inputs(96), ["logits"])


class TNT(nn.Module):
    """Transformer in Transformer: 36 outer 16x16 patches of a 96x96 image (extracted by
    reshape + permute), each split by a 4x4 stride-4 conv into 16 inner pixel tokens (d 24)
    with an inner transformer (2 heads); the flattened inner tokens are projected (LayerNorm,
    Linear) and added into the outer patch tokens (d 192, CLS, 4 heads) every block."""

    def __init__(self, img=96, patch=16, di=24, do=192, depth=4, classes=100):
        super().__init__()
        self.g = img // patch
        self.patch = patch
        self.pix = nn.Conv2d(3, di, 4, 4)
        self.inner_pos = nn.Parameter(torch.randn(1, 16, di) * 0.2)
        self.proj0 = nn.Sequential(nn.LayerNorm(16 * di), nn.Linear(16 * di, do), nn.LayerNorm(do))
        self.cls = nn.Parameter(torch.randn(1, 1, do) * 0.5)
        self.pos = nn.Parameter(torch.randn(1, 1 + self.g**2, do) * 0.2)
        self.inner = nn.ModuleList(_vit_block(di, 2) for _ in range(depth))
        self.outer = nn.ModuleList(_vit_block(do, 4) for _ in range(depth))
        self.proj = nn.ModuleList(
            nn.Sequential(nn.LayerNorm(16 * di), nn.Linear(16 * di, do)) for _ in range(depth)
        )
        self.norm = nn.LayerNorm(do)
        self.fc = nn.Linear(do, classes)

    def forward(self, x):
        n, g, p = x.shape[0], self.g, self.patch
        pt = x.reshape(n, 3, g, p, g, p).permute(0, 2, 4, 1, 3, 5).reshape(n * g * g, 3, p, p)
        inner = self.pix(pt).flatten(2).transpose(1, 2) + self.inner_pos  # (n*36, 16, di)
        outer = self.proj0(inner.reshape(n, g * g, -1))
        outer = torch.cat([self.cls.expand(n, -1, -1), outer], 1) + self.pos
        for blk_i, blk_o, pr in zip(self.inner, self.outer, self.proj):
            inner = _run_blocks(inner, [blk_i])
            add = pr(inner.reshape(n, g * g, -1))
            outer = torch.cat([outer[:, :1], outer[:, 1:] + add], 1)
            outer = _run_blocks(outer, [blk_o])
        return self.fc(self.norm(outer[:, 0]))


def m_tnt():
    return custom(TNT, image_inputs(96), ["logits"])


# ================================================================ window / hierarchical attention
class EfficientViTMSRA(nn.Module):
    """EfficientViT (MSRA, M0-like): sandwich blocks (depthwise conv residual, ReLU FFN,
    cascaded group attention, depthwise conv, FFN); cascaded group attention splits the
    channels over 4 heads, each head's input adds the previous head's output, q passes a
    per-head depthwise conv (k 7/5/3/3), learned attention biases indexed by |dx|, |dy|
    offsets, 7x7 local windows on the 14x14 map; patch-merging with SE between stages,
    BN-Linear head; 224x224 (a 16x stride stem)."""

    class ConvBN(nn.Sequential):
        def __init__(self, cin, cout, k=1, s=1, groups=1):
            super().__init__(
                nn.Conv2d(cin, cout, k, s, k // 2, groups=groups, bias=False), nn.BatchNorm2d(cout)
            )

    class CGA(nn.Module):
        def __init__(self, d, heads, kd, res, kernels=(7, 5, 3, 3)):
            super().__init__()
            C = EfficientViTMSRA.ConvBN
            self.h, self.kd, self.vd = heads, kd, d // heads
            self.qkv = nn.ModuleList(C(d // heads, 2 * kd + self.vd) for _ in range(heads))
            self.dws = nn.ModuleList(C(kd, kd, kernels[i], 1, kd) for i in range(heads))
            self.proj = nn.Sequential(nn.ReLU(), C(self.vd * heads, d))
            pts = [(i, j) for i in range(res) for j in range(res)]
            offs, idx = {}, []
            for p1 in pts:
                for p2 in pts:
                    o = (abs(p1[0] - p2[0]), abs(p1[1] - p2[1]))
                    idx.append(offs.setdefault(o, len(offs)))
            self.bias = nn.Parameter(torch.randn(heads, len(offs)) * 0.5)
            self.register_buffer("idx", torch.tensor(idx).view(res * res, res * res), False)

        def forward(self, x):
            n, c, h, w = x.shape
            chunks = x.chunk(self.h, 1)
            outs, feat = [], chunks[0]
            for i, (qkv, dw) in enumerate(zip(self.qkv, self.dws)):
                if i:
                    feat = feat + chunks[i]
                q, k, v = qkv(feat).split([self.kd, self.kd, self.vd], 1)
                q = dw(q)
                q, k, v = q.flatten(2), k.flatten(2), v.flatten(2)
                a = (q.transpose(-2, -1) @ k) * self.kd**-0.5 + self.bias[i][self.idx]
                feat = (v @ a.softmax(-1).transpose(-2, -1)).reshape(n, self.vd, h, w)
                outs.append(feat)
            return self.proj(torch.cat(outs, 1))

    class LocalWindow(nn.Module):
        def __init__(self, d, heads, kd, win, res):
            super().__init__()
            self.win = win
            self.att = EfficientViTMSRA.CGA(d, heads, kd, min(win, res))

        def forward(self, x):
            n, c, h, w = x.shape
            s = self.win
            if h <= s and w <= s:
                return self.att(x)
            y = x.reshape(n, c, h // s, s, w // s, s).permute(0, 2, 4, 1, 3, 5)
            y = self.att(y.reshape(-1, c, s, s)).reshape(n, h // s, w // s, c, s, s)
            return y.permute(0, 3, 1, 4, 2, 5).reshape(n, c, h, w)

    class Block(nn.Module):
        def __init__(self, d, heads, kd, win, res):
            super().__init__()
            C = EfficientViTMSRA.ConvBN

            def ffn():
                return nn.Sequential(C(d, 2 * d), nn.ReLU(), C(2 * d, d))

            self.dw0, self.ffn0 = C(d, d, 3, 1, d), ffn()
            self.mix = EfficientViTMSRA.LocalWindow(d, heads, kd, win, res)
            self.dw1, self.ffn1 = C(d, d, 3, 1, d), ffn()

        def forward(self, x):
            x = x + self.ffn0(x + self.dw0(x))
            x = x + self.mix(x)
            x = x + self.dw1(x)
            return x + self.ffn1(x)

    class Merge(nn.Module):
        def __init__(self, cin, cout):
            super().__init__()
            C = EfficientViTMSRA.ConvBN
            self.pre = nn.Sequential(C(cin, cin, 3, 1, cin), nn.ReLU())
            self.f = nn.Sequential(
                C(cin, 4 * cin),
                nn.ReLU(),
                C(4 * cin, 4 * cin, 3, 2, 4 * cin),
                nn.ReLU(),
                SE(4 * cin, cin, gate=nn.Sigmoid),
                C(4 * cin, cout),
            )
            self.post = C(cout, cout, 3, 1, cout)

        def forward(self, x):
            y = self.f(x + self.pre(x))
            return y + self.post(y)

    def __init__(self, dims=(64, 128, 192), depths=(1, 2, 3), heads=4, kd=16, classes=100):
        super().__init__()
        C = EfficientViTMSRA.ConvBN
        self.stem = nn.Sequential(
            C(3, 16, 3, 2),
            nn.ReLU(),
            C(16, 32, 3, 2),
            nn.ReLU(),
            C(32, 64, 3, 2),
            nn.ReLU(),
            C(64, dims[0], 3, 2),
        )
        layers, res = [], 14
        for i, (d, n) in enumerate(zip(dims, depths)):
            if i:
                layers.append(EfficientViTMSRA.Merge(dims[i - 1], d))
                res = (res - 1) // 2 + 1
            layers += [EfficientViTMSRA.Block(d, heads, kd, 7, res) for _ in range(n)]
        self.body = nn.Sequential(*layers)
        self.head = nn.Sequential(nn.BatchNorm1d(dims[-1]), nn.Linear(dims[-1], classes))

    def forward(self, x):
        return self.head(self.body(self.stem(x)).mean((2, 3)))


def m_efficientvit_msra():
    return custom(EfficientViTMSRA, image_inputs(224), ["logits"], init_gain=0.5)


class CrossFormer(nn.Module):
    """CrossFormer-like: cross-scale embedding layers (parallel convs of kernels 4/8/16/32 at
    stride 4, then 2/4 at stride 2, with unequal output widths, concatenated), alternating
    short-distance (8x8 adjacent groups) and long-distance (groups of tokens sampled at an
    interval: a 6-D permute) attention, dynamic position bias (an MLP over relative offsets
    evaluated in the graph, gathered into the bias); 128x128 -> 32..4 token maps."""

    class DPB(nn.Module):
        def __init__(self, heads, g, hid=16):
            super().__init__()
            self.f = nn.Sequential(
                nn.Linear(2, hid),
                nn.LayerNorm(hid),
                nn.ReLU(),
                nn.Linear(hid, hid),
                nn.LayerNorm(hid),
                nn.ReLU(),
                nn.Linear(hid, heads),
            )
            r = torch.arange(1 - g, g).float()
            self.register_buffer(
                "table", torch.stack(torch.meshgrid(r, r, indexing="ij"), -1).reshape(-1, 2), False
            )
            c = torch.stack(
                torch.meshgrid(torch.arange(g), torch.arange(g), indexing="ij")
            ).flatten(1)
            rel = (c[:, :, None] - c[:, None, :]).permute(1, 2, 0) + g - 1
            self.register_buffer("idx", rel[..., 0] * (2 * g - 1) + rel[..., 1], False)

        def forward(self):
            return self.f(self.table)[self.idx].permute(2, 0, 1)  # (heads, G*G, G*G)

    class Block(nn.Module):
        def __init__(self, d, heads, g, lda):
            super().__init__()
            self.g, self.lda, self.h = g, lda, heads
            self.n1, self.qkv, self.proj = nn.LayerNorm(d), nn.Linear(d, 3 * d), nn.Linear(d, d)
            self.dpb = CrossFormer.DPB(heads, g)
            self.n2, self.mlp = nn.LayerNorm(d), mlp(d, 4)

        def forward(self, x, hw):
            n, L, c = x.shape
            H, W = hw
            g = self.g
            y = self.n1(x).reshape(n, H, W, c)
            if self.lda:  # groups of tokens sampled at interval I
                i_h, i_w = H // g, W // g
                y = y.reshape(n, g, i_h, g, i_w, c).permute(0, 2, 4, 1, 3, 5)
            else:  # adjacent G x G groups
                y = y.reshape(n, H // g, g, W // g, g, c).permute(0, 1, 3, 2, 4, 5)
            gs = y.shape[1:3]
            y = y.reshape(-1, g * g, c)
            b = y.shape[0]
            q, k, v = self.qkv(y).reshape(b, g * g, 3, self.h, -1).permute(2, 0, 3, 1, 4)
            a = q @ k.transpose(-2, -1) * q.shape[-1] ** -0.5 + self.dpb()
            y = self.proj((a.softmax(-1) @ v).transpose(1, 2).reshape(b, g * g, c))
            y = y.reshape(n, gs[0], gs[1], g, g, c)
            if self.lda:
                y = y.permute(0, 3, 1, 4, 2, 5)
            else:
                y = y.permute(0, 1, 3, 2, 4, 5)
            x = x + y.reshape(n, L, c)
            return x + self.mlp(self.n2(x))

    class CEL(nn.Module):
        def __init__(self, cin, cout, ks, s):
            super().__init__()
            outs = [cout // 2 ** (i + 1) for i in range(len(ks) - 1)]
            outs.append(cout - sum(outs))
            self.convs = nn.ModuleList(
                nn.Conv2d(cin, o, k, s, (k - s) // 2) for k, o in zip(ks, outs)
            )
            self.norm = nn.LayerNorm(cout)

        def forward(self, x):
            y = torch.cat([c(x) for c in self.convs], 1)
            return self.norm(y.flatten(2).transpose(1, 2)), y.shape[2:]

    def __init__(
        self, dims=(32, 64, 128, 256), heads=(1, 2, 4, 8), groups=(8, 8, 8, 4), classes=100
    ):
        super().__init__()
        self.cels = nn.ModuleList(
            [CrossFormer.CEL(3, dims[0], (4, 8, 16, 32), 4)]
            + [CrossFormer.CEL(dims[i - 1], dims[i], (2, 4), 2) for i in range(1, 4)]
        )
        self.stages = nn.ModuleList()
        for i, (d, h, g) in enumerate(zip(dims, heads, groups)):
            lda = (True,) if i < 2 else ()
            self.stages.append(nn.ModuleList(CrossFormer.Block(d, h, g, x) for x in (False,) + lda))
        self.norm = nn.LayerNorm(dims[-1])
        self.fc = nn.Linear(dims[-1], classes)

    def forward(self, x):
        n = x.shape[0]
        for cel, blocks in zip(self.cels, self.stages):
            t, hw = cel(x)
            for b in blocks:
                t = b(t, hw)
            x = t.transpose(1, 2).reshape(n, -1, *hw)
        return self.fc(self.norm(t.mean(1)))


def m_crossformer():
    return custom(CrossFormer, image_inputs(128), ["logits"])


class HaloNet(nn.Module):
    """HaloNet-like: ResNet bottlenecks whose 3x3 conv is blocked local self-attention -
    queries from non-overlapping b x b blocks, keys/values from the (b + 2*halo)^2 window
    around each block (zero padding + Unfold with stride b), decomposed relative position
    logits (q . R_y + q . R_x gathered by index buffers); block 8 / halo 2 at 16x16, block 4 /
    halo 1 at 8x8, average-pool striding after the attention; 128x128."""

    class Halo(nn.Module):
        def __init__(self, d, heads, b, halo):
            super().__init__()
            self.h, self.b, self.halo = heads, b, halo
            self.win = b + 2 * halo
            self.dh = d // heads
            self.q = nn.Conv2d(d, d, 1, bias=False)
            self.kv = nn.Conv2d(d, 2 * d, 1, bias=False)
            self.rel_y = nn.Parameter(torch.randn(2 * self.win - 1, self.dh) * 0.3)
            self.rel_x = nn.Parameter(torch.randn(2 * self.win - 1, self.dh) * 0.3)
            # query row i (window row i + halo) vs key row j: offset j - i - halo
            i = torch.arange(b)[:, None]
            j = torch.arange(self.win)[None, :]
            self.register_buffer("ridx", j - i - halo + self.win - 1, False)

        def forward(self, x):
            n, c, H, W = x.shape
            b, w, h, dh = self.b, self.win, self.h, self.dh
            nb = (H // b) * (W // b)
            q = self.q(x).reshape(n, h, dh, H // b, b, W // b, b)
            q = q.permute(0, 1, 3, 5, 4, 6, 2).reshape(n * h, nb, b, b, dh) * dh**-0.5
            kv = F.unfold(self.kv(x), w, stride=b, padding=self.halo)  # (n, 2c*w*w, nb)
            kv = kv.reshape(n, 2, h, dh, w * w, nb).permute(1, 0, 2, 5, 4, 3)
            k, v = kv.reshape(2, n * h, nb, w * w, dh)
            a = q.reshape(n * h, nb, b * b, dh) @ k.transpose(-2, -1)  # (nh, nb, b*b, w*w)
            ry = torch.einsum("zkyxc,yjc->zkyxj", q, self.rel_y[self.ridx])
            rx = torch.einsum("zkyxc,xjc->zkyxj", q, self.rel_x[self.ridx])
            rel = (ry.unsqueeze(-1) + rx.unsqueeze(-2)).reshape(n * h, nb, b * b, w * w)
            o = (a + rel).softmax(-1) @ v  # (nh, nb, b*b, dh)
            o = o.reshape(n, h, H // b, W // b, b, b, dh).permute(0, 1, 6, 2, 4, 3, 5)
            return o.reshape(n, c, H, W)

    class Bottleneck(nn.Module):
        def __init__(self, cin, mid, cout, s, halo=None):
            super().__init__()
            self.c1 = cba(cin, mid)
            if halo is None:
                self.mid = cba(mid, mid, 3, s)
            else:
                pool = nn.AvgPool2d(2, 2) if s > 1 else nn.Identity()
                self.mid = nn.Sequential(
                    HaloNet.Halo(mid, 4, *halo), pool, nn.BatchNorm2d(mid), nn.ReLU()
                )
            self.c3 = cba(mid, cout, act=None)
            self.sc = nn.Identity() if cin == cout and s == 1 else cba(cin, cout, 1, s, act=None)

        def forward(self, x):
            return F.relu(self.c3(self.mid(self.c1(x))) + self.sc(x))

    def __init__(self, classes=100):
        super().__init__()
        B = HaloNet.Bottleneck
        self.stem = nn.Sequential(cba(3, 32, 7, 2), nn.MaxPool2d(3, 2, 1))  # 32x32
        self.body = nn.Sequential(
            B(32, 32, 128, 1),
            B(128, 64, 256, 2),  # 16x16
            B(256, 64, 256, 1, (8, 2)),
            B(256, 128, 512, 1, (8, 2)),
            B(512, 128, 512, 2, (8, 2)),  # attention at 16x16, pooled to 8x8
            B(512, 128, 512, 1, (4, 1)),
        )
        self.fc = nn.Linear(512, classes)

    def forward(self, x):
        return self.fc(self.body(self.stem(x)).mean((2, 3)))


def m_halonet():
    return custom(HaloNet, image_inputs(128), ["logits"], init_gain=1.0)


class BiFormer(nn.Module):
    """BiFormer-like bi-level routing attention: the map is split into 7x7 regions, region
    queries/keys are the region means, a region affinity matrix picks each region's top-k
    regions (TopK), their key/value tokens are gathered (index arithmetic + Gather) and
    token attention runs over them; local context enhancement (5x5 depthwise conv on V),
    depthwise conv position embedding, plain attention in the last stage; 112x112."""

    class BRA(nn.Module):
        def __init__(self, d, heads, topk, s=7):
            super().__init__()
            self.h, self.topk, self.s = heads, topk, s
            self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
            self.lce = nn.Conv2d(d, d, 5, 1, 2, groups=d)

        def forward(self, x):  # (n, H, W, c)
            n, H, W, c = x.shape
            S, h = self.s, self.h
            rh, rw = H // S, W // S
            t = rh * rw
            q, k, v = self.qkv(x).chunk(3, -1)
            lce = self.lce(v.permute(0, 3, 1, 2)).permute(0, 2, 3, 1)

            def regions(z):
                z = z.reshape(n, S, rh, S, rw, c).permute(0, 1, 3, 2, 4, 5)
                return z.reshape(n, S * S, t, c)

            q, k, v = regions(q), regions(k), regions(v)
            ar = q.mean(2) @ k.mean(2).transpose(-2, -1)  # (n, S2, S2)
            idx = ar.topk(self.topk, -1).indices  # (n, S2, k)
            base = (torch.arange(n, device=x.device) * (S * S)).view(n, 1, 1)
            flat = (idx + base).flatten()
            kg = k.reshape(n * S * S, t, c)[flat].reshape(n, S * S, self.topk * t, c)
            vg = v.reshape(n * S * S, t, c)[flat].reshape(n, S * S, self.topk * t, c)

            def heads(z):
                return z.reshape(n, S * S, -1, h, c // h).transpose(2, 3)

            a = (heads(q) @ heads(kg).transpose(-2, -1) * (c // h) ** -0.5).softmax(-1)
            o = (a @ heads(vg)).transpose(2, 3).reshape(n, S, S, rh, rw, c)
            o = o.permute(0, 1, 3, 2, 4, 5).reshape(n, H, W, c)
            return self.proj(o + lce)

    class Block(nn.Module):
        def __init__(self, d, heads, topk):
            super().__init__()
            self.pos = nn.Conv2d(d, d, 3, 1, 1, groups=d)
            self.n1, self.n2 = nn.LayerNorm(d), nn.LayerNorm(d)
            self.att = BiFormer.BRA(d, heads, topk) if topk else Attention(d, heads)
            self.mlp = mlp(d, 3)

        def forward(self, x):  # (n, c, H, W)
            x = x + self.pos(x)
            n, c, H, W = x.shape
            y = x.permute(0, 2, 3, 1)
            if isinstance(self.att, BiFormer.BRA):
                y = y + self.att(self.n1(y))
            else:
                y = y + self.att(self.n1(y.reshape(n, H * W, c))).reshape(n, H, W, c)
            y = y + self.mlp(self.n2(y))
            return y.permute(0, 3, 1, 2)

    def __init__(
        self,
        dims=(32, 64, 128, 256),
        depths=(1, 1, 2, 1),
        heads=(1, 2, 4, 8),
        topks=(2, 4, 8, 0),
        classes=100,
    ):
        super().__init__()
        layers = [
            cba(3, dims[0] // 2, 3, 2, act=nn.GELU),
            cba(dims[0] // 2, dims[0], 3, 2, act=None),
        ]
        for i, (d, n, h, k) in enumerate(zip(dims, depths, heads, topks)):
            if i:
                layers.append(cba(dims[i - 1], d, 3, 2, act=None))
            layers += [BiFormer.Block(d, h, k) for _ in range(n)]
        self.body = nn.Sequential(*layers)
        self.norm = nn.BatchNorm2d(dims[-1])
        self.fc = nn.Linear(dims[-1], classes)

    def forward(self, x):
        return self.fc(self.norm(self.body(x)).mean((2, 3)))


def m_biformer():
    return custom(BiFormer, image_inputs(112), ["logits"])


# ================================================================ 1-D conv audio
class DemucsLite(nn.Module):
    """Demucs-like waveform source separation: the stereo mix normalised by the mono mix's mean
    and std, 4 encoder layers (Conv1d k8 s4 + ReLU, 1x1 Conv1d + GLU), a 2-layer BiLSTM with a
    Linear on the 16-step latent, decoder layers adding the U-Net skip (k3 Conv1d + GLU,
    ConvTranspose1d k8 s4, ReLU except last), 2 stereo sources de-normalised; 4096 samples."""

    def __init__(self, chans=(2, 32, 64, 128, 256), sources=2):
        super().__init__()
        self.sources = sources
        self.enc = nn.ModuleList(
            nn.Sequential(nn.Conv1d(a, b, 8, 4, 2), nn.ReLU(), nn.Conv1d(b, 2 * b, 1), nn.GLU(1))
            for a, b in zip(chans[:-1], chans[1:])
        )
        d = chans[-1]
        self.lstm = nn.LSTM(d, d, 2, batch_first=True, bidirectional=True)
        self.lin = nn.Linear(2 * d, d)
        outs = list(chans[:-1])
        outs[0] = chans[0] * sources
        self.dec = nn.ModuleList(
            nn.Sequential(
                nn.Conv1d(b, 2 * b, 3, 1, 1), nn.GLU(1), nn.ConvTranspose1d(b, a, 8, 4, 2)
            )
            for a, b in zip(outs, chans[1:])
        )

    def forward(self, mix):  # (N, 2, T)
        mono = mix.mean(1, keepdim=True)
        mean, std = mono.mean(-1, keepdim=True), mono.std(-1, keepdim=True)
        x = (mix - mean) / (1e-5 + std)
        skips = []
        for e in self.enc:
            x = e(x)
            skips.append(x)
        y, _ = self.lstm(x.transpose(1, 2))
        x = self.lin(y).transpose(1, 2)
        for i in reversed(range(len(self.dec))):
            x = self.dec[i](x + skips[i])
            if i:
                x = F.relu(x)
        n, _, t = x.shape
        return x.reshape(n, self.sources, -1, t) * std.unsqueeze(1) + mean.unsqueeze(1)


def m_demucs_lite():
    g = torch.Generator().manual_seed(101)
    inp = {"mix": torch.randn(1, 2, 4096, generator=g) * 0.2}
    return custom(DemucsLite, inp, ["sources"], init_gain=1.0)


class Vocos(nn.Module):
    """Vocos-like vocoder up to the spectrum: 64 mels x 48 frames, Conv1d k7 embedding,
    LayerNorm, 6 ConvNeXt-1d blocks (depthwise Conv1d k7, LayerNorm, pointwise 3x GELU MLP,
    layer scale), final LayerNorm, a Linear to n_fft + 2 = 258 channels split into log-magnitude
    (exp, clipped at 100) and phase, giving the complex STFT as (real = mag cos p, imag = mag
    sin p); the inverse STFT itself is left out."""

    class Block(nn.Module):
        def __init__(self, d):
            super().__init__()
            self.dw = nn.Conv1d(d, d, 7, 1, 3, groups=d)
            self.norm, self.f = nn.LayerNorm(d, eps=1e-6), mlp(d, 3)
            self.g = nn.Parameter(torch.full((d,), 0.3))

        def forward(self, x):  # (n, d, t)
            y = self.f(self.norm(self.dw(x).transpose(1, 2))) * self.g
            return x + y.transpose(1, 2)

    def __init__(self, mels=64, d=192, layers=6, n_fft=256):
        super().__init__()
        self.embed = nn.Conv1d(mels, d, 7, 1, 3)
        self.n0, self.n1 = nn.LayerNorm(d, eps=1e-6), nn.LayerNorm(d, eps=1e-6)
        self.blocks = nn.Sequential(*[Vocos.Block(d) for _ in range(layers)])
        self.out = nn.Linear(d, n_fft + 2)

    def forward(self, mel):  # (n, mels, t)
        x = self.n0(self.embed(mel).transpose(1, 2)).transpose(1, 2)
        x = self.n1(self.blocks(x).transpose(1, 2))
        mag, p = self.out(x).transpose(1, 2).chunk(2, 1)
        mag = torch.exp(mag).clamp(max=1e2)
        return torch.stack([mag * torch.cos(p), mag * torch.sin(p)], 1)


def m_vocos():
    g = torch.Generator().manual_seed(102)
    inp = {"mel": torch.randn(1, 64, 48, generator=g)}
    return custom(Vocos, inp, ["spectrum"], init_gain=1.0)


class JasperDR(nn.Module):
    """Jasper with dense residual connections (Jasper-DR): a strided k11 prologue, 4 blocks of
    3 sub-blocks (Conv1d k 11/13/17/21 + BN + ReLU), the last sub-block's pre-activation summed
    with 1x1 conv + BN projections of the prologue and of every earlier block's output, a
    dilated k29 epilogue, 1x1 convs and a 29-way log-softmax; 64 mels x 160 frames."""

    def __init__(self, mels=64, chans=(128, 160, 192, 224), ks=(11, 13, 17, 21), classes=29):
        super().__init__()

        def cbr(a, b, k, s=1, d=1, act=True):
            layers = [
                nn.Conv1d(a, b, k, s, d * (k // 2), dilation=d, bias=False),
                nn.BatchNorm1d(b),
            ]
            return nn.Sequential(*layers, *([nn.ReLU()] if act else []))

        self.pro = cbr(mels, 128, 11, 2)
        self.blocks, self.res = nn.ModuleList(), nn.ModuleList()
        prev = [128]
        for c, k in zip(chans, ks):
            cin = prev[-1]
            self.blocks.append(nn.Sequential(cbr(cin, c, k), cbr(c, c, k), cbr(c, c, k, act=False)))
            self.res.append(nn.ModuleList(cbr(p, c, 1, act=False) for p in prev))
            prev.append(c)
        self.epi = nn.Sequential(cbr(chans[-1], 256, 29, d=2), cbr(256, 384, 1))
        self.out = nn.Conv1d(384, classes, 1)

    def forward(self, x):  # (n, mels, t)
        outs = [self.pro(x)]
        for blk, res in zip(self.blocks, self.res):
            y = blk(outs[-1])
            for r, o in zip(res, outs):
                y = y + r(o)
            outs.append(F.relu(y))
        return F.log_softmax(self.out(self.epi(outs[-1])), 1).transpose(1, 2)


def m_jasper_dr():
    g = torch.Generator().manual_seed(103)
    inp = {"features": torch.randn(1, 64, 160, generator=g)}
    return custom(JasperDR, inp, ["log_probs"], init_gain=1.0)


class DPRNN(nn.Module):
    """Dual-path RNN speech separation: a learned Conv1d k16 s8 encoder (496 frames), global
    LayerNorm (GroupNorm 1) + bottleneck, segmentation into 32-frame chunks with 50% overlap
    (pad, two offset reshapes interleaved), 2 dual-path blocks (intra-chunk BiLSTM over 32
    steps and inter-chunk BiLSTM over 32 chunks, each Linear + LayerNorm + residual), PReLU,
    masks for 2 speakers by a 1x1 conv, overlap-add, tanh * sigmoid gating, ReLU masks,
    ConvTranspose1d decoder; 3976 samples."""

    def __init__(self, n=64, k=32, blocks=2, spk=2):
        super().__init__()
        self.k, self.p, self.spk, self.nf = k, k // 2, spk, n
        self.enc = nn.Conv1d(1, n, 16, 8, bias=False)
        self.norm, self.bott = nn.GroupNorm(1, n, eps=1e-8), nn.Conv1d(n, n, 1)
        self.intra = nn.ModuleList(
            nn.LSTM(n, n, batch_first=True, bidirectional=True) for _ in range(blocks)
        )
        self.inter = nn.ModuleList(
            nn.LSTM(n, n, batch_first=True, bidirectional=True) for _ in range(blocks)
        )
        self.il = nn.ModuleList(nn.Linear(2 * n, n) for _ in range(2 * blocks))
        self.ln = nn.ModuleList(nn.LayerNorm(n) for _ in range(2 * blocks))
        self.prelu, self.mask = nn.PReLU(), nn.Conv2d(n, spk * n, 1)
        self.gt, self.gs = nn.Conv1d(n, n, 1), nn.Conv1d(n, n, 1)
        self.m_out = nn.Conv1d(n, n, 1, bias=False)
        self.dec = nn.ConvTranspose1d(n, 1, 16, 8, bias=False)

    def segment(self, x):  # (b, c, L) -> (b, c, S, K), L = P * odd
        p = self.p
        x = F.pad(x, (p, p))
        b, c, _ = x.shape
        s1 = x[:, :, :-p].reshape(b, c, -1, self.k)
        s2 = x[:, :, p:].reshape(b, c, -1, self.k)
        return torch.cat([s1, s2], 3).reshape(b, c, -1, self.k)

    def merge(self, x):  # (b, c, S, K) -> (b, c, L)
        b, c, s, k = x.shape
        x = x.reshape(b, c, s // 2, 2 * k)
        s1, s2 = x[..., :k].reshape(b, c, -1), x[..., k:].reshape(b, c, -1)
        return s1[..., self.p :] + s2[..., : -self.p]

    def forward(self, wav):  # (N, T)
        n = wav.shape[0]
        e = F.relu(self.enc(wav.unsqueeze(1)))  # (N, F, L)
        x = self.segment(self.bott(self.norm(e)))  # (N, F, S, K)
        _, c, s, k = x.shape
        for i, (ra, rb) in enumerate(zip(self.intra, self.inter)):
            y = x.permute(0, 2, 3, 1).reshape(n * s, k, c)
            y = self.ln[2 * i](self.il[2 * i](ra(y)[0])).reshape(n, s, k, c).permute(0, 3, 1, 2)
            x = x + y
            y = x.permute(0, 3, 2, 1).reshape(n * k, s, c)
            y = self.ln[2 * i + 1](self.il[2 * i + 1](rb(y)[0])).reshape(n, k, s, c)
            x = x + y.permute(0, 3, 2, 1)
        m = self.mask(self.prelu(x)).reshape(n * self.spk, c, s, k)
        m = self.merge(m)
        m = F.relu(self.m_out(torch.tanh(self.gt(m)) * torch.sigmoid(self.gs(m))))
        y = m.reshape(n, self.spk, c, -1) * e.unsqueeze(1)
        return self.dec(y.reshape(n * self.spk, c, -1)).reshape(n, self.spk, -1)


def m_dprnn():
    g = torch.Generator().manual_seed(104)
    inp = {"mixture": torch.randn(1, 3976, generator=g) * 0.3}
    return custom(DPRNN, inp, ["separated"], init_gain=1.0)


# ================================================================ others
class ESRGAN(nn.Module):
    """ESRGAN-like x4 super-resolution: residual-in-residual dense blocks (2 RRDBs of 3 dense
    blocks, each 5 convs over the concatenation of all earlier features, LeakyReLU 0.2,
    residual scaling 0.2), a trunk conv, nearest x2 upsampling + conv and a PixelShuffle x2
    stage, HR conv; 3x32x32 -> 3x128x128."""

    class RDB(nn.Module):
        def __init__(self, nf, gc):
            super().__init__()
            self.convs = nn.ModuleList(
                nn.Conv2d(nf + i * gc, gc if i < 4 else nf, 3, 1, 1) for i in range(5)
            )

        def forward(self, x):
            feats = [x]
            for i, c in enumerate(self.convs):
                y = c(torch.cat(feats, 1))
                if i < 4:
                    feats.append(F.leaky_relu(y, 0.2))
            return x + 0.2 * y

    class RRDB(nn.Module):
        def __init__(self, nf, gc):
            super().__init__()
            self.f = nn.Sequential(*[ESRGAN.RDB(nf, gc) for _ in range(3)])

        def forward(self, x):
            return x + 0.2 * self.f(x)

    def __init__(self, nf=32, gc=16, blocks=2):
        super().__init__()
        self.first = nn.Conv2d(3, nf, 3, 1, 1)
        self.body = nn.Sequential(*[ESRGAN.RRDB(nf, gc) for _ in range(blocks)])
        self.trunk = nn.Conv2d(nf, nf, 3, 1, 1)
        self.up1 = nn.Conv2d(nf, nf, 3, 1, 1)
        self.up2 = nn.Sequential(nn.Conv2d(nf, 4 * nf, 3, 1, 1), nn.PixelShuffle(2))
        self.hr, self.last = nn.Conv2d(nf, nf, 3, 1, 1), nn.Conv2d(nf, 3, 3, 1, 1)

    def forward(self, x):
        f = self.first(x)
        f = f + self.trunk(self.body(f))
        f = F.leaky_relu(self.up1(F.interpolate(f, scale_factor=2.0, mode="nearest")), 0.2)
        f = F.leaky_relu(self.up2(f), 0.2)
        return self.last(F.leaky_relu(self.hr(f), 0.2))


def m_esrgan():
    g = torch.Generator().manual_seed(111)
    inp = {"lr_image": torch.rand(1, 3, 32, 32, generator=g)}
    return custom(ESRGAN, inp, ["sr_image"], init_gain=1.0)


class RAFTLite(nn.Module):
    """RAFT-like optical flow: a shared feature encoder with InstanceNorm and a context encoder
    with BatchNorm (stride 8), the all-pairs correlation volume by one batched MatMul, a
    2-level correlation pyramid (AvgPool), 3 unrolled refinement iterations - each looks up
    5x5 correlation windows around the current coordinates with GridSample, encodes motion,
    updates a separable (1x5 / 5x1) ConvGRU and adds a flow delta - and convex upsampling
    (softmax over 9 neighbours of an Unfold); two 3x64x96 frames -> flow 2x64x96."""

    def __init__(self, d=96, hid=48, iters=3, r=2, levels=2):
        super().__init__()
        self.iters, self.r, self.levels, self.hid = iters, r, levels, hid

        def enc(norm):
            def blk(a, b, s):
                return nn.Sequential(nn.Conv2d(a, b, 3, s, 1), norm(b), nn.ReLU())

            return nn.Sequential(
                nn.Conv2d(3, 32, 7, 2, 3),
                norm(32),
                nn.ReLU(),
                blk(32, 32, 1),
                blk(32, 48, 2),
                blk(48, 48, 1),
                blk(48, 64, 2),
                blk(64, 64, 1),
                nn.Conv2d(64, d, 1),
            )

        self.fnet = enc(lambda c: nn.InstanceNorm2d(c))
        self.cnet = enc(nn.BatchNorm2d)
        cor = levels * (2 * r + 1) ** 2
        self.convc = nn.Sequential(
            nn.Conv2d(cor, 64, 1), nn.ReLU(), nn.Conv2d(64, 48, 3, 1, 1), nn.ReLU()
        )
        self.convf = nn.Sequential(
            nn.Conv2d(2, 32, 7, 1, 3), nn.ReLU(), nn.Conv2d(32, 16, 3, 1, 1), nn.ReLU()
        )
        self.convm = nn.Sequential(nn.Conv2d(64, 46, 3, 1, 1), nn.ReLU())
        x = (d - hid) + 48
        self.gru = nn.ModuleList(
            nn.ModuleList(nn.Conv2d(hid + x, hid, k, 1, p) for _ in range(3))
            for k, p in (((1, 5), (0, 2)), ((5, 1), (2, 0)))
        )
        self.flow = nn.Sequential(nn.Conv2d(hid, 64, 3, 1, 1), nn.ReLU(), nn.Conv2d(64, 2, 3, 1, 1))
        self.maskh = nn.Sequential(nn.Conv2d(hid, 64, 3, 1, 1), nn.ReLU(), nn.Conv2d(64, 64 * 9, 1))
        dd = torch.arange(-r, r + 1).float()
        dy, dx = torch.meshgrid(dd, dd, indexing="ij")
        self.register_buffer(
            "delta", torch.stack([dx, dy], -1).view(1, 2 * r + 1, 2 * r + 1, 2), False
        )

    def lookup(self, pyr, coords):  # coords (n, 2, h, w) in level-0 pixels
        n, _, h, w = coords.shape
        c = coords.permute(0, 2, 3, 1).reshape(n * h * w, 1, 1, 2)
        out = []
        for i, corr in enumerate(pyr):
            hh, ww = corr.shape[-2:]
            p = c / 2**i + self.delta
            g = torch.cat([2 * p[..., :1] / (ww - 1) - 1, 2 * p[..., 1:] / (hh - 1) - 1], -1)
            s = F.grid_sample(corr, g, align_corners=True)  # (nhw, 1, 5, 5)
            out.append(s.reshape(n, h, w, -1))
        return torch.cat(out, -1).permute(0, 3, 1, 2)

    def forward(self, image1, image2):
        n = image1.shape[0]
        f = self.fnet(torch.cat([image1, image2], 0))
        f1, f2 = f[:n], f[n:]
        _, d, h, w = f1.shape
        corr = f1.flatten(2).transpose(1, 2) @ f2.flatten(2) / d**0.5  # (n, hw, hw)
        pyr = [corr.reshape(n * h * w, 1, h, w)]
        for _ in range(self.levels - 1):
            pyr.append(F.avg_pool2d(pyr[-1], 2, 2))
        net, inp = self.cnet(image1).split([self.hid, d - self.hid], 1)
        net, inp = torch.tanh(net), F.relu(inp)
        ys, xs = torch.meshgrid(torch.arange(h), torch.arange(w), indexing="ij")
        coords0 = torch.stack([xs, ys], 0).float().unsqueeze(0)
        coords1 = coords0.expand(n, -1, -1, -1)
        for _ in range(self.iters):
            flow = coords1 - coords0
            cf = self.lookup(pyr, coords1)
            mo = torch.cat([self.convm(torch.cat([self.convc(cf), self.convf(flow)], 1)), flow], 1)
            x = torch.cat([inp, mo], 1)
            for cz, cr, cq in self.gru:
                hx = torch.cat([net, x], 1)
                z, rr = torch.sigmoid(cz(hx)), torch.sigmoid(cr(hx))
                q = torch.tanh(cq(torch.cat([rr * net, x], 1)))
                net = (1 - z) * net + z * q
            coords1 = coords1 + self.flow(net)
        flow = coords1 - coords0
        mask = (0.25 * self.maskh(net)).reshape(n, 1, 9, 8, 8, h, w).softmax(2)
        up = F.unfold(8 * flow, 3, padding=1).reshape(n, 2, 9, 1, 1, h, w)
        up = (mask * up).sum(2).permute(0, 1, 4, 2, 5, 3)
        return up.reshape(n, 2, 8 * h, 8 * w)


def m_raft_lite():
    g = torch.Generator().manual_seed(112)
    a = torch.randn(1, 3, 64, 96, generator=g)
    b = torch.roll(a, shifts=(2, 3), dims=(2, 3)) + 0.1 * torch.randn(1, 3, 64, 96, generator=g)
    return custom(RAFTLite, {"image1": a, "image2": b}, ["flow"], init_gain=1.0)


class FCOS(nn.Module):
    """FCOS-like anchor-free detector: a small strided conv backbone (C3..C5), an FPN with
    nearest top-down additions and P6/P7 by stride-2 convs, one head shared by all 5 levels
    (two 4-conv towers with GroupNorm(8) + ReLU, class logits, box regression scaled by a
    learnable per-level scalar then exp, centerness), in-graph box decoding from the level's
    point grid and sqrt(cls * centerness) scores; 128x128 -> 341 points x (4 + 8)."""

    def __init__(self, classes=8, d=64):
        super().__init__()
        self.c2 = nn.Sequential(cba(3, 32, 3, 2), cba(32, 64, 3, 2), cba(64, 64, 3))
        self.c3, self.c4 = cba(64, 96, 3, 2), cba(96, 160, 3, 2)
        self.c5 = nn.Sequential(cba(160, 256, 3, 2), cba(256, 256, 3))
        self.lat = nn.ModuleList(nn.Conv2d(c, d, 1) for c in (96, 160, 256))
        self.smooth = nn.ModuleList(nn.Conv2d(d, d, 3, 1, 1) for _ in range(3))
        self.p6, self.p7 = nn.Conv2d(d, d, 3, 2, 1), nn.Conv2d(d, d, 3, 2, 1)

        def tower():
            return nn.Sequential(
                *[
                    m
                    for _ in range(4)
                    for m in (nn.Conv2d(d, d, 3, 1, 1), nn.GroupNorm(8, d), nn.ReLU())
                ]
            )

        self.cls_t, self.box_t = tower(), tower()
        self.cls = nn.Conv2d(d, classes, 3, 1, 1)
        self.box, self.ctr = nn.Conv2d(d, 4, 3, 1, 1), nn.Conv2d(d, 1, 3, 1, 1)
        self.scales = nn.Parameter(torch.tensor([1.0, 0.9, 0.8, 0.7, 0.6]))

    def forward(self, x):
        c3 = self.c3(self.c2(x))
        c4 = self.c4(c3)
        c5 = self.c5(c4)
        p5 = self.lat[2](c5)
        p4 = self.lat[1](c4) + F.interpolate(p5, scale_factor=2.0, mode="nearest")
        p3 = self.lat[0](c3) + F.interpolate(p4, scale_factor=2.0, mode="nearest")
        p3, p4, p5 = self.smooth[0](p3), self.smooth[1](p4), self.smooth[2](p5)
        p6 = self.p6(p5)
        p7 = self.p7(F.relu(p6))
        outs = []
        for i, (p, stride) in enumerate(zip((p3, p4, p5, p6, p7), (8, 16, 32, 64, 128))):
            ct, bt = self.cls_t(p), self.box_t(p)
            cls, ctr = torch.sigmoid(self.cls(ct)), torch.sigmoid(self.ctr(bt))
            ltrb = torch.exp((self.scales[i] * self.box(bt)).clamp(max=8.0)) * stride
            n, _, h, w = ltrb.shape
            ys, xs = torch.meshgrid(torch.arange(h), torch.arange(w), indexing="ij")
            pts = (torch.stack([xs, ys], 0).float() * stride + stride // 2).view(1, 2, h, w)
            boxes = torch.cat([pts - ltrb[:, :2], pts + ltrb[:, 2:]], 1)
            o = torch.cat([boxes, torch.sqrt(cls * ctr)], 1)
            outs.append(o.flatten(2))
        return torch.cat(outs, 2).transpose(1, 2)


def m_fcos():
    return custom(FCOS, image_inputs(128, name="images"), ["detections"], init_gain=1.0)


class PointNet2(nn.Module):
    """PointNet++ (single-scale grouping) classifier on 512 points: farthest point sampling
    unrolled in the graph (64 then 16 iterations of distance update, Min, ArgMax, Gather),
    ball query by TopK of the smallest squared distances with out-of-radius neighbours
    replaced by the nearest, grouping by Gather, relative coordinates, shared 1x1 Conv2d + BN
    + ReLU MLPs, max over each neighbourhood, a global set-abstraction layer and an MLP head."""

    class SA(nn.Module):
        def __init__(self, npoint, radius, k, cin, widths):
            super().__init__()
            self.npoint, self.r2, self.k = npoint, radius**2, k
            layers, c = [], cin + 3
            for w in widths:
                layers += [nn.Conv2d(c, w, 1, bias=False), nn.BatchNorm2d(w), nn.ReLU()]
                c = w
            self.mlp = nn.Sequential(*layers)

        @staticmethod
        def gather(x, idx):  # x (n, p, c), idx (n, s, k) -> (n, s, k, c)
            n, s, k = idx.shape
            return torch.gather(x, 1, idx.reshape(n, s * k, 1).expand(-1, -1, x.shape[-1])).reshape(
                n, s, k, -1
            )

        def fps(self, xyz):
            n, p, _ = xyz.shape
            dist = torch.full_like(xyz[..., 0], 1e10)
            far = torch.zeros_like(xyz[:, :1, 0], dtype=torch.long)  # (n, 1)
            picked = []
            for _ in range(self.npoint):
                picked.append(far)
                c = torch.gather(xyz, 1, far.unsqueeze(-1).expand(-1, -1, 3))  # (n, 1, 3)
                dist = torch.minimum(dist, ((xyz - c) ** 2).sum(-1))
                far = dist.argmax(-1, keepdim=True)
            return torch.cat(picked, 1)  # (n, s)

        def forward(self, xyz, feat):
            idx = self.fps(xyz)
            new = torch.gather(xyz, 1, idx.unsqueeze(-1).expand(-1, -1, 3))  # (n, s, 3)
            d2 = ((new.unsqueeze(2) - xyz.unsqueeze(1)) ** 2).sum(-1)  # (n, s, p)
            vals, nb = d2.topk(self.k, -1, largest=False)
            nb = torch.where(vals > self.r2, nb[..., :1], nb)
            g = self.gather(xyz, nb) - new.unsqueeze(2)
            if feat is not None:
                g = torch.cat([g, self.gather(feat, nb)], -1)
            y = self.mlp(g.permute(0, 3, 1, 2)).amax(-1)  # (n, c, s)
            return new, y.transpose(1, 2)

    def __init__(self, classes=40):
        super().__init__()
        S = PointNet2.SA
        self.sa1 = S(64, 0.2, 16, 0, (32, 32, 64))
        self.sa2 = S(16, 0.4, 16, 64, (64, 64, 128))
        self.sa3 = nn.Sequential(
            nn.Conv1d(131, 128, 1),
            nn.BatchNorm1d(128),
            nn.ReLU(),
            nn.Conv1d(128, 256, 1),
            nn.BatchNorm1d(256),
            nn.ReLU(),
        )
        self.head = nn.Sequential(
            nn.Linear(256, 128), nn.BatchNorm1d(128), nn.ReLU(), nn.Linear(128, classes)
        )

    def forward(self, points):  # (n, 512, 3)
        xyz, f = self.sa1(points, None)
        xyz, f = self.sa2(xyz, f)
        g = self.sa3(torch.cat([xyz, f], -1).transpose(1, 2)).amax(-1)
        return self.head(g)


def m_pointnet2():
    g = torch.Generator().manual_seed(113)
    inp = {"points": torch.rand(1, 512, 3, generator=g) - 0.5}
    return custom(PointNet2, inp, ["logits"], init_gain=1.0)


def m_rwkv():
    """RWKV-4: token shift (ZeroPad2d by one step) with learned time-mix interpolation, the WKV
    linear-attention recurrence with time decay and time-first bonus unrolled over 24 steps
    (exp-normalised with a running max), receptance sigmoid gating, squared-ReLU channel
    mixing, LayerNorms, tied-free LM head."""
    from transformers import RwkvConfig

    cfg = RwkvConfig(
        vocab_size=1000,
        context_length=128,
        hidden_size=128,
        num_hidden_layers=3,
        attention_hidden_size=128,
        intermediate_size=512,
        rescale_every=0,
        **{k: v for k, v in _TOKENS.items() if k != "pad_token_id"},
    )
    wrap, inp, outs = hf(
        "RwkvForCausalLM",
        cfg,
        text_inputs(1000, seq=24, mask=False),
        ["logits"],
        {"use_cache": False},
    )
    randomize_norms(wrap)
    return wrap, inp, outs


class VQVAE(nn.Module):
    """VQ-VAE: strided conv encoder with residual blocks to a 16x16 grid of 32-d latents,
    vector quantisation against a 256-entry codebook (squared distances by MatMul, ArgMin,
    embedding Gather), per-image commitment error, a decoder with residual blocks and two
    ConvTranspose2d x2 upsamplers; 3x64x64 -> reconstruction + int64 codes."""

    class Res(nn.Module):
        def __init__(self, c, mid=64):
            super().__init__()
            self.f = nn.Sequential(
                nn.ReLU(), nn.Conv2d(c, mid, 3, 1, 1), nn.ReLU(), nn.Conv2d(mid, c, 1)
            )

        def forward(self, x):
            return x + self.f(x)

    def __init__(self, c=128, d=32, codes=256):
        super().__init__()
        R = VQVAE.Res
        self.enc = nn.Sequential(
            nn.Conv2d(3, c // 2, 4, 2, 1),
            nn.ReLU(),
            nn.Conv2d(c // 2, c, 4, 2, 1),
            nn.ReLU(),
            nn.Conv2d(c, c, 3, 1, 1),
            R(c),
            R(c),
            nn.ReLU(),
            nn.Conv2d(c, d, 1),
        )
        self.codebook = nn.Embedding(codes, d)
        nn.init.normal_(self.codebook.weight, std=1.0)
        self.dec = nn.Sequential(
            nn.Conv2d(d, c, 3, 1, 1),
            R(c),
            R(c),
            nn.ReLU(),
            nn.ConvTranspose2d(c, c // 2, 4, 2, 1),
            nn.ReLU(),
            nn.ConvTranspose2d(c // 2, 3, 4, 2, 1),
        )

    def forward(self, x):
        z = self.enc(x)
        n, d, h, w = z.shape
        zf = z.flatten(2).transpose(1, 2)  # (n, hw, d)
        e = self.codebook.weight
        dist = (zf**2).sum(-1, keepdim=True) - 2 * zf @ e.t() + (e**2).sum(-1)
        codes = dist.argmin(-1)  # (n, hw)
        zq = self.codebook(codes)
        commit = ((zq - zf) ** 2).mean((1, 2))
        recon = self.dec(zq.transpose(1, 2).reshape(n, d, h, w))
        return recon, codes.reshape(n, h, w), commit


def m_vqvae():
    g = torch.Generator().manual_seed(114)
    inp = {"image": torch.rand(1, 3, 64, 64, generator=g) * 2 - 1}
    return custom(VQVAE, inp, ["reconstruction", "codes", "commitment"], init_gain=1.0)


# ================================================================ END OF MODELS
ALL = {k[2:]: v for k, v in globals().items() if k.startswith("m_")}
EXTRA = ()
MODELS = {k: v for k, v in ALL.items() if k not in EXTRA}

if __name__ == "__main__":
    main(ALL if sys.argv[1] in EXTRA else MODELS, sys.argv)
