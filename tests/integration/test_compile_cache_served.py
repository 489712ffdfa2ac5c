"""The compile cache on real server processes: a restart with `--compile-cache-dir` loads
every repository model and session graph without compiling (the compile histogram's `total`
count stays 0), a damaged entry is rebuilt, replicas starting at once share the folder, and
the folder keeps to its configured bound."""

from __future__ import annotations

import pathlib
import re
import threading
import time

import grpc
import numpy as np
import onnx
import pytest

from graphengine.clients import Client
from graphengine.engine import offline
from tests import zoo

from .ge_models import simple_graphdef
from .test_metrics_scrape import _free_port, _scrape

MLP = zoo.mlp(sizes=(8, 16, 4), symbolic_batch=True)
BERT = zoo.bert(layers=1, hidden=32, heads=2, intermediate=64, vocab=50, seq=8, batch=1)
A = np.ones((2, 3), np.float32)
_KSERVE_TYPES = {"FP32": np.float32, "INT64": np.int64}
_KSERVE_NAMES = {np.dtype(v): k for k, v in _KSERVE_TYPES.items()}


@pytest.fixture
def repository(tmp_path: pathlib.Path) -> pathlib.Path:
    root = tmp_path / "models"
    root.mkdir()
    onnx.save(MLP, root / "mlp.onnx")
    (root / "mlp.yaml").write_text("gears: [1, 4]\n")
    (root / "bert").mkdir()
    onnx.save(BERT, root / "bert" / "model.onnx")
    return root


def _stub(address: str):
    from graphengine.kserve.v2 import grpc_service_pb2_grpc as kgrpc

    channel = grpc.insecure_channel(address)
    grpc.channel_ready_future(channel).result(timeout=60)
    return channel, kgrpc.GRPCInferenceServiceStub(channel)


def _wait_loaded(stub, names: set[str]) -> None:
    from graphengine.kserve.v2 import grpc_service_pb2 as kpb

    for _ in range(600):  # the repository loads in the background
        index = stub.RepositoryIndex(kpb.RepositoryIndexRequest(), timeout=30)
        states = {m.name: m.state for m in index.models}
        if set(states) >= names and "LOADING" not in states.values():
            assert all(states[n] == "READY" for n in names), index
            return
        time.sleep(0.1)
    raise AssertionError(f"models not loaded: {states}")


