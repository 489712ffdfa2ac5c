"""Zoo builders: transformers' default attention as the exporters write it (names ``more_*``).

The other waves build their transformers with eager attention, which the exporters trace
most faithfully; but transformers 5 runs `scaled_dot_product_attention` (sdpa) by default, and
that exports differently in each of torch's exporters: TorchScript writes the probabilities
through Where(IsNaN(P), 0, P); the dynamo exporter at its default opset (20 in torch 2.13)
also writes Kᵀ as bmm's 3-D transpose between Reshapes; at opset 23 it writes one ONNX
`Attention` node. None of the three was fused before (the opset-23 node ran on the host,
every layer a host step). Each model is the end-to-end check of one of those forms, with a
second class where the architecture brings one: multi-query attention (one K/V head that
MatMul broadcasts), grouped heads, RMSNormalization as the opset-23 node.
"""

from __future__ import annotations

from models_hf import IDS_MASK, SMALL, cfg, hf
from models_torch import text

LOGITS, HIDDEN = ("logits",), ("last_hidden_state",)
DEC = dict(vocab_size=1000, hidden_size=128, num_hidden_layers=2, num_attention_heads=4,
           intermediate_size=256, max_position_embeddings=128)

hf("more_sdpa_bert", "text",
   lambda T: T.BertModel(cfg(T, "Bert", **SMALL, attn="sdpa"), add_pooling_layer=False),
   text(32, 1000), IDS_MASK, HIDDEN, opset=17,
   notes="BERT with sdpa attention: Where(IsNaN(P), 0, P) after the Softmax.")
hf("more_dyn_llama", "text",
   lambda T: T.LlamaForCausalLM(cfg(T, "Llama", **DEC, num_key_value_heads=2, attn="sdpa")),
   text(32, 1000), IDS_MASK, LOGITS, opset=20, dynamo=True,
   notes="Llama with sdpa, torch's default export: Kᵀ as a 3-D transpose, grouped heads.")
hf("more_dyn_falcon", "text",
   lambda T: T.FalconForCausalLM(cfg(T, "Falcon", vocab_size=1000, hidden_size=128,
                                     num_hidden_layers=2, num_attention_heads=4,
                                     new_decoder_architecture=False, multi_query=True,
                                     attn="sdpa")),
   text(32, 1000), IDS_MASK, LOGITS, opset=20, dynamo=True,
   notes="Falcon with sdpa, torch's default export: one K/V head broadcast by MatMul.")
hf("more_att23_qwen2", "text",
   lambda T: T.Qwen2ForCausalLM(cfg(T, "Qwen2", **DEC, num_key_value_heads=2, attn="sdpa")),
   text(32, 1000), IDS_MASK, LOGITS, opset=23, dynamo=True,
   notes="Qwen2 at opset 23: ONNX Attention and RMSNormalization nodes.")
