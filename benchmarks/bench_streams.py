"""Multi-stream speedup: the branchy model on 1 stream vs 2, single-threaded kernels.

    python benchmarks/bench_streams.py [--model branchy] [--seconds 1] [--rounds 3] [--json]

Both variants compile the same graph (CompileOptions(max_streams=1) and (max_streams=2):
the build stage puts independent branches on different streams with events between them)
and run with one thread per stream: 1 stream on a 1-thread device, 2 streams on a 2-thread
device. The speedup is what the streams alone buy. A 2-thread, 1-stream run (intra-op
parallelism instead) is reported for reference. Rounds alternate between the variants.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import model_path, random_inputs


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="branchy")
    ap.add_argument("--seconds", type=float, default=1.0)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    args = ap.parse_args(argv)

    from graphengine import _runtime
    from graphengine.engine.importers import load_model
    from graphengine.engine.model import DeviceProgram
    from graphengine.engine.pipeline import CompileOptions, compile_graph
    from graphengine.engine.runtime import LoadedModel

    path = model_path(args.model)
    inputs = random_inputs(path, batch=1, seed=0)
    shapes = {k: v.shape for k, v in inputs.items()}
    graph = load_model(str(path))

    def build(max_streams: int, threads: int) -> LoadedModel:
        compiled = compile_graph(graph, CompileOptions(max_streams=max_streams),
                                 input_shapes=shapes)
        return LoadedModel(compiled, _runtime.Device(threads))

    variants = {"1 stream, 1 thread": build(1, 1), "2 streams, 1 thread each": build(2, 2),
                "1 stream, 2 threads": build(1, 2)}
    streams = {name: max(p.num_streams for p in m.compiled.programs
                         if isinstance(p, DeviceProgram)) for name, m in variants.items()}
    if streams["2 streams, 1 thread each"] < 2:
        print(f"the compiler put {args.model} on one stream: no stream assignment to measure",
              file=sys.stderr)
        return 1
    reference = None
    for m in variants.values():
        out = m.execute(inputs)
        if reference is None:
            reference = out
        for k, v in out.items():
            np.testing.assert_allclose(v, reference[k], rtol=1e-4, atol=1e-4)
        for _ in range(2):
            m.execute(inputs)

    medians: dict[str, list[float]] = {name: [] for name in variants}
    for r in range(args.rounds):
        order = list(variants) if r % 2 == 0 else list(reversed(variants))
        for name in order:
            m = variants[name]
            times = []
            deadline = time.perf_counter() + args.seconds
            while len(times) < 5 or time.perf_counter() < deadline:
                t0 = time.perf_counter()
                m.execute(inputs)
                times.append(time.perf_counter() - t0)
            medians[name].append(statistics.median(times))
    best = {name: min(v) for name, v in medians.items()}
    one, two = best["1 stream, 1 thread"], best["2 streams, 1 thread each"]
    result = {
        "model": args.model,
        "p50_ms": {name: v * 1e3 for name, v in best.items()},
        "rounds_p50_ms": {name: [x * 1e3 for x in v] for name, v in medians.items()},
        "streams": streams,
        "speedup_2_streams": one / two,
        "stream_seconds": variants["2 streams, 1 thread each"].stats().stream_seconds,
    }
    if args.json:
        print(json.dumps(result))
    else:
        for name, v in best.items():
            print(f"{name:26s} p50 {v * 1e3:8.2f} ms")
        print(f"2 streams vs 1: {result['speedup_2_streams']:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
