"""Zoo builders: ``transformers`` models from a small Config with random weights (see catalog.py).

No download: every model is built from its Config, seeded, given non-default norm parameters
(BatchNorm with calibrated running stats) and non-zero biases / layer scales, wrapped so that it
takes positional inputs and returns named tensors (``logits``, ``last_hidden_state``), then
exported by ``models_torch.export`` (TorchScript at opset 13-17, or dynamo at 18) which checks
ONNX Runtime against torch. Text models here; vision and audio in models_hf_vision.py.
"""

from __future__ import annotations

from pathlib import Path

import catalog
import numpy as np
from models_torch import TOL, export, randomize_norms, text


def randomize_hf(model, seed: int, calib=None) -> None:
    """Norm affine params and BN stats (randomize_norms), classification heads at fan-in scale,
    then every parameter left constant by the HF initializer (zero biases, layer scales of 1e-6)
    re-drawn so that it matters."""
    import torch

    randomize_norms(model, seed, calib)
    g = torch.Generator().manual_seed(seed + 2)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() == 2 and any(h in name for h in ("classifier", "score", "pooler")):
                # task heads init at std 0.02 give logits of ~0.02: unit-variance fan-in init
                p.copy_(torch.randn(p.shape, generator=g) / p.shape[1] ** 0.5)
                continue
            if p.numel() < 2 or float(p.std()) > 0:
                continue
            c = float(p.flatten()[0])
            if c == 0.0:
                p.copy_(torch.randn(p.shape, generator=g) * 0.02)
            else:  # layer scale / gamma-like constant: a real weight of unit order
                p.copy_(torch.empty(p.shape).uniform_(0.3, 1.0, generator=g))


def _wrap(model, in_names, out_names, extra: dict | None = None):
    from torch import nn

    class Wrap(nn.Module):
        def __init__(self):
            super().__init__()
            self.model = model

        def forward(self, *args):
            out = self.model(**dict(zip(in_names, args)), **(extra or {}), return_dict=True)
            return tuple(getattr(out, n) for n in out_names)

    return Wrap().eval()


def hf(name: str, family: str, make, inputs, in_names, out_names, *, opset: int = 17,
       dynamo: bool = False, keep_bn: bool = True, notes: str = "", tol: float = TOL,
       extra: dict | None = None) -> None:
    """Register a transformers model: ``make(transformers)`` returns the model from a Config."""

    def build(folder: Path) -> catalog.Built:
        import torch
        import transformers

        torch.manual_seed(0)
        model = make(transformers).eval()
        wrapped = _wrap(model, in_names, out_names, extra)
        calib = inputs(4, 99)
        randomize_hf(model, 0, lambda: tuple(torch.from_numpy(calib[n]) for n in in_names))
        wrapped.eval()
        built = export(folder, wrapped, inputs, in_names, out_names, opset=opset, dynamo=dynamo,
                       keep_bn=keep_bn, tol=tol)
        built.producer = f"{built.producer}; transformers {transformers.__version__}"
        return built

    how = f"dynamo opset {opset}" if dynamo else f"TorchScript opset {opset}"
    catalog.register(catalog.ZooEntry(name=name, family=family, source="hf", build=build,
                                      notes=f"{notes} [{how}]"))


def cfg(T, cls: str, **kw):
    """``T.<cls>Config(**kw)`` with eager attention (the exporters trace it most faithfully)."""
    attn = kw.pop("attn", "eager")
    c = getattr(T, cls + "Config")(**kw)
    c._attn_implementation = attn
    return c


SMALL = dict(vocab_size=1000, hidden_size=128, num_hidden_layers=2, num_attention_heads=4,
             intermediate_size=512, max_position_embeddings=128)
IDS_MASK = ("input_ids", "attention_mask")


def seq2seq(src: int, tgt: int, vocab: int, pad: int, start: int):
    def inputs(batch: int, seed: int) -> dict:
        feeds = text(src, vocab, pad)(batch, seed)
        rng = np.random.default_rng(seed + 1)
        dec = rng.integers(3, vocab, (batch, tgt)).astype(np.int64)
        dec[:, 0] = start
        feeds["decoder_input_ids"] = dec
        return feeds
    return inputs


# ---- encoders -------------------------------------------------------------------------------

hf("hf_bert", "text", lambda T: T.BertModel(cfg(T, "Bert", **SMALL), add_pooling_layer=False),
   text(32, 1000), IDS_MASK, ("last_hidden_state",), opset=14,
   notes="BertModel 2x128, 4 heads, padded attention_mask.")
hf("hf_distilbert", "text",
   lambda T: T.DistilBertModel(cfg(T, "DistilBert", vocab_size=1000, dim=128, n_layers=3,
                                   n_heads=4, hidden_dim=512, max_position_embeddings=128)),
   text(32, 1000), IDS_MASK, ("last_hidden_state",), opset=13,
   notes="DistilBertModel 3x128.")
hf("hf_roberta", "text",
   lambda T: T.RobertaForSequenceClassification(cfg(T, "Roberta", **{
       **SMALL, "num_labels": 3, "max_position_embeddings": 130, "pad_token_id": 1})),
   text(32, 1000, pad_id=1), IDS_MASK, ("logits",), opset=15,
   notes="RobertaForSequenceClassification (position ids from the non-pad cumsum), 3 labels.")
hf("hf_albert", "text",
   lambda T: T.AlbertModel(cfg(T, "Albert", **{**SMALL, "embedding_size": 64,
                                                "num_hidden_layers": 3}),
                           add_pooling_layer=False),
   text(32, 1000), IDS_MASK, ("last_hidden_state",), opset=17,
   notes="AlbertModel: factorized 64-d embedding, one layer shared 3 times.")
