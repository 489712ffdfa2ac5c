"""Side-by-side benchmark: GraphEngine (in-process Session API) vs ONNX Runtime and OpenVINO.

    python benchmarks/run.py [--models resnet18,mobilenetv2,bert_mini,mlp,branchy]
                             [--threads 2] [--rounds 4] [--seconds 1.5] [--quick]

For each model, each side runs in its own process (benchmarks/bench_worker.py) with the
same thread count: ours is a Session on a Device(threads); ORT an InferenceSession with
intra_op_num_threads=threads; OpenVINO (`ov`) its CPU plugin with INFERENCE_NUM_THREADS =
threads, f32 precision, the latency hint, the model reshaped to each input shape. Measured
per side:

  * latency at batch 1 (p50, p90), in `rounds` rounds; each round starts fresh processes
    for both sides and measures them one after the other (alternating which goes first),
    after waiting for other processes to leave the CPUs idle; the round with the lowest p50
    is reported (a process may land in a slow "mode" for its whole life on a shared VM),
    every round is kept in the JSON with the CPU share other processes used during it;
  * throughput at batch 32 (images) or 8 (sequences): batch / median run time, best of
    `tp_rounds` rounds;
  * compile+load time: ours Session.add_graph + compile_graph; ORT InferenceSession();
    OpenVINO read_model + reshape + compile_model; each with its first run (median of the
    rounds);
  * peak RSS of the process once the batch-1 model is loaded and has run (median);
  * the largest output difference between the two;
  * the rate of each side's reported runs in GFLOP/s (the convolutions and matrix products
    of one run, counted by our compile report, over its time) and its share of the machine's
    FMA peak (`_runtime.fma_peak` on the same number of threads, best of 1 s runs at the
    start and at the end): how far either side is from what the cores can do at all.

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
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from common import model_path  # noqa: E402

DEFAULT_MODELS = ("resnet18", "mobilenetv2", "bert_mini", "mlp", "branchy")
SIDES = ("ours", "ort", "ov")
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


def cpu_busy(seconds: float = 0.5) -> float:
    """Fraction of the machine's CPU time spent busy (any process) over `seconds`."""
    def sample() -> list[int]:
        with open("/proc/stat") as f:
            return [int(x) for x in f.readline().split()[1:]]
    a = sample()
    time.sleep(seconds)
    b = sample()
    d = [y - x for x, y in zip(a, b)]
    idle = d[3] + d[4]  # idle + iowait
    return 1.0 - idle / max(1, sum(d))


def wait_quiet(limit: float, threshold: float = 0.15) -> float:
    """Waits (up to `limit` s) until other work leaves the CPUs idle; returns the busy
    fraction last seen. Between rounds our own workers are idle, so what is busy is not us:
    another process competing for the cores would slow one side's round, not the other's."""
    deadline = time.monotonic() + limit
    busy = cpu_busy()
    while busy > threshold and time.monotonic() < deadline:
        busy = cpu_busy(1.0)
    return busy


def percentile(times: list[float], q: float) -> float:
    return float(np.percentile(np.asarray(times), q))


def proc_jiffies(pid: int) -> int:
    """CPU time (all threads) of a process, in clock ticks."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])  # utime + stime


def machine_jiffies() -> tuple[int, int]:
    """(busy, total) CPU ticks of the whole machine."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    return sum(v) - v[3] - v[4], sum(v)


def foreign_load(worker: Worker, fn):
    """Runs fn(); returns (its result, the share of the machine's CPU that other processes
    used meanwhile)."""
    pid = worker.proc.pid
    b0, t0, p0 = *machine_jiffies(), proc_jiffies(pid)
    out = fn()
    b1, t1, p1 = *machine_jiffies(), proc_jiffies(pid)
    return out, max(0.0, ((b1 - b0) - (p1 - p0)) / max(1, t1 - t0))


