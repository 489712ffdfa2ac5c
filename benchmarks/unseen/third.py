"""A third set of unseen models: architectures neither the zoo, build.py nor fresh.py holds.

Usage: python third.py NAME      (builds one model into $GE_UNSEEN_DIR/NAME/)
       python third.py --list
       python third.py --bench-layout  (writes $GE_UNSEEN_DIR/cache/zoo/NAME/ for each built
                                        model, so that GE_MODEL_CACHE=$GE_UNSEEN_DIR/cache
                                        benchmarks/bench_zoo.py benches them)
Build this set into its own directory (e.g. GE_UNSEEN_DIR=/work/unseen7), not the other sets'.
Same files as build.py (whose export + ORT check this reuses): model.onnx (opset 17, dynamic
batch axis), inputs.npz (batch-1 feeds), export.txt.

Families: depthwise/SE convnets, embedding-heavy nets, GQA decoders with RoPE + RMSNorm,
window-attention vision transformers, 1-D conv audio encoders, GPT-2-like decoders, small
ViTs, and a few others (point cloud, graph, tabular, deformable attention, video, SSM).
"""

import os
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from fresh import SE, Call, cba, custom, decoder, divisible, fan_in_init, feats, randomize_norms

from build import hf, image_inputs, main, text_inputs


def ids(shape, hi, seed, lo=0, name="ids"):
    g = torch.Generator().manual_seed(seed)
    return {name: torch.randint(lo, hi, shape, generator=g, dtype=torch.long)}


