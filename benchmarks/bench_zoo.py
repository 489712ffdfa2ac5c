"""``make bench-zoo``: GraphEngine, ONNX Runtime and OpenVINO side by side over the model zoo.

    python benchmarks/bench_zoo.py [--only a,b] [--threads 2] [--rounds 2] [--batch 8]
                                   [--seconds 1.0] [--tp-seconds 1.5] [--out FILE]

For every built zoo model (benchmarks/zoo/, `make zoo-build`) each engine runs in its own
process (benchmarks/bench_worker.py: an idle engine's thread pool never spins while another
runs), with the same thread count, float32, driven in interleaved rounds: each round starts
fresh processes and measures the engines one after the other, rotating which goes first, and
each engine keeps its best round. Inputs are the zoo's recorded batch-1 inputs, repeated along
the batch axis for the batch-N throughput of models that have one. Reported per model and
engine: batch-1 latency p50, batch-N throughput, compile+load in a fresh process (import
excluded, first run included), peak RSS; and per model the best peer's batch-1 time / ours and
our batch-N throughput / the best peer's (above 1: ours is faster), our compile+load and peak
RSS / ONNX Runtime's, and our rate as a share of the FMA peak. Each engine's batch-1 outputs
are held against ONNX Runtime's (`deviation_vs_ort`: largest difference over the output's
scale), so an engine that trades float32 accuracy for speed shows in the summary. An engine
that cannot load or run a model is recorded with its error and the model left out of the
means.

Ends with the geometric means the issue checks (speed at batch 1 and N, compile+load, RSS) and
the models below 0.8x. Results: benchmarks/results/bench-zoo-<timestamp>.json. Timing on a
shared machine is noisy: compare ratios from one run, not numbers across runs.
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE / "zoo"))
import catalog  # noqa: E402
from agreement import DEVIATION, deviation  # noqa: E402
from run import Worker, fma_peak, foreign_load, wait_quiet  # noqa: E402

SIDES = ("ours", "ort", "ov")
PEERS = ("ort", "ov")


def bench_one(name: str, args) -> dict:
    model = f"zoo/{name}"
    samples = {s: {"p50": [], "tp": [], "load": [], "rss": [], "foreign": []} for s in SIDES}
    errors: dict[str, str] = {}
    flops = {"b1": 0.0, "tp": 0.0}
    dumps: dict[str, dict] = {}
    scratch = tempfile.TemporaryDirectory()
    for r in range(args.rounds):
        order = SIDES[r % len(SIDES):] + SIDES[:r % len(SIDES)]
        for side in order:
            if side in errors:
                continue
            wait_quiet(args.quiet_wait)
            try:
                w = Worker(side, model, args.threads, args.batch)
            except Exception as exc:  # an engine that cannot load the model: its verdict
                errors[side] = str(exc)[-500:]
                continue
            try:
                smp = samples[side]
                if side not in dumps:
                    path = Path(scratch.name) / f"{side}.npz"
                    w.ask(cmd="dump", path=str(path))
                    with np.load(path, allow_pickle=False) as data:
                        dumps[side] = {k: data[k] for k in data.files}
                smp["load"].append(w.ready["compile_load_s"])
                flops["b1"] = max(flops["b1"], w.ready.get("flops", 0.0))
                times, load = foreign_load(w, lambda w=w: w.ask(
                    cmd="latency", seconds=args.seconds, min_runs=5)["times"])
                smp["p50"].append(statistics.median(times) * 1e3)
                smp["foreign"].append(load)
                reply = w.ask(cmd="throughput", seconds=args.tp_seconds, min_runs=3)
                if reply["times"]:
                    smp["tp"].append(args.batch / statistics.median(reply["times"]))
                    flops["tp"] = max(flops["tp"], reply.get("flops", 0.0))
                smp["rss"].append(w.close()["rss_mb"])
            except Exception as exc:
                errors[side] = str(exc)[-500:]
                w.proc.kill()
    scratch.cleanup()
    result: dict = {"model": name, "batch": args.batch, "sides": {}, "errors": errors,
                    "flops_b1": flops["b1"], "flops_batch": flops["tp"]}
    if "ort" in dumps:
        result["deviation_vs_ort"] = {side: deviation(outs, dumps["ort"])
                                      for side, outs in dumps.items() if side != "ort"}
    for side, smp in samples.items():
        if side in errors or not smp["p50"]:
            continue
        result["sides"][side] = {
            "p50_ms": min(smp["p50"]),
            "throughput": max(smp["tp"]) if smp["tp"] else None,
            "compile_load_s": min(smp["load"]),
            "rss_mb": statistics.median(smp["rss"]),
            "rounds_p50_ms": smp["p50"], "rounds_foreign_cpu": smp["foreign"],
        }
    sides = result["sides"]
    peers = [p for p in PEERS if p in sides]
    if "ours" in sides and peers:
        ours = sides["ours"]
        best_b1 = min(sides[p]["p50_ms"] for p in peers)
        speed = {"b1": best_b1 / ours["p50_ms"]}
        tps = [sides[p]["throughput"] for p in peers if sides[p]["throughput"]]
        if ours["throughput"] and tps:
            speed["batch"] = ours["throughput"] / max(tps)
        result["speedup_vs_best_peer"] = speed
        if "ort" in sides:
            result["compile_load_vs_ort"] = ours["compile_load_s"] / sides["ort"]["compile_load_s"]
            result["rss_vs_ort"] = ours["rss_mb"] / sides["ort"]["rss_mb"]
    return result


def geomean(values: list[float]) -> float | None:
    values = [v for v in values if v and v > 0]
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else None


def summary(results: list[dict], peak: float) -> dict:
    b1 = [r["speedup_vs_best_peer"]["b1"] for r in results if "speedup_vs_best_peer" in r]
    bn = [r["speedup_vs_best_peer"]["batch"] for r in results
          if "batch" in r.get("speedup_vs_best_peer", {})]
    slow = sorted({r["model"] for r in results
                   if min(r.get("speedup_vs_best_peer", {}).values(), default=1.0) < 0.8})
    deviating = {f"{r['model']}:{side}": d for r in results
                 for side, d in r.get("deviation_vs_ort", {}).items()
                 if d is None or d > DEVIATION}
    return {
        "models": len(results), "compared": len(b1),
        "geomean_speedup_b1": geomean(b1), "geomean_speedup_batch": geomean(bn),
        "geomean_compile_load_vs_ort": geomean([r["compile_load_vs_ort"] for r in results
                                                if "compile_load_vs_ort" in r]),
        "geomean_rss_vs_ort": geomean([r["rss_vs_ort"] for r in results if "rss_vs_ort" in r]),
        "below_0_8": slow, "fma_peak_gflops": peak, "deviating_from_ort": deviating,
        "errors": {r["model"]: r["errors"] for r in results if r["errors"]},
    }


def row(r: dict, peak: float) -> str:
    s = r["sides"]

    def cell(side: str, key: str, fmt: str) -> str:
        v = s.get(side, {}).get(key)
        return format(v, fmt) if v is not None else "-"
    sp = r.get("speedup_vs_best_peer", {})
    share = (f"{r['flops_b1'] / s['ours']['p50_ms'] * 1e-6 / peak:4.0%}"
             if r.get("flops_b1") and "ours" in s and peak else "   -")
    return (f"{r['model']:24s} " + " ".join(cell(x, "p50_ms", "8.3f") for x in SIDES) + " "
            + " ".join(cell(x, "throughput", "8.1f") for x in SIDES)
            + f" {sp.get('b1', float('nan')):6.2f}x {sp.get('batch', float('nan')):6.2f}x"
            + f" {r.get('compile_load_vs_ort', float('nan')):6.2f}x"
            + f" {r.get('rss_vs_ort', float('nan')):5.2f}x {share}"
            + (f"  errors: {', '.join(r['errors'])}" if r["errors"] else ""))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", default="", help="comma-separated zoo model names")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=2, help="fresh processes per engine")
    ap.add_argument("--batch", type=int, default=8, help="batch of the throughput runs")
    ap.add_argument("--seconds", type=float, default=1.0, help="per latency round")
    ap.add_argument("--tp-seconds", type=float, default=1.5, help="per throughput round")
    ap.add_argument("--quiet-wait", type=float, default=10.0,
                    help="seconds to wait before each process for the CPUs to go idle")
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args(argv)
    for side, module in (("ov", "openvino"), ("ort", "onnxruntime")):
        try:
            __import__(module)
        except ImportError:
            sys.exit(f"bench-zoo needs {module} for side '{side}' (pip install {module})")
    built = sorted(p.name for p in catalog.zoo_dir().iterdir()
                   if (p / "model.onnx").exists() and (p / "ref_b1.npz").exists())
    names = [n for n in args.only.split(",") if n] or built
    missing = sorted(set(names) - set(built))
    if missing:
        sys.exit(f"not built: {', '.join(missing)} (make zoo-build)")
    peak = fma_peak(args.threads, args.quiet_wait, 3)
    head = (f"{'model':24s} " + " ".join(f"{s + ' b1':>8s}" for s in SIDES) + " "
            + " ".join(f"{s + ' tp':>8s}" for s in SIDES)
            + f" {'b1 x':>7s} {'b' + str(args.batch) + ' x':>7s} {'load':>7s} {'rss':>6s} peak")
    print(f"FMA peak on {args.threads} threads: {peak:.0f} GFLOP/s; b1 in ms, tp in items/s; "
          f"x = best peer / ours (above 1: ours faster); load, rss = ours / ORT", flush=True)
    print(head, flush=True)
    results = []
    t0 = time.monotonic()
    for name in names:
        results.append(bench_one(name, args))
        print(row(results[-1], peak), flush=True)
    summ = summary(results, peak)
    summ["seconds"] = round(time.monotonic() - t0, 1)

    def fmt(v: float | None) -> str:
        return "-" if v is None else f"{v:.2f}x"
    print(f"\n{summ['compared']} of {summ['models']} models compared. Geometric means: speed "
          f"vs the best peer b1 {fmt(summ['geomean_speedup_b1'])}, b{args.batch} "
          f"{fmt(summ['geomean_speedup_batch'])}; compile+load vs ORT "
          f"{fmt(summ['geomean_compile_load_vs_ort'])}; peak RSS vs ORT "
          f"{fmt(summ['geomean_rss_vs_ort'])}. Below 0.8x: {', '.join(summ['below_0_8']) or '-'}")
    if summ["deviating_from_ort"]:
        print(f"Batch-1 outputs further than {DEVIATION:g} of their scale from ONNX Runtime's "
              "(or with no output name in common): " + ", ".join(
                  f"{k} {v:.2g}" if v is not None else f"{k} -"
                  for k, v in summ["deviating_from_ort"].items()))
    import onnxruntime
    import openvino

    from graphengine import _runtime
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    out = args.out or HERE / "results" / f"bench-zoo-{stamp}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({
        "timestamp": stamp, "threads": args.threads, "rounds": args.rounds, "batch": args.batch,
        "onnxruntime": onnxruntime.__version__, "openvino": openvino.__version__,
        "onednn": _runtime.dnnl_version(), "summary": summ, "models": results}, indent=1) + "\n")
    print(f"results: {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
