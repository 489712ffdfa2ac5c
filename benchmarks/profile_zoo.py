"""Where a zoo model's time goes, ours beside the peers' own profilers.

    python benchmarks/profile_zoo.py NAME [--batch 1] [--seconds 3] [--threads 2]
                                          [--sides ours,ort,ov] [--top 15] [--tasks 0]

Each side runs in a process of its own (as `make bench-zoo` runs them), on the zoo model's
recorded inputs (repeated to --batch): ours compiled as a session compiles it and profiled
per task (`Model.profile()`: kernel time per task, its implementation); ONNX Runtime with
its session profiler (per node kernel time); OpenVINO with `PERF_COUNT` (per node real
time), both with the bench's settings. Prints each side's p50 and its time per run by op
type (ours: the device's op types after fusion, so a Conv with its BatchNorm, residual and
Relu is one row), and with --tasks the slowest tasks / nodes. The profilers' own overhead
makes their totals differ a little from the p50s; compare shares, not sums across engines.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from bench_worker import OV_CONFIG  # noqa: E402
from common import bench_inputs  # noqa: E402

SIDES = ("ours", "ort", "ov")
MAX_SECONDS = 60.0


def _timed(run, seconds: float) -> list[float]:
    for _ in range(3):
        run()
    times: list[float] = []
    deadline = time.perf_counter() + seconds
    while len(times) < 5 or time.perf_counter() < deadline:
        t0 = time.perf_counter()
        run()
        times.append(time.perf_counter() - t0)
    return times


def _ours(path: Path, feeds: dict, threads: int, seconds: float) -> dict:
    from graphengine.engine.importers import load_model
    from graphengine.engine.pipeline import CompileOptions, compile_graph
    from graphengine.engine.runtime import default_device, load

    options = CompileOptions(data_parallel=threads if threads >= 2 else 0)
    compiled = compile_graph(load_model(str(path)), options,
                             {k: v.shape for k, v in feeds.items()})
    model = load(compiled, default_device(threads))
    times = _timed(lambda: model.execute(feeds), seconds)
    rows = [t for native in model.natives.values() for t in native.profile()]
    runs = max((t["calls"] for t in rows), default=1) or 1
    tasks = [(t["seconds"] / runs * 1e6, t["op"], t["impl"], t["name"]) for t in rows]
    return {"times": times, "tasks": tasks}


def _ort(path: Path, feeds: dict, threads: int, seconds: float) -> dict:
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    so.log_severity_level = 3
    so.enable_profiling = True
    so.profile_file_prefix = os.path.join(tempfile.gettempdir(), f"ge-profile-{os.getpid()}")
    session = ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
    times = _timed(lambda: session.run(None, feeds), seconds)
    trace = session.end_profiling()
    try:
        events = json.loads(Path(trace).read_text())
    finally:
        Path(trace).unlink(missing_ok=True)
    runs = len(times) + 3
    per: dict[tuple[str, str], float] = collections.defaultdict(float)
    for e in events:
        if e.get("cat") == "Node" and e.get("name", "").endswith("_kernel_time"):
            per[(e["args"].get("op_name", "?"), e["name"][:-len("_kernel_time")])] += e["dur"]
    tasks = [(us / runs, op, "", name) for (op, name), us in per.items()]
    return {"times": times, "tasks": tasks}


def _ov(path: Path, feeds: dict, threads: int, seconds: float) -> dict:
    import openvino as ov

    core = ov.Core()
    model = core.read_model(str(path))
    model.reshape({k: ov.PartialShape(list(v.shape)) for k, v in feeds.items()})
    compiled = core.compile_model(model, "CPU", OV_CONFIG | {
        "INFERENCE_NUM_THREADS": threads, "PERF_COUNT": True})
    request = compiled.create_infer_request()
    times = _timed(lambda: request.infer(feeds), seconds)
    # PERF_COUNT reports the last inference
    tasks = [(p.real_time.total_seconds() * 1e6, p.node_type, p.exec_type, p.node_name)
             for p in request.get_profiling_info() if p.real_time.total_seconds() > 0]
    return {"times": times, "tasks": tasks}


RUNNERS = {"ours": _ours, "ort": _ort, "ov": _ov}


def _side(args) -> int:
    path, small, big = bench_inputs(f"zoo/{args.model}", args.batch)
    feeds = small if args.batch == 1 or big is None else big
    out = RUNNERS[args.side](path, feeds, args.threads, args.seconds)
    print(json.dumps(out))
    return 0


def _report(side: str, out: dict, top: int, tasks: int) -> None:
    p50 = statistics.median(out["times"]) * 1e3
    by_op: dict[str, list[float]] = collections.defaultdict(lambda: [0.0, 0])
    for us, op, _, _ in out["tasks"]:
        by_op[op][0] += us
        by_op[op][1] += 1
    total = sum(v[0] for v in by_op.values())
    print(f"\n{side}: p50 {p50:.3f} ms, profiled {total / 1e3:.3f} ms a run "
          f"over {len(out['tasks'])} tasks")
    for op, (us, n) in sorted(by_op.items(), key=lambda kv: -kv[1][0])[:top]:
        print(f"  {us:10.1f} us {100 * us / max(total, 1e-9):5.1f}% {n:5d}  {op}")
    for us, op, impl, name in sorted(out["tasks"], reverse=True)[:tasks]:
        print(f"    {us:10.1f} us  {op:20s} {impl[:32]:32s} {name}")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model", help="zoo model name")
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--seconds", type=float, default=3.0, help="timed runs per side")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--sides", default=",".join(SIDES))
    ap.add_argument("--top", type=int, default=15, help="op types shown per side")
    ap.add_argument("--tasks", type=int, default=0, help="slowest tasks shown per side")
    ap.add_argument("--side", choices=SIDES, help=argparse.SUPPRESS)  # a worker process
    args = ap.parse_args(argv)
    if not 0 < args.seconds <= MAX_SECONDS:
        ap.error(f"--seconds must be in (0, {MAX_SECONDS:g}]")
    if not 1 <= args.batch <= 1024 or not 1 <= args.threads <= 256:
        ap.error("--batch must be 1-1024 and --threads 1-256")
    if args.side:
        return _side(args)
    sides = [s for s in args.sides.split(",") if s]
    unknown = sorted(set(sides) - set(SIDES))
    if unknown:
        ap.error(f"unknown sides {unknown}; known: {list(SIDES)}")
    for side in sides:
        proc = subprocess.run(
            [sys.executable, __file__, args.model, "--side", side, "--batch", str(args.batch),
             "--seconds", str(args.seconds), "--threads", str(args.threads)],
            capture_output=True, text=True)
        if proc.returncode:
            print(f"\n{side}: failed\n{proc.stderr[-2000:]}")
            continue
        _report(side, json.loads(proc.stdout.strip().splitlines()[-1]), args.top, args.tasks)
    return 0


if __name__ == "__main__":
    sys.exit(main())
