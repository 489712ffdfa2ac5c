"""Stateful decoding on a real server: the Llama-style decoder of examples/decoder keeps its
KV cache in the remote session's variables, generates the reference tokens, and a
checkpoint of that state (streamed to the client) resumes generation in a new session."""

from __future__ import annotations

from examples.decoder.llama import LlamaConfig, SessionDecoder, random_weights, reference_generate
from graphengine.clients import Client
from tests.unit.test_decoder import PROMPT


def test_a_remote_decoder_resumes_from_a_checkpoint_of_its_kv_cache(server: str,
                                                                    tmp_path) -> None:
    cfg = LlamaConfig(num_key_value_heads=2, max_len=40)
    w = random_weights(cfg, seed=5)
    expected, _ = reference_generate(cfg, w, PROMPT, 20)
    path = tmp_path / "kv.ckpt"
    with Client(server, timeout=120) as client:
        with client.session() as s:
            dec = SessionDecoder(s, cfg, w)
            first = dec.generate(PROMPT, 10, per_call=4)
            assert first == expected[:10]
            s.save_checkpoint(path)  # token, pos and every layer's K and V
            assert first + dec.step(10) == expected
        with client.session() as fresh:
            dec = SessionDecoder(fresh, cfg, w)
            assert len(fresh.restore_checkpoint(path)) == 2 + 2 * cfg.num_hidden_layers
            assert dec.step(10) == expected[10:]
