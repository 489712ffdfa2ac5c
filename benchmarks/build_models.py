"""Build the benchmark model zoo as ONNX files with torch (benchmark-only dependency).

    python benchmarks/build_models.py [--out DIR] [--only name,...] [--force] [--fold-bn]

Files go to ``$GE_MODEL_CACHE`` or ``~/.cache/graphengine/models`` as ``<name>.onnx``; files already
present are skipped unless ``--force``. Every model is exported in eval mode with seeded weights via
torch's TorchScript exporter at opset 17. BatchNorm layers get non-trivial running statistics
(calibrated on random data, then perturbed) and, by default, stay separate BatchNormalization nodes
after each Conv so that the compiler's Conv+BN folding is exercised (``--fold-bn`` lets the exporter
fold them instead).
"""

from __future__ import annotations

import argparse
import math
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import onnx
import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import (
    MODEL_NAMES,
    model_cache_dir,
    op_types,
    ort_latency,
    ort_run,
    random_inputs,
)

OPSET = 17


# --------------------------------------------------------------------------------------------
# Architectures
# --------------------------------------------------------------------------------------------


class MLP(nn.Module):
    def __init__(self, sizes=(784, 1024, 1024, 10)):
        super().__init__()
        layers: list[nn.Module] = []
        for i in range(len(sizes) - 1):
            layers.append(nn.Linear(sizes[i], sizes[i + 1]))
            if i < len(sizes) - 2:
                layers.append(nn.ReLU())
        self.net = nn.Sequential(*layers)

    def forward(self, x):
        return self.net(x)


