"""Zoo builders: ``transformers`` architectures added in a third wave (names ``more_*`` too),
first built outside the zoo as models the project had not seen (see models_hf.py for how a
builder works).

All compiled and ran correctly on the first try; each of these found a class defect that
is fixed now, and stays here as its end-to-end check: SwiftFormer's Tile (no device kernel:
the device program cut in nine), Speech2Text's subsampled-mask ScatterND (a host step between
two device programs), Mixtral's experts (matmuls on the host after a NonZero, where numpy's
threaded BLAS fought the device's team: 163 ms a run against ONNX Runtime's 2.1), and
DeBERTa-v2's disentangled attention, a Conformer's convolution module and GLPN's upsampling
decoder as new shapes of attention, 1-D convolution and dense prediction.

Qwen2-MoE and OLMoE were added with the fix for Mixtral's experts (prepare/expert_rows.py)
as two more of its family: the same eager experts behind other routers (a gated shared
expert; top-4 of 8 with q/k norms). Their traced hit list is split into as many parts as
the trace saw experts hit, so ONNX Runtime fails on inputs that leave an expert without a
token; Qwen2-MoE has 4 experts here, so that its references hit every one.
"""

from __future__ import annotations

import numpy as np
from models_hf import IDS_MASK, SMALL, cfg, hf
from models_hf_vision import PV, pix, wave
from models_torch import text

LOGITS, HIDDEN = ("logits",), ("last_hidden_state",)


def _features(batch: int, seed: int) -> dict:
    """Speech2Text's input: 120 frames of 40 filterbank features, every frame valid."""
    rng = np.random.default_rng(seed)
    return {"input_features": rng.standard_normal((batch, 120, 40)).astype(np.float32),
            "attention_mask": np.ones((batch, 120), np.int64)}


hf("more_swiftformer", "vision",
   lambda T: T.SwiftFormerForImageClassification(cfg(
       T, "SwiftFormer", embed_dims=[32, 48, 96, 160], depths=[1, 1, 2, 1], num_labels=10)),
   pix(3, 96, 96), PV, LOGITS, opset=17,
   notes="SwiftFormer: additive attention (a Tile of the global query), depthwise convs.")
hf("more_glpn", "vision",
   lambda T: T.GLPNForDepthEstimation(cfg(
       T, "GLPN", hidden_sizes=[16, 32, 64, 128], depths=[1, 1, 1, 1], decoder_hidden_size=32,
       num_attention_heads=[1, 2, 4, 8])),
   pix(3, 64, 64), PV, ("predicted_depth",), opset=17,
   notes="GLPN: Mix-Transformer encoder, upsampling depth decoder.")
hf("more_deberta_v2", "text",
   lambda T: T.DebertaV2Model(cfg(T, "DebertaV2", **SMALL, relative_attention=True,
                                  position_buckets=32, pos_att_type=["p2c", "c2p"],
                                  max_relative_positions=64)),
   text(32, 1000), IDS_MASK, HIDDEN, opset=17, notes="DeBERTa-v2: disentangled attention.")
hf("more_mixtral", "text",
   lambda T: T.MixtralForCausalLM(cfg(
       T, "Mixtral", vocab_size=1000, hidden_size=128, intermediate_size=256,
       num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, num_local_experts=4,
       num_experts_per_tok=2, max_position_embeddings=128, experts_implementation="eager")),
   text(32, 1000), IDS_MASK, LOGITS, opset=17,
   notes="Mixtral: top-2 of 4 experts, each expert's rows picked by a NonZero.")
hf("more_speech2text", "audio",
   lambda T: T.Speech2TextModel(cfg(
       T, "Speech2Text", vocab_size=100, d_model=128, encoder_layers=2, decoder_layers=1,
       encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=256,
       decoder_ffn_dim=256, input_feat_per_channel=40, max_source_positions=200,
       conv_channels=128)).get_encoder(),
   _features, ("input_features", "attention_mask"), HIDDEN, opset=17,
   notes="Speech2Text encoder: Conv1d + GLU subsampler, subsampled mask by ScatterND.")
hf("more_w2v_conformer", "audio",
   lambda T: T.Wav2Vec2ConformerModel(cfg(
       T, "Wav2Vec2Conformer", hidden_size=128, num_hidden_layers=2, num_attention_heads=4,
       intermediate_size=256, conv_dim=(64,) * 7, num_conv_pos_embedding_groups=4,
       conformer_conv_kernel_size=15, position_embeddings_type="rotary")),
   wave(16000), ("input_values",), HIDDEN, opset=17,
   notes="Wav2Vec2-Conformer: rotary attention; GLU, depthwise Conv1d k=15, BatchNorm.")
hf("more_qwen2_moe", "text",
   lambda T: T.Qwen2MoeForCausalLM(cfg(
       T, "Qwen2Moe", vocab_size=1000, hidden_size=128, intermediate_size=256,
       moe_intermediate_size=128, shared_expert_intermediate_size=256, num_hidden_layers=2,
       num_attention_heads=4, num_key_value_heads=2, num_experts=4, num_experts_per_tok=2,
       max_position_embeddings=128, experts_implementation="eager")),
   text(32, 1000), IDS_MASK, LOGITS, opset=17,
   notes="Qwen2-MoE: top-2 of 4 experts and a gated shared expert.")
hf("more_olmoe", "text",
   lambda T: T.OlmoeForCausalLM(cfg(
       T, "Olmoe", vocab_size=1000, hidden_size=128, intermediate_size=128,
       num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=4, num_experts=8,
       num_experts_per_tok=4, max_position_embeddings=128, experts_implementation="eager")),
   text(32, 1000), IDS_MASK, LOGITS, opset=17,
   notes="OLMoE: top-4 of 8 experts, q/k norms.")
