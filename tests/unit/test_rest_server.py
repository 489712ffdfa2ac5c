"""The KServe v2 HTTP front end in process (build_server + serve_http), driven by the
unmodified tritonclient.http and by raw HTTP: keep-alive, compression, admission while
draining, bearer tokens, the connection bound and http.server's own refusals as JSON.

The real server process, with tritonclient.grpc beside it, is tests/integration/
test_kserve_http.py.
"""

from __future__ import annotations

import gzip
import http.client
import json
import pathlib
import socket
import threading
import time
import urllib.request

import numpy as np
import onnx
import pytest
import tritonclient.http as th
from tritonclient.utils import InferenceServerException

from graphengine.server import metrics as metrics_module
from graphengine.server.config import ServerConfig
from graphengine.server.rest import serve_http
from graphengine.server.rest import server as rest_server
from graphengine.server.rpc.app import build_server, start_background
from graphengine.server.rpc.interceptors import DRAINING_MESSAGE
from tests.integration.ge_models import mlp_onnx, ort_run

MODEL = mlp_onnx(batch="batch", seed=3)
X = np.random.default_rng(1).standard_normal((2, 16)).astype(np.float32)
TOKEN = "alice-token-0123"


@pytest.fixture
def start(tmp_path: pathlib.Path):
    (tmp_path / "mlp").mkdir()
    onnx.save(MODEL, tmp_path / "mlp" / "model.onnx")
    made = []

    def start(model_config: str = "gears: [1, 4]\n", **settings):
        (tmp_path / "mlp" / "config.yaml").write_text(model_config)
        settings = {"port": 0, "model_repository": str(tmp_path),
                    "max_message_bytes": 64 * 1024, **settings}
        parts = build_server(ServerConfig(**settings))
        parts.server.start()
        start_background(parts)
        front = serve_http(parts, port=0)
        made.append((parts, front))
        deadline = time.monotonic() + 60
        while parts.repository.index()[0].state.value != "READY":
            assert time.monotonic() < deadline
            time.sleep(0.02)
        return parts, front.port

    yield start
    for parts, front in made:
        front.stop()
        parts.server.stop(None)
        parts.repository.close()
        parts.sessions.close_all()


def _call(port: int, method: str, path: str, body: bytes = b"",
          headers: dict | None = None) -> tuple[int, dict | bytes, http.client.HTTPResponse]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    conn.request(method, path, body=body, headers=headers or {})
    response = conn.getresponse()
    data = response.read()
    conn.close()
    if response.getheader("Content-Type") == "application/json" and data:
        return response.status, json.loads(data), response
    return response.status, data, response


def _exchange(port: int, raw: bytes) -> tuple[int, dict]:
    """Raw bytes in, (status, JSON body) out: for requests http.client will not send."""
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        sock.sendall(raw)
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    return int(head.split()[1]), json.loads(body)


def _infer_body(x: np.ndarray) -> bytes:
    return json.dumps({"inputs": [{"name": "x", "shape": list(x.shape), "datatype": "FP32",
                                   "data": x.ravel().tolist()}]}).encode()


def test_tritonclient_http_in_process(start) -> None:
    parts, port = start()
    want = ort_run(MODEL, {"x": X})["y"]
    with th.InferenceServerClient(f"127.0.0.1:{port}") as client:
        assert client.is_server_live() and client.is_server_ready()
        assert client.is_model_ready("mlp") and not client.is_model_ready("nope")
        x = th.InferInput("x", list(X.shape), "FP32")
        x.set_data_from_numpy(X)
        for request, response in ((None, None), ("gzip", "deflate"), ("deflate", "gzip")):
            result = client.infer("mlp", [x], request_compression_algorithm=request,
                                  response_compression_algorithm=response)
            np.testing.assert_allclose(result.as_numpy("y"), want, rtol=1e-4, atol=1e-5)
        with pytest.raises(InferenceServerException) as info:
            client.infer("mlp", [x], model_version="2")
        assert info.value.status() == "404" and "has no version '2'" in info.value.message()
        wrong = th.InferInput("x", [2, 8], "FP32")
        wrong.set_data_from_numpy(X[:, :8].copy())
        with pytest.raises(InferenceServerException) as info:
            client.infer("mlp", [wrong])
        assert info.value.status() == "400"
        assert "[graph 'mlp'] input 'x': expected shape float32[" in info.value.message()
        stats = client.get_inference_statistics("mlp")["model_stats"][0]
    assert stats["inference_count"] == 6 and stats["inference_stats"]["success"]["count"] == 3
    assert stats["inference_stats"]["fail"]["count"] == 1  # the wrong shape; the version is
    text = parts.metrics.render().decode()  # refused before the model is reached
    assert 'graphengine_requests_total{api="http:ModelInfer",code="OK",model="mlp"} 3.0' in text
    assert ('graphengine_requests_total{api="http:ModelInfer",code="INVALID_ARGUMENT",'
            'model="mlp"} 1.0') in text
    assert ('graphengine_requests_total{api="http:ModelInfer",code="NOT_FOUND",model=""} '
            '1.0') in text


