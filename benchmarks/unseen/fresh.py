"""A fresh set of unseen models: architectures neither the zoo nor build.py's first set holds.

Usage: python fresh.py NAME      (builds one model into $GE_UNSEEN_DIR/NAME/)
       python fresh.py --list
       python fresh.py --bench-layout  (writes $GE_UNSEEN_DIR/cache/zoo/NAME/ for each built
                                        model, so that GE_MODEL_CACHE=$GE_UNSEEN_DIR/cache
                                        benchmarks/bench_zoo.py benches them)
Build this set into its own directory (e.g. GE_UNSEEN_DIR=/work/unseen6), not the first set's.
Same files as build.py (whose export + ORT check this reuses): model.onnx (opset 17, dynamic
batch axis), inputs.npz (batch-1 feeds), export.txt.

Families: depthwise/SE convnets, embedding-heavy nets, GQA decoders with RoPE + RMSNorm,
window-attention vision transformers, 1-D conv audio encoders, GPT-2-like decoders, small
ViTs, and a few others (time series, Perceiver, Conv3d video, segmentation decoder).
"""

import math
import os
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from build import HFWrap, hf, image_inputs, main, text_inputs


class Call(nn.Module):
    """Wrap a model whose outputs need picking/flattening: forward(*args) = fn(model, *args)."""

    def __init__(self, model, fn):
        super().__init__()
        self.model, self.fn = model, fn

    def forward(self, *args):
        return self.fn(self.model, *args)


def randomize_norms(m, seed=7):
    """BatchNorm (1d/2d/3d) running stats and norm affines that are not the identity, so
    random-init nets do not output ~constant values."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for mod in m.modules():
            if isinstance(mod, nn.modules.batchnorm._BatchNorm):
                mod.running_mean.uniform_(-0.2, 0.2, generator=g)
                mod.running_var.uniform_(0.5, 1.5, generator=g)
            if isinstance(mod, (nn.modules.batchnorm._BatchNorm, nn.LayerNorm, nn.GroupNorm)):
                if getattr(mod, "weight", None) is not None:
                    mod.weight.uniform_(0.7, 1.3, generator=g)
                    mod.bias.uniform_(-0.1, 0.1, generator=g)
    return m


def fan_in_init(m, gain=1.0, seed=8):
    """Conv/Linear weights ~ N(0, gain^2 / fan_in), biases ~ U(-0.1, 0.1): keeps activations
    O(1) through deep stacks where small default/HF inits shrink them towards 0."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for mod in m.modules():
            if isinstance(mod, (nn.Linear, nn.Conv1d, nn.Conv2d, nn.Conv3d)):
                fan_in = mod.weight[0].numel()
                mod.weight.copy_(torch.randn(mod.weight.shape, generator=g) * gain / fan_in**0.5)
                if mod.bias is not None:
                    mod.bias.uniform_(-0.1, 0.1, generator=g)
    return m


def custom(cls, inputs, outs, init_gain=None, **kw):
    """A torch.nn model behind a forward(*args) wrapper: build.py's dynamo fallback passes
    dynamic_shapes as {"args": ...}, which torch.export only accepts for a *args forward."""
    torch.manual_seed(0)
    m = randomize_norms(cls(**kw).eval())
    if init_gain:
        fan_in_init(m, init_gain)
    return Call(m, lambda m, *args: m(*args)).eval(), inputs, outs


def feats(shape, seed=3, name="features"):
    g = torch.Generator().manual_seed(seed)
    return {name: torch.randn(*shape, generator=g)}


def decoder(cls_name, cfg, seq=64, vocab=1000):
    """A causal LM with eager attention: input_ids + attention_mask -> logits."""
    return hf(cls_name, cfg, text_inputs(vocab, seq=seq), ["logits"], {"use_cache": False})


# ================================================================ GQA decoders (RoPE, RMSNorm)
def m_gemma2():
    """Gemma2: alternating sliding-window/global layers, attention-logit and final-logit
    tanh softcapping, (1+w) RMSNorm pre+post, GeGLU (tanh gelu), query_pre_attn_scalar."""
    from transformers import Gemma2Config

    cfg = Gemma2Config(
        vocab_size=1000,
        hidden_size=128,
        intermediate_size=384,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=32,
        max_position_embeddings=256,
        sliding_window=16,
        query_pre_attn_scalar=24,
        attn_logit_softcapping=50.0,
        final_logit_softcapping=30.0,
        pad_token_id=0,
        bos_token_id=2,
        eos_token_id=1,
    )
    return decoder("Gemma2ForCausalLM", cfg)


