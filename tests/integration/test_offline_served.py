"""An offline model written by `graphengine compile` and served by the real server gives the
same outputs as the ONNX file it was compiled from (AddGraph's onnx_model field carries the
offline model's bytes; the server tells them apart by the magic)."""

from __future__ import annotations

import json
import pathlib

import numpy as np
import onnx
import pytest

from graphengine.clients import Client
from graphengine.clients import errors as ce
from tests import zoo

from .ge_models import ort_run
from .test_cli_run import run_cli

RTOL, ATOL = 1e-3, 1e-4
GEARS = (1, 4)


@pytest.fixture(scope="module")
def compiled_files(tmp_path_factory: pytest.TempPathFactory) -> tuple[onnx.ModelProto,
                                                                      pathlib.Path,
                                                                      pathlib.Path, dict]:
    root = tmp_path_factory.mktemp("offline")
    model = zoo.bert(layers=2, hidden=64, heads=4, intermediate=128, vocab=100, seq=16,
                     batch="batch")
    onnx.save(model, root / "bert.onnx")
    done = run_cli("compile", str(root / "bert.onnx"), "-o", str(root / "bert.om"),
                   "--gears", "batch:" + ",".join(map(str, GEARS)), "--max-streams", "2",
                   "--json-report", str(root / "report.json"))
    assert done.returncode == 0, done.stderr
    report = json.loads((root / "report.json").read_text())
    return model, root / "bert.onnx", root / "bert.om", report


def test_offline_model_serves_the_onnx_outputs(server: str, compiled_files) -> None:
    model, onnx_path, om_path, report = compiled_files
    with Client(server, timeout=120) as client, client.session() as sess:
        from_onnx = sess.add_graph(str(onnx_path))
        from_om = sess.add_graph(str(om_path))  # the file's bytes, sent as onnx_model

        info = sess.graph_info(from_om)
        assert info.name == "bert" and not info.compiled
        assert [(t.name, tuple(t.shape)) for t in info.inputs] == [
            ("input_ids", ("batch", 16)), ("attention_mask", ("batch", 16))]

        for batch in GEARS:
            inputs = zoo.random_inputs(model, seed=batch, batch=batch, dims={"seq": 16})
            want = sess.run_graph(from_onnx, inputs)
            got = sess.run_graph(from_om, inputs)
            assert list(got) == list(want) == ["last_hidden_state", "pooler_output"]
            for name in want:
                # The same compiler and kernels ran in both: the very same bits.
                np.testing.assert_array_equal(got[name], want[name], err_msg=name)
            reference = ort_run(model, inputs)
            for name in want:
                np.testing.assert_allclose(got[name], reference[name], rtol=RTOL, atol=ATOL)
        assert sess.graph_info(from_om).compiled


def test_compile_graph_returns_the_stored_report(server: str, compiled_files) -> None:
    _, _, om_path, report = compiled_files
    with Client(server, timeout=120) as client, client.session() as sess:
        gid = sess.add_graph(om_path.read_bytes())
        stored = sess.compile_graph(gid, {"input_ids": [4, 16], "attention_mask": [4, 16]})
        want = report["compiles"][GEARS.index(4)]["report"]
        assert [(p.stage, p.name) for p in stored.passes] == [
            (p["stage"], p["name"]) for p in want["passes"]]
        assert stored.tasks == want["tasks"] and stored.streams == want["streams"] == 2
        assert stored.memory.arena_bytes == want["memory"]["arena_bytes"]
        assert stored.total_seconds == pytest.approx(want["total_seconds"])


def test_a_shape_the_file_does_not_hold_is_refused(server: str, compiled_files) -> None:
    _, _, om_path, _ = compiled_files
    inputs = {"input_ids": np.zeros((1, 8), np.int64),  # compiled for seq 16
              "attention_mask": np.ones((1, 8), np.int64)}
    with Client(server, timeout=120) as client, client.session() as sess:
        gid = sess.add_graph(str(om_path))
        with pytest.raises(ce.ClientError) as info:
            sess.run_graph(gid, inputs)
    assert info.value.code.name == "INVALID_ARGUMENT"
    assert "input_ids" in info.value.message and "[1,8]" in info.value.message


def test_a_damaged_offline_model_is_refused(server: str, compiled_files) -> None:
    _, _, om_path, _ = compiled_files
    data = om_path.read_bytes()
    with Client(server, timeout=120) as client, client.session() as sess:
        with pytest.raises(ce.ClientError) as info:
            sess.add_graph(data[: len(data) - 100])
    assert info.value.code.name == "INVALID_ARGUMENT"
    assert f"offline model is truncated: expected {len(data)} bytes" in info.value.message


def test_a_model_needing_cpu_features_the_server_lacks_is_failed_precondition(
        server_process, monkeypatch) -> None:
    from graphengine import _runtime
    from graphengine.engine import offline
    from graphengine.engine.importers import load_model
    from graphengine.engine.pipeline import compile_graph

    if not _runtime.conv_block_available():
        pytest.skip("this CPU has no AVX-512VL: models here never need the block kernels")
    model = zoo.mobilenetv2(width_mult=0.35, image=32, classes=10)
    data = offline.save(compile_graph(load_model(model)))  # needs avx512f, avx512vl
    monkeypatch.setenv("GE_NO_AVX512", "1")  # the server runs as on a CPU without AVX-512
    proc = server_process()
    feeds = zoo.random_inputs(model, seed=2)
    with Client(proc.address, timeout=120) as client, client.session() as session:
        gid = session.import_model(data, name="needs_avx512")
        with pytest.raises(ce.FailedPrecondition, match=r"lacks \['avx512f', 'avx512vl'\]"):
            session.run_graph(gid, feeds)
        # the server goes on: the same graph sent as ONNX compiles for what it has
        out = session.run_graph(session.add_graph(model.SerializeToString()), feeds)
    want = ort_run(model, feeds)
    for name, value in want.items():
        np.testing.assert_allclose(out[name], value, rtol=RTOL, atol=ATOL)