def test_keep_alive_serves_many_requests_on_one_connection(start) -> None:
    _, port = start()
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    conn.connect()
    first = conn.sock
    for path, body in (("/v2/models/mlp/infer", _infer_body(X)), ("/v2/models/nope/infer",
                                                                   _infer_body(X))):
        for _ in range(2):
            conn.request("POST", path, body=body)
            response = conn.getresponse()
            response.read()
            assert response.status in (200, 404) and not response.will_close
    conn.request("GET", "/v2/health/ready")
    assert conn.getresponse().status == 200
    assert conn.sock is first  # an error answer keeps the connection too
    conn.close()


def test_draining_refuses_work_but_answers_health(start) -> None:
    parts, port = start()
    parts.lifecycle.begin_drain()
    status, body, _ = _call(port, "GET", "/v2/health/ready")
    assert status == 503 and body == {"error": "the server is not ready: it is shutting down"}
    assert _call(port, "GET", "/v2/health/live")[0] == 200
    status, body, response = _call(port, "POST", "/v2/models/mlp/infer", _infer_body(X))
    assert status == 503 and body == {"error": DRAINING_MESSAGE}
    assert response.getheader("Connection") == "close"
    assert parts.lifecycle.inflight == 0


def test_work_in_flight_finishes_while_draining(start) -> None:
    # A request waits in the batcher for its delay (1 s): in flight while the drain begins.
    parts, port = start("gears: [1, 4]\ndynamic_batching:\n  max_queue_delay_ms: 1000\n")
    answers: list = []
    first = threading.Thread(target=lambda: answers.append(
        _call(port, "POST", "/v2/models/mlp/infer", _infer_body(X[:1]))))
    first.start()
    deadline = time.monotonic() + 30
    while parts.lifecycle.inflight != 1:
        assert time.monotonic() < deadline and first.is_alive()
        time.sleep(0.005)
    parts.lifecycle.begin_drain()
    assert _call(port, "POST", "/v2/models/mlp/infer", _infer_body(X[:1]))[0] == 503
    first.join(60)
    status, body, response = answers[0]
    assert status == 200 and body["outputs"][0]["shape"] == [1, 5]
    assert response.getheader("Connection") == "close"  # draining: no keep-alive
    # the handler leaves the count once its answer is written: it may trail the client's read
    deadline = time.monotonic() + 30
    while parts.lifecycle.inflight != 0:
        assert time.monotonic() < deadline, parts.lifecycle.inflight
        time.sleep(0.005)


def test_bearer_tokens_guard_all_but_health(start) -> None:
    _, port = start(auth_tokens={"alice": TOKEN})
    assert _call(port, "GET", "/v2/health/ready")[0] == 200
    status, body, response = _call(port, "GET", "/v2")
    assert status == 401 and "missing 'authorization: Bearer <token>'" in body["error"]
    assert response.getheader("WWW-Authenticate") == "Bearer"
    status, body, _ = _call(port, "GET", "/v2", headers={"Authorization": "Bearer nope-nope"})
    assert status == 401 and "not valid" in body["error"]
    status, body, _ = _call(port, "GET", "/v2", headers={"Authorization": f"Bearer {TOKEN}"})
    assert status == 200 and body["name"] == "graphengine"
    with th.InferenceServerClient(f"127.0.0.1:{port}") as client:
        meta = client.get_model_metadata("mlp", headers={"Authorization": f"Bearer {TOKEN}"})
    assert meta["inputs"] == [{"name": "x", "datatype": "FP32", "shape": [-1, 16]}]