# ================================================================ depthwise + squeeze-excitation
class MnasNet(nn.Module):
    """MnasNet-A1-like: separable stem block, MBConv with expansion 3/6, 3x3 and 5x5
    depthwise (stride 2 on 5x5 too), ReLU, SE (ReLU + sigmoid) in some stages, 128x128."""

    class MB(nn.Module):
        def __init__(self, cin, cout, k, s, e, se):
            super().__init__()
            mid = cin * e
            self.f = nn.Sequential(
                cba(cin, mid),
                cba(mid, mid, k, s, groups=mid),
                SE(mid, max(8, mid // 4), gate=nn.Sigmoid) if se else nn.Identity(),
                cba(mid, cout, act=None),
            )
            self.res = s == 1 and cin == cout

        def forward(self, x):
            y = self.f(x)
            return x + y if self.res else y

    def __init__(self, classes=100):
        super().__init__()
        B = MnasNet.MB
        self.stem = nn.Sequential(cba(3, 32, 3, 2), cba(32, 32, 3, 1, 32), cba(32, 16, act=None))
        cfg = [  # cin, cout, k, s, e, se, repeats
            (16, 24, 3, 2, 6, False, 2),
            (24, 40, 5, 2, 3, True, 2),
            (40, 80, 3, 2, 6, False, 3),
            (80, 112, 3, 1, 6, True, 2),
            (112, 160, 5, 2, 6, True, 2),
            (160, 320, 3, 1, 6, False, 1),
        ]
        layers = []
        for cin, cout, k, s, e, se, n in cfg:
            for i in range(n):
                layers.append(B(cin if i == 0 else cout, cout, k, s if i == 0 else 1, e, se))
        self.blocks = nn.Sequential(*layers)
        self.head = cba(320, 640)
        self.fc = nn.Linear(640, classes)

    def forward(self, x):
        return self.fc(self.head(self.blocks(self.stem(x))).mean((2, 3)))


def m_mnasnet():
    return custom(MnasNet, image_inputs(128), ["logits"], init_gain=1.0)


class PPLCNet(nn.Module):
    """PP-LCNet-like: a plain stack of depthwise-separable convs with hard-swish, 5x5
    depthwise in the last stages, SE (ReLU + hard-sigmoid) only in the last two blocks, GAP
    then a 1x1 conv to 1280 without BN (hard-swish) before the classifier, 160x160."""

    def __init__(self, scale=0.75, classes=100):
        super().__init__()

        def c(v):
            return divisible(v * scale)

        cfg = [  # k, cin, cout, s, se
            (3, 16, 32, 1, False),
            (3, 32, 64, 2, False),
            (3, 64, 64, 1, False),
            (3, 64, 128, 2, False),
            (3, 128, 128, 1, False),
            (3, 128, 256, 2, False),
            (5, 256, 256, 1, False),
            (5, 256, 256, 1, False),
            (5, 256, 256, 1, False),
            (5, 256, 512, 2, True),
            (5, 512, 512, 1, True),
        ]
        layers = [cba(3, c(16), 3, 2, act=nn.Hardswish)]
        for k, cin, cout, s, se in cfg:
            layers += [cba(c(cin), c(cin), k, s, c(cin), act=nn.Hardswish)]
            if se:
                layers.append(SE(c(cin), c(cin) // 4))
            layers.append(cba(c(cin), c(cout), act=nn.Hardswish))
        self.body = nn.Sequential(*layers)
        self.last = nn.Conv2d(c(512), 1280, 1)
        self.fc = nn.Linear(1280, classes)

    def forward(self, x):
        y = F.adaptive_avg_pool2d(self.body(x), 1)
        y = F.hardswish(self.last(y)).flatten(1)
        return self.fc(y)


def m_pp_lcnet():
    return custom(PPLCNet, image_inputs(160), ["logits"], init_gain=1.4)


class MobileOne(nn.Module):
    """MobileOne-like, exported in its train-time (un-reparameterised) form: every conv is a
    sum of k parallel conv+BN branches, a 1x1 "scale" conv+BN branch and a BN-only identity
    branch, then ReLU; depthwise 3x3 then pointwise 1x1 per block, 128x128."""

    class Branchy(nn.Module):
        def __init__(self, cin, cout, k, s, groups, nb=2):
            super().__init__()
            self.convs = nn.ModuleList(cba(cin, cout, k, s, groups, act=None) for _ in range(nb))
            self.scale = cba(cin, cout, 1, s, groups, act=None) if k > 1 else None
            self.skip = nn.BatchNorm2d(cin) if cin == cout and s == 1 else None

        def forward(self, x):
            y = sum(c(x) for c in self.convs)
            if self.scale is not None:
                y = y + self.scale(x)
            if self.skip is not None:
                y = y + self.skip(x)
            return F.relu(y)

    def __init__(self, classes=100):
        super().__init__()
        B = MobileOne.Branchy
        layers = [B(3, 32, 3, 2, 1, 1)]
        cin = 32
        for cout, n, s in [(48, 2, 2), (96, 3, 2), (192, 4, 2), (384, 2, 2)]:
            for i in range(n):
                st = s if i == 0 else 1
                layers += [B(cin, cin, 3, st, cin), B(cin, cout, 1, 1, 1)]
                cin = cout
        self.body = nn.Sequential(*layers)
        self.fc = nn.Linear(cin, classes)

    def forward(self, x):
        return self.fc(F.adaptive_avg_pool2d(self.body(x), 1).flatten(1))


def m_mobileone():
    return custom(MobileOne, image_inputs(128), ["logits"])


class ReXNet(nn.Module):
    """ReXNet-like: channels grow linearly block by block, SiLU after the expansion, ReLU6
    after the depthwise conv, SE with BN in the squeeze path, and a partial residual that
    adds the input only onto the first cin output channels (Slice + Add + Concat)."""

    class LB(nn.Module):
        def __init__(self, cin, cout, s, e, se):
            super().__init__()
            mid = cin * e
            self.f = nn.Sequential(
                cba(cin, mid, act=nn.SiLU) if e > 1 else nn.Identity(),
                cba(mid, mid, 3, s, mid, act=None),
            )
            self.se = (
                nn.Sequential(
                    nn.AdaptiveAvgPool2d(1),
                    nn.Conv2d(mid, mid // 12 + 4, 1),
                    nn.BatchNorm2d(mid // 12 + 4),
                    nn.ReLU(),
                    nn.Conv2d(mid // 12 + 4, mid, 1),
                    nn.Sigmoid(),
                )
                if se
                else None
            )
            self.proj = cba(mid, cout, act=None)
            self.cin, self.res = cin, s == 1 and cin <= cout

        def forward(self, x):
            y = self.f(x)
            if self.se is not None:
                y = y * self.se(y)
            y = self.proj(F.relu6(y))
            if self.res:
                y = torch.cat([y[:, : self.cin] + x, y[:, self.cin :]], 1)
            return y

    def __init__(self, classes=100):
        super().__init__()
        strides = [1, 2, 1, 2, 1, 2, 1, 1, 1, 1, 1, 2, 1]
        n = len(strides)
        chans = [16 + round(i * 112 / n) for i in range(n + 1)]
        self.stem = cba(3, 32, 3, 2, act=nn.SiLU)
        layers = [ReXNet.LB(32, chans[0], 1, 1, False)]
        for i, s in enumerate(strides):
            layers.append(ReXNet.LB(chans[i], chans[i + 1], s, 6, i >= 2))
        self.blocks = nn.Sequential(*layers)
        self.head = cba(chans[-1], 640, act=nn.SiLU)
        self.fc = nn.Linear(640, classes)

    def forward(self, x):
        return self.fc(self.head(self.blocks(self.stem(x))).mean((2, 3)))


def m_rexnet():
    return custom(ReXNet, image_inputs(128), ["logits"], init_gain=1.4)


class LayerNorm2d(nn.LayerNorm):
    """Channels-first LayerNorm via permutes (channels-last LayerNorm in between)."""

    def forward(self, x):
        return super().forward(x.permute(0, 2, 3, 1)).permute(0, 3, 1, 2)


class EdgeNeXt(nn.Module):
    """EdgeNeXt-like: a 4x4 patchify stem, conv encoders (depthwise 3/5/7/9 kernels per stage,
    channels-last LayerNorm, MLP, layer scale), and split depthwise transposed attention
    (SDTA): channel groups through a Res2Net-like chain of depthwise 3x3 convs, then
    cross-covariance attention (L2-normalised q/k over tokens, channel x channel attention with
    a learned per-head temperature). 128x128."""

    class ConvEnc(nn.Module):
        def __init__(self, d, k):
            super().__init__()
            self.dw = nn.Conv2d(d, d, k, padding=k // 2, groups=d)
            self.norm = nn.LayerNorm(d, eps=1e-6)
            self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))
            self.gamma = nn.Parameter(torch.full((d,), 0.5))

        def forward(self, x):
            y = self.dw(x).permute(0, 2, 3, 1)
            y = self.gamma * self.mlp(self.norm(y))
            return x + y.permute(0, 3, 1, 2)

    class SDTA(nn.Module):
        def __init__(self, d, heads, scales):
            super().__init__()
            self.width = -(-d // scales)
            self.convs = nn.ModuleList(
                nn.Conv2d(self.width, self.width, 3, padding=1, groups=self.width)
                for _ in range(scales - 1)
            )
            self.heads = heads
            self.norm_xca = nn.LayerNorm(d, eps=1e-6)
            self.temp = nn.Parameter(torch.linspace(0.5, 2.0, heads).view(heads, 1, 1))
            self.qkv = nn.Linear(d, 3 * d)
            self.proj = nn.Linear(d, d)
            self.gamma_xca = nn.Parameter(torch.full((d,), 0.5))
            self.norm = nn.LayerNorm(d, eps=1e-6)
            self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))
            self.gamma = nn.Parameter(torch.full((d,), 0.5))

        def forward(self, x):
            n, c, h, w = x.shape
            spx = torch.split(x, self.width, 1)
            outs, sp = [], None
            for i, conv in enumerate(self.convs):
                sp = spx[i] if i == 0 else sp + spx[i]
                sp = conv(sp)
                outs.append(sp)
            y = torch.cat(outs + [spx[-1]], 1)
            t = y.flatten(2).transpose(1, 2)  # (n, hw, c)
            q, k, v = (
                self.qkv(self.norm_xca(t))
                .reshape(n, h * w, 3, self.heads, c // self.heads)
                .permute(2, 0, 3, 4, 1)
            )  # each (n, heads, dh, hw)
            q, k = F.normalize(q, dim=-1), F.normalize(k, dim=-1)
            a = ((q @ k.transpose(-2, -1)) * self.temp).softmax(-1)
            o = (a @ v).permute(0, 3, 1, 2).reshape(n, h * w, c)
            t = t + self.gamma_xca * self.proj(o)
            t = t + self.gamma * self.mlp(self.norm(t))
            return t.transpose(1, 2).reshape(n, c, h, w)

    def __init__(self, dims=(24, 48, 88, 168), depths=(2, 2, 4, 2), classes=100):
        super().__init__()
        ks = (3, 5, 7, 9)
        self.stem = nn.Sequential(nn.Conv2d(3, dims[0], 4, 4), LayerNorm2d(dims[0], eps=1e-6))
        self.stages = nn.ModuleList()
        for i, (d, n) in enumerate(zip(dims, depths)):
            blocks = []
            if i:
                blocks += [LayerNorm2d(dims[i - 1], eps=1e-6), nn.Conv2d(dims[i - 1], d, 2, 2)]
            blocks += [EdgeNeXt.ConvEnc(d, ks[i]) for _ in range(n - (1 if i else 0))]
            if i:
                blocks.append(EdgeNeXt.SDTA(d, 4, i + 1))
            self.stages.append(nn.Sequential(*blocks))
        self.norm = nn.LayerNorm(dims[-1])
        self.fc = nn.Linear(dims[-1], classes)

    def forward(self, x):
        x = self.stem(x)
        for s in self.stages:
            x = s(x)
        return self.fc(self.norm(x.mean((2, 3))))


def m_edgenext():
    return custom(EdgeNeXt, image_inputs(128), ["logits"])


# ================================================================ embedding-heavy
class DeepFM(nn.Module):
    """DeepFM: 26 categorical fields of different cardinalities looked up in one shared table
    (per-field offsets added in-graph), a first-order weight table, the FM pairwise term
    0.5 * ((sum v)^2 - sum v^2), dense features through a linear, and a deep MLP on the
    flattened field embeddings; sigmoid CTR."""

    def __init__(self, n_dense=13, d=16):
        super().__init__()
        sizes = [1000 + 997 * i % 20000 for i in range(26)]
        offs = torch.tensor([0] + sizes[:-1]).cumsum(0)
        self.register_buffer("offsets", offs, False)
        self.emb = nn.Embedding(sum(sizes), d)
        self.w1 = nn.Embedding(sum(sizes), 1)
        self.dense = nn.Linear(n_dense, d)
        self.dense_w = nn.Linear(n_dense, 1)
        self.deep = nn.Sequential(
            nn.Linear(27 * d, 256),
            nn.BatchNorm1d(256),
            nn.ReLU(),
            nn.Linear(256, 128),
            nn.BatchNorm1d(128),
            nn.ReLU(),
            nn.Linear(128, 1),
        )
        nn.init.normal_(self.emb.weight, std=0.05)
        nn.init.normal_(self.w1.weight, std=0.05)

    def forward(self, dense, sparse):  # (N, 13) float, (N, 26) int64
        idx = sparse + self.offsets
        v = torch.cat([self.emb(idx), self.dense(dense).unsqueeze(1)], 1)  # (N, 27, d)
        first = self.w1(idx).sum((1, 2)) + self.dense_w(dense).squeeze(1)
        fm = 0.5 * (v.sum(1).pow(2) - v.pow(2).sum(1)).sum(1)
        deep = self.deep(v.flatten(1)).squeeze(1)
        return torch.sigmoid(first + fm + deep)


def m_deepfm():
    g = torch.Generator().manual_seed(21)
    sizes = [1000 + 997 * i % 20000 for i in range(26)]
    sparse = torch.stack([torch.randint(0, n, (1,), generator=g) for n in sizes], 1)
    return custom(DeepFM, {"dense": torch.rand(1, 13, generator=g), "sparse": sparse}, ["ctr"])


class NCF(nn.Module):
    """Neural collaborative filtering (NeuMF): one user scored against 16 candidate items;
    a GMF branch (elementwise product of user/item embeddings, user broadcast) and an MLP
    branch on concatenated embeddings (Expand + Concat), fused by a linear layer + sigmoid."""

    def __init__(self, users=6000, items=4000, d=32):
        super().__init__()
        self.ug, self.ig = nn.Embedding(users, d), nn.Embedding(items, d)
        self.um, self.im = nn.Embedding(users, 2 * d), nn.Embedding(items, 2 * d)
        self.mlp = nn.Sequential(
            nn.Linear(4 * d, 128), nn.ReLU(), nn.Linear(128, 64), nn.ReLU(), nn.Linear(64, 16)
        )
        self.out = nn.Linear(d + 16, 1)
        for e in (self.ug, self.ig, self.um, self.im):
            nn.init.normal_(e.weight, std=0.5)

    def forward(self, user, items):  # (N,) int64, (N, K) int64
        k = items.shape[1]
        gmf = self.ug(user).unsqueeze(1) * self.ig(items)
        um = self.um(user).unsqueeze(1).expand(-1, k, -1)
        h = self.mlp(torch.cat([um, self.im(items)], -1))
        return torch.sigmoid(self.out(torch.cat([gmf, h], -1)).squeeze(-1))


def m_ncf():
    g = torch.Generator().manual_seed(22)
    user = torch.randint(0, 6000, (1,), generator=g)
    items = torch.randint(0, 4000, (1, 16), generator=g)
    return custom(NCF, {"user": user, "items": items}, ["scores"])


class ByteKMaxCNN(nn.Module):
    """Byte-level CNN: byte embedding, parallel Conv1d of widths 2..5 (ReLU), dynamic k-max
    pooling that keeps the k largest activations per channel in their original order (TopK
    over time, sort the indices, GatherElements), highway layer, softmax classifier."""

    def __init__(self, d=32, f=64, k=4, classes=8):
        super().__init__()
        self.emb = nn.Embedding(257, d, padding_idx=256)
        self.convs = nn.ModuleList(nn.Conv1d(d, f, w) for w in (2, 3, 4, 5))
        self.k = k
        n = 4 * f * k
        self.hw_t, self.hw_h = nn.Linear(n, n), nn.Linear(n, n)
        self.fc = nn.Linear(n, classes)

    def forward(self, x):  # (N, T) int64 bytes
        e = self.emb(x).transpose(1, 2)
        pooled = []
        for conv in self.convs:
            y = F.relu(conv(e))
            idx = y.topk(self.k, dim=2).indices.sort(dim=2).values
            pooled.append(y.gather(2, idx).flatten(1))
        h = torch.cat(pooled, 1)
        t = torch.sigmoid(self.hw_t(h))
        h = t * F.relu(self.hw_h(h)) + (1 - t) * h
        return self.fc(h).softmax(-1)


def m_byte_kmax_cnn():
    return custom(ByteKMaxCNN, ids((1, 256), 257, 23, name="bytes"), ["probs"])


class CharCNN(nn.Module):
    """Zhang-et-al.-style character CNN: char embedding, six Conv1d (k 7, 7, 3, 3, 3, 3) with
    three MaxPool1d(3) stages, Flatten of the (N, 256, 5) map, two FC layers + LogSoftmax."""

    def __init__(self, vocab=70, d=32, f=256, classes=4):
        super().__init__()
        self.emb = nn.Embedding(vocab, d)

        def conv(i, k, pool):
            layers = [nn.Conv1d(i, f, k), nn.ReLU()]
            return layers + ([nn.MaxPool1d(3)] if pool else [])

        self.f = nn.Sequential(
            *conv(d, 7, True),
            *conv(f, 7, True),
            *conv(f, 3, False),
            *conv(f, 3, False),
            *conv(f, 3, False),
            *conv(f, 3, True),
        )
        self.fc = nn.Sequential(
            nn.Flatten(), nn.Linear(f * 5, 512), nn.ReLU(), nn.Linear(512, classes)
        )

    def forward(self, x):  # (N, 256) int64
        return F.log_softmax(self.fc(self.f(self.emb(x).transpose(1, 2))), -1)


def m_char_cnn():
    return custom(CharCNN, ids((1, 256), 70, 24, name="chars"), ["log_probs"])


# ================================================================ GQA decoders (RoPE, RMSNorm)
def m_gemma3():
    """Gemma3 (text): 5:1 pattern of sliding-window (window 16, local RoPE base 10k) and
    global layers (RoPE base 1M), q/k RMSNorm, (1+w) RMSNorm pre+post,
    GeGLU, query_pre_attn_scalar, tied scaled embeddings, seq 64."""
    from transformers import Gemma3TextConfig

    cfg = Gemma3TextConfig(
        vocab_size=1000,
        hidden_size=128,
        intermediate_size=384,
        num_hidden_layers=6,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=32,
        max_position_embeddings=256,
        sliding_window=16,
        query_pre_attn_scalar=32,
        pad_token_id=0,
        bos_token_id=2,
        eos_token_id=1,
    )
    return decoder("Gemma3ForCausalLM", cfg)


def m_nemotron():
    """Nemotron: LayerNorm1p (weight stored as w-1), half rotary (partial_rotary_factor 0.5),
    squared-ReLU MLP without gate, 4 heads on 2 KV heads, untied head."""
    from transformers import NemotronConfig

    cfg = NemotronConfig(
        vocab_size=1000,
        hidden_size=128,
        intermediate_size=384,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=32,
        max_position_embeddings=256,
        partial_rotary_factor=0.5,
        pad_token_id=0,
        bos_token_id=1,
        eos_token_id=2,
    )
    wrap, inp, outs = decoder("NemotronForCausalLM", cfg)
    randomize_norms(wrap)
    return wrap, inp, outs


def m_deepseek_v3():
    """DeepSeek-V3-like: multi-head latent attention (low-rank q via q_lora, compressed kv
    latent + a shared decoupled RoPE key, interleaved rotary on 16 of 48 qk dims, v_head_dim
    differs from qk), first layer dense, second a MoE (8 routed experts in 4 groups, sigmoid
    scores + bias, group-limited top-2, normalised and scaled weights, one shared expert)
    computed with the batched_mm experts implementation (a Gather of per-token expert weights)."""
    from transformers import DeepseekV3Config

    cfg = DeepseekV3Config(
        vocab_size=1000,
        hidden_size=128,
        intermediate_size=320,
        moe_intermediate_size=96,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=4,
        n_shared_experts=1,
        n_routed_experts=8,
        n_group=4,
        topk_group=2,
        num_experts_per_tok=2,
        first_k_dense_replace=1,
        kv_lora_rank=64,
        q_lora_rank=96,
        qk_rope_head_dim=16,
        qk_nope_head_dim=32,
        v_head_dim=32,
        max_position_embeddings=256,
        experts_implementation="batched_mm",
        pad_token_id=0,
        bos_token_id=1,
        eos_token_id=2,
    )
    return decoder("DeepseekV3ForCausalLM", cfg)


def m_qwen3_moe():
    """Qwen3-MoE: q/k RMSNorm per head, 8 heads on 2 KV heads, every layer a MoE of 8 experts
    (softmax router, top-2, not renormalised) via batched_mm, no shared expert."""
    from transformers import Qwen3MoeConfig

    cfg = Qwen3MoeConfig(
        vocab_size=1000,
        hidden_size=128,
        intermediate_size=256,
        moe_intermediate_size=96,
        num_hidden_layers=2,
        num_attention_heads=8,
        num_key_value_heads=2,
        head_dim=16,
        num_experts=8,
        num_experts_per_tok=2,
        max_position_embeddings=256,
        experts_implementation="batched_mm",
        pad_token_id=0,
        bos_token_id=1,
        eos_token_id=2,
    )
    return decoder("Qwen3MoeForCausalLM", cfg)


def m_exaone4():
    """EXAONE 4: hybrid attention (3 sliding-window layers with RoPE, then one global layer
    without RoPE), q/k RMSNorm, norms after attention/MLP (post-LN residual), 4:1 GQA."""
    from transformers import Exaone4Config

    cfg = Exaone4Config(
        vocab_size=1000,
        hidden_size=128,
        intermediate_size=320,
        num_hidden_layers=4,
        num_attention_heads=8,
        num_key_value_heads=2,
        max_position_embeddings=256,
        sliding_window=16,
        sliding_window_pattern=4,
        pad_token_id=0,
        bos_token_id=1,
        eos_token_id=2,
    )
    return decoder("Exaone4ForCausalLM", cfg)


# ================================================================ GPT-2-like decoders
def m_openai_gpt():
    """OpenAI GPT (GPT-1): post-LayerNorm blocks (LN after each residual add), learned
    positions, Conv1D (transposed) projections, gelu, no final LayerNorm, LM head."""
    from transformers import OpenAIGPTConfig

    cfg = OpenAIGPTConfig(vocab_size=1000, n_positions=128, n_embd=128, n_layer=3, n_head=4)
    return hf("OpenAIGPTLMHeadModel", cfg, text_inputs(1000, seq=64), ["logits"])


def m_gpt2_scaled():
    """GPT-2 with scale_attn_by_inverse_layer_idx (scores also divided by layer index + 1) and
    reorder_and_upcast_attn (baddbmm of pre-scaled q and k), relu activation, 4 layers."""
    from transformers import GPT2Config

    cfg = GPT2Config(
        vocab_size=1000,
        n_positions=128,
        n_embd=128,
        n_layer=4,
        n_head=4,
        activation_function="relu",
        scale_attn_by_inverse_layer_idx=True,
        reorder_and_upcast_attn=True,
    )
    return hf("GPT2LMHeadModel", cfg, text_inputs(1000, seq=64), ["logits"], {"use_cache": False})


def m_kosmos2_text():
    """Kosmos-2 text decoder: sinusoidal positions offset by the padding index, scaled
    embeddings, sub-LayerNorm (ffn_layernorm inside the MLP), pre-LN, tied LM head."""
    from transformers.models.kosmos2.configuration_kosmos2 import Kosmos2TextConfig
    from transformers.models.kosmos2.modeling_kosmos2 import Kosmos2TextForCausalLM

    cfg = Kosmos2TextConfig(
        vocab_size=1000,
        max_position_embeddings=256,
        embed_dim=128,
        layers=3,
        ffn_dim=256,
        attention_heads=4,
        dropout=0.0,
        attention_dropout=0.0,
    )
    cfg._attn_implementation = "eager"
    torch.manual_seed(0)
    m = randomize_norms(Kosmos2TextForCausalLM(cfg).eval())
    inp = text_inputs(1000, seq=64)
    fn = lambda m, i, a: (m(input_ids=i, attention_mask=a, use_cache=False).logits,)  # noqa: E731
    return Call(m, fn).eval(), inp, ["logits"]


# ================================================================ small ViTs
def m_vitdet():
    """ViTDet backbone: plain ViT with windowed attention (window 4) in most blocks and global
    attention in two, decomposed relative position embeddings (per-axis, interpolated), absolute
    position embeddings interpolated to a non-square 64x96 image, residual conv blocks after
    two layers, feature map out."""
    from transformers import VitDetConfig

    cfg = VitDetConfig(
        hidden_size=128,
        num_hidden_layers=4,
        num_attention_heads=4,
        mlp_ratio=2,
        image_size=64,
        pretrain_image_size=64,
        patch_size=8,
        window_size=4,
        window_block_indices=[0, 2],
        residual_block_indices=[1, 3],
        use_relative_position_embeddings=True,
        out_features=["stage4"],
    )
    wrap, inp, _ = hf("VitDetBackbone", cfg, image_inputs(64, 96), ["feature_maps"], jit=True)
    fn = lambda m, x: (m.model(pixel_values=x).feature_maps[0],)  # noqa: E731
    return Call(wrap, fn).eval(), inp, ["feature_map"]


def m_dinov2_registers():
    """DINOv2 with registers: CLS + 4 register tokens, bicubic-interpolated position
    embeddings (image 70x98 from a 112 pretrain grid), SwiGLU FFN, layer scale."""
    from transformers import Dinov2WithRegistersConfig

    cfg = Dinov2WithRegistersConfig(
        hidden_size=128,
        num_hidden_layers=3,
        num_attention_heads=4,
        mlp_ratio=2,
        image_size=112,
        patch_size=14,
        num_register_tokens=4,
        use_swiglu_ffn=True,
        layerscale_value=0.5,
    )
    return hf(
        "Dinov2WithRegistersModel",
        cfg,
        image_inputs(70, 98),
        ["last_hidden_state", "pooler_output"],
        jit=True,
    )


def m_pix2struct_vision():
    """Pix2Struct vision encoder: variable-resolution flattened patches (row/col ids in the
    first two features, looked up in row and column embedding tables), T5-style RMSNorm,
    gated-gelu MLP, attention mask over padded patches."""
    from transformers import Pix2StructVisionConfig

    cfg = Pix2StructVisionConfig(
        hidden_size=128,
        patch_embed_hidden_size=16 * 16 * 3,
        d_ff=256,
        d_kv=32,
        num_hidden_layers=3,
        num_attention_heads=4,
        seq_len=128,
        initializer_factor=1.0,
    )
    g = torch.Generator().manual_seed(25)
    n, p = 96, 16 * 16 * 3
    rows = torch.arange(n) // 12 + 1
    cols = torch.arange(n) % 12 + 1
    flat = torch.randn(n, p, generator=g)
    flat = torch.cat([rows[:, None].float(), cols[:, None].float(), flat], 1)
    mask = torch.ones(1, n, dtype=torch.float32)
    flat[84:] = 0.0  # trailing padded patches
    mask[0, 84:] = 0
    inp = {"flattened_patches": flat[None], "attention_mask": mask}
    return hf("Pix2StructVisionModel", cfg, inp, ["last_hidden_state"], jit=True)


# ================================================================ window-attention vision
def m_donut_swin():
    """Donut's Swin encoder on a 130x98 image: the patch embedding pads the image to a
    multiple of the patch (33x25 tokens), and every stage pads its token map (33x25, 17x13,
    9x7) up to the 7x7 windows (shifted windows, relative position bias), patch merging with
    odd-size padding."""
    from transformers import DonutSwinConfig

    cfg = DonutSwinConfig(
        image_size=[130, 98],
        patch_size=4,
        embed_dim=32,
        depths=[2, 2, 2],
        num_heads=[2, 4, 8],
        window_size=7,
        drop_path_rate=0.0,
    )
    return hf("DonutSwinModel", cfg, image_inputs(130, 98), ["last_hidden_state"], jit=True)


class Attention(nn.Module):
    """Plain multi-head attention on (N, L, C) with separate q and kv inputs."""

    def __init__(self, d, heads):
        super().__init__()
        self.heads = heads
        self.q, self.kv, self.proj = nn.Linear(d, d), nn.Linear(d, 2 * d), nn.Linear(d, d)

    def forward(self, x, ctx=None):
        n, lq, d = x.shape
        ctx = x if ctx is None else ctx
        h = self.heads
        q = self.q(x).reshape(n, lq, h, d // h).transpose(1, 2)
        k, v = self.kv(ctx).reshape(n, -1, 2, h, d // h).permute(2, 0, 3, 1, 4)
        a = (q @ k.transpose(-2, -1) * (d // h) ** -0.5).softmax(-1)
        return self.proj((a @ v).transpose(1, 2).reshape(n, lq, d))


def mlp(d, r=2):
    return nn.Sequential(nn.Linear(d, r * d), nn.GELU(), nn.Linear(r * d, d))


class TwinsSVT(nn.Module):
    """Twins-SVT-like: conv patch embeddings, blocks alternating locally-grouped attention
    (non-overlapping 4x4 windows by reshape/permute) and global sub-sampled attention (keys
    and values from a strided conv + LayerNorm), a conditional position encoding (depthwise
    3x3 conv, residual) after each stage's first block, 128x128."""

    class LSA(nn.Module):
        def __init__(self, d, heads, ws):
            super().__init__()
            self.n1, self.att, self.n2, self.mlp = (
                nn.LayerNorm(d),
                Attention(d, heads),
                nn.LayerNorm(d),
                mlp(d),
            )
            self.ws = ws

        def forward(self, x, hw):
            n, L, c = x.shape
            h, w = hw
            s = self.ws
            y = self.n1(x).reshape(n, h // s, s, w // s, s, c).transpose(2, 3)
            y = self.att(y.reshape(-1, s * s, c))
            y = y.reshape(n, h // s, w // s, s, s, c).transpose(2, 3).reshape(n, L, c)
            x = x + y
            return x + self.mlp(self.n2(x))

    class GSA(nn.Module):
        def __init__(self, d, heads, sr):
            super().__init__()
            self.n1, self.att, self.n2, self.mlp = (
                nn.LayerNorm(d),
                Attention(d, heads),
                nn.LayerNorm(d),
                mlp(d),
            )
            self.sr = nn.Conv2d(d, d, sr, sr) if sr > 1 else None
            self.srn = nn.LayerNorm(d)

        def forward(self, x, hw):
            n, L, c = x.shape
            y = self.n1(x)
            ctx = y
            if self.sr is not None:
                ctx = self.sr(y.transpose(1, 2).reshape(n, c, *hw)).flatten(2).transpose(1, 2)
                ctx = self.srn(ctx)
            x = x + self.att(y, ctx)
            return x + self.mlp(self.n2(x))

    def __init__(self, dims=(32, 64, 128, 192), heads=(1, 2, 4, 6), srs=(8, 4, 2, 1)):
        super().__init__()
        self.embeds, self.stages, self.pegs = nn.ModuleList(), nn.ModuleList(), nn.ModuleList()
        cin = 3
        for i, d in enumerate(dims):
            p = 4 if i == 0 else 2
            self.embeds.append(nn.ModuleList([nn.Conv2d(cin, d, p, p), nn.LayerNorm(d)]))
            if i < 3:
                blocks = [TwinsSVT.LSA(d, heads[i], 4), TwinsSVT.GSA(d, heads[i], srs[i])] * 1
            else:
                blocks = [TwinsSVT.GSA(d, heads[i], 1), TwinsSVT.GSA(d, heads[i], 1)]
            self.stages.append(nn.ModuleList(blocks))
            self.pegs.append(nn.Conv2d(d, d, 3, 1, 1, groups=d))
            cin = d
        self.norm = nn.LayerNorm(dims[-1])
        self.fc = nn.Linear(dims[-1], 100)

    def forward(self, x):
        n = x.shape[0]
        for (conv, ln), blocks, peg in zip(self.embeds, self.stages, self.pegs):
            x = conv(x)
            hw = x.shape[2:]
            c = x.shape[1]
            t = ln(x.flatten(2).transpose(1, 2))
            for j, b in enumerate(blocks):
                t = b(t, hw)
                if j == 0:
                    g = t.transpose(1, 2).reshape(n, c, *hw)
                    t = t + peg(g).flatten(2).transpose(1, 2)
            x = t.transpose(1, 2).reshape(n, c, *hw)
        return self.fc(self.norm(x.flatten(2).mean(2)))


def m_twins_svt():
    return custom(TwinsSVT, image_inputs(128), ["logits"])


class CSWin(nn.Module):
    """CSWin-like: cross-shaped window attention - half the heads attend within horizontal
    stripes (sw rows x full width), the other half within vertical stripes, with a locally
    enhanced positional encoding (depthwise 3x3 conv on V inside each stripe); 7x7 stride-4
    conv stem, 3x3 stride-2 conv merging, stripe widths 1/2/4 and a last full-attention
    stage, 128x128."""

    class Block(nn.Module):
        def __init__(self, d, heads, sw):
            super().__init__()
            self.d, self.heads, self.sw = d, heads, sw
            self.n1 = nn.LayerNorm(d)
            self.qkv = nn.Linear(d, 3 * d)
            split = 1 if sw == 0 else 2
            self.lepe = nn.ModuleList(
                nn.Conv2d(d // split, d // split, 3, 1, 1, groups=d // split) for _ in range(split)
            )
            self.proj = nn.Linear(d, d)
            self.n2, self.mlp = nn.LayerNorm(d), mlp(d, 4)

        def stripes(self, q, k, v, hs, ws, conv, h, w):
            """q, k, v: (N, H, W, c) -> attention inside hs x ws windows, c split in heads."""
            n, _, _, c = q.shape
            nh = self.heads if self.sw == 0 else self.heads // 2

            def win(t):
                t = t.reshape(n, h // hs, hs, w // ws, ws, c).permute(0, 1, 3, 2, 4, 5)
                return t.reshape(-1, hs * ws, c)

            qw, kw, vw = win(q), win(k), win(v)
            lepe = conv(vw.transpose(1, 2).reshape(-1, c, hs, ws)).flatten(2).transpose(1, 2)

            def hd(t):
                return t.reshape(t.shape[0], hs * ws, nh, c // nh).transpose(1, 2)

            a = (hd(qw) @ hd(kw).transpose(-2, -1) * (c // nh) ** -0.5).softmax(-1)
            o = (a @ hd(vw)).transpose(1, 2).reshape(-1, hs * ws, c) + lepe
            o = o.reshape(n, h // hs, w // ws, hs, ws, c).permute(0, 1, 3, 2, 4, 5)
            return o.reshape(n, h, w, c)

        def forward(self, x):  # (N, H, W, C)
            n, h, w, c = x.shape
            q, k, v = self.qkv(self.n1(x)).chunk(3, -1)
            if self.sw == 0:
                o = self.stripes(q, k, v, h, w, self.lepe[0], h, w)
            else:
                c2 = c // 2
                o = torch.cat(
                    [
                        self.stripes(
                            q[..., :c2], k[..., :c2], v[..., :c2], self.sw, w, self.lepe[0], h, w
                        ),
                        self.stripes(
                            q[..., c2:], k[..., c2:], v[..., c2:], h, self.sw, self.lepe[1], h, w
                        ),
                    ],
                    -1,
                )
            x = x + self.proj(o)
            return x + self.mlp(self.n2(x))

    def __init__(self, dims=(32, 64, 128, 256), heads=(2, 4, 8, 8), sws=(1, 2, 4, 0)):
        super().__init__()
        self.stem = nn.Conv2d(3, dims[0], 7, 4, 3)
        self.stem_norm = nn.LayerNorm(dims[0])
        self.stages = nn.ModuleList()
        self.merges = nn.ModuleList()
        for i, d in enumerate(dims):
            self.stages.append(
                nn.Sequential(
                    *[CSWin.Block(d, heads[i], sws[i]) for _ in range(1 if i == 3 else 2)]
                )
            )
            if i < 3:
                self.merges.append(
                    nn.ModuleList([nn.Conv2d(d, dims[i + 1], 3, 2, 1), nn.LayerNorm(dims[i + 1])])
                )
        self.norm = nn.LayerNorm(dims[-1])
        self.fc = nn.Linear(dims[-1], 100)

    def forward(self, x):
        x = self.stem_norm(self.stem(x).permute(0, 2, 3, 1))
        for i, st in enumerate(self.stages):
            x = st(x)
            if i < 3:
                conv, ln = self.merges[i]
                x = ln(conv(x.permute(0, 3, 1, 2)).permute(0, 2, 3, 1))
        return self.fc(self.norm(x.mean((1, 2))))


def m_cswin():
    return custom(CSWin, image_inputs(128), ["logits"])


class NAT(nn.Module):
    """Neighborhood-attention transformer written without natten: each query attends to its
    7x7 (then 5x5) neighbourhood, keys/values gathered by F.unfold (Im2Col) with zero padding,
    padded neighbours masked to -inf, a learned relative position bias per neighbour offset;
    overlapping conv tokenizer and 3x3 stride-2 conv downsamplers, 64x64."""

    class Block(nn.Module):
        def __init__(self, d, heads, k):
            super().__init__()
            self.d, self.heads, self.k = d, heads, k
            self.n1, self.qkv, self.proj = nn.LayerNorm(d), nn.Linear(d, 3 * d), nn.Linear(d, d)
            self.rpb = nn.Parameter(torch.randn(heads, k * k, 1) * 0.5)
            self.n2, self.mlp = nn.LayerNorm(d), mlp(d, 3)

        def forward(self, x):  # (N, H, W, C)
            n, h, w, c = x.shape
            nh, hd, kk = self.heads, c // self.heads, self.k * self.k
            qkv = self.qkv(self.n1(x)).permute(0, 3, 1, 2)  # (N, 3C, H, W)
            q, k, v = qkv.chunk(3, 1)
            k = F.unfold(k, self.k, padding=self.k // 2).reshape(n, nh, hd, kk, h * w)
            v = F.unfold(v, self.k, padding=self.k // 2).reshape(n, nh, hd, kk, h * w)
            q = q.reshape(n, nh, hd, 1, h * w) * hd**-0.5
            ones = torch.ones(1, 1, h, w, dtype=x.dtype, device=x.device)
            valid = F.unfold(ones, self.k, padding=self.k // 2).reshape(1, 1, kk, h * w)
            a = (q * k).sum(2) + self.rpb  # (N, nh, kk, HW)
            a = a.masked_fill(valid == 0, float("-inf")).softmax(2)
            o = (a.unsqueeze(2) * v).sum(3).reshape(n, c, h, w).permute(0, 2, 3, 1)
            x = x + self.proj(o)
            return x + self.mlp(self.n2(x))

    def __init__(self, dims=(32, 64, 128), heads=(2, 4, 8), ks=(7, 7, 5), depths=(2, 2, 2)):
        super().__init__()
        self.stem = nn.Sequential(
            nn.Conv2d(3, dims[0] // 2, 3, 2, 1), nn.Conv2d(dims[0] // 2, dims[0], 3, 2, 1)
        )
        self.stages = nn.ModuleList(
            nn.Sequential(*[NAT.Block(d, h, k) for _ in range(n)])
            for d, h, k, n in zip(dims, heads, ks, depths)
        )
        self.downs = nn.ModuleList(nn.Conv2d(a, b, 3, 2, 1) for a, b in zip(dims, dims[1:]))
        self.norm = nn.LayerNorm(dims[-1])
        self.fc = nn.Linear(dims[-1], 100)

    def forward(self, x):
        x = self.stem(x).permute(0, 2, 3, 1)
        for i, st in enumerate(self.stages):
            x = st(x)
            if i < len(self.downs):
                x = self.downs[i](x.permute(0, 3, 1, 2)).permute(0, 2, 3, 1)
        return self.fc(self.norm(x.mean((1, 2))))


def m_nat():
    return custom(NAT, image_inputs(64), ["logits"])


# ================================================================ 1-D conv audio encoders
class ECAPA(nn.Module):
    """ECAPA-TDNN: Conv1d stem, three SE-Res2Net blocks (1x1 conv, Res2Net split into 8 scales
    with a chain of dilated k3 Conv1d, 1x1 conv, squeeze-excitation over time, residual) with
    dilations 2/3/4, multi-layer feature aggregation (concat + 1x1 conv), attentive statistics
    pooling with global context (mean/std broadcast over time, attention softmax over time,
    weighted mean and std), BatchNorm1d + linear speaker embedding. 80-dim fbank, 200 frames."""

    class SERes2(nn.Module):
        def __init__(self, c, d, scale=8):
            super().__init__()
            w = c // scale
            self.scale, self.w = scale, w

            def tdnn(i, o, k=1, dil=1):
                return nn.Sequential(
                    nn.Conv1d(i, o, k, dilation=dil, padding=dil * (k - 1) // 2),
                    nn.ReLU(),
                    nn.BatchNorm1d(o),
                )

            self.c1 = tdnn(c, c)
            self.convs = nn.ModuleList(tdnn(w, w, 3, d) for _ in range(scale - 1))
            self.c2 = tdnn(c, c)
            self.se = nn.Sequential(
                nn.Conv1d(c, c // 4, 1), nn.ReLU(), nn.Conv1d(c // 4, c, 1), nn.Sigmoid()
            )

        def forward(self, x):
            y = self.c1(x)
            parts = list(torch.split(y, self.w, 1))
            outs, sp = [parts[0]], None
            for i, conv in enumerate(self.convs):
                sp = conv(parts[i + 1] if i == 0 else sp + parts[i + 1])
                outs.append(sp)
            y = self.c2(torch.cat(outs, 1))
            y = y * self.se(y.mean(2, keepdim=True))
            return x + y

    def __init__(self, fbank=80, c=256, emb=192):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv1d(fbank, c, 5, padding=2), nn.ReLU(), nn.BatchNorm1d(c))
        self.blocks = nn.ModuleList(ECAPA.SERes2(c, d) for d in (2, 3, 4))
        self.mfa = nn.Sequential(nn.Conv1d(3 * c, 3 * c, 1), nn.ReLU())
        self.att = nn.Sequential(
            nn.Conv1d(9 * c, 128, 1),
            nn.ReLU(),
            nn.BatchNorm1d(128),
            nn.Tanh(),
            nn.Conv1d(128, 3 * c, 1),
        )
        self.bn = nn.BatchNorm1d(6 * c)
        self.fc = nn.Linear(6 * c, emb)

    def forward(self, x):  # (N, T, F)
        x = self.stem(x.transpose(1, 2))
        feats = []
        for b in self.blocks:
            x = b(x)
            feats.append(x)
        h = self.mfa(torch.cat(feats, 1))
        t = h.shape[2]
        mu = h.mean(2, keepdim=True)
        sd = (h.var(2, keepdim=True, unbiased=False).clamp(min=1e-4)).sqrt()
        ctx = torch.cat([h, mu.expand(-1, -1, t), sd.expand(-1, -1, t)], 1)
        a = self.att(ctx).softmax(2)
        m = (a * h).sum(2)
        s = ((a * h * h).sum(2) - m * m).clamp(min=1e-4).sqrt()
        return self.fc(self.bn(torch.cat([m, s], 1)))


def m_ecapa_tdnn():
    return custom(ECAPA, feats((1, 200, 80), 31), ["embedding"], init_gain=1.0)


class GLN(nn.Module):
    """Global layer norm of Conv-TasNet: mean/var over (C, T) per sample, per-channel affine."""

    def __init__(self, c):
        super().__init__()
        self.g = nn.Parameter(torch.empty(1, c, 1).uniform_(0.7, 1.3))
        self.b = nn.Parameter(torch.empty(1, c, 1).uniform_(-0.1, 0.1))

    def forward(self, x):
        mu = x.mean((1, 2), keepdim=True)
        var = ((x - mu) ** 2).mean((1, 2), keepdim=True)
        return self.g * (x - mu) / (var + 1e-8).sqrt() + self.b


class ConvTasNet(nn.Module):
    """Conv-TasNet: learned Conv1d encoder (L 16, stride 8) + ReLU, a temporal conv network
    separator (gLN, bottleneck, 2 repeats x 4 blocks of 1x1 conv + PReLU + gLN + dilated
    depthwise Conv1d (dilation 1..8) + PReLU + gLN, residual and skip 1x1 convs), sigmoid masks
    for 2 sources, ConvTranspose1d decoder back to waveforms. 8000 samples (1 s at 8 kHz)."""

    def __init__(self, n=64, b=64, h=128, repeats=2, x=4, src=2, length=16):
        super().__init__()
        self.src, self.n = src, n
        self.enc = nn.Conv1d(1, n, length, length // 2, bias=False)
        self.norm, self.bott = GLN(n), nn.Conv1d(n, b, 1)
        self.blocks = nn.ModuleList()
        for _ in range(repeats):
            for i in range(x):
                d = 2**i
                self.blocks.append(
                    nn.ModuleDict(
                        {
                            "inp": nn.Sequential(nn.Conv1d(b, h, 1), nn.PReLU(), GLN(h)),
                            "dw": nn.Sequential(
                                nn.Conv1d(h, h, 3, padding=d, dilation=d, groups=h),
                                nn.PReLU(),
                                GLN(h),
                            ),
                            "res": nn.Conv1d(h, b, 1),
                            "skip": nn.Conv1d(h, b, 1),
                        }
                    )
                )
        self.mask = nn.Sequential(nn.PReLU(), nn.Conv1d(b, src * n, 1))
        self.dec = nn.ConvTranspose1d(n, 1, length, length // 2, bias=False)

    def forward(self, wav):  # (N, T)
        w = F.relu(self.enc(wav.unsqueeze(1)))  # (N, n, frames)
        y = self.bott(self.norm(w))
        skip = 0
        for blk in self.blocks:
            z = blk["dw"](blk["inp"](y))
            y = y + blk["res"](z)
            skip = skip + blk["skip"](z)
        m = torch.sigmoid(self.mask(skip)).reshape(w.shape[0], self.src, self.n, -1)
        s = (m * w.unsqueeze(1)).reshape(-1, self.n, w.shape[2])
        return self.dec(s).reshape(w.shape[0], self.src, -1)


def m_conv_tasnet():
    g = torch.Generator().manual_seed(32)
    return custom(ConvTasNet, {"wav": torch.randn(1, 8000, generator=g)}, ["sources"])


class XVector(nn.Module):
    """x-vector TDNN: five frame-level Conv1d layers with dilations 1/2/3 (context 5, 3, 3, 1,
    1, no padding so time shrinks), ReLU + BatchNorm1d, statistics pooling (mean and std over
    time), two segment-level layers, log-softmax over 100 speakers + the embedding."""

    def __init__(self, fdim=30, c=256, spk=100):
        super().__init__()

        def tdnn(i, o, k, d):
            return nn.Sequential(nn.Conv1d(i, o, k, dilation=d), nn.ReLU(), nn.BatchNorm1d(o))

        self.frames = nn.Sequential(
            tdnn(fdim, c, 5, 1),
            tdnn(c, c, 3, 2),
            tdnn(c, c, 3, 3),
            tdnn(c, c, 1, 1),
            tdnn(c, 3 * c, 1, 1),
        )
        self.seg1 = nn.Linear(6 * c, 256)
        self.seg2 = nn.Sequential(nn.ReLU(), nn.BatchNorm1d(256), nn.Linear(256, 256), nn.ReLU())
        self.out = nn.Linear(256, spk)

    def forward(self, x):  # (N, T, F)
        h = self.frames(x.transpose(1, 2))
        stats = torch.cat([h.mean(2), h.std(2)], 1)
        emb = self.seg1(stats)
        return emb, F.log_softmax(self.out(self.seg2(emb)), -1)


def m_xvector_tdnn():
    return custom(XVector, feats((1, 150, 30), 33), ["embedding", "log_probs"], init_gain=1.0)


def m_mimi_encoder():
    """Mimi (Kyutai) encoder: causal SEANet (causal Conv1d with constant left padding, ELU
    residual units, strided downsampling 4/5/6/8), a 2-layer transformer with
    RoPE, layer scale and a sliding window, then a replicate-padded strided Conv1d to 12.5 Hz
    latents. 1 s of 24 kHz audio."""
    from transformers import MimiEncoderConfig

    cfg = MimiEncoderConfig(
        hidden_size=64,
        num_filters=16,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=4,
        head_dim=16,
        intermediate_size=128,
        sliding_window=16,
        layer_scale_initial_scale=0.3,
    )
    g = torch.Generator().manual_seed(34)
    inp = {"input_values": torch.randn(1, 1, 24000, generator=g) * 0.3}
    wrap, inp, outs = hf("MimiEncoderModel", cfg, inp, ["latents"], {"use_streaming": False})
    randomize_norms(wrap)
    return wrap, inp, outs


# ================================================================ others
class PointNet(nn.Module):
    """PointNet: input T-Net predicting a 3x3 transform (shared MLP by Conv1d, max over points,
    FC + identity, bmm), shared MLP, 64x64 feature T-Net, max-pooled global feature; a
    classification head and a per-point segmentation head (global feature broadcast + concat).
    1024 points."""

    class TNet(nn.Module):
        def __init__(self, k):
            super().__init__()
            self.k = k
            self.f = nn.Sequential(
                nn.Conv1d(k, 64, 1),
                nn.BatchNorm1d(64),
                nn.ReLU(),
                nn.Conv1d(64, 128, 1),
                nn.BatchNorm1d(128),
                nn.ReLU(),
                nn.Conv1d(128, 256, 1),
                nn.ReLU(),
            )
            self.fc = nn.Sequential(nn.Linear(256, 128), nn.ReLU(), nn.Linear(128, k * k))
            self.register_buffer("eye", torch.eye(k).flatten(), False)

        def forward(self, x):
            t = self.fc(self.f(x).max(2).values) * 0.1 + self.eye
            return torch.bmm(t.view(-1, self.k, self.k), x)

    def __init__(self, classes=16, parts=8):
        super().__init__()
        self.t3, self.t64 = PointNet.TNet(3), PointNet.TNet(64)
        self.mlp1 = nn.Sequential(
            nn.Conv1d(3, 64, 1), nn.BatchNorm1d(64), nn.ReLU(), nn.Conv1d(64, 64, 1), nn.ReLU()
        )
        self.mlp2 = nn.Sequential(
            nn.Conv1d(64, 128, 1), nn.BatchNorm1d(128), nn.ReLU(), nn.Conv1d(128, 512, 1)
        )
        self.cls = nn.Sequential(
            nn.Linear(512, 256), nn.BatchNorm1d(256), nn.ReLU(), nn.Linear(256, classes)
        )
        self.seg = nn.Sequential(
            nn.Conv1d(576, 128, 1), nn.BatchNorm1d(128), nn.ReLU(), nn.Conv1d(128, parts, 1)
        )

    def forward(self, pts):  # (N, P, 3)
        x = self.t3(pts.transpose(1, 2))
        f = self.t64(self.mlp1(x))
        g = self.mlp2(f).max(2).values
        seg = self.seg(torch.cat([f, g.unsqueeze(2).expand(-1, -1, f.shape[2])], 1))
        return self.cls(g), seg.transpose(1, 2)


def m_pointnet():
    return custom(
        PointNet, feats((1, 1024, 3), 35, "points"), ["logits", "part_logits"], init_gain=1.0
    )


class DenseGNN(nn.Module):
    """Graph net on dense adjacency matrices: symmetric normalisation D^-1/2 (A + I) D^-1/2
    computed in-graph, three GCN layers (bmm), a GAT-style layer (pairwise additive scores,
    LeakyReLU, softmax masked to the edges), mean + max readout, MLP graph classifier and
    per-node outputs. 64 nodes, 16 features."""

    def __init__(self, fin=16, d=64, classes=6):
        super().__init__()
        self.gcn = nn.ModuleList(nn.Linear(a, d) for a in (fin, d, d))
        self.gat = nn.Linear(d, d)
        self.a_src, self.a_dst = nn.Linear(d, 1), nn.Linear(d, 1)
        self.node = nn.Linear(d, 4)
        self.head = nn.Sequential(nn.Linear(2 * d, d), nn.ReLU(), nn.Linear(d, classes))

    def forward(self, x, adj):  # (N, V, F), (N, V, V) 0/1 float
        a = adj + torch.eye(adj.shape[1], dtype=adj.dtype)
        dinv = a.sum(2).pow(-0.5)
        an = dinv.unsqueeze(2) * a * dinv.unsqueeze(1)
        h = x
        for lin in self.gcn:
            h = F.relu(torch.bmm(an, lin(h)))
        z = self.gat(h)
        e = F.leaky_relu(self.a_src(z) + self.a_dst(z).transpose(1, 2), 0.2)
        att = e.masked_fill(a == 0, float("-inf")).softmax(2)
        h = F.elu(torch.bmm(att, z)) + h
        g = torch.cat([h.mean(1), h.max(1).values], 1)
        return self.head(g), self.node(h)


def m_dense_gnn():
    g = torch.Generator().manual_seed(36)
    v = 64
    adj = (torch.rand(1, v, v, generator=g) < 0.08).float()
    adj = ((adj + adj.transpose(1, 2)) > 0).float()
    inp = {"x": torch.randn(1, v, 16, generator=g), "adj": adj}
    return custom(DenseGNN, inp, ["graph_logits", "node_logits"], init_gain=1.0)


def sparsemax(z, dim=-1):
    """Sparsemax (Martins & Astudillo): sort, cumulative sum, support size, threshold."""
    zs = z.sort(dim, descending=True).values
    k = torch.arange(1, z.shape[dim] + 1, dtype=z.dtype)
    cs = zs.cumsum(dim)
    support = (1 + k * zs > cs).to(z.dtype)
    ks = support.sum(dim, keepdim=True)
    tau = ((cs * support).max(dim, keepdim=True).values - 1) / ks
    return (z - tau).clamp(min=0)


class TabNet(nn.Module):
    """TabNet-like: input BatchNorm1d, feature transformers of GLU blocks (shared + step
    specific, residual scaled by sqrt(0.5)), attentive transformers producing sparsemax feature
    masks with a relaxation prior, 4 decision steps whose ReLU outputs are summed; also
    returns the aggregated feature importance mask. 48 features."""

    def __init__(self, fin=48, nd=16, na=16, steps=4, gamma=1.3, classes=3):
        super().__init__()
        self.nd, self.steps, self.gamma = nd, steps, gamma
        self.bn = nn.BatchNorm1d(fin)

        def glu(i):
            return nn.Sequential(
                nn.Linear(i, 2 * (nd + na), bias=False), nn.BatchNorm1d(2 * (nd + na))
            )

        self.shared = nn.ModuleList([glu(fin), glu(nd + na)])
        self.spec = nn.ModuleList(
            nn.ModuleList([glu(nd + na), glu(nd + na)]) for _ in range(steps + 1)
        )
        self.att = nn.ModuleList(
            nn.Sequential(nn.Linear(na, fin, bias=False), nn.BatchNorm1d(fin)) for _ in range(steps)
        )
        self.fc = nn.Linear(nd, classes)

    def ft(self, x, i):
        h = F.glu(self.shared[0](x))
        h = (h + F.glu(self.shared[1](h))) * 0.5**0.5
        for layer in self.spec[i]:
            h = (h + F.glu(layer(h))) * 0.5**0.5
        return h

    def forward(self, x):
        x = self.bn(x)
        prior = torch.ones_like(x)
        a = self.ft(x, 0)[:, self.nd :]
        out, agg = 0, 0
        for s in range(self.steps):
            m = sparsemax(self.att[s](a) * prior)
            prior = prior * (self.gamma - m)
            h = self.ft(m * x, s + 1)
            d = F.relu(h[:, : self.nd])
            out = out + d
            agg = agg + m * d.sum(1, keepdim=True)
            a = h[:, self.nd :]
        return self.fc(out), agg


def m_tabnet():
    return custom(TabNet, feats((1, 48), 37), ["logits", "importance"], init_gain=1.0)


class DeformDETR(nn.Module):
    """RT-DETR-like decoder piece: a small strided conv backbone giving 3 feature levels
    (16x16, 8x8, 4x4 of a 128x128 image), 1x1 input projections, 32 learned queries with
    sigmoid reference points, query self-attention, multi-scale deformable cross-attention
    (per-head sampling offsets and softmax weights over levels x points, bilinear GridSample of
    each level's value map), FFN, iterative box refinement (inverse sigmoid), class + box heads."""

    def __init__(self, d=64, heads=4, levels=3, points=4, queries=32, layers=2, classes=10):
        super().__init__()
        self.d, self.h, self.lv, self.p = d, heads, levels, points
        chans = [24, 48, 96, 160]
        self.stem = nn.ModuleList()
        cin = 3
        for i, c in enumerate(chans):
            self.stem.append(cba(cin, c, 3, 2 if i else 4, act=nn.SiLU))
            cin = c
        self.extra = cba(160, 160, 3, 2, act=nn.SiLU)
        self.inproj = nn.ModuleList(nn.Conv2d(c, d, 1) for c in (48, 96, 160))
        self.lvl = nn.Parameter(torch.randn(levels, d) * 0.5)
        self.query = nn.Parameter(torch.randn(queries, d))
        self.ref = nn.Parameter(torch.randn(queries, 4) * 0.8)
        self.layers = nn.ModuleList()
        for _ in range(layers):
            self.layers.append(
                nn.ModuleDict(
                    {
                        "sa": Attention(d, heads),
                        "n1": nn.LayerNorm(d),
                        "off": nn.Linear(d, heads * levels * points * 2),
                        "w": nn.Linear(d, heads * levels * points),
                        "val": nn.Linear(d, d),
                        "out": nn.Linear(d, d),
                        "n2": nn.LayerNorm(d),
                        "ffn": mlp(d, 4),
                        "n3": nn.LayerNorm(d),
                        "box": nn.Sequential(nn.Linear(d, d), nn.ReLU(), nn.Linear(d, 4)),
                    }
                )
            )
        self.cls = nn.Linear(d, classes)

    def deform(self, L, q, ref, maps):
        n, nq, d = q.shape
        h, lv, p, hd = self.h, self.lv, self.p, d // self.h
        off = L["off"](q).reshape(n, nq, h, lv, p, 2)
        w = L["w"](q).reshape(n, nq, h, lv * p).softmax(-1).reshape(n, nq, h, lv, p)
        # boxes as (cx, cy, w, h): offsets scaled by half the box size
        loc = ref[:, :, None, None, None, :2] + off / p * ref[:, :, None, None, None, 2:] * 0.5
        grid = 2 * loc - 1
        out = 0
        for i, m in enumerate(maps):  # m: (N, d, H, W)
            hh, ww = m.shape[2:]
            v = L["val"](m.flatten(2).transpose(1, 2))  # (N, HW, d)
            v = v.transpose(1, 2).reshape(n * h, hd, hh, ww)
            gi = grid[:, :, :, i].permute(0, 2, 1, 3, 4).reshape(n * h, nq, p, 2)
            s = F.grid_sample(v, gi, mode="bilinear", padding_mode="zeros", align_corners=False)
            wi = w[:, :, :, i].permute(0, 2, 1, 3).reshape(n * h, 1, nq, p)
            out = out + (s * wi).sum(-1)  # (N*h, hd, nq)
        out = out.reshape(n, h * hd, nq).transpose(1, 2)
        return L["out"](out)

    def forward(self, x):
        feats = []
        for i, layer in enumerate(self.stem):
            x = layer(x)
            if i >= 1:
                feats.append(x)
        feats = feats[:2] + [self.extra(feats[2])]
        maps = [
            p(f) + self.lvl[i].view(1, -1, 1, 1) for i, (p, f) in enumerate(zip(self.inproj, feats))
        ]
        n = x.shape[0]
        q = self.query.unsqueeze(0).expand(n, -1, -1)
        ref = torch.sigmoid(self.ref).unsqueeze(0).expand(n, -1, -1)
        for L in self.layers:
            q = L["n1"](q + L["sa"](q))
            q = L["n2"](q + self.deform(L, q, ref, maps))
            q = L["n3"](q + L["ffn"](q))
            r = ref.clamp(1e-4, 1 - 1e-4)
            ref = torch.sigmoid(L["box"](q) + torch.log(r / (1 - r)))
        return self.cls(q), ref


def m_deform_detr():
    return custom(DeformDETR, image_inputs(128), ["logits", "boxes"], init_gain=1.0)


def m_detr():
    """DETR: ResNet-18-like backbone (transformers' ResNet, frozen BatchNorm), sine 2-D position
    embeddings, 2 encoder + 2 decoder layers with 20 object queries, class + box MLP heads."""
    from transformers import DetrConfig, ResNetConfig

    bb = ResNetConfig(
        embedding_size=32,
        hidden_sizes=[32, 64, 128, 192],
        depths=[1, 1, 1, 1],
        layer_type="basic",
        out_features=["stage4"],
    )
    cfg = DetrConfig(
        use_timm_backbone=False,
        use_pretrained_backbone=False,
        backbone_config=bb,
        d_model=64,
        encoder_layers=2,
        decoder_layers=2,
        encoder_attention_heads=4,
        decoder_attention_heads=4,
        encoder_ffn_dim=128,
        decoder_ffn_dim=128,
        num_queries=20,
        num_labels=10,
        dropout=0.0,
    )
    wrap, inp, outs = hf(
        "DetrForObjectDetection", cfg, image_inputs(128), ["logits", "pred_boxes"], jit=True
    )
    fan_in_init(wrap.model.bbox_predictor)  # boxes that are not all ~0.5
    return wrap, inp, outs


def m_videomae():
    """VideoMAE encoder: tubelet embedding (Conv3d 2x16x16), fixed sinusoidal position table,
    q/v-only attention biases, mean-pooled + LayerNorm classifier. 8 frames of 64x64."""
    from transformers import VideoMAEConfig

    cfg = VideoMAEConfig(
        image_size=64,
        patch_size=16,
        num_frames=8,
        tubelet_size=2,
        hidden_size=128,
        num_hidden_layers=3,
        num_attention_heads=4,
        intermediate_size=256,
        num_labels=10,
    )
    g = torch.Generator().manual_seed(38)
    inp = {"pixel_values": torch.randn(1, 8, 3, 64, 64, generator=g)}
    return hf("VideoMAEForVideoClassification", cfg, inp, ["logits"], jit=True)


def m_mamba():
    """Mamba (selective state space model), the pure-torch slow path: in-projection to x and
    gate, causal depthwise Conv1d (k 4), input-dependent dt/B/C projections, softplus, a
    sequential selective scan over 32 steps (unrolled), D skip, SiLU gate, RMSNorm."""
    from transformers import MambaConfig

    cfg = MambaConfig(
        vocab_size=1000,
        hidden_size=64,
        state_size=16,
        num_hidden_layers=2,
        expand=2,
        conv_kernel=4,
        time_step_rank=8,
        use_mambapy=False,
        use_associative_scan=False,
        pad_token_id=0,
    )
    return hf(
        "MambaModel",
        cfg,
        text_inputs(1000, mask=False),
        ["last_hidden_state"],
        {"use_cache": False},
        eager=False,
    )


# ================================================================ END OF MODELS
ALL = {k[2:]: v for k, v in globals().items() if k.startswith("m_")}
# Built and checked once, left out of the set (--list) as near repeats; `third.py NAME` still
# builds them.
EXTRA = ()
MODELS = {k: v for k, v in ALL.items() if k not in EXTRA}

if __name__ == "__main__":
    main(ALL if sys.argv[1] in EXTRA else MODELS, sys.argv)
