"""A seventh set of unseen models: architectures neither the zoo, build.py, fresh.py, third.py,
fourth.py, fifth.py nor sixth.py holds.

README section (the table the set would add to README.md). Families: GQA = GQA decoders
with RoPE + RMSNorm, GPT2 = GPT-2-like decoders, DWSE = depthwise / squeeze-excitation convnets,
EMB = embedding-heavy, WIN = window / hierarchical attention, VIT = small ViTs, AUD = 1-D conv
audio, OTH = others.

| name | family | what it exercises |
|---|---|---|
| `bitnet` | GQA | BitNet b1.58 layout: sub-RMSNorms before o_proj / down_proj, squared ReLU, MQA |
| `dbrx` | GQA | bias-free LayerNorm, fused Wqkv Clip(+-0.25), 6-expert top-2 MoE, L1-renormalised |
| `phimoe` | GQA | sparsemixer top-2 routing (threshold masks), sliding window 24, LM-head bias |
| `longcat_flash` | GQA | 2 MLA attns + 2 MLPs per layer, shortcut MoE with 2 identity experts |
| `gemma3n_text` | GQA | AltUp, LAuReL, per-layer embeddings, Gaussian top-k sparsity, KV sharing |
| `mbart_causal` | GPT2 | scaled embeddings, positions offset 2, embedding LN, pre-LN + final LN |
| `xmod_causal` | GPT2 | per-language adapters chosen per sample by a lang_ids input (Where) |
| `rembert_causal` | GPT2 | 64-wide input embeddings projected up, post-LN, 192-wide output head |
| `bark_fine` | GPT2 | non-causal GPT blocks over 8 summed codebook embeddings, per-codebook heads |
| `fasternet` | DWSE | partial conv (3x3 on 1/4 of the channels: Split + Concat), patch convs |
| `repvit` | DWSE | train-time 3x3 + 1x1 depthwise + BN-identity mixer, SE every other block, BN1d |
| `espnetv2` | DWSE | EESP: grouped 1x1, depthwise dilations 1/2/4/8, hierarchical fusion, PReLU |
| `sknet` | DWSE | selective kernels: grouped 3x3 dilation 1 / 2, softmax over branches |
| `starnet` | DWSE | 7x7 depthwise, star op ReLU6(f1) * f2, stride-2 3x3 downsampling |
| `tt_rec` | EMB | tensor-train tables (int64 Div / Mod digits, core Gathers, batched MatMul) |
| `hash_embed` | EMB | 4 universal hashes of 31-bit ids (int64 Mul / Mod), weighted shared pool |
| `pnn` | EMB | 120 gathered pairwise inner products + outer-product kernel, offsets in-graph |
| `afm` | EMB | attention over 55 pairwise products, multi-hot masked-mean field, 1st-order term |
| `gru4rec` | EMB | GRUCell x2 over a left-padded session (Where masking), 20000-way scores, TopK |
| `coat` | WIN | factorised attention softmax(K)^T V, conv rel-pos (3/5/7 depthwise), class tokens |
| `dilateformer` | WIN | multi-scale dilated attn: Unfold with dilation 1/2/3, softmax over 9 keys |
| `edgevit` | WIN | local-global-local: pooled delegate attention, depthwise ConvTranspose spread |
| `lambda_resnet` | WIN | lambda layers: content + Conv3d (1, 7, 7) position lambdas, Einsum |
| `vitpose` | VIT | ViT on a 64x48 crop, ConvTranspose2d x2 + BN heatmap decoder, 17 keypoints |
| `groupvit` | VIT | learned group tokens, hard arg-max one-hot grouping (16 then 4 groups) |
| `aimv2_vision` | VIT | RMSNorm, SwiGLU, bias-free, attention-pooling head |
| `mlcd_vision` | VIT | class token + 2-D rotary embedding over the patch grid |
| `e_branchformer` | AUD | MHSA in parallel with cgMLP (depthwise Conv1d k31), depthwise k3 merge |
| `wave_unet` | AUD | Conv1d k15 + decimation (strided Slice), linear Resize, difference output |
| `leaf` | AUD | in-graph Gabor Conv1d k201, Gaussian pooling stride 80, PCEN by decay matrix |
| `crepe` | AUD | Conv1d k512 s4 + k64 (asym Pad), frames folded into batch, windowed decode |
| `patchtsmixer` | OTH | time-series MLP-Mixer: std scaling, patching, channel mixing, gated attn |
| `rcan` | OTH | super-resolution x3: residual channel attention, MeanShift, PixelShuffle(3) |
| `centernet` | OTH | ConvTranspose upsampling, MaxPool peak NMS, TopK, int64 Div/Mod, box gathers |
| `dgcnn` | OTH | dynamic k-NN graph (MatMul + TopK), EdgeConv gathers, max over neighbours |
| `retnet` | OTH | multi-scale retention: in-graph decay matrix (Range, Pow, Where), GroupNorm |

The dynamo exporter is used where the legacy one fails: `patchtsmixer` (its legacy graph fails
ONNX Runtime's shape inference: a MatMul of incompatible dimensions in the channel mixer's gated
attention) and `retnet` (its legacy graph's Reshape around the interleaved rotary
`repeat_interleave` is wrong: ONNX Runtime refuses it). Patched for export (same computation):
`dbrx` and `longcat_flash`, whose HF experts loop over the experts the example input hits (a
trace would freeze that set), compute the same routing-weighted sum over all experts
(`_dense_experts`; LongCat's two zero experts are the identity); `dbrx` also sets the
`attn_config.rope_theta` attribute that HF's DbrxAttention still reads but its config no longer
defines; `xmod_causal`'s per-language adapters are selected by Where instead of HF's boolean-mask
gather / scatter, which the legacy exporter records with the example's batch of 1 (ONNX Runtime
then fails at batch 4). `phimoe` uses transformers' `batched_mm` experts. `longcat_flash`'s
expert weights are redrawn (N(0, 0.09^2) / N(0, 0.12^2)) so the routed experts are not
negligible next to the identity experts. No tried architecture had to be dropped.

Usage: python seventh.py NAME      (builds one model into $GE_UNSEEN_DIR/NAME/)
       python seventh.py --list
       python seventh.py --bench-layout  (writes $GE_UNSEEN_DIR/cache/zoo/NAME/ for each built
                                          model, so that GE_MODEL_CACHE=$GE_UNSEEN_DIR/cache
                                          benchmarks/bench_zoo.py benches them)
Build this set into its own directory (e.g. GE_UNSEEN_DIR=/work/unseen11), not the other sets'.
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
from fresh import SE, cba, custom, decoder, feats
from sixth import _rand_rms
from third import Attention, ids, mlp

from build import hf, image_inputs, main, text_inputs

_TOKENS = dict(pad_token_id=0, bos_token_id=1, eos_token_id=2)


def _dense_experts(experts, n_total, expert_fn):
    """Replace an HF experts module's forward (a loop over the experts the example input hits,
    which a trace would freeze) by the same sum over all n_total experts, each weighted by its
    (token, expert) routing weight (0 where not chosen): a static graph."""

    def forward(hidden_states, top_k_index, top_k_weights):
        shape = hidden_states.shape
        x = hidden_states.reshape(-1, shape[-1])
        w = torch.zeros(x.shape[0], n_total, dtype=x.dtype).scatter_add(
            1, top_k_index, top_k_weights.to(x.dtype)
        )
        out = sum(w[:, e : e + 1] * expert_fn(e, x) for e in range(n_total))
        return out.reshape(shape)

    experts.forward = forward


# ================================================================ GQA decoders (RoPE, RMSNorm)
def m_bitnet():
    """BitNet b1.58 architecture (full-precision weights): Llama GQA attention with an extra
    RMSNorm (attn_sub_norm) before o_proj and one (ffn_sub_norm) before down_proj, squared-ReLU
    gated MLP, untied head."""
    from transformers import BitNetConfig

    cfg = BitNetConfig(
        vocab_size=1000,
        hidden_size=128,
        intermediate_size=320,
        num_hidden_layers=3,
        num_attention_heads=4,
        num_key_value_heads=1,
        max_position_embeddings=256,
        **_TOKENS,
    )
    wrap, inp, outs = decoder("BitNetForCausalLM", cfg, seq=48)
    _rand_rms(wrap)
    return wrap, inp, outs


def m_dbrx():
    """DBRX: bias-free LayerNorm, fused Wqkv clamped to +-clip_qkv (Clip), GQA 4:1, RoPE; MoE
    FFN of 6 GLU experts top-2 with L1-renormalised weights (experts patched to a dense
    weighted sum, same result)."""
    from transformers import DbrxConfig

    cfg = DbrxConfig(
        d_model=128,
        n_heads=4,
        n_layers=2,
        max_seq_len=256,
        vocab_size=1000,
        attn_config={"kv_n_heads": 1, "clip_qkv": 0.25},
        ffn_config={
            "ffn_hidden_size": 96,
            "moe_num_experts": 6,
            "moe_top_k": 2,
            "moe_normalize_expert_weights": 1.0,
        },
        **_TOKENS,
    )
    # DbrxAttention reads attn_config.rope_theta, which DbrxAttentionConfig no longer defines
    # (RoPE comes from cfg.rope_parameters); set it so the model builds
    object.__setattr__(cfg.attn_config, "rope_theta", 10000.0)
    wrap, inp, outs = decoder("DbrxForCausalLM", cfg, seq=40)
    for blk in wrap.model.transformer.blocks:
        ex = blk.ffn.experts
        shp = (-1, ex.ffn_hidden_size, ex.hidden_size)

        def fn(e, x, mlp_=ex.mlp, shp=shp):
            return mlp_(x, mlp_.w1.view(shp)[e], mlp_.v1.view(shp)[e], mlp_.w2.view(shp)[e])

        _dense_experts(ex, ex.num_experts, fn)
    return wrap, inp, outs


def m_phimoe():
    """PhiMoE (Phi-3.5-MoE): LayerNorm (with bias), GQA 4:1 with sliding window 24, sparsemixer
    top-2 routing (the second expert chosen after masking the first, each gated by a softmax
    over scores within a relative threshold of the max), 8 experts (batched_mm), LM head
    bias."""
    from transformers import PhimoeConfig

    cfg = PhimoeConfig(
        vocab_size=1000,
        hidden_size=128,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=1,
        max_position_embeddings=256,
        sliding_window=24,
        num_local_experts=8,
        num_experts_per_tok=2,
        lm_head_bias=True,
        attention_bias=True,
        experts_implementation="batched_mm",
        **_TOKENS,
    )
    return decoder("PhimoeForCausalLM", cfg, seq=48)


def m_longcat_flash():
    """LongCat-Flash: each layer holds two MLA attentions (low-rank q and kv latents, decoupled
    rope/nope heads) and two dense MLPs, plus a shortcut-connected MoE fed from the first
    attention's output; 6 routed experts + 2 zero-compute (identity) experts, top-2 with a
    score-correction bias and routed scaling (experts patched to a dense weighted sum)."""
    from transformers import LongcatFlashConfig

    cfg = LongcatFlashConfig(
        vocab_size=1000,
        hidden_size=128,
        num_layers=2,
        num_attention_heads=4,
        num_key_value_heads=4,
        ffn_hidden_size=192,
        q_lora_rank=64,
        kv_lora_rank=32,
        qk_nope_head_dim=16,
        qk_rope_head_dim=8,
        head_dim=8,
        v_head_dim=16,
        moe_topk=2,
        n_routed_experts=6,
        zero_expert_num=2,
        expert_ffn_hidden_size=64,
        routed_scaling_factor=1.5,
        max_position_embeddings=256,
        **_TOKENS,
    )
    wrap, inp, outs = decoder("LongcatFlashForCausalLM", cfg, seq=40)
    _rand_rms(wrap)
    for mod in wrap.modules():
        if type(mod).__name__ == "LongcatFlashExperts":

            def fn(e, x, ex=mod):
                if e >= ex.num_routed_experts:
                    return x
                gate, up = F.linear(x, ex.gate_up_proj[e]).chunk(2, dim=-1)
                return F.linear(ex.act_fn(gate) * up, ex.down_proj[e])

            with torch.no_grad():
                g = torch.Generator().manual_seed(11)
                mod.gate_up_proj.copy_(torch.randn(mod.gate_up_proj.shape, generator=g) * 0.09)
                mod.down_proj.copy_(torch.randn(mod.down_proj.shape, generator=g) * 0.12)
            _dense_experts(mod, mod.total_experts, fn)
    return wrap, inp, outs


def m_gemma3n_text():
    """Gemma 3n text decoder: AltUp (4 predicted streams, router-modulated predict / correct
    coefficients), LAuReL low-rank residual, per-layer input embeddings (a second 1000 x 4 x 16
    table gated into each layer), top-k activation sparsity by a Gaussian quantile cut-off
    (mean + z std), sliding / global layers, the last 2 layers reusing earlier layers' K/V,
    v-norm, final logit soft-capping."""
    from transformers import Gemma3nTextConfig

    cfg = Gemma3nTextConfig(
        vocab_size=1000,
        vocab_size_per_layer_input=1000,
        hidden_size=128,
        hidden_size_per_layer_input=16,
        intermediate_size=256,
        num_hidden_layers=4,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=32,
        max_position_embeddings=256,
        sliding_window=16,
        layer_types=["sliding_attention", "full_attention"] * 2,
        num_kv_shared_layers=2,
        laurel_rank=16,
        altup_num_inputs=4,
        activation_sparsity_pattern=[0.95, 0.95, 0.0, 0.0],
        final_logit_softcapping=30.0,
        **_TOKENS,
    )
    wrap, inp, outs = decoder("Gemma3nForCausalLM", cfg, seq=48)
    _rand_rms(wrap)
    return wrap, inp, outs


# ================================================================ GPT-2-like decoders
def m_mbart_causal():
    """mBART decoder as a causal LM: scaled embeddings, learned positions with offset 2,
    layernorm_embedding, pre-LN layers with a final LayerNorm, GELU, tied head."""
    from transformers import MBartConfig

    cfg = MBartConfig(
        vocab_size=1000,
        d_model=128,
        decoder_layers=3,
        decoder_attention_heads=4,
        decoder_ffn_dim=256,
        encoder_layers=1,
        max_position_embeddings=128,
        scale_embedding=True,
        is_decoder=True,
        add_cross_attention=False,
        **_TOKENS,
    )
    return hf("MBartForCausalLM", cfg, text_inputs(1000, seq=48), ["logits"], {"use_cache": False})


def m_xmod_causal():
    """X-MOD as a causal LM: pre-norm BERT-style layers with per-language bottleneck adapters
    after each FFN, chosen per sample by a lang_ids input (Equal + Where over the 3 languages'
    adapters; HF's boolean-mask gather / scatter patched, same result)."""
    from transformers import XmodConfig

    cfg = XmodConfig(
        vocab_size=1000,
        hidden_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=256,
        max_position_embeddings=130,
        pre_norm=True,
        adapter_reduction_factor=4,
        languages=["en_XX", "de_DE", "ja_XX"],
        default_language="en_XX",
        is_decoder=True,
        pad_token_id=1,
        bos_token_id=0,
        eos_token_id=2,
    )
    inp = text_inputs(1000, seq=40)
    inp["lang_ids"] = torch.tensor([2])
    wrap, inp, outs = hf("XmodForCausalLM", cfg, inp, ["logits"], {"use_cache": False}, jit=True)
    for mod in wrap.modules():
        if type(mod).__name__ == "XmodOutput":
            mod.lang_adapter = _xmod_lang_adapter.__get__(mod)
    return wrap, inp, outs


def _xmod_lang_adapter(self, lang_ids, hidden_states):
    """XmodOutput.lang_adapter with its boolean-mask gather / scatter per language (which the
    legacy exporter records with the example's batch of 1) written as a Where over each
    language's adapter output: the same result, batch-agnostic."""
    if not self.ln_before_adapter:
        residual = hidden_states
    if self.adapter_layer_norm is not None:
        hidden_states = self.adapter_layer_norm(hidden_states)
    elif self.adapter_reuse_layer_norm:
        hidden_states = self.LayerNorm(hidden_states)
    if self.ln_before_adapter:
        residual = hidden_states
    new_hidden_states = torch.zeros_like(hidden_states)
    for idx, key in enumerate(self.adapter_modules.keys()):
        mask = (lang_ids == idx).reshape(-1, 1, 1)
        out = self.adapter_modules[key](hidden_states)
        new_hidden_states = torch.where(mask, out, new_hidden_states)
    return self.dropout(new_hidden_states) + residual


def m_rembert_causal():
    """RemBERT as a causal LM: decoupled 64-wide input embeddings projected to 128, post-LN
    layers, a 192-wide output embedding head (untied)."""
    from transformers import RemBertConfig

    cfg = RemBertConfig(
        vocab_size=1000,
        hidden_size=128,
        num_hidden_layers=3,
        num_attention_heads=4,
        input_embedding_size=64,
        output_embedding_size=192,
        intermediate_size=256,
        max_position_embeddings=128,
        is_decoder=True,
        **_TOKENS,
    )
    return hf(
        "RemBertForCausalLM", cfg, text_inputs(1000, seq=48), ["logits"], {"use_cache": False}
    )


def m_bark_fine():
    """Bark fine acoustics model: GPT-style blocks without a causal mask over 8 codebook
    streams, the embeddings of codebooks 0..codebook_idx summed, per-codebook heads (predicts
    codebook 4)."""
    from transformers import BarkFineConfig

    cfg = BarkFineConfig(
        block_size=128,
        input_vocab_size=1056,
        output_vocab_size=1056,
        num_layers=3,
        num_heads=4,
        hidden_size=128,
        n_codes_total=8,
        n_codes_given=1,
    )
    inp = ids((1, 64, 8), 1024, seed=71, name="input_ids")
    return hf("BarkFineModel", cfg, inp, ["logits"], {"codebook_idx": 4})


# ================================================================ small ViTs
def m_vitpose():
    """ViTPose: plain ViT backbone on a 64x48 person crop (4:3), tokens reshaped back to a
    map, classic decoder of two ConvTranspose2d(4, s2) + BN + ReLU and a 1x1 heatmap conv for
    17 keypoints."""
    from transformers import VitPoseBackboneConfig, VitPoseConfig

    bb = VitPoseBackboneConfig(
        image_size=[64, 48],
        patch_size=[8, 8],
        hidden_size=128,
        num_hidden_layers=3,
        num_attention_heads=4,
        mlp_ratio=2,
        out_indices=[3],
    )
    cfg = VitPoseConfig(backbone_config=bb, use_simple_decoder=False, num_labels=17)
    return hf("VitPoseForPoseEstimation", cfg, image_inputs(64, 48), ["heatmaps"], jit=True)


def m_groupvit():
    """GroupViT vision tower: learnable group tokens appended to patch tokens, grouping blocks
    assigning patches to groups by a hard (straight-through arg-max one-hot) Gumbel-free
    assignment, 16 then 4 groups, MLP mixer over group tokens."""
    from transformers import GroupViTVisionConfig

    cfg = GroupViTVisionConfig(
        hidden_size=128,
        intermediate_size=256,
        depths=[2, 2, 1],
        num_group_tokens=[16, 4, 0],
        num_output_groups=[16, 4, 4],
        num_attention_heads=4,
        image_size=64,
        patch_size=8,
    )
    return hf("GroupViTVisionModel", cfg, image_inputs(64), ["last_hidden_state", "pooler_output"])


def m_aimv2_vision():
    """AIMv2 vision encoder: RMSNorm patch embedding, pre-RMSNorm blocks with SwiGLU MLPs,
    bias-free projections, an attention-pooling head (a learned query over all tokens)."""
    from transformers import Aimv2VisionConfig

    cfg = Aimv2VisionConfig(
        hidden_size=128,
        intermediate_size=256,
        num_hidden_layers=3,
        num_attention_heads=4,
        image_size=64,
        patch_size=8,
        use_head=True,
    )
    wrap, inp, outs = hf(
        "Aimv2VisionModel", cfg, image_inputs(64), ["last_hidden_state", "pooler_output"], jit=True
    )
    _rand_rms(wrap)
    return wrap, inp, outs


def m_mlcd_vision():
    """MLCD vision encoder: CLIP-like pre-LN ViT with a class token and a 2-D rotary position
    embedding over the patch grid (the class token gets its own learned rotary slot)."""
    from transformers import MLCDVisionConfig

    cfg = MLCDVisionConfig(
        hidden_size=128,
        intermediate_size=256,
        num_hidden_layers=3,
        num_attention_heads=4,
        num_key_value_groups=1,
        image_size=56,
        patch_size=8,
    )
    return hf("MLCDVisionModel", cfg, image_inputs(56), ["last_hidden_state", "pooler_output"])


def m_patchtsmixer():
    """PatchTSMixer forecaster: std scaling, patching (length 8, stride 4), MLP-Mixer layers
    mixing within patches, across patches and across the 5 channels, gated attention, a
    small self-attention in each mixer, linear forecasting head for 16 steps."""
    from transformers import PatchTSMixerConfig

    cfg = PatchTSMixerConfig(
        context_length=64,
        patch_length=8,
        patch_stride=4,
        num_input_channels=5,
        prediction_length=16,
        d_model=32,
        num_layers=3,
        mode="mix_channel",
        gated_attn=True,
        self_attn=True,
        self_attn_heads=2,
        scaling="std",
        expansion_factor=2,
    )
    return hf(
        "PatchTSMixerForPrediction",
        cfg,
        feats((1, 64, 5), seed=72, name="past_values"),
        ["prediction_outputs"],
    )


# ================================================================ depthwise + squeeze-excitation
class FasterNet(nn.Module):
    """FasterNet: partial convolution (a 3x3 conv on the first quarter of the channels, the
    rest passed through: Split + Concat), then a 1x1 expand (BN, GELU) and 1x1 project with a
    residual; 4x4 stride-4 patch-embedding stem, 2x2 stride-2 patch merging between stages,
    GAP, 1x1 conv head, classifier."""

    class Block(nn.Module):
        def __init__(self, c, r=4):
            super().__init__()
            self.cp = c // r
            self.pconv = nn.Conv2d(self.cp, self.cp, 3, 1, 1, bias=False)
            self.mlp = nn.Sequential(cba(c, 2 * c, act=nn.GELU), nn.Conv2d(2 * c, c, 1, bias=False))

        def forward(self, x):
            a, b = torch.split(x, [self.cp, x.shape[1] - self.cp], 1)
            return x + self.mlp(torch.cat([self.pconv(a), b], 1))

    def __init__(self, widths=(32, 64, 128, 256), depths=(1, 2, 3, 1), classes=100):
        super().__init__()
        layers = [cba(3, widths[0], 4, 4, act=None)]
        layers[0][0].padding = (0, 0)
        for i, (w, d) in enumerate(zip(widths, depths)):
            if i:
                layers.append(
                    nn.Sequential(nn.Conv2d(widths[i - 1], w, 2, 2, bias=False), nn.BatchNorm2d(w))
                )
            layers += [FasterNet.Block(w) for _ in range(d)]
        self.features = nn.Sequential(*layers)
        self.head = nn.Sequential(
            nn.AdaptiveAvgPool2d(1),
            nn.Conv2d(widths[-1], 512, 1, bias=False),
            nn.ReLU(),
            nn.Flatten(),
            nn.Linear(512, classes),
        )

    def forward(self, x):
        return self.head(self.features(x))


def m_fasternet():
    return custom(FasterNet, image_inputs(128), ["logits"], init_gain=1.0)


class RepViT(nn.Module):
    """RepViT (train-time form): token mixer = 3x3 depthwise conv + BN plus a 1x1 depthwise
    conv + BN plus a BN identity branch, summed; SE (ReLU, sigmoid) on every other block;
    channel mixer 1x1 expand x2 GELU 1x1 with residual; downsampling by a stride-2 depthwise
    3x3 and a 1x1; two stride-2 3x3 stem convs; distillation-style twin heads averaged."""

    class Mixer(nn.Module):
        def __init__(self, c):
            super().__init__()
            self.c3 = cba(c, c, 3, groups=c, act=None)
            self.c1 = cba(c, c, 1, groups=c, act=None)
            self.bn = nn.BatchNorm2d(c)

        def forward(self, x):
            return self.c3(x) + self.c1(x) + self.bn(x)

    class Block(nn.Module):
        def __init__(self, c, se):
            super().__init__()
            self.tok = nn.Sequential(
                RepViT.Mixer(c), SE(c, c // 4, gate=nn.Sigmoid) if se else nn.Identity()
            )
            self.ch = nn.Sequential(cba(c, 2 * c, act=nn.GELU), cba(2 * c, c, act=None))

        def forward(self, x):
            x = self.tok(x)
            return x + self.ch(x)

    def __init__(self, widths=(32, 64, 128, 192), depths=(2, 2, 4, 1), classes=100):
        super().__init__()
        layers = [
            cba(3, widths[0] // 2, 3, 2, act=nn.GELU),
            cba(widths[0] // 2, widths[0], 3, 2, act=None),
        ]
        k = 0
        for i, (w, d) in enumerate(zip(widths, depths)):
            if i:
                p = widths[i - 1]
                layers += [cba(p, p, 3, 2, groups=p, act=None), cba(p, w, 1, act=None)]
            for _ in range(d):
                layers.append(RepViT.Block(w, k % 2 == 0))
                k += 1
        self.features = nn.Sequential(*layers)
        self.head, self.dist = nn.Linear(widths[-1], classes), nn.Linear(widths[-1], classes)
        self.bn = nn.BatchNorm1d(widths[-1])

    def forward(self, x):
        f = self.bn(self.features(x).mean((2, 3)))
        return (self.head(f) + self.dist(f)) / 2


def m_repvit():
    return custom(RepViT, image_inputs(128), ["logits"], init_gain=0.5)


class ESPNetV2(nn.Module):
    """ESPNetv2: EESP units - grouped 1x1 reduction (groups 4), four parallel 3x3 depthwise
    convs with dilations 1, 2, 4, 8, hierarchical feature fusion (each branch adds the
    previous), Concat, BN + PReLU, grouped 1x1 expansion, residual; strided EESP (stride-2
    depthwise branches) concatenated with a 3x3 average-pooled shortcut and reinforced with the
    input image pooled to that scale (AvgPool chain + 3x3 + 1x1 conv)."""

    class EESP(nn.Module):
        def __init__(self, cin, cout, stride=1, k=4, rates=(1, 2, 4, 8)):
            super().__init__()
            n = cout // k
            self.proj = nn.Sequential(
                nn.Conv2d(cin, n, 1, groups=k, bias=False), nn.BatchNorm2d(n), nn.PReLU(n)
            )
            self.branches = nn.ModuleList(
                nn.Conv2d(n, n, 3, stride, r, dilation=r, groups=n, bias=False) for r in rates
            )
            self.bn = nn.Sequential(nn.BatchNorm2d(cout), nn.PReLU(cout))
            self.exp = nn.Sequential(
                nn.Conv2d(cout, cout, 1, groups=k, bias=False), nn.BatchNorm2d(cout)
            )
            self.act = nn.PReLU(cout)
            self.stride = stride

        def forward(self, x):
            y = self.proj(x)
            outs = [self.branches[0](y)]
            for b in self.branches[1:]:
                outs.append(b(y) + outs[-1])
            y = self.exp(self.bn(torch.cat(outs, 1)))
            return y if self.stride > 1 else self.act(x + y)

    class Down(nn.Module):
        def __init__(self, cin, cout):
            super().__init__()
            self.eesp = ESPNetV2.EESP(cin, cout - cin, stride=2)
            self.pool = nn.AvgPool2d(3, 2, 1)
            self.inp = nn.Sequential(
                cba(3, 3, 3, act=None), nn.Conv2d(3, cout, 1, bias=False), nn.BatchNorm2d(cout)
            )
            self.act = nn.PReLU(cout)

        def forward(self, x, img):
            y = torch.cat([self.eesp(x), self.pool(x)], 1)
            while img.shape[-1] > y.shape[-1]:
                img = F.avg_pool2d(img, 3, 2, 1)
            return self.act(y + self.inp(img))

    def __init__(self, classes=100):
        super().__init__()
        self.stem = nn.Sequential(
            nn.Conv2d(3, 32, 3, 2, 1, bias=False), nn.BatchNorm2d(32), nn.PReLU(32)
        )
        self.downs = nn.ModuleList(
            [ESPNetV2.Down(32, 64), ESPNetV2.Down(64, 128), ESPNetV2.Down(128, 256)]
        )
        self.stages = nn.ModuleList(
            nn.Sequential(*[ESPNetV2.EESP(c, c) for _ in range(r)])
            for c, r in ((64, 0), (128, 2), (256, 3))
        )
        self.head = nn.Sequential(
            nn.Conv2d(256, 256, 3, 1, 1, groups=4, bias=False),
            nn.BatchNorm2d(256),
            nn.PReLU(256),
            nn.AdaptiveAvgPool2d(1),
            nn.Flatten(),
            nn.Linear(256, classes),
        )

    def forward(self, img):
        x = self.stem(img)
        for d, s in zip(self.downs, self.stages):
            x = s(d(x, img))
        return self.head(x)


def m_espnetv2():
    return custom(ESPNetV2, image_inputs(128), ["logits"], init_gain=1.0)


class SKNet(nn.Module):
    """SKNet (ResNeXt bottlenecks with selective kernels): two grouped (32) 3x3 branches with
    dilations 1 and 2, fused by sum, GAP, a squeeze FC (BN, ReLU), two FCs whose softmax over
    the branch axis weights the branches; stride-2 blocks with 1x1 stride-2 projections."""

    class SK(nn.Module):
        def __init__(self, c, stride, groups=16, r=4):
            super().__init__()
            self.br = nn.ModuleList(
                nn.Sequential(
                    nn.Conv2d(c, c, 3, stride, d, dilation=d, groups=groups, bias=False),
                    nn.BatchNorm2d(c),
                    nn.ReLU(),
                )
                for d in (1, 2)
            )
            z = max(c // r, 32)
            self.fc = nn.Sequential(nn.Conv2d(c, z, 1, bias=False), nn.BatchNorm2d(z), nn.ReLU())
            self.att = nn.Conv2d(z, 2 * c, 1)

        def forward(self, x):
            u = torch.stack([b(x) for b in self.br], 1)  # (n, 2, c, h, w)
            s = self.fc(u.sum(1).mean((2, 3), keepdim=True))
            a = self.att(s).reshape(x.shape[0], 2, -1, 1, 1).softmax(1)
            return (u * a).sum(1)

    class Block(nn.Module):
        def __init__(self, cin, mid, cout, stride):
            super().__init__()
            self.body = nn.Sequential(
                cba(cin, mid), SKNet.SK(mid, stride), cba(mid, cout, act=None)
            )
            self.short = (
                nn.Identity()
                if cin == cout and stride == 1
                else cba(cin, cout, 1, stride, act=None)
            )

        def forward(self, x):
            return F.relu(self.body(x) + self.short(x))

    def __init__(self, classes=100):
        super().__init__()
        cfg = [(64, 128, 1, 2), (128, 256, 2, 2), (256, 384, 2, 2)]
        layers = [cba(3, 32, 3, 2), cba(32, 64, 3), nn.MaxPool2d(3, 2, 1)]
        cin = 64
        for mid, cout, s, d in cfg:
            for i in range(d):
                layers.append(SKNet.Block(cin, mid, cout, s if i == 0 else 1))
                cin = cout
        self.features = nn.Sequential(*layers)
        self.fc = nn.Linear(cin, classes)

    def forward(self, x):
        return self.fc(self.features(x).mean((2, 3)))


def m_sknet():
    return custom(SKNet, image_inputs(96), ["logits"], init_gain=1.0)


class StarNet(nn.Module):
    """StarNet: blocks of a 7x7 depthwise conv + BN, two 1x1 expansions multiplied
    element-wise ("star": ReLU6(f1) * f2), a 1x1 projection + BN, a second 7x7 depthwise conv,
    residual; stride-2 3x3 conv + BN downsampling per stage."""

    class Block(nn.Module):
        def __init__(self, c, r=3):
            super().__init__()
            self.dw1 = cba(c, c, 7, groups=c, act=None)
            self.f1, self.f2 = nn.Conv2d(c, r * c, 1), nn.Conv2d(c, r * c, 1)
            self.g = cba(r * c, c, act=None)
            self.dw2 = nn.Conv2d(c, c, 7, 1, 3, groups=c)

        def forward(self, x):
            y = self.dw1(x)
            y = F.relu6(self.f1(y)) * self.f2(y)
            return x + self.dw2(self.g(y))

    def __init__(self, base=24, depths=(1, 2, 4, 1), classes=100):
        super().__init__()
        layers, cin = [cba(3, 32, 3, 2, act=nn.ReLU6)], 32
        for i, d in enumerate(depths):
            w = base * 2**i
            layers.append(cba(cin, w, 3, 2, act=None))
            layers += [StarNet.Block(w) for _ in range(d)]
            cin = w
        self.features = nn.Sequential(*layers)
        self.norm, self.fc = nn.BatchNorm2d(cin), nn.Linear(cin, classes)

    def forward(self, x):
        return self.fc(self.norm(self.features(x)).mean((2, 3)))


def m_starnet():
    return custom(StarNet, image_inputs(128), ["logits"], init_gain=0.7)


# ================================================================ embedding-heavy
class TTRec(nn.Module):
    """TT-Rec: four 1,000,000-row tables stored as tensor-train cores (ids factorised into
    three base-100 digits by int64 Div / Mod, one core slice gathered per digit and contracted
    by batched MatMuls into a 64-wide vector), four small plain tables, a dense-feature MLP,
    concatenation and a top MLP with a sigmoid CTR output."""

    class TT(nn.Module):
        def __init__(self, base=100, dims=(4, 4, 4), rank=16, seed=0):
            super().__init__()
            g = torch.Generator().manual_seed(seed)
            self.g1 = nn.Parameter(torch.randn(base, dims[0] * rank, generator=g) * 0.5)
            self.g2 = nn.Parameter(torch.randn(base, rank, dims[1] * rank, generator=g) * 0.25)
            self.g3 = nn.Parameter(torch.randn(base, rank, dims[2], generator=g) * 0.5)
            self.base, self.dims, self.rank = base, dims, rank

        def forward(self, i):  # (n,) int64 < base^3
            b, (d1, d2, d3), r = self.base, self.dims, self.rank
            i1, i2, i3 = i // (b * b), (i // b) % b, i % b
            a = self.g1[i1].reshape(-1, d1, r)  # (n, d1, r)
            c = self.g2[i2].reshape(-1, r, d2, r).reshape(-1, r, d2 * r)
            y = torch.bmm(a, c).reshape(-1, d1 * d2, r)  # (n, d1 d2, r)
            return torch.bmm(y, self.g3[i3]).reshape(-1, d1 * d2 * d3)

    def __init__(self, dense=13, small=(40, 300, 7, 1200), d=64):
        super().__init__()
        self.tt = nn.ModuleList(TTRec.TT(seed=s) for s in range(4))
        self.small = nn.ModuleList(nn.Embedding(c, d) for c in small)
        self.bottom = nn.Sequential(nn.Linear(dense, 128), nn.ReLU(), nn.Linear(128, d), nn.ReLU())
        self.top = nn.Sequential(
            nn.Linear(9 * d, 256), nn.ReLU(), nn.Linear(256, 64), nn.ReLU(), nn.Linear(64, 1)
        )

    def forward(self, dense, big_ids, small_ids):  # (n, 13) f, (n, 4) i64, (n, 4) i64
        e = [self.bottom(dense)]
        e += [t(big_ids[:, j]) for j, t in enumerate(self.tt)]
        e += [t(small_ids[:, j]) for j, t in enumerate(self.small)]
        return torch.sigmoid(self.top(torch.cat(e, 1)))


def m_tt_rec():
    g = torch.Generator().manual_seed(73)
    inp = {
        "dense": torch.rand(1, 13, generator=g),
        "big_ids": torch.randint(0, 1_000_000, (1, 4), generator=g),
        "small_ids": torch.stack(
            [torch.randint(0, c, (1,), generator=g) for c in (40, 300, 7, 1200)], 1
        ),
    }
    return custom(TTRec, inp, ["ctr"])


class HashEmbedText(nn.Module):
    """Hash embeddings (Svenstrup et al.) for a text classifier over raw 31-bit token ids:
    three universal hashes ((a x + b) mod p mod 4096, int64 Mul / Add / Mod) pick vectors from
    one shared 4096 x 64 pool, a fourth hash picks per-token importance weights (a 20000 x 3
    table) that mix them; masked mean over the sequence concatenated with a masked max; MLP."""

    P = 2_147_483_647

    def __init__(self, pool=4096, wbuckets=20000, d=64, k=3, classes=8):
        super().__init__()
        self.pool, self.wb = nn.Embedding(pool, d), nn.Embedding(wbuckets, k)
        g = torch.Generator().manual_seed(74)
        self.register_buffer("a", torch.randint(1, 1 << 30, (k + 1,), generator=g))
        self.register_buffer("b", torch.randint(0, 1 << 30, (k + 1,), generator=g))
        self.npool, self.nw, self.k = pool, wbuckets, k
        self.fc = nn.Sequential(nn.Linear(2 * d, 128), nn.ReLU(), nn.Linear(128, classes))

    def forward(self, tokens, mask):  # (n, L) int64 in [0, 2^31), (n, L) float
        h = (tokens.unsqueeze(-1) * self.a + self.b) % self.P  # (n, L, k+1)
        vecs = self.pool(h[..., : self.k] % self.npool)  # (n, L, k, d)
        w = self.wb(h[..., self.k] % self.nw)  # (n, L, k)
        e = (w.unsqueeze(-1) * vecs).sum(2)  # (n, L, d)
        m = mask.unsqueeze(-1)
        mean = (e * m).sum(1) / m.sum(1).clamp(min=1)
        mx = e.masked_fill(m == 0, -1e4).amax(1)
        return self.fc(torch.cat([mean, mx], -1))


def m_hash_embed():
    g = torch.Generator().manual_seed(75)
    tok = torch.randint(0, 1 << 31, (1, 40), generator=g)
    mask = torch.ones(1, 40)
    mask[0, 33:] = 0
    return custom(HashEmbedText, {"tokens": tok, "mask": mask}, ["logits"])


PNN_CARDS = (1000, 60, 24, 7, 5000, 300, 12, 2000, 150, 40, 9000, 3, 700, 80, 31, 1200)


class PNN(nn.Module):
    """Product-based NN (PNN*): 16 fields in one table with in-graph offsets; inner products
    of all 120 field pairs (pair indices gathered, Mul + ReduceSum), the outer-product term
    of the sum-pooled embedding (p p^T through a learned kernel), linear signals, concatenated
    into a 3-layer MLP with a sigmoid."""

    def __init__(self, d=16):
        super().__init__()
        f = len(PNN_CARDS)
        self.emb = nn.Embedding(sum(PNN_CARDS), d)
        off = torch.tensor([0] + list(PNN_CARDS[:-1])).cumsum(0)
        self.register_buffer("off", off, False)
        i, j = torch.triu_indices(f, f, 1)
        self.register_buffer("pi", i, False)
        self.register_buffer("pj", j, False)
        self.lin = nn.Linear(f * d, 64)
        self.outer = nn.Linear(d * d, 64)
        self.mlp = nn.Sequential(
            nn.Linear(64 + 64 + len(i), 200),
            nn.ReLU(),
            nn.Linear(200, 100),
            nn.ReLU(),
            nn.Linear(100, 1),
        )

    def forward(self, fields):  # (n, 16) int64
        e = self.emb(fields + self.off)  # (n, f, d)
        inner = (e[:, self.pi] * e[:, self.pj]).sum(-1)  # (n, 120)
        p = e.sum(1)
        outer = (p.unsqueeze(2) * p.unsqueeze(1)).flatten(1)
        z = torch.cat([self.lin(e.flatten(1)), self.outer(outer), inner], 1)
        return torch.sigmoid(self.mlp(z))


def m_pnn():
    g = torch.Generator().manual_seed(76)
    f = torch.stack([torch.randint(0, c, (1,), generator=g) for c in PNN_CARDS], 1)
    return custom(PNN, {"fields": f}, ["ctr"])


AFM_CARDS = (3000, 40, 12, 800, 6, 250, 24, 1500, 60, 9)


class AFM(nn.Module):
    """Attentional FM: 10 one-hot fields plus a 6-value multi-hot field (padded, masked mean)
    embedded; element-wise products of all 55 pairs, an attention MLP (Linear, ReLU, h) with a
    softmax over pairs, the attention-pooled product projected to a score; a first-order term
    from per-id scalar weights and a global bias; sigmoid."""

    def __init__(self, d=32, att=16, tags=500):
        super().__init__()
        cards = AFM_CARDS
        self.emb, self.w = nn.Embedding(sum(cards), d), nn.Embedding(sum(cards), 1)
        self.tag, self.tag_w = (
            nn.Embedding(tags, d, padding_idx=0),
            nn.Embedding(tags, 1, padding_idx=0),
        )
        self.register_buffer("off", torch.tensor([0] + list(cards[:-1])).cumsum(0), False)
        i, j = torch.triu_indices(len(cards) + 1, len(cards) + 1, 1)
        self.register_buffer("pi", i, False)
        self.register_buffer("pj", j, False)
        self.att = nn.Sequential(nn.Linear(d, att), nn.ReLU(), nn.Linear(att, 1, bias=False))
        self.p = nn.Linear(d, 1, bias=False)
        self.bias = nn.Parameter(torch.zeros(1))

    def forward(self, fields, tags):  # (n, 10), (n, 6) int64, 0 = padding
        idx = fields + self.off
        m = (tags > 0).float().unsqueeze(-1)
        cnt = m.sum(1).clamp(min=1)
        tag_e = (self.tag(tags) * m).sum(1, keepdim=True) / cnt.unsqueeze(1)
        e = torch.cat([self.emb(idx), tag_e], 1)  # (n, 11, d)
        pr = e[:, self.pi] * e[:, self.pj]  # (n, 55, d)
        a = self.att(pr).softmax(1)
        second = self.p((a * pr).sum(1))
        first = self.w(idx).sum(1) + (self.tag_w(tags) * m).sum(1) / cnt
        return torch.sigmoid(self.bias + first + second)


def m_afm():
    g = torch.Generator().manual_seed(77)
    f = torch.stack([torch.randint(0, c, (1,), generator=g) for c in AFM_CARDS], 1)
    tags = torch.tensor([[17, 230, 5, 411, 0, 0]])
    return custom(AFM, {"fields": f, "tags": tags}, ["ctr"])


class GRU4Rec(nn.Module):
    """GRU4Rec (session-based): 20000-item embeddings, a 2-layer GRU over a left-padded
    session of 20 clicks (padded steps masked out of the hidden state by Where), the last
    state scored against all item embeddings (tied output, bias), TopK 20 recommendations."""

    def __init__(self, items=20000, d=64, h=64):
        super().__init__()
        self.emb = nn.Embedding(items, d, padding_idx=0)
        self.cells = nn.ModuleList([nn.GRUCell(d, h), nn.GRUCell(h, h)])
        self.out = nn.Linear(h, d)
        self.bias = nn.Parameter(torch.zeros(items))

    def forward(self, session):  # (n, T) int64, 0 = padding (left)
        x = self.emb(session)
        hs = [x.new_zeros(x.shape[0], c.hidden_size) for c in self.cells]
        for t in range(session.shape[1]):
            keep = session[:, t : t + 1] > 0
            inp = x[:, t]
            for li, c in enumerate(self.cells):
                hs[li] = torch.where(keep, c(inp, hs[li]), hs[li])
                inp = hs[li]
        scores = self.out(hs[-1]) @ self.emb.weight.t() + self.bias
        top, idx = scores.topk(20, -1)
        return scores, idx


def m_gru4rec():
    g = torch.Generator().manual_seed(78)
    s = torch.randint(1, 20000, (1, 20), generator=g)
    s[0, :6] = 0
    return custom(GRU4Rec, {"session": s}, ["scores", "top_items"])


# ================================================================ window / hierarchical attention
class CoaT(nn.Module):
    """CoaT (serial blocks): per stage a strided patch embedding + LayerNorm and a class
    token; each block a convolutional position encoding (3x3 depthwise on the image tokens,
    class token split off and re-joined), factorised attention (softmax of K over tokens,
    K^T V then Q (K^T V)) plus convolutional relative position encoding (Q times a depthwise
    conv of V, with 3x3 / 5x5 / 7x7 kernels for 2 / 1 / 1 heads, zero for the class token),
    MLP; 64x64 image, three stages."""

    class Block(nn.Module):
        def __init__(self, d, heads=4, wins=((3, 2), (5, 1), (7, 1))):
            super().__init__()
            self.cpe = nn.Conv2d(d, d, 3, 1, 1, groups=d)
            self.n1, self.n2 = nn.LayerNorm(d), nn.LayerNorm(d)
            self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
            dh = d // heads
            self.convs = nn.ModuleList(
                nn.Conv2d(h * dh, h * dh, k, 1, k // 2, groups=h * dh) for k, h in wins
            )
            self.splits = [h * dh for _, h in wins]
            self.heads, self.mlp = heads, mlp(d, 3)

        def forward(self, x, H, W):
            n, L, d = x.shape
            cls, img = x[:, :1], x[:, 1:]
            img = img + self.cpe(img.transpose(1, 2).reshape(n, d, H, W)).flatten(2).transpose(1, 2)
            x = torch.cat([cls, img], 1)
            h, dh = self.heads, d // self.heads
            q, k, v = self.qkv(self.n1(x)).reshape(n, L, 3, h, dh).permute(2, 0, 3, 1, 4)
            fa = q @ (k.softmax(2).transpose(-2, -1) @ v)  # (n, h, L, dh)
            vi = v[:, :, 1:].transpose(-2, -1).reshape(n, h * dh, H, W)
            cv = torch.cat([c(p) for c, p in zip(self.convs, vi.split(self.splits, 1))], 1)
            cv = cv.reshape(n, h, dh, H * W).transpose(-2, -1)
            crpe = F.pad(q[:, :, 1:] * cv, (0, 0, 1, 0))
            y = (dh**-0.5 * fa + crpe).transpose(1, 2).reshape(n, L, d)
            x = x + self.proj(y)
            return x + self.mlp(self.n2(x))

    def __init__(self, dims=(64, 128, 160), depths=(2, 2, 2), classes=100):
        super().__init__()
        self.embeds = nn.ModuleList(
            nn.Conv2d(c, d, p, p) for c, d, p in zip((3,) + dims[:-1], dims, (4, 2, 2))
        )
        self.enorms = nn.ModuleList(nn.LayerNorm(d) for d in dims)
        self.cls = nn.ParameterList(nn.Parameter(torch.randn(1, 1, d) * 0.02) for d in dims)
        self.stages = nn.ModuleList(
            nn.ModuleList(CoaT.Block(d) for _ in range(n)) for d, n in zip(dims, depths)
        )
        self.norm, self.fc = nn.LayerNorm(dims[-1]), nn.Linear(dims[-1], classes)

    def forward(self, x):
        for emb, en, cls, blocks in zip(self.embeds, self.enorms, self.cls, self.stages):
            x = emb(x)
            n, d, H, W = x.shape
            t = torch.cat([cls.expand(n, -1, -1), en(x.flatten(2).transpose(1, 2))], 1)
            for b in blocks:
                t = b(t, H, W)
            x = t[:, 1:].transpose(1, 2).reshape(n, d, H, W)
        return self.fc(self.norm(t[:, 0]))


def m_coat():
    return custom(CoaT, image_inputs(64), ["logits"])


class DilateFormer(nn.Module):
    """DilateFormer: multi-scale dilated attention in the first two stages - the heads split
    into three groups attending over 3x3 neighbourhoods with dilations 1, 2, 3 (keys and values
    gathered by Unfold with dilation and padding), softmax over the 9 neighbours - then global
    MHSA; overlapping 3x3 stride-2 conv embeddings, depthwise conv position encoding, BN in the
    stem, LayerNorm in the blocks."""

    class MSDA(nn.Module):
        def __init__(self, d, heads, dils=(1, 2, 3)):
            super().__init__()
            self.qkv, self.proj = nn.Conv2d(d, 3 * d, 1), nn.Conv2d(d, d, 1)
            self.dils, self.heads = dils, heads

        def forward(self, x):  # (n, d, H, W)
            n, d, H, W = x.shape
            g = len(self.dils)
            dg, dh = d // g, d // self.heads
            hg = dg // dh
            q, k, v = self.qkv(x).chunk(3, 1)
            outs = []
            for i, r in enumerate(self.dils):
                sl = slice(i * dg, (i + 1) * dg)
                qi = q[:, sl].reshape(n, hg, dh, 1, H * W)
                ki = F.unfold(k[:, sl], 3, dilation=r, padding=r).reshape(n, hg, dh, 9, H * W)
                vi = F.unfold(v[:, sl], 3, dilation=r, padding=r).reshape(n, hg, dh, 9, H * W)
                a = ((qi * ki).sum(2, keepdim=True) * dh**-0.5).softmax(3)
                outs.append((a * vi).sum(3).reshape(n, dg, H, W))
            return self.proj(torch.cat(outs, 1))

    class Block(nn.Module):
        def __init__(self, d, heads, dilated):
            super().__init__()
            self.cpe = nn.Conv2d(d, d, 3, 1, 1, groups=d)
            self.n1, self.n2 = nn.LayerNorm(d), nn.LayerNorm(d)
            self.att = DilateFormer.MSDA(d, heads) if dilated else Attention(d, heads)
            self.dilated, self.mlp = dilated, mlp(d, 3)

        def forward(self, x):
            x = x + self.cpe(x)
            n, d, H, W = x.shape
            t = x.flatten(2).transpose(1, 2)
            y = self.n1(t)
            if self.dilated:
                y = self.att(y.transpose(1, 2).reshape(n, d, H, W)).flatten(2).transpose(1, 2)
            else:
                y = self.att(y)
            t = t + y
            t = t + self.mlp(self.n2(t))
            return t.transpose(1, 2).reshape(n, d, H, W)

    def __init__(self, dims=(48, 96, 192), heads=(3, 6, 6), depths=(2, 2, 2), classes=100):
        super().__init__()
        layers = [
            cba(3, dims[0] // 2, 3, 2, act=nn.GELU),
            cba(dims[0] // 2, dims[0], 3, 2, act=None),
        ]
        for i, (d, h, n) in enumerate(zip(dims, heads, depths)):
            if i:
                layers.append(cba(dims[i - 1], d, 3, 2, act=None))
            layers += [DilateFormer.Block(d, h, i < 2) for _ in range(n)]
        self.features = nn.Sequential(*layers)
        self.fc = nn.Linear(dims[-1], classes)

    def forward(self, x):
        return self.fc(self.features(x).mean((2, 3)))


def m_dilateformer():
    return custom(DilateFormer, image_inputs(64), ["logits"])


class EdgeViT(nn.Module):
    """EdgeViT local-global-local blocks: conv position encoding; local aggregation (BN, 1x1,
    5x5 depthwise, 1x1); sparse global attention among delegate tokens taken by r x r average
    pooling (r = 4, 2, 2, 1 per stage), propagated back by a depthwise ConvTranspose2d(r, s r)
    then LayerNorm over channels and a 1x1; MLPs; 96x96 image."""

    class LGL(nn.Module):
        def __init__(self, d, heads, r):
            super().__init__()
            self.cpe1 = nn.Conv2d(d, d, 3, 1, 1, groups=d)
            self.local = nn.Sequential(
                nn.BatchNorm2d(d),
                nn.Conv2d(d, d, 1),
                nn.Conv2d(d, d, 5, 1, 2, groups=d),
                nn.Conv2d(d, d, 1),
            )
            self.mlp1 = nn.Sequential(
                nn.BatchNorm2d(d), nn.Conv2d(d, 3 * d, 1), nn.GELU(), nn.Conv2d(3 * d, d, 1)
            )
            self.cpe2 = nn.Conv2d(d, d, 3, 1, 1, groups=d)
            self.n = nn.LayerNorm(d)
            self.att = Attention(d, heads)
            self.up = nn.ConvTranspose2d(d, d, r, r, groups=d) if r > 1 else nn.Identity()
            self.up_norm = nn.GroupNorm(1, d)
            self.proj = nn.Conv2d(d, d, 1)
            self.mlp2 = nn.Sequential(
                nn.LayerNorm(d), nn.Linear(d, 3 * d), nn.GELU(), nn.Linear(3 * d, d)
            )
            self.r = r

        def forward(self, x):
            x = x + self.cpe1(x)
            x = x + self.local(x)
            x = x + self.mlp1(x)
            x = x + self.cpe2(x)
            n, d, H, W = x.shape
            s = F.avg_pool2d(x, self.r) if self.r > 1 else x
            h, w = s.shape[2:]
            t = s.flatten(2).transpose(1, 2)
            t = self.att(self.n(t)).transpose(1, 2).reshape(n, d, h, w)
            x = x + self.proj(self.up_norm(self.up(t)))
            t = x.flatten(2).transpose(1, 2)
            return (t + self.mlp2(t)).transpose(1, 2).reshape(n, d, H, W)

    def __init__(self, dims=(32, 64, 128, 192), depths=(1, 1, 2, 1), rs=(4, 2, 2, 1), classes=100):
        super().__init__()
        layers = []
        for i, (d, n, r) in enumerate(zip(dims, depths, rs)):
            cin, p = (3, 4) if i == 0 else (dims[i - 1], 2)
            layers += [nn.Conv2d(cin, d, p, p), nn.GroupNorm(1, d)]
            layers += [EdgeViT.LGL(d, 4, r) for _ in range(n)]
        self.features = nn.Sequential(*layers)
        self.norm, self.fc = nn.LayerNorm(dims[-1]), nn.Linear(dims[-1], classes)

    def forward(self, x):
        return self.fc(self.norm(self.features(x).mean((2, 3))))


def m_edgevit():
    return custom(EdgeViT, image_inputs(96), ["logits"])


class LambdaResNet(nn.Module):
    """LambdaResNet: bottlenecks whose 3x3 conv is a lambda layer in the last two stages -
    queries (4 heads, k 16, BN), keys softmax-normalised over positions, values (BN); content
    lambda K^T V and position lambdas from a Conv3d(1, 16, (1, 7, 7)) over the value maps,
    applied to the queries by Einsum; stride by 3x3 average pooling after the lambda."""

    class Lambda(nn.Module):
        def __init__(self, d, heads=4, k=16, r=7):
            super().__init__()
            self.v = d // heads
            self.q = nn.Sequential(
                nn.Conv2d(d, heads * k, 1, bias=False), nn.BatchNorm2d(heads * k)
            )
            self.k = nn.Conv2d(d, k, 1, bias=False)
            self.vv = nn.Sequential(nn.Conv2d(d, self.v, 1, bias=False), nn.BatchNorm2d(self.v))
            self.pos = nn.Conv3d(1, k, (1, r, r), padding=(0, r // 2, r // 2))
            self.heads, self.kd = heads, k

        def forward(self, x):
            n, d, H, W = x.shape
            q = self.q(x).reshape(n, self.heads, self.kd, H * W)
            k = self.k(x).reshape(n, self.kd, H * W).softmax(-1)
            v = self.vv(x)
            lc = torch.einsum("nkm,nvm->nkv", k, v.reshape(n, self.v, H * W))
            yc = torch.einsum("nhkm,nkv->nhvm", q, lc)
            lp = self.pos(v.unsqueeze(1)).reshape(n, self.kd, self.v, H * W)
            yp = torch.einsum("nhkm,nkvm->nhvm", q, lp)
            return (yc + yp).reshape(n, d, H, W)

    class Block(nn.Module):
        def __init__(self, cin, mid, cout, stride, lam):
            super().__init__()
            if lam:
                mixer = nn.Sequential(
                    LambdaResNet.Lambda(mid),
                    nn.AvgPool2d(3, 2, 1) if stride > 1 else nn.Identity(),
                    nn.BatchNorm2d(mid),
                    nn.ReLU(),
                )
            else:
                mixer = cba(mid, mid, 3, stride)
            self.body = nn.Sequential(cba(cin, mid), mixer, cba(mid, cout, act=None))
            self.short = (
                nn.Identity()
                if cin == cout and stride == 1
                else cba(cin, cout, 1, stride, act=None)
            )

        def forward(self, x):
            return F.relu(self.body(x) + self.short(x))

    def __init__(self, classes=100):
        super().__init__()
        layers = [cba(3, 32, 3, 2), cba(32, 64, 3), nn.MaxPool2d(3, 2, 1)]
        cin = 64
        for i, (mid, cout, s, n) in enumerate(
            [(32, 128, 1, 1), (64, 256, 2, 2), (64, 256, 2, 2), (128, 512, 2, 1)]
        ):
            for j in range(n):
                layers.append(LambdaResNet.Block(cin, mid, cout, s if j == 0 else 1, i >= 2))
                cin = cout
        self.features = nn.Sequential(*layers)
        self.fc = nn.Linear(cin, classes)

    def forward(self, x):
        return self.fc(self.features(x).mean((2, 3)))


def m_lambda_resnet():
    return custom(LambdaResNet, image_inputs(96), ["logits"], init_gain=0.8)


# ================================================================ 1-D conv audio
def _sinusoid(n, d):
    pos = torch.arange(n).float().unsqueeze(1)
    div = torch.exp(torch.arange(0, d, 2).float() * (-math.log(10000.0) / d))
    pe = torch.zeros(n, d)
    pe[:, 0::2], pe[:, 1::2] = torch.sin(pos * div), torch.cos(pos * div)
    return pe


class EBranchformer(nn.Module):
    """E-Branchformer ASR encoder: Conv2d subsampling x4 on 80-bin features, sinusoidal
    positions; blocks of a half-step macaron FFN, two parallel branches - MHSA and a
    convolutional gating MLP (Linear x6, GELU, split, LayerNorm + depthwise Conv1d k31 on the
    gate half, Mul, Linear) - merged by Concat + a depthwise Conv1d k3 + Linear, a second
    half-step FFN, LayerNorm; CTC log-softmax over 256 tokens."""

    class Block(nn.Module):
        def __init__(self, d, heads=4, k=31):
            super().__init__()

            def ff():
                return nn.Sequential(
                    nn.LayerNorm(d), nn.Linear(d, 4 * d), nn.SiLU(), nn.Linear(4 * d, d)
                )

            self.ff1, self.ff2 = ff(), ff()
            self.na, self.nc = nn.LayerNorm(d), nn.LayerNorm(d)
            self.att = Attention(d, heads)
            self.up, self.gn = nn.Linear(d, 6 * d), nn.LayerNorm(3 * d)
            self.dw = nn.Conv1d(3 * d, 3 * d, k, 1, k // 2, groups=3 * d)
            self.down = nn.Linear(3 * d, d)
            self.merge_dw = nn.Conv1d(2 * d, 2 * d, 3, 1, 1, groups=2 * d)
            self.merge = nn.Linear(2 * d, d)
            self.out = nn.LayerNorm(d)

        def forward(self, x):
            x = x + 0.5 * self.ff1(x)
            b1 = self.att(self.na(x))
            a, g = F.gelu(self.up(self.nc(x))).chunk(2, -1)
            g = self.dw(self.gn(g).transpose(1, 2)).transpose(1, 2)
            b2 = self.down(a * g)
            c = torch.cat([b1, b2], -1)
            c = c + self.merge_dw(c.transpose(1, 2)).transpose(1, 2)
            x = x + self.merge(c)
            return self.out(x + 0.5 * self.ff2(x))

    def __init__(self, mels=80, d=144, layers=3, vocab=256):
        super().__init__()
        self.sub = nn.Sequential(
            nn.Conv2d(1, 64, 3, 2), nn.ReLU(), nn.Conv2d(64, 64, 3, 2), nn.ReLU()
        )
        self.lin = nn.Linear(64 * (((mels - 1) // 2 - 1) // 2), d)
        self.register_buffer("pe", _sinusoid(512, d), False)
        self.blocks = nn.Sequential(*[EBranchformer.Block(d) for _ in range(layers)])
        self.ctc = nn.Linear(d, vocab)
        self.d = d

    def forward(self, feats):  # (n, T, mels)
        x = self.sub(feats.unsqueeze(1))  # (n, 64, T', F')
        x = self.lin(x.permute(0, 2, 1, 3).flatten(2)) * self.d**0.5
        x = self.blocks(x + self.pe[: x.shape[1]])
        return self.ctc(x).log_softmax(-1)


def m_e_branchformer():
    return custom(EBranchformer, feats((1, 200, 80), seed=79, name="features"), ["log_probs"])


class WaveUNet(nn.Module):
    """Wave-U-Net source separation on 4096 raw samples: 5 downsampling blocks (Conv1d k15 +
    LeakyReLU, then decimation by a stride-2 Slice), a bottleneck conv, 5 upsampling blocks
    (linear interpolation x2 with align_corners, Concat with the skip, Conv1d k5), the input
    mixture concatenated at the end, a 1x1 conv + tanh for one source and the difference
    (mixture - source) as the second."""

    def __init__(self, layers=5, base=16, grow=16):
        super().__init__()
        ch = [1] + [base + grow * i for i in range(layers + 1)]
        self.down = nn.ModuleList(nn.Conv1d(ch[i], ch[i + 1], 15, 1, 7) for i in range(layers))
        self.mid = nn.Conv1d(ch[layers], ch[layers + 1], 15, 1, 7)
        self.up = nn.ModuleList(
            nn.Conv1d(ch[i + 2] + ch[i + 1], ch[i + 1], 5, 1, 2) for i in reversed(range(layers))
        )
        self.out = nn.Conv1d(ch[1] + 1, 1, 1)

    def forward(self, mix):  # (n, 1, L)
        x, skips = mix, []
        for conv in self.down:
            x = F.leaky_relu(conv(x), 0.2)
            skips.append(x)
            x = x[:, :, ::2]
        x = F.leaky_relu(self.mid(x), 0.2)
        for conv, s in zip(self.up, reversed(skips)):
            x = F.interpolate(x, size=s.shape[-1], mode="linear", align_corners=True)
            x = F.leaky_relu(conv(torch.cat([x, s], 1)), 0.2)
        src = torch.tanh(self.out(torch.cat([x, mix], 1)))
        return torch.cat([src, mix - src], 1)


def m_wave_unet():
    return custom(
        WaveUNet, feats((1, 1, 4096), seed=80, name="mixture"), ["sources"], init_gain=1.0
    )


class LEAF(nn.Module):
    """LEAF learnable front end + keyword classifier on 8000 samples: 40 complex Gabor filters
    computed in-graph from learned centre frequencies and bandwidths (Exp, Cos, Sin over a
    201-tap grid) as an 80-channel Conv1d, squared modulus, per-channel Gaussian low-pass
    pooling (a depthwise Conv1d k161 stride 80 with in-graph learned-width windows), PCEN
    (the per-channel smoother as a MatMul with an in-graph Pow-built decay matrix,
    (E / (eps + M)^alpha + delta)^r - delta^r), then a small Conv2d + BN classifier."""

    def __init__(self, filters=40, k=201, pool_k=161, stride=80, classes=12, T=100):
        super().__init__()
        mu = torch.linspace(0.05, math.pi * 0.95, filters)
        self.mu = nn.Parameter(mu)
        self.sigma = nn.Parameter(torch.full((filters,), 4.0) + torch.rand(filters) * 8)
        self.register_buffer("t", torch.arange(-(k // 2), k // 2 + 1).float(), False)
        self.register_buffer("tp", torch.arange(-(pool_k // 2), pool_k // 2 + 1).float(), False)
        self.pool_w = nn.Parameter(torch.full((filters,), 0.4) + 0.1 * torch.rand(filters))
        self.s = nn.Parameter(torch.full((filters,), 0.04) + 0.02 * torch.rand(filters))
        self.alpha = nn.Parameter(torch.full((filters,), 0.96))
        self.delta = nn.Parameter(torch.full((filters,), 2.0))
        self.r = nn.Parameter(torch.full((filters,), 0.5))
        i = torch.arange(T)
        self.register_buffer("diff", (i[None] - i[:, None]).float(), False)  # j - i
        self.f, self.stride = filters, stride
        self.cls = nn.Sequential(
            nn.BatchNorm2d(1),
            cba(1, 32, 3),
            nn.MaxPool2d(2),
            cba(32, 64, 3),
            nn.MaxPool2d(2),
            cba(64, 96, 3),
            nn.AdaptiveAvgPool2d(1),
            nn.Flatten(),
            nn.Linear(96, classes),
        )

    def forward(self, wav):  # (n, L)
        sig = self.sigma.unsqueeze(1)
        g = torch.exp(-0.5 * (self.t / sig) ** 2) / (math.sqrt(2 * math.pi) * sig)
        ph = self.mu.unsqueeze(1) * self.t
        kern = torch.stack([g * torch.cos(ph), g * torch.sin(ph)], 1).reshape(2 * self.f, 1, -1)
        y = F.conv1d(wav.unsqueeze(1), kern, padding=self.t.shape[0] // 2)
        e = (y**2).reshape(y.shape[0], self.f, 2, -1).sum(2)
        half = (self.tp.shape[0] - 1) / 2
        win = torch.exp(-0.5 * (self.tp / (self.pool_w.clamp(0.1, 0.5).unsqueeze(1) * half)) ** 2)
        e = F.conv1d(e, win.unsqueeze(1), stride=self.stride, padding=int(half), groups=self.f)
        s = self.s.clamp(0.01, 0.5).reshape(-1, 1, 1)
        upper = (self.diff >= 0).float()
        coef = torch.cat([torch.ones_like(s), s.expand(-1, 1, self.diff.shape[0] - 1)], 2)
        W = (1 - s) ** self.diff.clamp(min=0) * upper * coef.transpose(1, 2)  # (f, i, j)
        M = torch.einsum("nci,cij->ncj", e, W)
        a, d, r = (p.reshape(1, -1, 1) for p in (self.alpha.clamp(max=1), self.delta, self.r))
        pcen = (e / (1e-6 + M) ** a + d) ** r - d**r
        return self.cls(pcen.unsqueeze(1))


def m_leaf():
    g = torch.Generator().manual_seed(81)
    t = torch.arange(8000).float()
    wav = 0.3 * torch.sin(2 * math.pi * 440 / 8000 * t) + 0.1 * torch.randn(1, 8000, generator=g)
    return custom(LEAF, {"waveform": wav}, ["logits"], init_gain=1.0)


class CREPE(nn.Module):
    """CREPE pitch tracker over 4 frames of 1024 samples per example (the frames folded into
    the batch by Reshape): Conv1d k512 stride 4, then five Conv1d k64 (asymmetric 31/32 Pad),
    each BN + ReLU + MaxPool 2; a 360-bin sigmoid salience; pitch decoded in-graph by ArgMax,
    a 9-bin window of cents gathered around it (clamped indices, GatherElements) and
    salience-weighted; frequency = 10 * 2^(cents / 1200)."""

    def __init__(self, ch=(64, 16, 16, 16, 32, 64), bins=360):
        super().__init__()
        layers, cin = [], 1
        for i, c in enumerate(ch):
            conv = (
                nn.Conv1d(cin, c, 512, 4, 254)
                if i == 0
                else nn.Sequential(nn.ConstantPad1d((31, 32), 0.0), nn.Conv1d(cin, c, 64))
            )
            layers += [conv, nn.ReLU(), nn.BatchNorm1d(c), nn.MaxPool1d(2)]
            cin = c
        self.net = nn.Sequential(*layers)
        self.fc = nn.Linear(cin * 4, bins)
        self.register_buffer("cents", torch.linspace(0, 7180, bins) + 1997.3794084376191, False)
        self.register_buffer("win", torch.arange(-4, 5), False)

    def forward(self, frames):  # (n, F, 1024)
        n, f, L = frames.shape
        x = frames.reshape(n * f, 1, L)
        x = (x - x.mean(-1, keepdim=True)) / x.std(-1, keepdim=True).clamp(min=1e-8)
        sal = torch.sigmoid(self.fc(self.net(x).flatten(1)))  # (n f, 360)
        c = sal.argmax(-1, keepdim=True)
        idx = (c + self.win).clamp(0, sal.shape[-1] - 1)
        w = sal.gather(1, idx)
        cents = (w * self.cents[idx]).sum(1) / w.sum(1)
        freq = 10 * 2 ** (cents / 1200)
        return sal.reshape(n, f, -1), freq.reshape(n, f), sal.amax(-1).reshape(n, f)


def m_crepe():
    g = torch.Generator().manual_seed(82)
    t = torch.arange(1024).float()
    f0 = torch.tensor([[110.0], [196.0], [330.0], [523.0]])
    wav = torch.sin(2 * math.pi * f0 / 16000 * t) + 0.2 * torch.randn(4, 1024, generator=g)
    return custom(
        CREPE, {"frames": wav.unsqueeze(0)}, ["salience", "frequency", "confidence"], init_gain=1.5
    )


# ================================================================ others
class RCAN(nn.Module):
    """RCAN x3 super-resolution: a fixed MeanShift 1x1 conv, residual groups of residual
    channel-attention blocks (conv-ReLU-conv, GAP -> 1x1 down -> ReLU -> 1x1 up -> sigmoid
    channel gate), group and long skips, a PixelShuffle(3) upsampler, the mean added back."""

    class RCAB(nn.Module):
        def __init__(self, c, r=8):
            super().__init__()
            self.body = nn.Sequential(nn.Conv2d(c, c, 3, 1, 1), nn.ReLU(), nn.Conv2d(c, c, 3, 1, 1))
            self.ca = SE(c, c // r, gate=nn.Sigmoid)

        def forward(self, x):
            return x + self.ca(self.body(x))

    def __init__(self, c=32, groups=2, blocks=3, scale=3):
        super().__init__()
        self.sub = nn.Conv2d(3, 3, 1)
        self.add = nn.Conv2d(3, 3, 1)
        with torch.no_grad():
            mean = torch.tensor([0.4488, 0.4371, 0.4040])
            for conv, sgn in ((self.sub, -1), (self.add, 1)):
                conv.weight.copy_(torch.eye(3).reshape(3, 3, 1, 1))
                conv.bias.copy_(sgn * mean)
            self.sub.requires_grad_(False)
            self.add.requires_grad_(False)
        self.head = nn.Conv2d(3, c, 3, 1, 1)
        self.groups = nn.ModuleList(
            nn.Sequential(*[RCAN.RCAB(c) for _ in range(blocks)], nn.Conv2d(c, c, 3, 1, 1))
            for _ in range(groups)
        )
        self.body_end = nn.Conv2d(c, c, 3, 1, 1)
        self.up = nn.Sequential(nn.Conv2d(c, c * scale * scale, 3, 1, 1), nn.PixelShuffle(scale))
        self.tail = nn.Conv2d(c, 3, 3, 1, 1)

    def forward(self, x):
        h = self.head(self.sub(x))
        y = h
        for g in self.groups:
            y = y + g(y)
        y = self.body_end(y) + h
        return self.add(self.tail(self.up(y)))


def m_rcan():
    return custom(RCAN, image_inputs(24), ["image"])


class CenterNet(nn.Module):
    """CenterNet detector on 128x128: a small residual backbone to stride 16, two
    ConvTranspose2d(4, s2) + BN + ReLU up to stride 4, heatmap (20 classes, sigmoid), size and
    offset heads; decoding in-graph - 3x3 MaxPool peak NMS (Equal mask), TopK 40 over classes x
    positions, int64 Div / Mod to class, row and column, size / offset gathered at the peaks,
    boxes in input pixels."""

    class Res(nn.Module):
        def __init__(self, cin, cout, s):
            super().__init__()
            self.body = nn.Sequential(cba(cin, cout, 3, s), cba(cout, cout, 3, act=None))
            self.short = cba(cin, cout, 1, s, act=None)

        def forward(self, x):
            return F.relu(self.body(x) + self.short(x))

    def __init__(self, classes=20, k=40):
        super().__init__()
        self.backbone = nn.Sequential(
            cba(3, 16, 3, 2),
            CenterNet.Res(16, 32, 2),
            CenterNet.Res(32, 64, 2),
            CenterNet.Res(64, 96, 2),
        )
        ups, cin = [], 96
        for c in (64, 48):
            ups += [
                cba(cin, c, 3),
                nn.ConvTranspose2d(c, c, 4, 2, 1, bias=False),
                nn.BatchNorm2d(c),
                nn.ReLU(),
            ]
            cin = c
        self.up = nn.Sequential(*ups)
        head = lambda o: nn.Sequential(nn.Conv2d(cin, 32, 3, 1, 1), nn.ReLU(), nn.Conv2d(32, o, 1))  # noqa: E731
        self.hm, self.wh, self.reg = head(classes), head(2), head(2)
        self.k = k

    def forward(self, x):
        f = self.up(self.backbone(x))
        heat, wh, reg = torch.sigmoid(self.hm(f)), self.wh(f), torch.sigmoid(self.reg(f))
        n, c, H, W = heat.shape
        keep = (F.max_pool2d(heat, 3, 1, 1) == heat).float()
        scores, idx = (heat * keep).reshape(n, -1).topk(self.k, -1)
        cls = idx // (H * W)
        pix = idx % (H * W)
        ys, xs = (pix // W).float(), (pix % W).float()
        g = pix.unsqueeze(1).expand(-1, 2, -1)
        whk, regk = wh.flatten(2).gather(2, g), reg.flatten(2).gather(2, g)
        cx, cy = xs + regk[:, 0], ys + regk[:, 1]
        w, h = whk[:, 0].abs(), whk[:, 1].abs()
        boxes = torch.stack([cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2], -1) * 4
        return boxes, scores, cls


def m_centernet():
    return custom(CenterNet, image_inputs(128), ["boxes", "scores", "classes"], init_gain=1.5)


class DGCNN(nn.Module):
    """DGCNN point-cloud classifier over 256 points: three EdgeConv layers on a dynamic k-NN
    graph (k 16) recomputed in feature space each layer (pairwise distances by MatMul, TopK,
    neighbour features gathered with batch-offset flat indices), edge features [x_j - x_i,
    x_i] through a 1x1 Conv2d + BN + LeakyReLU, max over neighbours; concatenated features, a
    1x1 Conv1d to 256, global max and mean pooling, MLP to 40 classes."""

    def __init__(self, k=16, classes=40):
        super().__init__()

        def edge(cin, cout):
            return nn.Sequential(
                nn.Conv2d(2 * cin, cout, 1, bias=False), nn.BatchNorm2d(cout), nn.LeakyReLU(0.2)
            )

        self.edges = nn.ModuleList([edge(3, 64), edge(64, 64), edge(64, 128)])
        self.conv = nn.Sequential(
            nn.Conv1d(256, 256, 1, bias=False), nn.BatchNorm1d(256), nn.LeakyReLU(0.2)
        )
        self.head = nn.Sequential(
            nn.Linear(512, 256, bias=False),
            nn.BatchNorm1d(256),
            nn.LeakyReLU(0.2),
            nn.Linear(256, classes),
        )
        self.k = k

    def graph_feature(self, x):  # (n, C, N)
        n, c, N = x.shape
        inner = -2 * torch.matmul(x.transpose(2, 1), x)
        xx = (x**2).sum(1, keepdim=True)
        idx = (-xx - inner - xx.transpose(2, 1)).topk(self.k, -1)[1]  # (n, N, k)
        base = torch.arange(n).reshape(-1, 1, 1) * N
        xt = x.transpose(2, 1).reshape(n * N, c)
        nb = xt[(idx + base).reshape(-1)].reshape(n, N, self.k, c)
        ctr = x.transpose(2, 1).unsqueeze(2).expand(-1, -1, self.k, -1)
        return torch.cat([nb - ctr, ctr], 3).permute(0, 3, 1, 2)

    def forward(self, pts):  # (n, 3, N)
        x, feats_ = pts, []
        for e in self.edges:
            x = e(self.graph_feature(x)).amax(-1)
            feats_.append(x)
        x = self.conv(torch.cat(feats_, 1))
        return self.head(torch.cat([x.amax(-1), x.mean(-1)], 1))


def m_dgcnn():
    return custom(DGCNN, feats((1, 3, 256), seed=83, name="points"), ["logits"])


class RetNet(nn.Module):
    """RetNet language model (parallel form): multi-scale retention - per-head decays
    gamma = 1 - 2^(-5-h), the causal decay matrix gamma^(n-m) built in-graph from the sequence
    length (Range, Pow, Where) and row-normalised, rotary (xPos-style interleaved) q / k,
    (Q K^T * D) normalised by its clamped absolute row sum, times V; per-head GroupNorm,
    swish gate, pre-LN, GELU FFN, LM head."""

    class Retention(nn.Module):
        def __init__(self, d, heads):
            super().__init__()
            self.q, self.k, self.v, self.g = (nn.Linear(d, d, bias=False) for _ in range(4))
            self.o = nn.Linear(d, d, bias=False)
            self.gn = nn.GroupNorm(heads, d)
            dh = d // heads
            self.register_buffer("gamma", 1 - 2.0 ** (-5 - torch.arange(heads).float()), False)
            self.register_buffer("theta", 1.0 / 10000 ** torch.linspace(0, 1, dh // 2), False)
            self.h, self.dh = heads, dh

        def rot(self, x, pos):  # (n, h, L, dh), interleaved pairs
            ang = pos.unsqueeze(-1) * self.theta  # (L, dh/2)
            c, s = ang.cos().repeat_interleave(2, -1), ang.sin().repeat_interleave(2, -1)
            x2 = torch.stack([-x[..., 1::2], x[..., ::2]], -1).flatten(-2)
            return x * c + x2 * s

        def forward(self, x):
            n, L, d = x.shape
            sh = lambda t: t.reshape(n, L, self.h, self.dh).transpose(1, 2)  # noqa: E731
            pos = torch.arange(L, dtype=x.dtype)
            q, k, v = (
                self.rot(sh(self.q(x)), pos),
                self.rot(sh(self.k(x)), pos) * self.dh**-0.5,
                sh(self.v(x)),
            )
            diff = pos.unsqueeze(1) - pos.unsqueeze(0)
            D = torch.where(
                diff >= 0, self.gamma.reshape(-1, 1, 1) ** diff.clamp(min=0), torch.zeros(())
            )
            D = D / D.sum(-1, keepdim=True).sqrt()
            a = (q @ k.transpose(-2, -1)) * D
            a = a / a.sum(-1, keepdim=True).abs().clamp(min=1)
            y = (a @ v).transpose(1, 2).reshape(n * L, d)
            y = self.gn(y).reshape(n, L, d)
            return self.o(F.silu(self.g(x)) * y)

    def __init__(self, vocab=1000, d=128, heads=4, layers=3):
        super().__init__()
        self.emb = nn.Embedding(vocab, d)
        self.layers = nn.ModuleList(
            nn.ModuleList([nn.LayerNorm(d), RetNet.Retention(d, heads), nn.LayerNorm(d), mlp(d, 2)])
            for _ in range(layers)
        )
        self.norm, self.head = nn.LayerNorm(d), nn.Linear(d, vocab, bias=False)

    def forward(self, tokens):
        x = self.emb(tokens)
        for n1, ret, n2, ff in self.layers:
            x = x + ret(n1(x))
            x = x + ff(n2(x))
        return self.head(self.norm(x))


def m_retnet():
    return custom(RetNet, ids((1, 48), 1000, seed=84, name="input_ids"), ["logits"])


# ================================================================ END OF MODELS
ALL = {k[2:]: v for k, v in globals().items() if k.startswith("m_")}
EXTRA = ()
MODELS = {k: v for k, v in ALL.items() if k not in EXTRA}

if __name__ == "__main__":
    main(ALL if sys.argv[1] in EXTRA else MODELS, sys.argv)
