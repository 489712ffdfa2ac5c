"""Runs a list of steps against a server with the unmodified `tritonclient.grpc` or
`tritonclient.http`, in a process of its own (see triton_probe.py for why), and writes what
each step saw. The two clients' answers differ in form (gRPC's JSON renders 64-bit integers
as strings; HTTP statuses are numbers): the tests compare through int() and both statuses.

    python triton_steps.py grpc|http ADDRESS STEPS.json RESULTS.json

A step is {"do": ..., ...}; its result is {"ok": value} or {"error": {"status", "message"}}:

- infer {model, version?, rows, features}: x = ones * row index; the response's version
  and outputs (lists)
- infer_until_ready {model, version, rows, features, timeout}: infers (no version) until
  `version` of `model` is ready; every answer's version and every error on the way
- metadata / config / statistics {model, version?}; index; ready {model, version?}
- load {model, config?} / unload {model}
- wait_ready / wait_gone {model, version?, timeout}: until (not) ready
- move {src, dst} (at once: a poll never sees half a folder), remove {path}: change the
  repository on disk
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import time

import numpy as np
import tritonclient.grpc
import tritonclient.http
from tritonclient.utils import InferenceServerException

GRPC = True  # set by main
tc = tritonclient.grpc


def _x(step: dict) -> np.ndarray:
    rows, features = step.get("rows", 1), step.get("features", 4)
    return np.repeat(np.arange(rows, dtype=np.float32)[:, None], features, axis=1)


def _infer(client, step: dict, version: str = "") -> dict:
    x = _x(step)
    t = tc.InferInput("x", list(x.shape), "FP32")
    t.set_data_from_numpy(x)
    result = client.infer(step["model"], [t], model_version=version)
    response = result.get_response()
    if GRPC:
        version, names = response.model_version, [o.name for o in response.outputs]
    else:
        version, names = response["model_version"], [o["name"] for o in response["outputs"]]
    return {"version": version, "outputs": {n: result.as_numpy(n).tolist() for n in names}}


def _until(check, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def _run(client, step: dict):
    do, model, version = step["do"], step.get("model", ""), step.get("version", "")
    if do == "infer":
        return _infer(client, step, version)
    if do == "infer_until_ready":
        seen, errors = [], []
        deadline = time.monotonic() + step.get("timeout", 60)
        while not client.is_model_ready(model, version):
            if time.monotonic() > deadline:
                raise TimeoutError(f"{model} version {version} not ready")
            try:
                seen.append(_infer(client, step)["version"])
            except InferenceServerException as exc:
                errors.append(f"{exc.status()}: {exc.message()}")
        return {"versions": seen, "errors": errors}
    if do == "metadata":
        return client.get_model_metadata(model, version, **JSON)
    if do == "config":
        config = client.get_model_config(model, version, **JSON)
        return config["config"] if GRPC else config
    if do == "statistics":
        return client.get_inference_statistics(model, version, **JSON)
    if do == "index":
        index = client.get_model_repository_index(**JSON)
        return index.get("models", []) if GRPC else index
    if do == "ready":
        return client.is_model_ready(model, version)
    if do == "load":
        client.load_model(model, config=step.get("config"))
        return True
    if do == "unload":
        client.unload_model(model)
        return True
    if do in ("wait_ready", "wait_gone"):
        want = do == "wait_ready"
        return _until(lambda: client.is_model_ready(model, version) == want,
                      step.get("timeout", 60))
    if do == "move":
        os.replace(step["src"], step["dst"])
        return True
    if do == "remove":
        shutil.rmtree(step["path"]) if os.path.isdir(step["path"]) else os.unlink(step["path"])
        return True
    raise ValueError(f"unknown step {do!r}")


JSON: dict = {}


def main(protocol: str, address: str, steps_path: str, results_path: str) -> None:
    global GRPC, tc, JSON
    GRPC = protocol == "grpc"
    tc = tritonclient.grpc if GRPC else tritonclient.http
    JSON = {"as_json": True} if GRPC else {}
    with open(steps_path) as f:
        steps = json.load(f)
    client = tc.InferenceServerClient(address)
    results = []
    for step in steps:
        try:
            results.append({"ok": _run(client, step)})
        except InferenceServerException as exc:
            results.append({"error": {"status": exc.status(), "message": exc.message()}})
    client.close()
    with open(results_path, "w") as f:
        json.dump(results, f)


if __name__ == "__main__":
    main(*sys.argv[1:5])
