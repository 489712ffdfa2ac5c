"""Side-by-side benchmark: GraphEngine (in-process Session API) vs ONNX Runtime.

    python benchmarks/run.py [--models resnet18,mobilenetv2,bert_mini,mlp,branchy]
                             [--threads 2] [--rounds 3] [--seconds 1.0] [--quick]

For each model, each side runs in its own process (benchmarks/bench_worker.py) with the
same thread count: ours is a Session on a Device(threads); ORT an InferenceSession with
intra_op_num_threads=threads. Measured per side:

  * latency at batch 1 (p50, p90), in `rounds` short rounds that alternate between the
    sides (so the noise of a shared machine falls on both alike); the round with the
    lowest p50 is reported, every round is kept in the JSON;
  * throughput at batch 32 (images) or 8 (sequences): batch / median run time;
  * compile+load time: ours Session.add_graph + compile_graph; ORT InferenceSession();
  * peak RSS of the process once the batch-1 model is loaded and has run;
  * the largest output difference between the two.

Then the multi-stream speedup on the branchy graph (bench_streams.py) and concurrent
callers on one loaded model (bench_concurrency.py). Models missing from the cache are built
first (benchmarks/build_models.py, needs torch). Results go to
benchmarks/results/<timestamp>.json.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from common import model_path  # noqa: E402

DEFAULT_MODELS = ("resnet18", "mobilenetv2", "bert_mini", "mlp", "branchy")
SEQUENCE_MODELS = {"bert_mini", "minilm6"}
# Targets from issue 4: ours/ORT latency at most, ours/ORT throughput at least.
TARGETS = {"resnet18": 1.0, "mlp": 1.0, "mobilenetv2": 1.2, "bert_mini": 1.2}


class Worker:
    """A bench_worker.py process for one side of one model."""

    def __init__(self, side: str, model: str, threads: int, batch: int) -> None:
        self.side = side
        self.proc = subprocess.Popen(
            [sys.executable, str(HERE / "bench_worker.py"), "--side", side, "--model", model,
             "--threads", str(threads), "--batch", str(batch)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1)
        self.ready = self._read()

    def _read(self) -> dict:
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"{self.side} worker died (exit code {self.proc.wait()})")
        return json.loads(line)

    def ask(self, **cmd) -> dict:
        self.proc.stdin.write(json.dumps(cmd) + "\n")
        self.proc.stdin.flush()
        reply = self._read()
        if "error" in reply:
            raise RuntimeError(f"{self.side} worker: {reply['error']}")
        return reply

    def close(self) -> dict:
        reply = self.ask(cmd="exit")
        self.proc.wait(timeout=60)
        return reply


def percentile(times: list[float], q: float) -> float:
    return float(np.percentile(np.asarray(times), q))


def bench_model(name: str, args) -> dict:
    batch = 8 if name in SEQUENCE_MODELS else 32
    # Load one side at a time: compile+load is timed with the other side idle.
    workers = {side: Worker(side, name, args.threads, batch) for side in ("ours", "ort")}
    result: dict = {"model": name, "batch": batch, "sides": {}}
    rounds: dict[str, dict[str, list]] = {s: {"latency": [], "throughput": []} for s in workers}
    for r in range(args.rounds):
        order = ("ours", "ort") if r % 2 == 0 else ("ort", "ours")
        for side in order:
            t = workers[side].ask(cmd="latency", seconds=args.seconds, min_runs=10)["times"]
            rounds[side]["latency"].append(t)
    tp_rounds = max(1, args.rounds - 1)
    for r in range(tp_rounds):
        order = ("ours", "ort") if r % 2 == 0 else ("ort", "ours")
        for side in order:
            t = workers[side].ask(cmd="throughput", seconds=args.tp_seconds, min_runs=3)["times"]
            rounds[side]["throughput"].append(t)
    with tempfile.TemporaryDirectory() as tmp:
        dumps = {}
        for side, w in workers.items():
            path = os.path.join(tmp, f"{side}.npz")
            w.ask(cmd="dump", path=path)
            with np.load(path) as z:
                dumps[side] = {k: z[k] for k in z.files}
    diff = max((float(np.max(np.abs(dumps["ours"][k] - dumps["ort"][k])))
                for k in dumps["ort"] if k in dumps["ours"]), default=float("nan"))
    for side, w in workers.items():
        final = w.close()
        lat = min(rounds[side]["latency"], key=lambda t: statistics.median(t))
        tp = min(rounds[side]["throughput"], key=lambda t: statistics.median(t))
        result["sides"][side] = {
            "p50_ms": percentile(lat, 50) * 1e3,
            "p90_ms": percentile(lat, 90) * 1e3,
            "throughput": batch / statistics.median(tp),
            "compile_load_s": w.ready["compile_load_s"],
            "rss_mb": w.ready["rss_mb"],
            "rss_final_mb": final["rss_mb"],
            "rounds_p50_ms": [statistics.median(t) * 1e3 for t in rounds[side]["latency"]],
            "rounds_throughput": [batch / statistics.median(t)
                                  for t in rounds[side]["throughput"]],
        }
    ours, ort = result["sides"]["ours"], result["sides"]["ort"]
    result["ratio"] = {
        "p50": ours["p50_ms"] / ort["p50_ms"],
        "p90": ours["p90_ms"] / ort["p90_ms"],
        "throughput": ours["throughput"] / ort["throughput"],
        "compile_load": ours["compile_load_s"] / ort["compile_load_s"],
        "rss": ours["rss_mb"] / ort["rss_mb"],
    }
    result["max_abs_diff"] = diff
    target = TARGETS.get(name)
    if target is not None:
        result["target"] = target
        result["meets_target"] = (result["ratio"]["p50"] <= 1 / target and
                                  result["ratio"]["throughput"] >= target)
    return result


def run_json(script: str, *extra: str) -> dict:
    out = subprocess.run([sys.executable, str(HERE / script), "--json", *extra],
                         capture_output=True, text=True)
    if out.returncode not in (0, 1) or not out.stdout.strip():
        return {"error": (out.stderr or out.stdout).strip()[-2000:]}
    return json.loads(out.stdout.strip().splitlines()[-1])


def ensure_models(names: list[str]) -> None:
    missing = [n for n in names if not model_path(n).exists()]
    if missing:
        print(f"building {', '.join(missing)} (benchmarks/build_models.py)", flush=True)
        subprocess.run([sys.executable, str(HERE / "build_models.py"), "--only",
                        ",".join(missing)], check=True)


def table(results: list[dict], streams: dict, concurrency: list[dict]) -> str:
    head = (f"{'model':12s} {'side':5s} {'b1 p50 ms':>10s} {'b1 p90 ms':>10s} {'thru/s':>9s} "
            f"{'batch':>5s} {'compile+load s':>14s} {'peak RSS MB':>11s}")
    lines = [head, "-" * len(head)]
    for r in results:
        for side in ("ours", "ort"):
            s = r["sides"][side]
            lines.append(f"{r['model']:12s} {side:5s} {s['p50_ms']:10.3f} {s['p90_ms']:10.3f} "
                         f"{s['throughput']:9.1f} {r['batch']:5d} {s['compile_load_s']:14.3f} "
                         f"{s['rss_mb']:11.1f}")
        q = r["ratio"]
        verdict = ""
        if "target" in r:
            verdict = (f"  target {r['target']:.1f}x: "
                       f"{'met' if r['meets_target'] else 'NOT met'}")
        lines.append(f"{'':12s} {'ratio':5s} {q['p50']:9.2f}x {q['p90']:9.2f}x "
                     f"{q['throughput']:8.2f}x {'':5s} {q['compile_load']:13.2f}x "
                     f"{q['rss']:10.2f}x  max|diff| {r['max_abs_diff']:.1e}{verdict}")
    lines.append("ratio = ours / ORT: below 1 is better for latency, time and memory; "
                 "above 1 is better for throughput.")
    if streams:
        if "error" in streams:
            lines.append(f"multi-stream: {streams['error']}")
        else:
            p = streams["p50_ms"]
            lines.append("multi-stream (" + streams["model"] + ", b1, one thread per stream): " +
                         ", ".join(f"{k} {v:.2f} ms" for k, v in p.items()) +
                         f"; 2 streams vs 1: {streams['speedup_2_streams']:.2f}x (target 1.6x)")
    for c in concurrency:
        if "error" in c:
            lines.append(f"concurrency: {c['error']}")
            continue
        lines.append(f"concurrency ({c['model']}, {c['instances']} instances): 1 caller "
                     f"{c['throughput_1']:.1f}/s, {c['callers']} callers "
                     f"{c['throughput_n']:.1f}/s ({c['ratio']:.2f}x), correct: {c['correct']}")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default=",".join(DEFAULT_MODELS))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=1.5, help="per latency round and side")
    ap.add_argument("--tp-seconds", type=float, default=3.0, help="per throughput round")
    ap.add_argument("--quick", action="store_true", help="1 round, short runs")
    ap.add_argument("--no-streams", action="store_true")
    ap.add_argument("--no-concurrency", action="store_true")
    ap.add_argument("--out", type=Path, default=HERE / "results")
    args = ap.parse_args(argv)
    if args.quick:
        args.rounds, args.seconds, args.tp_seconds = 1, 0.5, 1.0
    names = [n for n in args.models.split(",") if n]
    ensure_models(names + (["branchy"] if not args.no_streams else []) +
                  (["mobilenetv2", "mlp"] if not args.no_concurrency else []))

    results = []
    for name in names:
        print(f"{name} ...", flush=True)
        results.append(bench_model(name, args))
    streams = {} if args.no_streams else run_json(
        "bench_streams.py", "--rounds", str(max(args.rounds, 2)),
        "--seconds", str(args.seconds))
    concurrency = [] if args.no_concurrency else [
        run_json("bench_concurrency.py", "--model", m, "--callers", "8", "--instances", "2",
                 "--threads", str(args.threads), "--seconds", str(args.tp_seconds))
        for m in ("mobilenetv2", "mlp")]

    print()
    print(table(results, streams, concurrency))
    args.out.mkdir(parents=True, exist_ok=True)
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True, cwd=HERE).stdout.strip()
    import onnxruntime

    from graphengine import _runtime
    record = {
        "timestamp": stamp, "commit": commit, "threads": args.threads,
        "rounds": args.rounds, "host": platform.node(), "cpus": os.cpu_count(),
        "python": platform.python_version(), "onnxruntime": onnxruntime.__version__,
        "onednn": _runtime.dnnl_version(), "models": results, "streams": streams,
        "concurrency": concurrency,
    }
    path = args.out / f"{stamp}.json"
    path.write_text(json.dumps(record, indent=1) + "\n")
    print(f"\nresults: {path.relative_to(Path.cwd()) if path.is_relative_to(Path.cwd()) else path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
