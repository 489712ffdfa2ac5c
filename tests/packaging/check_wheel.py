"""The check of an installed graphengine, as a user has it (tests/packaging/wheel_check.sh
runs it in a fresh venv, from outside the source tree).

    check_wheel.py              after `pip install WHEEL "tritonclient[grpc,http]"`
    check_wheel.py --minimums   after `pip install WHEEL` with protobuf, grpcio and the
                                health and reflection packages at their declared minimums

In one process: tritonclient's KServe stubs imported first, then graphengine's (the other
order runs in a subprocess); a server started in process from a model repository; the
unmodified tritonclient.grpc client calling it (live, ready, metadata, infer compared with
numpy), then tritonclient.http on its KServe HTTP/REST port; server reflection answering
for every service it lists. Also: oneDNN's library is the one beside the runtime, and the
version agrees everywhere. With --minimums there is no tritonclient (its grpc extra needs a
newer grpcio): graphengine's own KServe stubs call the server. One line per check; the
first failure raises.
"""

from __future__ import annotations

import importlib.metadata
import pathlib
import subprocess
import sys
import tempfile
import time

import numpy as np

MINIMUMS = "--minimums" in sys.argv[1:]
if not MINIMUMS:
    import tritonclient.grpc  # first: its `inference.*` messages go to the default pool

import graphengine  # noqa: E402
from graphengine.kserve.v2 import grpc_service_pb2  # noqa: E402
from graphengine.server.config import ServerConfig  # noqa: E402
from graphengine.server.rpc.app import build_server, start_background  # noqa: E402

REVERSE_ORDER = """
import graphengine.kserve.v2.grpc_service_pb2 as ours
import graphengine.server.rpc.app
import tritonclient.grpc.service_pb2 as theirs
request = theirs.ModelInferRequest(model_name="m", id="7")
assert ours.ModelInferRequest.FromString(request.SerializeToString()).id == "7"
print("ok")
"""


def say(what: str) -> None:
    print(f"ok: {what}", flush=True)


