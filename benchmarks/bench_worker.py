"""One side of a side-by-side benchmark, in its own process (driven by benchmarks/run.py and
benchmarks/bench_zoo.py).

    python benchmarks/bench_worker.py --side ours|ort|ov --model NAME|zoo/NAME|PATH
                                      [--threads 2] [--batch 32]

On start it compiles and loads the model for batch 1 (ours: Session add_graph + compile_graph;
ORT: InferenceSession creation; OpenVINO: read_model, reshape to the inputs' shapes,
compile_model on the CPU plugin with INFERENCE_NUM_THREADS = threads, f32 precision, no
dynamic quantization of activations and the latency hint), runs it once (the first run is
part of compile+load: engines defer work to it), runs it a few more times, and prints one
JSON line with the compile+load time, the process's peak RSS so far and (ours) the FLOPs of
one batch-1 run from the compile report (the throughput reply carries the batch-N count).
`zoo/NAME` is a zoo model (benchmarks/zoo/): its recorded batch-1 inputs, repeated along the
batch axis for batch N.
Then it answers JSON commands, one per line on stdin, with one JSON line on stdout:

    {"cmd": "latency", "seconds": S, "min_runs": N}     batch-1 run times
    {"cmd": "throughput", "seconds": S, "min_runs": N}  batch-N run times (loads batch N first)
    {"cmd": "dump", "path": P}                         saves the batch-1 outputs to P (.npz)
    {"cmd": "exit"}                                     final peak RSS, then exits

Keeping both sides alive and idle between commands lets the driver alternate short rounds
of each, so the noise of a shared machine falls on both alike.
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import bench_inputs, ort_session


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


class Ours:
    def __init__(self, path: Path, threads: int) -> None:
        import graphengine
        from graphengine.engine.runtime import default_device

        self.path = path
        self.session = graphengine.Session(device=default_device(threads))
        self.graph_id: int | None = None
        self.flops = 0.0  # of one run at the last compiled batch (the compile report's count)

    def load(self, inputs: dict[str, np.ndarray]) -> None:
        if self.graph_id is None:
            self.graph_id = self.session.add_graph(str(self.path))
        report = self.session.compile_graph(self.graph_id,
                                            {k: v.shape for k, v in inputs.items()})
        self.flops = report.flops

    def run(self, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        return self.session.run_graph(self.graph_id, inputs)


class Ort:
    def __init__(self, path: Path, threads: int) -> None:
        self.path = path
        self.threads = threads
        self.session = None
        self.flops = 0.0  # not counted on this side: the driver uses ours' count

    def load(self, inputs: dict[str, np.ndarray]) -> None:
        if self.session is None:  # one session serves every batch size
            self.session = ort_session(self.path, self.threads)

    def run(self, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        names = [o.name for o in self.session.get_outputs()]
        return dict(zip(names, self.session.run(names, inputs)))


# float32 products: the f32 precision hint keeps bf16 off, but OpenVINO's CPU plugin still
# quantizes the activations of a MatMul with 8-bit weights to 8 bits (in groups of 32) unless
# DYNAMIC_QUANTIZATION_GROUP_SIZE is 0: on minilm_l6_int8 that moved its batch-8 output 0.053
# from ONNX Runtime's (3.6e-6 with it off), at twice the speed. Every engine here is float32.
OV_CONFIG = {"INFERENCE_PRECISION_HINT": "f32", "PERFORMANCE_HINT": "LATENCY",
             "DYNAMIC_QUANTIZATION_GROUP_SIZE": 0}


class Ov:
    """OpenVINO's CPU plugin, the model reshaped to each concrete input shape (as ours
    specializes per signature): one compiled model per signature loaded."""

    def __init__(self, path: Path, threads: int) -> None:
        import openvino

        self.core = openvino.Core()
        self.path = path
        self.threads = threads
        self.flops = 0.0
        self.requests: dict[tuple, tuple] = {}  # signature -> (infer request, outputs)

    @staticmethod
    def _key(inputs: dict[str, np.ndarray]) -> tuple:
        return tuple(sorted((k, a.shape) for k, a in inputs.items()))

    def load(self, inputs: dict[str, np.ndarray]) -> None:
        model = self.core.read_model(str(self.path))
        model.reshape({name: list(a.shape) for name, a in inputs.items()})
        compiled = self.core.compile_model(model, "CPU", OV_CONFIG | {
            "INFERENCE_NUM_THREADS": self.threads})
        self.requests[self._key(inputs)] = (compiled.create_infer_request(),
                                            list(compiled.outputs))

    def run(self, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        request, outputs = self.requests[self._key(inputs)]
        res = request.infer(inputs)
        return {o.get_any_name(): np.asarray(res[o]) for o in outputs}


SIDES = {"ours": Ours, "ort": Ort, "ov": Ov}


def timed_runs(side, inputs, seconds: float, min_runs: int, max_runs: int = 100000) -> list[float]:
    times: list[float] = []
    deadline = time.perf_counter() + seconds
    while len(times) < max_runs and (len(times) < min_runs or time.perf_counter() < deadline):
        t0 = time.perf_counter()
        side.run(inputs)
        times.append(time.perf_counter() - t0)
    return times


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--side", choices=tuple(SIDES), required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--batch", type=int, default=32, help="batch of the throughput runs")
    args = ap.parse_args(argv)

    path, small, big = bench_inputs(args.model, args.batch)
    side = SIDES[args.side](path, args.threads)
    t0 = time.perf_counter()
    side.load(small)
    side.run(small)
    compile_load = time.perf_counter() - t0
    for _ in range(2):
        side.run(small)
    print(json.dumps({"ready": True, "compile_load_s": compile_load, "rss_mb": peak_rss_mb(),
                      "flops": side.flops}), flush=True)

    big_loaded = False
    for line in sys.stdin:
        cmd = json.loads(line)
        if cmd["cmd"] == "latency":
            reply = {"times": timed_runs(side, small, cmd["seconds"], cmd["min_runs"])}
        elif cmd["cmd"] == "throughput":
            if big is None:
                reply = {"times": [], "flops": 0.0, "note": "the model has no batch axis"}
            else:
                if not big_loaded:
                    side.load(big)
                    side.run(big)
                    big_loaded = True
                reply = {"times": timed_runs(side, big, cmd["seconds"], cmd["min_runs"]),
                         "flops": side.flops}
        elif cmd["cmd"] == "dump":
            np.savez(cmd["path"], **side.run(small))
            reply = {"ok": True}
        elif cmd["cmd"] == "exit":
            print(json.dumps({"rss_mb": peak_rss_mb()}), flush=True)
            return 0
        else:
            reply = {"error": f"unknown command {cmd['cmd']!r}"}
        print(json.dumps(reply), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
