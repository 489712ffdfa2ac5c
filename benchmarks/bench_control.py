"""Control flow on the device: an ONNX Loop of N iterations against N launches of its body.

    python benchmarks/bench_control.py [--iterations 1000] [--hidden 64] [--threads 1]
                                       [--rounds 7]

The body is one recurrent step, h = tanh(h @ W + x) (hidden 64: a matrix-vector product
and an epilogue, ~4 us), with h carried. Measured, best of `rounds` rounds (each the median
of a few runs), all in this process on `threads` threads:

  * loop: the ONNX Loop compiled by GraphEngine (one device program: labels, a switch, the
    body's tasks, a goto), one call; wall time and the body kernels' time from
    Model.profile;
  * launches: the body compiled as a model of its own, run N times from Python (each a
    native launch): its kernel time (profile) times N -- what the issue compares against --
    and the wall time of the N launches;
  * host loop: the same Loop with the device expansion turned off (the host step that
    runs the compiled body per iteration, what the engine did before);
  * onnxruntime: the same ONNX Loop in an InferenceSession (intra_op_num_threads=threads).

Results go to benchmarks/results/control-<timestamp>.json.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

import numpy as np
from onnx import TensorProto, helper, numpy_helper

HERE = Path(__file__).resolve().parent
F = TensorProto.FLOAT


def loop_model(iterations: int, hidden: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    w = (rng.standard_normal((hidden, hidden)) / np.sqrt(hidden)).astype(np.float32)
    body = helper.make_graph(
        [helper.make_node("MatMul", ["h_in", "W"], ["hw"]),
         helper.make_node("Add", ["hw", "x"], ["pre"]),
         helper.make_node("Tanh", ["pre"], ["h_out"]),
         helper.make_node("Identity", ["cond_in"], ["cond_out"])], "body",
        [helper.make_tensor_value_info("i", TensorProto.INT64, []),
         helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []),
         helper.make_tensor_value_info("h_in", F, [1, hidden])],
        [helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
         helper.make_tensor_value_info("h_out", F, [1, hidden])])
    graph = helper.make_graph(
        [helper.make_node("Loop", ["m", "", "h0"], ["h"], body=body)], "loop",
        [helper.make_tensor_value_info("h0", F, [1, hidden]),
         helper.make_tensor_value_info("x", F, [1, hidden])],
        [helper.make_tensor_value_info("h", F, [1, hidden])],
        [numpy_helper.from_array(w, "W"),
         numpy_helper.from_array(np.array(iterations, np.int64), "m")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def body_model(hidden: int, seed: int = 0):
    """The loop body alone: h = tanh(h @ W + x), the same weights."""
    rng = np.random.default_rng(seed)
    w = (rng.standard_normal((hidden, hidden)) / np.sqrt(hidden)).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["h_in", "W"], ["hw"]),
         helper.make_node("Add", ["hw", "x"], ["pre"]),
         helper.make_node("Tanh", ["pre"], ["h_out"])], "body",
        [helper.make_tensor_value_info("h_in", F, [1, hidden]),
         helper.make_tensor_value_info("x", F, [1, hidden])],
        [helper.make_tensor_value_info("h_out", F, [1, hidden])],
        [numpy_helper.from_array(w, "W")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def _median_time(fn, runs: int) -> float:
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def _kernel_seconds(loaded) -> tuple[float, int]:
    """Seconds in kernel tasks over every run so far, and the runs."""
    (native,) = loaded.natives.values()
    return (sum(t["seconds"] for t in native.profile() if t["op"] not in (
        "copy", "label", "goto", "switch", "increment", "slice_copy")),
        native.stats()["runs"])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--iterations", type=int, default=1000)
    ap.add_argument("--hidden", type=int, default=64)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--runs", type=int, default=5, help="runs per round (median)")
    args = ap.parse_args()
    os.environ.setdefault("OMP_NUM_THREADS", str(args.threads))
    import onnxruntime as ort

    from graphengine import _runtime
    from graphengine.engine import pipeline
    from graphengine.engine.importers import load_model
    from graphengine.engine.pipeline import CompileOptions, compile_graph
    from graphengine.engine.runtime import LoadedModel

    n, hidden = args.iterations, args.hidden
    device = _runtime.Device(threads=args.threads)
    loop_onnx, body_onnx = loop_model(n, hidden), body_model(hidden)
    rng = np.random.default_rng(1)
    feeds = {"h0": rng.standard_normal((1, hidden)).astype(np.float32),
             "x": rng.standard_normal((1, hidden)).astype(np.float32) * 0.1}
    options = CompileOptions()

    compiled = compile_graph(load_model(loop_onnx), options)
    placed = {p.op_type: p.engine for p in compiled.report.placements}
    assert placed["Loop"] == "device", compiled.report.render()
    loop = LoadedModel(compiled, device)
    body = LoadedModel(compile_graph(load_model(body_onnx), options), device)
    real = pipeline._place_control  # the host loop: placement without the device predicate
    pipeline._place_control = lambda node, **kw: "benchmark: the host step"
    try:
        host_compiled = compile_graph(load_model(loop_onnx), options)
    finally:
        pipeline._place_control = real
    host = LoadedModel(host_compiled, device)
    so = ort.SessionOptions()
    so.intra_op_num_threads = so.inter_op_num_threads = args.threads
    sess = ort.InferenceSession(loop_onnx.SerializeToString(), so,
                                providers=["CPUExecutionProvider"])

    want = sess.run(None, feeds)[0]
    got = loop.execute(feeds)["h"]
    err = float(np.abs(got - want).max())
    np.testing.assert_allclose(host.execute(feeds)["h"], want, rtol=1e-4, atol=1e-5)

    def launches() -> None:
        h = feeds["h0"]
        for _ in range(n):
            h = body.execute({"h_in": h, "x": feeds["x"]})["h_out"]

    rounds = []
    for _ in range(args.rounds):
        k0, r0 = _kernel_seconds(loop)
        loop_s = _median_time(lambda: loop.execute(feeds), args.runs)
        k1, r1 = _kernel_seconds(loop)
        b0, s0 = _kernel_seconds(body)
        launches_s = _median_time(launches, args.runs)
        b1, s1 = _kernel_seconds(body)
        rounds.append({
            "loop_ms": loop_s * 1e3,
            "loop_kernel_ms": (k1 - k0) / (r1 - r0) * 1e3,
            "launches_ms": launches_s * 1e3,
            "launches_kernel_ms": (b1 - b0) / (s1 - s0) * n * 1e3,
            "host_loop_ms": _median_time(lambda: host.execute(feeds), args.runs) * 1e3,
            "onnxruntime_ms": _median_time(lambda: sess.run(None, feeds), args.runs) * 1e3})
    best = {k: min(r[k] for r in rounds) for k in rounds[0]}
    best["loop_over_launches_kernel"] = best["loop_ms"] / best["launches_kernel_ms"]
    best["onnxruntime_over_loop"] = best["onnxruntime_ms"] / best["loop_ms"]
    result = {"iterations": n, "hidden": hidden, "threads": args.threads,
              "machine": platform.processor() or platform.machine(),
              "max_abs_diff_vs_onnxruntime": err, "best": best, "rounds": rounds}
    for k, v in best.items():
        print(f"{k:>28}: {v:10.3f}")
    out = HERE / "results" / f"control-{datetime.datetime.now():%Y%m%d-%H%M%S}.json"
    out.write_text(json.dumps(result, indent=2))
    print(f"written {out}", file=sys.stderr)


if __name__ == "__main__":
    main()