def _infer(stub, model: str, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    from graphengine.kserve.v2 import grpc_service_pb2 as kpb

    request = kpb.ModelInferRequest(model_name=model)
    for name, x in inputs.items():
        request.inputs.add(name=name, datatype=_KSERVE_NAMES[x.dtype], shape=list(x.shape))
        request.raw_input_contents.append(np.ascontiguousarray(x).tobytes())
    response = stub.ModelInfer(request, timeout=60)
    return {o.name: np.frombuffer(raw, _KSERVE_TYPES[o.datatype]).reshape(o.shape)
            for o, raw in zip(response.outputs, response.raw_output_contents)}


def _serve_once(start, repository: pathlib.Path, cache: pathlib.Path, *extra: str
                ) -> tuple[dict, dict, str]:
    """Start a server, load and run everything, scrape, stop: (samples, outputs, logs)."""
    port = _free_port()
    proc = start("--model-repository", str(repository), "--compile-cache-dir", str(cache),
                 "--metrics-port", str(port), *extra)
    channel, stub = _stub(proc.address)
    with channel:
        _wait_loaded(stub, {"mlp", "bert"})
        outputs = {
            "mlp": _infer(stub, "mlp", {"input": np.linspace(-1, 1, 24, dtype=np.float32)
                                        .reshape(3, 8)}),
            "bert": _infer(stub, "bert", zoo.random_inputs(BERT, seed=1, batch=1)),
        }
    with Client(proc.address, timeout=60) as client, client.session() as sess:
        gid = sess.add_graph(simple_graphdef())
        outputs["session"] = sess.run_graph(gid, {"input_a": A, "input_b": A})
    samples = _scrape(port)
    assert proc.terminate() == 0
    return samples, outputs, proc.logs()


def _compiles(samples: dict) -> float:
    return samples.get(("graphengine_compile_duration_seconds_count", (("stage", "total"),)),
                       0.0)


def _cache(samples: dict, what: str) -> float:
    return samples[(f"graphengine_compile_cache_{what}_total", ())]


def _same(a: dict, b: dict) -> None:
    assert a.keys() == b.keys()
    for model in a:
        assert a[model].keys() == b[model].keys()
        for name in a[model]:
            np.testing.assert_array_equal(a[model][name], b[model][name], err_msg=name)


def test_a_restart_loads_every_model_from_the_cache(server_process, repository, tmp_path
                                                    ) -> None:
    cache = tmp_path / "cache"
    signatures = 4  # mlp's two gears, bert, the session's graph
    first, outputs, _ = _serve_once(server_process, repository, cache)
    assert _compiles(first) == signatures
    assert (_cache(first, "misses"), _cache(first, "hits")) == (signatures, 0)
    entries = sorted(cache.glob("*.geom"))
    assert len(entries) == signatures
    assert first[("graphengine_compile_cache_bytes", ())] == sum(
        p.stat().st_size for p in entries)

    second, again, logs = _serve_once(server_process, repository, cache)
    assert _compiles(second) == 0  # nothing compiled: every model came from the folder
    assert (_cache(second, "hits"), _cache(second, "misses")) == (signatures, 0)
    _same(again, outputs)
    for graph in ("mlp", "bert", "handmade"):
        assert re.search(rf"event=compile_cache_hit graph={graph} key=[0-9a-f]{{64}}", logs)

    # A damaged entry: found by its checksum, logged, deleted, compiled and stored again.
    bert_key = re.search(r"event=compile_cache_hit graph=bert key=([0-9a-f]{64})", logs)[1]
    path = cache / f"{bert_key}.geom"
    data = bytearray(path.read_bytes())
    data[len(data) // 3] ^= 0xFF
    path.write_bytes(bytes(data))
    third, again, logs = _serve_once(server_process, repository, cache)
    assert _compiles(third) == 1
    assert (_cache(third, "rejected"), _cache(third, "misses"), _cache(third, "hits")) == (
        1, 1, signatures - 1)
    assert re.search(rf"event=compile_cache_rejected graph=bert key={bert_key} "
                     rf"reason=\"checksum mismatch", logs)
    _same(again, outputs)
    assert offline.read_all(path).models[0].name == "bert"  # whole again


def test_replicas_starting_at_once_compile_each_model_once(server_process, repository,
                                                           tmp_path) -> None:
    cache = tmp_path / "cache"
    results: list = [None, None]

    def replica(i: int) -> None:
        try:
            results[i] = _serve_once(server_process, repository, cache)
        except BaseException as exc:  # reported below, in the test's thread
            results[i] = exc

    threads = [threading.Thread(target=replica, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(300)
    for r in results:
        if isinstance(r, BaseException):
            raise r
    signatures = 4
    # Each key compiled by one replica (the other waited on its lock file, or came later)
    # and loaded by the other; no entry trusted half-written.
    assert sum(_cache(s, "misses") for s, _, _ in results) == signatures
    assert sum(_cache(s, "hits") for s, _, _ in results) == signatures
    assert sum(_cache(s, "rejected") for s, _, _ in results) == 0
    assert sum(_compiles(s) for s, _, _ in results) == signatures
    _same(results[0][1], results[1][1])
    assert len(list(cache.glob("*.geom"))) == signatures
    assert not list(cache.glob("*.tmp")) and not list(cache.glob("*.lock"))


def test_the_folder_keeps_to_the_configured_bound(server_process, tmp_path) -> None:
    root = tmp_path / "models"
    root.mkdir()
    for seed in range(3):  # ~0.4 MB of weights each: two fit in 1 MiB, three do not
        onnx.save(zoo.mlp(sizes=(256, 384, 4), seed=seed), root / f"mlp{seed}.onnx")
    cache = tmp_path / "cache"
    config = tmp_path / "graphengine.yaml"
    config.write_text(f"compile_cache_dir: {cache}\ncompile_cache_max_bytes: 1048576\n"
                      f"repository_load_threads: 1\n")
    port = _free_port()
    proc = server_process("--config", str(config), "--model-repository", str(root),
                          "--metrics-port", str(port))
    channel, stub = _stub(proc.address)
    with channel:
        _wait_loaded(stub, {"mlp0", "mlp1", "mlp2"})
    samples = _scrape(port)
    assert proc.terminate() == 0
    assert _cache(samples, "misses") == 3 and _cache(samples, "evictions") == 1
    assert samples[("graphengine_compile_cache_bytes", ())] <= 1 << 20
    assert sum(p.stat().st_size for p in cache.glob("*.geom")) <= 1 << 20
    assert re.search(r"event=compile_cache_evicted key=[0-9a-f]{64}", proc.logs())


def test_a_cache_folder_that_cannot_be_made_stops_the_start(server_process, tmp_path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(RuntimeError, match="exited with 1") as failed:
        server_process("--compile-cache-dir", str(blocker / "cache"))
    assert "compile cache folder" in str(failed.value)
