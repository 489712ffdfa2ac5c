"""Custom operators in a real server process: `graphengine serve --plugin FILE` (a Python
module and a native kernel library), the config key `plugins`, and a bad plugin stopping
the start with a message that names it."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import numpy as np
from onnx import TensorProto, helper

import graphengine
from graphengine import ops
from graphengine.clients import Client
from tests.plugins import PY_PLUGIN, build_plugin


def _model() -> bytes:
    nodes = [helper.make_node("ClipScale", ["x"], ["c"], domain="test.py", scale=4.0),
             helper.make_node("SquarePlus", ["c"], ["y"], domain="test.native")]
    info = [helper.make_tensor_value_info(n, TensorProto.FLOAT, [2, 4]) for n in ("x", "y")]
    graph = helper.make_graph(nodes, "plugged", info[:1], info[1:])
    return helper.make_model(graph, opset_imports=[
        helper.make_opsetid("", 17), helper.make_opsetid("test.py", 1),
        helper.make_opsetid("test.native", 1)]).SerializeToString()


def test_a_server_with_python_and_native_plugins(server_process, tmp_path) -> None:
    lib = build_plugin("square_plus.c", tmp_path / "square_plus.so")
    proc = server_process("--plugin", str(PY_PLUGIN), "--plugin", str(lib))
    xs = np.array([[-2, -0.5, 0.25, 2], [0, 1, -1, 0.5]], np.float32)
    with Client(proc.address, timeout=120) as client, client.session() as session:
        gid = session.add_graph(_model())
        report = session.compile_graph(gid)
        out = session.run_graph(gid, {"x": xs})
        np.testing.assert_allclose(out["y"], (np.clip(xs, -1, 1) * 4) ** 2, rtol=1e-6)
        engines = {p.op_type: p.engine for p in report.placements}
        assert engines == {"test.py.ClipScale": "host", "test.native.SquarePlus": "device"}
        # the builder: the client knows the op from the same module (for shape inference)
        graphengine.load_plugin(PY_PLUGIN)
        g = graphengine.Graph("built")
        x = g.input("x", "float32", (2, 4))
        g.output(ops.ClipScale(x, limit=0.5) + 1.0, name="y")
        out = session.run_graph(session.add_graph(g), {"x": xs})
        np.testing.assert_allclose(out["y"], np.clip(xs, -0.5, 0.5) * 2 + 1)
    assert "plugin_loaded" in proc.logs()
    assert proc.terminate() == 0


def test_the_config_key_plugins_is_relative_to_the_config(server_process, tmp_path) -> None:
    shutil.copy(PY_PLUGIN, tmp_path / "ops.py")
    (tmp_path / "server.yaml").write_text("plugins: [ops.py]\n")
    proc = server_process("--config", str(tmp_path / "server.yaml"))
    node = helper.make_node("ClipScale", ["x"], ["y"], domain="test.py")
    info = [helper.make_tensor_value_info(n, TensorProto.FLOAT, [3]) for n in ("x", "y")]
    model = helper.make_model(helper.make_graph([node], "g", info[:1], info[1:]),
                              opset_imports=[helper.make_opsetid("", 17),
                                             helper.make_opsetid("test.py", 1)])
    with Client(proc.address, timeout=120) as client, client.session() as session:
        gid = session.add_graph(model)
        out = session.run_graph(gid, {"x": np.array([-3, 0.5, 3], np.float32)})
    np.testing.assert_allclose(out["y"], [-2, 1, 2])
    assert proc.terminate() == 0


def test_a_bad_plugin_stops_the_start_naming_it(tmp_path) -> None:
    bad = tmp_path / "broken_ops.py"
    bad.write_text("import graphengine\nraise ValueError('no such kernel table')\n")
    for plugin, message in ((bad, "failed to load (line 2): ValueError: no such kernel table"),
                            (tmp_path / "absent.so", "no such file")):
        done = subprocess.run(
            [sys.executable, "-m", "graphengine.cli", "serve", "--port", "0", "--plugin",
             str(plugin)], capture_output=True, text=True, timeout=120,
            env={**os.environ, "PYTHONUNBUFFERED": "1"})
        text = done.stdout + done.stderr
        assert done.returncode == 1, text
        assert "start_failed" in text and plugin.name in text and message in text, text
