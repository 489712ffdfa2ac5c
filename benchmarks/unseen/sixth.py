"""A sixth set of unseen models: architectures neither the zoo, build.py, fresh.py, third.py,
fourth.py nor fifth.py holds.

README section (the table the set would add to README.md). Families: GQA = GQA decoders
with RoPE + RMSNorm, GPT2 = GPT-2-like decoders, DWSE = depthwise / squeeze-excitation convnets,
EMB = embedding-heavy, WIN = window / hierarchical attention, VIT = small ViTs, AUD = 1-D conv
audio, OTH = others.

| name | family | what it exercises |
|---|---|---|
| `qwen3_next` | GQA | Gated DeltaNet (chunked delta rule, forward substitution) + gated attn, MoE |
| `falcon_h1` | GQA | Mamba-2 SSD (chunk 16, segment sums) in parallel with GQA attn, muP scales |
| `minimax` | GQA | lightning attention (block-decayed linear attn, running K^T V state) + MoE |
| `jetmoe` | GQA | mixture of attention heads + MoE MLP: sort, data-dependent split, index_add |
| `doge` | GQA | dynamic mask attention (TopK keys + scatter), product-key expert retrieval |
| `reformer` | GPT2 | LSH attention (ArgMax hashing, argsort, chunk gathers, logsumexp), axial pos |
| `git` | GPT2 | ViT image tokens prepended to a post-LN text decoder, mixed causal mask |
| `prophetnet_decoder` | GPT2 | main + 2 n-gram streams, in-graph relative position buckets |
| `xlm_clm` | GPT2 | sinusoidal positions + language embeddings, post-LN, causal |
| `condconv` | DWSE | per-sample expert-mixed kernels: 1x1 by batched MatMul, depthwise on Unfold |
| `micronet` | DWSE | k x 1 / 1 x k depthwise, grouped 1x1 + shuffle, dynamic Shift-Max |
| `gather_excite` | DWSE | strided depthwise gather chains, nearest Resize to odd sizes, sigmoid |
| `lite_hrnet` | DWSE | 2-3 resolution branches, cross-resolution channel weighting, fusion |
| `dien` | EMB | GRU interest extractor, target attention, AUGRU unrolled over 20 steps |
| `ffm` | EMB | field-aware vectors (F x F x k), transposed-field Mul under a triangle mask |
| `mmoe_qr` | EMB | quotient-remainder embeddings (int64 Div / Mod), multi-gate MoE, 2 towers |
| `caser` | EMB | horizontal convs of heights 1..8 + max, vertical conv, 3000-item scores |
| `volo` | WIN | outlook attention: Linear-generated 3x3 weights, Unfold / Fold (Col2Im) |
| `gcvit` | WIN | window attention + global queries from a conv/MaxPool generator |
| `focal_transformer` | WIN | window + rolled ring (4 rolls, index Gather) + pooled coarse keys |
| `axial_deeplab` | WIN | position-sensitive axial attention (H, W), BN on similarities, Einsum |
| `regionvit` | WIN | regional tokens: regional self-attn, then [regional + local window] attn |
| `eomt` | VIT | queries in the last ViT blocks, predicted masks masking the attention |
| `vjepa2` | VIT | Conv3d tubelets, 3-D RoPE (depth/height/width), attentive pooler |
| `xcit` | VIT | cross-covariance attention (d x d), local patch interaction, Fourier pos |
| `pit` | VIT | token grid pooled by stride-2 depthwise conv with channel multiplier 2 |
| `sincnet` | AUD | Conv1d kernels computed in-graph from learned sinc band edges |
| `mb_melgan` | AUD | reflection pads, ConvTranspose1d x8 x8, dilated stacks, PQMF synthesis |
| `tdnnf` | AUD | factorised TDNN (k2 bottleneck + affine), 0.66 bypass, subsampling by 3 |
| `soundstream` | AUD | causal strided Conv1d + FiLM, 4-stage residual VQ (ArgMin), causal decoder |
| `nbeats` | OTH | MLP blocks, polynomial / Fourier / learned bases, doubly residual stacks |
| `tft` | OTH | GRNs, variable selection softmax, LSTM enc/dec, interpretable attention |
| `attention_unet` | OTH | U-Net skips through additive attention gates, bilinear Resize |
| `gmlp` | OTH | spatial gating unit (token x token MatMul), tiny attention (aMLP) |
| `s4d` | OTH | SSM kernel by Vandermonde (Exp/Cos/Sin) as a 256-tap depthwise Conv1d |
| `seq2seq_attn` | OTH | BiLSTM encoder, 12 LSTMCell steps, Bahdanau attn, greedy ArgMax feedback |

Also builds `triplet_att` (MobileNetV2 + triplet attention: rotated Z-pool + 7x7 gates), left
out of `--list` as a near repeat of fifth.py's `eca_cbam`.

The dynamo exporter is used where the legacy one fails: `qwen3_next` (no symbolic for
`aten::linalg_solve_triangular`; under dynamo HF switches to forward substitution), `falcon_h1`
(legacy graph: a Transpose with a negative perm that ONNX Runtime refuses), `jetmoe` (its legacy
graph, with the data-dependent expert split sizes traced as constants, disagrees with torch by
0.019), `lite_hrnet` (adaptive_avg_pool2d: sizes not constant) and `volo` (`Col2Im` needs opset
18). Patched for export (same computation): `reformer` (LSH rotations drawn once with a fixed
seed instead of `torch.randn` per call; the reversible-layer autograd.Function called directly;
the undo-sort scatter into `zeros_like` instead of `tensor.new(*size)`, which the legacy
exporter records with batch 1) and `eomt` (its training loss, which needs scipy, is not built).
`doge` keeps HF's router, which views the (batch, seq) logits as (2, batch*seq, -1) and so mixes
rows across the batch: its batch-4 outputs are not four copies of batch 1 (check.py notes it;
ours is compared with ONNX Runtime at each batch). No tried architecture had to be dropped.

Usage: python sixth.py NAME      (builds one model into $GE_UNSEEN_DIR/NAME/)
       python sixth.py --list
       python sixth.py --bench-layout  (writes $GE_UNSEEN_DIR/cache/zoo/NAME/ for each built
                                        model, so that GE_MODEL_CACHE=$GE_UNSEEN_DIR/cache
                                        benchmarks/bench_zoo.py benches them)
Build this set into its own directory (e.g. GE_UNSEEN_DIR=/work/unseen10), not the other sets'.
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
from fresh import SE, cba, custom, decoder, fan_in_init, feats, randomize_norms
from third import Attention, mlp

from build import hf, image_inputs, main, text_inputs

_TOKENS = dict(pad_token_id=0, bos_token_id=1, eos_token_id=2)


def _rand_rms(m, seed=9, lo=-0.3, hi=0.3):
    """Norm weights left at 1 (or 0 for (1+w) forms) by HF's init made to matter."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for n, p in m.named_parameters():
            if "norm" in n and p.dim() == 1 and float(p.std()) == 0:
                p.add_(torch.empty(p.shape).uniform_(lo, hi, generator=g))
    return m