def m_phi3():
    """Phi3: fused qkv_proj and gate_up_proj (Split), 8 query heads on 2 KV heads (4:1),
    LongRoPE short/long rescaled frequencies with an attention factor."""
    from transformers import Phi3Config

    hd = 16
    cfg = Phi3Config(
        vocab_size=1000,
        hidden_size=128,
        intermediate_size=320,
        num_hidden_layers=2,
        num_attention_heads=8,
        num_key_value_heads=2,
        max_position_embeddings=256,
        original_max_position_embeddings=32,
        rope_parameters={
            "rope_type": "longrope",
            "rope_theta": 10000.0,
            "partial_rotary_factor": 1.0,
            "short_factor": [1.0 + 0.05 * i for i in range(hd // 2)],
            "long_factor": [1.0 + 0.4 * i for i in range(hd // 2)],
        },
        sliding_window=None,
        pad_token_id=0,
        bos_token_id=1,
        eos_token_id=2,
    )
    return decoder("Phi3ForCausalLM", cfg)


def m_olmo2():
    """OLMo2: RMSNorm on the whole q and k projections (before the head split), norms after
    attention/MLP (post-norm residual), 4 heads on 2 KV heads."""
    from transformers import Olmo2Config

    cfg = Olmo2Config(
        vocab_size=1000,
        hidden_size=128,
        intermediate_size=352,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=256,
        pad_token_id=0,
        bos_token_id=1,
        eos_token_id=2,
    )
    return decoder("Olmo2ForCausalLM", cfg)


def m_smollm3():
    """SmolLM3 (a Llama variant): 9 query heads on 3 KV heads (head_dim 16), every 2nd
    layer without RoPE (NoPE), tied embeddings, seq 96."""
    from transformers import SmolLM3Config

    cfg = SmolLM3Config(
        vocab_size=1000,
        hidden_size=144,
        intermediate_size=384,
        num_hidden_layers=4,
        num_attention_heads=9,
        num_key_value_heads=3,
        max_position_embeddings=256,
        no_rope_layer_interval=2,
        tie_word_embeddings=True,
        pad_token_id=0,
        bos_token_id=1,
        eos_token_id=2,
    )
    return decoder("SmolLM3ForCausalLM", cfg, seq=96)


def m_glm():
    """GLM: partial (half) rotary with interleaved (even/odd) pairs, qkv bias, fused
    gate_up_proj, 4 heads on 1 KV head (MQA)."""
    from transformers import GlmConfig

    cfg = GlmConfig(
        vocab_size=1000,
        hidden_size=128,
        intermediate_size=320,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=1,
        head_dim=32,
        max_position_embeddings=256,
        pad_token_id=0,
        bos_token_id=1,
        eos_token_id=2,
    )
    return decoder("GlmForCausalLM", cfg)


def m_granite():
    """Granite: Llama-like with embedding/residual/attention multipliers and logits scaling,
    4 query heads on 1 KV head, seq 128."""
    from transformers import GraniteConfig

    cfg = GraniteConfig(
        vocab_size=1000,
        hidden_size=128,
        intermediate_size=256,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=1,
        max_position_embeddings=256,
        embedding_multiplier=12.0,
        residual_multiplier=0.22,
        attention_multiplier=0.0625,
        logits_scaling=4.0,
        tie_word_embeddings=True,
        pad_token_id=0,
        bos_token_id=1,
        eos_token_id=2,
    )
    return decoder("GraniteForCausalLM", cfg, seq=128)


# ================================================================ GPT-2-like decoders
def m_gpt_neo():
    """GPT-Neo: learned positions, alternating global/local (window 16) causal attention
    without 1/sqrt(d) scaling, gelu_new."""
    from transformers import GPTNeoConfig

    cfg = GPTNeoConfig(
        vocab_size=1000,
        max_position_embeddings=256,
        hidden_size=128,
        num_layers=2,
        attention_types=[[["global", "local"], 1]],
        num_heads=4,
        intermediate_size=512,
        window_size=16,
    )
    return decoder("GPTNeoForCausalLM", cfg)


def m_imagegpt():
    """ImageGPT: GPT-2 on 8x8 colour-cluster tokens (vocab 513), RMS-style LayerNorm without
    mean, quick_gelu, untied 512-way head."""
    from transformers import ImageGPTConfig

    cfg = ImageGPTConfig(
        vocab_size=513, n_positions=64, n_embd=128, n_layer=3, n_head=4, n_inner=512
    )
    inp = text_inputs(512, seq=64, lo=0)
    return hf("ImageGPTForCausalImageModeling", cfg, inp, ["logits"], {"use_cache": False})


def m_xglm():
    """XGLM: sinusoidal positions with an offset (computed in-graph), sqrt(d) embedding scale,
    pre-LN, gelu, tied head."""
    from transformers import XGLMConfig

    cfg = XGLMConfig(
        vocab_size=1000,
        max_position_embeddings=256,
        d_model=128,
        ffn_dim=512,
        num_layers=2,
        attention_heads=4,
        dropout=0.0,
        attention_dropout=0.0,
    )
    return decoder("XGLMForCausalLM", cfg)


def m_ctrl():
    """CTRL: sinusoidal positions, sqrt(d) embedding scale, ReLU FFN, pre-LN, tied head."""
    from transformers import CTRLConfig

    cfg = CTRLConfig(
        vocab_size=1000,
        n_positions=256,
        n_embd=128,
        dff=512,
        n_layer=2,
        n_head=4,
        resid_pdrop=0.0,
        embd_pdrop=0.0,
    )
    return decoder("CTRLLMHeadModel", cfg)


# ================================================================ small ViTs
def m_clip_vision():
    """CLIP vision tower: class embedding, pre-LayerNorm before the encoder, quick_gelu,
    post-LN pooled CLS and a bias-free projection, 112x112 / patch 16."""
    from transformers import CLIPVisionConfig

    cfg = CLIPVisionConfig(
        hidden_size=192,
        intermediate_size=768,
        projection_dim=128,
        num_hidden_layers=4,
        num_attention_heads=6,
        image_size=112,
        patch_size=16,
    )
    return hf(
        "CLIPVisionModelWithProjection",
        cfg,
        image_inputs(112),
        ["image_embeds", "last_hidden_state"],
    )


def m_siglip_vision():
    """SigLIP vision tower: no CLS, gelu (tanh), multihead-attention-pooling head (a learned
    probe through nn.MultiheadAttention), 96x96 / patch 12."""
    from transformers import SiglipVisionConfig

    cfg = SiglipVisionConfig(
        hidden_size=192,
        intermediate_size=512,
        num_hidden_layers=3,
        num_attention_heads=4,
        image_size=96,
        patch_size=12,
    )
    return hf("SiglipVisionModel", cfg, image_inputs(96), ["pooler_output", "last_hidden_state"])


def m_hiera():
    """Hiera: hierarchical ViT with mask-unit attention in the first stages, query pooling
    (max over strided tokens) between stages, unroll/reroll token reordering."""
    from transformers import HieraConfig

    cfg = HieraConfig(
        embed_dim=32,
        image_size=[128, 128],
        patch_size=[7, 7],
        patch_stride=[4, 4],
        patch_padding=[3, 3],
        depths=[1, 2, 3, 1],
        num_heads=[1, 2, 4, 8],
        masked_unit_size=[8, 8],
        num_labels=10,
    )
    return hf(
        "HieraForImageClassification", cfg, image_inputs(128), ["logits"], eager=False, jit=True
    )


def m_data2vec_vision():
    """Data2Vec-vision: BEiT-style with a shared relative position bias, layer-scale, mean
    pooling + LayerNorm, 96x96 / patch 16."""
    from transformers import Data2VecVisionConfig

    cfg = Data2VecVisionConfig(
        hidden_size=128,
        num_hidden_layers=3,
        num_attention_heads=4,
        intermediate_size=384,
        image_size=96,
        patch_size=16,
        use_relative_position_bias=False,
        use_shared_relative_position_bias=True,
        use_mean_pooling=True,
        layer_scale_init_value=0.1,
    )
    from transformers import Data2VecVisionModel

    cfg._attn_implementation = "eager"
    torch.manual_seed(0)
    m = Data2VecVisionModel(cfg, add_pooling_layer=True).eval()
    outs = ["last_hidden_state", "pooler_output"]
    return HFWrap(m, ["pixel_values"], outs).eval(), image_inputs(96), outs


# ================================================================ window-attention vision
def m_swin2sr():
    """Swin2SR super-resolution: Swin-V2 blocks (cosine attention with a learned logit scale,
    continuous position bias from a small MLP, res-post-norm), shifted windows, residual
    conv group (3 blocks), the light "pixelshuffledirect" upsampler (one 3x3 conv to
    3*2*2 channels + PixelShuffle x2). 32x32 -> 64x64."""
    from transformers import Swin2SRConfig

    cfg = Swin2SRConfig(
        image_size=32,
        embed_dim=48,
        depths=[3],
        num_heads=[4],
        window_size=8,
        upscale=2,
        upsampler="pixelshuffledirect",
        mlp_ratio=2.0,
    )
    return hf(
        "Swin2SRForImageSuperResolution", cfg, image_inputs(32), ["reconstruction"], eager=False
    )


def m_maskformer_swin():
    """MaskFormer's Swin backbone at 100x100: token maps padded up to the 7x7 windows inside
    every stage, shifted windows, four feature maps out."""
    from transformers import MaskFormerSwinConfig

    cfg = MaskFormerSwinConfig(
        image_size=100,
        embed_dim=32,
        depths=[1, 1, 2, 1],
        num_heads=[1, 2, 4, 8],
        window_size=7,
        out_features=["stage1", "stage2", "stage3", "stage4"],
    )
    torch.manual_seed(0)
    from transformers import MaskFormerSwinBackbone

    m = MaskFormerSwinBackbone(cfg).eval()
    outs = ["stage1", "stage2", "stage3", "stage4"]
    return Call(m, lambda m, x: tuple(m(pixel_values=x).feature_maps)), image_inputs(100), outs


class SwinRoll(nn.Module):
    """Custom Swin on a non-square 64x128 image: 4x4 windows, cyclic shift by torch.roll with
    a precomputed shift mask, relative position bias gathered from a table, patch merging by
    strided slicing, channels-last LayerNorm, mean-pooled head."""

    class Block(nn.Module):
        def __init__(self, dim, heads, res, win, shift):
            super().__init__()
            self.dim, self.heads, self.res, self.win = dim, heads, res, win
            self.shift = shift if min(res) > win else 0
            self.n1, self.n2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
            self.qkv, self.proj = nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)
            self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))
            self.table = nn.Parameter(torch.randn((2 * win - 1) ** 2, heads) * 0.5)
            c = torch.stack(torch.meshgrid(torch.arange(win), torch.arange(win), indexing="ij"))
            c = c.flatten(1)
            r = (c[:, :, None] - c[:, None, :]).permute(1, 2, 0) + (win - 1)
            self.register_buffer("rel_idx", r[..., 0] * (2 * win - 1) + r[..., 1], False)
            if self.shift:
                H, W = res
                img = torch.zeros(1, H, W, 1)
                cnt = 0
                for hs in (slice(0, -win), slice(-win, -self.shift), slice(-self.shift, None)):
                    for ws in (slice(0, -win), slice(-win, -self.shift), slice(-self.shift, None)):
                        img[:, hs, ws, :] = cnt
                        cnt += 1
                mw = self.part(img).squeeze(-1)
                am = mw[:, None, :] - mw[:, :, None]
                self.register_buffer("mask", (am != 0).float() * -100.0, False)
            else:
                self.mask = None

        def part(self, x):
            n, H, W, c = x.shape
            w = self.win
            x = x.view(n, H // w, w, W // w, w, c).permute(0, 1, 3, 2, 4, 5)
            return x.reshape(-1, w * w, c)

        def forward(self, x):
            n, L, c = x.shape
            H, W = self.res
            w, h = self.win, self.heads
            y = self.n1(x).view(n, H, W, c)
            if self.shift:
                y = torch.roll(y, (-self.shift, -self.shift), (1, 2))
            y = self.part(y)  # (n*nw, w*w, c)
            b = y.shape[0]
            qkv = self.qkv(y).reshape(b, w * w, 3, h, c // h).permute(2, 0, 3, 1, 4)
            q, k, v = qkv[0], qkv[1], qkv[2]
            a = (q * (c // h) ** -0.5) @ k.transpose(-2, -1)
            a = a + self.table[self.rel_idx].permute(2, 0, 1)[None]
            if self.mask is not None:
                nw = self.mask.shape[0]
                a = a.view(b // nw, nw, h, w * w, w * w) + self.mask[None, :, None]
                a = a.view(b, h, w * w, w * w)
            y = (a.softmax(-1) @ v).transpose(1, 2).reshape(b, w * w, c)
            y = self.proj(y).view(n, H // w, W // w, w, w, c).permute(0, 1, 3, 2, 4, 5)
            y = y.reshape(n, H, W, c)
            if self.shift:
                y = torch.roll(y, (self.shift, self.shift), (1, 2))
            x = x + y.reshape(n, L, c)
            return x + self.mlp(self.n2(x))

    class Merge(nn.Module):
        def __init__(self, dim, res):
            super().__init__()
            self.res = res
            self.norm, self.red = nn.LayerNorm(4 * dim), nn.Linear(4 * dim, 2 * dim, bias=False)

        def forward(self, x):
            n, L, c = x.shape
            H, W = self.res
            x = x.view(n, H, W, c)
            x = torch.cat(
                [x[:, 0::2, 0::2], x[:, 1::2, 0::2], x[:, 0::2, 1::2], x[:, 1::2, 1::2]], -1
            )
            return self.red(self.norm(x.reshape(n, L // 4, 4 * c)))

    def __init__(self, dim=48, depths=(2, 2, 2), heads=(2, 4, 8), win=4, img=(64, 128)):
        super().__init__()
        self.patch = nn.Conv2d(3, dim, 4, 4)
        self.pnorm = nn.LayerNorm(dim)
        res = (img[0] // 4, img[1] // 4)
        layers = []
        for i, (d, h) in enumerate(zip(depths, heads)):
            for j in range(d):
                layers.append(SwinRoll.Block(dim, h, res, win, win // 2 if j % 2 else 0))
            if i < len(depths) - 1:
                layers.append(SwinRoll.Merge(dim, res))
                dim, res = dim * 2, (res[0] // 2, res[1] // 2)
        self.layers = nn.Sequential(*layers)
        self.norm, self.head = nn.LayerNorm(dim), nn.Linear(dim, 10)

    def forward(self, x):
        x = self.pnorm(self.patch(x).flatten(2).transpose(1, 2))
        x = self.norm(self.layers(x))
        return self.head(x.mean(1)), x


def m_swin_roll():
    return custom(SwinRoll, image_inputs(64, 128), ["logits", "tokens"])


class MaxViT(nn.Module):
    """MaxViT-like: MBConv (depthwise 3x3 + SE) then block attention (4x4 windows) then grid
    attention (dilated 4x4 grid), each with a relative position bias; channels-last
    LayerNorm; 64x64 input."""

    class MBConv(nn.Module):
        def __init__(self, cin, cout, stride):
            super().__init__()
            mid = cout * 4
            self.pre = nn.BatchNorm2d(cin)
            self.body = nn.Sequential(
                nn.Conv2d(cin, mid, 1, bias=False),
                nn.BatchNorm2d(mid),
                nn.GELU(),
                nn.Conv2d(mid, mid, 3, stride, 1, groups=mid, bias=False),
                nn.BatchNorm2d(mid),
                nn.GELU(),
            )
            self.se = nn.Sequential(
                nn.AdaptiveAvgPool2d(1),
                nn.Conv2d(mid, mid // 16, 1),
                nn.SiLU(),
                nn.Conv2d(mid // 16, mid, 1),
                nn.Sigmoid(),
            )
            self.proj = nn.Conv2d(mid, cout, 1)
            self.sc = (
                nn.Sequential(nn.AvgPool2d(3, stride, 1), nn.Conv2d(cin, cout, 1))
                if stride > 1 or cin != cout
                else nn.Identity()
            )

        def forward(self, x):
            y = self.body(self.pre(x))
            return self.sc(x) + self.proj(y * self.se(y))

    class Attn(nn.Module):
        def __init__(self, dim, p, grid):
            super().__init__()
            self.p, self.grid, self.heads = p, grid, dim // 32
            self.n1, self.n2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
            self.qkv, self.proj = nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)
            self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))
            self.table = nn.Parameter(torch.randn(self.heads, 2 * p - 1, 2 * p - 1) * 0.5)
            c = torch.stack(torch.meshgrid(torch.arange(p), torch.arange(p), indexing="ij"))
            c = c.flatten(1)
            r = (c[:, :, None] - c[:, None, :]) + (p - 1)
            self.register_buffer("ri", r[0], False)
            self.register_buffer("rj", r[1], False)

        def forward(self, x):  # (n, H, W, c) channels-last
            n, H, W, c = x.shape
            p, h = self.p, self.heads
            if self.grid:  # token (i, j) of window (a, b) is pixel (i*H/p + a, j*W/p + b)
                y = x.view(n, p, H // p, p, W // p, c).permute(0, 2, 4, 1, 3, 5)
            else:
                y = x.view(n, H // p, p, W // p, p, c).permute(0, 1, 3, 2, 4, 5)
            y = self.n1(y.reshape(-1, p * p, c))
            b = y.shape[0]
            q, k, v = self.qkv(y).view(b, p * p, 3, h, c // h).permute(2, 0, 3, 1, 4).unbind(0)
            a = (q @ k.transpose(-1, -2)) * (c // h) ** -0.5 + self.table[:, self.ri, self.rj]
            y = self.proj((a.softmax(-1) @ v).transpose(1, 2).reshape(b, p * p, c))
            if self.grid:
                y = y.view(n, H // p, W // p, p, p, c).permute(0, 3, 1, 4, 2, 5)
            else:
                y = y.view(n, H // p, W // p, p, p, c).permute(0, 1, 3, 2, 4, 5)
            x = x + y.reshape(n, H, W, c)
            return x + self.mlp(self.n2(x))

    def __init__(self, dims=(64, 128), p=4):
        super().__init__()
        self.stem = nn.Sequential(
            nn.Conv2d(3, 32, 3, 2, 1), nn.BatchNorm2d(32), nn.GELU(), nn.Conv2d(32, 32, 3, 1, 1)
        )
        self.mb = nn.ModuleList()
        self.att = nn.ModuleList()
        cin = 32
        for d in dims:
            self.mb.append(MaxViT.MBConv(cin, d, 2))
            self.att.append(nn.Sequential(MaxViT.Attn(d, p, False), MaxViT.Attn(d, p, True)))
            cin = d
        self.norm, self.head = nn.LayerNorm(cin), nn.Linear(cin, 10)

    def forward(self, x):
        x = self.stem(x)
        for mb, att in zip(self.mb, self.att):
            x = att(mb(x).permute(0, 2, 3, 1)).permute(0, 3, 1, 2)
        return self.head(self.norm(x.mean((2, 3))))


def m_maxvit():
    return custom(MaxViT, image_inputs(64), ["logits"])


# ================================================================ depthwise + squeeze-excitation
def divisible(v, d=8):
    return max(d, int(v + d / 2) // d * d)


class SE(nn.Module):
    def __init__(self, ch, sq, act=nn.ReLU, gate=nn.Hardsigmoid):
        super().__init__()
        self.f = nn.Sequential(
            nn.AdaptiveAvgPool2d(1), nn.Conv2d(ch, sq, 1), act(), nn.Conv2d(sq, ch, 1), gate()
        )

    def forward(self, x):
        return x * self.f(x)


def cba(cin, cout, k=1, s=1, groups=1, act=nn.ReLU):
    return nn.Sequential(
        nn.Conv2d(cin, cout, k, s, k // 2, groups=groups, bias=False),
        nn.BatchNorm2d(cout),
        act() if act else nn.Identity(),
    )


class MixNet(nn.Module):
    """MixNet-like: MixConv (channels split into depthwise groups with kernels 3..11 in one
    layer), grouped 1x1 expand/project convs via split, SE with swish, 128x128 input."""

    class Mix(nn.Module):
        """Channels split into len(ks) groups, one conv each (kernel ks[i]), concatenated:
        depthwise MixConv, or grouped 1x1 convs (cin -> cout) when depthwise=False."""

        def __init__(self, cin, cout, ks, stride=1, depthwise=True):
            super().__init__()
            n = len(ks)

            def split(c):
                return [c // n + (c % n if i == 0 else 0) for i in range(n)]

            self.splits = split(cin)
            self.convs = nn.ModuleList(
                nn.Conv2d(
                    a,
                    a if depthwise else b,
                    k,
                    stride,
                    k // 2,
                    groups=a if depthwise else 1,
                    bias=False,
                )
                for a, b, k in zip(self.splits, split(cout), ks)
            )

        def forward(self, x):
            if len(self.convs) == 1:
                return self.convs[0](x)
            return torch.cat([c(t) for c, t in zip(self.convs, x.split(self.splits, 1))], 1)

    class Block(nn.Module):
        def __init__(self, cin, cout, ks, s, e, se, swish, pw_groups):
            super().__init__()
            mid = cin * e
            act = nn.SiLU if swish else nn.ReLU
            Mix = MixNet.Mix
            layers = []
            if e != 1:
                layers += [Mix(cin, mid, [1] * pw_groups, 1, False), nn.BatchNorm2d(mid), act()]
            layers += [Mix(mid, mid, ks, s), nn.BatchNorm2d(mid), act()]
            if se:
                layers.append(SE(mid, max(1, int(cin * se)), nn.SiLU, nn.Sigmoid))
            layers += [Mix(mid, cout, [1] * pw_groups, 1, False), nn.BatchNorm2d(cout)]
            self.f = nn.Sequential(*layers)
            self.res = s == 1 and cin == cout

        def forward(self, x):
            y = self.f(x)
            return x + y if self.res else y

    CFG = [  # cin, cout, kernels, stride, expand, se, swish, pw groups
        (16, 16, [3], 1, 1, None, False, 1),
        (16, 24, [3], 2, 6, None, False, 2),
        (24, 24, [3], 1, 3, None, False, 2),
        (24, 40, [3, 5, 7], 2, 6, 0.5, True, 1),
        (40, 40, [3, 5], 1, 6, 0.5, True, 2),
        (40, 80, [3, 5, 7], 2, 6, 0.25, True, 1),
        (80, 80, [3, 5], 1, 6, 0.25, True, 2),
        (80, 120, [3, 5, 7], 1, 6, 0.5, True, 2),
        (120, 120, [3, 5, 7, 9], 1, 3, 0.5, True, 2),
        (120, 200, [3, 5, 7, 9, 11], 2, 6, 0.5, True, 1),
        (200, 200, [3, 5, 7, 9], 1, 6, 0.5, True, 2),
    ]

    def __init__(self):
        super().__init__()
        self.stem = cba(3, 16, 3, 2)
        self.blocks = nn.Sequential(*[MixNet.Block(*c) for c in MixNet.CFG])
        self.head = cba(200, 768)
        self.fc = nn.Linear(768, 100)

    def forward(self, x):
        return self.fc(self.head(self.blocks(self.stem(x))).mean((2, 3)))


def m_mixnet():
    return custom(MixNet, image_inputs(128), ["logits"])


class MobileNetV3L(nn.Module):
    """MobileNetV3-Large: 3x3/5x5 depthwise with stride 2, SE (ReLU, hard-sigmoid) on 5x5
    stages, ReLU/hard-swish, 1x1 head conv + hard-swish classifier MLP, 192x192 input."""

    CFG = [  # k, exp, out, se, hardswish, stride
        (3, 16, 16, False, False, 1),
        (3, 64, 24, False, False, 2),
        (3, 72, 24, False, False, 1),
        (5, 72, 40, True, False, 2),
        (5, 120, 40, True, False, 1),
        (5, 120, 40, True, False, 1),
        (3, 240, 80, False, True, 2),
        (3, 200, 80, False, True, 1),
        (3, 184, 80, False, True, 1),
        (3, 184, 80, False, True, 1),
        (3, 480, 112, True, True, 1),
        (3, 672, 112, True, True, 1),
        (5, 672, 160, True, True, 2),
        (5, 960, 160, True, True, 1),
        (5, 960, 160, True, True, 1),
    ]

    class Block(nn.Module):
        def __init__(self, cin, k, exp, cout, se, hs, s):
            super().__init__()
            act = nn.Hardswish if hs else nn.ReLU
            layers = [] if exp == cin else [cba(cin, exp, act=act)]
            layers.append(cba(exp, exp, k, s, exp, act))
            if se:
                layers.append(SE(exp, divisible(exp // 4)))
            layers.append(cba(exp, cout, act=None))
            self.f = nn.Sequential(*layers)
            self.res = s == 1 and cin == cout

        def forward(self, x):
            return x + self.f(x) if self.res else self.f(x)

    def __init__(self):
        super().__init__()
        layers, cin = [cba(3, 16, 3, 2, act=nn.Hardswish)], 16
        for k, e, c, se, hs, s in MobileNetV3L.CFG:
            layers.append(MobileNetV3L.Block(cin, k, e, c, se, hs, s))
            cin = c
        layers.append(cba(cin, 960, act=nn.Hardswish))
        self.features = nn.Sequential(*layers)
        self.cls = nn.Sequential(nn.Linear(960, 1280), nn.Hardswish(), nn.Linear(1280, 1000))

    def forward(self, x):
        return self.cls(F.adaptive_avg_pool2d(self.features(x), 1).flatten(1))


def m_mobilenetv3_large():
    return custom(MobileNetV3L, image_inputs(192), ["logits"])


class EffNetV2(nn.Module):
    """EfficientNetV2-like: fused-MBConv (full 3x3 expand conv + 1x1 project) in the early
    stages, MBConv (depthwise 3x3/5x5 + SE with SiLU/sigmoid) later, SiLU, 112x112 input."""

    class Fused(nn.Module):
        def __init__(self, cin, cout, e, s):
            super().__init__()
            mid = cin * e
            if e == 1:
                self.f = cba(cin, cout, 3, s, act=nn.SiLU)
            else:
                self.f = nn.Sequential(cba(cin, mid, 3, s, act=nn.SiLU), cba(mid, cout, act=None))
            self.res = s == 1 and cin == cout

        def forward(self, x):
            return x + self.f(x) if self.res else self.f(x)

    class MB(nn.Module):
        def __init__(self, cin, cout, e, s, k=3):
            super().__init__()
            mid = cin * e
            self.f = nn.Sequential(
                cba(cin, mid, act=nn.SiLU),
                cba(mid, mid, k, s, mid, nn.SiLU),
                SE(mid, max(1, cin // 4), nn.SiLU, nn.Sigmoid),
                cba(mid, cout, act=None),
            )
            self.res = s == 1 and cin == cout

        def forward(self, x):
            return x + self.f(x) if self.res else self.f(x)

    STAGES = [  # fused?, expand, kernel, stride, out, layers
        (True, 1, 3, 1, 16, 1),
        (True, 4, 3, 2, 32, 2),
        (True, 4, 3, 2, 48, 2),
        (False, 4, 3, 2, 96, 2),
        (False, 6, 3, 1, 112, 2),
        (False, 6, 5, 2, 192, 2),
    ]

    def __init__(self):
        super().__init__()
        layers, cin = [cba(3, 16, 3, 2, act=nn.SiLU)], 16
        for fused, e, k, s, c, n in EffNetV2.STAGES:
            for i in range(n):
                st = s if i == 0 else 1
                blk = EffNetV2.Fused(cin, c, e, st) if fused else EffNetV2.MB(cin, c, e, st, k)
                layers.append(blk)
                cin = c
        layers.append(cba(cin, 640, act=nn.SiLU))
        self.features = nn.Sequential(*layers)
        self.fc = nn.Linear(640, 100)

    def forward(self, x):
        return self.fc(self.features(x).mean((2, 3)))


def m_efficientnetv2():
    return custom(EffNetV2, image_inputs(112), ["logits"])


class GhostNet(nn.Module):
    """GhostNet: ghost modules (1x1 primary conv + cheap 3x3 depthwise conv, concat, channel
    slice), stride-2 depthwise 3x3/5x5 in bottlenecks, depthwise+pointwise shortcuts, SE with
    relu6(x+3)/6 gate, 160x160 input."""

    class Ghost(nn.Module):
        def __init__(self, cin, cout, relu=True):
            super().__init__()
            self.cout = cout
            init = math.ceil(cout / 2)
            act = nn.ReLU if relu else None
            self.primary = cba(cin, init, act=act)
            self.cheap = cba(init, init, 3, 1, init, act=act)

        def forward(self, x):
            a = self.primary(x)
            return torch.cat([a, self.cheap(a)], 1)[:, : self.cout]

    class Bottleneck(nn.Module):
        def __init__(self, cin, mid, cout, k, s, se):
            super().__init__()
            self.g1 = GhostNet.Ghost(cin, mid)
            self.dw = cba(mid, mid, k, s, mid, None) if s > 1 else nn.Identity()
            self.se = (
                nn.Sequential(
                    nn.AdaptiveAvgPool2d(1),
                    nn.Conv2d(mid, divisible(mid * se, 4), 1),
                    nn.ReLU(),
                    nn.Conv2d(divisible(mid * se, 4), mid, 1),
                )
                if se
                else None
            )
            self.g2 = GhostNet.Ghost(mid, cout, relu=False)
            self.sc = (
                nn.Identity()
                if s == 1 and cin == cout
                else nn.Sequential(cba(cin, cin, k, s, cin, None), cba(cin, cout, act=None))
            )

        def forward(self, x):
            y = self.dw(self.g1(x))
            if self.se is not None:
                y = y * (F.relu6(self.se(y) + 3.0) / 6.0)
            return self.g2(y) + self.sc(x)

    CFG = [  # k, exp, out, se, stride
        (3, 16, 16, 0, 1),
        (3, 48, 24, 0, 2),
        (3, 72, 24, 0, 1),
        (5, 72, 40, 0.25, 2),
        (5, 120, 40, 0.25, 1),
        (3, 240, 80, 0, 2),
        (3, 200, 80, 0, 1),
        (3, 184, 80, 0, 1),
        (3, 184, 80, 0, 1),
        (3, 480, 112, 0.25, 1),
        (3, 672, 112, 0.25, 1),
        (5, 672, 160, 0.25, 2),
        (5, 960, 160, 0, 1),
        (5, 960, 160, 0.25, 1),
        (5, 960, 160, 0, 1),
        (5, 960, 160, 0.25, 1),
    ]

    def __init__(self):
        super().__init__()
        layers, cin = [cba(3, 16, 3, 2)], 16
        for k, e, c, se, s in GhostNet.CFG:
            layers.append(GhostNet.Bottleneck(cin, e, c, k, s, se))
            cin = c
        layers.append(cba(cin, 960))
        self.features = nn.Sequential(*layers)
        self.head = nn.Conv2d(960, 1280, 1)
        self.fc = nn.Linear(1280, 100)

    def forward(self, x):
        y = F.adaptive_avg_pool2d(self.features(x), 1)
        return self.fc(F.relu(self.head(y)).flatten(1))


def m_ghostnet():
    return custom(GhostNet, image_inputs(160), ["logits"])


class ConvNeXtLN(nn.Module):
    """ConvNeXt-like: 4x4/4 patchify stem, blocks of 7x7 (last two stages 9x9) depthwise conv ->
    permute to channels-last -> nn.LayerNorm -> Linear 4x -> GELU -> Linear -> layer scale ->
    permute back; hand-written channels-first LayerNorm (mean/var) before the 2x2/2 downsample
    convs; 128x128 input."""

    class LN2d(nn.Module):
        def __init__(self, c, eps=1e-6):
            super().__init__()
            self.w, self.b, self.eps = (
                nn.Parameter(torch.ones(c)),
                nn.Parameter(torch.zeros(c)),
                eps,
            )

        def forward(self, x):
            u = x.mean(1, keepdim=True)
            s = (x - u).pow(2).mean(1, keepdim=True)
            x = (x - u) / torch.sqrt(s + self.eps)
            return self.w[:, None, None] * x + self.b[:, None, None]

    class Block(nn.Module):
        def __init__(self, d, k):
            super().__init__()
            self.dw = nn.Conv2d(d, d, k, padding=k // 2, groups=d)
            self.norm = nn.LayerNorm(d, eps=1e-6)
            self.pw1, self.pw2 = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)
            self.gamma = nn.Parameter(torch.full((d,), 0.3))

        def forward(self, x):
            y = self.dw(x).permute(0, 2, 3, 1)
            y = self.gamma * self.pw2(F.gelu(self.pw1(self.norm(y))))
            return x + y.permute(0, 3, 1, 2)

    def __init__(self, dims=(32, 64, 128, 256), depths=(2, 2, 4, 2), ks=(7, 7, 9, 9)):
        super().__init__()
        L = ConvNeXtLN.LN2d
        self.stages = nn.ModuleList()
        for i, (d, n, k) in enumerate(zip(dims, depths, ks)):
            down = (
                nn.Sequential(nn.Conv2d(3, d, 4, 4), L(d))
                if i == 0
                else nn.Sequential(L(dims[i - 1]), nn.Conv2d(dims[i - 1], d, 2, 2))
            )
            self.stages.append(nn.Sequential(down, *[ConvNeXtLN.Block(d, k) for _ in range(n)]))
        self.norm, self.fc = nn.LayerNorm(dims[-1]), nn.Linear(dims[-1], 100)

    def forward(self, x):
        for s in self.stages:
            x = s(x)
        return self.fc(self.norm(x.mean((2, 3))))


def m_convnext_ln():
    return custom(ConvNeXtLN, image_inputs(128), ["logits"])


# ================================================================ embedding-heavy
class CharHighway(nn.Module):
    """ELMo-style character encoder: byte embedding (padding_idx 0) of (words x chars), six
    Conv1d widths 1..6 with max-over-time, 2 highway layers (sigmoid gate), projection; plus a
    mean-pooled sentence classifier."""

    def __init__(
        self, n_chars=262, cdim=16, filt=((1, 32), (2, 32), (3, 64), (4, 128), (5, 128), (6, 128))
    ):
        super().__init__()
        self.emb = nn.Embedding(n_chars, cdim, padding_idx=0)
        self.convs = nn.ModuleList(nn.Conv1d(cdim, n, w) for w, n in filt)
        tot = sum(n for _, n in filt)
        self.hw = nn.ModuleList(nn.Linear(tot, 2 * tot) for _ in range(2))
        self.proj = nn.Linear(tot, 256)
        self.cls = nn.Linear(256, 5)

    def forward(self, chars):  # (N, W, C) int64
        n, w, c = chars.shape
        x = self.emb(chars.reshape(-1, c)).transpose(1, 2)
        h = torch.cat([F.relu(conv(x).max(-1)[0]) for conv in self.convs], -1)
        for lin in self.hw:
            a, g = lin(h).chunk(2, -1)
            g = torch.sigmoid(g)
            h = g * h + (1 - g) * F.relu(a)
        tok = self.proj(h).view(n, w, -1)
        return tok, self.cls(tok.mean(1))


def m_char_highway():
    g = torch.Generator().manual_seed(11)
    chars = torch.randint(1, 262, (1, 32, 16), generator=g)
    lens = torch.randint(2, 16, (32,), generator=g)
    chars[0, torch.arange(16)[None, :] >= lens[:, None]] = 0  # padded words
    return custom(CharHighway, {"chars": chars}, ["word_repr", "logits"])


class DLRM(nn.Module):
    """DLRM-like: bottom MLP on dense features, 8 EmbeddingBag(sum) tables of various sizes on
    fixed-size multi-hot bags, pairwise dot-product interaction (bmm + upper-triangle gather),
    top MLP, sigmoid CTR."""

    def __init__(self, n_dense=13, tables=(20000, 10000, 5000, 2000, 1000, 500, 100, 30), d=64):
        super().__init__()
        self.bot = nn.Sequential(nn.Linear(n_dense, 128), nn.ReLU(), nn.Linear(128, d), nn.ReLU())
        self.embs = nn.ModuleList(nn.EmbeddingBag(n, d, mode="sum") for n in tables)
        f = len(tables) + 1
        li, lj = torch.triu_indices(f, f, offset=1)
        self.register_buffer("li", li, False)
        self.register_buffer("lj", lj, False)
        self.top = nn.Sequential(
            nn.Linear(d + len(li), 256), nn.ReLU(), nn.Linear(256, 64), nn.ReLU(), nn.Linear(64, 1)
        )

    def forward(self, dense, sparse):  # (N, 13) float, (N, tables, bag) int64
        x = self.bot(dense)
        t = torch.stack([x] + [e(sparse[:, i]) for i, e in enumerate(self.embs)], 1)
        z = torch.bmm(t, t.transpose(1, 2))[:, self.li, self.lj]
        return torch.sigmoid(self.top(torch.cat([x, z], 1)))


def m_dlrm():
    g = torch.Generator().manual_seed(12)
    dense = torch.rand(1, 13, generator=g) * 3
    sizes = (20000, 10000, 5000, 2000, 1000, 500, 100, 30)
    sparse = torch.stack([torch.randint(0, n, (1, 4), generator=g) for n in sizes], 1)
    return custom(DLRM, {"dense": dense, "sparse": sparse}, ["ctr"])


class FastText(nn.Module):
    """fastText-like classifier: word ids plus hashed bigram ids computed in-graph (int64
    Mul/Add/Mod), one EmbeddingBag(sum) with per-sample weights = non-padding mask / count
    (a masked mean), linear + softmax."""

    def __init__(self, vocab=20000, buckets=40000, d=64, classes=20):
        super().__init__()
        self.vocab, self.buckets = vocab, buckets
        self.emb = nn.EmbeddingBag(vocab + buckets, d, mode="sum")
        self.fc = nn.Linear(d, classes)

    def forward(self, ids):  # (N, T) int64, 0 = padding
        big = self.vocab + (ids[:, :-1] * 116049371 + ids[:, 1:]) % self.buckets
        keep = torch.cat([ids != 0, (ids[:, :-1] != 0) & (ids[:, 1:] != 0)], 1).float()
        w = keep / keep.sum(1, keepdim=True).clamp(min=1.0)
        h = self.emb(torch.cat([ids, big], 1), per_sample_weights=w)
        logits = self.fc(h)
        return logits, logits.softmax(-1)


def m_fasttext():
    inp = text_inputs(20000, seq=64, mask=False)
    inp["input_ids"][0, 50:] = 0  # trailing padding
    return custom(FastText, inp, ["logits", "probs"])


# ================================================================ 1-D conv audio encoders
def m_encodec_encoder():
    """EnCodec encoder: weight-normed Conv1d with computed reflect padding, strided
    downsampling (2,4,5), dilated residual units with ELU, 2-layer LSTM with a residual."""
    from transformers import EncodecConfig, EncodecModel

    cfg = EncodecConfig(
        num_filters=16,
        hidden_size=64,
        upsampling_ratios=[5, 4, 2],
        num_lstm_layers=2,
        codebook_size=64,
        codebook_dim=64,
        use_causal_conv=False,
        target_bandwidths=[1.5, 3.0],
        sampling_rate=16000,
    )
    torch.manual_seed(0)
    m = EncodecModel(cfg).eval()
    g = torch.Generator().manual_seed(13)
    inp = {"input_values": torch.randn(1, 1, 4000, generator=g) * 0.3}
    return Call(m, lambda m, x: m.encoder(x)), inp, ["embeddings"]


def m_dac_encoder():
    """DAC encoder: Snake activation x + sin(a x)^2 / a with learned per-channel a, plain
    Conv1d (HF applies weight norm only for training), residual units with dilations 1/3/9,
    strided downsampling (2,4,5)."""
    from transformers import DacConfig, DacModel

    cfg = DacConfig(
        encoder_hidden_size=8,
        downsampling_ratios=[2, 4, 5],
        decoder_hidden_size=64,
        upsampling_ratios=[5, 4, 2],
        hidden_size=64,
        n_codebooks=2,
        codebook_size=64,
        codebook_dim=8,
        hop_length=40,
    )
    torch.manual_seed(0)
    m = DacModel(cfg).eval()
    fan_in_init(m, 0.7)  # HF's N(0, 0.02) conv init shrinks the output to ~1e-4
    with torch.no_grad():  # learned Snake alphas (init ones) that differ per channel
        g = torch.Generator().manual_seed(14)
        for n, p in m.named_parameters():
            if n.endswith("alpha"):
                p.uniform_(0.5, 2.0, generator=g)
    g = torch.Generator().manual_seed(13)
    inp = {"input_values": torch.randn(1, 1, 4000, generator=g) * 0.3}
    return Call(m, lambda m, x: m.encoder(x)), inp, ["embeddings"]


def m_w2v_bert():
    """Wav2Vec2-BERT: 160-dim filterbank input, Conformer layers (macaron half-step FFNs,
    relative-key position embeddings clipped left 64 / right 8, GLU + depthwise Conv1d k=15
    + LayerNorm conv module)."""
    from transformers import Wav2Vec2BertConfig

    cfg = Wav2Vec2BertConfig(
        hidden_size=96,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=192,
        conv_depthwise_kernel_size=15,
        left_max_position_embeddings=32,
        right_max_position_embeddings=8,
        add_adapter=False,
    )
    return hf(
        "Wav2Vec2BertModel",
        cfg,
        feats((1, 96, 160), name="input_features"),
        ["last_hidden_state"],
        jit=True,
    )


class Citrinet(nn.Module):
    """Citrinet/QuartzNet-like ASR encoder: time-channel separable Conv1d (depthwise k 11..25
    + pointwise) + BatchNorm1d + ReLU, 1-D squeeze-excitation, residual 1x1 + BN, stride-2
    depthwise downsampling (x8), GroupNorm after the first and the grouped k=41 last conv,
    log-softmax CTC head. Input (N, 80 mels, 256 frames)."""

    class Block(nn.Module):
        def __init__(self, cin, cout, k, stride, reps=2):
            super().__init__()
            layers = []
            c = cin
            for r in range(reps):
                s = stride if r == 0 else 1
                layers += [
                    nn.Conv1d(c, c, k, s, k // 2, groups=c, bias=False),
                    nn.Conv1d(c, cout, 1, bias=False),
                    nn.BatchNorm1d(cout),
                ]
                if r < reps - 1:
                    layers.append(nn.ReLU())
                c = cout
            self.f = nn.Sequential(*layers)
            self.se1, self.se2 = nn.Linear(cout, cout // 8), nn.Linear(cout // 8, cout)
            self.res = nn.Sequential(
                nn.Conv1d(cin, cout, 1, stride, bias=False), nn.BatchNorm1d(cout)
            )

        def forward(self, x):
            y = self.f(x)
            w = torch.sigmoid(self.se2(F.relu(self.se1(y.mean(-1)))))
            return F.relu(y * w.unsqueeze(-1) + self.res(x))

    def __init__(self, cin=80, c=192, vocab=64):
        super().__init__()
        self.pre = nn.Sequential(
            nn.Conv1d(cin, c, 5, padding=2, bias=False), nn.GroupNorm(16, c), nn.ReLU()
        )
        B = Citrinet.Block
        self.blocks = nn.Sequential(
            B(c, c, 11, 2),
            B(c, c, 13, 1),
            B(c, c, 15, 2),
            B(c, c, 17, 1),
            B(c, 256, 19, 2),
            B(256, 256, 25, 1),
        )
        self.post = nn.Sequential(
            nn.Conv1d(256, 384, 41, padding=20, groups=4), nn.GroupNorm(8, 384), nn.ReLU()
        )
        self.head = nn.Conv1d(384, vocab, 1)

    def forward(self, x):
        y = self.head(self.post(self.blocks(self.pre(x))))
        return F.log_softmax(y.transpose(1, 2), -1)


def m_citrinet():
    return custom(Citrinet, feats((1, 80, 256)), ["log_probs"], init_gain=1.15)


# ================================================================ others
def m_patchtst():
    """PatchTST forecaster: std scaling (in-graph mean/std over time), patching by unfold
    (16 long, stride 8), channel-independent Transformer with BatchNorm, flatten head."""
    from transformers import PatchTSTConfig

    cfg = PatchTSTConfig(
        num_input_channels=7,
        context_length=128,
        patch_length=16,
        patch_stride=8,
        d_model=64,
        num_attention_heads=4,
        num_hidden_layers=2,
        ffn_dim=128,
        prediction_length=24,
        scaling="std",
        norm_type="batchnorm",
    )
    g = torch.Generator().manual_seed(15)
    t = torch.arange(128, dtype=torch.float32)
    x = (
        torch.sin(t[None, :, None] / (3 + torch.arange(7))) * 2
        + torch.randn(1, 128, 7, generator=g) * 0.3
    )
    return hf(
        "PatchTSTForPrediction",
        cfg,
        {"past_values": x + 5},
        ["prediction_outputs"],
        eager=False,
        jit=True,
    )


def m_perceiver_text():
    """Perceiver IO on raw bytes: byte embedding + learned positions, 32 latents
    cross-attending to 128 inputs (with a padding mask), latent self-attention blocks,
    a decoder query for classification."""
    from transformers import PerceiverConfig

    cfg = PerceiverConfig(
        num_latents=32,
        d_latents=128,
        d_model=64,
        num_blocks=1,
        num_self_attends_per_block=3,
        num_self_attention_heads=4,
        num_cross_attention_heads=2,
        max_position_embeddings=128,
        num_labels=4,
        attention_probs_dropout_prob=0.0,
    )
    return hf(
        "PerceiverForSequenceClassification",
        cfg,
        text_inputs(262, seq=128),
        ["logits"],
        eager=False,
        jit=True,
    )


class X3D(nn.Module):
    """X3D-like video net on (N, 3, 8 frames, 48, 48): factorised stem (1x3x3 spatial conv +
    5x1x1 depthwise temporal conv), bottlenecks with 3x3x3 depthwise Conv3d (spatial stride 2),
    3-D SE, swish, BatchNorm3d, a temporal MaxPool3d, AdaptiveAvgPool3d head."""

    class Block(nn.Module):
        def __init__(self, cin, cout, s, e=2.25):
            super().__init__()
            mid = int(cin * e)
            self.f = nn.Sequential(
                nn.Conv3d(cin, mid, 1, bias=False),
                nn.BatchNorm3d(mid),
                nn.ReLU(),
                nn.Conv3d(mid, mid, 3, (1, s, s), 1, groups=mid, bias=False),
                nn.BatchNorm3d(mid),
            )
            self.se = nn.Sequential(
                nn.AdaptiveAvgPool3d(1),
                nn.Conv3d(mid, mid // 4, 1),
                nn.ReLU(),
                nn.Conv3d(mid // 4, mid, 1),
                nn.Sigmoid(),
            )
            self.proj = nn.Sequential(nn.Conv3d(mid, cout, 1, bias=False), nn.BatchNorm3d(cout))
            self.sc = (
                nn.Identity()
                if s == 1 and cin == cout
                else nn.Sequential(
                    nn.Conv3d(cin, cout, 1, (1, s, s), bias=False), nn.BatchNorm3d(cout)
                )
            )

        def forward(self, x):
            y = self.f(x)
            y = F.silu(y * self.se(y))
            return F.relu(self.proj(y) + self.sc(x))

    def __init__(self):
        super().__init__()
        self.stem = nn.Sequential(
            nn.Conv3d(3, 24, (1, 3, 3), (1, 2, 2), (0, 1, 1), bias=False),
            nn.Conv3d(24, 24, (5, 1, 1), 1, (2, 0, 0), groups=24, bias=False),
            nn.BatchNorm3d(24),
            nn.ReLU(),
        )
        B = X3D.Block
        self.blocks = nn.Sequential(
            B(24, 24, 2),
            B(24, 24, 1),
            B(24, 48, 2),
            B(48, 48, 1),
            nn.MaxPool3d((2, 1, 1)),
            B(48, 96, 2),
            B(96, 96, 1),
            B(96, 192, 2),
        )
        self.head = nn.Sequential(
            nn.Conv3d(192, 432, 1, bias=False), nn.BatchNorm3d(432), nn.ReLU()
        )
        self.fc = nn.Linear(432, 50)

    def forward(self, x):
        y = F.adaptive_avg_pool3d(self.head(self.blocks(self.stem(x))), 1).flatten(1)
        return self.fc(y)


def m_x3d_video():
    g = torch.Generator().manual_seed(16)
    return custom(X3D, {"video": torch.randn(1, 3, 8, 48, 48, generator=g)}, ["logits"])


def m_upernet():
    """UperNet segmentation on a small ConvNeXt backbone: pyramid pooling (adaptive avg pool
    to 1/2/4 + bilinear upsample), FPN lateral/top-down path, fused 3x3 head, 128x128."""
    from transformers import ConvNextConfig, UperNetConfig

    bb = ConvNextConfig(
        depths=[1, 1, 2, 1],
        hidden_sizes=[24, 48, 96, 192],
        out_features=["stage1", "stage2", "stage3", "stage4"],
    )
    cfg = UperNetConfig(
        backbone_config=bb,
        hidden_size=48,
        pool_scales=[1, 2, 4],
        use_auxiliary_head=False,
        num_labels=8,
    )
    return hf(
        "UperNetForSemanticSegmentation", cfg, image_inputs(128), ["logits"], eager=False, jit=True
    )


ALL = {k[2:]: v for k, v in globals().items() if k.startswith("m_")}
# Built and checked once, left out of the set (--list) as near repeats of a zoo model or of
# another in this set; `fresh.py NAME` still builds them.
EXTRA = ("granite", "ctrl", "data2vec_vision")
MODELS = {k: v for k, v in ALL.items() if k not in EXTRA}

if __name__ == "__main__":
    main(ALL if sys.argv[1] in EXTRA else MODELS, sys.argv)
