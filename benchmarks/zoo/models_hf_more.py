"""Zoo builders: 33 more ``transformers`` architectures of the issue's families, added after
the first zoo (see models_hf.py for how a builder works). Names start with ``more_``.

They were first built outside the zoo as models the project had not seen, to check that the
compiler generalizes: every one compiled and ran correctly on the first try, and the slow
ones led to compiler fixes for their class (ReduceL2 on the device, Einsum as MatMul,
MatMul + BatchNorm1d folding, GroupNorm in convolution layouts, kernel-set probes under load).
"""

from __future__ import annotations

import numpy as np
from models_hf import IDS_MASK, SMALL, cfg, hf
from models_hf_vision import PV, pix, wave
from models_torch import text


def _model(cls: str, config: str, **kw):
    """``T.<cls>(T.<config>Config(**kw))`` (eager attention), for hf()'s ``make``."""
    return lambda T: getattr(T, cls)(cfg(T, config, **kw))


def _base(cls: str, config: str, **kw):
    """The same, for a base model built without its pooling layer."""
    return lambda T: getattr(T, cls)(cfg(T, config, **kw), add_pooling_layer=False)


def _spectrogram(batch: int, seed: int) -> dict:
    rng = np.random.default_rng(seed)
    return {"input_values": rng.standard_normal((batch, 128, 64)).astype(np.float32)}


LOGITS, HIDDEN = ("logits",), ("last_hidden_state",)
DEC = dict(vocab_size=1000, hidden_size=128, num_hidden_layers=2, num_attention_heads=4,
           max_position_embeddings=128)
SPEECH = dict(hidden_size=128, num_hidden_layers=2, num_attention_heads=4, intermediate_size=256,
              conv_dim=(64,) * 7, num_conv_pos_embedding_groups=4)

# ---- vision ---------------------------------------------------------------------------------

hf("more_regnet", "vision",
   _model("RegNetForImageClassification", "RegNet", embedding_size=32,
          hidden_sizes=[32, 64, 160, 384], depths=[1, 1, 3, 1], groups_width=16, layer_type="y",
          num_labels=10),
   pix(3, 128, 128), PV, LOGITS, opset=15, notes="RegNetY: grouped 3x3 convolutions, SE.")
hf("more_mobilenet_v1", "vision",
   _model("MobileNetV1ForImageClassification", "MobileNetV1", depth_multiplier=0.75,
          image_size=160, num_labels=10),
   pix(3, 160, 160), PV, LOGITS, opset=13, keep_bn=False,
   notes="MobileNetV1 x0.75: depthwise separable convolutions, ReLU6, TF padding.")
hf("more_convnextv2", "vision",
   _model("ConvNextV2ForImageClassification", "ConvNextV2", hidden_sizes=[40, 80, 160, 320],
          depths=[2, 2, 4, 2], num_labels=10),
   pix(3, 96, 96), PV, LOGITS, opset=17,
   notes="ConvNeXt-V2: global response norm (ReduceL2 over H and W).")
hf("more_poolformer", "vision",
   _model("PoolFormerForImageClassification", "PoolFormer", hidden_sizes=[32, 64, 160, 256],
          depths=[1, 1, 3, 1], num_labels=10),
   pix(3, 96, 96), PV, LOGITS, opset=17, notes="PoolFormer: average-pool token mixer, GroupNorm.")
hf("more_levit", "vision",
   _model("LevitForImageClassification", "Levit", image_size=112, hidden_sizes=[64, 128, 192],
          num_attention_heads=[2, 4, 6], depths=[2, 2, 2], key_dim=[16, 16, 16], num_labels=10),
   pix(3, 112, 112), PV, LOGITS, opset=17,
   notes="LeViT: Linear + BatchNorm1d, attention biases, subsampling attention, hardswish.")
hf("more_dinov2", "vision",
   _model("Dinov2Model", "Dinov2", image_size=56, patch_size=8, hidden_size=128,
         num_hidden_layers=3, num_attention_heads=4, mlp_ratio=2),
   pix(3, 56, 56), PV, HIDDEN, opset=17, notes="DINOv2: layer scale, interpolated positions.")
hf("more_bit", "vision",
   _model("BitForImageClassification", "Bit", embedding_size=32,
          hidden_sizes=[64, 128, 256, 512], depths=[1, 1, 1, 1], layer_type="preactivation",
          num_groups=8, num_labels=10),
   pix(3, 96, 96), PV, LOGITS, opset=17,
   notes="BiT: weight-standardized convolutions, GroupNorm, pre-activation blocks.")
