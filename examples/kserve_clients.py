"""KServe v2 inference with the standard Triton clients, over gRPC and HTTP/REST.

    pip install "tritonclient[grpc,http]"
    python examples/kserve_clients.py

Writes a Triton-layout model repository (mlp/config.pbtxt, mlp/1/model.onnx), starts
`graphengine serve --model-repository` on free ports, and asks both ports for the same
inference. Any KServe v2 client works the same way; nothing here imports graphengine.
"""

from __future__ import annotations

import pathlib
import tempfile
import time

import numpy as np
import onnx
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

from local_server import LocalServer
from make_examples import build_mlp, reference

CONFIG = """
name: "mlp"
platform: "onnxruntime_onnx"   # what Triton would run it with; GraphEngine serves it
max_batch_size: 8              # dims below leave out the batch dimension, as in Triton
input [ { name: "input" data_type: TYPE_FP32 dims: [ 64 ] } ]
output [ { name: "output" data_type: TYPE_FP32 dims: [ 10 ] } ]
"""


def infer(module, client, x: np.ndarray) -> np.ndarray:
    """One request with either client: the two modules have the same classes."""
    tensor = module.InferInput("input", list(x.shape), "FP32")
    tensor.set_data_from_numpy(x)
    wanted = [module.InferRequestedOutput("output")]
    return client.infer("mlp", [tensor], outputs=wanted).as_numpy("output")


def main() -> None:
    model = build_mlp(batch="batch")
    x = np.random.default_rng(0).standard_normal((3, 64)).astype(np.float32)
    with tempfile.TemporaryDirectory() as repo:
        version = pathlib.Path(repo, "mlp", "1")
        version.mkdir(parents=True)
        onnx.save(model, version / "model.onnx")
        (version.parent / "config.pbtxt").write_text(CONFIG)

        with LocalServer("--model-repository", repo) as server:
            grpc_client = grpcclient.InferenceServerClient(server.grpc)
            http_client = httpclient.InferenceServerClient(server.http)
            deadline = time.monotonic() + 60
            while not http_client.is_model_ready("mlp"):  # models load in the background
                assert time.monotonic() < deadline, grpc_client.get_model_repository_index()
                time.sleep(0.1)
            meta = grpc_client.get_model_metadata("mlp", as_json=True)
            print("metadata:", meta["inputs"][0]["name"], meta["inputs"][0]["shape"])

            over_grpc = infer(grpcclient, grpc_client, x)
            over_http = infer(httpclient, http_client, x)
            assert np.allclose(over_grpc, reference(model, x), atol=1e-4)
            assert np.array_equal(over_grpc, over_http)
            print("gRPC and HTTP agree:", over_grpc.shape)

            stats = http_client.get_inference_statistics("mlp")["model_stats"][0]
            print("samples inferred (2 requests of 3):", stats["inference_count"])
            grpc_client.close()
            http_client.close()
    print("kserve clients done")


if __name__ == "__main__":
    main()
