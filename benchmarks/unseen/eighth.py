"""An eighth set of unseen models: architectures neither the zoo, build.py, fresh.py, third.py,
fourth.py, fifth.py, sixth.py nor seventh.py holds.

README section (the table the set would add to README.md). Families: GQA = GQA decoders
with RoPE + RMSNorm, GPT2 = GPT-2-like decoders, DWSE = depthwise / squeeze-excitation convnets,
EMB = embedding-heavy, WIN = window / hierarchical attention, VIT = small ViTs, AUD = 1-D conv
audio, OTH = others.

| name | family | what it exercises |
|---|---|---|
| `arcee` | GQA | non-gated squared-ReLU MLP, GQA 4:1, untied head |
| `nanochat` | GQA | weightless RMSNorm (also q / k after RoPE), relu^2 MLP, logit soft-cap |
| `zamba2` | GQA | Mamba-2 (chunked SSD) + shared attention on [h, embeddings], LoRA |
| `seed_oss` | GQA | q / k / v biases, heads wider than the model (4 x 64 > 128), GQA 4:1 |
| `jamba` | GQA | Mamba-1 scan unrolled + GQA attention without RoPE, top-2 MoE |
| `pegasus_causal` | GPT2 | sinusoidal positions, scaled embeddings, pre-LN + final LN, ReLU |
| `roc_bert_causal` | GPT2 | word + pronunciation + glyph ids embedded, concatenated, projected |
| `megatron_bert_causal` | GPT2 | pre-LN BERT layers with a final LN, token types, tied MLM head |
| `blenderbot_small_causal` | GPT2 | embedding LN before the positions, post-LN, GELU |
| `vovnet` | DWSE | one-shot aggregation (6-way Concat), hard-sigmoid eSE, ceil_mode pool |
| `fcanet` | DWSE | multi-spectral channel attention: 7x7 pool times fixed DCT bases |
| `shiftnet` | DWSE | zero-FLOP 9-direction shifts (Pad + 9 Slices + Concat) between 1x1 convs |
| `rednet` | DWSE | involution: per-pixel 7x7 kernels from 1x1 convs on Unfold patches |
| `gc_mobilenet` | DWSE | MobileNetV2 + global context (softmax over pixels, LN([C,1,1])) |
| `nfm` | EMB | bi-interaction pooling 0.5((sum v)^2 - sum v^2), numeric fields |
| `mind` | EMB | capsule routing (3 iterations, masked softmax, squash), 20000 scores |
| `sim_hard` | EMB | category-equality mask, log2 time buckets (Floor, Cast), target attn |
| `masknet` | EMB | instance-guided masks times LayerNormed hidden states, 3 MaskBlocks |
| `srgnn` | EMB | session graph from item-equality matrices (Equal, MatMul), GGNN |
| `efficientvit_mit` | WIN | ReLU linear attention (ones column), 5x5 depthwise multi-scale qkv |
| `shunted` | WIN | heads split over two strided k / v reductions, local-enhance conv |
| `nest` | WIN | attention in 4x4-token blocks, conv + LN + MaxPool aggregation |
| `shuffle_transformer` | WIN | window + shuffled-window attention, rel-pos bias, dw conv |
| `siglip2_vision` | VIT | NaFlex: padded patches, positions resized in-graph per spatial_shapes |
| `mgp_str` | VIT | ViT on 32x128 text crops, three A^3 token-selection heads |
| `vitmatte` | VIT | VitDet over image + trimap, ConvStream, Resize fusion |
| `parallel_vit` | VIT | ViT-22B blocks: parallel attention + MLP, fused projection, q / k LN |
| `dcunet` | AUD | STFT / iSTFT as Conv1d / ConvTranspose1d, complex Conv2d U-Net |
| `bigvgan` | AUD | anti-aliased SnakeBeta (dw ConvTranspose1d up, Kaiser low-pass down) |
| `waveglow` | AUD | flow: invertible 1x1 conv with Det, WaveNet affine coupling, early outs |
| `melgan_disc` | AUD | multi-scale discriminator: Conv1d k41 groups 4..64, AvgPool1d |
| `sd_unet` | OTH | latent diffusion UNet: GroupNorm + SiLU, self + cross attention, GEGLU |
| `unet3d` | OTH | Conv3d + GroupNorm, MaxPool3d, trilinear x2 Upsample, softmax |
| `egnn` | OTH | E(n)-equivariant GNN: edge messages summed by ScatterND (add) |
| `nsf` | OTH | rational-quadratic spline flow: CumSum knots, counted bin search |
| `ssd_nms` | OTH | SSD-Lite decode + NonMaxSuppression, dynamic-length outputs |

The dynamo exporter is used where the legacy one fails: `zamba2` (its legacy graph has a
Transpose with a negative perm, which ONNX Runtime refuses) and `egnn` (its legacy graph
disagrees with torch by 0.128: the accumulating `index_put` is not exported as an adding
scatter). `ssd_nms` calls NonMaxSuppression through a torch.autograd.Function whose forward is
a torch reference of the ONNX op (used while tracing) and whose symbolic emits the op.
`ssd_nms`'s outputs are the NMS rows of the whole batch, so check.py's "ORT b4 vs
ORT b1" note for it is expected. `jamba` uses transformers' `batched_mm` experts. Dropped:
`afmoe` (AFMoE / Arcee Trinity: both exporters' graphs disagree with torch by 0.754 on the
logits), replaced by `seed_oss`.

Usage: python eighth.py NAME      (builds one model into $GE_UNSEEN_DIR/NAME/)
       python eighth.py --list
       python eighth.py --bench-layout  (writes $GE_UNSEEN_DIR/cache/zoo/NAME/ for each built
                                         model, so that GE_MODEL_CACHE=$GE_UNSEEN_DIR/cache
                                         benchmarks/bench_zoo.py benches them)
Build this set into its own directory (e.g. GE_UNSEEN_DIR=/work/unseen12), not the other sets'.
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
from fresh import Call, cba, custom, decoder, feats
from sixth import _rand_rms
from third import Attention, ids, mlp

from build import hf, image_inputs, main, text_inputs

_TOKENS = dict(pad_token_id=0, bos_token_id=1, eos_token_id=2)


# ================================================================ GQA decoders (RoPE, RMSNorm)
def m_arcee():
    """Arcee (AFM): Llama GQA 4:1 attention with a non-gated squared-ReLU MLP (up, relu^2,
    down), untied head."""
    from transformers import ArceeConfig

    cfg = ArceeConfig(
        vocab_size=1000,
        hidden_size=128,
        intermediate_size=384,
        num_hidden_layers=3,
        num_attention_heads=4,
        num_key_value_heads=1,
        max_position_embeddings=256,
        tie_word_embeddings=False,
        **_TOKENS,
    )
    wrap, inp, outs = decoder("ArceeForCausalLM", cfg, seq=48)
    _rand_rms(wrap)
    return wrap, inp, outs


def m_nanochat():
    """nanochat: parameter-free RMSNorm (also on q and k after RoPE), relu^2 MLP, GQA 4:2,
    untied head, final logit soft-capping (tanh)."""
    from transformers import NanoChatConfig

    cfg = NanoChatConfig(
        vocab_size=1000,
        hidden_size=128,
        intermediate_size=384,
        num_hidden_layers=3,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=256,
        final_logit_softcapping=15.0,
        tie_word_embeddings=False,
        **_TOKENS,
    )
    return decoder("NanoChatForCausalLM", cfg, seq=48)


def m_zamba2():
    """Zamba2: Mamba-2 layers (chunked SSD, torch path) with a shared attention + MLP block
    interleaved at "hybrid" layers; the shared block reads the hidden state concatenated with
    the original embeddings (2x wide), per-call LoRA adapters, output projected back and
    added."""
    from transformers import Zamba2Config

    cfg = Zamba2Config(
        vocab_size=1000,
        hidden_size=128,
        num_hidden_layers=4,
        layers_block_type=["mamba", "hybrid", "mamba", "hybrid"],
        mamba_d_state=16,
        mamba_d_conv=4,
        mamba_expand=2,
        mamba_ngroups=1,
        n_mamba_heads=8,
        chunk_size=16,
        use_mamba_kernels=False,
        use_mem_eff_path=False,
        intermediate_size=256,
        num_attention_heads=4,
        num_key_value_heads=4,
        num_mem_blocks=1,
        use_shared_attention_adapter=True,
        adapter_rank=16,
        use_mem_rope=True,
        max_position_embeddings=256,
        **_TOKENS,
    )
    wrap, inp, outs = decoder("Zamba2ForCausalLM", cfg, seq=48)
    _rand_rms(wrap)
    return wrap, inp, outs


def m_seed_oss():
    """Seed-OSS: Llama-style GQA 4:1 with biases on q / k / v (none on o_proj), heads wider
    than the model (4 x 64 = 256 > 128, so o_proj maps 256 -> 128), SiLU-gated MLP, untied
    head."""
    from transformers import SeedOssConfig

    cfg = SeedOssConfig(
        vocab_size=1000,
        hidden_size=128,
        intermediate_size=320,
        num_hidden_layers=3,
        num_attention_heads=4,
        num_key_value_heads=1,
        head_dim=64,
        attention_bias=True,
        attention_out_bias=False,
        max_position_embeddings=256,
        tie_word_embeddings=False,
        **_TOKENS,
    )
    wrap, inp, outs = decoder("SeedOssForCausalLM", cfg, seq=48)
    _rand_rms(wrap)
    return wrap, inp, outs


def m_jamba():
    """Jamba: Mamba-1 layers (selective scan, slow path: a loop over the 32 steps) with one
    GQA attention layer in 2 (no RoPE), RMSNorms on dt / B / C, MoE FFN (4 experts top-2,
    batched_mm) on every other layer."""
    from transformers import JambaConfig

    cfg = JambaConfig(
        vocab_size=1000,
        hidden_size=128,
        intermediate_size=256,
        num_hidden_layers=4,
        num_attention_heads=4,
        num_key_value_heads=2,
        num_experts=4,
        num_experts_per_tok=2,
        expert_layer_period=2,
        expert_layer_offset=1,
        attn_layer_period=2,
        attn_layer_offset=1,
        use_mamba_kernels=False,
        mamba_d_state=8,
        mamba_d_conv=4,
        mamba_expand=2,
        mamba_dt_rank=8,
        max_position_embeddings=256,
        experts_implementation="batched_mm",
        **_TOKENS,
    )
    wrap, inp, outs = decoder("JambaForCausalLM", cfg, seq=32)
    _rand_rms(wrap)
    return wrap, inp, outs


# ================================================================ GPT-2-like decoders
def m_pegasus_causal():
    """Pegasus decoder as a causal LM: fixed sinusoidal positions (no offset), scaled
    embeddings, pre-LN layers with a final LayerNorm, ReLU FFN, tied head."""
    from transformers import PegasusConfig

    cfg = PegasusConfig(
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
    return hf(
        "PegasusForCausalLM", cfg, text_inputs(1000, seq=48), ["logits"], {"use_cache": False}
    )


def m_roc_bert_causal():
    """RoCBert as a causal LM: word, pronunciation and glyph-shape ids embedded separately,
    concatenated and projected (concat_input), post-LN BERT layers with a causal mask, MLM-style
    transform head."""
    from transformers import RoCBertConfig

    cfg = RoCBertConfig(
        vocab_size=1000,
        hidden_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=256,
        max_position_embeddings=128,
        pronunciation_vocab_size=60,
        pronunciation_embed_dim=32,
        shape_vocab_size=300,
        shape_embed_dim=48,
        enable_pronunciation=True,
        enable_shape=True,
        concat_input=True,
        is_decoder=True,
        pad_token_id=0,
    )
    inp = text_inputs(1000, seq=40)
    mask = inp.pop("attention_mask")
    inp["input_shape_ids"] = ids((1, 40), 300, seed=85)["ids"]
    inp["input_pronunciation_ids"] = ids((1, 40), 60, seed=86)["ids"]
    inp["attention_mask"] = mask
    return hf("RoCBertForCausalLM", cfg, inp, ["logits"], {"use_cache": False})


def m_megatron_bert_causal():
    """Megatron-BERT as a causal LM: pre-LN BERT layers (LayerNorm inside each sublayer,
    none on the embeddings) with a final LayerNorm, token types, GELU, tied MLM head."""
    from transformers import MegatronBertConfig

    cfg = MegatronBertConfig(
        vocab_size=1000,
        hidden_size=128,
        num_hidden_layers=3,
        num_attention_heads=4,
        intermediate_size=256,
        max_position_embeddings=128,
        is_decoder=True,
        pad_token_id=0,
    )
    return hf(
        "MegatronBertForCausalLM", cfg, text_inputs(1000, seq=48), ["logits"], {"use_cache": False}
    )


def m_blenderbot_small_causal():
    """BlenderbotSmall decoder as a causal LM: learned positions, embedding LayerNorm
    applied before the positions are added, post-LN layers, GELU, scaled embeddings."""
    from transformers import BlenderbotSmallConfig

    cfg = BlenderbotSmallConfig(
        vocab_size=1000,
        d_model=128,
        decoder_layers=3,
        decoder_attention_heads=4,
        decoder_ffn_dim=256,
        encoder_layers=1,
        max_position_embeddings=128,
        scale_embedding=True,
        activation_function="gelu",
        is_decoder=True,
        add_cross_attention=False,
        **_TOKENS,
    )
    return hf(
        "BlenderbotSmallForCausalLM",
        cfg,
        text_inputs(1000, seq=48),
        ["logits"],
        {"use_cache": False},
        jit=True,
    )


# ================================================================ small ViTs
def m_siglip2_vision():
    """SigLIP2 NaFlex vision tower: pre-patchified pixels (64 slots, 60 real patches of a 6 x
    10 image), the 8x8 position grid resized in-graph to each image's spatial_shapes input
    (antialiased bilinear weights from Div / Floor / Clamp, MatMuls), padded patches masked out
    of attention, attention-pooling head."""
    from transformers import Siglip2VisionConfig

    cfg = Siglip2VisionConfig(
        hidden_size=128,
        intermediate_size=256,
        num_hidden_layers=3,
        num_attention_heads=4,
        patch_size=8,
        num_patches=64,
        vision_use_head=True,
    )
    g = torch.Generator().manual_seed(87)
    mask = torch.zeros(1, 64, dtype=torch.long)
    mask[0, :60] = 1
    inp = {
        "pixel_values": torch.randn(1, 64, 3 * 8 * 8, generator=g) * mask.unsqueeze(-1),
        "pixel_attention_mask": mask,
        "spatial_shapes": torch.tensor([[6, 10]]),
    }
    return hf("Siglip2VisionModel", cfg, inp, ["last_hidden_state", "pooler_output"], jit=True)


def m_mgp_str():
    """MGP-STR scene-text recogniser on a 32x128 crop: ViT with a class token, then three A^3
    modules (a 1x1-conv token attention map, softmax over patches, weighted token sums) picking
    27 tokens each for character, BPE and WordPiece heads."""
    from transformers import MgpstrConfig, MgpstrForSceneTextRecognition

    cfg = MgpstrConfig(
        image_size=[32, 128],
        patch_size=4,
        max_token_length=27,
        num_character_labels=38,
        num_bpe_labels=1000,
        num_wordpiece_labels=800,
        hidden_size=128,
        num_hidden_layers=3,
        num_attention_heads=4,
        mlp_ratio=2.0,
    )
    torch.manual_seed(0)
    m = MgpstrForSceneTextRecognition(cfg).eval()
    wrap = Call(m, lambda m, x: tuple(m(pixel_values=x).logits)).eval()
    return wrap, image_inputs(32, 128), ["char_logits", "bpe_logits", "wp_logits"]


def m_vitmatte():
    """ViTMatte: a VitDet backbone (2 of 3 blocks windowed, relative positions) over image +
    trimap (4 channels), a ConvStream of stride-2 conv + BN + ReLU details, fusion blocks
    (bilinear x2 Resize, Concat, conv) up to full resolution, sigmoid alpha matte."""
    from transformers import VitDetConfig, VitMatteConfig

    bb = VitDetConfig(
        num_channels=4,
        image_size=64,
        pretrain_image_size=64,
        patch_size=16,
        hidden_size=128,
        num_hidden_layers=3,
        num_attention_heads=4,
        mlp_ratio=2,
        window_block_indices=[0, 1],
        window_size=2,
        use_relative_position_embeddings=True,
        out_features=["stage3"],
    )
    cfg = VitMatteConfig(
        backbone_config=bb,
        hidden_size=128,
        convstream_hidden_sizes=[16, 32, 64],
        fusion_hidden_sizes=[64, 32, 16, 8],
    )
    inp = image_inputs(64, c=4)
    inp["pixel_values"][:, 3] = (inp["pixel_values"][:, 3] > 0).float() * 0.5 + 0.25
    return hf("VitMatteForImageMatting", cfg, inp, ["alphas"], jit=True)


class ParallelViT(nn.Module):
    """ViT-22B-style blocks: one LayerNorm feeding attention and MLP in parallel (their
    outputs summed into the residual), a fused bias-free input projection split into q, k, v
    and the MLP's hidden, LayerNorm on q and k, GELU; mean-pooled tokens, no class token."""

    class Block(nn.Module):
        def __init__(self, d, heads, r=3):
            super().__init__()
            self.n = nn.LayerNorm(d)
            self.inp = nn.Linear(d, 3 * d + r * d, bias=False)
            self.qn, self.kn = nn.LayerNorm(d // heads), nn.LayerNorm(d // heads)
            self.o = nn.Linear(d, d, bias=False)
            self.down = nn.Linear(r * d, d, bias=False)
            self.h, self.d = heads, d

        def forward(self, x):
            n, L, d = x.shape
            q, k, v, u = self.inp(self.n(x)).split([d, d, d, self.down.in_features], -1)
            sh = lambda t: t.reshape(n, L, self.h, -1).transpose(1, 2)  # noqa: E731
            q, k, v = self.qn(sh(q)), self.kn(sh(k)), sh(v)
            a = (q @ k.transpose(-2, -1) * (d // self.h) ** -0.5).softmax(-1)
            y = (a @ v).transpose(1, 2).reshape(n, L, d)
            return x + self.o(y) + self.down(F.gelu(u))

    def __init__(self, d=128, depth=4, heads=4, patch=8, image=64, classes=100):
        super().__init__()
        self.patch = nn.Conv2d(3, d, patch, patch)
        self.pos = nn.Parameter(torch.randn(1, (image // patch) ** 2, d) * 0.02)
        self.blocks = nn.Sequential(*[ParallelViT.Block(d, heads) for _ in range(depth)])
        self.norm, self.head = nn.LayerNorm(d), nn.Linear(d, classes)

    def forward(self, x):
        t = self.patch(x).flatten(2).transpose(1, 2) + self.pos
        return self.head(self.norm(self.blocks(t).mean(1)))


def m_parallel_vit():
    return custom(ParallelViT, image_inputs(64), ["logits"])


# ================================================================ depthwise + squeeze-excitation
class VoVNet(nn.Module):
    """VoVNet-v2 (depthwise variant): one-shot aggregation modules - five successive
    depthwise-separable 3x3 convs, the input and all five outputs concatenated once and fused
    by a 1x1 conv - with effective SE (GAP, one 1x1 conv, hard sigmoid) and a residual;
    3x3 stride-2 max pooling with ceil_mode between stages."""

    class OSA(nn.Module):
        def __init__(self, cin, mid, cout, n=5):
            super().__init__()
            layers, c = [], cin
            for _ in range(n):
                layers.append(nn.Sequential(cba(c, c, 3, groups=c, act=None), cba(c, mid)))
                c = mid
            self.layers = nn.ModuleList(layers)
            self.concat = cba(cin + n * mid, cout)
            self.ese = nn.Conv2d(cout, cout, 1)
            self.res = cin == cout

        def forward(self, x):
            outs, y = [x], x
            for layer in self.layers:
                y = layer(y)
                outs.append(y)
            y = self.concat(torch.cat(outs, 1))
            y = y * F.hardsigmoid(self.ese(y.mean((2, 3), keepdim=True)))
            return y + x if self.res else y

    def __init__(self, classes=100):
        super().__init__()
        self.stem = nn.Sequential(cba(3, 32, 3, 2), cba(32, 32, 3, groups=32), cba(32, 64, 1))
        cfg = [(64, 32, 96, 1), (96, 48, 160, 1), (160, 64, 224, 2), (224, 80, 256, 1)]
        layers = []
        for i, (cin, mid, cout, n) in enumerate(cfg):
            if i:
                layers.append(nn.MaxPool2d(3, 2, ceil_mode=True))
            layers.append(VoVNet.OSA(cin, mid, cout))
            layers += [VoVNet.OSA(cout, mid, cout) for _ in range(n - 1)]
        self.features = nn.Sequential(*layers)
        self.fc = nn.Linear(256, classes)

    def forward(self, x):
        return self.fc(self.features(self.stem(x)).mean((2, 3)))


def m_vovnet():
    return custom(VoVNet, image_inputs(100), ["logits"], init_gain=1.0)


def _dct_filters(c, size, freqs):
    """FcaNet multi-spectral filters: the channels split over the (u, v) frequencies, each part
    given the 2-D DCT-II basis cos(pi u (x + 0.5) / size) cos(pi v (y + 0.5) / size)."""
    w = torch.zeros(c, size, size)
    part = c // len(freqs)
    pos = torch.arange(size).float() + 0.5
    for i, (u, v) in enumerate(freqs):
        bu = torch.cos(math.pi * u * pos / size) / math.sqrt(size)
        bv = torch.cos(math.pi * v * pos / size) / math.sqrt(size)
        w[i * part : (i + 1) * part] = bu[:, None] * bv[None, :]
    return w


class FcaNet(nn.Module):
    """FcaNet: ResNet bottlenecks with multi-spectral channel attention - the map average-pooled
    to 7x7, weighted by fixed 2-D DCT bases of 8 frequencies (one per channel group) and summed
    over space, then FC-ReLU-FC-sigmoid channel gates; 112x112 input."""

    FREQS = [(0, 0), (0, 1), (1, 0), (1, 1), (0, 2), (2, 0), (2, 2), (1, 2)]

    class Block(nn.Module):
        def __init__(self, cin, mid, cout, stride, r=8):
            super().__init__()
            self.body = nn.Sequential(
                cba(cin, mid), cba(mid, mid, 3, stride), cba(mid, cout, act=None)
            )
            self.register_buffer("dct", _dct_filters(cout, 7, FcaNet.FREQS), False)
            self.fc = nn.Sequential(
                nn.Linear(cout, cout // r, bias=False),
                nn.ReLU(),
                nn.Linear(cout // r, cout, bias=False),
                nn.Sigmoid(),
            )
            self.short = (
                nn.Identity()
                if cin == cout and stride == 1
                else cba(cin, cout, 1, stride, act=None)
            )

        def forward(self, x):
            y = self.body(x)
            p = F.adaptive_avg_pool2d(y, 7) if y.shape[-1] != 7 else y
            g = self.fc((p * self.dct).sum((2, 3)))
            return F.relu(y * g[:, :, None, None] + self.short(x))

    def __init__(self, classes=100):
        super().__init__()
        layers = [cba(3, 32, 3, 2), nn.MaxPool2d(3, 2, 1)]
        cin = 32
        for mid, cout, s, n in [(32, 128, 1, 1), (48, 192, 2, 2), (64, 256, 2, 2)]:
            for j in range(n):
                layers.append(FcaNet.Block(cin, mid, cout, s if j == 0 else 1))
                cin = cout
        self.features = nn.Sequential(*layers)
        self.fc = nn.Linear(cin, classes)

    def forward(self, x):
        return self.fc(self.features(x).mean((2, 3)))


def m_fcanet():
    return custom(FcaNet, image_inputs(112), ["logits"], init_gain=1.0)


class ShiftNet(nn.Module):
    """ShiftNet: zero-FLOP spatial shifts (channels split into 9 groups, each moved one pixel
    in one of the 8 directions or kept, by Pad + Slice) between 1x1 conv + BN + ReLU layers
    (1x1 - shift - 1x1 bottlenecks with residuals); stride-2 3x3 depthwise downsampling."""

    @staticmethod
    def shift(x):
        c = x.shape[1]
        g = c // 9
        p = F.pad(x, (1, 1, 1, 1))
        H, W = x.shape[2], x.shape[3]
        parts, i = [], 0
        for dy in (-1, 0, 1):
            for dx in (-1, 0, 1):
                hi = c if (dy, dx) == (1, 1) else (i + 1) * g
                parts.append(p[:, i * g : hi, 1 + dy : 1 + dy + H, 1 + dx : 1 + dx + W])
                i += 1
        return torch.cat(parts, 1)

    class Block(nn.Module):
        def __init__(self, c, e=3):
            super().__init__()
            self.a, self.b = cba(c, e * c), cba(e * c, c, act=None)

        def forward(self, x):
            return F.relu(x + self.b(ShiftNet.shift(self.a(x))))

    def __init__(self, widths=(36, 72, 144, 216), depths=(2, 2, 3, 1), classes=100):
        super().__init__()
        layers, cin = [cba(3, widths[0], 3, 2)], widths[0]
        for i, (w, d) in enumerate(zip(widths, depths)):
            if i:
                layers += [cba(cin, cin, 3, 2, groups=cin, act=None), cba(cin, w)]
            layers += [ShiftNet.Block(w) for _ in range(d)]
            cin = w
        self.features = nn.Sequential(*layers)
        self.fc = nn.Linear(cin, classes)

    def forward(self, x):
        return self.fc(self.features(x).mean((2, 3)))


def m_shiftnet():
    return custom(ShiftNet, image_inputs(96), ["logits"], init_gain=1.0)


class RedNet(nn.Module):
    """RedNet: involution instead of the bottleneck 3x3 conv - a 7x7 kernel per pixel and per
    channel group (16 channels a group), generated from the (stride-pooled) input by a 1x1
    reduce + BN + ReLU and a 1x1 span, applied to Unfold patches (Mul + ReduceSum)."""

    class Involution(nn.Module):
        def __init__(self, c, k=7, stride=1, gc=16, r=4):
            super().__init__()
            self.reduce = cba(c, c // r)
            self.span = nn.Conv2d(c // r, k * k * (c // gc), 1)
            self.k, self.s, self.g = k, stride, c // gc

        def forward(self, x):
            n, c, H, W = x.shape
            y = F.avg_pool2d(x, self.s) if self.s > 1 else x
            h, w = y.shape[2:]
            ker = self.span(self.reduce(y)).reshape(n, self.g, 1, self.k * self.k, h, w)
            pt = F.unfold(x, self.k, padding=self.k // 2, stride=self.s)
            pt = pt.reshape(n, self.g, c // self.g, self.k * self.k, h, w)
            return (ker * pt).sum(3).reshape(n, c, h, w)

    class Block(nn.Module):
        def __init__(self, cin, mid, cout, stride):
            super().__init__()
            self.body = nn.Sequential(
                cba(cin, mid),
                RedNet.Involution(mid, stride=stride),
                nn.BatchNorm2d(mid),
                nn.ReLU(),
                cba(mid, cout, act=None),
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
        layers = [cba(3, 32, 3, 2), cba(32, 64, 3), nn.MaxPool2d(3, 2, 1)]
        cin = 64
        for mid, cout, s, n in [(32, 128, 1, 1), (64, 256, 2, 2), (128, 384, 2, 1)]:
            for j in range(n):
                layers.append(RedNet.Block(cin, mid, cout, s if j == 0 else 1))
                cin = cout
        self.features = nn.Sequential(*layers)
        self.fc = nn.Linear(cin, classes)

    def forward(self, x):
        return self.fc(self.features(x).mean((2, 3)))


def m_rednet():
    return custom(RedNet, image_inputs(96), ["logits"], init_gain=1.0)


class GCMobileNet(nn.Module):
    """MobileNetV2 inverted residuals (ReLU6, 3x3 depthwise) with global-context blocks: a
    1x1 conv to one logit per pixel, softmax over all pixels, the attention-pooled context
    through a 1x1 bottleneck + LayerNorm([C/r, 1, 1]) + ReLU + 1x1, added to every pixel."""

    class GC(nn.Module):
        def __init__(self, c, r=4):
            super().__init__()
            self.mask = nn.Conv2d(c, 1, 1)
            self.t = nn.Sequential(
                nn.Conv2d(c, c // r, 1),
                nn.LayerNorm([c // r, 1, 1]),
                nn.ReLU(),
                nn.Conv2d(c // r, c, 1),
            )

        def forward(self, x):
            n, c, H, W = x.shape
            a = self.mask(x).reshape(n, 1, H * W).softmax(-1)
            ctx = (x.reshape(n, c, H * W) @ a.transpose(1, 2)).reshape(n, c, 1, 1)
            return x + self.t(ctx)

    class IR(nn.Module):
        def __init__(self, cin, cout, s, e, gc):
            super().__init__()
            mid = cin * e
            self.f = nn.Sequential(
                cba(cin, mid, act=nn.ReLU6),
                cba(mid, mid, 3, s, groups=mid, act=nn.ReLU6),
                cba(mid, cout, act=None),
                GCMobileNet.GC(cout) if gc else nn.Identity(),
            )
            self.res = cin == cout and s == 1

        def forward(self, x):
            return x + self.f(x) if self.res else self.f(x)

    def __init__(self, classes=100):
        super().__init__()
        cfg = [
            (16, 1, 1, 1, 0),
            (24, 2, 2, 6, 0),
            (32, 3, 2, 6, 1),
            (64, 3, 2, 6, 1),
            (96, 2, 1, 6, 1),
            (160, 2, 2, 6, 1),
        ]
        layers, cin = [cba(3, 32, 3, 2, act=nn.ReLU6)], 32
        for c, n, s, e, gc in cfg:
            for i in range(n):
                layers.append(GCMobileNet.IR(cin, c, s if i == 0 else 1, e, gc))
                cin = c
        layers.append(cba(cin, 640, act=nn.ReLU6))
        self.features = nn.Sequential(*layers)
        self.fc = nn.Linear(640, classes)

    def forward(self, x):
        return self.fc(self.features(x).mean((2, 3)))


def m_gc_mobilenet():
    return custom(GCMobileNet, image_inputs(128), ["logits"], init_gain=1.0)


# ================================================================ embedding-heavy
NFM_CARDS = (2000, 50, 12, 700, 9, 300, 31, 4000, 24, 150, 7, 1200)


class NFM(nn.Module):
    """Neural FM: 12 categorical fields (one table, in-graph offsets) plus 6 numeric fields
    scaling their own embeddings; bi-interaction pooling 0.5 ((sum v)^2 - sum v^2), BatchNorm1d,
    MLP, added to a first-order linear term and a global bias; sigmoid."""

    def __init__(self, d=32, dense=6):
        super().__init__()
        cards = NFM_CARDS
        self.emb, self.w = nn.Embedding(sum(cards), d), nn.Embedding(sum(cards), 1)
        self.register_buffer("off", torch.tensor([0] + list(cards[:-1])).cumsum(0), False)
        self.dense_emb = nn.Parameter(torch.randn(dense, d) * 0.3)
        self.dense_w = nn.Linear(dense, 1)
        self.bn = nn.BatchNorm1d(d)
        self.mlp = nn.Sequential(
            nn.Linear(d, 64), nn.ReLU(), nn.Linear(64, 32), nn.ReLU(), nn.Linear(32, 1)
        )

    def forward(self, fields, dense):  # (n, 12) int64, (n, 6) float
        idx = fields + self.off
        v = torch.cat([self.emb(idx), dense.unsqueeze(-1) * self.dense_emb], 1)
        bi = 0.5 * (v.sum(1) ** 2 - (v**2).sum(1))
        first = self.w(idx).sum(1) + self.dense_w(dense)
        return torch.sigmoid(first + self.mlp(self.bn(bi)))


def m_nfm():
    g = torch.Generator().manual_seed(88)
    f = torch.stack([torch.randint(0, c, (1,), generator=g) for c in NFM_CARDS], 1)
    return custom(NFM, {"fields": f, "dense": torch.rand(1, 6, generator=g)}, ["ctr"])


class MIND(nn.Module):
    """MIND multi-interest retrieval: a 30-click history (0-padded) embedded from 20000 items
    plus category embeddings, a shared bilinear map, 3 iterations of dynamic (capsule) routing
    to 4 interests - softmax over interests of fixed random routing logits updated by
    agreement, padded clicks masked, squash - then label-aware attention with the target item
    (softmax of powered similarities) and scores against all items (MatMul, TopK 10)."""

    def __init__(self, items=20000, cats=200, d=32, k=4, iters=3, L=30):
        super().__init__()
        self.item, self.cat = nn.Embedding(items, d, padding_idx=0), nn.Embedding(cats, d)
        self.S = nn.Linear(d, d, bias=False)
        g = torch.Generator().manual_seed(89)
        self.register_buffer("b0", torch.randn(1, k, L, generator=g), False)
        self.user = nn.Sequential(nn.Linear(d, 4 * d), nn.ReLU(), nn.Linear(4 * d, d))
        self.iters, self.p = iters, 2.0

    @staticmethod
    def squash(z):
        n2 = (z**2).sum(-1, keepdim=True)
        return n2 / (1 + n2) * z / (n2 + 1e-9).sqrt()

    def forward(self, hist, hist_cat, target):  # (n, L), (n, L), (n,) int64
        e = self.item(hist) + self.cat(hist_cat)
        u = self.S(e)  # (n, L, d)
        pad = (hist == 0).unsqueeze(1)  # (n, 1, L)
        b = self.b0.expand(hist.shape[0], -1, -1)
        for i in range(self.iters):
            w = b.masked_fill(pad, -1e9).softmax(1).masked_fill(pad, 0.0)
            caps = self.squash(w @ u)  # (n, k, d)
            if i < self.iters - 1:
                b = b + caps @ u.transpose(1, 2)
        caps = caps + self.user(caps)
        t = self.item(target)  # (n, d)
        a = ((caps @ t.unsqueeze(-1)).squeeze(-1).abs() ** self.p).softmax(-1)
        uvec = (a.unsqueeze(-1) * caps).sum(1)
        scores = uvec @ self.item.weight.t()
        return caps, scores, scores.topk(10, -1)[1]


def m_mind():
    g = torch.Generator().manual_seed(90)
    hist = torch.randint(1, 20000, (1, 30), generator=g)
    hist[0, 22:] = 0
    inp = {
        "history": hist,
        "history_cats": torch.randint(0, 200, (1, 30), generator=g),
        "target": torch.randint(1, 20000, (1,), generator=g),
    }
    return custom(MIND, inp, ["interests", "scores", "top_items"])


class SIMHard(nn.Module):
    """SIM (hard search): from a 64-behaviour history keep the behaviours whose category equals
    the target's (Equal mask, padded slots dropped), time gaps bucketised in-graph by floor(log2)
    (Log, Floor, Clip, Cast to int64) and embedded, multi-head target attention over the kept
    behaviours (masked softmax, an all-masked row giving zeros), plus a DIN-style attention
    over the last 12 behaviours; profile embeddings, MLP, sigmoid."""

    def __init__(self, items=30000, cats=100, d=32, heads=4, buckets=16):
        super().__init__()
        self.item, self.cat = nn.Embedding(items, d, padding_idx=0), nn.Embedding(cats, d)
        self.gap = nn.Embedding(buckets, 2 * d)
        self.prof = nn.ModuleList(nn.Embedding(c, 8) for c in (3, 10, 500))
        self.q, self.kv = nn.Linear(2 * d, 2 * d), nn.Linear(2 * d, 4 * d)
        self.din = nn.Sequential(nn.Linear(8 * d, 64), nn.Sigmoid(), nn.Linear(64, 1))
        self.mlp = nn.Sequential(nn.Linear(6 * d + 24, 128), nn.ReLU(), nn.Linear(128, 1))
        self.h, self.nb = heads, buckets

    def forward(self, hist, hist_cat, gaps, target, target_cat, profile):
        n, L = hist.shape
        beh = torch.cat([self.item(hist), self.cat(hist_cat)], -1)  # (n, L, 2d)
        tgt = torch.cat([self.item(target), self.cat(target_cat)], -1)  # (n, 2d)
        keep = (hist_cat == target_cat.unsqueeze(1)) & (hist > 0)
        bucket = torch.floor(torch.log2(gaps.float() + 1)).clamp(0, self.nb - 1).long()
        kb = beh + self.gap(bucket)
        D = tgt.shape[-1]
        q = self.q(tgt).reshape(n, self.h, 1, -1)
        k, v = self.kv(kb).reshape(n, L, 2, self.h, -1).permute(2, 0, 3, 1, 4)
        s = (q @ k.transpose(-2, -1)) * (D // self.h) ** -0.5  # (n, h, 1, L)
        m = keep.reshape(n, 1, 1, L)
        a = s.masked_fill(~m, -1e9).softmax(-1) * m.any(-1, keepdim=True).float()
        long_term = (a @ v).reshape(n, D)
        recent, rt = beh[:, -12:], tgt.unsqueeze(1).expand(-1, 12, -1)
        w = self.din(torch.cat([recent, rt, recent - rt, recent * rt], -1))
        short_term = (w * recent * (hist[:, -12:] > 0).unsqueeze(-1)).sum(1)
        p = torch.cat([e(profile[:, i]) for i, e in enumerate(self.prof)], -1)
        return torch.sigmoid(self.mlp(torch.cat([long_term, short_term, tgt, p], -1)))


def m_sim_hard():
    g = torch.Generator().manual_seed(91)
    hist = torch.randint(1, 30000, (1, 64), generator=g)
    hist[0, :5] = 0
    cats = torch.randint(0, 12, (1, 64), generator=g)
    inp = {
        "history": hist,
        "history_cats": cats,
        "gaps": torch.randint(0, 40000, (1, 64), generator=g),
        "target": torch.randint(1, 30000, (1,), generator=g),
        "target_cat": torch.tensor([7]),
        "profile": torch.tensor([[1, 6, 321]]),
    }
    return custom(SIMHard, inp, ["ctr"])


MASKNET_CARDS = (5000, 40, 300, 12, 900, 7, 60, 2500, 31, 180, 24, 1000)


class MaskNet(nn.Module):
    """MaskNet (serial): 12 field embeddings flattened; three MaskBlocks, each an
    instance-guided mask (Linear, ReLU, Linear of the raw embeddings) multiplied element-wise
    into the LayerNormed previous output, then Linear + LayerNorm + ReLU; sigmoid head."""

    class MaskBlock(nn.Module):
        def __init__(self, emb_d, cin, cout, r=2):
            super().__init__()
            self.mask = nn.Sequential(
                nn.Linear(emb_d, r * emb_d), nn.ReLU(), nn.Linear(r * emb_d, cin)
            )
            self.ln_in = nn.LayerNorm(cin)
            self.out = nn.Sequential(
                nn.Linear(cin, cout, bias=False), nn.LayerNorm(cout), nn.ReLU()
            )

        def forward(self, v_emb, h):
            return self.out(self.mask(v_emb) * self.ln_in(h))

    def __init__(self, d=16):
        super().__init__()
        cards = MASKNET_CARDS
        self.emb = nn.Embedding(sum(cards), d)
        self.register_buffer("off", torch.tensor([0] + list(cards[:-1])).cumsum(0), False)
        D = d * len(cards)
        self.blocks = nn.ModuleList(
            [
                MaskNet.MaskBlock(D, D, 128),
                MaskNet.MaskBlock(D, 128, 128),
                MaskNet.MaskBlock(D, 128, 64),
            ]
        )
        self.head = nn.Linear(64, 1)

    def forward(self, fields):
        v = self.emb(fields + self.off).flatten(1)
        h = v
        for b in self.blocks:
            h = b(v, h)
        return torch.sigmoid(self.head(h))


def m_masknet():
    g = torch.Generator().manual_seed(92)
    f = torch.stack([torch.randint(0, c, (1,), generator=g) for c in MASKNET_CARDS], 1)
    return custom(MaskNet, {"fields": f}, ["ctr"])


class SRGNN(nn.Module):
    """SR-GNN session recommender: the session graph built in-graph from a 16-click session
    with repeats (positions as nodes; in / out adjacency from item-equality matrices
    (Equal) shifted by one step and MatMul'd, normalised by degree), two gated GNN steps
    (GRU-style gates), soft attention read-out against the last click, scores over 10000
    items, TopK 20."""

    def __init__(self, items=10000, d=64, steps=2):
        super().__init__()
        self.emb = nn.Embedding(items, d)
        self.ein, self.eout = nn.Linear(d, d), nn.Linear(d, d)
        self.gi, self.gh = nn.Linear(2 * d, 3 * d), nn.Linear(d, 3 * d)
        self.w1, self.w2 = nn.Linear(d, d), nn.Linear(d, d)
        self.q = nn.Linear(d, 1, bias=False)
        self.w3 = nn.Linear(2 * d, d, bias=False)
        self.steps = steps

    def forward(self, session):  # (n, T) int64, no padding
        e = (session.unsqueeze(2) == session.unsqueeze(1)).float()  # same item, (n, T, T)
        T = session.shape[1]
        pos = torch.arange(T)
        nxt = (pos.unsqueeze(1) + 1 == pos.unsqueeze(0)).to(e.dtype)  # transition t -> t + 1
        a_out = ((e @ nxt @ e) > 0).float()
        a_in = a_out.transpose(1, 2)
        a_out = a_out / a_out.sum(-1, keepdim=True).clamp(min=1)
        a_in = a_in / a_in.sum(-1, keepdim=True).clamp(min=1)
        h = self.emb(session)
        for _ in range(self.steps):
            x = torch.cat([a_in @ self.ein(h), a_out @ self.eout(h)], -1)
            ir, iz, inn = self.gi(x).chunk(3, -1)
            hr, hz, hn = self.gh(h).chunk(3, -1)
            r, z = torch.sigmoid(ir + hr), torch.sigmoid(iz + hz)
            h = (1 - z) * torch.tanh(inn + r * hn) + z * h
        last = h[:, -1]
        alpha = self.q(torch.sigmoid(self.w1(last).unsqueeze(1) + self.w2(h)))
        s = self.w3(torch.cat([(alpha * h).sum(1), last], -1))
        scores = s @ self.emb.weight.t()
        return scores, scores.topk(20, -1)[1]


def m_srgnn():
    s = torch.tensor([[17, 403, 17, 9021, 55, 403, 17, 1200, 88, 9021, 3, 55, 640, 7, 640, 17]])
    return custom(SRGNN, {"session": s}, ["scores", "top_items"])


# ================================================================ window / hierarchical attention
class EfficientViTMIT(nn.Module):
    """EfficientViT (MIT): MBConv stages, then blocks of multi-scale ReLU linear attention -
    q / k / v from a 1x1 conv, a second scale aggregated by 5x5 depthwise + grouped 1x1
    convs, ReLU kernels, (K^T [V, 1]) then Q times it, divided by the appended ones column -
    each followed by an MBConv with hard-swish; 128x128 input."""

    class MB(nn.Module):
        def __init__(self, cin, cout, s, e=4, act=nn.Hardswish):
            super().__init__()
            mid = cin * e
            self.f = nn.Sequential(
                cba(cin, mid, act=act),
                cba(mid, mid, 3, s, groups=mid, act=act),
                cba(mid, cout, act=None),
            )
            self.res = cin == cout and s == 1

        def forward(self, x):
            return x + self.f(x) if self.res else self.f(x)

    class LiteMLA(nn.Module):
        def __init__(self, c, dh=16):
            super().__init__()
            self.h = c // dh
            self.qkv = nn.Conv2d(c, 3 * c, 1, bias=False)
            self.agg = nn.Sequential(
                nn.Conv2d(3 * c, 3 * c, 5, 1, 2, groups=3 * c, bias=False),
                nn.Conv2d(3 * c, 3 * c, 1, groups=3 * self.h, bias=False),
            )
            self.proj = cba(2 * c, c, act=None)
            self.dh = dh

        def forward(self, x):
            n, c, H, W = x.shape
            qkv = self.qkv(x)
            ms = torch.cat([qkv, self.agg(qkv)], 1)  # (n, 6c, H, W)
            ms = ms.reshape(n, -1, 3 * self.dh, H * W).transpose(-1, -2)  # (n, 2h, HW, 3dh)
            q, k, v = ms.split(self.dh, -1)
            q, k = F.relu(q), F.relu(k)
            v = F.pad(v, (0, 1), value=1.0)
            kv = k.transpose(-1, -2) @ v  # (n, 2h, dh, dh+1)
            out = q @ kv
            out = out[..., :-1] / (out[..., -1:] + 1e-15)
            return x + self.proj(out.transpose(-1, -2).reshape(n, 2 * c, H, W))

    def __init__(self, classes=100):
        super().__init__()
        MB = EfficientViTMIT.MB
        layers = [cba(3, 16, 3, 2, act=nn.Hardswish), MB(16, 16, 1, 1)]
        layers += [MB(16, 32, 2), MB(32, 32, 1), MB(32, 64, 2), MB(64, 64, 1)]
        for c, n in ((128, 2), (192, 1)):
            layers.append(MB(layers[-1].f[-1][0].out_channels, c, 2, 6))
            for _ in range(n):
                layers += [EfficientViTMIT.LiteMLA(c), MB(c, c, 1)]
        self.features = nn.Sequential(*layers)
        self.head = nn.Sequential(
            cba(192, 384, act=nn.Hardswish),
            nn.AdaptiveAvgPool2d(1),
            nn.Flatten(),
            nn.Linear(384, classes),
        )

    def forward(self, x):
        return self.head(self.features(x))


def m_efficientvit_mit():
    return custom(EfficientViTMIT, image_inputs(128), ["logits"], init_gain=1.0)


class Shunted(nn.Module):
    """Shunted Transformer: shunted self-attention - half the heads take keys / values from
    the map reduced by a stride-r1 conv, the other half by stride r2 (LayerNorm + GELU after
    each), each with a local enhancement (3x3 depthwise conv on v) - and a detail-specific FFN
    (depthwise 3x3 inside the MLP); overlapping conv stem and stride-2 patch merging."""

    class SSA(nn.Module):
        def __init__(self, d, heads, r1, r2):
            super().__init__()
            self.q = nn.Linear(d, d)
            self.h, self.dh = heads, d // heads
            self.srs = nn.ModuleList()
            self.norms = nn.ModuleList()
            self.kvs = nn.ModuleList()
            self.lcs = nn.ModuleList()
            for r in (r1, r2):
                self.srs.append(nn.Conv2d(d, d, r, r) if r > 1 else nn.Identity())
                self.norms.append(nn.LayerNorm(d))
                self.kvs.append(nn.Linear(d, d))  # k and v of heads / 2 heads each
                self.lcs.append(nn.Conv2d(d // 2, d // 2, 3, 1, 1, groups=d // 2))
            self.proj = nn.Linear(d, d)

        def forward(self, x, H, W):
            n, L, d = x.shape
            hh = self.h // 2
            q = self.q(x).reshape(n, L, self.h, self.dh).transpose(1, 2)
            outs = []
            img = x.transpose(1, 2).reshape(n, d, H, W)
            for i in range(2):
                s = self.srs[i](img)
                h2, w2 = s.shape[2:]
                t = F.gelu(self.norms[i](s.flatten(2).transpose(1, 2)))
                k, v = self.kvs[i](t).reshape(n, -1, 2, hh, self.dh).permute(2, 0, 3, 1, 4)
                a = (q[:, i * hh : (i + 1) * hh] @ k.transpose(-2, -1) * self.dh**-0.5).softmax(-1)
                vi = v.transpose(-2, -1).reshape(n, d // 2, h2, w2)
                lc = self.lcs[i](vi).reshape(n, hh, self.dh, h2 * w2).transpose(-2, -1)
                o = a @ v + F.interpolate(
                    lc.transpose(-2, -1).reshape(n, d // 2, h2, w2), size=(H, W), mode="nearest"
                ).reshape(n, hh, self.dh, L).transpose(-2, -1)
                outs.append(o)
            y = torch.cat(outs, 1).transpose(1, 2).reshape(n, L, d)
            return self.proj(y)

    class Block(nn.Module):
        def __init__(self, d, heads, r1, r2):
            super().__init__()
            self.n1, self.n2 = nn.LayerNorm(d), nn.LayerNorm(d)
            self.att = Shunted.SSA(d, heads, r1, r2)
            self.fc1, self.fc2 = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)
            self.dw = nn.Conv2d(4 * d, 4 * d, 3, 1, 1, groups=4 * d)

        def forward(self, x, H, W):
            x = x + self.att(self.n1(x), H, W)
            y = self.fc1(self.n2(x))
            n, L, c = y.shape
            y = y + self.dw(y.transpose(1, 2).reshape(n, c, H, W)).flatten(2).transpose(1, 2)
            return x + self.fc2(F.gelu(y))

    def __init__(
        self, dims=(48, 96, 192), heads=(2, 4, 8), rs=((4, 2), (2, 1), (1, 1)), classes=100
    ):
        super().__init__()
        self.embeds = nn.ModuleList(
            [nn.Sequential(cba(3, dims[0], 3, 2), nn.Conv2d(dims[0], dims[0], 2, 2))]
            + [nn.Conv2d(dims[i - 1], dims[i], 3, 2, 1) for i in range(1, len(dims))]
        )
        self.norms = nn.ModuleList(nn.LayerNorm(d) for d in dims)
        self.stages = nn.ModuleList(
            nn.ModuleList(Shunted.Block(d, h, *r) for _ in range(2))
            for d, h, r in zip(dims, heads, rs)
        )
        self.fc = nn.Linear(dims[-1], classes)

    def forward(self, x):
        for emb, norm, blocks in zip(self.embeds, self.norms, self.stages):
            x = emb(x)
            n, d, H, W = x.shape
            t = norm(x.flatten(2).transpose(1, 2))
            for b in blocks:
                t = b(t, H, W)
            x = t.transpose(1, 2).reshape(n, d, H, W)
        return self.fc(x.mean((2, 3)))


def m_shunted():
    return custom(Shunted, image_inputs(64), ["logits"])


class NesT(nn.Module):
    """NesT (nested hierarchical transformer): 4x4 patches of a 64x64 image blocked into 16
    blocks of 4x4 tokens, attention only inside each block (blocks folded into the batch),
    per-level learned positions; block aggregation between levels (un-block, 3x3 conv,
    LayerNorm over channels, 3x3 stride-2 max pool, re-block) to 4 blocks, then 1."""

    def __init__(self, dims=(64, 128, 192), depths=(2, 2, 2), heads=(2, 4, 6), classes=100):
        super().__init__()
        self.patch = nn.Conv2d(3, dims[0], 4, 4)
        self.pos = nn.ParameterList(
            nn.Parameter(torch.randn(1, nb, 16, d) * 0.02) for nb, d in zip((16, 4, 1), dims)
        )
        self.levels = nn.ModuleList(
            nn.ModuleList(
                nn.ModuleList([nn.LayerNorm(d), Attention(d, h), nn.LayerNorm(d), mlp(d, 3)])
                for _ in range(n)
            )
            for d, n, h in zip(dims, depths, heads)
        )
        self.aggs = nn.ModuleList(
            nn.ModuleDict({"conv": nn.Conv2d(a, b, 3, 1, 1), "norm": nn.LayerNorm(b)})
            for a, b in zip(dims[:-1], dims[1:])
        )
        self.norm, self.fc = nn.LayerNorm(dims[-1]), nn.Linear(dims[-1], classes)

    @staticmethod
    def block(x, b=4):  # (n, d, H, W) -> (n, nb, b*b, d)
        n, d, H, W = x.shape
        x = x.reshape(n, d, H // b, b, W // b, b).permute(0, 2, 4, 3, 5, 1)
        return x.reshape(n, (H // b) * (W // b), b * b, d)

    @staticmethod
    def unblock(t, b=4):
        n, nb, _, d = t.shape
        g = int(math.isqrt(nb))
        t = t.reshape(n, g, g, b, b, d).permute(0, 5, 1, 3, 2, 4)
        return t.reshape(n, d, g * b, g * b)

    def forward(self, x):
        x = self.patch(x)
        for i, (pos, layers) in enumerate(zip(self.pos, self.levels)):
            t = self.block(x) + pos
            n, nb, L, d = t.shape
            t = t.reshape(n * nb, L, d)
            for n1, att, n2, ff in layers:
                t = t + att(n1(t))
                t = t + ff(n2(t))
            x = self.unblock(t.reshape(n, nb, L, d))
            if i < len(self.aggs):
                a = self.aggs[i]
                x = a["norm"](a["conv"](x).permute(0, 2, 3, 1)).permute(0, 3, 1, 2)
                x = F.max_pool2d(x, 3, 2, 1)
        return self.fc(self.norm(x.mean((2, 3))))


def m_nest():
    return custom(NesT, image_inputs(64), ["logits"])


class ShuffleTransformer(nn.Module):
    """Shuffle Transformer: 4x4 window attention alternating with shuffled-window attention
    (tokens strided across the map gathered into one window by a (ws, H/ws) transposed
    Reshape + Transpose), a neighbour-window connection (depthwise 5x5 conv) between them,
    relative position bias tables gathered by a fixed index, conv patch merging; 128x128."""

    class WinAttn(nn.Module):
        def __init__(self, d, heads, ws, shuffle):
            super().__init__()
            self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
            self.table = nn.Parameter(torch.randn((2 * ws - 1) ** 2, heads) * 0.2)
            c = torch.stack(
                torch.meshgrid(torch.arange(ws), torch.arange(ws), indexing="ij")
            ).flatten(1)
            rel = (c[:, :, None] - c[:, None, :]).permute(1, 2, 0) + ws - 1
            self.register_buffer("idx", rel[..., 0] * (2 * ws - 1) + rel[..., 1], False)
            self.h, self.ws, self.shuffle = heads, ws, shuffle

        def forward(self, x):  # (n, d, H, W)
            n, d, H, W = x.shape
            ws = self.ws
            if self.shuffle:  # window (i, j) holds tokens (a*H/ws + i, b*W/ws + j)
                t = x.reshape(n, d, ws, H // ws, ws, W // ws).permute(0, 3, 5, 2, 4, 1)
            else:
                t = x.reshape(n, d, H // ws, ws, W // ws, ws).permute(0, 2, 4, 3, 5, 1)
            nw = (H // ws) * (W // ws)
            t = t.reshape(n * nw, ws * ws, d)
            q, k, v = self.qkv(t).reshape(n * nw, ws * ws, 3, self.h, -1).permute(2, 0, 3, 1, 4)
            bias = self.table[self.idx.reshape(-1)].reshape(ws * ws, ws * ws, -1).permute(2, 0, 1)
            a = (q @ k.transpose(-2, -1) * (d // self.h) ** -0.5 + bias).softmax(-1)
            y = self.proj((a @ v).transpose(1, 2).reshape(n * nw, ws * ws, d))
            y = y.reshape(n, H // ws, W // ws, ws, ws, d)
            if self.shuffle:
                y = y.permute(0, 5, 3, 1, 4, 2)
            else:
                y = y.permute(0, 5, 1, 3, 2, 4)
            return y.reshape(n, d, H, W)

    class Block(nn.Module):
        def __init__(self, d, heads, ws, shuffle):
            super().__init__()
            self.n1, self.n2 = nn.BatchNorm2d(d), nn.BatchNorm2d(d)
            self.att = ShuffleTransformer.WinAttn(d, heads, ws, shuffle)
            self.ff = nn.Sequential(nn.Conv2d(d, 4 * d, 1), nn.ReLU6(), nn.Conv2d(4 * d, d, 1))
            self.local = (
                nn.Sequential(nn.Conv2d(d, d, 5, 1, 2, groups=d), nn.BatchNorm2d(d))
                if shuffle
                else None
            )

        def forward(self, x):
            x = x + self.att(self.n1(x))
            if self.local is not None:
                x = x + self.local(x)
            return x + self.ff(self.n2(x))

    def __init__(self, dims=(48, 96, 192), heads=(2, 4, 8), ws=4, classes=100):
        super().__init__()
        layers = [cba(3, 24, 3, 2), cba(24, dims[0], 3, 2)]
        for i, (d, h) in enumerate(zip(dims, heads)):
            if i:
                layers.append(cba(dims[i - 1], d, 2, 2, act=None))
                layers[-1][0].padding = (0, 0)
            layers += [
                ShuffleTransformer.Block(d, h, ws, False),
                ShuffleTransformer.Block(d, h, ws, True),
            ]
        self.features = nn.Sequential(*layers)
        self.fc = nn.Linear(dims[-1], classes)

    def forward(self, x):
        return self.fc(self.features(x).mean((2, 3)))


def m_shuffle_transformer():
    return custom(ShuffleTransformer, image_inputs(128), ["logits"])


# ================================================================ 1-D conv audio
def _dft_basis(n_fft):
    """Periodic-Hann-windowed DFT rows (real then imaginary) for bins 0..n_fft/2."""
    win = torch.hann_window(n_fft)
    k = torch.arange(n_fft // 2 + 1).float()[:, None]
    t = torch.arange(n_fft).float()[None]
    ang = 2 * math.pi * k * t / n_fft
    return torch.cat([torch.cos(ang) * win, -torch.sin(ang) * win], 0), win


class DCUNet(nn.Module):
    """Deep complex U-Net speech enhancement on 4096 samples: STFT by a Conv1d with a fixed
    windowed DFT basis (n_fft 128, hop 32), complex Conv2d encoder / ConvTranspose2d decoder
    (real and imaginary parts as paired real convs: Wr*xr - Wi*xi, Wr*xi + Wi*xr) with skip
    concatenation, complex LeakyReLU + BN, a bounded complex ratio mask (tanh magnitude,
    phase by division), iSTFT by a ConvTranspose1d overlap-add divided by the squared window
    sum."""

    class CConv(nn.Module):
        def __init__(self, cin, cout, k, s, p, transpose=False, last=False):
            super().__init__()
            Conv = nn.ConvTranspose2d if transpose else nn.Conv2d
            self.r, self.i = Conv(cin, cout, k, s, p), Conv(cin, cout, k, s, p)
            if not last:
                self.bnr, self.bni = nn.BatchNorm2d(cout), nn.BatchNorm2d(cout)
            self.last = last

        def forward(self, xr, xi):
            yr, yi = self.r(xr) - self.i(xi), self.r(xi) + self.i(xr)
            if self.last:
                return yr, yi
            return F.leaky_relu(self.bnr(yr), 0.1), F.leaky_relu(self.bni(yi), 0.1)

    def __init__(self, n_fft=128, hop=32):
        super().__init__()
        basis, win = _dft_basis(n_fft)
        self.register_buffer("fwd", basis.unsqueeze(1), False)  # (2F, 1, n_fft)
        F_ = n_fft // 2 + 1
        inv = torch.linalg.pinv(basis).T  # (2F, n_fft): spectrum -> windowed frame
        self.register_buffer("inv", (inv * win).unsqueeze(1), False)
        self.register_buffer("win2", (win**2).reshape(1, -1, 1), False)
        self.n_fft, self.hop, self.F = n_fft, hop, F_
        C = DCUNet.CConv
        self.e1 = C(1, 16, (5, 3), (2, 1), (2, 1))
        self.e2 = C(16, 32, (5, 3), (2, 2), (2, 1))
        self.e3 = C(32, 32, (3, 3), (2, 1), (1, 1))
        self.d3 = C(32, 32, (3, 3), (2, 1), (1, 1), transpose=True)
        self.d2 = C(64, 16, (5, 3), (2, 2), (2, 1), transpose=True)
        self.d1 = C(32, 1, (5, 3), (2, 1), (2, 1), transpose=True, last=True)

    def forward(self, wav):  # (n, L)
        n, L = wav.shape
        pad = self.n_fft // 2
        x = F.pad(wav.unsqueeze(1), (pad, pad), mode="reflect")
        spec = F.conv1d(x, self.fwd, stride=self.hop)  # (n, 2F, T)
        sr, si = spec[:, : self.F].unsqueeze(1), spec[:, self.F :].unsqueeze(1)  # (n, 1, F, T)
        T = sr.shape[-1]
        a = self.e1(sr[:, :, :-1], si[:, :, :-1])  # drop the Nyquist bin: F 64
        b = self.e2(*a)
        c = self.e3(*b)
        d = self.d3(*c)
        d = [
            F.pad(t, (0, b[0].shape[-1] - t.shape[-1], 0, b[0].shape[-2] - t.shape[-2])) for t in d
        ]
        d = self.d2(*(torch.cat([p, q], 1) for p, q in zip(d, b)))
        d = [
            F.pad(t, (0, a[0].shape[-1] - t.shape[-1], 0, a[0].shape[-2] - t.shape[-2])) for t in d
        ]
        mr, mi = self.d1(*(torch.cat([p, q], 1) for p, q in zip(d, a)))
        mr = F.pad(mr, (0, T - mr.shape[-1], 0, self.F - mr.shape[-2]))
        mi = F.pad(mi, (0, T - mi.shape[-1], 0, self.F - mi.shape[-2]))
        mag = (mr**2 + mi**2 + 1e-8).sqrt()
        scale = torch.tanh(mag) / mag
        mr, mi = mr * scale, mi * scale
        er, ei = sr * mr - si * mi, sr * mi + si * mr
        est = torch.cat([er, ei], 2).squeeze(1)  # (n, 2F, T)
        y = F.conv_transpose1d(est, self.inv, stride=self.hop)
        wsum = F.conv_transpose1d(
            self.win2.expand(1, -1, T), torch.eye(self.n_fft).unsqueeze(1), stride=self.hop
        )
        y = y / wsum.clamp(min=1e-6)
        return y[:, 0, pad : pad + L]


def m_dcunet():
    g = torch.Generator().manual_seed(93)
    t = torch.arange(4096).float()
    wav = 0.5 * torch.sin(2 * math.pi * 300 / 16000 * t) + 0.2 * torch.randn(1, 4096, generator=g)
    return custom(DCUNet, {"noisy": wav}, ["enhanced"], init_gain=1.0)


def _kaiser_sinc(cutoff, half_width, k=12):
    """A Kaiser-windowed sinc low-pass of k taps (BigVGAN's anti-aliasing filter)."""
    delta = 2.285 * (k // 2 - 1) * math.pi * 4 * half_width + 7.95
    beta = (
        0.1102 * (delta - 8.7)
        if delta > 50
        else 0.5842 * (delta - 21) ** 0.4 + 0.07886 * (delta - 21)
    )
    win = torch.kaiser_window(k, beta=beta, periodic=False)
    t = torch.arange(-k // 2, k // 2).float() + 0.5
    f = 2 * cutoff * win * torch.sinc(2 * cutoff * t)
    return f / f.sum()


class BigVGAN(nn.Module):
    """BigVGAN vocoder (80 mel bins -> 16x upsampled audio): ConvTranspose1d upsampling x4 x4,
    anti-aliased multi-periodicity blocks - each activation is x2 upsampled (replicate Pad,
    depthwise ConvTranspose1d with a Kaiser-sinc filter), SnakeBeta x + sin^2(a x) / b with
    per-channel Exp'd log-parameters, low-pass filtered and decimated (depthwise Conv1d
    stride 2) - around dilated Conv1d k3 (dilations 1, 3, 5); tanh output."""

    class AA(nn.Module):
        def __init__(self, c, k=12):
            super().__init__()
            self.register_buffer(
                "filt", _kaiser_sinc(0.25, 0.3, k).reshape(1, 1, -1).repeat(c, 1, 1), False
            )
            self.la = nn.Parameter(torch.randn(c) * 0.2)
            self.lb = nn.Parameter(torch.randn(c) * 0.2)
            self.c, self.k = c, k

        def forward(self, x):
            k, p = self.k, self.k // 2 - 1
            x = F.pad(x, (p, p), mode="replicate")
            x = 2 * F.conv_transpose1d(x, self.filt, stride=2, groups=self.c)
            crop = 2 * p + (k - 2) // 2
            x = x[..., crop:-crop]
            a, b = self.la.exp().reshape(1, -1, 1), self.lb.exp().reshape(1, -1, 1)
            x = x + torch.sin(a * x) ** 2 / (b + 1e-9)
            x = F.pad(x, (k // 2 - 1, k // 2), mode="replicate")
            return F.conv1d(x, self.filt, stride=2, groups=self.c)

    class AMP(nn.Module):
        def __init__(self, c, dils=(1, 3, 5)):
            super().__init__()
            self.c1 = nn.ModuleList(nn.Conv1d(c, c, 3, 1, d, dilation=d) for d in dils)
            self.c2 = nn.ModuleList(nn.Conv1d(c, c, 3, 1, 1) for _ in dils)
            self.a1 = nn.ModuleList(BigVGAN.AA(c) for _ in dils)
            self.a2 = nn.ModuleList(BigVGAN.AA(c) for _ in dils)

        def forward(self, x):
            for c1, c2, a1, a2 in zip(self.c1, self.c2, self.a1, self.a2):
                x = x + c2(a2(c1(a1(x))))
            return x

    def __init__(self, mels=80, ch=64, ups=(4, 4)):
        super().__init__()
        self.pre = nn.Conv1d(mels, ch, 7, 1, 3)
        layers, c = [], ch
        for u in ups:
            layers += [nn.ConvTranspose1d(c, c // 2, 2 * u, u, u // 2), BigVGAN.AMP(c // 2)]
            c //= 2
        self.body = nn.Sequential(*layers)
        self.post_act = BigVGAN.AA(c)
        self.post = nn.Conv1d(c, 1, 7, 1, 3)

    def forward(self, mel):  # (n, 80, T)
        return torch.tanh(self.post(self.post_act(self.body(self.pre(mel))))).squeeze(1)


def m_bigvgan():
    return custom(BigVGAN, feats((1, 80, 24), seed=94, name="mel"), ["audio"], init_gain=1.0)


class WaveGlow(nn.Module):
    """WaveGlow (training direction, audio -> latent): 2048 samples squeezed into 8 channels
    of 256 steps, mel conditioning upsampled by ConvTranspose1d to the sample rate and
    squeezed alike; 4 flows of an invertible 1x1 conv (orthogonal weight, log|Det| summed) and
    an affine coupling whose scale / shift come from a WaveNet (dilated Conv1d, tanh * sigmoid
    gates with conditioning, skip sums); 2 channels emitted early after flow 2; returns z and
    the log-determinant."""

    class WN(nn.Module):
        def __init__(self, cin, cond, ch=32, layers=3):
            super().__init__()
            self.start = nn.Conv1d(cin, ch, 1)
            self.inl = nn.ModuleList(
                nn.Conv1d(ch, 2 * ch, 3, 1, 2**i, dilation=2**i) for i in range(layers)
            )
            self.cond = nn.Conv1d(cond, 2 * ch * layers, 1)
            self.res = nn.ModuleList(nn.Conv1d(ch, ch, 1) for _ in range(layers))
            self.end = nn.Conv1d(ch, 2 * cin, 1)
            self.ch = ch

        def forward(self, x, c):
            h, skip = self.start(x), 0
            cs = self.cond(c).split(2 * self.ch, 1)
            for inl, res, ci in zip(self.inl, self.res, cs):
                a, b = (inl(h) + ci).chunk(2, 1)
                z = torch.tanh(a) * torch.sigmoid(b)
                h = h + res(z)
                skip = skip + z
            return self.end(skip).chunk(2, 1)

    def __init__(self, mels=40, group=8, flows=4, early_every=2, early=2, hop=64):
        super().__init__()
        self.up = nn.ConvTranspose1d(mels, mels, 2 * hop, hop, hop // 2)
        self.ws, self.wns = nn.ParameterList(), nn.ModuleList()
        c, self.early_at = group, []
        for k in range(flows):
            if k and k % early_every == 0:
                c -= early
                self.early_at.append(k)
            q = torch.linalg.qr(torch.randn(c, c, generator=torch.Generator().manual_seed(k)))[0]
            self.ws.append(nn.Parameter(q))
            self.wns.append(WaveGlow.WN(c // 2, mels * group))
        self.group, self.early = group, early

    def forward(self, audio, mel):  # (n, L), (n, mels, L / hop)
        n, L = audio.shape
        g = self.group
        c = self.up(mel)[..., :L]
        c = c.reshape(n, -1, L // g, g).permute(0, 1, 3, 2).reshape(n, -1, L // g)
        x = audio.reshape(n, L // g, g).transpose(1, 2)
        zs, logdet = [], torch.zeros(n)
        for k, (w, wn) in enumerate(zip(self.ws, self.wns)):
            if k in self.early_at:
                zs.append(x[:, : self.early])
                x = x[:, self.early :]
            x = F.conv1d(x, w.unsqueeze(-1))
            logdet = logdet + torch.det(w).abs().log() * x.shape[-1]
            xa, xb = x.chunk(2, 1)
            log_s, t = wn(xa, c)
            x = torch.cat([xa, torch.exp(log_s) * xb + t], 1)
            logdet = logdet + log_s.sum((1, 2))
        zs.append(x)
        return torch.cat(zs, 1), logdet


def m_waveglow():
    g = torch.Generator().manual_seed(95)
    t = torch.arange(2048).float()
    inp = {
        "audio": 0.3 * torch.sin(2 * math.pi * 220 / 16000 * t).unsqueeze(0)
        + 0.05 * torch.randn(1, 2048, generator=g),
        "mel": torch.randn(1, 40, 32, generator=g),
    }
    return custom(WaveGlow, inp, ["z", "log_det"], init_gain=0.5)


class MelGANDisc(nn.Module):
    """MelGAN multi-scale discriminator over 4096 samples: three copies at 1x, 1/2x, 1/4x
    rate (AvgPool1d k4 s2 pad 1, count_include_pad=False), each a ReflectionPad1d(7) +
    Conv1d k15, four grouped Conv1d k41 stride 4 (groups 4, 16, 64, 64), a Conv1d k5 and a
    Conv1d k3 score map, LeakyReLU 0.2; returns the three score maps concatenated and each
    scale's feature-map means."""

    class D(nn.Module):
        def __init__(self):
            super().__init__()
            chans = [(16, 64, 4), (64, 128, 16), (128, 256, 64), (256, 256, 64)]
            self.layers = nn.ModuleList(
                [nn.Sequential(nn.ReflectionPad1d(7), nn.Conv1d(1, 16, 15))]
                + [nn.Conv1d(a, b, 41, 4, 20, groups=g) for a, b, g in chans]
                + [nn.Conv1d(256, 256, 5, 1, 2)]
            )
            self.out = nn.Conv1d(256, 1, 3, 1, 1)

        def forward(self, x):
            feats_ = []
            for layer in self.layers:
                x = F.leaky_relu(layer(x), 0.2)
                feats_.append(x.mean((1, 2)))
            return self.out(x).flatten(1), torch.stack(feats_, 1)

    def __init__(self):
        super().__init__()
        self.ds = nn.ModuleList(MelGANDisc.D() for _ in range(3))
        self.pool = nn.AvgPool1d(4, 2, 1, count_include_pad=False)

    def forward(self, wav):  # (n, L)
        x, scores, fm = wav.unsqueeze(1), [], []
        for i, d in enumerate(self.ds):
            if i:
                x = self.pool(x)
            s, f = d(x)
            scores.append(s)
            fm.append(f)
        return torch.cat(scores, 1), torch.cat(fm, 1)


def m_melgan_disc():
    g = torch.Generator().manual_seed(96)
    return custom(
        MelGANDisc,
        {"audio": torch.randn(1, 4096, generator=g) * 0.5},
        ["scores", "feature_means"],
        init_gain=1.0,
    )


# ================================================================ others
def _timestep_embedding(t, dim):
    half = dim // 2
    freqs = torch.exp(-math.log(10000.0) * torch.arange(half, dtype=torch.float32) / half)
    a = t.float().unsqueeze(1) * freqs
    return torch.cat([torch.cos(a), torch.sin(a)], -1)


class SDUNet(nn.Module):
    """Latent-diffusion (Stable-Diffusion-style) UNet on a 4x16x16 latent: sinusoidal
    timestep embedding + MLP added inside GroupNorm + SiLU ResBlocks, spatial transformers at
    the two lower resolutions (GroupNorm, 1x1 proj_in, self-attention, cross-attention to an
    8-token text context, GEGLU feed-forward, proj_out, residual), stride-2 conv downsampling,
    nearest x2 upsampling, skip concatenation; predicts the noise."""

    class Res(nn.Module):
        def __init__(self, cin, cout, temb, groups=8):
            super().__init__()
            self.n1, self.c1 = nn.GroupNorm(groups, cin), nn.Conv2d(cin, cout, 3, 1, 1)
            self.t = nn.Linear(temb, cout)
            self.n2, self.c2 = nn.GroupNorm(groups, cout), nn.Conv2d(cout, cout, 3, 1, 1)
            self.skip = nn.Conv2d(cin, cout, 1) if cin != cout else nn.Identity()

        def forward(self, x, t):
            h = self.c1(F.silu(self.n1(x))) + self.t(F.silu(t))[:, :, None, None]
            return self.skip(x) + self.c2(F.silu(self.n2(h)))

    class ST(nn.Module):
        def __init__(self, c, ctx, heads=4, groups=8):
            super().__init__()
            self.norm, self.pin, self.pout = (
                nn.GroupNorm(groups, c),
                nn.Conv2d(c, c, 1),
                nn.Conv2d(c, c, 1),
            )
            self.n1, self.n2, self.n3 = nn.LayerNorm(c), nn.LayerNorm(c), nn.LayerNorm(c)
            self.sa = Attention(c, heads)
            self.cq, self.ck, self.cv = (
                nn.Linear(c, c, bias=False),
                nn.Linear(ctx, c, bias=False),
                nn.Linear(ctx, c, bias=False),
            )
            self.co = nn.Linear(c, c)
            self.geglu, self.ffo = nn.Linear(c, 8 * c), nn.Linear(4 * c, c)
            self.h = heads

        def forward(self, x, ctx):
            n, c, H, W = x.shape
            t = self.pin(self.norm(x)).flatten(2).transpose(1, 2)
            t = t + self.sa(self.n1(t))
            sh = lambda z: z.reshape(n, z.shape[1], self.h, -1).transpose(1, 2)  # noqa: E731
            q, k, v = sh(self.cq(self.n2(t))), sh(self.ck(ctx)), sh(self.cv(ctx))
            a = (q @ k.transpose(-2, -1) * (c // self.h) ** -0.5).softmax(-1)
            t = t + self.co((a @ v).transpose(1, 2).reshape(n, H * W, c))
            u, g = self.geglu(self.n3(t)).chunk(2, -1)
            t = t + self.ffo(u * F.gelu(g))
            return x + self.pout(t.transpose(1, 2).reshape(n, c, H, W))

    def __init__(self, cin=4, ch=(32, 64, 96), ctx=64):
        super().__init__()
        temb = 4 * ch[0]
        self.temb = nn.Sequential(nn.Linear(ch[0], temb), nn.SiLU(), nn.Linear(temb, temb))
        self.cin = nn.Conv2d(cin, ch[0], 3, 1, 1)
        R, S = SDUNet.Res, SDUNet.ST
        self.down = nn.ModuleList()
        skips, c = [ch[0]], ch[0]
        for i, co in enumerate(ch):
            self.down.append(nn.ModuleList([R(c, co, temb), S(co, ctx) if i else nn.Identity()]))
            c = co
            skips.append(c)
            if i < len(ch) - 1:
                self.down.append(nn.Conv2d(c, c, 3, 2, 1))
                skips.append(c)
        self.mid = nn.ModuleList([R(c, c, temb), S(c, ctx), R(c, c, temb)])
        self.up = nn.ModuleList()
        for i, co in reversed(list(enumerate(ch))):
            for _ in range(2):
                self.up.append(
                    nn.ModuleList(
                        [R(c + skips.pop(), co, temb), S(co, ctx) if i else nn.Identity()]
                    )
                )
                c = co
            if i:
                self.up.append(nn.Conv2d(c, c, 3, 1, 1))
        self.out = nn.Sequential(nn.GroupNorm(8, c), nn.SiLU(), nn.Conv2d(c, cin, 3, 1, 1))
        self.ch0 = ch[0]

    def forward(self, latent, timestep, context):
        t = self.temb(_timestep_embedding(timestep, self.ch0))
        h = self.cin(latent)
        hs = [h]
        for m in self.down:
            if isinstance(m, nn.Conv2d):
                h = m(h)
            else:
                h = m[0](h, t)
                h = h if isinstance(m[1], nn.Identity) else m[1](h, context)
            hs.append(h)
        h = self.mid[2](self.mid[1](self.mid[0](h, t), context), t)
        for m in self.up:
            if isinstance(m, nn.Conv2d):
                h = m(F.interpolate(h, scale_factor=2.0, mode="nearest"))
            else:
                h = m[0](torch.cat([h, hs.pop()], 1), t)
                h = h if isinstance(m[1], nn.Identity) else m[1](h, context)
        return self.out(h)


def m_sd_unet():
    g = torch.Generator().manual_seed(97)
    inp = {
        "latent": torch.randn(1, 4, 16, 16, generator=g),
        "timestep": torch.tensor([412.0]),
        "context": torch.randn(1, 8, 64, generator=g),
    }
    return custom(SDUNet, inp, ["noise_pred"])


class UNet3D(nn.Module):
    """3-D U-Net for volumetric segmentation on a 1x16x32x32 volume: double Conv3d 3x3x3 +
    GroupNorm + LeakyReLU blocks, MaxPool3d 2 down three levels, trilinear x2 Upsample
    (align_corners=False) + Concat with the skip on the way up, 1x1x1 conv to 3 classes,
    softmax over classes."""

    @staticmethod
    def block(cin, cout):
        return nn.Sequential(
            nn.Conv3d(cin, cout, 3, 1, 1, bias=False),
            nn.GroupNorm(4, cout),
            nn.LeakyReLU(0.01),
            nn.Conv3d(cout, cout, 3, 1, 1, bias=False),
            nn.GroupNorm(4, cout),
            nn.LeakyReLU(0.01),
        )

    def __init__(self, ch=(8, 16, 32, 48), classes=3):
        super().__init__()
        self.enc = nn.ModuleList(UNet3D.block(a, b) for a, b in zip((1,) + ch[:-1], ch))
        self.dec = nn.ModuleList(
            UNet3D.block(ch[i + 1] + ch[i], ch[i]) for i in reversed(range(len(ch) - 1))
        )
        self.head = nn.Conv3d(ch[0], classes, 1)

    def forward(self, vol):
        skips, x = [], vol
        for i, e in enumerate(self.enc):
            x = e(x if i == 0 else F.max_pool3d(x, 2))
            skips.append(x)
        skips.pop()
        for d in self.dec:
            x = F.interpolate(x, scale_factor=2.0, mode="trilinear", align_corners=False)
            x = d(torch.cat([x, skips.pop()], 1))
        return self.head(x).softmax(1)


def m_unet3d():
    return custom(
        UNet3D, feats((1, 1, 16, 32, 32), seed=98, name="volume"), ["probs"], init_gain=1.0
    )


class EGNN(nn.Module):
    """E(n)-equivariant GNN over a 24-atom molecule: a fixed list of the 552 directed edges of
    the complete graph, edge messages from (h_i, h_j, |x_i - x_j|^2) with a smooth distance
    cut-off weight, messages and coordinate updates (x_i - x_j) phi_x(m_ij) summed per target
    node by index_put with accumulate (ScatterND, reduction add) over batch-offset flat node
    indices; 3 layers, node and graph outputs (energy) and updated coordinates."""

    class Layer(nn.Module):
        def __init__(self, d):
            super().__init__()
            self.phi_e = nn.Sequential(
                nn.Linear(2 * d + 1, d), nn.SiLU(), nn.Linear(d, d), nn.SiLU()
            )
            self.phi_x = nn.Sequential(nn.Linear(d, d), nn.SiLU(), nn.Linear(d, 1, bias=False))
            self.phi_h = nn.Sequential(nn.Linear(2 * d, d), nn.SiLU(), nn.Linear(d, d))

        def forward(self, h, x, src, dst, n_nodes):  # h (M, d), x (M, 3), flat indices (E,)
            diff = x[dst] - x[src]
            d2 = (diff**2).sum(-1, keepdim=True)
            w = torch.sigmoid(4.0 * (4.0 - d2.sqrt()))
            m = self.phi_e(torch.cat([h[dst], h[src], d2], -1)) * w
            agg = torch.zeros_like(h).index_put((dst,), m, accumulate=True)
            dx = torch.zeros_like(x).index_put((dst,), diff * self.phi_x(m), accumulate=True)
            return h + self.phi_h(torch.cat([h, agg], -1)), x + dx / (n_nodes - 1)

    def __init__(self, nodes=24, types=10, d=64, layers=3):
        super().__init__()
        self.emb = nn.Embedding(types, d)
        self.layers = nn.ModuleList(EGNN.Layer(d) for _ in range(layers))
        i, j = torch.meshgrid(torch.arange(nodes), torch.arange(nodes), indexing="ij")
        keep = i != j
        self.register_buffer("dst", i[keep], False)
        self.register_buffer("src", j[keep], False)
        self.out = nn.Sequential(nn.Linear(d, d), nn.SiLU(), nn.Linear(d, 1))
        self.N = nodes

    def forward(self, atom_types, coords):  # (n, N) int64, (n, N, 3)
        n, N = atom_types.shape
        off = (torch.arange(n) * N).unsqueeze(1)
        dst, src = (self.dst + off).reshape(-1), (self.src + off).reshape(-1)
        h, x = self.emb(atom_types).reshape(n * N, -1), coords.reshape(n * N, 3)
        for layer in self.layers:
            h, x = layer(h, x, src, dst, self.N)
        node = self.out(h).reshape(n, N)
        return node, node.sum(1), x.reshape(n, N, 3)


def m_egnn():
    g = torch.Generator().manual_seed(99)
    inp = {
        "atom_types": torch.randint(0, 10, (1, 24), generator=g),
        "coords": torch.randn(1, 24, 3, generator=g) * 1.5,
    }
    return custom(EGNN, inp, ["node_energy", "energy", "coords_out"])


class NSF(nn.Module):
    """Neural spline flow (density direction) on 8-D data: 4 rational-quadratic spline coupling
    layers (8 bins, tails linear beyond +-3) whose bin widths / heights (Softmax, CumSum, Pad)
    and knot derivatives (Softplus) come from an MLP of the other half; the bin of each value
    found by counting knots below it (a searchsorted without the op), knot parameters picked
    by GatherElements, the RQ transform and its log-derivative; Where for the tails; fixed
    feature permutations between layers; standard-normal log-likelihood."""

    class Coupling(nn.Module):
        def __init__(self, d, bins=8, hidden=64, bound=3.0):
            super().__init__()
            self.dc = d // 2
            self.net = nn.Sequential(
                nn.Linear(self.dc, hidden),
                nn.ReLU(),
                nn.Linear(hidden, hidden),
                nn.ReLU(),
                nn.Linear(hidden, (d - self.dc) * (3 * bins - 1)),
            )
            self.K, self.B = bins, bound

        def spline(self, x, p):  # x (n, D), p (n, D, 3K-1)
            K, B = self.K, self.B
            w = F.softmax(p[..., :K], -1) * 0.992 + 0.001
            h = F.softmax(p[..., K : 2 * K], -1) * 0.992 + 0.001
            dk = F.softplus(p[..., 2 * K :]) + 1e-3
            dk = F.pad(dk, (1, 1), value=1.0)  # unit derivatives at the boundaries
            cw = F.pad(torch.cumsum(w, -1), (1, 0)) * 2 * B - B
            ch = F.pad(torch.cumsum(h, -1), (1, 0)) * 2 * B - B
            inside = (x > -B) & (x < B)
            xc = x.clamp(-B + 1e-6, B - 1e-6)
            idx = (xc.unsqueeze(-1) >= cw[..., 1:-1]).long().sum(-1, keepdim=True)  # (n, D, 1)
            pick = lambda t: t.gather(-1, idx).squeeze(-1)  # noqa: E731
            x0, y0 = pick(cw), pick(ch)
            bw, bh = pick(cw[..., 1:] - cw[..., :-1]), pick(ch[..., 1:] - ch[..., :-1])
            d0, d1 = pick(dk), pick(dk[..., 1:])
            s = bh / bw
            th = (xc - x0) / bw
            t1 = th * (1 - th)
            den = s + (d0 + d1 - 2 * s) * t1
            y = y0 + bh * (s * th**2 + d0 * t1) / den
            dnum = s**2 * (d1 * th**2 + 2 * s * t1 + d0 * (1 - th) ** 2)
            ld = torch.log(dnum) - 2 * torch.log(den)
            return torch.where(inside, y, x), torch.where(inside, ld, torch.zeros_like(ld))

        def forward(self, x):
            xa, xb = x[:, : self.dc], x[:, self.dc :]
            p = self.net(xa).reshape(x.shape[0], xb.shape[1], -1)
            yb, ld = self.spline(xb, p)
            return torch.cat([xa, yb], 1), ld.sum(1)

    def __init__(self, d=8, layers=4):
        super().__init__()
        self.layers = nn.ModuleList(NSF.Coupling(d) for _ in range(layers))
        g = torch.Generator().manual_seed(100)
        self.register_buffer(
            "perms", torch.stack([torch.randperm(d, generator=g) for _ in range(layers)]), False
        )

    def forward(self, x):  # (n, 8)
        logdet = torch.zeros(x.shape[0])
        for layer, perm in zip(self.layers, self.perms):
            x, ld = layer(x[:, perm])
            logdet = logdet + ld
        logp = -0.5 * (x**2).sum(1) - 0.5 * x.shape[1] * math.log(2 * math.pi)
        return x, logp + logdet


def m_nsf():
    g = torch.Generator().manual_seed(101)
    x = torch.randn(1, 8, generator=g) * 1.3
    x[0, 2] = 3.7  # one value in the linear tail
    return custom(NSF, {"x": x}, ["z", "log_prob"], init_gain=1.0)


def _nms_reference(boxes, scores, max_out, iou_thr, score_thr):
    """ONNX NonMaxSuppression (center_point_box 0) in torch: per batch and class, boxes
    scoring above score_thr taken best first, dropping those with IoU > iou_thr with a kept
    one; rows (batch, class, box) in that order."""
    rows = []
    for b in range(scores.shape[0]):
        y1, x1, y2, x2 = boxes[b].unbind(-1)
        y1, y2, x1, x2 = (
            torch.minimum(y1, y2),
            torch.maximum(y1, y2),
            torch.minimum(x1, x2),
            torch.maximum(x1, x2),
        )
        area = (y2 - y1) * (x2 - x1)
        for c in range(scores.shape[1]):
            s = scores[b, c]
            order = [
                int(i) for i in torch.argsort(s, descending=True, stable=True) if s[i] > score_thr
            ]
            kept = []
            for i in order:
                if len(kept) >= max_out:
                    break
                ok = True
                for j in kept:
                    ih = (torch.minimum(y2[i], y2[j]) - torch.maximum(y1[i], y1[j])).clamp(min=0)
                    iw = (torch.minimum(x2[i], x2[j]) - torch.maximum(x1[i], x1[j])).clamp(min=0)
                    inter = ih * iw
                    union = area[i] + area[j] - inter
                    if union > 0 and inter / union > iou_thr:
                        ok = False
                        break
                if ok:
                    kept.append(i)
            rows += [[b, c, i] for i in kept]
    return torch.tensor(rows, dtype=torch.long).reshape(-1, 3)


class _NMS(torch.autograd.Function):
    """NonMaxSuppression: a torch reference for tracing, the ONNX op when exported."""

    @staticmethod
    def forward(ctx, boxes, scores, max_out, iou_thr, score_thr):
        return _nms_reference(boxes, scores, int(max_out), float(iou_thr), float(score_thr))

    @staticmethod
    def symbolic(g, boxes, scores, max_out, iou_thr, score_thr):
        return g.op("NonMaxSuppression", boxes, scores, max_out, iou_thr, score_thr)


class SSDLite(nn.Module):
    """SSD-Lite detector with in-graph post-processing on 96x96: depthwise-separable backbone,
    two heads (12x12 and 6x6 maps, 3 anchors each, 5 classes incl. background) of depthwise
    3x3 + 1x1 convs; anchors decoded with SSD variances (Exp), softmax scores; ONNX
    NonMaxSuppression per class (max 15, IoU 0.45, score 0.3) whose data-dependent count of
    selected rows then gathers the kept boxes and scores (GatherND) - outputs of dynamic
    length."""

    def __init__(self, classes=5, anchors=3):
        super().__init__()

        def sep(cin, cout, s):
            return nn.Sequential(
                cba(cin, cin, 3, s, groups=cin, act=nn.ReLU6), cba(cin, cout, act=nn.ReLU6)
            )

        self.b1 = nn.Sequential(
            cba(3, 16, 3, 2, act=nn.ReLU6), sep(16, 32, 2), sep(32, 48, 2), sep(48, 64, 1)
        )
        self.b2 = nn.Sequential(sep(64, 96, 2), sep(96, 96, 1))
        self.heads = nn.ModuleList(
            nn.ModuleList(
                [sep(c, c, 1), nn.Conv2d(c, anchors * classes, 1), nn.Conv2d(c, anchors * 4, 1)]
            )
            for c in (64, 96)
        )
        pri = []
        for fm, sizes in ((12, (0.15, 0.25, 0.35)), (6, (0.45, 0.65, 0.85))):
            cy, cx = torch.meshgrid(
                (torch.arange(fm) + 0.5) / fm, (torch.arange(fm) + 0.5) / fm, indexing="ij"
            )
            for_s = [
                torch.stack([cy, cx, torch.full_like(cy, s), torch.full_like(cy, s * r)], -1)
                for s, r in zip(sizes, (1.0, 2.0, 0.5))
            ]
            pri.append(torch.stack(for_s, 2).reshape(-1, 4))
        self.register_buffer("priors", torch.cat(pri), False)  # (A, 4) cy cx h w
        self.C = classes

    def forward(self, x):
        f1 = self.b1(x)
        f2 = self.b2(f1)
        n = x.shape[0]
        cls, reg = [], []
        for f, (sh, hc, hr) in zip((f1, f2), self.heads):
            f = sh(f)
            cls.append(hc(f).permute(0, 2, 3, 1).reshape(n, -1, self.C))
            reg.append(hr(f).permute(0, 2, 3, 1).reshape(n, -1, 4))
        cls, reg = torch.cat(cls, 1), torch.cat(reg, 1)
        p = self.priors
        cyx = p[:, :2] + 0.1 * reg[..., :2] * p[:, 2:]
        hw = p[:, 2:] * torch.exp(0.2 * reg[..., 2:])
        boxes = torch.cat([cyx - hw / 2, cyx + hw / 2], -1)  # (n, A, 4) y1 x1 y2 x2
        scores = cls.softmax(-1)[..., 1:].transpose(1, 2).contiguous()  # (n, C-1, A)
        sel = _NMS.apply(
            boxes, scores, torch.tensor([15]), torch.tensor([0.45]), torch.tensor([0.3])
        )
        kept_boxes = boxes[sel[:, 0], sel[:, 2]]
        kept_scores = scores[sel[:, 0], sel[:, 1], sel[:, 2]]
        return sel, kept_boxes, kept_scores


def m_ssd_nms():
    return custom(SSDLite, image_inputs(96), ["selected", "boxes", "scores"], init_gain=1.5)


# ================================================================ END OF MODELS
ALL = {k[2:]: v for k, v in globals().items() if k.startswith("m_")}
EXTRA = ()
MODELS = {k: v for k, v in ALL.items() if k not in EXTRA}

if __name__ == "__main__":
    main(ALL if sys.argv[1] in EXTRA else MODELS, sys.argv)
