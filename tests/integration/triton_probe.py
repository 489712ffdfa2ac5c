"""Drives a server with the unmodified `tritonclient.grpc` client, in a process of its own.

    python triton_probe.py ADDRESS MODEL INPUTS.npz OUTPUTS.npz > summary.json
    python triton_probe.py --stats ADDRESS MODEL INPUTS.npz N > stats.json

The second form runs N inferences and prints the model's statistics as gRPC reports them
(the HTTP test compares them with what the HTTP port reports).

The client runs in a process of its own, as a user's would, and the test checks what it
saw. (Both sets of KServe stubs also import into one process: tests/unit/test_packaging.py,
tests/integration/test_tritonclient_in_process.py.)
"""

from __future__ import annotations

import json
import queue
import sys
import time

import numpy as np
import tritonclient.grpc as tc
from tritonclient.utils import InferenceServerException


def _inputs(arrays: dict[str, np.ndarray]) -> list:
    inputs = []
    for name, array in arrays.items():
        t = tc.InferInput(name, list(array.shape), tc.np_to_triton_dtype(array.dtype))
        t.set_data_from_numpy(array)
        inputs.append(t)
    return inputs


def main(address: str, model: str, inputs_path: str, outputs_path: str) -> dict:
    with np.load(inputs_path) as data:
        arrays = {k: data[k] for k in data.files}
    client = tc.InferenceServerClient(address)
    summary: dict = {"live": client.is_server_live(), "ready": client.is_server_ready()}
    deadline = time.monotonic() + 120
    while not client.is_model_ready(model):
        if time.monotonic() > deadline:
            raise TimeoutError(f"model {model} not ready: {client.get_model_repository_index()}")
        time.sleep(0.1)
    summary["model_ready"] = True

    meta = client.get_model_metadata(model, as_json=True)
    summary["metadata"] = meta
    summary["config"] = client.get_model_config(model, as_json=True)["config"]

    outputs = {}
    result = client.infer(model, _inputs(arrays))
    outputs["infer"] = result.as_numpy(meta["outputs"][0]["name"])

    answers: queue.Queue = queue.Queue()

    def collect(result, error) -> None:  # tritonclient passes both by keyword
        answers.put((result, error))

    client.async_infer(model, _inputs(arrays), callback=collect)
    r, error = answers.get(timeout=60)
    assert error is None, error
    outputs["async"] = r.as_numpy(meta["outputs"][0]["name"])

    client.start_stream(callback=collect)
    for i in range(3):
        client.async_stream_infer(model, _inputs(arrays), request_id=f"req-{i}")
    client.async_stream_infer("no-such-model", _inputs(arrays), request_id="bad")
    ids, errors = [], []
    for _ in range(4):
        r, error = answers.get(timeout=60)
        if error is not None:
            errors.append(str(error))
            continue
        ids.append(r.get_response().id)
        outputs[f"stream_{r.get_response().id}"] = r.as_numpy(meta["outputs"][0]["name"])
    client.stop_stream()
    summary["stream_ids"] = sorted(ids)
    summary["stream_errors"] = errors

    try:
        client.infer("no-such-model", _inputs(arrays))
    except InferenceServerException as exc:
        summary["unknown_model_status"] = exc.status()
        summary["unknown_model_message"] = exc.message()

    stats = client.get_inference_statistics(model, as_json=True)
    summary["statistics"] = stats["model_stats"][0]
    summary["index"] = client.get_model_repository_index(as_json=True).get("models", [])
    np.savez(outputs_path, **outputs)
    client.close()
    return summary


def stats(address: str, model: str, inputs_path: str, count: str) -> dict:
    with np.load(inputs_path) as data:
        arrays = {k: data[k] for k in data.files}
    client = tc.InferenceServerClient(address)
    outputs = [client.infer(model, _inputs(arrays)).get_response(as_json=True)["outputs"]
               for _ in range(int(count))]
    summary = {"outputs": [o["name"] for o in outputs[0]] if outputs else [],
               "statistics": client.get_inference_statistics(model, as_json=True)}
    client.close()
    return summary


if __name__ == "__main__":
    if sys.argv[1] == "--stats":
        print(json.dumps(stats(*sys.argv[2:6])))
    else:
        print(json.dumps(main(*sys.argv[1:5])))
