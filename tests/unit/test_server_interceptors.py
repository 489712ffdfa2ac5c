"""The interceptor chain in-process: bearer tokens and identities, malformed request bytes,
and the request metrics (latency by stage, errors by code)."""

from __future__ import annotations

import grpc
import numpy as np
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from graphengine.clients import Client
from graphengine.clients import errors as ce
from graphengine.engine.errors import Unauthenticated
from graphengine.kserve.v2 import grpc_service_pb2 as kpb
from graphengine.kserve.v2 import grpc_service_pb2_grpc as kgrpc
from graphengine.server.config import ServerConfig
from graphengine.server.rpc.app import build_server, start_background
from graphengine.server.rpc.auth import TokenAuth
from tests.integration.ge_models import simple_graphdef

TOKENS = {"alice": "alice-secret-1", "bob": "bob-secret-22"}
A = np.ones((2, 3), np.float32)


def test_token_auth_identifies_callers() -> None:
    auth = TokenAuth(TOKENS)
    assert auth.identify([("authorization", "Bearer alice-secret-1")]) == "alice"
    assert auth.identify([("authorization", "bearer   bob-secret-22 ")]) == "bob"
    for metadata, match in [([], "missing"), ([("authorization", "Bearer nope-nope")], "valid"),
                            ([("authorization", "Basic YWxpY2U=")], "Bearer"),
                            ([("authorization", "Bearer")], "Bearer"),
                            ([("authorization", "Bearer x"), ("authorization", "Bearer y")],
                             "more than one")]:
        with pytest.raises(Unauthenticated, match=match):
            auth.identify(metadata)


@pytest.fixture
def parts():
    made = []

    def start(**settings):
        p = build_server(ServerConfig(port=0, **settings))
        p.server.start()
        start_background(p)
        made.append(p)
        return p, f"127.0.0.1:{p.port}"

    yield start
    for p in made:
        p.server.stop(None)
        p.sessions.close_all()


def test_tokens_identities_and_open_health(parts) -> None:
    p, address = parts(auth_tokens=TOKENS)
    with grpc.insecure_channel(address) as channel:  # health needs no token
        status = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(),
                                                            timeout=5).status
        assert status == health_pb2.HealthCheckResponse.SERVING
        with pytest.raises(grpc.RpcError) as info:  # KServe is authenticated too
            kgrpc.GRPCInferenceServiceStub(channel).ServerLive(kpb.ServerLiveRequest(),
                                                               timeout=5)
        assert info.value.code() == grpc.StatusCode.UNAUTHENTICATED
    for token, match in [(None, "missing"), ("wrong-token-123", "not valid")]:
        with Client(address, timeout=10, token=token) as anonymous, \
                pytest.raises(ce.Unauthenticated, match=match):
            anonymous.session()
    with Client(address, timeout=10, token=TOKENS["alice"]) as alice, \
            Client(address, timeout=10, token=TOKENS["bob"]) as bob:
        sess = alice.session()
        gid = sess.add_graph(simple_graphdef())
        assert [s.session_id for s in alice.list_sessions()] == [sess.id]
        assert bob.list_sessions() == []
        theirs = bob.attach(sess.id)
        for call in (lambda: theirs.graph_info(gid), lambda: theirs.run_graph(
                gid, {"input_a": A, "input_b": A}), theirs.close):
            with pytest.raises(ce.NotFound, match=sess.id):
                call()
        np.testing.assert_allclose(sess.run_graph(gid, {"input_a": A, "input_b": A})["sum"],
                                   2 * A)
        sess.close()
    text = p.metrics.render().decode()
    assert 'graphengine_errors_total{api="CreateSession",code="UNAUTHENTICATED"} 2.0' in text
    assert 'graphengine_errors_total{api="GetGraphInfo",code="NOT_FOUND"} 1.0' in text


@pytest.mark.parametrize("method, streaming", [
    ("/graphengine.v1.GraphEngine/RunGraph", False),
    ("/graphengine.v1.GraphEngine/RunGraphStream", True),
    ("/inference.GRPCInferenceService/ModelInfer", False),
])
def test_malformed_request_bytes_are_invalid_argument(parts, method, streaming) -> None:
    _, address = parts()
    garbage = b"\xff\xff\xff\xff\x0f"
    with grpc.insecure_channel(address) as channel:
        if streaming:
            call = channel.stream_stream(method)
            with pytest.raises(grpc.RpcError) as info:
                list(call(iter([garbage]), timeout=10))
        else:
            call = channel.unary_unary(method)
            with pytest.raises(grpc.RpcError) as info:
                call(garbage, timeout=10)
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "malformed request" in info.value.details()
    with Client(address, timeout=10) as client, client.session() as sess:  # still serving
        gid = sess.add_graph(simple_graphdef())
        assert sess.run_graph(gid, {"input_a": A, "input_b": A})["sum"].shape == (2, 3)


def test_request_metrics_by_stage(parts) -> None:
    p, address = parts()
    with Client(address, timeout=10) as client, client.session() as sess:
        gid = sess.add_graph(simple_graphdef())
        for _ in range(3):
            sess.run_graph(gid, {"input_a": A, "input_b": A})
        with pytest.raises(ce.InvalidArgument):
            sess.run_graph(gid, {"input_a": A})
        results = list(sess.run_graph_stream(gid, [(str(i), {"input_a": A, "input_b": A})
                                                   for i in range(4)]))
        assert sorted(r.request_id for r in results) == ["0", "1", "2", "3"]
    text = p.metrics.render().decode()
    for stage in ("queue", "input_copy", "execute", "output_copy", "total"):
        line = ('graphengine_request_duration_seconds_count{api="RunGraph",model="",'
                f'stage="{stage}"}}')
        assert line in text, stage
    assert 'graphengine_requests_total{api="RunGraph",code="OK",model=""} 3.0' in text
    assert 'graphengine_errors_total{api="RunGraph",code="INVALID_ARGUMENT"} 1.0' in text
    assert 'graphengine_requests_total{api="RunGraphStream",code="OK",model=""} 5.0' in text
    assert 'graphengine_compile_duration_seconds_count{stage="build"} 1.0' in text
    assert "graphengine_sessions 0.0" in text and "process_resident_memory_bytes" in text


def test_grouped_gauges_are_read_once_per_scrape() -> None:
    from graphengine.server.metrics import Metrics

    m = Metrics()
    reads = []

    def source() -> dict:
        reads.append(1)
        n = float(len(reads))
        return {"graphengine_model_runs": {("a",): n, ("b",): 2 * n},
                "graphengine_model_device_seconds": {("a",): 0.5 * n}}

    m.gauges(source, ["graphengine_model_runs", "graphengine_model_device_seconds",
                      "graphengine_model_io_bytes"])
    text = m.render().decode()
    assert len(reads) == 1
    assert 'graphengine_model_runs_total{model="b"} 2.0' in text
    assert 'graphengine_model_device_seconds_total{model="a"} 0.5' in text
    text = m.render().decode()  # the next scrape reads again
    assert len(reads) == 2 and 'graphengine_model_runs_total{model="a"} 2.0' in text
    with pytest.raises(KeyError, match="unknown gauge"):
        m.gauges(source, ["graphengine_no_such_family"])
