"""Build small random-init ONNX models of architectures not in the GraphEngine zoo.

Usage: python build.py NAME      (builds one model into $GE_UNSEEN_DIR/NAME/)
       python build.py --list
       python build.py --bench-layout  (writes $GE_UNSEEN_DIR/cache/zoo/NAME/ for each built
                                        model, so that GE_MODEL_CACHE=$GE_UNSEEN_DIR/cache
                                        benchmarks/bench_zoo.py benches them)
$GE_UNSEEN_DIR defaults to ~/.cache/graphengine/unseen (outside git).
Each model: model.onnx (opset 17, dynamic batch axis) + inputs.npz (batch-1 feeds)
+ export.txt (which exporter was used / errors).
"""

import os
import sys
import traceback

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

ROOT = os.path.expanduser(os.environ.get("GE_UNSEEN_DIR", "~/.cache/graphengine/unseen"))
SEQ = 32


def text_inputs(vocab, seq=SEQ, mask=True, lo=3):
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(lo, vocab, (1, seq), generator=g, dtype=torch.long)
    d = {"input_ids": ids}
    if mask:
        m = torch.ones(1, seq, dtype=torch.long)
        m[0, -1] = 0  # one padded position
        d["attention_mask"] = m
    return d


def image_inputs(h, w=None, c=3, name="pixel_values"):
    g = torch.Generator().manual_seed(2)
    return {name: torch.randn(1, c, h, w or h, generator=g)}


class HFWrap(nn.Module):
    def __init__(self, model, names, outs, extra=None):
        super().__init__()
        self.model, self.names, self.outs, self.extra = model, names, outs, extra or {}

    def forward(self, *args):
        r = self.model(**dict(zip(self.names, args)), **self.extra)
        return tuple(r[o] for o in self.outs)


def jitter(m):
    """Perturb params/BN stats so random-init nets do not output ~constant values."""
    g = torch.Generator().manual_seed(7)
    with torch.no_grad():
        for p in m.parameters():
            p.add_(torch.randn(p.shape, generator=g) * 0.05)
        for mod in m.modules():
            if isinstance(mod, nn.BatchNorm2d):
                mod.running_mean.uniform_(-0.2, 0.2, generator=g)
                mod.running_var.uniform_(0.5, 1.5, generator=g)
    return m


def hf(model_cls_name, cfg, inputs, outs, extra=None, eager=True, jit=False):
    import transformers

    cls = getattr(transformers, model_cls_name)
    if eager:
        cfg._attn_implementation = "eager"
    torch.manual_seed(0)
    m = cls(cfg).eval()
    if jit:
        jitter(m)
    # .eval() on the wrapper too: otherwise the dynamo exporter emits Dropout(training_mode=True)
    return HFWrap(m, list(inputs), outs, extra).eval(), inputs, outs


# ---------------------------------------------------------------- HF models
def m_convbert():
    from transformers import ConvBertConfig

    cfg = ConvBertConfig(
        vocab_size=1000,
        hidden_size=128,
        embedding_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=256,
        max_position_embeddings=128,
        head_ratio=2,
        conv_kernel_size=9,
        num_groups=1,
    )
    return hf("ConvBertModel", cfg, text_inputs(1000), ["last_hidden_state"])


def m_esm():
    from transformers import EsmConfig

    cfg = EsmConfig(
        vocab_size=33,
        hidden_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=256,
        max_position_embeddings=128,
        position_embedding_type="rotary",
        pad_token_id=1,
        mask_token_id=32,
        token_dropout=True,
        emb_layer_norm_before=False,
    )
    inp = text_inputs(32, lo=4)
    inp["input_ids"][0, 5] = 32  # a <mask> token exercises token_dropout rescaling
    return hf("EsmModel", cfg, inp, ["last_hidden_state", "pooler_output"])