hf("more_pvt", "vision",
   _model("PvtForImageClassification", "Pvt", image_size=96, hidden_sizes=[32, 64, 128, 256],
          depths=[1, 1, 1, 1], num_attention_heads=[1, 2, 4, 8], num_labels=10),
   pix(3, 96, 96), PV, LOGITS, opset=17, notes="PVT: spatial-reduction attention.")
hf("more_swinv2", "vision",
   _model("Swinv2ForImageClassification", "Swinv2", image_size=64, patch_size=4, embed_dim=32,
          depths=[2, 2], num_heads=[2, 4], window_size=4, num_labels=10),
   pix(3, 64, 64), PV, LOGITS, opset=17,
   notes="Swin-V2: cosine attention with a learned scale, continuous position bias MLP.")
hf("more_focalnet", "vision",
   _model("FocalNetForImageClassification", "FocalNet", image_size=64, embed_dim=32,
          depths=[1, 1, 2, 1], num_labels=10),
   pix(3, 64, 64), PV, LOGITS, opset=17, notes="FocalNet: focal modulation, depthwise convs.")
hf("more_vit_224", "vision",
   _base("ViTModel", "ViT", image_size=224, patch_size=16, hidden_size=192, num_hidden_layers=4,
         num_attention_heads=3, intermediate_size=768),
   pix(3, 224, 224), PV, HIDDEN, opset=14, notes="ViT-Tiny-like at 224x224 (197 tokens).")
hf("more_resnet18_224", "vision",
   _model("ResNetForImageClassification", "ResNet", embedding_size=64,
          hidden_sizes=[64, 128, 256, 512], depths=[2, 2, 2, 2], layer_type="basic",
          num_labels=100),
   pix(3, 224, 224), PV, LOGITS, opset=15, notes="ResNet-18 at 224x224.")

# ---- decoders -------------------------------------------------------------------------------

hf("more_bloom", "text", _model("BloomForCausalLM", "Bloom", vocab_size=1000, hidden_size=128,
                                n_layer=2, n_head=4),
   text(32, 1000), IDS_MASK, LOGITS, opset=17, notes="BLOOM: ALiBi position bias.")
hf("more_opt", "text", _model("OPTForCausalLM", "OPT", **{**DEC, "ffn_dim": 512,
                                                          "word_embed_proj_dim": 128}),
   text(32, 1000), IDS_MASK, LOGITS, opset=17, notes="OPT: learned positions (offset 2).")
hf("more_gemma", "text", _model("GemmaForCausalLM", "Gemma", **{**DEC, "intermediate_size": 256,
                                                               "num_key_value_heads": 1,
                                                               "head_dim": 32}),
   text(32, 1000), IDS_MASK, LOGITS, opset=17,
   notes="Gemma: multi-query attention, GeGLU, scaled embeddings, RMSNorm (1 + w).")
hf("more_stablelm", "text",
   _model("StableLmForCausalLM", "StableLm", **{**DEC, "intermediate_size": 256,
                                                "num_key_value_heads": 2,
                                                "partial_rotary_factor": 0.25}),
   text(32, 1000), IDS_MASK, LOGITS, opset=17, notes="StableLM: partial rotary, LayerNorm.")
hf("more_gptj", "text", _model("GPTJForCausalLM", "GPTJ", vocab_size=1000, n_embd=128, n_layer=2,
                               n_head=4, rotary_dim=16, n_positions=128),
   text(32, 1000), IDS_MASK, LOGITS, opset=17,
   notes="GPT-J: interleaved rotary on part of the head, parallel attention and MLP.")
hf("more_falcon", "text", _model("FalconForCausalLM", "Falcon", vocab_size=1000, hidden_size=128,
                                 num_hidden_layers=2, num_attention_heads=4,
                                 new_decoder_architecture=False, multi_query=True),
   text(32, 1000), IDS_MASK, LOGITS, opset=17, notes="Falcon: multi-query attention, rotary.")
hf("more_qwen3", "text", _model("Qwen3ForCausalLM", "Qwen3", **{**DEC, "intermediate_size": 256,
                                                               "num_key_value_heads": 2,
                                                               "head_dim": 32}),
   text(32, 1000), IDS_MASK, LOGITS, opset=17, notes="Qwen3: RMSNorm on queries and keys.")
