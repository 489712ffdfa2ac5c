"""Generate tokens with a Llama-style decoder whose KV cache stays in a session's variables.

    python examples/decoder/generate.py                       # in this process
    python examples/decoder/generate.py --server 127.0.0.1:50051
    python examples/decoder/generate.py --checkpoint /tmp/kv.ckpt   # save, then resume

Random weights (seeded); the tokens are checked against the same model run step by step in
numpy. The prompt runs once (the prefill graph writes its K and V into the caches); then
the decode graph runs `--per-call` steps per call in sink mode, each reading and writing
the session's token, position and caches in place: a call's only output is its tokens.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository root

from examples.decoder.llama import (
    LlamaConfig,
    SessionDecoder,
    random_weights,
    reference_generate,
)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--server", help="HOST:PORT of a graphengine server (default: in process)")
    ap.add_argument("--tokens", type=int, default=32)
    ap.add_argument("--per-call", type=int, default=8)
    ap.add_argument("--checkpoint", help="save the state halfway here, resume it in a new "
                                         "session")
    args = ap.parse_args(argv)

    import graphengine
    from graphengine.clients import Client

    cfg = LlamaConfig(vocab_size=512, hidden_size=128, intermediate_size=344,
                      num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                      max_len=128)
    w = random_weights(cfg, seed=0)
    prompt = np.array([1, 42, 7, 99, 5], np.int64)
    client = Client(args.server, timeout=300) if args.server else None

    def session():
        return client.session() if client else graphengine.Session()

    with session() as s:
        dec = SessionDecoder(s, cfg, w)
        start = time.perf_counter()
        half = args.tokens // 2 if args.checkpoint else args.tokens
        tokens = dec.generate(prompt, half, args.per_call)
        seconds = time.perf_counter() - start
        for v in s.list_variables():
            print(f"variable {v.name}: {v.dtype.value}{list(v.shape)}")
        if args.checkpoint:
            s.save_checkpoint(args.checkpoint)
            print(f"saved the state after {half} tokens to {args.checkpoint}")
    if args.checkpoint:
        with session() as s:
            dec = SessionDecoder(s, cfg, w)
            s.restore_checkpoint(args.checkpoint)
            tokens += dec.step(args.tokens - half)
            print(f"resumed in a new session from {args.checkpoint}")
    expected, _ = reference_generate(cfg, w, prompt, args.tokens)
    print(f"tokens: {tokens}")
    print(f"{half} tokens in {seconds * 1e3:.0f} ms (with the compile); the numpy reference "
          f"{'agrees' if tokens == expected else 'DISAGREES'}")
    if client:
        client.close()
    return 0 if tokens == expected else 1


if __name__ == "__main__":
    sys.exit(main())