def test_connections_beyond_the_bound_get_503(start, monkeypatch) -> None:
    monkeypatch.setattr(rest_server, "MAX_CONNECTIONS", 2)
    _, port = start()
    held = [socket.create_connection(("127.0.0.1", port), timeout=30) for _ in range(2)]
    try:
        status, body = _exchange(port, b"GET /v2/health/live HTTP/1.1\r\nHost: x\r\n\r\n")
        assert status == 503 and "maximum of 2 HTTP connections" in body["error"]
    finally:
        for sock in held:
            sock.close()
    deadline = time.monotonic() + 30  # the held connections' threads see EOF and end
    while _call_status(port) != 200:
        assert time.monotonic() < deadline
        time.sleep(0.02)


def _call_status(port: int) -> int:
    try:
        return _call(port, "GET", "/v2/health/live")[0]
    except (ConnectionError, http.client.HTTPException):
        return 0


def test_transport_errors_are_json_with_their_status(start) -> None:
    _, port = start()  # max_message_bytes: 64 KiB
    cases = [
        (b"GET /v2 HTTP/1.1\r\n" + b"X: y\r\n" * 101 + b"\r\n", 431, "Too many headers"),
        (b"PUT /v2 HTTP/1.1\r\nHost: x\r\n\r\n", 501, "Unsupported method ('PUT')"),
        (b"POST /v2/models/mlp/infer HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n"
         b"Expect: 100-continue\r\n\r\n", 413, "100000 bytes, over the server's "
                                                "max_message_bytes of 65536"),
        (b"POST /v2/models/mlp/infer HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n\r\n",
         413, "the request body is 100000 bytes"),
        (b"POST /v2/models/mlp/infer HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
         b"0\r\n\r\n", 411, "chunked request bodies are not supported"),
        (b"POST /v2/models/mlp/infer HTTP/1.1\r\nHost: x\r\nContent-Length: 1x\r\n\r\n", 400,
         "Content-Length is not one byte count"),
        (b"POST /v2/models/mlp/infer HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\n{}",
         400, "the body ended after 2 of its 10 bytes"),
    ]
    for raw, status, message in cases:
        if "ended after" in message:  # the client stops sending: the server sees EOF
            with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
                sock.sendall(raw)
                sock.shutdown(socket.SHUT_WR)
                data = b"".join(iter(lambda: sock.recv(65536), b""))
            head, _, body = data.partition(b"\r\n\r\n")
            got = (int(head.split()[1]), json.loads(body))
        else:
            got = _exchange(port, raw)
        assert got[0] == status and message in got[1]["error"], (raw, got)

    bomb = gzip.compress(b"\0" * (1 << 20))
    assert len(bomb) < 64 * 1024
    for body, encoding, status, message in (
            (bomb, "gzip", 413, "decompresses to more than the server's max_message_bytes"),
            (b"not gzip", "gzip", 400, "the gzip body does not decompress"),
            (gzip.compress(_infer_body(X))[:-4], "gzip", 400, "the gzip body is truncated"),
            (b"x", "br", 415, "Content-Encoding 'br' is not supported")):
        got = _call(port, "POST", "/v2/models/mlp/infer", body,
                    {"Content-Encoding": encoding})
        assert got[0] == status and message in got[1]["error"], (encoding, got[:2])


def test_the_metrics_port_answers_only_metrics() -> None:
    metrics = metrics_module.Metrics()
    port = metrics.start_http("127.0.0.1", 0)
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
            assert r.status == 200 and b"process_resident_memory_bytes" in r.read()
        for path in ("/", "/v2/health/ready", "/healthz", "/metricsx"):
            with pytest.raises(urllib.error.HTTPError) as info:
                urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10)
            assert info.value.code == 404, path
            assert b"/v2/health/ready" in info.value.read()
    finally:
        metrics.stop_http()