def _randn_params(m, suffixes, seed, std=1.0):
    """Parameters whose names end with one of suffixes, set to N(0, std^2) (HF inits some of
    them to zeros or ones, which would hide what they do)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for n, p in m.named_parameters():
            if n.endswith(tuple(suffixes)):
                p.copy_(torch.randn(p.shape, generator=g) * std)
    return m


# ================================================================ GQA decoders (RoPE, RMSNorm)
def m_qwen3_next():
    """Qwen3-Next: 2 Gated DeltaNet layers, then a gated-attention layer. DeltaNet: fused q/k/v/z
    and b/a projections, causal depthwise Conv1d k4 + SiLU, L2-normalised q/k, decay g = -exp(A)
    softplus(a + dt_bias), beta = sigmoid(b), the chunked (64) delta rule written in torch (the
    unit lower-triangular solve as forward substitution unrolled over 63 rows (HF's export
    path), cumsum decays, exp masks), gated RMSNorm by SiLU(z). Gated attention: a sigmoid
    output gate from a doubled q_proj, (1+w) q/k RMSNorm, partial rotary (1/4); MoE of 8 experts
    top-2 + a sigmoid-gated shared expert (batched_mm); seq 48."""
    from transformers import Qwen3NextConfig

    cfg = Qwen3NextConfig(
        vocab_size=1000,
        hidden_size=128,
        intermediate_size=256,
        num_hidden_layers=3,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=32,
        max_position_embeddings=256,
        linear_conv_kernel_dim=4,
        linear_key_head_dim=32,
        linear_value_head_dim=32,
        linear_num_key_heads=2,
        linear_num_value_heads=4,
        moe_intermediate_size=96,
        shared_expert_intermediate_size=128,
        num_experts=8,
        num_experts_per_tok=2,
        layer_types=["linear_attention"] * 2 + ["full_attention"],
        experts_implementation="batched_mm",
        **_TOKENS,
    )
    wrap, inp, outs = decoder("Qwen3NextForCausalLM", cfg, seq=48)
    _rand_rms(wrap)
    return wrap, inp, outs


def m_falcon_h1():
    """Falcon-H1: every layer runs a Mamba-2 mixer (in_proj to gate / xBC / dt, causal
    depthwise Conv1d k4, SSD computed chunk-wise (chunk 16) by segment sums: cumsum, tril
    masks, exp decays, einsums, inter-chunk state passing; D skip, gated RMSNorm) in parallel
    with GQA attention, their outputs summed; muP-style multipliers on the embedding, the
    attention input / keys / output, the SSM input / output, the gated MLP and the LM head."""
    from transformers import FalconH1Config

    cfg = FalconH1Config(
        vocab_size=1000,
        hidden_size=128,
        intermediate_size=256,
        num_hidden_layers=3,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=256,
        mamba_d_ssm=128,
        mamba_n_heads=8,
        mamba_d_head=16,
        mamba_n_groups=1,
        mamba_d_state=16,
        mamba_d_conv=4,
        mamba_expand=2,
        mamba_chunk_size=16,
        mamba_rms_norm=True,
        lm_head_multiplier=0.5,
        embedding_multiplier=2.0,
        mlp_multipliers=[0.8, 1.2],
        key_multiplier=0.7,
        attention_out_multiplier=0.9,
        attention_in_multiplier=1.1,
        ssm_multipliers=[1.0, 0.9, 1.1, 0.8, 1.2],
        ssm_in_multiplier=1.1,
        ssm_out_multiplier=0.9,
        **_TOKENS,
    )
    wrap, inp, outs = decoder("FalconH1ForCausalLM", cfg, seq=48)
    _rand_rms(wrap)
    return wrap, inp, outs


def m_minimax():
    """MiniMax-Text: lightning attention (linear attention with per-head exponential decay:
    blocks of 16 tokens, intra-block QK^T V with a decay mask, inter-block running K^T V state
    with query/key decays, SiLU on q/k/v, RMSNorm + sigmoid output gate) in 3 of 4 layers,
    softmax GQA in the 4th; residual alpha/beta scaling; MoE of 4 experts top-2."""
    from transformers import MiniMaxConfig

    cfg = MiniMaxConfig(
        vocab_size=1000,
        hidden_size=128,
        intermediate_size=192,
        num_hidden_layers=4,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=32,
        max_position_embeddings=256,
        num_local_experts=4,
        num_experts_per_tok=2,
        block_size=16,
        layer_types=["linear_attention"] * 3 + ["full_attention"],
        full_attn_alpha_factor=1.2,
        full_attn_beta_factor=0.8,
        linear_attn_alpha_factor=0.9,
        linear_attn_beta_factor=1.1,
        mlp_alpha_factor=1.1,
        mlp_beta_factor=0.9,
        experts_implementation="batched_mm",
        **_TOKENS,
    )
    wrap, inp, outs = decoder("MiniMaxForCausalLM", cfg, seq=40)
    _rand_rms(wrap)
    return wrap, inp, outs


def m_jetmoe():
    """JetMoE: mixture of attention heads (MoA: per-token top-2 of 4 query/output projection
    experts sharing one key/value projection) and a top-2 of 4 SwiGLU expert MLP, both routed
    by a top-k gate that sorts the token-expert pairs, splits them by data-dependent expert
    counts, runs each expert on its slice and index_adds the results back (ScatterND)."""
    from transformers import JetMoeConfig

    cfg = JetMoeConfig(
        vocab_size=1000,
        hidden_size=128,
        num_hidden_layers=3,
        num_key_value_heads=2,
        kv_channels=32,
        intermediate_size=192,
        max_position_embeddings=256,
        num_local_experts=4,
        num_experts_per_tok=2,
        **_TOKENS,
    )
    wrap, inp, outs = decoder("JetMoeForCausalLM", cfg, seq=40)
    _rand_rms(wrap)
    _randn_params(wrap, ("moa.bias", "mlp.bias"), seed=21, std=0.1)
    return wrap, inp, outs


def m_doge():
    """Doge: dynamic mask attention (a per-key-head mask exp(A * softplus(dt_proj(v))) added
    to the causal scores; beyond keep_window 24 keys only the TopK are kept via ScatterElements
    of ones), q/k RMSNorm, and a cross-domain MoE: product-key routing (two TopK over 8 keys,
    their cartesian sums, TopK 4 of 64), Gather of per-expert up/down embedding rows, a
    shared SwiGLU MLP; learned residual scales."""
    from transformers import DogeConfig

    cfg = DogeConfig(
        vocab_size=1000,
        hidden_size=128,
        intermediate_size=256,
        num_hidden_layers=3,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=256,
        keep_window_size=24,
        is_moe=True,
        num_experts=64,
        num_experts_per_tok=4,
        **_TOKENS,
    )
    wrap, inp, outs = decoder("DogeForCausalLM", cfg, seq=40)
    _rand_rms(wrap)
    _randn_params(wrap, (".A",), seed=22, std=0.5)
    return wrap, inp, outs


# ================================================================ GPT-2-like decoders
def m_reformer():
    """Reformer LM: reversible residual layers (two streams, concatenated), axial position
    embeddings (8 x 8 factorised, broadcast + concat), a chunked local attention layer (chunks
    of 16 attending to the previous chunk) and an LSH attention layer (2 hashes x 4 buckets
    from fixed random rotations: ArgMax of [xR, -xR], a stable argsort of bucket*T + position,
    gathers into sorted chunks, look-one-back, self-masking, logsumexp re-combination of the
    hash rounds, unsort by a second argsort); causal, LayerNorm, ReLU FFN."""
    import transformers.models.reformer.modeling_reformer as R
    from transformers import ReformerConfig

    cfg = ReformerConfig(
        vocab_size=1000,
        hidden_size=128,
        attention_head_size=32,
        num_attention_heads=4,
        attn_layers=["local", "lsh", "local", "lsh"],
        axial_pos_shape=[8, 8],
        axial_pos_embds_dim=[64, 64],
        max_position_embeddings=64,
        feed_forward_size=256,
        local_attn_chunk_length=16,
        lsh_attn_chunk_length=16,
        num_buckets=4,
        num_hashes=2,
        is_decoder=True,
        hidden_dropout_prob=0.0,
        local_attention_probs_dropout_prob=0.0,
        lsh_attention_probs_dropout_prob=0.0,
        hash_seed=None,
        **_TOKENS,
    )
    # HF draws the LSH rotations with torch.randn in every forward: fixed rotations instead
    # (what a seeded run draws), so the exported graph is deterministic.
    rot = {}

    def fixed_randn(*shape, device=None, dtype=None, **kw):
        shape = shape[0] if len(shape) == 1 and isinstance(shape[0], (tuple, list)) else shape
        shape = tuple(int(s) for s in shape)
        if shape not in rot:
            g = torch.Generator().manual_seed(100 + len(rot))
            rot[shape] = torch.randn(shape, generator=g)
        return rot[shape].to(dtype or torch.float32)

    class _T:
        def __getattr__(self, k):
            return fixed_randn if k == "randn" else getattr(torch, k)

    R.torch = _T()

    # The reversible layers run inside an autograd.Function (a custom backward), which the
    # legacy exporter cannot trace: call its forward directly (the same computation).
    class _Ctx:
        def save_for_backward(self, *a):
            pass

    rev_forward = R._ReversibleFunction.forward

    class _Rev:
        @staticmethod
        def apply(*args):
            return rev_forward(_Ctx(), *args)

    R._ReversibleFunction = _Rev

    # The undo-sort permutation is scattered into `tensor.new(*size)`, which the legacy exporter
    # records with a constant batch of 1: the same scatter into zeros_like (batch stays dynamic).
    def sorted_and_undo(self, sequence_length, buckets, num_hashes):
        with torch.no_grad():
            idx = R._stable_argsort(buckets, dim=-1)
            pos = torch.arange(idx.shape[-1], device=buckets.device)
            pos = pos.view(1, 1, -1).expand(idx.shape)
            return idx, torch.zeros_like(idx).scatter(-1, idx, pos)

    R.LSHSelfAttention._get_sorted_bucket_idx_and_undo_sorted_bucket_idx = sorted_and_undo
    wrap, inp, outs = hf(
        "ReformerModelWithLMHead",
        cfg,
        text_inputs(1000, seq=64, mask=False),
        ["logits"],
        {"use_cache": False},
    )
    randomize_norms(wrap)
    return wrap, inp, outs


def m_git():
    """GIT: a CLIP-like ViT image encoder (pre-LN, quick_gelu, 48x48 in 8x8 patches) whose
    tokens are projected (Linear + LayerNorm) and prepended to BERT-style (post-LN, learned
    positions, embedding LayerNorm) text tokens in one decoder: a mask that is bidirectional
    over image tokens, causal over text and blocks image-to-text; LM head on the text part."""
    from transformers import GitConfig

    cfg = GitConfig(
        vision_config=dict(
            hidden_size=64,
            intermediate_size=128,
            num_hidden_layers=2,
            num_attention_heads=4,
            image_size=48,
            patch_size=8,
        ),
        vocab_size=1000,
        hidden_size=128,
        num_hidden_layers=3,
        num_attention_heads=4,
        intermediate_size=256,
        max_position_embeddings=128,
        hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
        **_TOKENS,
    )
    inp = text_inputs(1000, seq=24)
    inp["pixel_values"] = image_inputs(48)["pixel_values"]
    wrap, inp, outs = hf("GitForCausalLM", cfg, inp, ["logits"], {"use_cache": False})
    randomize_norms(wrap)
    return wrap, inp, outs


def m_prophetnet_decoder():
    """ProphetNet decoder as a causal LM: a main stream plus 2 n-gram predicting streams
    (n-gram embeddings + shifted positions), the n-gram self-attention where each stream
    attends to the main stream and itself, with T5-style relative position buckets computed
    in-graph for the main and predict streams; post-LN, GELU FFN, 3 logits streams."""
    from transformers import ProphetNetConfig

    cfg = ProphetNetConfig(
        vocab_size=1000,
        hidden_size=128,
        decoder_ffn_dim=256,
        num_decoder_layers=2,
        num_decoder_attention_heads=4,
        encoder_ffn_dim=256,
        num_encoder_layers=1,
        num_encoder_attention_heads=4,
        max_position_embeddings=128,
        ngram=2,
        num_buckets=16,
        relative_max_distance=64,
        dropout=0.0,
        attention_dropout=0.0,
        activation_dropout=0.0,
        is_encoder_decoder=False,
        add_cross_attention=False,
        is_decoder=True,
        **_TOKENS,
    )
    wrap, inp, outs = hf(
        "ProphetNetForCausalLM",
        cfg,
        text_inputs(1000, seq=32),
        ["logits", "logits_ngram"],
        {"use_cache": False},
    )
    randomize_norms(wrap)
    return wrap, inp, outs


def m_xlm_clm():
    """XLM as a causal LM: fixed sinusoidal position embeddings, a language embedding per
    token (int64 langs input), post-LN blocks (attention, GELU FFN), padding mask multiplied
    into the hidden states, an adaptive-free tied projection head."""
    from transformers import XLMConfig

    cfg = XLMConfig(
        vocab_size=1000,
        emb_dim=128,
        n_layers=3,
        n_heads=4,
        dropout=0.0,
        attention_dropout=0.0,
        sinusoidal_embeddings=True,
        causal=True,
        n_langs=3,
        use_lang_emb=True,
        max_position_embeddings=128,
        pad_token_id=2,
        bos_token_id=0,
        eos_token_id=1,
    )
    inp = text_inputs(1000, seq=40, lo=5)
    inp["langs"] = torch.tensor([[0] * 20 + [2] * 20], dtype=torch.long)
    wrap, inp, outs = hf("XLMWithLMHeadModel", cfg, inp, ["logits"])
    randomize_norms(wrap)
    return wrap, inp, outs


# ================================================================ depthwise + squeeze-excitation
def _shuffle(x, g):
    n, c, h, w = x.shape
    return x.reshape(n, g, c // g, h, w).transpose(1, 2).reshape(n, c, h, w)


class CondConvNet(nn.Module):
    """CondConv (conditionally parameterised convolutions): in every MBConv block the expand
    1x1, the 3x3/5x5 depthwise and the project 1x1 kernels are per-sample mixtures of 4
    experts, routed by sigmoid(Linear(GAP(x))); the mixed 1x1 kernels are applied by a
    batched MatMul, the mixed depthwise kernels on Unfold (Im2Col) patches by Mul + ReduceSum,
    so batch rows get different kernels; SE, swish; 64x64."""

    class Dyn(nn.Module):
        def __init__(self, cin, cout, k=1, s=1, depthwise=False, experts=4):
            super().__init__()
            self.k, self.s, self.dw, self.cout = k, s, depthwise, cout
            fan = k * k if depthwise else cin
            shape = (experts, cout, k * k) if depthwise else (experts, cout, cin)
            self.w = nn.Parameter(torch.randn(shape) / fan**0.5)
            self.route = nn.Linear(cin, experts)
            self.bn = nn.BatchNorm2d(cout)

        def forward(self, x, pooled):
            n, c, h, w = x.shape
            r = torch.sigmoid(self.route(pooled))  # (n, E)
            wt = torch.einsum("ne,eck->nck", r, self.w)
            if not self.dw:
                y = (wt @ x.flatten(2)).reshape(n, self.cout, h, w)
            else:
                p = F.unfold(x, self.k, padding=self.k // 2, stride=self.s)  # (n, c*k*k, L)
                ho, wo = (
                    (h + 2 * (self.k // 2) - self.k) // self.s + 1,
                    (w + 2 * (self.k // 2) - self.k) // self.s + 1,
                )
                y = (p.reshape(n, c, self.k * self.k, -1) * wt.unsqueeze(-1)).sum(2)
                y = y.reshape(n, c, ho, wo)
            return self.bn(y)

    class MB(nn.Module):
        def __init__(self, cin, cout, k, s, e):
            super().__init__()
            mid = cin * e
            D = CondConvNet.Dyn
            self.exp = D(cin, mid)
            self.dw = D(mid, mid, k, s, depthwise=True)
            self.se = nn.Sequential(nn.Linear(mid, mid // 4), nn.SiLU(), nn.Linear(mid // 4, mid))
            self.proj = D(mid, cout)
            self.res = s == 1 and cin == cout

        def forward(self, x):
            y = F.silu(self.exp(x, x.mean((2, 3))))
            y = F.silu(self.dw(y, y.mean((2, 3))))
            p = y.mean((2, 3))
            y = y * torch.sigmoid(self.se(p))[:, :, None, None]
            y = self.proj(y, p)
            return x + y if self.res else y

    def __init__(self, classes=100):
        super().__init__()
        B = CondConvNet.MB
        self.stem = cba(3, 24, 3, 2, act=nn.SiLU)
        cfg = [(24, 32, 3, 2, 4), (32, 32, 3, 1, 4), (32, 48, 5, 2, 4), (48, 48, 5, 1, 4)]
        cfg += [(48, 96, 3, 2, 4), (96, 96, 3, 1, 4), (96, 128, 5, 1, 4)]
        self.blocks = nn.Sequential(*[B(*c) for c in cfg])
        self.head = cba(128, 512, act=nn.SiLU)
        self.fc = nn.Linear(512, classes)

    def forward(self, x):
        return self.fc(self.head(self.blocks(self.stem(x))).mean((2, 3)))


def m_condconv():
    return custom(CondConvNet, image_inputs(64), ["logits"], init_gain=1.0)


class MicroNet(nn.Module):
    """MicroNet-like: micro-factorised pointwise convs (grouped 1x1, channel shuffle, grouped
    1x1), micro-factorised depthwise convs (k x 1 then 1 x k, channel multiplier 2 on the
    stem), and dynamic Shift-Max activations: per-sample coefficients from GAP + two Linears
    + hard-sigmoid mix the input with its group-circularly shifted channels (Slice + Concat),
    the max of J=2 such mixtures; 112x112."""

    class ShiftMax(nn.Module):
        def __init__(self, c, g, J=2, K=2, r=4):
            super().__init__()
            self.g, self.J, self.K = g, J, K
            self.fc = nn.Sequential(
                nn.Linear(c, max(8, c // r)),
                nn.ReLU(),
                nn.Linear(max(8, c // r), c * J * K),
                nn.Hardsigmoid(),
            )

        def forward(self, x):
            n, c, h, w = x.shape
            a = (self.fc(x.mean((2, 3))) - 0.5).reshape(n, self.J, self.K, c, 1, 1) * 2
            a = a + torch.tensor([1.0, 0.0]).reshape(1, 1, 2, 1, 1, 1)  # init: identity term
            step = c // self.g
            xs = [x, torch.cat([x[:, step:], x[:, :step]], 1)]
            outs = [sum(a[:, j, k] * xs[k] for k in range(self.K)) for j in range(self.J)]
            return torch.maximum(outs[0], outs[1])

    class Block(nn.Module):
        def __init__(self, cin, cout, k, s, mid, g1, g2):
            super().__init__()
            self.dw = nn.Sequential(
                nn.Conv2d(cin, cin, (k, 1), (s, 1), (k // 2, 0), groups=cin, bias=False),
                nn.BatchNorm2d(cin),
                nn.Conv2d(cin, cin, (1, k), (1, s), (0, k // 2), groups=cin, bias=False),
                nn.BatchNorm2d(cin),
            )
            self.act1 = MicroNet.ShiftMax(cin, g1)
            self.pw1 = nn.Sequential(
                nn.Conv2d(cin, mid, 1, groups=g1, bias=False), nn.BatchNorm2d(mid)
            )
            self.act2 = MicroNet.ShiftMax(mid, g2)
            self.pw2 = nn.Sequential(
                nn.Conv2d(mid, cout, 1, groups=g2, bias=False), nn.BatchNorm2d(cout)
            )
            self.g1, self.res = g1, s == 1 and cin == cout

        def forward(self, x):
            y = self.act1(self.dw(x))
            y = _shuffle(self.act2(_shuffle(self.pw1(y), self.g1)), self.g1)
            y = self.pw2(y)
            return x + y if self.res else y

    def __init__(self, classes=100):
        super().__init__()
        self.stem = nn.Sequential(
            nn.Conv2d(3, 6, (3, 1), (2, 1), (1, 0), bias=False),
            nn.Conv2d(6, 12, (1, 3), (1, 2), (0, 1), groups=6, bias=False),  # multiplier 2
            nn.BatchNorm2d(12),
            nn.ReLU6(),
        )
        B = MicroNet.Block
        self.blocks = nn.Sequential(
            B(12, 16, 3, 2, 32, 2, 4),
            B(16, 24, 3, 2, 64, 4, 4),
            B(24, 24, 5, 1, 96, 4, 4),
            B(24, 48, 5, 2, 144, 4, 6),
            B(48, 48, 3, 1, 192, 4, 6),
            B(48, 96, 3, 2, 288, 6, 6),
            B(96, 96, 5, 1, 384, 6, 8),
        )
        self.fc = nn.Sequential(nn.Linear(96, 384), nn.Hardswish(), nn.Linear(384, classes))

    def forward(self, x):
        return self.fc(self.blocks(self.stem(x)).mean((2, 3)))


def m_micronet():
    return custom(MicroNet, image_inputs(112), ["logits"], init_gain=1.0)


class GatherExciteNet(nn.Module):
    """Gather-Excite (GE-theta+) in a ResNet-style bottleneck net: the gather is a chain of
    stride-2 depthwise 3x3 conv + BN (+ ReLU) down to 1/4 or 1/8 of the map (global mean in
    the last stage), the excite a nearest Resize back to the (odd) map size and a sigmoid;
    120x120 input gives 30/15/8/4 maps."""

    class GE(nn.Module):
        def __init__(self, c, steps):
            super().__init__()
            layers = []
            for i in range(steps):
                layers += [nn.Conv2d(c, c, 3, 2, 1, groups=c, bias=False), nn.BatchNorm2d(c)]
                if i < steps - 1:
                    layers.append(nn.ReLU())
            self.gather = nn.Sequential(*layers) if steps else None

        def forward(self, x):
            if self.gather is None:
                g = x.mean((2, 3), keepdim=True)
            else:
                g = F.interpolate(self.gather(x), size=x.shape[2:], mode="nearest")
            return x * torch.sigmoid(g)

    class Bottleneck(nn.Module):
        def __init__(self, cin, cout, s, steps):
            super().__init__()
            mid = cout // 4
            self.f = nn.Sequential(
                cba(cin, mid),
                cba(mid, mid, 3, s, groups=mid // 8 if mid >= 16 else 1),
                cba(mid, cout, act=None),
            )
            self.ge = GatherExciteNet.GE(cout, steps)
            self.sc = None if s == 1 and cin == cout else cba(cin, cout, 1, s, act=None)

        def forward(self, x):
            return F.relu(self.ge(self.f(x)) + (x if self.sc is None else self.sc(x)))

    def __init__(self, classes=100):
        super().__init__()
        B = GatherExciteNet.Bottleneck
        self.stem = nn.Sequential(cba(3, 32, 3, 2), nn.MaxPool2d(3, 2, 1))
        self.blocks = nn.Sequential(
            B(32, 64, 1, 3),
            B(64, 64, 1, 3),
            B(64, 128, 2, 2),
            B(128, 128, 1, 2),
            B(128, 256, 2, 1),
            B(256, 256, 1, 1),
            B(256, 512, 2, 0),
        )
        self.fc = nn.Linear(512, classes)

    def forward(self, x):
        return self.fc(self.blocks(self.stem(x)).mean((2, 3)))


def m_gather_excite():
    return custom(GatherExciteNet, image_inputs(120), ["logits"], init_gain=1.0)


class LiteHRNet(nn.Module):
    """Lite-HRNet: parallel high-to-low resolution branches (2, then 3) of conditional
    channel weighting shuffle blocks - a channel split, cross-resolution weights (every branch
    adaptive-avg-pooled to the smallest map, concatenated, 1x1 conv - ReLU - 1x1 conv -
    sigmoid, split, nearest-upsampled back), a 3x3 depthwise conv, per-branch spatial (SE)
    weights, Concat + channel shuffle - and multi-resolution fusion (1x1 conv + BN + nearest
    upsampling; stride-2 depthwise + pointwise downsampling); 17 heatmaps from the
    highest-resolution branch of a 128x96 image."""

    class CCW(nn.Module):
        def __init__(self, chans):
            super().__init__()
            half = [c // 2 for c in chans]
            tot = sum(half)
            self.cross = nn.Sequential(
                nn.Conv2d(tot, tot // 4, 1), nn.ReLU(), nn.Conv2d(tot // 4, tot, 1), nn.Sigmoid()
            )
            self.dw = nn.ModuleList(cba(h, h, 3, 1, h, act=None) for h in half)
            self.se = nn.ModuleList(
                nn.Sequential(nn.Linear(h, h // 4), nn.ReLU(), nn.Linear(h // 4, h), nn.Sigmoid())
                for h in half
            )
            self.half = half

        def forward(self, xs):
            keep, go = zip(*[x.chunk(2, 1) for x in xs])
            small = go[-1].shape[2:]
            w = self.cross(torch.cat([F.adaptive_avg_pool2d(g, small) for g in go], 1))
            w = torch.split(w, self.half, 1)
            out = []
            for i, g in enumerate(go):
                y = g * F.interpolate(w[i], size=g.shape[2:], mode="nearest")
                y = self.dw[i](y)
                y = y * self.se[i](y.mean((2, 3)))[:, :, None, None]
                out.append(_shuffle(torch.cat([keep[i], y], 1), 2))
            return out

    class Fuse(nn.Module):
        def __init__(self, chans):
            super().__init__()
            self.ops = nn.ModuleDict()
            for i, ci in enumerate(chans):
                for j, cj in enumerate(chans):
                    if j > i:  # lower resolution -> upsample into i
                        self.ops[f"{j}{i}"] = cba(cj, ci, act=None)
                    elif j < i:  # higher resolution -> downsample (i - j) times
                        steps = []
                        for s in range(i - j):
                            c_out = ci if s == i - j - 1 else cj
                            steps += [cba(cj, cj, 3, 2, cj, act=None), cba(cj, c_out, act=nn.ReLU)]
                        self.ops[f"{j}{i}"] = nn.Sequential(*steps)

        def forward(self, xs):
            out = []
            for i, x in enumerate(xs):
                y = x
                for j, z in enumerate(xs):
                    if j > i:
                        y = y + F.interpolate(
                            self.ops[f"{j}{i}"](z), size=x.shape[2:], mode="nearest"
                        )
                    elif j < i:
                        y = y + self.ops[f"{j}{i}"](z)
                out.append(F.relu(y))
            return out

    def __init__(self, joints=17):
        super().__init__()
        self.stem = nn.Sequential(cba(3, 32, 3, 2), cba(32, 32, 3, 2, 32, act=None), cba(32, 40))
        self.down1 = cba(40, 80, 3, 2)
        self.stage2 = nn.ModuleList([LiteHRNet.CCW((40, 80)), LiteHRNet.CCW((40, 80))])
        self.fuse2 = LiteHRNet.Fuse((40, 80))
        self.down2 = cba(80, 160, 3, 2)
        self.stage3 = nn.ModuleList([LiteHRNet.CCW((40, 80, 160)), LiteHRNet.CCW((40, 80, 160))])
        self.fuse3 = LiteHRNet.Fuse((40, 80, 160))
        self.head = nn.Conv2d(40, joints, 1)

    def forward(self, x):
        x = self.stem(x)
        xs = [x, self.down1(x)]
        for b in self.stage2:
            xs = b(xs)
        xs = self.fuse2(xs)
        xs = xs + [self.down2(xs[-1])]
        for b in self.stage3:
            xs = b(xs)
        xs = self.fuse3(xs)
        return self.head(xs[0])


def m_lite_hrnet():
    return custom(LiteHRNet, image_inputs(128, 96), ["heatmaps"], init_gain=1.0)


class TripletNet(nn.Module):
    """MobileNetV2-like inverted residuals with triplet attention after the depthwise conv:
    three branches rotate the tensor (Permute to C-W-H... orders), Z-pool (max and mean over
    the leading axis, Concat), a 7x7 conv + BN + sigmoid gate, rotate back, and average;
    ReLU6, 112x144 input."""

    class Gate(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = cba(2, 1, 7, act=None)

        def forward(self, x):  # gate over dims (2, 3), pooled over dim 1
            z = torch.cat([x.amax(1, keepdim=True), x.mean(1, keepdim=True)], 1)
            return x * torch.sigmoid(self.conv(z))

    class Triplet(nn.Module):
        def __init__(self):
            super().__init__()
            self.cw, self.hc, self.hw = (TripletNet.Gate() for _ in range(3))

        def forward(self, x):
            a = self.cw(x.permute(0, 2, 1, 3)).permute(0, 2, 1, 3)  # pool over H
            b = self.hc(x.permute(0, 3, 2, 1)).permute(0, 3, 2, 1)  # pool over W
            return (a + b + self.hw(x)) / 3

    class IR(nn.Module):
        def __init__(self, cin, cout, s, e):
            super().__init__()
            mid = cin * e
            self.f = nn.Sequential(
                cba(cin, mid, act=nn.ReLU6) if e > 1 else nn.Identity(),
                cba(mid, mid, 3, s, mid, act=nn.ReLU6),
                TripletNet.Triplet(),
                cba(mid, cout, act=None),
            )
            self.res = s == 1 and cin == cout

        def forward(self, x):
            return x + self.f(x) if self.res else self.f(x)

    def __init__(self, classes=100):
        super().__init__()
        R = TripletNet.IR
        self.stem = cba(3, 32, 3, 2, act=nn.ReLU6)
        cfg = [(32, 16, 1, 1), (16, 24, 2, 6), (24, 24, 1, 6), (24, 32, 2, 6), (32, 32, 1, 6)]
        cfg += [(32, 64, 2, 6), (64, 64, 1, 6), (64, 96, 1, 6), (96, 160, 2, 6)]
        self.blocks = nn.Sequential(*[R(*c) for c in cfg])
        self.head = cba(160, 640, act=nn.ReLU6)
        self.fc = nn.Linear(640, classes)

    def forward(self, x):
        return self.fc(self.head(self.blocks(self.stem(x))).mean((2, 3)))


def m_triplet_att():
    return custom(TripletNet, image_inputs(112, 144), ["logits"], init_gain=1.0)


# ================================================================ embedding-heavy
class DIEN(nn.Module):
    """DIEN: item / category / user embedding tables, an interest-extractor GRU over a 20-step
    behaviour history, target attention (a small MLP over [h, e, h - e, h * e], masked softmax
    over the valid steps) and an interest-evolving AUGRU written out step by step (the update
    gate scaled by the attention score, GRU gates as Sigmoid/Tanh of Linear sums), then an MLP
    with PReLU over [user, target, final interest, history sum]; CTR probability out."""

    def __init__(self, items=5000, cates=200, users=2000, d=32, h=48):
        super().__init__()
        self.item, self.cate, self.user = (
            nn.Embedding(items, d),
            nn.Embedding(cates, d // 2),
            nn.Embedding(users, d),
        )
        e = d + d // 2
        self.gru = nn.GRU(e, h, batch_first=True)
        self.att = nn.Sequential(nn.Linear(4 * h, 64), nn.Sigmoid(), nn.Linear(64, 1))
        self.tproj = nn.Linear(e, h)
        self.wx, self.wh = nn.Linear(h, 3 * h), nn.Linear(h, 3 * h, bias=False)
        self.mlp = nn.Sequential(
            nn.Linear(d + e + h + e, 128),
            nn.PReLU(128),
            nn.Linear(128, 64),
            nn.PReLU(64),
            nn.Linear(64, 1),
        )
        self.h = h

    def forward(self, user, target, hist, mask):  # (n,1) (n,2) (n,T,2) int64, mask (n,T) float
        u = self.user(user[:, 0])
        t = torch.cat([self.item(target[:, 0]), self.cate(target[:, 1])], -1)
        hs = torch.cat([self.item(hist[..., 0]), self.cate(hist[..., 1])], -1)  # (n, T, e)
        states, _ = self.gru(hs)
        q = self.tproj(t).unsqueeze(1).expand_as(states)
        s = self.att(torch.cat([states, q, states - q, states * q], -1)).squeeze(-1)
        a = torch.softmax(s.masked_fill(mask == 0, -1e9), -1) * mask  # (n, T)
        hx = states.new_zeros(states.shape[0], self.h)
        gx = self.wx(states)
        for i in range(states.shape[1]):
            xr, xz, xn = gx[:, i].chunk(3, -1)
            hr, hz, hn = self.wh(hx).chunk(3, -1)
            r, z = torch.sigmoid(xr + hr), torch.sigmoid(xz + hz)
            n_ = torch.tanh(xn + r * hn)
            z = a[:, i : i + 1] * (1 - z)  # attentional update gate
            hx = (1 - z) * hx + z * n_
        hsum = (hs * mask.unsqueeze(-1)).sum(1)
        return torch.sigmoid(self.mlp(torch.cat([u, t, hx, hsum], -1)))


def m_dien():
    g = torch.Generator().manual_seed(41)
    T = 20
    hist = torch.stack(
        [torch.randint(0, 5000, (1, T), generator=g), torch.randint(0, 200, (1, T), generator=g)],
        -1,
    )
    mask = torch.ones(1, T)
    mask[0, 14:] = 0  # a history of 14 valid steps
    inp = {
        "user": torch.randint(0, 2000, (1, 1), generator=g),
        "target": torch.tensor([[123, 45]]),
        "history": hist,
        "history_mask": mask,
    }
    return custom(DIEN, inp, ["ctr"])


FFM_CARDS = (800, 50, 3000, 12, 7, 24, 400, 90, 1500, 5, 31, 260)


class FFM(nn.Module):
    """Field-aware factorisation machine: one table of field-aware vectors (every feature has
    a k=8 vector per field: rows of F*k), in-graph field offsets, the pairwise term
    sum_{i<j} <v_{i,f_j}, v_{j,f_i}> as a Mul of the (F, F, k) tensor with its field
    transpose under a constant strict-upper-triangle mask, a linear term from a 1-wide
    table, numeric features through a field of their own; sigmoid."""

    def __init__(self, cards=FFM_CARDS, k=8, dense=4):
        super().__init__()
        F_ = len(cards) + 1
        self.F, self.k = F_, k
        self.register_buffer(
            "offsets", torch.tensor([0, *torch.tensor(cards).cumsum(0)[:-1].tolist()])
        )
        self.v = nn.Embedding(sum(cards), F_ * k)
        self.w = nn.Embedding(sum(cards), 1)
        self.dense = nn.Linear(dense, F_ * k)
        self.wd = nn.Linear(dense, 1)
        nn.init.normal_(self.v.weight, std=0.15)
        self.register_buffer("tri", torch.triu(torch.ones(F_, F_), 1).unsqueeze(-1))

    def forward(self, cats, dense):  # (n, 12) int64, (n, 4) float
        idx = cats + self.offsets
        v = self.v(idx)  # (n, 12, F*k)
        v = torch.cat([v, self.dense(dense).unsqueeze(1)], 1).reshape(-1, self.F, self.F, self.k)
        pair = (v * v.transpose(1, 2) * self.tri).sum((1, 2, 3))
        lin = self.w(idx).sum((1, 2)) + self.wd(dense)[:, 0]
        return torch.sigmoid(lin + pair).unsqueeze(-1)


def m_ffm():
    g = torch.Generator().manual_seed(42)
    cats = torch.stack([torch.randint(0, c, (1,), generator=g) for c in FFM_CARDS], 1)
    inp = {"categorical": cats, "dense": torch.randn(1, 4, generator=g)}
    return custom(FFM, inp, ["ctr"])


MMOE_CARDS = (2_000_000, 500_000, 80_000, 3_000, 120, 40, 7, 24)


class MMoEQR(nn.Module):
    """Multi-gate mixture of experts over quotient-remainder compositional embeddings: each
    large-vocabulary id is looked up as E_q[id // m] * E_r[id % m] (int64 Div and Mod
    in-graph, m about sqrt(cardinality)) so 2M-row vocabularies need ~1.4k-row tables; 4
    expert MLPs, one softmax gate per task over the experts, two task towers (a CTR sigmoid
    and a watch-time regression with Softplus)."""

    def __init__(self, cards=MMOE_CARDS, d=16, dense=6, experts=4, eh=96):
        super().__init__()
        self.m = [max(2, int(math.ceil(c**0.5))) for c in cards]
        self.q = nn.ModuleList(nn.Embedding((c + m - 1) // m, d) for c, m in zip(cards, self.m))
        self.r = nn.ModuleList(nn.Embedding(m, d) for m in self.m)
        for e in list(self.q) + list(self.r):
            nn.init.uniform_(e.weight, 0.3, 1.3)
        inp = len(cards) * d + dense
        self.experts = nn.ModuleList(
            nn.Sequential(nn.Linear(inp, eh), nn.ReLU(), nn.Linear(eh, 64), nn.ReLU())
            for _ in range(experts)
        )
        self.gates = nn.ModuleList(nn.Linear(inp, experts) for _ in range(2))
        self.towers = nn.ModuleList(
            nn.Sequential(nn.Linear(64, 32), nn.ReLU(), nn.Linear(32, 1)) for _ in range(2)
        )

    def forward(self, ids, dense):
        embs = [
            self.q[i](torch.div(ids[:, i], m, rounding_mode="floor")) * self.r[i](ids[:, i] % m)
            for i, m in enumerate(self.m)
        ]
        x = torch.cat(embs + [dense], -1)
        ex = torch.stack([e(x) for e in self.experts], 1)  # (n, E, 64)
        outs = []
        for gate, tower in zip(self.gates, self.towers):
            w = torch.softmax(gate(x), -1).unsqueeze(-1)
            outs.append(tower((ex * w).sum(1)))
        return torch.sigmoid(outs[0]), F.softplus(outs[1])


def m_mmoe_qr():
    g = torch.Generator().manual_seed(43)
    ids_ = torch.stack([torch.randint(0, c, (1,), generator=g) for c in MMOE_CARDS], 1)
    inp = {"ids": ids_, "dense": torch.randn(1, 6, generator=g)}
    return custom(MMoEQR, inp, ["ctr", "watch_time"])


class Caser(nn.Module):
    """Caser: the last 8 items' embeddings as an 8 x 64 image; horizontal convolutions of
    heights 1..8 (16 filters each, ReLU, max over time), a vertical convolution (8 x 1, 8
    filters), concatenated, a Linear, the user embedding appended, scored against all 3000
    items by a MatMul with an output item table + item bias."""

    def __init__(self, items=3000, users=1000, d=64, L=8, nh=16, nv=8):
        super().__init__()
        self.item, self.user = nn.Embedding(items, d), nn.Embedding(users, d)
        self.h = nn.ModuleList(nn.Conv2d(1, nh, (i, d)) for i in range(1, L + 1))
        self.v = nn.Conv2d(1, nv, (L, 1))
        self.fc = nn.Linear(nh * L + nv * d, d)
        self.out = nn.Embedding(items, 2 * d)
        self.bias = nn.Embedding(items, 1)
        nn.init.normal_(self.item.weight, std=0.5)
        nn.init.normal_(self.user.weight, std=0.5)
        nn.init.normal_(self.out.weight, std=0.2)

    def forward(self, user, seq):  # (n, 1), (n, 8)
        e = self.item(seq).unsqueeze(1)  # (n, 1, L, d)
        hs = [F.relu(c(e)).squeeze(3).amax(2) for c in self.h]
        v = self.v(e).flatten(1)
        z = F.relu(self.fc(torch.cat(hs + [v], 1)))
        x = torch.cat([z, self.user(user[:, 0])], 1)
        return x @ self.out.weight.t() + self.bias.weight.t()


def m_caser():
    g = torch.Generator().manual_seed(44)
    inp = {"user": torch.tensor([[17]]), "sequence": torch.randint(0, 3000, (1, 8), generator=g)}
    return custom(Caser, inp, ["scores"])


# ================================================================ window / hierarchical attention
def _win_part(x, ws):  # (n, H, W, C) -> (n * nW, ws * ws, C)
    n, H, W, C = x.shape
    x = x.reshape(n, H // ws, ws, W // ws, ws, C).permute(0, 1, 3, 2, 4, 5)
    return x.reshape(-1, ws * ws, C)


def _win_rev(x, ws, n, H, W):  # (n * nW, ws * ws, C) -> (n, H, W, C)
    C = x.shape[-1]
    x = x.reshape(n, H // ws, W // ws, ws, ws, C).permute(0, 1, 3, 2, 4, 5)
    return x.reshape(n, H, W, C)


def _rel_index(ws):
    c = torch.stack(torch.meshgrid(torch.arange(ws), torch.arange(ws), indexing="ij")).flatten(1)
    r = (c[:, :, None] - c[:, None, :]).permute(1, 2, 0) + (ws - 1)
    return r[..., 0] * (2 * ws - 1) + r[..., 1]  # (ws*ws, ws*ws)


class _MHSA(nn.Module):
    """Multi-head self-attention on (B, N, C) with an optional additive bias (B or 1, h, N, N)."""

    def __init__(self, d, heads):
        super().__init__()
        self.h = heads
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)

    def forward(self, x, bias=None):
        b, n, d = x.shape
        q, k, v = self.qkv(x).reshape(b, n, 3, self.h, d // self.h).permute(2, 0, 3, 1, 4)
        a = q @ k.transpose(-2, -1) * (d // self.h) ** -0.5
        if bias is not None:
            a = a + bias
        return self.proj((a.softmax(-1) @ v).transpose(1, 2).reshape(b, n, d))


class VOLO(nn.Module):
    """VOLO: a conv stem, outlooker blocks - outlook attention: values unfolded into 3x3
    neighbourhoods (Unfold, stride 2), attention weights generated directly by a Linear from the
    average-pooled centre token (no q.k), softmax over the 9 positions, weighted values folded
    back with overlap (Fold / Col2Im) - on a 14x14 map, then transformer blocks on 7x7 with
    position embeddings and a token-labelling style head (mean + 0.5 * max of per-token
    logits); 112x112."""

    class Outlook(nn.Module):
        def __init__(self, d, heads, k=3, s=2):
            super().__init__()
            self.h, self.k, self.s = heads, k, s
            self.v, self.proj = nn.Linear(d, d, bias=False), nn.Linear(d, d)
            self.attn = nn.Linear(d, k**4 * heads)
            self.scale = (d // heads) ** -0.5

        def forward(self, x):  # (n, H, W, C)
            n, H, W, C = x.shape
            k, s, h = self.k, self.s, self.h
            hh, ww = math.ceil(H / s), math.ceil(W / s)
            v = F.unfold(self.v(x).permute(0, 3, 1, 2), k, padding=k // 2, stride=s)
            v = v.reshape(n, h, C // h, k * k, hh * ww).permute(0, 1, 4, 3, 2)
            a = F.avg_pool2d(x.permute(0, 3, 1, 2), s, s, ceil_mode=True).permute(0, 2, 3, 1)
            a = self.attn(a).reshape(n, hh * ww, h, k * k, k * k).permute(0, 2, 1, 3, 4)
            a = (a * self.scale).softmax(-1)
            y = (a @ v).permute(0, 1, 4, 3, 2).reshape(n, C * k * k, hh * ww)
            y = F.fold(y, (H, W), k, padding=k // 2, stride=s)
            return self.proj(y.permute(0, 2, 3, 1))

    class Outlooker(nn.Module):
        def __init__(self, d, heads):
            super().__init__()
            self.n1, self.att = nn.LayerNorm(d), VOLO.Outlook(d, heads)
            self.n2, self.mlp = nn.LayerNorm(d), mlp(d, 3)

        def forward(self, x):
            x = x + self.att(self.n1(x))
            return x + self.mlp(self.n2(x))

    class Block(nn.Module):
        def __init__(self, d, heads):
            super().__init__()
            self.n1, self.att = nn.LayerNorm(d), _MHSA(d, heads)
            self.n2, self.mlp = nn.LayerNorm(d), mlp(d, 3)

        def forward(self, x):
            x = x + self.att(self.n1(x))
            return x + self.mlp(self.n2(x))

    def __init__(self, d1=128, d2=256, classes=100):
        super().__init__()
        self.stem = nn.Sequential(
            cba(3, 32, 7, 2), cba(32, 32, 3), cba(32, 32, 3), nn.Conv2d(32, d1, 4, 4)
        )
        self.outlookers = nn.Sequential(VOLO.Outlooker(d1, 4), VOLO.Outlooker(d1, 4))
        self.down = nn.Conv2d(d1, d2, 2, 2)
        self.pos = nn.Parameter(torch.randn(1, 49, d2) * 0.2)
        self.blocks = nn.Sequential(VOLO.Block(d2, 8), VOLO.Block(d2, 8))
        self.norm = nn.LayerNorm(d2)
        self.head, self.aux = nn.Linear(d2, classes), nn.Linear(d2, classes)

    def forward(self, x):
        x = self.outlookers(self.stem(x).permute(0, 2, 3, 1))
        x = self.down(x.permute(0, 3, 1, 2)).flatten(2).transpose(1, 2) + self.pos
        x = self.norm(self.blocks(x))
        return self.head(x.mean(1)) + 0.5 * self.aux(x).amax(1)


def m_volo():
    return custom(VOLO, image_inputs(112), ["logits"], init_gain=1.0)


class GCViT(nn.Module):
    """GC ViT: window attention (6x6 windows, relative position bias) alternating with global
    context attention, whose queries are not computed from the window but generated once per
    image by a global query generator (fused-MBConv: depthwise 3x3 - GELU - SE - 1x1, residual,
    3x3/2 MaxPool, repeated down to the window size) and broadcast to every window while keys
    and values stay local; fused-MBConv + strided conv + LayerNorm downsampling; 96x96."""

    class FeatExtract(nn.Module):
        def __init__(self, d, pool=True):
            super().__init__()
            self.conv = nn.Sequential(
                nn.Conv2d(d, d, 3, 1, 1, groups=d, bias=False),
                nn.GELU(),
                SE(d, d // 4, act=nn.GELU, gate=nn.Sigmoid),
                nn.Conv2d(d, d, 1, bias=False),
            )
            self.pool = nn.MaxPool2d(3, 2, 1) if pool else nn.Identity()

        def forward(self, x):
            return self.pool(x + self.conv(x))

    class Attn(nn.Module):
        def __init__(self, d, heads, ws, glob):
            super().__init__()
            self.h, self.ws, self.glob = heads, ws, glob
            self.qkv = nn.Linear(d, (2 if glob else 3) * d)
            self.proj = nn.Linear(d, d)
            self.table = nn.Parameter(torch.randn((2 * ws - 1) ** 2, heads) * 0.5)
            self.register_buffer("idx", _rel_index(ws), False)

        def forward(self, x, qg=None):  # x (n*nW, N, C); qg (n, N, C)
            b, N, C = x.shape
            h, hd = self.h, C // self.h
            if self.glob:
                k, v = self.qkv(x).reshape(b, N, 2, h, hd).permute(2, 0, 3, 1, 4)
                n = qg.shape[0]
                q = qg.reshape(n, 1, N, h, hd).permute(0, 1, 3, 2, 4).expand(n, b // n, h, N, hd)
                q = q.reshape(b, h, N, hd)
            else:
                q, k, v = self.qkv(x).reshape(b, N, 3, h, hd).permute(2, 0, 3, 1, 4)
            a = q @ k.transpose(-2, -1) * hd**-0.5 + self.table[self.idx].permute(2, 0, 1)[None]
            return self.proj((a.softmax(-1) @ v).transpose(1, 2).reshape(b, N, C))

    class Block(nn.Module):
        def __init__(self, d, heads, ws, glob):
            super().__init__()
            self.ws = ws
            self.n1, self.att = nn.LayerNorm(d), GCViT.Attn(d, heads, ws, glob)
            self.n2, self.mlp = nn.LayerNorm(d), mlp(d, 3)
            self.g1, self.g2 = (
                nn.Parameter(torch.full((d,), 0.5)),
                nn.Parameter(torch.full((d,), 0.5)),
            )

        def forward(self, x, qg):  # x (n, H, W, C)
            n, H, W, C = x.shape
            y = self.att(_win_part(self.n1(x), self.ws), qg)
            x = x + self.g1 * _win_rev(y, self.ws, n, H, W)
            return x + self.g2 * self.mlp(self.n2(x))

    class Down(nn.Module):
        def __init__(self, cin, cout):
            super().__init__()
            self.fe = GCViT.FeatExtract(cin, pool=False)
            self.conv = nn.Conv2d(cin, cout, 3, 2, 1, bias=False)
            self.norm = nn.LayerNorm(cout)

        def forward(self, x):  # (n, H, W, C) -> (n, H/2, W/2, 2C)
            y = self.conv(self.fe(x.permute(0, 3, 1, 2)))
            return self.norm(y.permute(0, 2, 3, 1))

    class Stage(nn.Module):
        def __init__(self, d, heads, ws, pools, depth=2):
            super().__init__()
            gens = [GCViT.FeatExtract(d) for _ in range(pools)] or [
                GCViT.FeatExtract(d, pool=False)
            ]
            self.qgen = nn.Sequential(*gens)
            self.blocks = nn.ModuleList(GCViT.Block(d, heads, ws, i % 2 == 1) for i in range(depth))

        def forward(self, x):
            qg = self.qgen(x.permute(0, 3, 1, 2)).flatten(2).transpose(1, 2)  # (n, ws*ws, C)
            for b in self.blocks:
                x = b(x, qg)
            return x

    def __init__(self, dims=(64, 128, 256), heads=(2, 4, 8), ws=6, classes=100):
        super().__init__()
        self.stem = nn.Sequential(
            nn.Conv2d(3, dims[0], 3, 2, 1), GCViT.FeatExtract(dims[0], pool=False)
        )
        self.reduce = nn.Sequential(nn.Conv2d(dims[0], dims[0], 3, 2, 1, bias=False))
        self.n0 = nn.LayerNorm(dims[0])
        self.stages = nn.ModuleList(
            GCViT.Stage(d, h, ws, p) for d, h, p in zip(dims, heads, (2, 1, 0))
        )
        self.downs = nn.ModuleList(GCViT.Down(dims[i], dims[i + 1]) for i in range(len(dims) - 1))
        self.norm, self.fc = nn.LayerNorm(dims[-1]), nn.Linear(dims[-1], classes)

    def forward(self, x):
        x = self.n0(self.reduce(self.stem(x)).permute(0, 2, 3, 1))  # (n, 24, 24, C)
        for i, st in enumerate(self.stages):
            x = st(x)
            if i < len(self.downs):
                x = self.downs[i](x)
        return self.fc(self.norm(x).mean((1, 2)))


def m_gcvit():
    return custom(GCViT, image_inputs(96), ["logits"], init_gain=1.0)


class FocalTransformer(nn.Module):
    """Focal Transformer: focal self-attention - each 6x6 query window attends to (1) its own
    tokens with a relative position bias, (2) the surrounding ring taken from four diagonal
    torch.roll shifts of the key/value map (window-partitioned, Concat, a constant index
    Gather), and (3) coarse tokens of the whole map pooled 2x2 by a learned Linear over the
    pooled pixels + LayerNorm, with their own learned bias; conv patch merging; 96x96."""

    class Attn(nn.Module):
        def __init__(self, d, heads, ws, res):
            super().__init__()
            self.h, self.ws, self.res = heads, ws, res
            self.e = ws // 2 if res > ws else 0
            self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
            self.pool = nn.Linear(4, 1)
            self.pnorm = nn.LayerNorm(d)
            self.kv_c = nn.Linear(d, 2 * d)
            self.table = nn.Parameter(torch.randn((2 * ws - 1) ** 2, heads) * 0.5)
            self.register_buffer("idx", _rel_index(ws), False)
            lc = (res // 2) ** 2
            self.cbias = nn.Parameter(torch.randn(heads, ws * ws, lc) * 0.5)
            if self.e:
                e = self.e
                masks = []
                for sy, sx in ((1, 1), (1, -1), (-1, 1), (-1, -1)):
                    m = torch.ones(ws, ws)
                    ys = slice(None, -e) if sy > 0 else slice(e, None)
                    xs = slice(None, -e) if sx > 0 else slice(e, None)
                    m[ys, xs] = 0
                    masks.append(m.flatten())
                self.register_buffer("ring", torch.cat(masks).nonzero()[:, 0], False)
                self.rolls = [(-e, -e), (-e, e), (e, -e), (e, e)]

        def forward(self, x):  # (n, H, W, C)
            n, H, W, C = x.shape
            ws, h, hd = self.ws, self.h, C // self.h
            q, k, v = self.qkv(x).chunk(3, -1)
            qw = _win_part(q, ws)
            b, N = qw.shape[:2]
            nw = b // n
            ks, vs = [_win_part(k, ws)], [_win_part(v, ws)]
            if self.e:
                kr = torch.cat([_win_part(torch.roll(k, r, (1, 2)), ws) for r in self.rolls], 1)
                vr = torch.cat([_win_part(torch.roll(v, r, (1, 2)), ws) for r in self.rolls], 1)
                ks.append(kr[:, self.ring])
                vs.append(vr[:, self.ring])
            pooled = (
                x.reshape(n, H // 2, 2, W // 2, 2, C).permute(0, 1, 3, 5, 2, 4).reshape(n, -1, C, 4)
            )
            kc, vc = self.kv_c(self.pnorm(self.pool(pooled)[..., 0])).chunk(2, -1)  # (n, Lc, C)
            lc = kc.shape[1]
            ks.append(kc.unsqueeze(1).expand(n, nw, lc, C).reshape(b, lc, C))
            vs.append(vc.unsqueeze(1).expand(n, nw, lc, C).reshape(b, lc, C))
            kk, vv = torch.cat(ks, 1), torch.cat(vs, 1)

            def heads(t):
                return t.reshape(b, -1, h, hd).transpose(1, 2)

            a = heads(qw) @ heads(kk).transpose(-2, -1) * hd**-0.5  # (b, h, N, Ltot)
            own = self.table[self.idx].permute(2, 0, 1)
            ring = a.shape[-1] - N - lc
            bias = torch.cat([own, own.new_zeros(h, N, ring), self.cbias], -1)
            y = ((a + bias).softmax(-1) @ heads(vv)).transpose(1, 2).reshape(b, N, C)
            return _win_rev(self.proj(y), ws, n, H, W)

    class Block(nn.Module):
        def __init__(self, d, heads, ws, res):
            super().__init__()
            self.n1, self.att = nn.LayerNorm(d), FocalTransformer.Attn(d, heads, ws, res)
            self.n2, self.mlp = nn.LayerNorm(d), mlp(d, 4)

        def forward(self, x):
            x = x + self.att(self.n1(x))
            return x + self.mlp(self.n2(x))

    def __init__(self, dims=(48, 96, 192), heads=(2, 4, 8), res=24, ws=6, classes=100):
        super().__init__()
        self.embed = nn.Conv2d(3, dims[0], 4, 4)
        self.stages = nn.ModuleList(
            nn.Sequential(*[FocalTransformer.Block(d, h, ws, res >> i) for _ in range(2)])
            for i, (d, h) in enumerate(zip(dims, heads))
        )
        self.merges = nn.ModuleList(
            nn.Conv2d(dims[i], dims[i + 1], 2, 2) for i in range(len(dims) - 1)
        )
        self.norm, self.fc = nn.LayerNorm(dims[-1]), nn.Linear(dims[-1], classes)

    def forward(self, x):
        x = self.embed(x).permute(0, 2, 3, 1)
        for i, st in enumerate(self.stages):
            x = st(x)
            if i < len(self.merges):
                x = self.merges[i](x.permute(0, 3, 1, 2)).permute(0, 2, 3, 1)
        return self.fc(self.norm(x).mean((1, 2)))


def m_focal_transformer():
    return custom(FocalTransformer, image_inputs(96), ["logits"], init_gain=1.0)


class AxialDeepLab(nn.Module):
    """Axial-DeepLab-style axial ResNet: bottlenecks whose 3x3 conv is replaced by
    position-sensitive axial attention along the height then the width (span = the whole
    axis: 16 and 12 on a 64x48 image), with relative embeddings for queries, keys and values
    (an index_select of a learned table), BatchNorm1d on q/k/v, BatchNorm2d on the stacked
    similarity maps (qk, qr, kr summed), BatchNorm1d on the output (sv + sve), average-pool
    stride 2 in the second stage."""

    class Axial(nn.Module):
        def __init__(self, cin, cout, groups, span, width, stride=1):
            super().__init__()
            self.g, self.cout, self.span, self.width, self.stride = (
                groups,
                cout,
                span,
                width,
                stride,
            )
            self.gp = cout // groups
            self.qkv = nn.Conv1d(cin, 2 * cout, 1, bias=False)
            self.bn_qkv = nn.BatchNorm1d(2 * cout)
            self.bn_sim = nn.BatchNorm2d(3 * groups)
            self.bn_out = nn.BatchNorm1d(2 * cout)
            self.rel = nn.Parameter(torch.randn(2 * self.gp, 2 * span - 1) * self.gp**-0.5)
            q = torch.arange(span)
            self.register_buffer("flat", (q[None, :] - q[:, None] + span - 1).flatten(), False)

        def forward(self, x):  # (n, C, H, W)
            x = x.permute(0, 2, 1, 3) if self.width else x.permute(0, 3, 1, 2)  # (n, W|H, C, L)
            n, o, c, L = x.shape
            x = x.reshape(n * o, c, L)
            qkv = self.bn_qkv(self.qkv(x)).reshape(n * o, self.g, 2 * self.gp, L)
            q, k, v = torch.split(qkv, [self.gp // 2, self.gp // 2, self.gp], 2)
            emb = torch.index_select(self.rel, 1, self.flat).reshape(2 * self.gp, L, L)
            qe, ke, ve = torch.split(emb, [self.gp // 2, self.gp // 2, self.gp], 0)
            qr = torch.einsum("bgci,cij->bgij", q, qe)
            kr = torch.einsum("bgci,cij->bgij", k, ke).transpose(2, 3)
            qk = torch.einsum("bgci,bgcj->bgij", q, k)
            sim = self.bn_sim(torch.cat([qk, qr, kr], 1)).reshape(n * o, 3, self.g, L, L).sum(1)
            sim = sim.softmax(3)
            sv = torch.einsum("bgij,bgcj->bgci", sim, v)
            sve = torch.einsum("bgij,cij->bgci", sim, ve)
            out = torch.cat([sv, sve], -1).reshape(n * o, 2 * self.cout, L)
            out = self.bn_out(out).reshape(n, o, self.cout, 2, L).sum(-2)
            out = out.permute(0, 2, 1, 3) if self.width else out.permute(0, 2, 3, 1)
            return F.avg_pool2d(out, self.stride, self.stride) if self.stride > 1 else out

    class Block(nn.Module):
        def __init__(self, cin, cout, hw, stride=1, groups=8):
            super().__init__()
            w = cout // 2
            A = AxialDeepLab.Axial
            self.down = cba(cin, w)
            self.ha = A(w, w, groups, hw[0], False)
            self.wa = A(w, w, groups, hw[1], True, stride)
            self.up = cba(w, cout, act=None)
            self.sc = None if stride == 1 and cin == cout else cba(cin, cout, 1, stride, act=None)

        def forward(self, x):
            y = self.up(F.relu(self.wa(self.ha(self.down(x)))))
            return F.relu(y + (x if self.sc is None else self.sc(x)))

    def __init__(self, classes=100):
        super().__init__()
        B = AxialDeepLab.Block
        self.stem = nn.Sequential(cba(3, 32, 7, 2), nn.MaxPool2d(3, 2, 1))  # 64x48 -> 16x12
        self.blocks = nn.Sequential(
            B(32, 64, (16, 12)),
            B(64, 64, (16, 12)),
            B(64, 128, (16, 12), stride=2),
            B(128, 128, (8, 6)),
        )
        self.fc = nn.Linear(128, classes)

    def forward(self, x):
        return self.fc(self.blocks(self.stem(x)).mean((2, 3)))


def m_axial_deeplab():
    return custom(AxialDeepLab, image_inputs(64, 48), ["logits"], init_gain=1.0)


class RegionViT(nn.Module):
    """RegionViT: regional tokens (a 24x24-stride conv: one per 6x6 window of local tokens) and
    local tokens (4x4 patches); each block runs regional-to-regional self-attention over all
    regional tokens, then regional-to-local attention inside each window over [its regional
    token, its 36 local tokens] (Concat, relative position bias on the local part, split
    back), shared MLPs; both token sets downsampled by strided 3x3 convs between stages;
    96x96."""

    class Block(nn.Module):
        def __init__(self, d, heads, ws):
            super().__init__()
            self.ws, self.h = ws, heads
            self.nr, self.r2r = nn.LayerNorm(d), _MHSA(d, heads)
            self.nl, self.r2l = nn.LayerNorm(d), _MHSA(d, heads)
            self.n2, self.mlp = nn.LayerNorm(d), mlp(d, 4)
            self.table = nn.Parameter(torch.randn((2 * ws - 1) ** 2, heads) * 0.5)
            self.register_buffer("idx", _rel_index(ws), False)

        def forward(self, loc, reg):  # loc (n, H, W, C), reg (n, h, w, C)
            n, H, W, C = loc.shape
            r = reg.reshape(n, -1, C)
            r = r + self.r2r(self.nr(r))
            lw = _win_part(loc, self.ws)  # (n*nW, N, C)
            t = torch.cat([r.reshape(-1, 1, C), lw], 1)
            bias = self.table[self.idx].permute(2, 0, 1)  # (h, N, N)
            bias = F.pad(bias, (1, 0, 1, 0))[None]  # the regional token: no bias
            t = t + self.r2l(self.nl(t), bias)
            t = t + self.mlp(self.n2(t))
            reg = t[:, 0].reshape(reg.shape)
            loc = _win_rev(t[:, 1:], self.ws, n, H, W)
            return loc, reg

    def __init__(self, dims=(64, 128, 256), heads=(2, 4, 8), ws=6, classes=100):
        super().__init__()
        self.local = nn.Sequential(nn.Conv2d(3, dims[0], 4, 4), LayerNormC(dims[0]))
        self.regional = nn.Sequential(nn.Conv2d(3, dims[0], 4 * ws, 4 * ws), LayerNormC(dims[0]))
        self.stages = nn.ModuleList(
            nn.ModuleList(RegionViT.Block(d, h, ws) for _ in range(2)) for d, h in zip(dims, heads)
        )
        self.dl = nn.ModuleList(
            nn.Conv2d(dims[i], dims[i + 1], 3, 2, 1) for i in range(len(dims) - 1)
        )
        self.dr = nn.ModuleList(
            nn.Conv2d(dims[i], dims[i + 1], 3, 2, 1) for i in range(len(dims) - 1)
        )
        self.norm, self.fc = nn.LayerNorm(dims[-1]), nn.Linear(dims[-1], classes)

    def forward(self, x):
        loc = self.local(x).permute(0, 2, 3, 1)
        reg = self.regional(x).permute(0, 2, 3, 1)
        for i, blocks in enumerate(self.stages):
            for b in blocks:
                loc, reg = b(loc, reg)
            if i < len(self.dl):
                loc = self.dl[i](loc.permute(0, 3, 1, 2)).permute(0, 2, 3, 1)
                reg = self.dr[i](reg.permute(0, 3, 1, 2)).permute(0, 2, 3, 1)
        return self.fc(self.norm(reg).mean((1, 2)))


class LayerNormC(nn.LayerNorm):
    """LayerNorm over the channels of an (N, C, H, W) map."""

    def forward(self, x):
        return super().forward(x.permute(0, 2, 3, 1)).permute(0, 3, 1, 2)


def m_regionvit():
    return custom(RegionViT, image_inputs(96), ["logits"], init_gain=1.0)


# ================================================================ small ViTs
def m_eomt():
    """EoMT (encoder-only mask transformer): a DINOv2-style ViT (4 register tokens, LayerScale)
    whose last 2 blocks also carry 12 learned query tokens; before each of them the queries
    predict masks (MLP query embedding x ConvTranspose2d-upscaled patch features, Einsum) that,
    resized bilinearly to the patch grid and thresholded, mask the query-to-patch attention;
    class and mask logits out; 64x64 image in 8x8 patches."""
    import transformers.models.eomt.modeling_eomt as E
    from transformers import EomtConfig

    class _NoLoss:  # the training loss (Hungarian matching) needs scipy; inference does not
        def __new__(cls, *a, **k):
            return nn.Identity()

    E.EomtLoss = _NoLoss

    cfg = EomtConfig(
        hidden_size=96,
        num_hidden_layers=5,
        num_attention_heads=4,
        image_size=64,
        patch_size=8,
        num_upscale_blocks=2,
        num_blocks=2,
        num_queries=12,
        num_register_tokens=4,
        layerscale_value=0.5,
        num_labels=10,
    )
    wrap, inp, outs = hf(
        "EomtForUniversalSegmentation",
        cfg,
        image_inputs(64),
        ["masks_queries_logits", "class_queries_logits"],
    )
    randomize_norms(wrap)
    _randn_params(wrap, ("register_tokens", "query.weight"), seed=23, std=0.5)
    return wrap, inp, outs


def m_vjepa2():
    """V-JEPA 2 video classifier: Conv3d tubelet embedding (2 x 8 x 8) of 4 frames at 48x48,
    a ViT with 3-D rotary embeddings (the head dim split into depth / height / width parts,
    each rotated by its own token coordinate derived in-graph from the token index), then an
    attentive pooler (a learned query cross-attending to the tokens, self-attention layers)
    and a linear classifier."""
    from transformers import VJEPA2Config

    cfg = VJEPA2Config(
        patch_size=8,
        crop_size=48,
        frames_per_clip=4,
        tubelet_size=2,
        hidden_size=96,
        num_attention_heads=4,
        num_hidden_layers=3,
        mlp_ratio=2.0,
        num_pooler_layers=1,
        pred_hidden_size=64,
        pred_num_attention_heads=4,
        pred_num_hidden_layers=1,
        num_labels=10,
    )
    g = torch.Generator().manual_seed(31)
    inp = {"pixel_values_videos": torch.randn(1, 4, 3, 48, 48, generator=g)}
    wrap, inp, outs = hf("VJEPA2ForVideoClassification", cfg, inp, ["logits"])
    randomize_norms(fan_in_init(wrap))
    return wrap, inp, outs


class XCiT(nn.Module):
    """XCiT: a convolutional patch stem (three 3x3 stride-2 conv + BN, GELU), Fourier-feature
    positional encoding computed in-graph (normalised cumsum coordinates, sin/cos of 2-D
    frequencies, 1x1 conv), cross-covariance attention (q and k L2-normalised over the
    tokens, a d x d attention per head with a learned temperature), local patch interaction
    (depthwise 3x3 conv, GELU, BN, depthwise 3x3 conv on the token grid), LayerScale, then a
    class-attention layer; 96x96 image."""

    class XCA(nn.Module):
        def __init__(self, d, heads):
            super().__init__()
            self.h = heads
            self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
            self.temp = nn.Parameter(torch.linspace(0.5, 2.0, heads).reshape(heads, 1, 1))

        def forward(self, x):
            n, t, d = x.shape
            q, k, v = self.qkv(x).reshape(n, t, 3, self.h, d // self.h).permute(2, 0, 3, 4, 1)
            q, k = F.normalize(q, dim=-1), F.normalize(k, dim=-1)  # (n, h, dh, t)
            a = (q @ k.transpose(-2, -1) * self.temp).softmax(-1)  # (n, h, dh, dh)
            return self.proj((a @ v).permute(0, 3, 1, 2).reshape(n, t, d))

    class LPI(nn.Module):
        def __init__(self, d):
            super().__init__()
            self.c1 = nn.Conv2d(d, d, 3, 1, 1, groups=d)
            self.bn = nn.BatchNorm2d(d)
            self.c2 = nn.Conv2d(d, d, 3, 1, 1, groups=d)

        def forward(self, x, hw):
            n, t, d = x.shape
            y = x.transpose(1, 2).reshape(n, d, *hw)
            return self.c2(self.bn(F.gelu(self.c1(y)))).reshape(n, d, t).transpose(1, 2)

    class Block(nn.Module):
        def __init__(self, d, heads):
            super().__init__()
            self.n1, self.att = nn.LayerNorm(d), XCiT.XCA(d, heads)
            self.n2, self.lpi = nn.LayerNorm(d), XCiT.LPI(d)
            self.n3, self.mlp = nn.LayerNorm(d), mlp(d, 4)
            self.g1, self.g2, self.g3 = (nn.Parameter(torch.full((d,), 0.5)) for _ in range(3))

        def forward(self, x, hw):
            x = x + self.g1 * self.att(self.n1(x))
            x = x + self.g2 * self.lpi(self.n2(x), hw)
            return x + self.g3 * self.mlp(self.n3(x))

    class ClassAttn(nn.Module):
        def __init__(self, d, heads):
            super().__init__()
            self.n1, self.att = nn.LayerNorm(d), Attention(d, heads)
            self.n2, self.mlp = nn.LayerNorm(d), mlp(d, 4)

        def forward(self, x):
            y = self.n1(x)
            c = x[:, :1] + self.att(y[:, :1], y)
            c = c + self.mlp(self.n2(c))
            return torch.cat([c, x[:, 1:]], 1)

    def __init__(self, d=128, depth=4, heads=4, classes=100):
        super().__init__()
        self.stem = nn.Sequential(
            cba(3, d // 4, 3, 2, act=nn.GELU),
            cba(d // 4, d // 2, 3, 2, act=nn.GELU),
            cba(d // 2, d, 3, 2, act=None),
        )
        self.pos = nn.Conv2d(32, d, 1)
        self.blocks = nn.ModuleList(XCiT.Block(d, heads) for _ in range(depth))
        self.cls = nn.Parameter(torch.randn(1, 1, d) * 0.5)
        self.ca = XCiT.ClassAttn(d, heads)
        self.norm, self.fc = nn.LayerNorm(d), nn.Linear(d, classes)

    def fourier(self, n, h, w, dev):
        ones = torch.ones(n, h, w, device=dev)
        y = ones.cumsum(1) / (h + 1e-6) * 2 * math.pi
        x = ones.cumsum(2) / (w + 1e-6) * 2 * math.pi
        t = 10000 ** (2 * (torch.arange(16, device=dev) // 2) / 32)
        py, px = y[..., None] / t, x[..., None] / t
        py = torch.stack([py[..., 0::2].sin(), py[..., 1::2].cos()], 4).flatten(3)
        px = torch.stack([px[..., 0::2].sin(), px[..., 1::2].cos()], 4).flatten(3)
        return self.pos(torch.cat([py, px], 3).permute(0, 3, 1, 2))

    def forward(self, x):
        x = self.stem(x)
        n, d, h, w = x.shape
        x = (x + self.fourier(n, h, w, x.device)).flatten(2).transpose(1, 2)
        for b in self.blocks:
            x = b(x, (h, w))
        x = self.ca(torch.cat([self.cls.expand(n, -1, -1), x], 1))
        return self.fc(self.norm(x[:, 0]))


def m_xcit():
    return custom(XCiT, image_inputs(96), ["logits"], init_gain=1.0)


class PiT(nn.Module):
    """PiT (pooling-based ViT): a strided conv patch embedding, three transformer stages on a
    shrinking token grid; between stages the spatial tokens are pooled by a stride-2 depthwise
    conv with channel multiplier 2 (groups = C, 2C outputs) and the class token by a Linear;
    learned position embeddings, pre-LN blocks, 112x112 image."""

    class Block(nn.Module):
        def __init__(self, d, heads):
            super().__init__()
            self.n1, self.att = nn.LayerNorm(d), Attention(d, heads)
            self.n2, self.mlp = nn.LayerNorm(d), mlp(d, 4)

        def forward(self, x):
            x = x + self.att(self.n1(x))
            return x + self.mlp(self.n2(x))

    def __init__(self, dims=(64, 128, 256), depths=(2, 2, 2), heads=(2, 4, 8), classes=100):
        super().__init__()
        self.embed = nn.Conv2d(3, dims[0], 8, 4)  # 112 -> 27
        self.pos = nn.Parameter(torch.randn(1, dims[0], 27, 27) * 0.2)
        self.cls = nn.Parameter(torch.randn(1, 1, dims[0]) * 0.5)
        self.stages = nn.ModuleList(
            nn.ModuleList(PiT.Block(d, h) for _ in range(n)) for d, n, h in zip(dims, depths, heads)
        )
        self.pool = nn.ModuleList(
            nn.Conv2d(dims[i], dims[i + 1], 3, 2, 1, groups=dims[i]) for i in range(len(dims) - 1)
        )
        self.pool_cls = nn.ModuleList(nn.Linear(dims[i], dims[i + 1]) for i in range(len(dims) - 1))
        self.norm, self.fc = nn.LayerNorm(dims[-1]), nn.Linear(dims[-1], classes)

    def forward(self, x):
        x = self.embed(x) + self.pos
        n = x.shape[0]
        cls = self.cls.expand(n, -1, -1)
        for i, blocks in enumerate(self.stages):
            _, c, h, w = x.shape
            t = torch.cat([cls, x.flatten(2).transpose(1, 2)], 1)
            for b in blocks:
                t = b(t)
            cls, x = t[:, :1], t[:, 1:].transpose(1, 2).reshape(n, c, h, w)
            if i < len(self.pool):
                x, cls = self.pool[i](x), self.pool_cls[i](cls)
        return self.fc(self.norm(cls[:, 0]))


def m_pit():
    return custom(PiT, image_inputs(112), ["logits"], init_gain=1.0)


# ================================================================ 1-D conv audio
class SincNet(nn.Module):
    """SincNet speaker classifier: the first Conv1d's 40 kernels (length 101) are computed
    in-graph every call from learned low / band cut-off frequencies - band-pass = difference
    of two sinc low-passes (Sin over a time grid, divided by it, Hamming window, a Flip for
    the symmetric half, Concat with the centre tap, normalised) - so the conv weight is an
    activation, not an initializer; Abs, MaxPool1d, LayerNorm over (C, T), LeakyReLU, two
    plain Conv1d layers, an MLP with BatchNorm1d; 3200 samples (200 ms at 16 kHz)."""

    def __init__(self, n=40, k=101, sr=16000, classes=50):
        super().__init__()
        self.sr, self.min_low, self.min_band = sr, 50.0, 50.0

        def mel(f):
            return 2595 * torch.log10(1 + f / 700)

        def imel(m):
            return 700 * (10 ** (m / 2595) - 1)

        hz = imel(
            torch.linspace(
                float(mel(torch.tensor(30.0))), float(mel(torch.tensor(sr / 2 - 100.0))), n + 1
            )
        )
        self.low = nn.Parameter(hz[:-1].unsqueeze(1))
        self.band = nn.Parameter(torch.diff(hz).unsqueeze(1))
        half = torch.linspace(0, k / 2 - 1, k // 2)
        self.register_buffer("window", 0.54 - 0.46 * torch.cos(2 * math.pi * half / k), False)
        self.register_buffer(
            "t", 2 * math.pi * torch.arange(-(k - 1) / 2, 0).reshape(1, -1) / sr, False
        )
        self.n, self.k = n, k
        self.ln0 = nn.LayerNorm([1, 3200])
        self.ln1 = nn.LayerNorm([n, 1033])
        self.c2, self.ln2 = nn.Conv1d(n, 60, 5), nn.LayerNorm([60, 343])
        self.c3, self.ln3 = nn.Conv1d(60, 60, 5), nn.LayerNorm([60, 113])
        self.mlp = nn.Sequential(
            nn.Linear(60 * 113, 256),
            nn.BatchNorm1d(256),
            nn.LeakyReLU(0.2),
            nn.Linear(256, classes),
        )

    def filters(self):
        low = self.min_low + self.low.abs()
        high = torch.clamp(low + self.min_band + self.band.abs(), self.min_low, self.sr / 2)
        bw = (high - low)[:, 0]
        left = (torch.sin(high @ self.t) - torch.sin(low @ self.t)) / (self.t / 2) * self.window
        bp = torch.cat([left, 2 * bw.unsqueeze(1), torch.flip(left, [1])], 1) / (2 * bw[:, None])
        return bp.reshape(self.n, 1, self.k)

    def forward(self, wav):  # (n, 1, 3200)
        x = self.ln0(wav)
        x = F.leaky_relu(self.ln1(F.max_pool1d(F.conv1d(x, self.filters()).abs(), 3)), 0.2)
        x = F.leaky_relu(self.ln2(F.max_pool1d(self.c2(x), 3)), 0.2)
        x = F.leaky_relu(self.ln3(F.max_pool1d(self.c3(x), 3)), 0.2)
        return self.mlp(x.flatten(1))


def m_sincnet():
    g = torch.Generator().manual_seed(51)
    t = torch.arange(3200) / 16000
    wav = 0.3 * torch.sin(2 * math.pi * 220 * t) + 0.1 * torch.randn(3200, generator=g)
    return custom(SincNet, {"waveform": wav.reshape(1, 1, 3200)}, ["logits"])


def _pqmf(subbands=4, taps=62, cutoff=0.142, beta=9.0):
    """Pseudo-QMF analysis / synthesis filters (Kaiser-windowed cosine-modulated prototype)."""
    n = torch.arange(taps + 1, dtype=torch.float64) - taps / 2
    proto = torch.where(
        n == 0,
        torch.tensor(cutoff, dtype=torch.float64),
        torch.sin(math.pi * cutoff * n) / (math.pi * n),
    )
    proto = proto * torch.kaiser_window(taps + 1, periodic=False, beta=beta, dtype=torch.float64)
    k = torch.arange(subbands, dtype=torch.float64)[:, None]
    phase = (-1) ** k * math.pi / 4
    arg = (2 * k + 1) * math.pi / (2 * subbands) * n[None]
    synth = 2 * proto * torch.cos(arg + phase)
    return synth.float()


class MBMelGAN(nn.Module):
    """Multi-band MelGAN generator: ReflectionPad1d + weight-normed Conv1d (k7; the exporter
    folds the weight norm) on an 80-bin mel spectrogram, two ConvTranspose1d upsamplers (x8,
    x8, LeakyReLU) each followed by a residual stack of dilated (1, 3, 9) reflection-padded
    convs, a 4-channel Tanh sub-band output, and PQMF synthesis in-graph: a ConvTranspose1d
    zero-stuffing upsampler (x4, constant kernel) then a Conv1d with the 4 fixed
    cosine-modulated filters (k63) summed into one waveform: 32 frames -> 8192 samples."""

    class ResStack(nn.Module):
        def __init__(self, c):
            super().__init__()
            wn = nn.utils.parametrizations.weight_norm
            self.blocks = nn.ModuleList(
                nn.Sequential(
                    nn.LeakyReLU(0.2),
                    nn.ReflectionPad1d(d),
                    wn(nn.Conv1d(c, c, 3, dilation=d)),
                    nn.LeakyReLU(0.2),
                    wn(nn.Conv1d(c, c, 1)),
                )
                for d in (1, 3, 9)
            )
            self.sc = nn.ModuleList(wn(nn.Conv1d(c, c, 1)) for _ in range(3))

        def forward(self, x):
            for b, s in zip(self.blocks, self.sc):
                x = s(x) + b(x)
            return x

    def __init__(self, mels=80, ch=192, sub=4):
        super().__init__()
        wn = nn.utils.parametrizations.weight_norm
        self.pre = nn.Sequential(nn.ReflectionPad1d(3), wn(nn.Conv1d(mels, ch, 7)))
        ups = []
        for i, r in enumerate((8, 8)):
            c_in, c_out = ch >> i, ch >> (i + 1)
            ups += [
                nn.LeakyReLU(0.2),
                wn(nn.ConvTranspose1d(c_in, c_out, 2 * r, r, r // 2 + r % 2, output_padding=r % 2)),
                MBMelGAN.ResStack(c_out),
            ]
        self.ups = nn.Sequential(*ups)
        self.post = nn.Sequential(
            nn.LeakyReLU(0.2), nn.ReflectionPad1d(3), wn(nn.Conv1d(ch >> 2, sub, 7)), nn.Tanh()
        )
        self.sub = sub
        updown = torch.zeros(sub, sub, sub)  # zero-stuffing: band k -> every sub-th sample
        for k in range(sub):
            updown[k, k, 0] = 1.0
        self.register_buffer("updown", updown * sub, False)
        self.register_buffer("synth", _pqmf(sub).unsqueeze(0), False)  # (1, sub, 63)

    def forward(self, mel):  # (n, 80, T)
        y = self.post(self.ups(self.pre(mel)))  # (n, 4, 64 T)
        up = F.conv_transpose1d(y, self.updown, stride=self.sub)
        wav = F.conv1d(F.pad(up, (31, 31)), self.synth)
        return wav, y


def m_mb_melgan():
    return custom(
        MBMelGAN, feats((1, 80, 32), seed=52, name="mel"), ["waveform", "subbands"], init_gain=1.0
    )


class TDNNF(nn.Module):
    """Kaldi-style factorised TDNN (TDNN-F): each layer is a linear bottleneck Conv1d (k2 with
    a time stride/dilation, no activation: the semi-orthogonal factor), an affine Conv1d (k2),
    ReLU, BatchNorm1d, and a bypass connection scaled by 0.66; frame subsampling by 3 (a
    strided layer and Slice on the bypass), a prefinal bottleneck and a 500-way log-softmax
    chain output beside a cross-entropy branch; 40-dim MFCC x 150 frames."""

    class Layer(nn.Module):
        def __init__(self, d, bottleneck, dil, stride=1):
            super().__init__()
            self.lin = nn.Conv1d(d, bottleneck, 2, stride=stride, dilation=dil, bias=False)
            self.aff = nn.Conv1d(bottleneck, d, 2, dilation=dil)
            self.bn = nn.BatchNorm1d(d, affine=False)
            self.dil, self.stride = dil, stride

        def forward(self, x):
            y = self.bn(F.relu(self.aff(F.pad(self.lin(F.pad(x, (self.dil, 0))), (0, self.dil)))))
            skip = x[:, :, :: self.stride] if self.stride > 1 else x
            return 0.66 * skip[:, :, : y.shape[2]] + y

    def __init__(self, feat=40, d=256, bn=64, pdfs=500):
        super().__init__()
        self.inp = nn.Sequential(
            nn.Conv1d(feat, d, 5, padding=2), nn.ReLU(), nn.BatchNorm1d(d, affine=False)
        )
        L = TDNNF.Layer
        self.layers = nn.Sequential(
            L(d, bn, 1),
            L(d, bn, 1),
            L(d, bn, 1, stride=3),
            L(d, bn, 3),
            L(d, bn, 3),
            L(d, bn, 3),
            L(d, bn, 3),
        )
        self.chain = nn.Sequential(
            nn.Conv1d(d, 128, 1), nn.ReLU(), nn.BatchNorm1d(128), nn.Conv1d(128, pdfs, 1)
        )
        self.xent = nn.Sequential(
            nn.Conv1d(d, 128, 1), nn.ReLU(), nn.BatchNorm1d(128), nn.Conv1d(128, pdfs, 1)
        )

    def forward(self, x):  # (n, 40, T)
        h = self.layers(self.inp(x))
        return self.chain(h).transpose(1, 2), F.log_softmax(self.xent(h), 1).transpose(1, 2)


def m_tdnnf():
    return custom(
        TDNNF, feats((1, 40, 150), seed=53, name="mfcc"), ["chain", "xent_logprobs"], init_gain=1.0
    )


class SoundStream(nn.Module):
    """SoundStream-style codec: a causal (left-padded) Conv1d encoder of residual units
    (dilations 1, 3, 9, ELU) and strided convs (2, 4, 5: x40 downsampling) with FiLM
    conditioning from a scalar denoise/quality input (Linear -> per-channel scale + shift), a
    4-stage residual vector quantiser (each stage: distances by MatMul, ArgMin, Gather of the
    code, subtract from the residual), and a mirrored decoder with causal ConvTranspose1d
    (right trim); 3200 samples -> 80 frames x 4 codes -> 3200 samples."""

    class CConv(nn.Conv1d):
        def forward(self, x):
            p = (self.kernel_size[0] - 1) * self.dilation[0] + 1 - self.stride[0]
            return super().forward(F.pad(x, (max(p, 0), 0)))

    class Unit(nn.Module):
        def __init__(self, c, d):
            super().__init__()
            C = SoundStream.CConv
            self.f = nn.Sequential(nn.ELU(), C(c, c, 7, dilation=d), nn.ELU(), C(c, c, 1))

        def forward(self, x):
            return x + self.f(x)

    class Film(nn.Module):
        def __init__(self, c):
            super().__init__()
            self.lin = nn.Linear(1, 2 * c)

        def forward(self, x, cond):
            g, b = self.lin(cond).unsqueeze(-1).chunk(2, 1)
            return x * (1 + g) + b

    def __init__(self, ch=(16, 32, 64, 128), strides=(2, 4, 5), d=64, codes=256, stages=4):
        super().__init__()
        C, U = SoundStream.CConv, SoundStream.Unit
        self.inp = C(1, ch[0], 7)
        self.enc = nn.ModuleList()
        self.efilm = nn.ModuleList()
        for i, s in enumerate(strides):
            self.enc.append(
                nn.Sequential(
                    U(ch[i], 1), U(ch[i], 3), U(ch[i], 9), nn.ELU(), C(ch[i], ch[i + 1], 2 * s, s)
                )
            )
            self.efilm.append(SoundStream.Film(ch[i + 1]))
        self.to_z = C(ch[-1], d, 3)
        self.codebooks = nn.Parameter(torch.randn(stages, codes, d) * 0.5)
        self.from_z = C(d, ch[-1], 7)
        self.dec = nn.ModuleList()
        self.dfilm = nn.ModuleList()
        for i, s in reversed(list(enumerate(strides))):
            self.dec.append(
                nn.ModuleDict(
                    {
                        "up": nn.ConvTranspose1d(ch[i + 1], ch[i], 2 * s, s),
                        "res": nn.Sequential(U(ch[i], 1), U(ch[i], 3), U(ch[i], 9)),
                    }
                )
            )
            self.dfilm.append(SoundStream.Film(ch[i]))
        self.out = C(ch[0], 1, 7)
        self.strides = strides

    def forward(self, wav, cond):  # (n, 1, T), (n, 1)
        x = self.inp(wav)
        for e, f in zip(self.enc, self.efilm):
            x = f(e(x), cond)
        z = self.to_z(x).transpose(1, 2)  # (n, frames, d)
        r, zq, codes = z, torch.zeros_like(z), []
        for cb in self.codebooks:
            dist = (r**2).sum(-1, keepdim=True) - 2 * r @ cb.t() + (cb**2).sum(-1)
            idx = dist.argmin(-1)
            q = cb[idx]
            zq, r = zq + q, r - q
            codes.append(idx)
        y = self.from_z(zq.transpose(1, 2))
        for blk, f, s in zip(self.dec, self.dfilm, reversed(self.strides)):
            y = F.elu(y)
            t = y.shape[2] * s
            y = f(blk["res"](blk["up"](y)[:, :, :t]), cond)
        return torch.tanh(self.out(F.elu(y))), torch.stack(codes, 1)


def m_soundstream():
    g = torch.Generator().manual_seed(54)
    t = torch.arange(3200) / 16000
    wav = 0.4 * torch.sin(2 * math.pi * 330 * t) * torch.sin(
        2 * math.pi * 3 * t
    ) + 0.05 * torch.randn(3200, generator=g)
    inp = {"waveform": wav.reshape(1, 1, 3200), "quality": torch.tensor([[0.5]])}
    return custom(SoundStream, inp, ["reconstruction", "codes"], init_gain=1.0)


# ================================================================ others
class NBEATS(nn.Module):
    """N-BEATS (interpretable + generic): stacks of fully connected blocks (4 x Linear-ReLU)
    emitting basis coefficients - a trend stack with a degree-3 polynomial basis, a
    seasonality stack with a Fourier (cos/sin harmonics) basis, a generic stack with learned
    Linear bases - and doubly residual stacking (the backcast subtracted from the input, the
    forecasts summed); 96-step history -> 24-step forecast plus per-stack forecasts."""

    class Block(nn.Module):
        def __init__(self, back, fore, basis, units=256, theta=None):
            super().__init__()
            self.fc = nn.Sequential(
                nn.Linear(back, units),
                nn.ReLU(),
                nn.Linear(units, units),
                nn.ReLU(),
                nn.Linear(units, units),
                nn.ReLU(),
                nn.Linear(units, units),
                nn.ReLU(),
            )
            self.kind = basis
            if basis == "generic":
                self.tb, self.tf = nn.Linear(units, theta), nn.Linear(units, theta)
                self.gb, self.gf = nn.Linear(theta, back), nn.Linear(theta, fore)
            else:
                tb, tf = NBEATS.basis(basis, back, fore)
                self.register_buffer("Bb", tb, False)
                self.register_buffer("Bf", tf, False)
                self.theta = nn.Linear(units, tb.shape[0], bias=False)

        def forward(self, x):
            h = self.fc(x)
            if self.kind == "generic":
                return self.gb(self.tb(h)), self.gf(self.tf(h))
            t = self.theta(h)
            return t @ self.Bb, t @ self.Bf

    @staticmethod
    def basis(kind, back, fore):
        tb = torch.arange(back, dtype=torch.float32) / back
        tf = torch.arange(fore, dtype=torch.float32) / fore
        if kind == "trend":
            return torch.stack([tb**p for p in range(4)]), torch.stack([tf**p for p in range(4)])
        hs = torch.arange(1, fore // 2).float()

        def fourier(t):
            a = 2 * math.pi * hs[:, None] * t[None]
            return torch.cat([torch.ones(1, t.numel()), a.cos(), a.sin()])

        return fourier(tb), fourier(tf)

    def __init__(self, back=96, fore=24):
        super().__init__()
        B = NBEATS.Block
        self.stacks = nn.ModuleList(
            [
                nn.ModuleList(B(back, fore, "trend") for _ in range(3)),
                nn.ModuleList(B(back, fore, "seasonality") for _ in range(3)),
                nn.ModuleList(B(back, fore, "generic", theta=32) for _ in range(2)),
            ]
        )

    def forward(self, x):  # (n, 96)
        scale = x.abs().mean(1, keepdim=True) + 1e-3
        r = x / scale
        total, parts = 0, []
        for stack in self.stacks:
            part = 0
            for blk in stack:
                b, f = blk(r)
                r = r - b
                part = part + f
            total = total + part
            parts.append(part * scale)
        return total * scale, torch.stack(parts, 1)


def m_nbeats():
    g = torch.Generator().manual_seed(61)
    t = torch.arange(96).float()
    x = 10 + 0.05 * t + 2 * torch.sin(2 * math.pi * t / 24) + 0.3 * torch.randn(96, generator=g)
    return custom(NBEATS, {"history": x.reshape(1, 96)}, ["forecast", "stack_forecasts"])


class TFT(nn.Module):
    """Temporal Fusion Transformer: gated residual networks (ELU, GLU gate, LayerNorm) with
    static context, variable selection networks (a GRN per variable, softmax weights across
    variables), static covariate encoders (4 contexts) seeding an LSTM encoder (24 past
    steps) / decoder (6 known future steps), gated skip connections, static enrichment,
    interpretable multi-head attention (per-head q/k, one shared value projection, heads
    averaged) with a causal mask, position-wise GRN and 3 quantile outputs."""

    class GRN(nn.Module):
        def __init__(self, din, d, dout=None, ctx=None):
            super().__init__()
            dout = dout or d
            self.skip = nn.Linear(din, dout) if din != dout else None
            self.fc1 = nn.Linear(din, d)
            self.ctx = nn.Linear(ctx, d, bias=False) if ctx else None
            self.fc2 = nn.Linear(d, d)
            self.glu = nn.Linear(d, 2 * dout)
            self.norm = nn.LayerNorm(dout)

        def forward(self, x, c=None):
            s = x if self.skip is None else self.skip(x)
            h = self.fc1(x)
            if c is not None:
                h = h + self.ctx(c)
            h = self.fc2(F.elu(h))
            return self.norm(s + F.glu(self.glu(h), -1))

    class VSN(nn.Module):
        def __init__(self, nvars, d, ctx=None):
            super().__init__()
            self.flat = TFT.GRN(nvars * d, d, nvars, ctx)
            self.grns = nn.ModuleList(TFT.GRN(d, d) for _ in range(nvars))

        def forward(self, xs, c=None):  # xs (..., nvars, d)
            w = torch.softmax(self.flat(xs.flatten(-2), c), -1).unsqueeze(-1)
            h = torch.stack([g(xs[..., i, :]) for i, g in enumerate(self.grns)], -2)
            return (w * h).sum(-2)

    def __init__(self, d=64, heads=4, static_cards=(50, 7), past_real=4, fut_real=2, quantiles=3):
        super().__init__()
        self.heads = heads
        self.static_emb = nn.ModuleList(nn.Embedding(c, d) for c in static_cards)
        self.past_proj = nn.ModuleList(nn.Linear(1, d) for _ in range(past_real + fut_real))
        self.fut_proj = nn.ModuleList(nn.Linear(1, d) for _ in range(fut_real))
        G = TFT.GRN
        self.static_vsn = TFT.VSN(len(static_cards), d)
        self.cs, self.ce, self.ch, self.cc = (G(d, d) for _ in range(4))
        self.past_vsn = TFT.VSN(past_real + fut_real, d, ctx=d)
        self.fut_vsn = TFT.VSN(fut_real, d, ctx=d)
        self.enc = nn.LSTM(d, d, batch_first=True)
        self.dec = nn.LSTM(d, d, batch_first=True)
        self.gate1, self.norm1 = nn.Linear(d, 2 * d), nn.LayerNorm(d)
        self.enrich = G(d, d, ctx=d)
        self.q, self.k = nn.Linear(d, d), nn.Linear(d, d)
        self.v, self.o = nn.Linear(d, d // heads), nn.Linear(d // heads, d)
        self.gate2, self.norm2 = nn.Linear(d, 2 * d), nn.LayerNorm(d)
        self.pos = G(d, d)
        self.gate3, self.norm3 = nn.Linear(d, 2 * d), nn.LayerNorm(d)
        self.out = nn.Linear(d, quantiles)

    def forward(self, static, past, future):  # (n, 2) int64, (n, 24, 6), (n, 6, 2)
        n, P, _ = past.shape
        Fh = future.shape[1]
        s = self.static_vsn(
            torch.stack([e(static[:, i]) for i, e in enumerate(self.static_emb)], 1)
        )
        cs, ce, ch, cc = self.cs(s), self.ce(s), self.ch(s), self.cc(s)
        pe = torch.stack([p(past[..., i : i + 1]) for i, p in enumerate(self.past_proj)], 2)
        fe = torch.stack([p(future[..., i : i + 1]) for i, p in enumerate(self.fut_proj)], 2)
        xp = self.past_vsn(pe, cs.unsqueeze(1).expand(n, P, -1))
        xf = self.fut_vsn(fe, cs.unsqueeze(1).expand(n, Fh, -1))
        hp, state = self.enc(xp, (ch.unsqueeze(0), cc.unsqueeze(0)))
        hf, _ = self.dec(xf, state)
        x = torch.cat([xp, xf], 1)
        h = self.norm1(x + F.glu(self.gate1(torch.cat([hp, hf], 1)), -1))
        e = self.enrich(h, ce.unsqueeze(1).expand_as(h))
        L, hd = P + Fh, e.shape[-1] // self.heads
        q = self.q(e).reshape(n, L, self.heads, hd).transpose(1, 2)
        k = self.k(e).reshape(n, L, self.heads, hd).transpose(1, 2)
        mask = torch.ones(L, L, dtype=torch.bool, device=e.device).triu(1)
        a = (q @ k.transpose(-2, -1) * hd**-0.5).masked_fill(mask, -1e9).softmax(-1)
        att = self.o((a @ self.v(e).unsqueeze(1)).mean(1))
        y = self.norm2(e + F.glu(self.gate2(att), -1))
        y = self.pos(y)
        y = self.norm3(h + F.glu(self.gate3(y), -1))
        return self.out(y[:, P:]), a.mean(1)[:, P:]


def m_tft():
    g = torch.Generator().manual_seed(62)
    inp = {
        "static": torch.tensor([[17, 3]]),
        "past": torch.randn(1, 24, 6, generator=g),
        "future": torch.randn(1, 6, 2, generator=g),
    }
    return custom(TFT, inp, ["quantiles", "attention"], init_gain=1.0)


class AttentionUNet(nn.Module):
    """Attention U-Net: a 4-level conv-BN-ReLU encoder/decoder whose skip connections pass
    through additive attention gates - theta(x) by a stride-2 1x1 conv of the skip, phi(g) a
    1x1 conv of the coarser gating signal, ReLU(sum), psi 1x1 conv, sigmoid, bilinear Resize
    of the coefficients back to the skip's size, multiplied in - bilinear upsampling on the
    decoder path, 3-class logits and the finest attention map; 64x64."""

    class Gate(nn.Module):
        def __init__(self, cx, cg, ci):
            super().__init__()
            self.theta = nn.Conv2d(cx, ci, 1, 2, bias=False)
            self.phi = nn.Conv2d(cg, ci, 1)
            self.psi = nn.Conv2d(ci, 1, 1)
            self.w = cba(cx, cx, act=None)

        def forward(self, x, g):
            t = self.theta(x)
            a = F.relu(t + F.interpolate(self.phi(g), size=t.shape[2:], mode="bilinear"))
            a = torch.sigmoid(self.psi(a))
            a = F.interpolate(a, size=x.shape[2:], mode="bilinear", align_corners=False)
            return self.w(x * a), a

    def __init__(self, c=16, classes=3):
        super().__init__()

        def dbl(i, o):
            return nn.Sequential(cba(i, o, 3), cba(o, o, 3))

        self.e = nn.ModuleList([dbl(1, c), dbl(c, 2 * c), dbl(2 * c, 4 * c), dbl(4 * c, 8 * c)])
        self.center = dbl(8 * c, 16 * c)
        chans = [c, 2 * c, 4 * c, 8 * c]
        self.gates = nn.ModuleList(
            AttentionUNet.Gate(ch, 2 * ch, ch // 2 if ch > c else ch) for ch in chans
        )
        self.d = nn.ModuleList(dbl(3 * ch, ch) for ch in chans)
        self.out = nn.Conv2d(c, classes, 1)

    def forward(self, x):
        skips = []
        for enc in self.e:
            x = enc(x)
            skips.append(x)
            x = F.max_pool2d(x, 2)
        g = self.center(x)
        att = None
        for i in reversed(range(4)):
            s, att = self.gates[i](skips[i], g)
            g = self.d[i](torch.cat([s, F.interpolate(g, scale_factor=2.0, mode="bilinear")], 1))
        return self.out(g), att


def m_attention_unet():
    return custom(
        AttentionUNet, image_inputs(64, c=1, name="image"), ["logits", "attention"], init_gain=1.0
    )


class GMLP(nn.Module):
    """gMLP / aMLP for images: 4x4 patch tokens, blocks of LayerNorm, a channel projection to
    2x width with GELU, a spatial gating unit (the gate half LayerNorm-ed and mixed across the
    144 tokens by a learned token-by-token Linear - a MatMul along the token axis - initialised
    near identity: weights ~0, bias 1), a tiny single-head attention (64-d) added to the gate
    in every other block (aMLP), the gated product projected back; 48x48 image."""

    class Block(nn.Module):
        def __init__(self, d, ff, tokens, tiny):
            super().__init__()
            self.norm, self.inp = nn.LayerNorm(d), nn.Linear(d, 2 * ff)
            self.gnorm = nn.LayerNorm(ff)
            self.spatial_w = nn.Parameter(torch.randn(tokens, tokens) * 0.05)
            self.spatial_b = nn.Parameter(torch.ones(tokens, 1) + 0.1 * torch.randn(tokens, 1))
            self.tiny = nn.Sequential(nn.Linear(d, 3 * 64)) if tiny else None
            self.tiny_o = nn.Linear(64, ff) if tiny else None
            self.out = nn.Linear(ff, d)

        def forward(self, x):
            y = self.norm(x)
            u, v = F.gelu(self.inp(y)).chunk(2, -1)
            v = self.spatial_w @ self.gnorm(v) + self.spatial_b
            if self.tiny is not None:
                q, k, val = self.tiny(y).chunk(3, -1)
                a = (q @ k.transpose(-2, -1) * 64**-0.5).softmax(-1)
                v = v + self.tiny_o(a @ val)
            return x + self.out(u * v)

    def __init__(self, d=128, ff=384, depth=6, patch=4, img=48, classes=100):
        super().__init__()
        t = (img // patch) ** 2
        self.embed = nn.Conv2d(3, d, patch, patch)
        self.blocks = nn.Sequential(*[GMLP.Block(d, ff, t, i % 2 == 1) for i in range(depth)])
        self.norm, self.fc = nn.LayerNorm(d), nn.Linear(d, classes)

    def forward(self, x):
        x = self.blocks(self.embed(x).flatten(2).transpose(1, 2))
        return self.fc(self.norm(x).mean(1))


def m_gmlp():
    return custom(GMLP, image_inputs(48), ["logits"], init_gain=1.0)


class S4D(nn.Module):
    """S4D (diagonal state-space) sequence classifier: per layer, the length-256 convolution
    kernel of each of 64 channels is computed in-graph from learned log-dt, diagonal complex
    A (real / imaginary parameters) and complex C by the Vandermonde form
    K[l] = 2 Re(sum_n C'_n exp(dt A_n l)), written in real arithmetic (Exp, Cos, Sin, MatMul);
    the causal convolution is a depthwise Conv1d with that activation-valued 256-tap kernel
    (flipped, left padding 255) - FFT-free; D skip, GELU, a GLU output Conv1d, LayerNorm,
    residual; mean pooling; 256 steps x 8 features."""

    class Layer(nn.Module):
        def __init__(self, h, n=32, L=256):
            super().__init__()
            g = torch.Generator().manual_seed(h + n)
            self.log_dt = nn.Parameter(
                torch.rand(h, generator=g) * (math.log(0.1) - math.log(0.001)) + math.log(0.001)
            )
            self.log_a_re = nn.Parameter(torch.log(0.5 * torch.ones(h, n // 2)))
            self.a_im = nn.Parameter(math.pi * torch.arange(n // 2).float().repeat(h, 1))
            self.c_re = nn.Parameter(torch.randn(h, n // 2, generator=g) * 0.5**0.5)
            self.c_im = nn.Parameter(torch.randn(h, n // 2, generator=g) * 0.5**0.5)
            self.D = nn.Parameter(torch.randn(h, generator=g))
            self.out = nn.Conv1d(h, 2 * h, 1)
            self.norm = nn.LayerNorm(h)
            self.register_buffer("l", torch.arange(L).float(), False)
            self.h, self.L = h, L

        def kernel(self):
            dt = self.log_dt.exp()[:, None]  # (h, 1)
            are, aim = -self.log_a_re.exp(), self.a_im  # A = are + i aim
            dre, dim = are * dt, aim * dt  # dtA
            # C' = C (exp(dtA) - 1) / A
            e = dre.exp()
            er, ei = e * dim.cos() - 1, e * dim.sin()
            nr, ni = self.c_re * er - self.c_im * ei, self.c_re * ei + self.c_im * er
            den = are**2 + aim**2
            cr, ci = (nr * are + ni * aim) / den, (ni * are - nr * aim) / den
            # Vandermonde: exp(dtA l) = exp(dre l) (cos(dim l) + i sin(dim l))
            mag = (dre.unsqueeze(-1) * self.l).exp()  # (h, n/2, L)
            ph = dim.unsqueeze(-1) * self.l
            return 2 * (cr.unsqueeze(-1) * mag * ph.cos() - ci.unsqueeze(-1) * mag * ph.sin()).sum(
                1
            )  # (h, L)

        def forward(self, x):  # (n, h, L)
            k = self.kernel().flip(-1).unsqueeze(1)  # (h, 1, L)
            y = F.conv1d(F.pad(x, (self.L - 1, 0)), k, groups=self.h) + x * self.D[:, None]
            y = F.glu(self.out(F.gelu(y)), 1)
            return self.norm((x + y).transpose(1, 2)).transpose(1, 2)

    def __init__(self, din=8, h=64, depth=3, L=256, classes=10):
        super().__init__()
        self.inp = nn.Linear(din, h)
        self.layers = nn.Sequential(*[S4D.Layer(h, 32, L) for _ in range(depth)])
        self.fc = nn.Linear(h, classes)

    def forward(self, x):  # (n, L, din)
        y = self.layers(self.inp(x).transpose(1, 2))
        return self.fc(y.mean(-1))


def m_s4d():
    return custom(S4D, feats((1, 256, 8), seed=63, name="sequence"), ["logits"])


class Seq2SeqAttn(nn.Module):
    """LSTM encoder-decoder with Bahdanau (additive) attention, decoded greedily in-graph: a
    bidirectional LSTM encoder over 16 source tokens (padding mask), a bridge to the decoder
    state, then 12 unrolled LSTMCell steps with input feeding - tanh(W h_enc + U s) scored by
    v, masked softmax, context, logits over 600 tokens, ArgMax fed back through the target
    embedding; logits and int64 tokens out."""

    def __init__(self, src_vocab=800, tgt_vocab=600, d=96, h=128, steps=12, bos=1):
        super().__init__()
        self.src, self.tgt = nn.Embedding(src_vocab, d), nn.Embedding(tgt_vocab, d)
        self.enc = nn.LSTM(d, h, batch_first=True, bidirectional=True)
        self.bridge_h, self.bridge_c = nn.Linear(2 * h, h), nn.Linear(2 * h, h)
        self.cell = nn.LSTMCell(d + 2 * h, h)
        self.wk, self.wq, self.v = (
            nn.Linear(2 * h, h, bias=False),
            nn.Linear(h, h),
            nn.Linear(h, 1, bias=False),
        )
        self.out = nn.Linear(h + 2 * h, tgt_vocab)
        self.steps, self.bos = steps, bos

    def forward(self, src, src_mask):  # (n, S) int64, (n, S) float
        mem, _ = self.enc(self.src(src))  # (n, S, 2h)
        mean = (mem * src_mask.unsqueeze(-1)).sum(1) / src_mask.sum(1, keepdim=True)
        h, c = torch.tanh(self.bridge_h(mean)), self.bridge_c(mean)
        keys = self.wk(mem)
        ctx = torch.zeros_like(mean)
        tok = torch.full_like(src[:, 0], self.bos)
        logits, toks = [], []
        for _ in range(self.steps):
            h, c = self.cell(torch.cat([self.tgt(tok), ctx], -1), (h, c))
            e = self.v(torch.tanh(keys + self.wq(h).unsqueeze(1))).squeeze(-1)
            a = torch.softmax(e.masked_fill(src_mask == 0, -1e9), -1)
            ctx = (a.unsqueeze(-1) * mem).sum(1)
            lg = self.out(torch.cat([h, ctx], -1))
            tok = lg.argmax(-1)
            logits.append(lg)
            toks.append(tok)
        return torch.stack(logits, 1), torch.stack(toks, 1)


def m_seq2seq_attn():
    g = torch.Generator().manual_seed(64)
    src = torch.randint(3, 800, (1, 16), generator=g)
    mask = torch.ones(1, 16)
    mask[0, 13:] = 0
    return custom(
        Seq2SeqAttn, {"source": src, "source_mask": mask}, ["logits", "tokens"], init_gain=1.0
    )


# ================================================================ END OF MODELS
ALL = {k[2:]: v for k, v in globals().items() if k.startswith("m_")}
EXTRA = ("triplet_att",)
MODELS = {k: v for k, v in ALL.items() if k not in EXTRA}

if __name__ == "__main__":
    main(ALL if sys.argv[1] in EXTRA else MODELS, sys.argv)