def conv_bn(cin, cout, k, stride=1, groups=1):
    return nn.Sequential(
        nn.Conv2d(cin, cout, k, stride, k // 2, groups=groups, bias=False),
        nn.BatchNorm2d(cout),
    )


class BasicBlock(nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.relu = nn.ReLU(inplace=True)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.downsample = conv_bn(cin, cout, 1, stride) if stride != 1 or cin != cout else None

    def forward(self, x):
        identity = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return self.relu(out + identity)


class ResNet(nn.Module):
    def __init__(self, depths=(2, 2, 2, 2), width=64, classes=1000):
        super().__init__()
        self.conv1 = nn.Conv2d(3, width, 7, 2, 3, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(3, 2, 1)
        stages = []
        cin = width
        for i, n in enumerate(depths):
            cout = width * 2**i
            blocks = []
            for j in range(n):
                blocks.append(BasicBlock(cin, cout, 2 if (j == 0 and i > 0) else 1))
                cin = cout
            stages.append(nn.Sequential(*blocks))
        self.layers = nn.Sequential(*stages)
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.fc = nn.Linear(cin, classes)

    def forward(self, x):
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layers(x)
        return self.fc(torch.flatten(self.avgpool(x), 1))


def make_divisible(v, divisor=8):
    new_v = max(divisor, int(v + divisor / 2) // divisor * divisor)
    if new_v < 0.9 * v:
        new_v += divisor
    return new_v


class ConvBNReLU6(nn.Sequential):
    def __init__(self, cin, cout, k=3, stride=1, groups=1):
        super().__init__(
            nn.Conv2d(cin, cout, k, stride, k // 2, groups=groups, bias=False),
            nn.BatchNorm2d(cout),
            nn.ReLU6(inplace=True),
        )


class InvertedResidual(nn.Module):
    def __init__(self, cin, cout, stride, expand):
        super().__init__()
        hidden = round(cin * expand)
        self.use_res = stride == 1 and cin == cout
        layers: list[nn.Module] = []
        if expand != 1:
            layers.append(ConvBNReLU6(cin, hidden, 1))
        layers += [
            ConvBNReLU6(hidden, hidden, 3, stride, groups=hidden),
            nn.Conv2d(hidden, cout, 1, 1, 0, bias=False),
            nn.BatchNorm2d(cout),
        ]
        self.conv = nn.Sequential(*layers)

    def forward(self, x):
        return x + self.conv(x) if self.use_res else self.conv(x)


class MobileNetV2(nn.Module):
    SETTINGS = (
        # expansion t, channels c, repeats n, stride s
        (1, 16, 1, 1),
        (6, 24, 2, 2),
        (6, 32, 3, 2),
        (6, 64, 4, 2),
        (6, 96, 3, 1),
        (6, 160, 3, 2),
        (6, 320, 1, 1),
    )

    def __init__(self, width_mult=1.0, classes=1000):
        super().__init__()
        cin = make_divisible(32 * width_mult)
        last = make_divisible(1280 * max(1.0, width_mult))
        features: list[nn.Module] = [ConvBNReLU6(3, cin, 3, 2)]
        for t, c, n, s in self.SETTINGS:
            cout = make_divisible(c * width_mult)
            for i in range(n):
                features.append(InvertedResidual(cin, cout, s if i == 0 else 1, t))
                cin = cout
        features.append(ConvBNReLU6(cin, last, 1))
        self.features = nn.Sequential(*features)
        self.classifier = nn.Sequential(nn.Dropout(0.2), nn.Linear(last, classes))

    def forward(self, x):
        x = self.features(x)
        x = nn.functional.adaptive_avg_pool2d(x, (1, 1))
        return self.classifier(torch.flatten(x, 1))


class SelfAttention(nn.Module):
    def __init__(self, hidden, heads):
        super().__init__()
        self.heads = heads
        self.head_dim = hidden // heads
        self.query = nn.Linear(hidden, hidden)
        self.key = nn.Linear(hidden, hidden)
        self.value = nn.Linear(hidden, hidden)
        self.out = nn.Linear(hidden, hidden)

    def split(self, x):
        b, s = x.size(0), x.size(1)
        return x.view(b, s, self.heads, self.head_dim).permute(0, 2, 1, 3)

    def forward(self, x, ext_mask):
        q = self.split(self.query(x))
        k = self.split(self.key(x))
        v = self.split(self.value(x))
        scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(self.head_dim)
        probs = torch.softmax(scores + ext_mask, dim=-1)
        ctx = torch.matmul(probs, v).permute(0, 2, 1, 3).contiguous()
        ctx = ctx.view(ctx.size(0), ctx.size(1), self.heads * self.head_dim)
        return self.out(ctx)


class EncoderLayer(nn.Module):
    def __init__(self, hidden, heads, intermediate, eps):
        super().__init__()
        self.attn = SelfAttention(hidden, heads)
        self.ln1 = nn.LayerNorm(hidden, eps=eps)
        self.fc1 = nn.Linear(hidden, intermediate)
        self.act = nn.GELU()  # exact erf form
        self.fc2 = nn.Linear(intermediate, hidden)
        self.ln2 = nn.LayerNorm(hidden, eps=eps)

    def forward(self, x, ext_mask):
        x = self.ln1(x + self.attn(x, ext_mask))
        return self.ln2(x + self.fc2(self.act(self.fc1(x))))


class BertEncoder(nn.Module):
    def __init__(
        self,
        layers=4,
        hidden=256,
        heads=4,
        intermediate=1024,
        vocab=30522,
        max_positions=512,
        eps=1e-12,
    ):
        super().__init__()
        self.word = nn.Embedding(vocab, hidden)
        self.position = nn.Embedding(max_positions, hidden)
        self.token_type = nn.Embedding(2, hidden)
        self.register_buffer("position_ids", torch.arange(max_positions).unsqueeze(0))
        self.ln = nn.LayerNorm(hidden, eps=eps)
        self.layers = nn.ModuleList(
            EncoderLayer(hidden, heads, intermediate, eps) for _ in range(layers)
        )
        self.pooler = nn.Linear(hidden, hidden)
        with torch.no_grad():  # non-default LayerNorm affine params (distinct per layer)
            for m in self.modules():
                if isinstance(m, nn.LayerNorm):
                    m.weight.uniform_(0.8, 1.2)
                    m.bias.normal_(0.0, 0.05)

    def forward(self, input_ids, attention_mask):
        seq = input_ids.size(1)
        pos = self.position_ids[:, :seq]
        x = self.word(input_ids) + self.position(pos) + self.token_type.weight[0]
        x = self.ln(x)
        ext = attention_mask[:, None, None, :].to(x.dtype)
        ext = (1.0 - ext) * -10000.0
        for layer in self.layers:
            x = layer(x, ext)
        pooled = torch.tanh(self.pooler(x[:, 0]))
        return x, pooled


class Branchy(nn.Module):
    def __init__(self, towers=4, channels=64, depth=3):
        super().__init__()
        tower_list = []
        for _ in range(towers):
            layers: list[nn.Module] = []
            for _ in range(depth):
                layers += [nn.Conv2d(channels, channels, 3, 1, 1), nn.ReLU()]
            tower_list.append(nn.Sequential(*layers))
        self.towers = nn.ModuleList(tower_list)
        self.join = nn.Conv2d(channels * towers, channels, 1)

    def forward(self, x):
        return self.join(torch.cat([t(x) for t in self.towers], dim=1))


# --------------------------------------------------------------------------------------------
# Seeding / BatchNorm statistics
# --------------------------------------------------------------------------------------------


@torch.no_grad()
def calibrate_batchnorm(model: nn.Module, shape, seed: int, steps: int = 2) -> None:
    """Give every BatchNorm realistic, non-trivial running stats and affine parameters.

    Running stats are accumulated from random inputs (so activations stay well scaled through
    deep stacks), then perturbed, and gamma/beta are randomised: none of them is the 0/1 default.
    """
    bns = [m for m in model.modules() if isinstance(m, nn.BatchNorm2d)]
    if not bns:
        return
    g = torch.Generator().manual_seed(seed + 1)
    for bn in bns:
        bn.reset_running_stats()
        bn.momentum = None  # cumulative average
        bn.weight.copy_(torch.empty_like(bn.weight).uniform_(0.6, 1.4, generator=g))
        bn.bias.copy_(torch.randn(bn.bias.shape, generator=g) * 0.1)
    model.train()
    for _ in range(steps):
        model(torch.randn(*shape, generator=g))
    model.eval()
    for bn in bns:
        c = bn.running_mean.numel()
        bn.running_mean.add_(torch.randn(c, generator=g) * 0.05)
        bn.running_var.mul_(torch.empty(c).uniform_(0.8, 1.25, generator=g))
        bn.momentum = 0.1


def build_torch_model(name: str) -> tuple[nn.Module, tuple, dict]:
    """(model in eval mode, example args, export kwargs) for a zoo name."""
    torch.manual_seed(0)
    batch = {0: "batch"}
    if name == "mlp":
        model = MLP()
        args = (torch.randn(1, 784),)
        io = {
            "input_names": ["input"],
            "output_names": ["output"],
            "dynamic_axes": {"input": batch, "output": batch},
        }
    elif name in ("resnet18", "mobilenetv2"):
        model = ResNet() if name == "resnet18" else MobileNetV2()
        calibrate_batchnorm(model, (4, 3, 224, 224), seed=0)
        args = (torch.randn(1, 3, 224, 224),)
        io = {
            "input_names": ["input"],
            "output_names": ["output"],
            "dynamic_axes": {"input": batch, "output": batch},
        }
    elif name in ("bert_mini", "minilm6"):
        if name == "bert_mini":
            model = BertEncoder(layers=4, hidden=256, heads=4, intermediate=1024)
        else:
            model = BertEncoder(layers=6, hidden=384, heads=12, intermediate=1536)
        g = torch.Generator().manual_seed(0)
        ids = torch.randint(0, 30522, (1, 128), generator=g)
        mask = torch.ones(1, 128, dtype=torch.int64)
        mask[:, 120:] = 0
        args = (ids, mask)
        bs = {0: "batch", 1: "sequence"}
        io = {
            "input_names": ["input_ids", "attention_mask"],
            "output_names": ["last_hidden_state", "pooler_output"],
            "dynamic_axes": {
                "input_ids": bs,
                "attention_mask": bs,
                "last_hidden_state": bs,
                "pooler_output": batch,
            },
        }
    elif name == "branchy":
        model = Branchy()
        args = (torch.randn(1, 64, 56, 56),)
        io = {
            "input_names": ["input"],
            "output_names": ["output"],
            "dynamic_axes": {"input": batch, "output": batch},
        }
    else:
        raise ValueError(f"unknown model {name!r}; known: {', '.join(MODEL_NAMES)}")
    return model.eval(), args, io


def export(name: str, path: Path, fold_bn: bool = False) -> None:
    model, args, io = build_torch_model(name)
    # TrainingMode.PRESERVE on an eval-mode model exports inference semantics but skips the
    # exporter's eval peephole, which would otherwise fold BatchNorm into the preceding Conv.
    training = torch.onnx.TrainingMode.EVAL if fold_bn else torch.onnx.TrainingMode.PRESERVE
    tmp = path.with_name(path.name + ".tmp")
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # legacy-exporter deprecation, PRESERVE+folding notice
        torch.onnx.export(
            model.eval(),
            args,
            str(tmp),
            dynamo=False,
            opset_version=OPSET,
            do_constant_folding=True,
            training=training,
            **io,
        )
    proto = onnx.load(str(tmp))
    onnx.checker.check_model(proto, full_check=True)
    # The export must compute what the torch module computes.
    with torch.no_grad():
        ref = model(*args)
    ref = [r.numpy() for r in (ref if isinstance(ref, tuple) else (ref,))]
    feeds = {n: a.numpy() for n, a in zip(io["input_names"], args)}
    got = list(ort_run(tmp, feeds).values())
    for r, g in zip(ref, got):
        err = float(np.max(np.abs(r - g)))
        if not err <= 1e-3 * max(1.0, float(np.max(np.abs(r)))):
            tmp.unlink()
            raise RuntimeError(f"{name}: ORT output differs from torch (max abs err {err:g})")
    tmp.replace(path)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--out", type=Path, default=None, help="output folder (default: model cache)")
    ap.add_argument(
        "--only", default="", help="comma-separated subset of: " + ",".join(MODEL_NAMES)
    )
    ap.add_argument("--force", action="store_true", help="rebuild files already present")
    ap.add_argument("--fold-bn", action="store_true", help="let the exporter fold BN into Conv")
    ap.add_argument("--threads", type=int, default=2, help="ORT intra-op threads for the report")
    ap.add_argument("--runs", type=int, default=20, help="timed ORT runs per model")
    ap.add_argument("--no-bench", action="store_true", help="build only, skip the ORT report")
    ap.add_argument("--ops", action="store_true", help="also list each model's ONNX op types")
    args = ap.parse_args(argv)

    out = (args.out or model_cache_dir()).expanduser()
    out.mkdir(parents=True, exist_ok=True)
    names = [n.strip() for n in args.only.split(",") if n.strip()] or list(MODEL_NAMES)
    unknown = [n for n in names if n not in MODEL_NAMES]
    if unknown:
        ap.error(f"unknown model(s) {unknown}; known: {', '.join(MODEL_NAMES)}")

    torch.set_num_threads(2)
    for name in names:
        path = out / f"{name}.onnx"
        if path.exists() and not args.force:
            status = "cached"
        else:
            t0 = time.perf_counter()
            export(name, path, fold_bn=args.fold_bn)
            status = f"built in {time.perf_counter() - t0:.1f}s"
        size = path.stat().st_size / 2**20
        line = f"{name:12s} {path}  {size:7.2f} MiB  {status}"
        if not args.no_bench:
            inputs = random_inputs(path, batch=1, seed=0)
            outs = ort_run(path, inputs, threads=args.threads)
            shapes = ", ".join(f"{k}{list(v.shape)}" for k, v in outs.items())
            finite = all(np.isfinite(v).all() for v in outs.values())
            lat = ort_latency(path, inputs, threads=args.threads, runs=args.runs)
            line += f"  out: {shapes}{'' if finite else ' (NON-FINITE)'}"
            line += f"  ORT b1 x{args.threads}t: {lat * 1e3:.3f} ms"
        print(line, flush=True)
        if args.ops:
            print("    ops:", " ".join(op_types(path)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