def write_repository(root: pathlib.Path) -> np.ndarray:
    """models/mlp/model.onnx: y = relu(x @ w + b) with x [N, 3]; returns w and b stacked."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    w = rng.standard_normal((3, 4)).astype(np.float32)
    b = rng.standard_normal(4).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["xw"]),
         helper.make_node("Add", ["xw", "b"], ["xwb"]),
         helper.make_node("Relu", ["xwb"], ["y"])],
        "mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 4])],
        initializer=[numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")])
    (root / "mlp").mkdir(parents=True)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]),
              root / "mlp" / "model.onnx")
    return np.vstack([w, b])


def check_versions() -> None:
    import google.protobuf
    import grpc

    meta = importlib.metadata.version("graphengine")
    assert meta == graphengine.__version__, (meta, graphengine.__version__)
    out = subprocess.run([sys.executable, "-m", "graphengine.cli", "--version"],
                         capture_output=True, text=True, check=True).stdout.strip()
    assert out == f"graphengine {meta}", out
    others = [f"{name} {importlib.metadata.version(name)}" for name in
              ("grpcio-health-checking", "grpcio-reflection") + (() if MINIMUMS else
                                                                  ("tritonclient",))]
    say(f"{out}; python {sys.version.split()[0]}, protobuf {google.protobuf.__version__}, "
        f"grpcio {grpc.__version__}, {', '.join(others)}")


def check_pools() -> None:
    from google.protobuf import descriptor_pool
    from tritonclient.grpc import service_pb2 as theirs

    default = descriptor_pool.Default().FindMessageTypeByName("inference.ModelInferRequest")
    assert default.file.name != grpc_service_pb2.DESCRIPTOR.name, default.file.name
    request = theirs.ModelInferRequest(model_name="m", id="7")
    assert grpc_service_pb2.ModelInferRequest.FromString(request.SerializeToString()).id == "7"
    reverse = subprocess.run([sys.executable, "-c", REVERSE_ORDER], capture_output=True,
                             text=True, check=False)
    assert reverse.returncode == 0 and reverse.stdout.strip() == "ok", reverse.stderr
    say("tritonclient's and graphengine's KServe stubs in one process, either order")


def check_onednn() -> None:
    from graphengine import _runtime

    beside = pathlib.Path(_runtime.__file__).resolve().parent
    maps = pathlib.Path("/proc/self/maps").read_text().splitlines()
    libs = {line.split()[-1] for line in maps if "libdnnl" in line}
    assert libs and all(pathlib.Path(p).resolve().parent == beside for p in libs), libs
    say(f"oneDNN loaded from beside the runtime: {sorted(libs)}")


def check_reflection(address: str) -> None:
    import grpc
    from google.protobuf import descriptor_pb2
    from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

    with grpc.insecure_channel(address) as channel:
        stub = reflection_pb2_grpc.ServerReflectionStub(channel)
        # Each stream carries one request and is read to its end (a stream left open is
        # cancelled when the channel closes).
        (listed,) = stub.ServerReflectionInfo(iter([
            reflection_pb2.ServerReflectionRequest(list_services="")]))
        names = [s.name for s in listed.list_services_response.service]
        assert "inference.GRPCInferenceService" in names, names
        for name in names:
            (answer,) = stub.ServerReflectionInfo(iter([
                reflection_pb2.ServerReflectionRequest(file_containing_symbol=name)]))
            assert answer.HasField("file_descriptor_response"), (name, answer)
            fd = descriptor_pb2.FileDescriptorProto.FromString(
                answer.file_descriptor_response.file_descriptor_proto[0])
            assert name in {f"{fd.package}.{s.name}" for s in fd.service}, (name, fd.name)
    say(f"reflection resolves {len(names)} services: {', '.join(names)}")


def infer_tritonclient(address: str, x: np.ndarray) -> np.ndarray:
    tc = tritonclient.grpc
    client = tc.InferenceServerClient(address)
    assert client.is_server_live() and client.is_server_ready()
    deadline = time.monotonic() + 120
    while not client.is_model_ready("mlp"):
        assert time.monotonic() < deadline, client.get_model_repository_index(as_json=True)
        time.sleep(0.05)
    meta = client.get_model_metadata("mlp", as_json=True)
    assert [t["name"] for t in meta["inputs"]] == ["x"], meta
    inp = tc.InferInput("x", list(x.shape), "FP32")
    inp.set_data_from_numpy(x)
    return client.infer("mlp", [inp]).as_numpy("y")


def infer_own_stubs(address: str, x: np.ndarray) -> np.ndarray:
    import grpc

    from graphengine.kserve.v2 import grpc_service_pb2_grpc

    pb = grpc_service_pb2
    with grpc.insecure_channel(address) as channel:
        stub = grpc_service_pb2_grpc.GRPCInferenceServiceStub(channel)
        assert stub.ServerLive(pb.ServerLiveRequest()).live
        deadline = time.monotonic() + 120
        while not stub.ModelReady(pb.ModelReadyRequest(name="mlp")).ready:
            assert time.monotonic() < deadline, "model mlp not ready"
            time.sleep(0.05)
        request = pb.ModelInferRequest(model_name="mlp", raw_input_contents=[x.tobytes()])
        request.inputs.add(name="x", datatype="FP32", shape=list(x.shape))
        answer = stub.ModelInfer(request)
        shape = tuple(answer.outputs[0].shape)
        return np.frombuffer(answer.raw_output_contents[0], np.float32).reshape(shape)


def infer_tritonclient_http(address: str, x: np.ndarray) -> np.ndarray:
    import tritonclient.http as th

    client = th.InferenceServerClient(address)
    assert client.is_server_live() and client.is_server_ready() and client.is_model_ready("mlp")
    inp = th.InferInput("x", list(x.shape), "FP32")
    inp.set_data_from_numpy(x)  # binary by default: the Inference-Header-Content-Length form
    return client.infer("mlp", [inp]).as_numpy("y")


def check_server(repository: pathlib.Path, params: np.ndarray) -> None:
    from graphengine.server.rest import serve_http

    parts = build_server(ServerConfig(host="127.0.0.1", port=0, http_port=0,
                                      model_repository=str(repository)))
    start_background(parts)
    parts.server.start()
    address = f"127.0.0.1:{parts.port}"
    try:
        x = np.arange(6, dtype=np.float32).reshape(2, 3) / 5 - 0.5
        want = np.maximum(x @ params[:3] + params[3], 0)
        y = (infer_own_stubs if MINIMUMS else infer_tritonclient)(address, x)
        np.testing.assert_allclose(y, want, rtol=1e-5, atol=1e-6)
        client = "graphengine's KServe stubs" if MINIMUMS else "tritonclient.grpc"
        say(f"in-process server on {address} answered {client}: infer {list(y.shape)} "
            f"matches numpy")
        check_reflection(address)
        if not MINIMUMS:
            parts.http = serve_http(parts)
            http_address = f"127.0.0.1:{parts.http.port}"
            y = infer_tritonclient_http(http_address, x)
            np.testing.assert_allclose(y, want, rtol=1e-5, atol=1e-6)
            say(f"its KServe HTTP/REST port {http_address} answered tritonclient.http: infer "
                f"{list(y.shape)} matches numpy")
    finally:  # as `graphengine serve` stops: nothing left for the interpreter's exit
        if parts.http is not None:
            parts.http.stop()
        parts.server.stop(None).wait()
        parts.stream_executor.shutdown(wait=True)
        parts.repository.close()
        parts.sessions.close_all()


def main() -> int:
    if not MINIMUMS:
        import tritonclient.http  # noqa: F401  (installs and imports beside the gRPC client)
    check_versions()
    if not MINIMUMS:
        check_pools()
    check_onednn()
    with tempfile.TemporaryDirectory(prefix="ge-wheel-check-") as tmp:
        repository = pathlib.Path(tmp) / "models"
        params = write_repository(repository)
        check_server(repository, params)
    print("wheel check: all passed", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
