"""KServe v2 HTTP/REST against the real server process: the unmodified tritonclient.http
in this process, tritonclient.grpc in one of its own (triton_probe.py) on the same models,
raw HTTP for the errors, the metrics port answering /metrics only, TLS and tokens.
"""

from __future__ import annotations

import http.client
import json
import pathlib
import socket
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request

import numpy as np
import onnx
import pytest
import tritonclient.http as th
from onnx import TensorProto, helper, numpy_helper
from tritonclient.utils import InferenceServerException

from tests.conftest import ServerProcess

from .ge_models import mlp_onnx, ort_run
from .test_security import certificate  # noqa: F401 (a fixture)

MLP = mlp_onnx(batch="batch", seed=11)
X = np.random.default_rng(2).standard_normal((3, 16)).astype(np.float32)
PROBE = pathlib.Path(__file__).with_name("triton_probe.py")
MAX_BODY = 1 << 20


def _typed_model() -> onnx.ModelProto:
    """a: int32[n] -> a * 2; b: bool[n] -> not b; h: float16[n] -> h + h."""
    graph = helper.make_graph(
        [helper.make_node("Mul", ["a", "two"], ["a2"]), helper.make_node("Not", ["b"], ["nb"]),
         helper.make_node("Add", ["h", "h"], ["h2"])], "typed",
        [helper.make_tensor_value_info("a", TensorProto.INT32, ["n"]),
         helper.make_tensor_value_info("b", TensorProto.BOOL, ["n"]),
         helper.make_tensor_value_info("h", TensorProto.FLOAT16, ["n"])],
        [helper.make_tensor_value_info("a2", TensorProto.INT32, ["n"]),
         helper.make_tensor_value_info("nb", TensorProto.BOOL, ["n"]),
         helper.make_tensor_value_info("h2", TensorProto.FLOAT16, ["n"])],
        initializer=[numpy_helper.from_array(np.array(2, np.int32), "two")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    root = tmp_path_factory.mktemp("repository")
    for name in ("mlp", "spare"):
        (root / name).mkdir()
        onnx.save(MLP, root / name / "model.onnx")
        (root / name / "config.yaml").write_text(
            "gears: [1, 4]\ndynamic_batching:\n  max_queue_delay_ms: 1\n")
    onnx.save(_typed_model(), root / "typed.onnx")
    (root / "broken.onnx").write_bytes(b"not a model")
    config = root.parent / "server.yaml"
    config.write_text(f"max_message_bytes: {MAX_BODY}\n")
    metrics_port = _free_port()
    proc = ServerProcess("--model-repository", str(root), "--config", str(config),
                         "--metrics-port", str(metrics_port))
    try:
        with th.InferenceServerClient(proc.http_address) as client:
            for name in ("mlp", "spare", "typed"):
                _wait(client, name)
        yield proc, metrics_port
        assert proc.terminate() == 0, proc.logs()
    finally:
        proc.cleanup()


def _wait(client: th.InferenceServerClient, name: str) -> None:
    deadline = time.monotonic() + 120
    while not client.is_model_ready(name):
        assert time.monotonic() < deadline, client.get_model_repository_index()
        time.sleep(0.05)


def _input(name: str, array: np.ndarray, binary: bool = True) -> th.InferInput:
    t = th.InferInput(name, list(array.shape), th.np_to_triton_dtype(array.dtype))
    t.set_data_from_numpy(array, binary_data=binary)
    return t


def _call(address: str, method: str, path: str, body: bytes = b"",
          headers: dict | None = None) -> tuple[int, dict]:
    host, port = address.rsplit(":", 1)
    conn = http.client.HTTPConnection(host, int(port), timeout=60)
    conn.request(method, path, body=body, headers=headers or {})
    response = conn.getresponse()
    data = response.read()
    conn.close()
    return response.status, (json.loads(data) if data else {})


def test_tritonclient_http_serves_the_repository(served) -> None:
    proc, _ = served
    want = ort_run(MLP, {"x": X})["y"]
    with th.InferenceServerClient(proc.http_address, concurrency=2) as client:
        assert client.is_server_live() and client.is_server_ready()
        assert not client.is_model_ready("broken") and not client.is_model_ready("absent")
        meta = client.get_server_metadata()
        assert meta["name"] == "graphengine" and "statistics" in meta["extensions"]
        assert client.get_model_metadata("mlp") == {
            "name": "mlp", "versions": ["1"], "platform": "graphengine_onnx",
            "inputs": [{"name": "x", "datatype": "FP32", "shape": [-1, 16]}],
            "outputs": [{"name": "y", "datatype": "FP32", "shape": [-1, 5]}]}
        assert client.get_model_metadata("mlp", "1")["name"] == "mlp"
        config = client.get_model_config("mlp")
        assert config["max_batch_size"] == 4 and config["input"][0]["dims"] == [16]
        assert config["dynamic_batching"]["preferred_batch_size"] == [1, 4]

        # Binary in and out (tritonclient's default), JSON in and out, mixed, async.
        result = client.infer("mlp", [_input("x", X)], request_id="r-1")
        assert result.get_response()["id"] == "r-1"
        np.testing.assert_allclose(result.as_numpy("y"), want, rtol=1e-4, atol=1e-5)
        result = client.infer("mlp", [_input("x", X, binary=False)],
                              outputs=[th.InferRequestedOutput("y", binary_data=False)])
        assert "data" in result.get_response()["outputs"][0]
        np.testing.assert_allclose(result.as_numpy("y"), want, rtol=1e-4, atol=1e-5)
        pending = [client.async_infer("mlp", [_input("x", X[i:i + 1])]) for i in range(3)]
        for i, request in enumerate(pending):
            np.testing.assert_allclose(request.get_result().as_numpy("y"), want[i:i + 1],
                                       rtol=1e-4, atol=1e-5)

        with pytest.raises(InferenceServerException) as info:
            client.infer("broken", [_input("x", X)])
        assert info.value.status() == "503"
        assert "model 'broken' is UNAVAILABLE: " in info.value.message()
        index = {m["name"]: m["state"] for m in client.get_model_repository_index()}
        assert index == {"broken": "UNAVAILABLE", "mlp": "READY", "spare": "READY",
                         "typed": "READY"}


def test_each_datatype_as_json_and_binary(served) -> None:
    proc, _ = served
    a = np.array([1, -2, 2**30], np.int32)
    b = np.array([True, False, True])
    h = np.array([0.5, -1.25, 3e3], np.float16)
    with th.InferenceServerClient(proc.http_address) as client:
        for binary in (True, False):
            result = client.infer("typed", [_input("a", a, binary), _input("b", b, binary),
                                             _input("h", h, binary)],
                                  outputs=[th.InferRequestedOutput(n, binary_data=binary)
                                           for n in ("a2", "nb", "h2")])
            assert result.as_numpy("a2").dtype == np.int32
            np.testing.assert_array_equal(result.as_numpy("a2"), a * 2)
            np.testing.assert_array_equal(result.as_numpy("nb"), ~b)
            assert result.as_numpy("h2").dtype == np.float16
            np.testing.assert_array_equal(result.as_numpy("h2"), h + h)


def test_statistics_are_shared_with_grpc(served, tmp_path) -> None:
    """Inferences over HTTP and over gRPC land in one set of statistics, read by both."""
    proc, _ = served
    with th.InferenceServerClient(proc.http_address) as client:
        before = client.get_inference_statistics("spare")["model_stats"][0]
        for _ in range(2):
            client.infer("spare", [_input("x", X[:2])])
        np.savez(tmp_path / "in.npz", x=X[:1])
        done = subprocess.run([sys.executable, str(PROBE), "--stats", proc.address, "spare",
                               str(tmp_path / "in.npz"), "3"],
                              capture_output=True, text=True, timeout=120, check=False)
        assert done.returncode == 0, done.stderr
        over_grpc = json.loads(done.stdout)["statistics"]["model_stats"][0]
        after = client.get_inference_statistics("spare")["model_stats"][0]
    rows = 2 * 2 + 3 * 1
    assert after["inference_count"] == before["inference_count"] + rows
    assert after["inference_stats"]["success"]["count"] == (
        before["inference_stats"]["success"]["count"] + 5)
    # gRPC's view (tritonclient's JSON has 64-bit numbers as strings) is the same one.
    assert int(over_grpc["inference_count"]) == after["inference_count"]
    assert int(over_grpc["inference_stats"]["success"]["count"]) == (
        after["inference_stats"]["success"]["count"])
    assert int(over_grpc["inference_stats"]["compute_infer"]["ns"]) == (
        after["inference_stats"]["compute_infer"]["ns"])
    with th.InferenceServerClient(proc.http_address) as client:
        all_models = client.get_inference_statistics()["model_stats"]
        client_stats = client.get_inference_statistics("spare", "1")["model_stats"]
    assert sorted(m["name"] for m in all_models) == ["mlp", "spare", "typed"]
    assert client_stats[0]["inference_count"] == after["inference_count"]


def test_repository_unload_and_load_over_http(served) -> None:
    proc, _ = served
    with th.InferenceServerClient(proc.http_address) as client:
        client.unload_model("spare")
        assert not client.is_model_ready("spare")
        status, body = _call(proc.http_address, "GET", "/v2/models/spare/ready")
        assert status == 503 and body == {"error": "model 'spare' is UNAVAILABLE: unloaded"}
        client.load_model("spare", config=json.dumps({"gears": [1, 2]}))
        assert client.is_model_ready("spare")
        assert client.get_model_config("spare")["max_batch_size"] == 2
        with pytest.raises(InferenceServerException) as info:
            client.load_model("absent")
        assert info.value.status() == "404" and "'absent' is not in the repository" in str(
            info.value)
        with pytest.raises(InferenceServerException) as info:
            client.load_model("spare", files={"file:1/model.onnx": b"x"})
        assert info.value.status() == "400"
        assert "unsupported parameter 'file:1/model.onnx'" in info.value.message()


BINARY_X = json.dumps({"inputs": [{"name": "x", "shape": [1, 16], "datatype": "FP32",
                                   "parameters": {"binary_data_size": 64}}]}).encode()


@pytest.mark.parametrize("method, path, body, headers, status, message", [
    ("POST", "/v2/models/mlp/infer", b'{"inputs": [', {}, 400,
     "the inference request is not valid JSON: Expecting value at line 1 column 13"),
    ("POST", "/v2/models/mlp/infer", json.dumps({"inputs": [
        {"name": "x", "shape": [1, 8], "datatype": "FP32", "data": [0] * 8}]}).encode(), {},
     400, "input 'x': expected shape float32["),
    ("POST", "/v2/models/mlp/infer", json.dumps({"inputs": [
        {"name": "x", "shape": [1, 16], "datatype": "FP32", "data": [0] * 15}]}).encode(), {},
     400, "input 'x': shape [1, 16] needs 16 values, 'data' has 15"),
    ("POST", "/v2/models/nope/infer", json.dumps({"inputs": []}).encode(), {}, 404,
     "model 'nope' is not in the repository"),
    ("POST", "/v2/models/mlp/versions/3/infer", json.dumps({"inputs": []}).encode(), {}, 404,
     "model 'mlp' has no version '3' (it has '1')"),
    ("POST", "/v2/models/mlp/infer", BINARY_X + b"\0" * 64,
     {"Inference-Header-Content-Length": "9999"}, 400,
     f"Inference-Header-Content-Length is 9999 but the body has {len(BINARY_X) + 64} bytes"),
    ("POST", "/v2/models/mlp/infer", BINARY_X + b"\0" * 60,
     {"Inference-Header-Content-Length": str(len(BINARY_X))}, 400,
     "input 'x': binary_data_size 64 but only 60 bytes of binary data are left"),
    ("POST", "/v2/models/mlp/infer", BINARY_X + b"\0" * 68,
     {"Inference-Header-Content-Length": str(len(BINARY_X))}, 400,
     "the body has 68 bytes of binary data after the JSON part, the inputs' "
     "binary_data_size add up to 64"),
    ("POST", "/v2/models/mlp/infer", BINARY_X + b"\0" * 64,
     {"Inference-Header-Content-Length": "1e3"}, 400,
     "Inference-Header-Content-Length '1e3' is not a byte count"),
    ("POST", "/v2/models/mlp/infer", json.dumps({"inputs": [
        {"name": "x", "shape": [1, 16], "datatype": "FP32", "data": [0] * 16}],
        "outputs": [{"name": "y", "parameters": {"classification": 3}}]}).encode(), {}, 400,
     "output 'y': parameter 'classification' is not supported"),
    ("POST", "/v2/models/mlp/infer", json.dumps({"inputs": [
        {"name": "x", "shape": [1, 16], "datatype": "FP32", "data": [0] * 16}],
        "outputs": [{"name": "nope"}]}).encode(), {}, 400, "nope"),
    ("GET", "/v2/models/nope", b"", {}, 404, "model 'nope' is not in the repository"),
    ("GET", "/v2/models/broken/config", b"", {}, 503, "model 'broken' is UNAVAILABLE"),
    ("GET", "/v2/nowhere", b"", {}, 404, "no KServe v2 endpoint at /v2/nowhere"),
    ("GET", "/metrics", b"", {}, 404, "no KServe v2 endpoint at /metrics"),
    ("GET", "/v2/models/mlp/infer", b"", {}, 405,
     "GET is not allowed on /v2/models/mlp/infer; use POST"),
    ("POST", "/v2/repository/index", b'{"ready": "yes"}', {}, 400,
     "'ready' must be a boolean"),
])
def test_errors_have_their_status_and_message(served, method, path, body, headers, status,
                                              message) -> None:
    proc, _ = served
    got_status, got = _call(proc.http_address, method, path, body, headers)
    assert (got_status, message in got.get("error", "")) == (status, True), got


def test_an_oversized_body_is_refused_unread(served) -> None:
    proc, _ = served
    host, port = proc.http_address.rsplit(":", 1)
    conn = http.client.HTTPConnection(host, int(port), timeout=60)
    conn.putrequest("POST", "/v2/models/mlp/infer")
    conn.putheader("Content-Length", str(MAX_BODY + 1))
    conn.endheaders()  # and not one byte of the body
    response = conn.getresponse()
    assert response.status == 413 and response.getheader("Connection") == "close"
    assert json.loads(response.read()) == {"error": f"the request body is {MAX_BODY + 1} "
                                                    f"bytes, over the server's "
                                                    f"max_message_bytes of {MAX_BODY}"}
    conn.close()
    with th.InferenceServerClient(proc.http_address) as client:  # the server is fine
        big = np.zeros((MAX_BODY // 64 + 1, 16), np.float32)
        with pytest.raises(InferenceServerException) as info:
            client.infer("mlp", [_input("x", big)])
        assert info.value.status() == "413"


def test_the_metrics_port_answers_metrics_only(served) -> None:
    proc, metrics_port = served
    with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=10) as r:
        text = r.read().decode()
    assert 'graphengine_requests_total{api="http:ModelInfer",code="OK",model="mlp"}' in text
    for path in ("/", "/v2/health/ready", "/ready"):
        with pytest.raises(urllib.error.HTTPError) as info:
            urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}{path}", timeout=10)
        assert info.value.code == 404
    assert _call(proc.http_address, "GET", "/v2/health/ready")[0] == 200


def test_http_over_tls_with_tokens(server_process, certificate, tmp_path) -> None:  # noqa: F811
    cert, key = certificate
    config = tmp_path / "secure.yaml"
    config.write_text(f"tls_cert_file: {cert}\ntls_key_file: {key}\n"
                      "auth_tokens: {alice: alice-token-0123}\n")
    proc = server_process("--config", str(config))
    host, port = proc.http_address.rsplit(":", 1)
    context = ssl.create_default_context(cafile=str(cert))

    def call(path: str, token: str | None = None) -> tuple[int, bytes]:
        conn = http.client.HTTPSConnection("localhost", int(port), timeout=30, context=context)
        conn.request("GET", path, headers={"Authorization": f"Bearer {token}"} if token else {})
        response = conn.getresponse()
        out = response.status, response.read()
        conn.close()
        return out

    assert call("/v2/health/ready") == (200, b"")  # health: no token
    status, body = call("/v2")
    assert status == 401 and b"missing 'authorization: Bearer <token>'" in body
    status, body = call("/v2", "alice-token-0123")
    assert status == 200 and json.loads(body)["name"] == "graphengine"
    with pytest.raises((http.client.HTTPException, ConnectionError)):  # no plaintext
        plain = http.client.HTTPConnection(host, int(port), timeout=30)
        plain.request("GET", "/v2/health/ready")
        plain.getresponse()
    assert proc.terminate() == 0
