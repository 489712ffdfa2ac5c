"""Zoo builders: architectures written as our own nn.Modules (models_torch_arch.py), see catalog.py.

Every module is seeded, gets non-default norm parameters (BatchNorm: calibrated running stats),
runs in eval mode, and is exported with a symbolic batch dim by :func:`export`, which also checks
ONNX Runtime against torch. torch is imported inside the builders only.
"""

from __future__ import annotations

import inspect
import sys
import warnings
from pathlib import Path

import catalog
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from common import ort_run

TOL = 1e-4  # max |ORT - torch| relative to max |torch| (floor 1)


def randomize_norms(model, seed: int, calib=None, steps: int = 2) -> None:
    """Non-default affine parameters for every norm layer; BatchNorm running stats calibrated
    on ``calib()`` (a tuple of args) in train mode, then perturbed."""
    import torch
    from torch import nn

    g = torch.Generator().manual_seed(seed + 1)
    bns = []
    with torch.no_grad():
        for m in model.modules():
            is_bn = isinstance(m, nn.modules.batchnorm._BatchNorm)
            if is_bn:
                bns.append(m)
                m.reset_running_stats()
                m.momentum = None
            w, b = getattr(m, "weight", None), getattr(m, "bias", None)
            if not (is_bn or isinstance(m, (nn.LayerNorm, nn.GroupNorm)) or "Norm" in
                    type(m).__name__) or not isinstance(w, torch.Tensor) or w.dim() != 1:
                continue
            w.copy_(torch.empty(w.shape).uniform_(0.6, 1.4, generator=g))
            if isinstance(b, torch.Tensor):
                b.copy_(torch.randn(b.shape, generator=g) * 0.1)
        if bns and calib is not None:
            model.train()
            for _ in range(steps):
                model(*calib())
        model.eval()
        for bn in bns:
            c = bn.running_mean.numel()
            bn.running_mean.add_(torch.randn(c, generator=g) * 0.05)
            bn.running_var.mul_(torch.empty(c).uniform_(0.8, 1.25, generator=g))
            bn.momentum = 0.1


def _flat(out):
    if isinstance(out, (tuple, list)):
        return [t for o in out for t in _flat(o)]
    return [out]


def export(folder: Path, model, inputs, input_names, output_names, *, opset: int = 17,
           dynamo: bool = False, batched: bool = True, keep_bn: bool = True,
           tol: float = TOL, dynamic_extra: dict | None = None) -> catalog.Built:
    """Export ``model`` (eval mode) to ``folder/model.onnx``; ``inputs(batch, seed)`` gives
    numpy feeds by input name. ``dynamic_extra`` (TorchScript only) maps an output name to
    extra dynamic axes of that output."""
    import onnx
    import torch

    model = model.eval()

    def to_torch(feeds):
        return tuple(torch.from_numpy(np.ascontiguousarray(feeds[n])) for n in input_names)

    def torch_outputs(feeds):
        with torch.no_grad():
            outs = _flat(model(*to_torch(feeds)))
        return {n: o.detach().numpy() for n, o in zip(output_names, outs)}

    args = to_torch(inputs(2 if batched else 1, 0))
    path = folder / "model.onnx"
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if dynamo:
            batch = torch.export.Dim("batch", min=1, max=64)
            shapes = tuple({0: batch} for _ in args) if batched else None
            params = inspect.signature(model.forward).parameters.values()
            if shapes and any(p.kind is p.VAR_POSITIONAL for p in params):
                shapes = (shapes,)  # forward(*args): one packed argument
            prog = torch.onnx.export(
                model, args, dynamo=True, opset_version=opset, input_names=list(input_names),
                output_names=list(output_names), dynamic_shapes=shapes, optimize=True,
                verbose=False)
            prog.save(str(path), external_data=False)
            producer = f"torch {torch.__version__.split('+')[0]} dynamo exporter"
        else:
            axes = None
            if batched:
                axes = {n: {0: "batch"} for n in (*input_names, *output_names)}
                for n, extra in (dynamic_extra or {}).items():
                    axes[n] = {**axes[n], **extra}
            training = (torch.onnx.TrainingMode.PRESERVE if keep_bn
                        else torch.onnx.TrainingMode.EVAL)
            torch.onnx.export(
                model, args, str(path), dynamo=False, opset_version=opset,
                do_constant_folding=True, training=training, input_names=list(input_names),
                output_names=list(output_names), dynamic_axes=axes)
            producer = f"torch {torch.__version__.split('+')[0]} TorchScript exporter"
    proto = onnx.load(str(path))
    onnx.checker.check_model(proto)
    check = inputs(3 if batched else 1, 7)
    ref = torch_outputs(check)
    got = ort_run(path, check)
    for n in output_names:
        r, o = ref[n], got[n]
        if r.shape != o.shape:
            raise RuntimeError(f"{n}: ORT shape {o.shape} != torch {r.shape}")
        if r.dtype.kind == "f":
            err = float(np.max(np.abs(r - o))) if r.size else 0.0
            scale = max(1.0, float(np.max(np.abs(r)))) if r.size else 1.0
            if not err <= tol * scale:
                raise RuntimeError(f"{n}: ORT differs from torch: max abs err {err:.3g} "
                                   f"(scale {scale:.3g})")
        elif not np.array_equal(r, o):
            raise RuntimeError(f"{n}: ORT differs from torch")
    return catalog.Built(inputs=inputs, torch_outputs=torch_outputs,
                         producer=f"{producer}, opset {opset}")