def m_nystromformer():
    from transformers import NystromformerConfig

    cfg = NystromformerConfig(
        vocab_size=1000,
        hidden_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=256,
        max_position_embeddings=130,
        num_landmarks=8,
        segment_means_seq_len=64,
        conv_kernel_size=33,
    )
    # HF (v5) NystromformerModel builds a (N,1,T,T) mask that cannot be added to the
    # (N,H,landmarks,T)
    # landmark scores, so call embeddings + encoder directly without a mask.
    wrap, inp, outs = hf(
        "NystromformerModel", cfg, text_inputs(1000, seq=64, mask=False), ["last_hidden_state"]
    )
    wrap.forward = lambda ids: (
        wrap.model.encoder(wrap.model.embeddings(input_ids=ids), attention_mask=None)[0],
    )
    return wrap, inp, outs


def m_biogpt():
    from transformers import BioGptConfig

    cfg = BioGptConfig(
        vocab_size=1000,
        hidden_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=256,
        max_position_embeddings=128,
    )
    return hf("BioGptModel", cfg, text_inputs(1000), ["last_hidden_state"], {"use_cache": False})


def m_codegen():
    from transformers import CodeGenConfig

    cfg = CodeGenConfig(
        vocab_size=1000,
        n_positions=128,
        n_ctx=128,
        n_embd=128,
        n_layer=2,
        n_head=4,
        rotary_dim=16,
        n_inner=256,
    )
    return hf("CodeGenModel", cfg, text_inputs(1000), ["last_hidden_state"], {"use_cache": False})


def m_gpt_bigcode():
    from transformers import GPTBigCodeConfig

    cfg = GPTBigCodeConfig(
        vocab_size=1000,
        n_positions=128,
        n_embd=128,
        n_layer=2,
        n_head=4,
        n_inner=256,
        multi_query=True,
    )
    return hf(
        "GPTBigCodeModel", cfg, text_inputs(1000), ["last_hidden_state"], {"use_cache": False}
    )


def m_mpt():
    from transformers import MptConfig

    cfg = MptConfig(
        d_model=128, n_heads=4, n_layers=2, expansion_ratio=2, max_seq_len=128, vocab_size=1000
    )
    return hf("MptModel", cfg, text_inputs(1000), ["last_hidden_state"], {"use_cache": False})


def m_starcoder2():
    from transformers import Starcoder2Config

    cfg = Starcoder2Config(
        vocab_size=1000,
        hidden_size=128,
        intermediate_size=256,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=128,
        sliding_window=8,
    )
    return hf(
        "Starcoder2Model", cfg, text_inputs(1000), ["last_hidden_state"], {"use_cache": False}
    )


def m_cohere():
    from transformers import CohereConfig

    cfg = CohereConfig(
        vocab_size=1000,
        hidden_size=128,
        intermediate_size=256,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=128,
        use_qk_norm=True,
        pad_token_id=0,
        bos_token_id=1,
        eos_token_id=2,
    )
    return hf("CohereForCausalLM", cfg, text_inputs(1000), ["logits"], {"use_cache": False})


def m_xlnet():
    from transformers import XLNetConfig

    cfg = XLNetConfig(vocab_size=1000, d_model=128, n_layer=2, n_head=4, d_inner=256, mem_len=None)
    return hf(
        "XLNetModel",
        cfg,
        text_inputs(1000),
        ["last_hidden_state"],
        {"use_mems": False},
        eager=False,
    )


def m_canine():
    from transformers import CanineConfig

    cfg = CanineConfig(
        hidden_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=256,
        max_position_embeddings=256,
        downsampling_rate=4,
        num_hash_functions=4,
        num_hash_buckets=512,
        local_transformer_stride=16,
        upsampling_kernel_size=4,
    )
    return hf(
        "CanineModel",
        cfg,
        text_inputs(0x3000, seq=64, lo=0x20),
        ["last_hidden_state", "pooler_output"],
        eager=False,
    )


def m_fnet():
    from transformers import FNetConfig

    cfg = FNetConfig(
        vocab_size=1000,
        hidden_size=128,
        num_hidden_layers=2,
        intermediate_size=256,
        max_position_embeddings=128,
        use_tpu_fourier_optimizations=False,
    )
    return hf(
        "FNetModel",
        cfg,
        text_inputs(1000, mask=False),
        ["last_hidden_state", "pooler_output"],
        eager=False,
    )


