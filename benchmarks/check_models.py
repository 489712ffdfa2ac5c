"""Check GraphEngine's outputs against ONNX Runtime on the benchmark models.

    python benchmarks/check_models.py [--only mlp,resnet18] [--server HOST:PORT] [--batch N]

Runs each cached model (see build_models.py) in-process (or through a running server with
--server) and in ONNX Runtime on the same random inputs, and reports the largest
differences against rtol 1e-3 / atol 1e-4. Exits non-zero on any mismatch.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import MODEL_NAMES, model_path, ort_run, random_inputs

RTOL, ATOL = 1e-3, 1e-4


def run_graphengine(path: Path, inputs: dict, server: str | None) -> tuple[dict, float, float]:
    if server:
        from graphengine.clients import Client

        with Client(server) as client, client.session() as sess:
            return _run(sess, path, inputs)
    import graphengine

    with graphengine.Session() as sess:
        return _run(sess, path, inputs)


def _run(sess, path: Path, inputs: dict) -> tuple[dict, float, float]:
    t0 = time.perf_counter()
    gid = sess.add_graph(str(path))
    sess.compile_graph(gid, {k: v.shape for k, v in inputs.items()})
    t1 = time.perf_counter()
    out = sess.run_graph(gid, inputs)
    return out, t1 - t0, time.perf_counter() - t1


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", default=",".join(MODEL_NAMES))
    ap.add_argument("--server", default=None)
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    failures = 0
    for name in args.only.split(","):
        path = model_path(name)
        if not path.exists():
            print(f"{name}: {path} missing; run benchmarks/build_models.py first")
            failures += 1
            continue
        inputs = random_inputs(path, batch=args.batch, seed=args.seed)
        ref = ort_run(path, inputs)
        ours, t_compile, t_run = run_graphengine(path, inputs, args.server)
        worst = 0.0
        ok = set(ours) == set(ref)
        for key in ref:
            a, b = np.asarray(ours.get(key)), ref[key]
            if a.shape != b.shape:
                ok = False
                continue
            excess = np.abs(a - b) - (ATOL + RTOL * np.abs(b))
            worst = max(worst, float(np.max(np.abs(a - b))))
            ok &= bool(np.all(excess <= 0))
        failures += not ok
        print(f"{name:12s} {'OK ' if ok else 'BAD'} max|diff| {worst:.2e}  "
              f"compile+load {t_compile * 1e3:8.1f} ms  first run {t_run * 1e3:8.1f} ms")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
