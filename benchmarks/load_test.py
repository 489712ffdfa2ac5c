"""Load test of the real server on loopback: N concurrent clients for T seconds.

    python benchmarks/load_test.py [--models mlp,resnet18] [--clients 64] [--duration 60]
                                   [--processes 4] [--api session|kserve]
                                   [--sigterm-at S] [--json OUT.json]

For each model (from ~/.cache/graphengine/models, built by benchmarks/build_models.py) it
starts `graphengine serve` on 127.0.0.1, opens one session with the model compiled for
batch 1, then runs `--clients` clients (threads spread over `--processes` processes, each
client with its own channel) that call RunGraph back to back for `--duration` seconds.
It reports requests, errors by status, p50/p90/p99 latency, throughput and the server's
RSS sampled every second, and fails unless there are zero errors and RSS stays flat after
the warm-up (growth under 10% and 64 MiB from the first sample after warm-up to the end).

Before the load, for resnet18 it compares the latency of RunGraph over gRPC (one client,
sequential) with the in-process Session.run_graph of the same model: the target is within
1.15x.

`--sigterm-at S` sends SIGTERM to the server S seconds into the load and checks that every
request either completed or got UNAVAILABLE (none lost, none hung: every client ends within
the grace period), and that the server exits 0.

Loopback only and bounded: no request leaves the machine; the run ends after `--duration`.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import re
import signal
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import model_path, random_inputs

READY = re.compile(r"^graphengine serving on (?P<address>\S+:\d+)$")
GRACE_SECONDS = 30.0


# ---- the server --------------------------------------------------------------------------
def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def server_stages(metrics_port: int) -> dict[str, tuple[float, float]]:
    """(sum, count) of the server's request latency per (api, stage), from /metrics."""
    import urllib.request

    from prometheus_client.parser import text_string_to_metric_families

    with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=10) as r:
        text = r.read().decode()
    out: dict = {}
    for family in text_string_to_metric_families(text):
        if family.name != "graphengine_request_duration_seconds":
            continue
        for sample in family.samples:
            kind = sample.name.rsplit("_", 1)[-1]
            if kind in ("sum", "count"):
                key = f"{sample.labels['api']}/{sample.labels['stage']}"
                total, count = out.get(key, (0.0, 0.0))
                out[key] = (total + sample.value, count) if kind == "sum" else (total, count
                                                                               + sample.value)
    return out


def stage_means(before: dict, after: dict, api: str) -> dict[str, float]:
    """Mean milliseconds per request of each server-side stage between two scrapes."""
    means = {}
    for key, (total, count) in after.items():
        name, stage = key.split("/")
        t0, c0 = before.get(key, (0.0, 0.0))
        if name == api and count > c0:
            means[f"{stage}_ms"] = round((total - t0) / (count - c0) * 1e3, 3)
    return means