hf("hf_electra", "text",
   lambda T: T.ElectraForSequenceClassification(cfg(T, "Electra", **{
       **SMALL, "embedding_size": 64, "num_labels": 4})),
   text(32, 1000), IDS_MASK, ("logits",), opset=18, dynamo=True,
   notes="ElectraForSequenceClassification, embedding projection 64->128.")

# ---- decoders -------------------------------------------------------------------------------

hf("hf_gpt2", "text",
   lambda T: T.GPT2LMHeadModel(cfg(T, "GPT2", vocab_size=1000, n_embd=128, n_layer=2, n_head=4,
                                   n_positions=128)),
   text(32, 1000), IDS_MASK, ("logits",), opset=14,
   notes="GPT2LMHeadModel 2x128: causal mask + padding mask, tied LM head.")
LLAMA = dict(vocab_size=1000, hidden_size=128, intermediate_size=344, num_hidden_layers=2,
             num_attention_heads=8, num_key_value_heads=2, max_position_embeddings=128)
hf("hf_llama", "text", lambda T: T.LlamaForCausalLM(cfg(T, "Llama", **LLAMA)),
   text(32, 1000), IDS_MASK, ("logits",), opset=18, dynamo=True,
   notes="LlamaForCausalLM: GQA 8 query / 2 KV heads, RoPE, RMSNorm, SiLU-gated MLP.")
hf("hf_llama_ts", "text", lambda T: T.LlamaForCausalLM(cfg(T, "Llama", **LLAMA)),
   text(32, 1000), IDS_MASK, ("logits",), opset=17,
   notes="The same Llama through the TorchScript exporter.")
hf("hf_qwen2", "text",
   lambda T: T.Qwen2ForCausalLM(cfg(T, "Qwen2", **{**LLAMA, "num_key_value_heads": 4})),
   text(32, 1000), IDS_MASK, ("logits",), opset=17,
   notes="Qwen2ForCausalLM: GQA 8/4 heads, q/k/v biases, RoPE, RMSNorm.")
hf("hf_mistral", "text",
   lambda T: T.MistralForCausalLM(cfg(T, "Mistral", **{**LLAMA, "sliding_window": 16})),
   text(32, 1000), IDS_MASK, ("logits",), opset=18, dynamo=True,
   notes="MistralForCausalLM: GQA 8/2, sliding window 16 < seq 32.")
hf("hf_phi", "text",
   lambda T: T.PhiForCausalLM(cfg(T, "Phi", vocab_size=1000, hidden_size=128,
                                  intermediate_size=512, num_hidden_layers=2,
                                  num_attention_heads=4, partial_rotary_factor=0.5,
                                  max_position_embeddings=128)),
   text(32, 1000), IDS_MASK, ("logits",), opset=15,
   notes="PhiForCausalLM: parallel attention+MLP block, partial RoPE (half the head dim), "
   "gelu_new.")
hf("hf_gpt_neox", "text",
   lambda T: T.GPTNeoXForCausalLM(cfg(T, "GPTNeoX", vocab_size=1000, hidden_size=128,
                                      intermediate_size=512, num_hidden_layers=2,
                                      num_attention_heads=4, rotary_pct=0.25,
                                      max_position_embeddings=128)),
   text(32, 1000), IDS_MASK, ("logits",), opset=16,
   notes="GPTNeoXForCausalLM: fused QKV, rotary on 25% of the head dim, parallel residual.")

# ---- encoder-decoders -----------------------------------------------------------------------

hf("hf_t5", "text",
   lambda T: T.T5ForConditionalGeneration(cfg(T, "T5", vocab_size=1000, d_model=128, d_kv=32,
                                              d_ff=256, num_layers=2, num_decoder_layers=2,
                                              num_heads=4, decoder_start_token_id=0)),
   seq2seq(32, 16, 1000, 0, 0), (*IDS_MASK, "decoder_input_ids"), ("logits",), opset=15,
   notes="T5ForConditionalGeneration: encoder + decoder in one graph (decoder_input_ids), "
   "relative position buckets, RMS-style T5LayerNorm.")
hf("hf_bart", "text",
   lambda T: T.BartForConditionalGeneration(cfg(T, "Bart", vocab_size=1000, d_model=128,
                                                encoder_layers=2, decoder_layers=2,
                                                encoder_attention_heads=4,
                                                decoder_attention_heads=4,
                                                encoder_ffn_dim=256, decoder_ffn_dim=256,
                                                max_position_embeddings=128)),
   seq2seq(32, 16, 1000, 1, 2), (*IDS_MASK, "decoder_input_ids"), ("logits",), opset=14,
   notes="BartForConditionalGeneration: encoder-decoder, learned positions (offset 2).")
hf("hf_marian", "text",
   lambda T: T.MarianMTModel(cfg(T, "Marian", vocab_size=1000, d_model=128, encoder_layers=2,
                                 decoder_layers=2, encoder_attention_heads=4,
                                 decoder_attention_heads=4, encoder_ffn_dim=256,
                                 decoder_ffn_dim=256, max_position_embeddings=128,
                                 pad_token_id=999, decoder_start_token_id=999)),
   seq2seq(24, 12, 999, 999, 999), (*IDS_MASK, "decoder_input_ids"), ("logits",), opset=18,
   dynamo=True, notes="MarianMTModel: sinusoidal positions, final_logits_bias.")

import models_hf_vision  # noqa: E402,F401  (registers the vision and audio models)
