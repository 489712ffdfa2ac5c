"""The zoo's torch families as live nn.Modules (not exported): for the torch.compile backend's
checks (tests/torch) and benchmark (benchmarks/bench_torch.py).

Each entry builds the same architecture and random-weight recipe as the zoo's builders
(models_torch.py, models_hf.py: seeded, non-default norms, calibrated BatchNorm stats) and
gives example inputs as torch tensors. `seq` entries take token ids whose sequence length
may vary (decoders are checked under dynamic=True at several lengths).
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))


@dataclass(frozen=True)
class TorchModel:
    name: str
    family: str  # vision | encoder | decoder
    make: Callable[[], object]  # -> an eval-mode nn.Module taking positional tensors
    inputs: Callable[[int, int, int], tuple]  # (batch, seq, seed) -> tensors
    seq: int = 0  # the default sequence length of a text model (0: an image model)


def _images(c: int, h: int, w: int):
    def inputs(batch: int, seq: int, seed: int) -> tuple:
        import torch
        rng = np.random.default_rng(seed)
        return (torch.from_numpy(rng.standard_normal((batch, c, h, w)).astype(np.float32)),)
    return inputs


def _tokens(vocab: int, pad_id: int | None = 0):
    def inputs(batch: int, seq: int, seed: int) -> tuple:
        import torch
        from models_torch import text
        feeds = text(seq, vocab, pad_id)(batch, seed)
        return (torch.from_numpy(feeds["input_ids"]), torch.from_numpy(feeds["attention_mask"]))
    return inputs


def _arch(build: Callable, inputs: Callable, n_in: int = 1) -> Callable[[], object]:
    def make():
        import models_torch_arch as A
        import torch
        from models_torch import randomize_norms
        torch.manual_seed(0)
        model = build(A)
        calib = inputs(4, 16, 99)
        randomize_norms(model, 0, lambda: calib[:n_in])
        return model.eval()
    return make


def _hf(build: Callable, inputs: Callable, in_names: tuple, out_names: tuple
        ) -> Callable[[], object]:
    def make():
        import torch
        import transformers
        from models_hf import _wrap, randomize_hf
        torch.manual_seed(0)
        model = build(transformers).eval()
        calib = inputs(4, 16, 99)
        randomize_hf(model, 0, lambda: calib)
        return _wrap(model, in_names, out_names).eval()
    return make


def _cfg(T, cls: str, **kw):
    from models_hf import cfg
    return cfg(T, cls, **kw)


SMALL = dict(vocab_size=1000, hidden_size=128, num_hidden_layers=2, num_attention_heads=4,
             intermediate_size=512, max_position_embeddings=128)
LLAMA = dict(vocab_size=1000, hidden_size=128, intermediate_size=344, num_hidden_layers=2,
             num_attention_heads=8, num_key_value_heads=2, max_position_embeddings=128)
IDS = ("input_ids", "attention_mask")
PV = ("pixel_values",)
VIT = dict(image_size=64, patch_size=8, hidden_size=128, num_hidden_layers=2,
           num_attention_heads=4, intermediate_size=256)


def _vision(name: str, build: Callable, c: int, h: int) -> TorchModel:
    inputs = _images(c, h, h)
    return TorchModel(name, "vision", _arch(build, inputs), inputs)


def _hf_vision(name: str, build: Callable, h: int, out: str) -> TorchModel:
    inputs = _images(3, h, h)
    return TorchModel(name, "vision", _hf(build, inputs, PV, (out,)), inputs)


def _text(name: str, family: str, build: Callable, out: str, vocab: int = 1000,
          pad_id: int | None = 0, seq: int = 32) -> TorchModel:
    inputs = _tokens(vocab, pad_id)
    return TorchModel(name, family, _hf(build, inputs, IDS, (out,)), inputs, seq)


MODELS: list[TorchModel] = [
    # vision: the zoo's own architectures (torchvision layouts) and transformers' models
    _vision("resnet50", lambda A: A.ResNet50(), 3, 128),
    _vision("densenet121", lambda A: A.DenseNet((6, 12, 24, 16)), 3, 96),
    _vision("mobilenetv3_small", lambda A: A.MobileNetV3Small(), 3, 128),
    _vision("shufflenetv2", lambda A: A.ShuffleNetV2(), 3, 128),
    _vision("efficientnet_b0", lambda A: A.EfficientNetB0(), 3, 128),
    _vision("squeezenet11", lambda A: A.SqueezeNet(), 3, 128),
    _vision("vgg_bn_small", lambda A: A.VGG(), 3, 96),
    _vision("inception_small", lambda A: A.InceptionNet(), 3, 96),
    _hf_vision("hf_vit", lambda T: T.ViTModel(_cfg(T, "ViT", **VIT), add_pooling_layer=False),
               64, "last_hidden_state"),
    _hf_vision("hf_convnext", lambda T: T.ConvNextForImageClassification(_cfg(
        T, "ConvNext", hidden_sizes=[32, 64, 128, 256], depths=[1, 1, 2, 1], num_labels=10)),
        64, "logits"),
    _hf_vision("hf_resnet", lambda T: T.ResNetForImageClassification(_cfg(
        T, "ResNet", embedding_size=32, hidden_sizes=[64, 128, 256, 512], depths=[1, 1, 2, 1],
        layer_type="bottleneck", num_labels=10)), 96, "logits"),
    # encoders
    _text("hf_bert", "encoder", lambda T: T.BertModel(_cfg(T, "Bert", **SMALL),
                                                      add_pooling_layer=False),
          "last_hidden_state"),
    _text("hf_distilbert", "encoder", lambda T: T.DistilBertModel(_cfg(
        T, "DistilBert", vocab_size=1000, dim=128, n_layers=3, n_heads=4, hidden_dim=512,
        max_position_embeddings=128)), "last_hidden_state"),
    _text("hf_roberta", "encoder", lambda T: T.RobertaForSequenceClassification(_cfg(
        T, "Roberta", **{**SMALL, "num_labels": 3, "max_position_embeddings": 130,
                         "pad_token_id": 1})), "logits", pad_id=1),
    _text("hf_albert", "encoder", lambda T: T.AlbertModel(_cfg(
        T, "Albert", **{**SMALL, "embedding_size": 64, "num_hidden_layers": 3}),
        add_pooling_layer=False), "last_hidden_state"),
    _text("hf_electra", "encoder", lambda T: T.ElectraForSequenceClassification(_cfg(
        T, "Electra", **{**SMALL, "embedding_size": 64, "num_labels": 4})), "logits"),
    # decoders (checked with dynamic sequence length)
    _text("hf_gpt2", "decoder", lambda T: T.GPT2LMHeadModel(_cfg(
        T, "GPT2", vocab_size=1000, n_embd=128, n_layer=2, n_head=4, n_positions=128)),
        "logits"),
    _text("hf_llama", "decoder", lambda T: T.LlamaForCausalLM(_cfg(T, "Llama", **LLAMA)),
          "logits"),
    _text("hf_qwen2", "decoder", lambda T: T.Qwen2ForCausalLM(_cfg(
        T, "Qwen2", **{**LLAMA, "num_key_value_heads": 4})), "logits"),
    _text("hf_phi", "decoder", lambda T: T.PhiForCausalLM(_cfg(
        T, "Phi", vocab_size=1000, hidden_size=128, intermediate_size=512,
        num_hidden_layers=2, num_attention_heads=4, partial_rotary_factor=0.5,
        max_position_embeddings=128)), "logits"),
    _text("hf_gpt_neox", "decoder", lambda T: T.GPTNeoXForCausalLM(_cfg(
        T, "GPTNeoX", vocab_size=1000, hidden_size=128, intermediate_size=512,
        num_hidden_layers=2, num_attention_heads=4, rotary_pct=0.25,
        max_position_embeddings=128)), "logits"),
]
MODELS.append(TorchModel(
    "gqa_decoder", "decoder",
    _arch(lambda A: A.GQADecoder(), _tokens(2000, None), n_in=2), _tokens(2000, None), 32))
BY_NAME = {m.name: m for m in MODELS}
