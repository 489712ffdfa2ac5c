"""Load time of zoo models cold (compiled) and from the compile cache, each in a fresh process.

    python benchmarks/bench_compile_cache.py [--only resnet50,hf_bert] [--repeat 2]

For each model: an empty cache folder; a process that opens a `graphengine.Session` with
`compile_cache=DIR`, adds the model, compiles it for the zoo's batch-1 inputs and runs them
once (cold: compiled and stored), then `--repeat` more processes doing the same (cached:
loaded from the folder). Each process reports add_graph (import, validation), compile_graph
(stages 1-5, or the cache read and stage 5) and the first run; the outputs of every process
must be the same bits. A process per measurement is what a restart is: nothing of the
compiler is warm.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import model_cache_dir

DEFAULT_MODELS = ("resnet50", "mobilenetv3_small", "efficientnet_b0", "hf_bert", "hf_gpt2",
                  "yolov8n_nms")


def worker(name: str, cache: str) -> dict:
    import numpy as np

    started = time.perf_counter()
    import graphengine

    folder = Path(model_cache_dir()) / "zoo" / name
    ref = np.load(folder / "ref_b1.npz")
    inputs = {k[len("input:"):]: ref[k] for k in ref.files if k.startswith("input:")}
    t_import = time.perf_counter() - started
    with graphengine.Session(compile_cache=cache) as sess:
        t0 = time.perf_counter()
        gid = sess.add_graph(str(folder / "model.onnx"))
        t1 = time.perf_counter()
        sess.compile_graph(gid, {k: v.shape for k, v in inputs.items()})
        t2 = time.perf_counter()
        out = sess.run_graph(gid, inputs)
        t3 = time.perf_counter()
        stats = sess.compile_cache.snapshot()
    digest = hashlib.sha256()
    for key in sorted(out):
        digest.update(key.encode() + np.ascontiguousarray(out[key]).tobytes())
    return {"import_s": t_import, "add_graph_s": t1 - t0, "compile_s": t2 - t1,
            "first_run_s": t3 - t2, "hits": stats.hits, "misses": stats.misses,
            "outputs": digest.hexdigest()}


def measure(name: str, cache: str) -> dict:
    done = subprocess.run([sys.executable, __file__, "--worker", name, cache],
                          capture_output=True, text=True, timeout=1800)
    if done.returncode != 0:
        raise RuntimeError(f"{name}: worker failed\n{done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", help="comma-separated zoo model names")
    parser.add_argument("--repeat", type=int, default=2, help="cached processes per model")
    parser.add_argument("--worker", nargs=2, metavar=("MODEL", "DIR"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        print(json.dumps(worker(*args.worker)))
        return 0
    names = args.only.split(",") if args.only else list(DEFAULT_MODELS)
    rows = []
    print(f"{'model':20} {'cold compile':>13} {'cached':>9} {'speedup':>8} "
          f"{'add_graph':>10} {'entry MB':>9}")
    for name in names:
        with tempfile.TemporaryDirectory(prefix="ge-cache-bench-") as cache:
            cold = measure(name, cache)
            warm = [measure(name, cache) for _ in range(args.repeat)]
            size = sum(f.stat().st_size for f in Path(cache).glob("*.geom"))
        assert cold["misses"] == 1 and cold["hits"] == 0, cold
        for w in warm:
            assert w["hits"] == 1 and w["misses"] == 0, w
            assert w["outputs"] == cold["outputs"], f"{name}: cached outputs differ"
        cached = min(w["compile_s"] for w in warm)
        rows.append({"model": name, "cold": cold, "cached": warm, "entry_bytes": size})
        print(f"{name:20} {cold['compile_s'] * 1e3:11.0f}ms {cached * 1e3:7.0f}ms "
              f"{cold['compile_s'] / cached:7.1f}x {cold['add_graph_s'] * 1e3:8.0f}ms "
              f"{size / 1e6:9.1f}", flush=True)
    out = Path(__file__).resolve().parent / "results" / time.strftime(
        "compile-cache-%Y%m%d-%H%M%S.json")
    out.write_text(json.dumps({"models": rows, "cpu": os.cpu_count()}, indent=1))
    print(f"results: {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