def m_cvt():
    from transformers import CvtConfig

    cfg = CvtConfig(
        embed_dim=[32, 64, 128], num_heads=[1, 2, 4], depth=[1, 2, 3]
    )  # HF CvtStage indexes drop_path_rates[stage], needs depth[i] > i
    return hf(
        "CvtModel", cfg, image_inputs(64), ["last_hidden_state", "cls_token_value"], eager=False
    )


def m_mobilevitv2():
    from transformers import MobileViTV2Config

    cfg = MobileViTV2Config(image_size=64, width_multiplier=0.5)
    return hf(
        "MobileViTV2Model",
        cfg,
        image_inputs(64),
        ["last_hidden_state", "pooler_output"],
        eager=False,
        jit=True,
    )


def m_dpt():
    from transformers import DPTConfig

    cfg = DPTConfig(
        hidden_size=64,
        num_hidden_layers=4,
        num_attention_heads=4,
        intermediate_size=128,
        image_size=64,
        patch_size=16,
        backbone_out_indices=[0, 1, 2, 3],
        neck_hidden_sizes=[16, 32, 64, 64],
        fusion_hidden_size=32,
        head_in_index=-1,
    )
    return hf("DPTForDepthEstimation", cfg, image_inputs(64), ["predicted_depth"], jit=True)


def m_yolos():
    from transformers import YolosConfig

    cfg = YolosConfig(
        hidden_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=128,
        image_size=[64, 96],
        patch_size=16,
        num_detection_tokens=10,
        num_labels=5,
    )
    return hf("YolosForObjectDetection", cfg, image_inputs(64, 96), ["logits", "pred_boxes"])


def m_sew_d():
    from transformers import SEWDConfig

    cfg = SEWDConfig(
        hidden_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=128,
        conv_dim=(32, 32, 32),
        conv_stride=(5, 2, 2),
        conv_kernel=(10, 3, 3),
        num_conv_pos_embeddings=16,
        num_conv_pos_embedding_groups=4,
        squeeze_factor=2,
        max_position_embeddings=128,
        position_buckets=64,
    )
    g = torch.Generator().manual_seed(3)
    return hf(
        "SEWDModel",
        cfg,
        {"input_values": torch.randn(1, 4000, generator=g)},
        ["last_hidden_state"],
        eager=False,
    )


