"""`graphengine run` end to end: a subprocess against the real server, files in and out."""

from __future__ import annotations

import pathlib
import subprocess
import sys

import numpy as np
import onnx
import pytest

from .ge_models import mlp_onnx, ort_run

ROOT = pathlib.Path(__file__).resolve().parents[2]
RTOL, ATOL = 1e-3, 1e-4


def graphengine_command() -> list[str]:
    """The installed console script (what users type), or the module if it is missing."""
    script = pathlib.Path(sys.executable).with_name("graphengine")
    return [str(script)] if script.exists() else [sys.executable, "-m", "graphengine.cli"]


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*graphengine_command(), *args], capture_output=True, text=True,
                          timeout=300, check=False)


def test_run_writes_outputs_matching_onnxruntime(server: str, tmp_path: pathlib.Path) -> None:
    model = mlp_onnx(batch=4, seed=2)
    x = np.random.default_rng(3).standard_normal((4, 16)).astype(np.float32)
    onnx.save(model, tmp_path / "model.onnx")
    np.savez(tmp_path / "in.npz", x=x)
    out_path = tmp_path / "out.npz"

    done = run_cli("run", "--server", server, str(tmp_path / "model.onnx"),
                   "--input", str(tmp_path / "in.npz"), "--output", str(out_path))

    assert done.returncode == 0, done.stderr
    assert "y: float32[4, 5]" in done.stdout
    assert "run" in done.stdout and "ms" in done.stdout
    with np.load(out_path) as data:
        assert data.files == ["y"]
        np.testing.assert_allclose(data["y"], ort_run(model, {"x": x})["y"],
                                   rtol=RTOL, atol=ATOL)


def test_run_with_report(server: str, tmp_path: pathlib.Path) -> None:
    onnx.save(mlp_onnx(batch=1), tmp_path / "m.onnx")
    np.savez(tmp_path / "in.npz", x=np.zeros((1, 16), dtype=np.float32))
    done = run_cli("run", "--server", server, str(tmp_path / "m.onnx"), "--input",
                   str(tmp_path / "in.npz"), "--output", str(tmp_path / "o.npz"), "--report")
    assert done.returncode == 0, done.stderr
    assert "compile report for graph" in done.stdout


def test_example_model_from_make_examples(server: str, tmp_path: pathlib.Path) -> None:
    """The README's two commands: make the examples, then run them."""
    made = subprocess.run([sys.executable, str(ROOT / "examples" / "make_examples.py"),
                           str(tmp_path / "models")], capture_output=True, text=True,
                          timeout=120, check=False)
    assert made.returncode == 0, made.stderr
    model_path, input_path = tmp_path / "models" / "mlp.onnx", tmp_path / "models" / "mlp_input.npz"
    model = onnx.load(model_path)
    assert model.ir_version == 8 and model.opset_import[0].version == 17

    done = run_cli("run", "--server", server, str(model_path), "--input", str(input_path),
                   "--output", str(tmp_path / "out.npz"))
    assert done.returncode == 0, done.stderr
    with np.load(input_path) as inp, np.load(tmp_path / "out.npz") as out:
        assert out["output"].shape == (1, 10)
        want = ort_run(model, {"input": inp["input"]})["output"]
        np.testing.assert_allclose(out["output"], want, rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize("case", ["not_a_model", "missing_input"])
def test_run_reports_server_error(server: str, tmp_path: pathlib.Path, case: str) -> None:
    model_path = tmp_path / "m.onnx"
    if case == "not_a_model":
        model_path.write_bytes(b"definitely not onnx")
        np.savez(tmp_path / "in.npz", x=np.zeros((1, 16), dtype=np.float32))
    else:
        onnx.save(mlp_onnx(batch=1), model_path)
        np.savez(tmp_path / "in.npz", wrong_name=np.zeros((1, 16), dtype=np.float32))
    done = run_cli("run", "--server", server, str(model_path), "--input",
                   str(tmp_path / "in.npz"), "--output", str(tmp_path / "o.npz"))
    assert done.returncode == 1
    assert "INVALID_ARGUMENT" in done.stderr
    if case == "missing_input":
        assert "'x'" in done.stderr or " x " in done.stderr, done.stderr
    assert not (tmp_path / "o.npz").exists()


def test_run_against_no_server(tmp_path: pathlib.Path) -> None:
    onnx.save(mlp_onnx(batch=1), tmp_path / "m.onnx")
    np.savez(tmp_path / "in.npz", x=np.zeros((1, 16), dtype=np.float32))
    done = run_cli("run", "--server", "127.0.0.1:1", "--timeout", "5", str(tmp_path / "m.onnx"),
                   "--input", str(tmp_path / "in.npz"), "--output", str(tmp_path / "o.npz"))
    assert done.returncode == 1
    assert "UNAVAILABLE" in done.stderr


def test_an_input_file_missing_an_input_is_invalid_argument(server: str,
                                                            tmp_path: pathlib.Path) -> None:
    """The CLI compiles for the shapes of the input file: an input it lacks whose symbols
    no other input binds is the caller's error, named (it came back INTERNAL)."""
    from onnx import TensorProto, helper

    graph = helper.make_graph(
        [helper.make_node("Add", ["x", "y"], ["s"]), helper.make_node("Mul", ["s", "z"], ["o"])],
        "two_batches",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["b", 3]),
         helper.make_tensor_value_info("y", TensorProto.FLOAT, ["b", 3]),
         helper.make_tensor_value_info("z", TensorProto.FLOAT, ["n", 3])],
        [helper.make_tensor_value_info("o", TensorProto.FLOAT, None)])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)],
                                ir_version=8), tmp_path / "m.onnx")
    x = np.ones((2, 3), np.float32)
    np.savez(tmp_path / "in.npz", x=x, y=x)  # no z: its "n" is bound by nothing
    done = run_cli("run", "--server", server, str(tmp_path / "m.onnx"), "--input",
                   str(tmp_path / "in.npz"), "--output", str(tmp_path / "o.npz"))
    assert done.returncode == 1, done.stderr
    assert "INVALID_ARGUMENT" in done.stderr and "lacks input 'z'" in done.stderr, done.stderr
    assert "Traceback" not in done.stderr
