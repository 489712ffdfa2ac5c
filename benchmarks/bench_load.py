"""Compile+load time only, in fresh processes: bench-zoo's measure, cheaper.

    python benchmarks/bench_load.py [--samples 5] [--sides ours,ort] NAME [NAME ...]

Each sample is a fresh `bench_worker.py` process (the same timed region as `make bench-zoo`:
the engine imported first, then add_graph + compile + first run, or ORT's session creation
and first run), told to exit as soon as it is ready; the sides alternate sample by sample
so a shared machine's noise falls on both. Prints, per model, each side's min and median
seconds and ours / ORT of the minima (bench-zoo reports the min of its rounds).
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from run import Worker  # noqa: E402

MAX_SAMPLES = 50


def measure(name: str, sides: list[str], samples: int, threads: int) -> dict[str, list[float]]:
    times: dict[str, list[float]] = {s: [] for s in sides}
    for _ in range(samples):
        for side in sides:
            w = Worker(side, f"zoo/{name}", threads, 1)
            times[side].append(w.ready["compile_load_s"])
            w.close()
    return times


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("models", nargs="+", help="zoo model names")
    ap.add_argument("--samples", type=int, default=5,
                    help=f"fresh processes per side (1-{MAX_SAMPLES})")
    ap.add_argument("--sides", default="ours,ort", help="comma-separated: ours, ort, ov")
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args(argv)
    if not 1 <= args.samples <= MAX_SAMPLES:
        ap.error(f"--samples must be 1-{MAX_SAMPLES}, got {args.samples}")
    sides = [s for s in args.sides.split(",") if s]
    unknown = sorted(set(sides) - {"ours", "ort", "ov"})
    if unknown or not sides:
        ap.error(f"--sides: unknown side(s) {unknown}" if unknown else "--sides is empty")
    for name in args.models:
        times = measure(name, sides, args.samples, args.threads)
        cols = "  ".join(f"{s} min {min(t):.3f} med {statistics.median(t):.3f}"
                         for s, t in times.items())
        ratio = ""
        if "ours" in times and "ort" in times:
            ratio = f"  ours/ort {min(times['ours']) / min(times['ort']):.2f}x"
        print(f"{name:24s} {cols}{ratio}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