hf("more_olmo", "text", _model("OlmoForCausalLM", "Olmo", **{**DEC, "intermediate_size": 256}),
   text(32, 1000), IDS_MASK, LOGITS, opset=17, notes="OLMo: LayerNorm without parameters.")
hf("more_gpt2_s256", "text", _model("GPT2LMHeadModel", "GPT2", vocab_size=1000, n_embd=256,
                                    n_layer=2, n_head=4, n_positions=512),
   text(256, 1000), IDS_MASK, LOGITS, opset=14, notes="GPT-2 at 256 tokens.")
hf("more_llama_s256", "text",
   _model("LlamaForCausalLM", "Llama", vocab_size=1000, hidden_size=256, intermediate_size=688,
          num_hidden_layers=2, num_attention_heads=8, num_key_value_heads=2,
          max_position_embeddings=512),
   text(256, 1000), IDS_MASK, LOGITS, opset=17, notes="LLaMA (GQA 8/2) at 256 tokens.")

# ---- encoders -------------------------------------------------------------------------------

POS130 = {**SMALL, "max_position_embeddings": 130, "pad_token_id": 1}
hf("more_xlmr", "text", _base("XLMRobertaModel", "XLMRoberta", **POS130),
   text(32, 1000, pad_id=1), IDS_MASK, HIDDEN, opset=14)
hf("more_mpnet", "text", _base("MPNetModel", "MPNet", **POS130),
   text(32, 1000, pad_id=1), IDS_MASK, HIDDEN, opset=14,
   notes="MPNet: relative position bias buckets added to the attention scores.")
hf("more_squeezebert", "text", _model("SqueezeBertModel", "SqueezeBert", **SMALL,
                                      embedding_size=128),
   text(32, 1000), IDS_MASK, HIDDEN, opset=14, notes="SqueezeBERT: grouped 1-D convolutions.")
hf("more_mobilebert", "text",
   _base("MobileBertModel", "MobileBert", vocab_size=1000, hidden_size=128, num_hidden_layers=2,
         num_attention_heads=4, intermediate_size=128, intra_bottleneck_size=64,
         embedding_size=64, true_hidden_size=64, num_feedforward_networks=2),
   text(32, 1000), IDS_MASK, HIDDEN, opset=14, notes="MobileBERT: bottlenecks, NoNorm.")
hf("more_roformer", "text", _model("RoFormerModel", "RoFormer", **SMALL, embedding_size=128),
   text(32, 1000), IDS_MASK, HIDDEN, opset=14, notes="RoFormer: rotary position embedding.")
hf("more_funnel", "text", _model("FunnelBaseModel", "Funnel", vocab_size=1000, block_sizes=[1, 1],
                                 d_model=128, n_head=4, d_head=32, d_inner=256),
   text(32, 1000), IDS_MASK, HIDDEN, opset=14,
   notes="Funnel-Transformer: einsum attention, relative positions, sequence pooling.")
hf("more_bert_s256", "text",
   _base("BertModel", "Bert", **{**SMALL, "hidden_size": 256, "intermediate_size": 1024,
                                 "max_position_embeddings": 512}),
   text(256, 1000), IDS_MASK, HIDDEN, opset=14, notes="BERT 2x256 at 256 tokens.")

# ---- audio ----------------------------------------------------------------------------------

hf("more_data2vec_audio", "audio", _model("Data2VecAudioModel", "Data2VecAudio", **SPEECH),
   wave(16000), ("input_values",), HIDDEN, opset=17)
hf("more_ast", "audio",
   _model("ASTModel", "AST", hidden_size=128, num_hidden_layers=2, num_attention_heads=4,
         intermediate_size=256, num_mel_bins=64, max_length=128, frequency_stride=10,
         time_stride=10),
   _spectrogram, ("input_values",), HIDDEN, opset=17,
   notes="Audio Spectrogram Transformer: a ViT over a 128 x 64 spectrogram.")
hf("more_wavlm", "audio",
   _model("WavLMModel", "WavLM", **{**SPEECH, "num_conv_pos_embeddings": 32}, num_buckets=64,
         max_bucket_distance=200),
   wave(16000), ("input_values",), HIDDEN, opset=17, notes="WavLM: gated relative position bias.")
hf("more_sew", "audio",
   _model("SEWModel", "SEW", **{**SPEECH, "conv_dim": (64,) * 13, "num_conv_pos_embeddings": 32},
         squeeze_factor=2),
   wave(16000), ("input_values",), HIDDEN, opset=17, notes="SEW: squeezed sequence, upsampling.")
