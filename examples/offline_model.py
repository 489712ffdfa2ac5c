"""Offline models (GE's ATC and .om): compile once, inspect the file, serve it without
compiling.

    python examples/offline_model.py

`graphengine compile` runs the compiler's stages ahead (here for batch sizes 1 and 4, the
gears) and writes one file holding the compiled programs, memory plans, weights and the
compile reports; `graphengine inspect` reads it without loading it. A server loads it from
a model repository like any model, and a session takes it like an ONNX file.
"""

from __future__ import annotations

import json
import pathlib
import subprocess
import sys
import tempfile
import time
import urllib.request

import numpy as np
import onnx

from local_server import LocalServer
from make_examples import build_mlp, reference


def graphengine_cli(*args: str) -> str:
    """`graphengine ARGS...` (the same command, run with this Python)."""
    done = subprocess.run([sys.executable, "-m", "graphengine.cli", *args],
                          capture_output=True, text=True, check=True)
    return done.stdout


def http_json(url: str, body: dict | None = None) -> dict:
    """A KServe v2 HTTP/REST call with the standard library: JSON in, JSON out."""
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data,
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=30) as response:
        return json.loads(response.read())


def main() -> None:
    model = build_mlp(batch="batch")
    x = np.random.default_rng(0).standard_normal((3, 64)).astype(np.float32)
    with tempfile.TemporaryDirectory() as tmp:
        repo = pathlib.Path(tmp, "models")
        repo.mkdir()
        onnx.save(model, pathlib.Path(tmp, "mlp.onnx"))
        geom = repo / "mlp.geom"  # in a repository, the model is named after the file

        # 1. Compile ahead: stages 1-4 per gear, into one file.
        out = graphengine_cli("compile", str(pathlib.Path(tmp, "mlp.onnx")), "-o", str(geom),
                              "--gears", "batch:1,4")
        print(out.strip().splitlines()[-1])  # wrote ...: N bytes, 2 compiled signatures

        # 2. What the file holds: provenance, signature, gears, programs, memory plans.
        summary = graphengine_cli("inspect", str(geom)).splitlines()
        print("\n".join(line for line in summary[:7]))

        # 3a. In process: a session loads it without compiling.
        import graphengine

        with graphengine.Session() as sess:
            gid = sess.add_graph(str(geom))
            y = sess.run_graph(gid, {"input": x})["output"]  # batch 3: the gear of 4
            assert np.allclose(y, reference(model, x), atol=1e-4)
            print("in process:", y.shape)

        # 3b. On a server: the repository serves it over KServe v2 (HTTP here, JSON).
        with LocalServer("--model-repository", str(repo)) as server:
            base = f"http://{server.http}/v2/models/mlp"
            deadline = time.monotonic() + 60
            while True:  # models load in the background: 200 when ready
                try:
                    urllib.request.urlopen(f"{base}/ready", timeout=5)
                    break
                except OSError:
                    assert time.monotonic() < deadline, "model not ready"
                    time.sleep(0.1)
            answer = http_json(f"{base}/infer", {"inputs": [
                {"name": "input", "shape": list(x.shape), "datatype": "FP32",
                 "data": x.ravel().tolist()}]})
            output = answer["outputs"][0]
            served = np.array(output["data"], np.float32).reshape(output["shape"])
            assert np.allclose(served, y, atol=1e-6)
            print("served over HTTP:", output["name"], output["shape"], output["datatype"])
    print("offline model done")


if __name__ == "__main__":
    main()
