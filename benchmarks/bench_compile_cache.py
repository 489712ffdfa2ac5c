"""Load time of zoo models cold (compiled) and from the compile cache, each in a fresh process.

    python benchmarks/bench_compile_cache.py [--only resnet50,hf_bert] [--repeat 2] [--server]

For each model: an empty cache folder; a process that opens a `graphengine.Session` with
`compile_cache=DIR`, adds the model, compiles it for the zoo's batch-1 inputs and runs them
once (cold: compiled and stored), then `--repeat` more processes doing the same (cached:
loaded from the folder). Each process reports add_graph (import, validation), compile_graph
(stages 1-5, or the cache read and stage 5) and the first run; the outputs of every process
must be the same bits. A process per measurement is what a restart is: nothing of the
compiler is warm.

`--server`: the same models as one model repository (gears 1 and 4 where the batch is the
only symbolic dim) served by `graphengine serve --compile-cache-dir DIR`, started cold and
then restarted: the time from the process's start to every model READY, each model's load
time from its `model_ready` log line, and the compile count from /metrics.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import model_cache_dir

DEFAULT_MODELS = ("resnet50", "mobilenetv3_small", "efficientnet_b0", "hf_bert", "hf_gpt2",
                  "yolov8n_nms")


def worker(name: str, cache: str) -> dict:
    import numpy as np

    started = time.perf_counter()
    import graphengine

    folder = Path(model_cache_dir()) / "zoo" / name
    ref = np.load(folder / "ref_b1.npz")
    inputs = {k[len("input:"):]: ref[k] for k in ref.files if k.startswith("input:")}
    t_import = time.perf_counter() - started
    with graphengine.Session(compile_cache=cache) as sess:
        t0 = time.perf_counter()
        gid = sess.add_graph(str(folder / "model.onnx"))
        t1 = time.perf_counter()
        sess.compile_graph(gid, {k: v.shape for k, v in inputs.items()})
        t2 = time.perf_counter()
        out = sess.run_graph(gid, inputs)
        t3 = time.perf_counter()
        stats = sess.compile_cache.snapshot()
    digest = hashlib.sha256()
    for key in sorted(out):
        digest.update(key.encode() + np.ascontiguousarray(out[key]).tobytes())
    return {"import_s": t_import, "add_graph_s": t1 - t0, "compile_s": t2 - t1,
            "first_run_s": t3 - t2, "hits": stats.hits, "misses": stats.misses,
            "outputs": digest.hexdigest()}


def measure(name: str, cache: str) -> dict:
    done = subprocess.run([sys.executable, __file__, "--worker", name, cache],
                          capture_output=True, text=True, timeout=1800)
    if done.returncode != 0:
        raise RuntimeError(f"{name}: worker failed\n{done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def _repository(root: Path, names: list[str]) -> None:
    from graphengine.engine.importers import load_model

    for name in names:
        model = Path(model_cache_dir()) / "zoo" / name / "model.onnx"
        (root / name).mkdir()
        (root / name / "model.onnx").symlink_to(model)
        shapes = [v.meta.shape for v in load_model(str(model)).inputs]
        if all(isinstance(s[0], str) and all(isinstance(d, int) for d in s[1:])
               for s in shapes):
            (root / name / "config.yaml").write_text("gears: [1, 4]\n")


def _metric(port: int, name: str) -> float:
    import urllib.request

    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
        text = r.read().decode()
    found = re.search(rf"^{re.escape(name)} (\S+)$", text, re.M)
    return float(found[1]) if found else 0.0


def serve_once(repo: Path, cache: str, names: list[str]) -> dict:
    """Start a server, wait for every model READY (RepositoryIndex), stop it."""
    import grpc

    from graphengine.kserve.v2 import grpc_service_pb2 as kpb
    from graphengine.kserve.v2 import grpc_service_pb2_grpc as kgrpc

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        metrics = s.getsockname()[1]
    log = tempfile.NamedTemporaryFile("w+", suffix=".log")
    started = time.perf_counter()
    proc = subprocess.Popen(
        [sys.executable, "-m", "graphengine.cli", "serve", "--port", "0", "--model-repository",
         str(repo), "--compile-cache-dir", cache, "--metrics-port", str(metrics)],
        stdout=subprocess.PIPE, stderr=log, text=True)
    try:
        line = proc.stdout.readline()
        address = re.match(r"graphengine serving on (\S+)", line)[1]
        with grpc.insecure_channel(address) as channel:
            stub = kgrpc.GRPCInferenceServiceStub(channel)
            while True:
                index = stub.RepositoryIndex(kpb.RepositoryIndexRequest(), timeout=60)
                states = {m.name: m.state for m in index.models}
                if set(states) >= set(names) and "LOADING" not in states.values():
                    break
                time.sleep(0.05)
        ready_s = time.perf_counter() - started
        compiles = _metric(metrics, 'graphengine_compile_duration_seconds_count{stage="total"}')
        hits = _metric(metrics, "graphengine_compile_cache_hits_total")
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(120)
    log.seek(0)
    text = log.read()
    loads = {m[1]: int(m[2]) for m in re.finditer(r"event=model_ready model=(\S+) .*?ms=(\d+)",
                                                   text)}
    assert set(loads) == set(names), (states, text[-3000:])
    return {"ready_s": ready_s, "model_ms": loads, "compiles": compiles, "hits": hits}


def server_main(names: list[str]) -> int:
    with tempfile.TemporaryDirectory(prefix="ge-cache-bench-") as tmp:
        repo = Path(tmp) / "models"
        repo.mkdir()
        _repository(repo, names)
        cache = str(Path(tmp) / "cache")
        cold = serve_once(repo, cache, names)
        warm = serve_once(repo, cache, names)
    print(f"{'model':20} {'cold load':>10} {'cached':>8}")
    for name in names:
        print(f"{name:20} {cold['model_ms'][name]:8}ms {warm['model_ms'][name]:6}ms")
    print(f"start to all READY: cold {cold['ready_s']:.2f} s ({cold['compiles']:.0f} compiles), "
          f"restart {warm['ready_s']:.2f} s ({warm['compiles']:.0f} compiles, "
          f"{warm['hits']:.0f} cache hits)")
    out = Path(__file__).resolve().parent / "results" / time.strftime(
        "compile-cache-server-%Y%m%d-%H%M%S.json")
    out.write_text(json.dumps({"cold": cold, "restart": warm}, indent=1))
    print(f"results: {out}")
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", help="comma-separated zoo model names")
    parser.add_argument("--repeat", type=int, default=2, help="cached processes per model")
    parser.add_argument("--server", action="store_true",
                        help="time a model repository's restart instead")
    parser.add_argument("--worker", nargs=2, metavar=("MODEL", "DIR"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        print(json.dumps(worker(*args.worker)))
        return 0
    names = args.only.split(",") if args.only else list(DEFAULT_MODELS)
    if args.server:
        return server_main(names)
    rows = []
    print(f"{'model':20} {'cold compile':>13} {'cached':>9} {'speedup':>8} "
          f"{'add_graph':>10} {'entry MB':>9}")
    for name in names:
        with tempfile.TemporaryDirectory(prefix="ge-cache-bench-") as cache:
            cold = measure(name, cache)
            warm = [measure(name, cache) for _ in range(args.repeat)]
            size = sum(f.stat().st_size for f in Path(cache).glob("*.geom"))
        assert cold["misses"] == 1 and cold["hits"] == 0, cold
        for w in warm:
            assert w["hits"] == 1 and w["misses"] == 0, w
            assert w["outputs"] == cold["outputs"], f"{name}: cached outputs differ"
        cached = min(w["compile_s"] for w in warm)
        rows.append({"model": name, "cold": cold, "cached": warm, "entry_bytes": size})
        print(f"{name:20} {cold['compile_s'] * 1e3:11.0f}ms {cached * 1e3:7.0f}ms "
              f"{cold['compile_s'] / cached:7.1f}x {cold['add_graph_s'] * 1e3:8.0f}ms "
              f"{size / 1e6:9.1f}", flush=True)
    out = Path(__file__).resolve().parent / "results" / time.strftime(
        "compile-cache-%Y%m%d-%H%M%S.json")
    out.write_text(json.dumps({"models": rows, "cpu": os.cpu_count()}, indent=1))
    print(f"results: {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