def bench_model(name: str, args) -> dict:
    batch = 8 if name in SEQUENCE_MODELS else 32
    result: dict = {"model": name, "batch": batch, "sides": {}}
    samples = {s: {"latency": [], "throughput": [], "compile_load_s": [], "rss_mb": [],
                   "foreign": []} for s in SIDES}
    dumps: dict = {}
    busy: list[float] = []
    flops = {"b1": 0.0, "tp": 0.0}  # of one run, from ours' compile reports
    # Every round starts fresh processes (one side at a time: compile+load is timed with
    # the other side idle). A process can land in a slower "mode" for its whole life (thread
    # placement, the host's neighbours), so independent processes, best of the rounds.
    for r in range(args.rounds):
        order = SIDES[r % len(SIDES):] + SIDES[:r % len(SIDES)]
        workers = {}
        for side in order:
            busy.append(wait_quiet(args.quiet_wait))
            workers[side] = w = Worker(side, name, args.threads, batch)
            samples[side]["compile_load_s"].append(w.ready["compile_load_s"])
            samples[side]["rss_mb"].append(w.ready["rss_mb"])
            flops["b1"] = max(flops["b1"], w.ready.get("flops", 0.0))
        for side in order:
            w = workers[side]
            t, load = foreign_load(w, lambda w=w: w.ask(cmd="latency", seconds=args.seconds,
                                                        min_runs=10)["times"])
            samples[side]["latency"].append(t)
            samples[side]["foreign"].append(load)
            if r < args.tp_rounds:
                reply, load = foreign_load(w, lambda w=w: w.ask(
                    cmd="throughput", seconds=args.tp_seconds, min_runs=3))
                samples[side]["throughput"].append(reply["times"])
                flops["tp"] = max(flops["tp"], reply.get("flops", 0.0))
            if r == 0:
                with tempfile.TemporaryDirectory() as tmp:
                    path = os.path.join(tmp, f"{side}.npz")
                    w.ask(cmd="dump", path=path)
                    with np.load(path) as z:
                        dumps[side] = {k: z[k] for k in z.files}
        for w in workers.values():
            w.close()
    diff = max((float(np.max(np.abs(dumps["ours"][k] - dumps["ort"][k])))
                for k in dumps["ort"] if k in dumps["ours"]), default=float("nan"))
    diff_ov = max((float(np.max(np.abs(dumps["ours"][k] - dumps["ov"][k])))
                   for k in dumps["ov"] if k in dumps["ours"]), default=float("nan"))
    for side, smp in samples.items():
        lat = min(smp["latency"], key=statistics.median)
        tp = min(smp["throughput"], key=statistics.median)
        result["sides"][side] = {
            "p50_ms": percentile(lat, 50) * 1e3,
            "p90_ms": percentile(lat, 90) * 1e3,
            "throughput": batch / statistics.median(tp),
            "compile_load_s": statistics.median(smp["compile_load_s"]),
            "rss_mb": statistics.median(smp["rss_mb"]),
            "rounds_p50_ms": [statistics.median(t) * 1e3 for t in smp["latency"]],
            "rounds_throughput": [batch / statistics.median(t) for t in smp["throughput"]],
            "rounds_foreign_cpu": smp["foreign"],
        }
    result["cpu_busy_before_rounds"] = busy
    result["flops_b1"], result["flops_batch"] = flops["b1"], flops["tp"]
    for side in result["sides"].values():
        side["gflops_b1"] = flops["b1"] / side["p50_ms"] * 1e-6
        side["gflops_throughput"] = flops["tp"] * side["throughput"] / batch * 1e-9
    ours = result["sides"]["ours"]
    for key, peer in (("ratio", "ort"), ("ratio_ov", "ov")):
        other = result["sides"][peer]
        result[key] = {
            "p50": ours["p50_ms"] / other["p50_ms"],
            "p90": ours["p90_ms"] / other["p90_ms"],
            "throughput": ours["throughput"] / other["throughput"],
            "compile_load": ours["compile_load_s"] / other["compile_load_s"],
            "rss": ours["rss_mb"] / other["rss_mb"],
        }
    peers = [result["sides"][p] for p in ("ort", "ov")]
    result["speedup_vs_best_peer"] = {
        "b1": min(p["p50_ms"] for p in peers) / ours["p50_ms"],
        "throughput": ours["throughput"] / max(p["throughput"] for p in peers)}
    result["max_abs_diff"] = diff
    result["max_abs_diff_ov"] = diff_ov
    target = TARGETS.get(name)
    if target is not None:
        result["target"] = target
        result["meets_target"] = (result["ratio"]["p50"] <= 1 / target and
                                  result["ratio"]["throughput"] >= target)
    return result


