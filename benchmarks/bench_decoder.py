"""Stateful decoding: a Llama-style decoder (a transformers LlamaForCausalLM, random
weights) generating greedy tokens with its KV cache held as session variables on the device
(examples/decoder/llama.py), against ONNX Runtime running the same model with past-key-value
inputs and outputs bound through its IO binding (examples/decoder/onnx_past.py).

    python benchmarks/bench_decoder.py [--layers 4 --hidden 256 ...] [--server HOST:PORT]
    make bench-decoder

Both must generate transformers' own greedy tokens (its forward pass with its KV cache,
step by step); the run stops otherwise. Reported per engine: decode tokens/s (the steps
after the prompt, best of `--rounds`), and the bytes that cross the model's boundary per
generated token (inputs and outputs: ours from the runtime's statistics, ONNX Runtime's
from the arrays it binds). Ours: `--per-call` tokens per call (sink mode). Results go to
benchmarks/results/decoder-<timestamp>.json. torch and transformers only build the model
and its reference tokens.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from examples.decoder.llama import LlamaConfig, SessionDecoder, weights_from_hf  # noqa: E402
from examples.decoder.onnx_past import OrtDecoder  # noqa: E402


def hf_model(args: argparse.Namespace):
    import torch
    import transformers

    torch.manual_seed(args.seed)
    config = transformers.LlamaConfig(
        vocab_size=args.vocab, hidden_size=args.hidden, intermediate_size=args.ffn,
        num_hidden_layers=args.layers, num_attention_heads=args.heads,
        num_key_value_heads=args.kv_heads, max_position_embeddings=args.max_len,
        initializer_range=args.init, tie_word_embeddings=False)
    return transformers.LlamaForCausalLM(config).eval()


def hf_tokens(model, prompt: np.ndarray, n: int) -> list[int]:
    """transformers' greedy tokens, its own forward pass and KV cache, step by step."""
    import inspect

    import torch

    # transformers >= 5.2x names the KV cache `cache` (before: `past_key_values`)
    key = "cache" if "cache" in inspect.signature(model.forward).parameters \
        else "past_key_values"
    with torch.no_grad():
        out = model(input_ids=torch.from_numpy(prompt[None]), use_cache=True)
        tokens = [int(out.logits[0, -1].argmax())]
        while len(tokens) < n:
            out = model(input_ids=torch.tensor([[tokens[-1]]]), use_cache=True,
                        **{key: getattr(out, key)})
            tokens.append(int(out.logits[0, -1].argmax()))
    return tokens


def bench_ours(session, cfg, w, prompt, n: int, per_call: int, rounds: int,
               expected: list[int]) -> dict:
    dec = SessionDecoder(session, cfg, w)
    t0 = time.perf_counter()
    dec.generate(prompt, min(n, per_call + 1), per_call)  # compile and load both graphs
    first_seconds = time.perf_counter() - t0
    best = None
    moved = 0
    for _ in range(rounds):
        tokens = [dec.start(prompt)]
        stats = _io_bytes(session)
        start = time.perf_counter()
        while len(tokens) < n:
            tokens += dec.step(min(per_call, n - len(tokens)))
        seconds = time.perf_counter() - start
        moved = _io_bytes(session) - stats
        if tokens != expected:
            raise SystemExit(f"graphengine (per_call {per_call}) generated {tokens[:16]}..., "
                             f"transformers {expected[:16]}...")
        best = seconds if best is None else min(best, seconds)
    steps = n - 1
    cache = sum(a.nbytes for k, a in session.get_variables().items() if "cache" in k)
    return {"per_call": per_call, "decode_tokens_per_s": steps / best,
            "bytes_per_token": moved / steps, "first_call_seconds": first_seconds,
            "kv_cache_bytes": cache}


def _io_bytes(session) -> int:
    """Bytes the session's models took in and gave out (the runtime's statistics; an
    in-process session's: a remote session does not expose them, 0)."""
    stats = getattr(session, "runtime_stats", None)
    if stats is None:
        return 0
    s = stats()
    return s.bytes_copied + s.bytes_zero_copy