# ---- inputs -----------------------------------------------------------------------------------


def images(c: int, h: int, w: int):
    def inputs(batch: int, seed: int) -> dict:
        rng = np.random.default_rng(seed)
        return {"input": rng.standard_normal((batch, c, h, w)).astype(np.float32)}
    return inputs


def token_batch(batch: int, seed: int, seq: int, vocab: int, low: int = 1) -> tuple:
    """Token ids in [low, vocab) and a 0/1 mask where every other row is right-padded."""
    rng = np.random.default_rng(seed)
    ids = rng.integers(low, vocab, (batch, seq)).astype(np.int64)
    mask = np.ones((batch, seq), np.int64)
    for r in range(batch):
        if (r + seed) % 2:
            n = int(rng.integers(seq // 2, seq - 1))
            mask[r, n:] = 0
    return ids, mask


def text(seq: int, vocab: int, pad_id: int | None = 0):
    def inputs(batch: int, seed: int) -> dict:
        ids, mask = token_batch(batch, seed, seq, vocab)
        if pad_id is not None:
            ids = np.where(mask == 1, ids, pad_id)
        return {"input_ids": ids, "attention_mask": mask}
    return inputs


def waveform(n: int):
    def inputs(batch: int, seed: int) -> dict:
        rng = np.random.default_rng(seed)
        t = np.arange(n) / 16000.0
        f = rng.uniform(80, 2000, (batch, 4, 1))
        x = (np.sin(2 * np.pi * f * t) * rng.uniform(0.05, 0.3, (batch, 4, 1))).sum(1)
        return {"input_values": (x + 0.05 * rng.standard_normal((batch, n))).astype(np.float32)}
    return inputs


def byte_rows(batch: int, seed: int) -> dict:
    rng = np.random.default_rng(seed)
    x = rng.integers(0, 256, (batch, 1024))
    x[:, :512] = rng.integers(32, 127, (batch, 512))  # text-like head
    for r in range(batch):
        if (r + seed) % 2:
            x[r, int(rng.integers(300, 900)):] = 256  # short file: padding token
    return {"byte_ids": x.astype(np.int64)}


# ---- registration -----------------------------------------------------------------------------


def _reg(name, family, arch, inputs, in_names=("input",), out_names=("output",), *, opset=17,
         dynamo=False, keep_bn=True, notes="", **kw):
    def build(folder: Path) -> catalog.Built:
        import models_torch_arch as A
        import torch

        torch.manual_seed(0)
        model = arch(A)
        calib = inputs(4, 99)
        randomize_norms(model, 0, lambda: tuple(torch.from_numpy(calib[n]) for n in in_names))
        return export(folder, model, inputs, in_names, out_names, opset=opset, dynamo=dynamo,
                      keep_bn=keep_bn, **kw)

    how = f"dynamo opset {opset}" if dynamo else f"TorchScript opset {opset}"
    catalog.register(catalog.ZooEntry(name=name, family=family, source="torch", build=build,
                                      notes=f"{notes} [{how}]"))


_reg("resnet50", "vision", lambda A: A.ResNet50(), images(3, 224, 224),
     notes="torchvision ResNet-50 layout (Bottleneck, downsample attribute after the main "
     "branch), full width, 1000 classes, 224x224; BatchNorm kept as separate nodes.")
_reg("densenet121", "vision", lambda A: A.DenseNet((6, 12, 24, 16)), images(3, 160, 160),
     opset=13, notes="torchvision DenseNet-121 layout (dense blocks of concat, transitions), "
     "160x160.")
_reg("mobilenetv3_small", "vision", lambda A: A.MobileNetV3Small(), images(3, 224, 224),
     opset=14, keep_bn=False, notes="torchvision MobileNetV3-Small: SE with Hardsigmoid, "
     "Hardswish, depthwise 3x3/5x5; BN folded by the exporter.")
_reg("shufflenetv2", "vision", lambda A: A.ShuffleNetV2(), images(3, 224, 224), opset=15,
     notes="ShuffleNetV2 x1.0: chunk, concat, channel shuffle via reshape/transpose.")
_reg("efficientnet_b0", "vision", lambda A: A.EfficientNetB0(), images(3, 224, 224), opset=18,
     dynamo=True, notes="EfficientNet-B0: MBConv, depthwise 3x3/5x5, SE, SiLU.")
_reg("squeezenet11", "vision", lambda A: A.SqueezeNet(), images(3, 224, 224), opset=13,
     notes="SqueezeNet 1.1: fire modules, ceil-mode max pooling, conv classifier.")
_reg("vgg_bn_small", "vision", lambda A: A.VGG(), images(3, 192, 192), opset=13, keep_bn=False,
     notes="VGG-style conv/BN/ReLU stacks (narrow), adaptive avg pool 6x6 -> 3x3, 3 FC.")
_reg("inception_small", "vision", lambda A: A.InceptionNet(), images(3, 160, 160), opset=15,
     notes="GoogLeNet-like: 4 inception blocks (1x1, 3x3, double 3x3, maxpool branch).")
_reg("fpn_unet_seg", "segmentation", lambda A: A.SegNet(), images(3, 128, 128), opset=16,
     notes="UNet encoder + FPN decoder: ConvTranspose2d, nearest, bilinear with "
     "align_corners False and True, concat skips; 21-class map at 128x128.")
_reg("wav2vec_conv_encoder", "audio", lambda A: A.AudioEncoder(), waveform(16000),
     ("input_values",), ("last_hidden_state",), opset=14,
     notes="wav2vec2-style feature extractor: 7 Conv1d (stride 5,2,...), GroupNorm, GELU, "
     "LayerNorm, projection, grouped positional Conv1d; 1 s at 16 kHz.")
_reg("gqa_decoder", "text", lambda A: A.GQADecoder(), text(32, 2000, None),
     ("input_ids", "attention_mask"), ("logits",), opset=17,
     notes="Hand-written Llama-style decoder: 4 layers, 8 query / 2 KV heads, RoPE, RMSNorm, "
     "SiLU-gated MLP, causal + padding mask, seq 32.")
_reg("gqa_decoder_dynamo", "text", lambda A: A.GQADecoder(layers=2, dim=128, heads=4,
     kv_heads=1, ffn=344), text(48, 2000, None), ("input_ids", "attention_mask"),
     ("logits",), opset=18, dynamo=True,
     notes="Smaller GQA decoder (4 query heads share 1 KV head), seq 48.")
_reg("byte_cnn", "text", lambda A: A.ByteCNN(), byte_rows, ("byte_ids",), ("logits",),
     opset=13, notes="Byte embedding (257) -> Conv1d stack with BN, max pool -> global "
     "max+mean pool -> LayerNorm -> MLP; 1024 bytes.")
_reg("lstm_gru_classifier", "text", lambda A: A.RNNClassifier(), text(40, 5000),
     ("input_ids", "attention_mask"), ("logits",), opset=14,
     notes="Embedding -> bidirectional LSTM -> GRU -> masked mean pool + last state -> linear.")
