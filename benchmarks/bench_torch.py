"""torch.compile(backend="graphengine") against eager torch and inductor (torch.compile's
default backend) on the zoo's torch families, in process, under torch.no_grad().

    python benchmarks/bench_torch.py [--only a,b] [--runs 30] [--threads 2] [--batch 1]

Per model: the median run time of eager torch, inductor and graphengine (after warm-up
runs, which also compile), the first call's time (the compile) of the two compilers, and
the speedups. Decoders run with dynamic=True at their default length. Results are printed
as a table and written to benchmarks/results/torch-<time>.json.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE / "zoo"))


def _time(fn, args, runs: int) -> list[float]:
    out = []
    for _ in range(runs):
        t0 = time.perf_counter()
        fn(*args)
        out.append(time.perf_counter() - t0)
    return out


def bench_one(entry, runs: int, batch: int) -> dict:
    import torch

    import graphengine.torch as gt

    model = entry.make()
    x = entry.inputs(batch, entry.seq, 3)
    dynamic = entry.family == "decoder"
    row: dict = {"model": entry.name, "family": entry.family, "batch": batch,
                 "seq": entry.seq or None}
    with torch.no_grad():
        for name, backend in (("eager", None), ("inductor", "inductor"),
                              ("graphengine", "graphengine")):
            torch._dynamo.reset()
            fn = model if backend is None else torch.compile(
                model, backend=backend, dynamic=dynamic or None)
            t0 = time.perf_counter()
            fn(*x)
            first = time.perf_counter() - t0
            _time(fn, x, 3)
            times = _time(fn, x, runs)
            row[f"{name}_ms"] = round(statistics.median(times) * 1e3, 3)
            if backend is not None:
                row[f"{name}_compile_s"] = round(first, 2)
            if backend == "graphengine":
                report = gt.last_report()
                row["graphengine_fully_compiled"] = bool(report and report.fully_compiled)
    row["vs_eager"] = round(row["eager_ms"] / row["graphengine_ms"], 2)
    row["vs_inductor"] = round(row["inductor_ms"] / row["graphengine_ms"], 2)
    return row


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", help="comma-separated model names")
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--batch", type=int, default=1)
    args = parser.parse_args()
    import torch
    import torch_modules

    torch.set_num_threads(args.threads)
    entries = torch_modules.MODELS
    if args.only:
        wanted = args.only.split(",")
        entries = [torch_modules.BY_NAME[n] for n in wanted]
    rows = []
    print(f"{'model':20} {'eager ms':>9} {'inductor':>9} {'ours':>9} {'x eager':>8} "
          f"{'x induct':>8} {'compile s (ind/ours)':>21}")
    for entry in entries:
        try:
            row = bench_one(entry, args.runs, args.batch)
        except Exception as exc:  # one model's failure is reported, the rest still run
            row = {"model": entry.name, "error": f"{type(exc).__name__}: {exc}"[:300]}
            print(f"{entry.name:20} FAILED {row['error']}", flush=True)
            rows.append(row)
            continue
        rows.append(row)
        print(f"{row['model']:20} {row['eager_ms']:9.3f} {row['inductor_ms']:9.3f} "
              f"{row['graphengine_ms']:9.3f} {row['vs_eager']:8.2f} {row['vs_inductor']:8.2f} "
              f"{row['inductor_compile_s']:10.1f}/{row['graphengine_compile_s']:.1f}"
              f"{'' if row['graphengine_fully_compiled'] else '  (partly eager)'}",
              flush=True)
    ok = [r for r in rows if "error" not in r]
    if ok:
        geo = {k: statistics.geometric_mean(r[k] for r in ok) for k in ("vs_eager",
                                                                         "vs_inductor")}
        print(f"geometric mean speedup over {len(ok)} models: {geo['vs_eager']:.2f}x eager, "
              f"{geo['vs_inductor']:.2f}x inductor")
    out = HERE / "results" / time.strftime("torch-%Y%m%d-%H%M%S.json")
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps({"threads": args.threads, "batch": args.batch,
                               "torch": torch.__version__, "rows": rows}, indent=1))
    print(f"written {out}")
    return 0 if len(ok) == len(rows) else 1


if __name__ == "__main__":
    sys.exit(main())