def bench_ort(cfg, w, prompt, n: int, threads: int, rounds: int, expected: list[int]) -> dict:
    ort = OrtDecoder(cfg, w, threads)
    ort.generate(prompt, 2)  # warm up
    best = None
    for _ in range(rounds):
        tokens = ort.generate(prompt, n)
        if tokens != expected:
            raise SystemExit(f"ONNX Runtime generated {tokens[:16]}..., transformers "
                             f"{expected[:16]}...")
        best = ort.decode_seconds if best is None else min(best, ort.decode_seconds)
    steps = n - 1
    return {"decode_tokens_per_s": steps / best, "bytes_per_token": ort.decode_bytes / steps}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--vocab", type=int, default=2048)
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--ffn", type=int, default=688)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--kv-heads", type=int, default=4)
    ap.add_argument("--max-len", type=int, default=256, help="KV cache positions")
    ap.add_argument("--init", type=float, default=0.1, help="initializer_range of the weights")
    ap.add_argument("--prompt", type=int, default=16)
    ap.add_argument("--tokens", type=int, default=128, help="tokens generated per round")
    ap.add_argument("--per-call", default="1,8,32", help="ours: tokens per call (sink mode)")
    ap.add_argument("--threads", type=int, default=1, help="threads of each engine")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--server", default=None, help="also through a server's session")
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results"))
    args = ap.parse_args(argv)

    import graphengine
    from graphengine.engine.runtime import default_device

    model = hf_model(args)
    cfg = LlamaConfig.from_hf(model.config, args.max_len)
    w = weights_from_hf(model)
    prompt = np.random.default_rng(args.seed).integers(0, args.vocab, args.prompt).astype(np.int64)
    expected = hf_tokens(model, prompt, args.tokens)
    print(f"transformers LlamaForCausalLM: {args.layers} layers, hidden {args.hidden}, "
          f"{args.heads} heads / {args.kv_heads} KV heads, vocab {args.vocab}; prompt "
          f"{args.prompt}, {args.tokens} tokens, {args.threads} thread(s)")
    results = {"config": vars(args), "tokens": expected, "ours": [], "ours_remote": [],
               "machine": {"cpu": platform.processor(), "cores": os.cpu_count()}}
    per_calls = [int(x) for x in args.per_call.split(",")]
    for per_call in per_calls:
        with graphengine.Session(device=default_device(args.threads)) as s:
            r = bench_ours(s, cfg, w, prompt, args.tokens, per_call, args.rounds, expected)
        results["ours"].append(r)
        print(f"  graphengine, {per_call:3d} tokens/call: {r['decode_tokens_per_s']:8.1f} "
              f"tokens/s, {r['bytes_per_token']:10.1f} bytes/token "
              f"(KV cache {r['kv_cache_bytes']} bytes, on the device)")
    if args.server:
        from graphengine.clients import Client

        with Client(args.server, timeout=600) as client:
            for per_call in per_calls:
                with client.session() as s:
                    r = bench_ours(s, cfg, w, prompt, args.tokens, per_call, args.rounds,
                                   expected)
                r["bytes_per_token"] = None  # the server's counters are not read remotely
                results["ours_remote"].append(r)
                print(f"  graphengine server, {per_call:3d} tokens/call: "
                      f"{r['decode_tokens_per_s']:8.1f} tokens/s")
    r = bench_ort(cfg, w, prompt, args.tokens, args.threads, args.rounds, expected)
    results["onnxruntime"] = r
    print(f"  onnxruntime (past KV, IO binding):  {r['decode_tokens_per_s']:8.1f} tokens/s, "
          f"{r['bytes_per_token']:10.1f} bytes/token")
    print("  all engines generated transformers' greedy tokens")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"decoder-{time.strftime('%Y%m%d-%H%M%S')}.json"
    path.write_text(json.dumps(results, indent=1))
    print(f"results: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
