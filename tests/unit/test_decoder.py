"""Stateful decoding in process (examples/decoder): a Llama-style decoder whose KV cache is
the session's variables generates the tokens of the same model run step by step in numpy
and in ONNX Runtime (past key values through IO binding), and moves no KV bytes per token."""

from __future__ import annotations

import numpy as np
import pytest

import graphengine
from examples.decoder.llama import (
    LlamaConfig,
    SessionDecoder,
    random_weights,
    reference_forward,
    reference_generate,
    variable_names,
)
from examples.decoder.onnx_past import OrtDecoder
from graphengine.errors import InvalidArgument

PROMPT = np.array([3, 17, 42, 9, 100, 7], np.int64)


@pytest.mark.parametrize("kv_heads", [4, 2], ids=["mha", "gqa"])
def test_the_decoder_generates_the_reference_tokens(kv_heads: int) -> None:
    cfg = LlamaConfig(num_key_value_heads=kv_heads, max_len=48)
    w = random_weights(cfg, seed=kv_heads)
    expected, _ = reference_generate(cfg, w, PROMPT, 24)
    assert len(set(expected)) > 4  # not a model stuck on one token
    ort = OrtDecoder(cfg, w)
    assert ort.generate(PROMPT, 24) == expected
    with graphengine.Session() as s:
        dec = SessionDecoder(s, cfg, w)
        assert dec.generate(PROMPT, 24, per_call=5) == expected
        assert sorted(t.name for t in s.list_variables()) == sorted(variable_names(cfg))
        assert int(s.get_variables(["pos"])["pos"][0]) == len(PROMPT) + 23
        # a second prompt starts over: the stale cache past its length is masked
        other = np.array([5, 4, 3], np.int64)
        assert dec.generate(other, 10, per_call=10) == reference_generate(cfg, w, other, 10)[0]


def test_each_steps_logits_match_the_reference() -> None:
    cfg = LlamaConfig(max_len=32)
    w = random_weights(cfg, seed=7)
    with graphengine.Session() as s:
        dec = SessionDecoder(s, cfg, w, logits=True)
        out = s.run_graph(dec.prefill, {"ids": PROMPT[None]})
        logits, past = reference_forward(cfg, w, PROMPT[None], None)
        for _ in range(6):
            scale = np.abs(logits[0, -1]).max()
            np.testing.assert_allclose(out["logits"][0, -1], logits[0, -1], rtol=0,
                                       atol=1e-4 * scale)
            token = int(out["token"][0, 0])
            assert token == int(np.argmax(logits[0, -1]))
            logits, past = reference_forward(cfg, w, np.array([[token]]), past)
            out = s.run_graph(dec.decode, {})


def test_the_kv_cache_stays_on_the_device() -> None:
    cfg = LlamaConfig(max_len=48)
    w = random_weights(cfg, seed=3)
    steps = 30
    with graphengine.Session() as s:
        dec = SessionDecoder(s, cfg, w)
        dec.start(PROMPT)
        before = s.runtime_stats()
        dec.step(steps)
        after = s.runtime_stats()
        moved = (after.bytes_copied + after.bytes_zero_copy) - \
            (before.bytes_copied + before.bytes_zero_copy)
        assert moved == 8 * steps  # the int64 token of each step, nothing else
        cache = sum(v.nbytes for k, v in s.get_variables().items() if "cache" in k)
    ort = OrtDecoder(cfg, w)
    ort.generate(PROMPT, steps + 1)
    assert ort.io_bytes / ort.steps > cache / 10  # its whole past in and present out


def test_generating_past_the_cache_fails_and_keeps_the_state() -> None:
    cfg = LlamaConfig(max_len=len(PROMPT) + 3)
    w = random_weights(cfg, seed=1)
    with graphengine.Session() as s:
        dec = SessionDecoder(s, cfg, w)
        dec.start(PROMPT)
        dec.step(3)  # fills the cache
        pos = s.get_variables(["pos"])["pos"].tolist()
        # the first node reading pos fails the run (the RoPE table's Gather, or AssignSlice)
        with pytest.raises(InvalidArgument, match=r"(index|start) 9 out of range"):
            dec.step(1)
        assert s.get_variables(["pos"])["pos"].tolist() == pos == [9]