def fma_peak(threads: int, quiet_wait: float, tries: int) -> float:
    """The machine's float32 FMA rate on `threads` threads (GFLOP/s), best of `tries` 1 s
    runs (one run can lose several percent to a neighbour)."""
    from graphengine import _runtime

    wait_quiet(quiet_wait)
    return max(_runtime.fma_peak(threads, 1.0) for _ in range(tries))


def run_json(script: str, *extra: str, quiet_wait: float = 0.0) -> dict:
    busy = wait_quiet(quiet_wait)
    out = subprocess.run([sys.executable, str(HERE / script), "--json", *extra],
                         capture_output=True, text=True)
    if out.returncode not in (0, 1) or not out.stdout.strip():
        return {"error": (out.stderr or out.stdout).strip()[-2000:]}
    result = json.loads(out.stdout.strip().splitlines()[-1])
    result["cpu_busy_before"] = busy
    return result


def ensure_models(names: list[str]) -> None:
    missing = [n for n in names if not model_path(n).exists()]
    if missing:
        print(f"building {', '.join(missing)} (benchmarks/build_models.py)", flush=True)
        subprocess.run([sys.executable, str(HERE / "build_models.py"), "--only",
                        ",".join(missing)], check=True)


def table(results: list[dict], streams: dict, concurrency: list[dict], peak: float) -> str:
    head = (f"{'model':12s} {'side':5s} {'b1 p50 ms':>10s} {'b1 p90 ms':>10s} {'thru/s':>9s} "
            f"{'batch':>5s} {'compile+load s':>14s} {'peak RSS MB':>11s}")
    lines = [head, "-" * len(head)]
    for r in results:
        for side in SIDES:
            s = r["sides"][side]
            lines.append(f"{r['model']:12s} {side:5s} {s['p50_ms']:10.3f} {s['p90_ms']:10.3f} "
                         f"{s['throughput']:9.1f} {r['batch']:5d} {s['compile_load_s']:14.3f} "
                         f"{s['rss_mb']:11.1f}")
        verdict = ""
        if "target" in r:
            verdict = (f"  target {r['target']:.1f}x: "
                       f"{'met' if r['meets_target'] else 'NOT met'}")
        for key, label, diff in (("ratio", "/ort", r["max_abs_diff"]),
                                 ("ratio_ov", "/ov", r["max_abs_diff_ov"])):
            q = r[key]
            lines.append(f"{'':12s} {label:5s} {q['p50']:9.2f}x {q['p90']:9.2f}x "
                         f"{q['throughput']:8.2f}x {'':5s} {q['compile_load']:13.2f}x "
                         f"{q['rss']:10.2f}x  max|diff| {diff:.1e}"
                         f"{verdict if key == 'ratio' else ''}")
        sp = r["speedup_vs_best_peer"]
        lines.append(f"{'':12s} {'best':5s} b1 {sp['b1']:.2f}x, b{r['batch']} "
                     f"{sp['throughput']:.2f}x (best peer / ours: above 1, ours is faster)")
        if r.get("flops_b1") and peak:
            lines.append(f"{'':12s} {'rate':5s} " + "; ".join(
                f"{side} b1 {r['sides'][side]['gflops_b1']:.0f} GFLOP/s "
                f"({r['sides'][side]['gflops_b1'] / peak:.0%}), b{r['batch']} "
                f"{r['sides'][side]['gflops_throughput']:.0f} "
                f"({r['sides'][side]['gflops_throughput'] / peak:.0%})"
                for side in SIDES))
    lines.append("/ort, /ov = ours / that peer: below 1 is better for latency, time and memory; "
                 "above 1 is better for throughput.")
    if peak:
        lines.append(f"rate = convolutions and matrix products per second (% of the FMA peak, "
                     f"{peak:.0f} GFLOP/s on these threads)")
    noisy = [r["model"] for r in results
             if min(max(s["rounds_foreign_cpu"]) for s in r["sides"].values()) > 0.10]
    if noisy:
        lines.append("WARNING: other processes used over 10% of the CPUs during every round of "
                     f"{', '.join(noisy)} on one side: those numbers are not trustworthy.")
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
    ap.add_argument("--rounds", type=int, default=4, help="fresh processes per side")
    # Every round measures throughput too: on this shared host a neighbour's burst can halve
    # one side's round (bert_mini's onnxruntime: 179.6 and 93.6/s in one run's two rounds),
    # and each side keeps its best round, so both get the same number of chances.
    ap.add_argument("--tp-rounds", type=int, default=4, help="rounds that measure throughput")
    ap.add_argument("--seconds", type=float, default=1.5, help="per latency round and side")
    ap.add_argument("--tp-seconds", type=float, default=3.0, help="per throughput round")
    ap.add_argument("--quick", action="store_true", help="1 round, short runs")
    ap.add_argument("--no-streams", action="store_true")
    ap.add_argument("--no-concurrency", action="store_true")
    ap.add_argument("--instances", type=int, default=4,
                    help="instances of the model the concurrent callers share")
    ap.add_argument("--quiet-wait", type=float, default=60.0,
                    help="seconds to wait, before each round, for other processes to leave "
                         "the CPUs idle (0: don't wait)")
    ap.add_argument("--out", type=Path, default=HERE / "results")
    args = ap.parse_args(argv)
    if args.quick:
        args.rounds, args.tp_rounds, args.seconds, args.tp_seconds = 1, 1, 0.5, 1.0
    names = [n for n in args.models.split(",") if n]
    ensure_models(names + (["branchy"] if not args.no_streams else []) +
                  (["mobilenetv2", "mlp"] if not args.no_concurrency else []))

    peak = fma_peak(args.threads, args.quiet_wait, 5)
    print(f"FMA peak on {args.threads} threads: {peak:.1f} GFLOP/s", flush=True)
    results = []
    for name in names:
        print(f"{name} ...", flush=True)
        results.append(bench_model(name, args))
    streams = {} if args.no_streams else run_json(
        "bench_streams.py", "--rounds", str(max(args.rounds, 2)),
        "--seconds", str(args.seconds), quiet_wait=args.quiet_wait)
    concurrency = [] if args.no_concurrency else [
        run_json("bench_concurrency.py", "--model", m, "--callers", "8",
                 "--instances", str(args.instances),
                 "--threads", str(args.threads), "--seconds", str(args.tp_seconds),
                 quiet_wait=args.quiet_wait)
        for m in ("mobilenetv2", "mlp")]

    peak = max(peak, fma_peak(args.threads, args.quiet_wait, 3))  # and once more at the end
    print()
    print(table(results, streams, concurrency, peak))
    args.out.mkdir(parents=True, exist_ok=True)
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True, cwd=HERE).stdout.strip()
    import onnxruntime
    import openvino

    from graphengine import _runtime
    record = {
        "timestamp": stamp, "commit": commit, "threads": args.threads,
        "rounds": args.rounds, "host": platform.node(), "cpus": os.cpu_count(),
        "python": platform.python_version(), "onnxruntime": onnxruntime.__version__,
        "openvino": openvino.__version__,
        "onednn": _runtime.dnnl_version(), "fma_peak_gflops": peak, "models": results,
        "streams": streams, "concurrency": concurrency,
    }
    path = args.out / f"{stamp}.json"
    path.write_text(json.dumps(record, indent=1) + "\n")
    print(f"\nresults: {path.relative_to(Path.cwd()) if path.is_relative_to(Path.cwd()) else path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
