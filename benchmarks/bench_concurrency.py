"""Concurrent callers on one loaded model: correctness and throughput, 1 caller vs N.

    python benchmarks/bench_concurrency.py [--model mobilenetv2] [--callers 8]
                                           [--instances 4] [--seconds 2] [--json]

One LoadedModel with `instances` arenas (weights shared) serves every caller; callers beyond
the instances queue inside the runtime. Each caller checks every output it gets against a
serial reference for its input, and the total runs per second is compared with one caller.
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import model_path, random_inputs


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="mobilenetv2")
    ap.add_argument("--callers", type=int, default=8)
    ap.add_argument("--instances", type=int, default=4)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--seconds", type=float, default=2.0)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)

    from graphengine import _runtime
    from graphengine.engine.importers import load_model
    from graphengine.engine.pipeline import compile_graph
    from graphengine.engine.runtime import LoadedModel

    path = model_path(args.model)
    feeds = [random_inputs(path, batch=1, seed=s) for s in range(args.callers)]
    compiled = compile_graph(load_model(str(path)),
                             input_shapes={k: v.shape for k, v in feeds[0].items()})
    model = LoadedModel(compiled, _runtime.Device(args.threads), instances=args.instances)
    reference = [model.execute(f) for f in feeds]

    def run(callers: int) -> tuple[float, int, list[str]]:
        counts = [0] * callers
        errors: list[str] = []
        stop = time.perf_counter() + args.seconds

        def caller(i: int) -> None:
            feed, ref = feeds[i], reference[i]
            while time.perf_counter() < stop:
                out = model.execute(feed)
                for k, v in out.items():
                    if not np.allclose(v, ref[k], rtol=1e-5, atol=1e-6):
                        errors.append(f"caller {i}: output {k} differs")
                        return
                counts[i] += 1

        threads = [threading.Thread(target=caller, args=(i,)) for i in range(callers)]
        t0 = time.perf_counter()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        return sum(counts) / (time.perf_counter() - t0), sum(counts), errors

    one, _, err1 = run(1)
    many, runs, err_n = run(args.callers)
    # execute_async: every future's result must match too.
    futures = [model.execute_async(f) for f in feeds]
    async_ok = all(np.allclose(fut.result()[k], reference[i][k], rtol=1e-5, atol=1e-6)
                   for i, fut in enumerate(futures) for k in reference[i])
    model.close()
    result = {
        "model": args.model, "instances": args.instances, "callers": args.callers,
        "throughput_1": one, "throughput_n": many, "ratio": many / one, "runs_n": runs,
        "correct": not err1 and not err_n and async_ok, "errors": (err1 + err_n)[:5],
    }
    if args.json:
        print(json.dumps(result))
    else:
        print(f"{args.model}: 1 caller {one:.1f}/s, {args.callers} callers {many:.1f}/s "
              f"({many / one:.2f}x), correct: {result['correct']}")
    return 0 if result["correct"] else 1


if __name__ == "__main__":
    sys.exit(main())
