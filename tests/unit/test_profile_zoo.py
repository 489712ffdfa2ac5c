"""benchmarks/profile_zoo.py: ours and ONNX Runtime profiled on a zoo entry, each in its own
process, reported by op type (OpenVINO is a bench extra, not installed for the tests)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

ROOT = Path(__file__).resolve().parents[2]


def test_profile_zoo_reports_each_side_by_op_type(tmp_path):
    rng = np.random.default_rng(0)
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["r"]),
             helper.make_node("GlobalAveragePool", ["r"], ["y"])]
    graph = helper.make_graph(
        nodes, "tiny", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 3, 16, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(rng.standard_normal((8, 3, 3, 3)).astype(np.float32), "w")])
    folder = tmp_path / "zoo" / "tiny"
    folder.mkdir(parents=True)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)],
                                ir_version=8), folder / "model.onnx")
    (folder / "meta.json").write_text(json.dumps({"batched": True}))
    np.savez(folder / "ref_b1.npz",
             **{"input:x": rng.standard_normal((1, 3, 16, 16)).astype(np.float32)})
    env = dict(os.environ, GE_MODEL_CACHE=str(tmp_path))
    out = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "profile_zoo.py"), "tiny",
                          "--batch", "2", "--seconds", "0.2", "--sides", "ours,ort",
                          "--tasks", "2"],
                         capture_output=True, text=True, env=env, timeout=300)
    assert out.returncode == 0, out.stderr
    text = out.stdout
    assert "ours: p50" in text and "ort: p50" in text, text
    ours = text.split("ort: p50")[0]
    assert "Conv" in ours and "GlobalAveragePool" in ours, text  # op-type rows of our tasks
    assert "Conv" in text.split("ort: p50")[1], text


def test_profile_zoo_refuses_absurd_options():
    out = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "profile_zoo.py"), "x",
                          "--seconds", "1e9"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 2 and "--seconds" in out.stderr