class Server:
    def __init__(self, *args: str) -> None:
        self.metrics_port = _free_port()
        self.log_path = Path(os.environ.get("TMPDIR", "/tmp")) / f"ge-load-{os.getpid()}.log"
        self._log = open(self.log_path, "w")  # closed in stop()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "graphengine.cli", "serve", "--host", "127.0.0.1",
             "--port", "0", "--grace-seconds", str(GRACE_SECONDS), "--worker-threads", "16",
             "--metrics-port", str(self.metrics_port), "--http-port", "0", *args],
            stdout=subprocess.PIPE, stderr=self._log, text=True)
        for line in self.proc.stdout:
            match = READY.match(line.strip())
            if match:
                self.address = match["address"]
                break
        else:
            raise RuntimeError(f"server did not start:\n{self.log_path.read_text()}")
        threading.Thread(target=lambda: [None for _ in self.proc.stdout], daemon=True).start()
        self.rss: list[tuple[float, int]] = []
        self.started = time.monotonic()
        self._sampling = threading.Event()
        threading.Thread(target=self._sample, daemon=True).start()

    def _sample(self) -> None:
        start = self.started
        while self.proc.poll() is None and not self._sampling.is_set():
            try:
                with open(f"/proc/{self.proc.pid}/status") as f:
                    kb = next(int(line.split()[1]) for line in f if line.startswith("VmRSS:"))
                self.rss.append((time.monotonic() - start, kb * 1024))
            except (OSError, StopIteration):
                pass
            time.sleep(1.0)

    def terminate(self, timeout: float = GRACE_SECONDS + 30) -> int:
        self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout)

    def stop(self) -> None:
        self._sampling.set()
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(GRACE_SECONDS + 30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        self._log.close()


# ---- the clients (run in worker processes) -----------------------------------------------
def _client_process(address: str, api: str, target: dict, inputs: dict, threads: int,
                    until: float, stop_on_error: bool, out: mp.Queue) -> None:
    import grpc

    from graphengine.clients import Client
    from graphengine.clients.errors import ClientError

    def run(k: int, records: list) -> None:
        if api == "kserve":
            call = _kserve_call(address, target["model"], inputs)
        else:
            client = Client(address, timeout=GRACE_SECONDS + 60)
            session = client.attach(target["session"])

            def call() -> None:
                session.run_graph(target["graph"], inputs)
        while time.time() < until:
            t0 = time.time()
            try:
                call()
                code = "OK"
            except ClientError as exc:
                code = exc.code.name
            except grpc.RpcError as exc:
                code = exc.code().name
            records.append((t0, time.time() - t0, code))
            if code != "OK" and stop_on_error:
                return

    per_thread: list[list] = [[] for _ in range(threads)]
    workers = [threading.Thread(target=run, args=(k, per_thread[k])) for k in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    out.put([r for records in per_thread for r in records])


def _kserve_call(address: str, model: str, inputs: dict):
    import grpc

    from graphengine.kserve.v2 import grpc_service_pb2 as pb
    from graphengine.kserve.v2 import grpc_service_pb2_grpc as kgrpc
    from graphengine.server.rpc import kserve_codec

    channel = grpc.insecure_channel(address, options=[
        ("grpc.max_receive_message_length", 1 << 28), ("grpc.max_send_message_length", 1 << 28)])
    stub = kgrpc.GRPCInferenceServiceStub(channel)
    request = pb.ModelInferRequest(model_name=model)
    for name, array in inputs.items():
        from graphengine.engine.dtypes import DType

        request.inputs.add(name=name, shape=array.shape,
                           datatype=kserve_codec.datatype_name(DType.from_numpy(array.dtype)))
        request.raw_input_contents.append(np.ascontiguousarray(array).tobytes())

    def call() -> None:
        stub.ModelInfer(request, timeout=GRACE_SECONDS + 60)
    return call


def run_load(address: str, api: str, target: dict, inputs: dict, clients: int, processes: int,
             duration: float, stop_on_error: bool = False) -> list[tuple[float, float, str]]:
    ctx = mp.get_context("spawn")
    out: mp.Queue = ctx.Queue()
    until = time.time() + duration
    split = [clients // processes + (1 if i < clients % processes else 0)
             for i in range(processes)]
    procs = [ctx.Process(target=_client_process,
                         args=(address, api, target, inputs, n, until, stop_on_error, out))
             for n in split if n]
    for p in procs:
        p.start()
    records: list = []
    for _ in procs:
        records += out.get(timeout=duration + GRACE_SECONDS + 120)
    for p in procs:
        p.join(30)
    return records


# ---- measurements ------------------------------------------------------------------------
def percentiles(latencies: list[float]) -> dict[str, float]:
    if not latencies:
        return {}
    a = np.sort(np.asarray(latencies)) * 1e3
    return {"p50_ms": float(np.percentile(a, 50)), "p90_ms": float(np.percentile(a, 90)),
            "p99_ms": float(np.percentile(a, 99)), "max_ms": float(a[-1])}


def rss_verdict(rss: list[tuple[float, int]], load_start: float, warmup: float) -> dict:
    """RSS from `warmup` seconds into the load (times since the server started) to the end."""
    rss = [(t, b) for t, b in rss if t >= load_start]
    after = [b for t, b in rss if t >= load_start + warmup]
    if len(after) < 2:
        return {"flat": True, "note": "too few samples after warm-up"}
    first, last, peak = after[0], after[-1], max(after)
    growth = last - first
    flat = growth < max(0.10 * first, 0) and growth < 64 << 20
    return {"flat": bool(flat), "first_after_warmup_mib": first / 2**20,
            "last_mib": last / 2**20, "peak_mib": peak / 2**20, "growth_mib": growth / 2**20,
            "series_mib": [round(b / 2**20, 1) for _, b in rss[::max(1, len(rss) // 12)]]}


def latency_ratio(address: str, model_file: Path, inputs: dict, runs: int) -> dict:
    """p50 of RunGraph over gRPC vs in-process Session.run_graph, same model, batch 1.

    The two are measured interleaved (one local run, one remote run, ...) so that whatever
    else the machine is doing weighs on both alike.
    """
    import graphengine
    from graphengine.clients import Client

    shapes = {k: v.shape for k, v in inputs.items()}
    local_times, wire_times = [], []
    with graphengine.Session() as sess, Client(address, timeout=60) as client, \
            client.session() as remote:
        local_gid = sess.add_graph(str(model_file))
        sess.compile_graph(local_gid, shapes)
        remote_gid = remote.add_graph(str(model_file))
        remote.compile_graph(remote_gid, shapes)
        for i in range(runs + max(5, runs // 10)):
            t0 = time.perf_counter()
            sess.run_graph(local_gid, inputs)
            t1 = time.perf_counter()
            remote.run_graph(remote_gid, inputs)
            t2 = time.perf_counter()
            if i >= max(5, runs // 10):  # after the warm-up runs
                local_times.append(t1 - t0)
                wire_times.append(t2 - t1)
    local, wire = statistics.median(local_times), statistics.median(wire_times)
    return {"in_process_p50_ms": local * 1e3, "grpc_p50_ms": wire * 1e3,
            "in_process_p90_ms": float(np.percentile(local_times, 90)) * 1e3,
            "grpc_p90_ms": float(np.percentile(wire_times, 90)) * 1e3,
            "ratio": wire / local, "target": 1.15, "ok": wire / local <= 1.15}


def prepare(server: Server, name: str, model_file: Path, inputs: dict, api: str,
            args_instances: int) -> dict:
    from graphengine.clients import Client

    if api == "kserve":
        return {"model": name}
    client = Client(server.address, timeout=120)
    session = client.session({"instances": args_instances})
    gid = session.add_graph(str(model_file))
    session.compile_graph(gid, {k: v.shape for k, v in inputs.items()})
    return {"session": session.id, "graph": gid}


def kserve_repository(model_file: Path, name: str, instances: int) -> Path:
    root = Path(os.environ.get("TMPDIR", "/tmp")) / f"ge-load-repo-{os.getpid()}"
    (root / name).mkdir(parents=True, exist_ok=True)
    link = root / name / "model.onnx"
    if not link.exists():
        link.symlink_to(model_file.resolve())
    (root / name / "config.yaml").write_text(f"instances: {instances}\n")
    return root


def load_one(name: str, args: argparse.Namespace) -> dict:
    model_file = model_path(name)
    if not model_file.exists():
        raise SystemExit(f"{model_file} is missing: run benchmarks/build_models.py first")
    inputs = random_inputs(model_file, batch=1, seed=0)
    extra = ["--model-repository", str(kserve_repository(model_file, name, args.instances))] \
        if args.api == "kserve" else []
    server = Server(*extra)
    result: dict = {"model": name, "api": args.api, "clients": args.clients,
                    "duration_s": args.duration}
    try:
        if args.api == "kserve":
            _wait_model(server.address, name)
        if name == "resnet18" and not args.sigterm_at and args.latency_runs:
            result["latency_vs_in_process"] = latency_ratio(server.address, model_file, inputs,
                                                            args.latency_runs)
        target = prepare(server, name, model_file, inputs, args.api, args.instances)
        if args.sigterm_at:
            timer = threading.Timer(args.sigterm_at, server.proc.send_signal, (signal.SIGTERM,))
            timer.start()
        before = server_stages(server.metrics_port)
        started = time.time()
        load_start = time.monotonic() - server.started
        records = run_load(server.address, args.api, target, inputs, args.clients,
                           args.processes, args.duration, stop_on_error=bool(args.sigterm_at))
        elapsed = time.time() - started
        codes: dict[str, int] = {}
        for _, _, code in records:
            codes[code] = codes.get(code, 0) + 1
        ok = [lat for _, lat, code in records if code == "OK"]
        result.update(requests=len(records), codes=codes, throughput_rps=len(ok) / elapsed,
                      **percentiles(ok))
        if args.sigterm_at:
            exit_code = server.proc.wait(GRACE_SECONDS + 30)
            bad = {c: n for c, n in codes.items() if c not in ("OK", "UNAVAILABLE")}
            result["sigterm"] = {"at_s": args.sigterm_at, "exit_code": exit_code,
                                 "other_codes": bad, "clients_finished_s": round(elapsed, 2),
                                 "ok": exit_code == 0 and not bad and elapsed < args.duration}
        else:
            api = "ModelInfer" if args.api == "kserve" else "RunGraph"
            result["server_stage_means"] = stage_means(
                before, server_stages(server.metrics_port), api)
            result["rss"] = rss_verdict(server.rss, load_start, warmup=min(10.0, args.duration / 4))
            result["zero_errors"] = set(codes) <= {"OK"}
    finally:
        server.stop()
        result["server_log"] = str(server.log_path)
    return result


def _wait_model(address: str, name: str) -> None:
    import grpc

    from graphengine.kserve.v2 import grpc_service_pb2 as pb
    from graphengine.kserve.v2 import grpc_service_pb2_grpc as kgrpc

    with grpc.insecure_channel(address) as channel:
        stub = kgrpc.GRPCInferenceServiceStub(channel)
        deadline = time.monotonic() + 300
        while not stub.ModelReady(pb.ModelReadyRequest(name=name), timeout=10).ready:
            if time.monotonic() > deadline:
                raise RuntimeError(f"model {name} did not load")
            time.sleep(0.2)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="mlp,resnet18")
    ap.add_argument("--clients", type=int, default=64)
    ap.add_argument("--duration", type=float, default=60.0)
    ap.add_argument("--processes", type=int, default=4, help="client processes")
    ap.add_argument("--api", choices=("session", "kserve"), default="session")
    ap.add_argument("--sigterm-at", type=float, default=0.0, metavar="S")
    ap.add_argument("--latency-runs", type=int, default=200)
    ap.add_argument("--instances", type=int, default=1, help="model instances on the server")
    ap.add_argument("--json", metavar="OUT")
    args = ap.parse_args(argv)
    if args.sigterm_at and args.sigterm_at >= args.duration:
        ap.error("--sigterm-at must be inside --duration")

    results = [load_one(name, args) for name in args.models.split(",")]
    for r in results:
        print(json.dumps(r, indent=2))
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))
    passed = all(r.get("sigterm", {}).get("ok", True) and r.get("zero_errors", True)
                 and r.get("rss", {}).get("flat", True) for r in results)
    print("PASS" if passed else "FAIL")
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main())
