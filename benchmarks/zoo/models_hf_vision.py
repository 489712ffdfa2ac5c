"""Zoo builders: ``transformers`` vision and audio models from small Configs (see models_hf.py)."""

from __future__ import annotations

import numpy as np
from models_hf import cfg, hf


def pix(c: int, h: int, w: int, name: str = "pixel_values"):
    def inputs(batch: int, seed: int) -> dict:
        rng = np.random.default_rng(seed)
        return {name: rng.standard_normal((batch, c, h, w)).astype(np.float32)}
    return inputs


def log_mel(mels: int, frames: int):
    def inputs(batch: int, seed: int) -> dict:
        rng = np.random.default_rng(seed)
        base = rng.standard_normal((batch, mels, frames // 8 + 1)).repeat(8, -1)[..., :frames]
        x = 0.4 * base + 0.2 * rng.standard_normal((batch, mels, frames))
        return {"input_features": np.clip(x, -1.0, 1.5).astype(np.float32)}
    return inputs


def wave(n: int):
    from models_torch import waveform
    return waveform(n)


PV = ("pixel_values",)
VIT = dict(image_size=64, patch_size=8, hidden_size=128, num_hidden_layers=2,
           num_attention_heads=4, intermediate_size=256)

# ---- vision transformers --------------------------------------------------------------------

hf("hf_vit", "vision", lambda T: T.ViTModel(cfg(T, "ViT", **VIT), add_pooling_layer=False),
   pix(3, 64, 64), PV, ("last_hidden_state",), opset=14,
   notes="ViTModel 64x64, patch 8 (Conv patch embed), CLS token, 2x128.")
hf("hf_deit", "vision",
   lambda T: T.DeiTForImageClassificationWithTeacher(cfg(T, "DeiT", **VIT, num_labels=10)),
   pix(3, 64, 64), PV, ("logits",), opset=17,
   notes="DeiT with distillation token; logits = mean of the class and distillation heads.")
hf("hf_beit", "vision",
   lambda T: T.BeitForImageClassification(cfg(T, "Beit", **VIT, num_labels=10,
                                              use_relative_position_bias=True,
                                              use_mean_pooling=True, layer_scale_init_value=0.1)),
   pix(3, 64, 64), PV, ("logits",), opset=13,
   notes="BEiT: relative position bias table gather, layer scale, mean pooling.")
hf("hf_swin", "vision",
   lambda T: T.SwinForImageClassification(cfg(T, "Swin", image_size=64, patch_size=4,
                                              embed_dim=32, depths=[2, 2, 2],
                                              num_heads=[2, 4, 8], window_size=4,
                                              num_labels=10)),
   pix(3, 64, 64), PV, ("logits",), opset=18, dynamo=True,
   notes="Swin: window partition/reverse, shifted windows (roll), attention mask, patch "
   "merging; 3 stages.")
hf("hf_swin_ts", "vision",
   lambda T: T.SwinForImageClassification(cfg(T, "Swin", image_size=64, patch_size=4,
                                              embed_dim=32, depths=[2, 2], num_heads=[2, 4],
                                              window_size=4, num_labels=10)),
   pix(3, 64, 64), PV, ("logits",), opset=17,
   notes="Swin (2 stages) through the TorchScript exporter.")
hf("hf_mobilevit", "vision",
   lambda T: T.MobileViTForImageClassification(cfg(T, "MobileViT", image_size=128,
                                                   hidden_sizes=[64, 80, 96],
                                                   neck_hidden_sizes=[16, 24, 48, 64, 80, 96,
                                                                      384], num_labels=10)),
   pix(3, 128, 128), PV, ("logits",), opset=17,
   notes="MobileViT-XXS-like: inverted residuals + transformer blocks on unfolded patches.")

# ---- conv nets ------------------------------------------------------------------------------

hf("hf_convnext", "vision",
   lambda T: T.ConvNextForImageClassification(cfg(T, "ConvNext", hidden_sizes=[32, 64, 128, 256],
                                                  depths=[1, 1, 2, 1], num_labels=10)),
   pix(3, 64, 64), PV, ("logits",), opset=13,
   notes="ConvNeXt: depthwise 7x7, channels-last LayerNorm (permutes), layer scale, GELU.")
hf("hf_resnet", "vision",
   lambda T: T.ResNetForImageClassification(cfg(T, "ResNet", embedding_size=32,
                                                hidden_sizes=[64, 128, 256, 512],
                                                depths=[1, 1, 2, 1], layer_type="bottleneck",
                                                num_labels=10)),
   pix(3, 128, 128), PV, ("logits",), opset=15,
   notes="HF ResNet (bottleneck, reduction 4), BatchNorm kept.")
hf("hf_mobilenet_v2", "vision",
   lambda T: T.MobileNetV2ForImageClassification(cfg(T, "MobileNetV2", depth_multiplier=0.5,
                                                     image_size=128, num_labels=10)),
   pix(3, 128, 128), PV, ("logits",), opset=13, keep_bn=False,
   notes="HF MobileNetV2 x0.5 with TF 'SAME' padding (explicit Pad), ReLU6; BN folded.")
hf("hf_efficientnet", "vision",
   lambda T: T.EfficientNetForImageClassification(cfg(T, "EfficientNet", width_coefficient=0.5,
                                                      depth_coefficient=0.5, image_size=128,
                                                      hidden_dim=640, num_labels=10)),
   pix(3, 128, 128), PV, ("logits",), opset=18, dynamo=True,
   notes="HF EfficientNet (0.5 width/depth): depthwise, SE, SiLU, 'same' padding.")

# ---- segmentation ---------------------------------------------------------------------------

hf("hf_segformer", "segmentation",
   lambda T: T.SegformerForSemanticSegmentation(cfg(T, "Segformer", depths=[1, 1, 1, 1],
                                                    hidden_sizes=[16, 32, 64, 128],
                                                    num_attention_heads=[1, 2, 2, 4],
                                                    decoder_hidden_size=64, num_labels=6)),
   pix(3, 128, 128), PV, ("logits",), opset=16,
   notes="SegFormer: overlapping patch embed, efficient (reduced-KV) attention, Mix-FFN "
   "depthwise conv, all-MLP decoder with bilinear upsampling; logits at 1/4 res.")

# ---- audio ----------------------------------------------------------------------------------

W2V = dict(hidden_size=128, num_hidden_layers=2, num_attention_heads=4, intermediate_size=256,
           conv_dim=(64,) * 7, num_conv_pos_embeddings=32, num_conv_pos_embedding_groups=4,
           vocab_size=32)
hf("hf_wav2vec2", "audio",
   lambda T: T.Wav2Vec2Model(cfg(T, "Wav2Vec2", **W2V, feat_extract_norm="layer",
                                 do_stable_layer_norm=True)),
   wave(16000), ("input_values",), ("last_hidden_state",), opset=17,
   notes="Wav2Vec2Model on 1 s raw 16 kHz audio: 7-layer Conv1d feature extractor with "
   "LayerNorm, weight-normed positional conv, pre-LN transformer.")
hf("hf_hubert", "audio",
   lambda T: T.HubertModel(cfg(T, "Hubert", **W2V, feat_extract_norm="group")),
   wave(16000), ("input_values",), ("last_hidden_state",), opset=18, dynamo=True,
   notes="HubertModel: Conv1d feature extractor with GroupNorm, post-LN transformer.")
hf("hf_whisper_encoder", "audio",
   lambda T: T.WhisperModel(cfg(T, "Whisper", d_model=128, encoder_layers=2, decoder_layers=1,
                                encoder_attention_heads=4, decoder_attention_heads=4,
                                encoder_ffn_dim=256, decoder_ffn_dim=256, num_mel_bins=80,
                                max_source_positions=100, vocab_size=100, pad_token_id=1,
                                bos_token_id=0, eos_token_id=2,
                                decoder_start_token_id=0)).get_encoder(),
   log_mel(80, 200), ("input_features",), ("last_hidden_state",), opset=17,
   notes="Whisper encoder: 80 log-mel bins x 200 frames, 2 Conv1d (stride 2), GELU, "
   "sinusoidal positions, pre-LN transformer.")
