"""The real server process, driven through the client SDK and raw gRPC."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import grpc
import numpy as np
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

from graphengine.clients import Client
from graphengine.clients import errors as ce
from graphengine.engine.dtypes import DType
from graphengine.engine.report import CompileReport
from tests import zoo

from .ge_models import mlp_onnx, ort_run, simple_expected, simple_graphdef

RTOL, ATOL = 1e-3, 1e-4


def test_health_is_serving(server: str) -> None:
    with grpc.insecure_channel(server) as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        for service in ("", "graphengine.v1.GraphEngine", "inference.GRPCInferenceService"):
            response = stub.Check(health_pb2.HealthCheckRequest(service=service), timeout=10)
            assert response.status == health_pb2.HealthCheckResponse.SERVING, service


def test_reflection_lists_services(server: str) -> None:
    with grpc.insecure_channel(server) as channel:
        stub = reflection_pb2_grpc.ServerReflectionStub(channel)
        request = reflection_pb2.ServerReflectionRequest(list_services="")
        response = next(stub.ServerReflectionInfo(iter([request]), timeout=10))
    names = {s.name for s in response.list_services_response.service}
    assert {"graphengine.v1.GraphEngine", "inference.GRPCInferenceService",
            "grpc.health.v1.Health"} <= names


def test_onnx_mlp_matches_onnxruntime(server: str) -> None:
    model = mlp_onnx(batch=2)
    x = np.random.default_rng(7).standard_normal((2, 16)).astype(np.float32)
    expected = ort_run(model, {"x": x})["y"]
    with Client(server, timeout=60) as client, client.session() as sess:
        gid = sess.add_graph(model.SerializeToString())
        info = sess.graph_info(gid)
        assert [t.name for t in info.inputs] == ["x"]
        assert info.inputs[0].dtype is DType.FLOAT32
        assert tuple(info.inputs[0].shape) == (2, 16)
        assert [t.name for t in info.outputs] == ["y"]
        assert info.num_nodes > 0

        report = sess.compile_graph(gid)
        assert isinstance(report, CompileReport)
        assert report.nodes_before > 0 and report.passes
        assert sess.graph_info(gid).compiled

        out = sess.run_graph(gid, {"x": x})
    assert list(out) == ["y"]
    assert out["y"].shape == (2, 5) and out["y"].dtype == np.float32
    np.testing.assert_allclose(out["y"], expected, rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize("form", ["path", "model_proto"])
def test_add_graph_accepts_path_and_model_proto(server: str, tmp_path, form: str) -> None:
    model = mlp_onnx(batch=1, seed=3)
    if form == "path":
        path = tmp_path / "mlp.onnx"
        path.write_bytes(model.SerializeToString())
        arg: object = str(path)
    else:
        arg = model
    x = np.ones((1, 16), dtype=np.float32)
    with Client(server, timeout=60) as client, client.session() as sess:
        gid = sess.add_graph(arg, name="renamed")
        assert sess.graph_info(gid).name == "renamed"
        sess.compile_graph(gid)
        out = sess.run_graph(gid, {"x": x})
    np.testing.assert_allclose(out["y"], ort_run(model, {"x": x})["y"], rtol=RTOL, atol=ATOL)


def test_symbolic_batch_compiles_for_given_shape(server: str) -> None:
    model = mlp_onnx(batch="batch", seed=5)
    x = np.random.default_rng(1).standard_normal((3, 16)).astype(np.float32)
    with Client(server, timeout=60) as client, client.session() as sess:
        gid = sess.add_graph(model)
        assert sess.graph_info(gid).inputs[0].shape[0] == "batch"
        report = sess.compile_graph(gid, input_shapes={"x": [3, 16]})
        assert report.graph
        out = sess.run_graph(gid, {"x": x})
    assert out["y"].shape == (3, 5)
    np.testing.assert_allclose(out["y"], ort_run(model, {"x": x})["y"], rtol=RTOL, atol=ATOL)


def test_graphdef_flow(server: str) -> None:
    rng = np.random.default_rng(11)
    a = rng.standard_normal((2, 3)).astype(np.float32)
    b = rng.standard_normal((2, 3)).astype(np.float32)
    expected = simple_expected(a, b)
    with Client(server, timeout=60) as client, client.session({"max_streams": 2}) as sess:
        gid = sess.add_graph(simple_graphdef())
        info = sess.graph_info(gid)
        assert info.name == "handmade"
        assert [t.name for t in info.inputs] == ["input_a", "input_b"]
        assert [t.name for t in info.outputs] == ["out", "sum"]
        sess.compile_graph(gid)

        out = sess.run_graph(gid, {"input_a": a, "input_b": b})
        assert list(out) == ["out", "sum"]  # graph order
        for name, want in expected.items():
            np.testing.assert_allclose(out[name], want, rtol=RTOL, atol=ATOL)

        picked = sess.run_graph(gid, {"input_a": a, "input_b": b}, output_names=["sum"])
        assert list(picked) == ["sum"]
        np.testing.assert_allclose(picked["sum"], expected["sum"], rtol=RTOL, atol=ATOL)

        sess.remove_graph(gid)
        with pytest.raises(ce.NotFound):
            sess.graph_info(gid)


def test_sessions_are_isolated(server: str) -> None:
    with Client(server, timeout=60) as client:
        with client.session() as first, client.session() as second:
            gid = first.add_graph(simple_graphdef())
            assert first.id != second.id
            with pytest.raises(ce.NotFound):
                second.graph_info(gid)
        with pytest.raises(ce.NotFound, match=first.id):
            client.attach(first.id).graph_info(gid)


def test_config_file_is_applied(server_process, tmp_path) -> None:
    config = tmp_path / "graphengine.yaml"
    config.write_text("max_sessions: 1\nworker_threads: 2\nlog_level: DEBUG\n")
    proc = server_process("--config", str(config))
    with (Client(proc.address, timeout=30) as client, client.session(),
          pytest.raises(ce.ResourceExhausted, match="1")):
        client.session()
    assert proc.terminate() == 0
    assert "event=serving" in proc.logs() and "workers=2" in proc.logs()


def test_sigterm_drains_and_exits_zero(server_process) -> None:
    proc = server_process()
    with Client(proc.address, timeout=30) as client:
        sess = client.session()
        sess.add_graph(simple_graphdef())  # left open: shutdown must close it
        assert client.health() == "SERVING"
    assert proc.terminate() == 0
    logs = proc.logs()
    for event in ("event=shutdown signal=SIGTERM", "event=drained", "event=stopped"):
        assert event in logs, logs


def test_concurrent_runs_of_a_conv_net(server: str) -> None:
    """A small ResNet from the zoo, run from several threads on one session at once."""
    model = zoo.resnet(depths=(1, 1), width=8, image=32, classes=10, batch=2)
    feeds = [zoo.random_inputs(model, seed=s) for s in range(8)]
    expected = [ort_run(model, f)["output"] for f in feeds]
    with Client(server, timeout=120) as client, client.session() as sess:
        gid = sess.add_graph(model)
        sess.compile_graph(gid)
        with ThreadPoolExecutor(4) as pool:
            outs = list(pool.map(lambda f: sess.run_graph(gid, f)["output"], feeds))
    for got, want in zip(outs, expected):
        assert got.shape == (2, 10)
        # Deeper float32 arithmetic than the MLP: a little more absolute slack.
        np.testing.assert_allclose(got, want, rtol=RTOL, atol=1e-3)


def test_streams_async_gears_and_offline_models(server: str) -> None:
    model = mlp_onnx(batch="batch", seed=8)
    rng = np.random.default_rng(2)
    feeds = {f"r{i}": {"x": rng.standard_normal((i + 1, 16)).astype(np.float32)}
             for i in range(10)}
    with Client(server, timeout=60) as client, client.session({"instances": 2}) as sess:
        gid = sess.add_graph(model, gears=[1, 4])
        sess.compile_graph(gid)
        info = sess.graph_info(gid)
        assert info.gears == (1, 4) and info.compiled_signatures == 2 and info.device_bytes > 0

        results = {r.request_id: r for r in sess.run_graph_stream(gid, feeds.items())}
        assert sorted(results) == sorted(feeds)
        for rid, feed in feeds.items():
            np.testing.assert_allclose(results[rid].outputs["y"], ort_run(model, feed)["y"],
                                       rtol=RTOL, atol=ATOL)
        mixed = list(sess.run_graph_stream(gid, [("ok", feeds["r0"]), ("bad", {"y": 1.0})]))
        errors = {r.request_id: r.error for r in mixed}
        assert errors["ok"] is None and isinstance(errors["bad"], ce.InvalidArgument)

        futures = [sess.run_graph_async(gid, feed) for feed in feeds.values()]
        for future, feed in zip(futures, feeds.values()):
            np.testing.assert_allclose(future.result(60)["y"], ort_run(model, feed)["y"],
                                       rtol=RTOL, atol=ATOL)

        blob = sess.export_model(gid)
        copy = sess.import_model(blob, name="copy")
        assert sess.graph_info(copy).name == "copy"
        out = sess.run_graph(copy, feeds["r5"])
        np.testing.assert_allclose(out["y"], ort_run(model, feeds["r5"])["y"],
                                   rtol=RTOL, atol=ATOL)
        (listed,) = [s for s in client.list_sessions() if s.session_id == sess.id]
        assert set(listed.graph_ids) == {gid, copy} and listed.options.instances == 2
        assert listed.device_bytes > 0


def test_in_process_and_remote_errors_are_the_same_classes(server: str) -> None:
    """graphengine.errors is one hierarchy: an unknown graph is NotFound and a wrong input an
    InvalidArgument (kind InvalidInput, naming the tensor) in process and from a real server;
    the kind and context come over the wire as google.rpc.Status details."""
    import graphengine
    import graphengine.errors as ge

    model = mlp_onnx(batch=2, seed=1)
    wrong = {"x": np.ones((3, 16), np.float32)}
    caught = []
    with graphengine.Session() as local, Client(server, timeout=30) as client, \
            client.session() as remote:
        for sess in (local, remote):
            gid = sess.add_graph(model.SerializeToString())
            with pytest.raises(ge.NotFound) as missing:
                sess.run_graph(gid + 99, wrong)
            with pytest.raises(ge.InvalidArgument) as bad:
                sess.run_graph(gid, wrong)
            caught.append((missing.value, bad.value))
    (l_missing, l_bad), (r_missing, r_bad) = caught
    assert type(r_missing) is ge.NotFound and isinstance(l_missing, ge.NotFound)
    assert l_missing.code is r_missing.code is ge.ErrorCode.NOT_FOUND
    assert l_bad.error_type == r_bad.error_type == "InvalidInput"
    assert l_bad.tensor == r_bad.tensor == "x" and r_bad.stage == l_bad.stage
    assert r_bad.message == str(l_bad)  # the server's text is the in-process error's
