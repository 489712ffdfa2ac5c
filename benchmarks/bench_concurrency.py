"""Concurrent callers on one loaded model: correctness and throughput, 1 caller vs N.

    python benchmarks/bench_concurrency.py [--model mobilenetv2] [--callers 8]
                                           [--instances 4] [--seconds 2] [--json]

One LoadedModel with `instances` arenas (weights shared) serves every caller; callers beyond
the instances queue inside the runtime. Each caller checks every output it gets against a
serial reference for its input, and the total runs per second is compared with one caller.
Rounds of 1 caller and of N callers alternate (`--rounds` of each) and each side reports its
best round, so a burst of load from elsewhere on a shared machine does not decide the ratio.
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
    ap.add_argument("--seconds", type=float, default=1.0, help="per round")
    ap.add_argument("--rounds", type=int, default=3, help="rounds of each (alternating)")
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
            # allclose's tolerance (atol + rtol * |ref|), precomputed: np.allclose itself costs
            # more Python time than a small model's run, and the callers share one GIL
            tol = {k: 1e-6 + 1e-5 * np.abs(v) for k, v in ref.items()}
            while time.perf_counter() < stop:
                out = model.execute(feed)
                for k, v in out.items():
                    if v.shape != ref[k].shape or not (np.abs(v - ref[k]) <= tol[k]).all():
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

    ones, manys, err1, err_n, runs = [], [], [], [], 0
    for _ in range(args.rounds):
        tp, _, err = run(1)
        ones.append(tp)
        err1 += err
        tp, n, err = run(args.callers)
        manys.append(tp)
        err_n += err
        runs += n
    one, many = max(ones), max(manys)
    # execute_async: every future's result must match too.
    futures = [model.execute_async(f) for f in feeds]
    async_ok = all(np.allclose(fut.result()[k], reference[i][k], rtol=1e-5, atol=1e-6)
                   for i, fut in enumerate(futures) for k in reference[i])
    model.close()
    result = {
        "model": args.model, "instances": args.instances, "callers": args.callers,
        "throughput_1": one, "throughput_n": many, "ratio": many / one, "runs_n": runs,
        "rounds_1": ones, "rounds_n": manys,
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