# ---------------------------------------------------------------- custom torch.nn models
class ResNeXtShuffle(nn.Module):
    """ResNeXt-style grouped bottleneck blocks + channel shuffle, stride-2 stages, GAP + FC."""

    class Block(nn.Module):
        def __init__(self, cin, cout, stride, groups=8):
            super().__init__()
            mid = cout // 2
            self.groups = groups
            self.c1 = nn.Conv2d(cin, mid, 1, bias=False)
            self.b1 = nn.BatchNorm2d(mid)
            self.c2 = nn.Conv2d(mid, mid, 3, stride, 1, groups=groups, bias=False)
            self.b2 = nn.BatchNorm2d(mid)
            self.c3 = nn.Conv2d(mid, cout, 1, bias=False)
            self.b3 = nn.BatchNorm2d(cout)
            self.sc = (
                None
                if (stride == 1 and cin == cout)
                else nn.Sequential(
                    nn.AvgPool2d(stride, stride, ceil_mode=True),
                    nn.Conv2d(cin, cout, 1, bias=False),
                    nn.BatchNorm2d(cout),
                )
            )

        def forward(self, x):
            y = F.relu(self.b1(self.c1(x)))
            n, c, h, w = y.shape
            y = (
                y.view(n, self.groups, c // self.groups, h, w).transpose(1, 2).reshape(n, c, h, w)
            )  # shuffle
            y = F.relu6(self.b2(self.c2(y)))
            y = self.b3(self.c3(y))
            return F.relu(y + (x if self.sc is None else self.sc(x)))

    def __init__(self):
        super().__init__()
        self.stem = nn.Sequential(
            nn.Conv2d(3, 32, 3, 2, 1, bias=False),
            nn.BatchNorm2d(32),
            nn.LeakyReLU(0.1),
            nn.MaxPool2d(3, 2, 1),
        )
        B = ResNeXtShuffle.Block
        self.layers = nn.Sequential(
            B(32, 64, 1), B(64, 64, 1), B(64, 128, 2), B(128, 128, 1), B(128, 256, 2)
        )
        self.fc = nn.Linear(256, 10)

    def forward(self, x):
        f = self.layers(self.stem(x))
        return self.fc(f.mean((2, 3))), f


class TCN(nn.Module):
    """Dilated causal 1-D TCN: weight-normed conv, left padding, GLU gates, residual 1x1,
    softmax head."""

    def __init__(self, cin=40, ch=64, levels=4, k=3):
        super().__init__()
        self.inp = nn.Conv1d(cin, ch, 1)
        self.blocks = nn.ModuleList()
        for i in range(levels):
            d = 2**i
            conv = nn.utils.parametrizations.weight_norm(nn.Conv1d(ch, 2 * ch, k, dilation=d))
            self.blocks.append(
                nn.ModuleDict(
                    {"conv": conv, "res": nn.Conv1d(ch, ch, 1), "norm": nn.GroupNorm(1, ch)}
                )
            )
        self.k = k
        self.head = nn.Conv1d(ch, 12, 1)

    def forward(self, x):  # x: (N, T, C)
        h = self.inp(x.transpose(1, 2))
        skip = 0
        for i, b in enumerate(self.blocks):
            d = 2**i
            y = b["conv"](F.pad(h, ((self.k - 1) * d, 0)))
            y = F.glu(y, dim=1)
            y = b["norm"](y)
            skip = skip + y
            h = h + b["res"](y)
        out = self.head(F.elu(skip))
        return F.log_softmax(out, dim=1).transpose(1, 2)


class UNet(nn.Module):
    """Small U-Net: InstanceNorm/GroupNorm, SiLU, MaxPool down, ConvTranspose up, skip
    concat, sigmoid head."""

    def __init__(self, c=16):
        super().__init__()

        def dbl(i, o, inorm=True):
            return nn.Sequential(
                nn.Conv2d(i, o, 3, padding=1),
                nn.InstanceNorm2d(o, affine=True) if inorm else nn.GroupNorm(4, o),
                nn.SiLU(),
                nn.Conv2d(o, o, 3, padding=1, padding_mode="reflect"),
                nn.GroupNorm(4, o),
                nn.SiLU(),
            )

        self.e1, self.e2, self.e3 = dbl(1, c), dbl(c, 2 * c), dbl(2 * c, 4 * c, False)
        self.mid = dbl(4 * c, 8 * c, False)
        self.u3 = nn.ConvTranspose2d(8 * c, 4 * c, 2, 2)
        self.d3 = dbl(8 * c, 4 * c)
        self.u2 = nn.ConvTranspose2d(4 * c, 2 * c, 4, 2, 1)
        self.d2 = dbl(4 * c, 2 * c)
        self.u1 = nn.ConvTranspose2d(2 * c, c, 3, 2, 1, output_padding=1)
        self.d1 = dbl(2 * c, c)
        self.out = nn.Conv2d(c, 2, 1)

    def forward(self, x):
        e1 = self.e1(x)
        e2 = self.e2(F.max_pool2d(e1, 2))
        e3 = self.e3(F.max_pool2d(e2, 2))
        m = self.mid(F.max_pool2d(e3, 2))
        d3 = self.d3(torch.cat([self.u3(m), e3], 1))
        d2 = self.d2(torch.cat([self.u2(d3), e2], 1))
        d1 = self.d1(torch.cat([self.u1(d2), e1], 1))
        return torch.sigmoid(self.out(d1))


class DWSE(nn.Module):
    """Depthwise-separable net: hard-swish, SE with hard-sigmoid, 5x5 depthwise,
    dropout-free, adaptive avg pool."""

    class Block(nn.Module):
        def __init__(self, cin, cout, k, s, exp):
            super().__init__()
            mid = cin * exp
            self.pw = nn.Sequential(
                nn.Conv2d(cin, mid, 1, bias=False), nn.BatchNorm2d(mid), nn.Hardswish()
            )
            self.dw = nn.Sequential(
                nn.Conv2d(mid, mid, k, s, k // 2, groups=mid, bias=False),
                nn.BatchNorm2d(mid),
                nn.Hardswish(),
            )
            self.se1 = nn.Conv2d(mid, max(8, mid // 4), 1)
            self.se2 = nn.Conv2d(max(8, mid // 4), mid, 1)
            self.pl = nn.Sequential(nn.Conv2d(mid, cout, 1, bias=False), nn.BatchNorm2d(cout))
            self.res = s == 1 and cin == cout

        def forward(self, x):
            y = self.dw(self.pw(x))
            w = F.hardsigmoid(self.se2(F.relu(self.se1(F.adaptive_avg_pool2d(y, 1)))))
            y = self.pl(y * w)
            return x + y if self.res else y

    def __init__(self):
        super().__init__()
        B = DWSE.Block
        self.stem = nn.Sequential(
            nn.Conv2d(3, 16, 3, 2, 1, bias=False), nn.BatchNorm2d(16), nn.Hardswish()
        )
        self.blocks = nn.Sequential(
            B(16, 24, 3, 2, 3),
            B(24, 24, 5, 1, 3),
            B(24, 40, 5, 2, 4),
            B(40, 40, 3, 1, 4),
            B(40, 64, 3, 2, 6),
        )
        self.head = nn.Sequential(
            nn.Conv2d(64, 128, 1),
            nn.Hardswish(),
            nn.AdaptiveAvgPool2d((2, 2)),
            nn.Flatten(),
            nn.Linear(512, 10),
        )

    def forward(self, x):
        return self.head(self.blocks(self.stem(x)))


class BiRNN(nn.Module):
    """Conv front-end -> 2-layer bidirectional LSTM -> GRU -> additive attention pooling +
    per-step logits."""

    def __init__(self, cin=24, h=64):
        super().__init__()
        self.front = nn.Conv1d(cin, h, 5, padding=2)
        self.lstm = nn.LSTM(h, h, num_layers=2, batch_first=True, bidirectional=True)
        self.gru = nn.GRU(2 * h, h, batch_first=True)
        self.att = nn.Linear(h, 1)
        self.cls = nn.Linear(h, 6)

    def forward(self, x):  # (N, T, C)
        y = F.gelu(self.front(x.transpose(1, 2))).transpose(1, 2)
        y, _ = self.lstm(y)
        y, _ = self.gru(y)
        a = torch.softmax(torch.tanh(self.att(y)), dim=1)
        pooled = (a * y).sum(1)
        return self.cls(y), self.cls(pooled)


def custom(cls, inputs, outs):
    torch.manual_seed(0)
    m = cls().eval()
    # make BatchNorm stats non-trivial
    for mod in m.modules():
        if isinstance(mod, nn.BatchNorm2d):
            mod.running_mean.uniform_(-0.2, 0.2)
            mod.running_var.uniform_(0.5, 1.5)
    return m, inputs, outs


def m_resnext_shuffle():
    return custom(ResNeXtShuffle, image_inputs(96), ["logits", "features"])


def m_tcn():
    g = torch.Generator().manual_seed(4)
    return custom(TCN, {"features": torch.randn(1, 64, 40, generator=g)}, ["log_probs"])


def m_unet():
    return custom(UNet, image_inputs(64, c=1, name="image"), ["mask"])


def m_dwse():
    return custom(DWSE, image_inputs(128), ["logits"])


def m_birnn():
    g = torch.Generator().manual_seed(5)
    return custom(
        BiRNN, {"features": torch.randn(1, 48, 24, generator=g)}, ["frame_logits", "utt_logits"]
    )


MODELS = {k[2:]: v for k, v in globals().items() if k.startswith("m_")}


def build(name, models=None):
    """Export models[name]() (default: this file's MODELS) into ROOT/name/."""
    d = os.path.join(ROOT, name)
    os.makedirs(d, exist_ok=True)
    log = []
    model, inputs, outs = (MODELS if models is None else models)[name]()
    names = list(inputs)
    args = tuple(inputs[n] for n in names)
    with torch.no_grad():
        ref = model(*args)
    np.savez(os.path.join(d, "inputs.npz"), **{k: v.numpy() for k, v in inputs.items()})
    dyn = {n: {0: "batch"} for n in names + outs}
    path = os.path.join(d, "model.onnx")
    ok = None
    for dynamo in (False, True):
        try:
            kw = dict(input_names=names, output_names=outs, opset_version=17, dynamo=dynamo)
            if dynamo:
                kw["dynamic_shapes"] = {
                    "args": tuple({0: torch.export.Dim("batch", min=1, max=64)} for _ in names)
                }
                kw["external_data"] = False
            else:
                kw["dynamic_axes"] = dyn
            # dynamo: trace with a batch-2 example, otherwise torch.export may specialise batch to 1
            # and torch.onnx silently falls back to a static-shape export
            ex = tuple(a.repeat(2, *[1] * (a.dim() - 1)) for a in args) if dynamo else args
            with torch.no_grad():
                torch.onnx.export(model, ex, path, **kw)
        except Exception as e:
            log.append(f"dynamo={dynamo} export FAILED: {type(e).__name__}: {str(e)[:1500]}")
            traceback.print_exc()
            continue
        try:  # sanity check the exported file with ORT vs torch
            import onnx
            import onnxruntime as ort

            m = onnx.load(path)
            ops = sorted({n.op_type for n in m.graph.node})
            s = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
            o = s.run(None, {k: v.numpy() for k, v in inputs.items()})
            refs = ref if isinstance(ref, tuple) else (ref,)
            chk = []
            for n, a, b in zip(outs, o, refs):
                diff = np.abs(a - b.numpy()).max()
                chk.append(
                    f"ort-vs-torch {n}: max abs diff {diff:.3g} shape {a.shape} "
                    f"absmax {np.abs(a).max():.3g} std {a.std():.3g}"
                )
                if not diff < 1e-3:
                    raise RuntimeError("exported model disagrees with torch: " + chk[-1])
        except Exception as e:
            log.append(
                f"dynamo={dynamo} exported but ORT check FAILED: {type(e).__name__}: {str(e)[:800]}"
            )
            traceback.print_exc()
            continue
        ok = "dynamo" if dynamo else "legacy"
        log.append(f"exported with {ok} exporter")
        log.append("ops: " + " ".join(ops))
        log.extend(chk)
        break
    if ok is None:
        log.append("SKIPPED: both exporters failed")
        if os.path.exists(path):
            os.remove(path)
    with open(os.path.join(d, "export.txt"), "w") as f:
        f.write("\n".join(log) + "\n")
    print("\n".join(log))


def bench_layout() -> None:
    """The zoo cache's layout (model.onnx, meta.json, ref_b1.npz of "input:NAME" arrays) for
    every built model, under ROOT/cache/zoo."""
    import json

    for name in sorted(os.listdir(ROOT)):
        src = os.path.join(ROOT, name)
        if not os.path.exists(os.path.join(src, "model.onnx")):
            continue
        dst = os.path.join(ROOT, "cache", "zoo", name)
        os.makedirs(dst, exist_ok=True)
        link = os.path.join(dst, "model.onnx")
        if not os.path.exists(link):
            os.symlink(os.path.join(src, "model.onnx"), link)
        with np.load(os.path.join(src, "inputs.npz")) as f:
            feeds = {k: f[k] for k in f.files}
        batched = all(a.ndim and a.shape[0] == 1 for a in feeds.values())
        with open(os.path.join(dst, "meta.json"), "w") as f:
            json.dump({"name": name, "batched": batched}, f)
        np.savez(os.path.join(dst, "ref_b1.npz"), **{"input:" + k: v for k, v in feeds.items()})


def main(models, argv):
    """The command line shared by build.py and fresh.py: NAME | --list | --bench-layout."""
    if argv[1] == "--bench-layout":
        bench_layout()
    elif argv[1] == "--list":
        print(" ".join(models))
    else:
        build(argv[1], models)


if __name__ == "__main__":
    main(MODELS, sys.argv)
