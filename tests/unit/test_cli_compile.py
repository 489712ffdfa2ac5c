"""`graphengine compile` and `graphengine inspect`: in-process through cli.main, and once as
the real command in a subprocess."""

from __future__ import annotations

import json
import pathlib
import re
import subprocess
import sys

import numpy as np
import onnx
import pytest

from graphengine.cli import commands as cli
from graphengine.cli import compile as cli_compile
from graphengine.engine import offline, runtime
from graphengine.engine.importers import load_model
from graphengine.engine.pipeline import compile_graph
from tests import zoo


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> pathlib.Path:
    root = tmp_path_factory.mktemp("models")
    onnx.save(zoo.mlp(sizes=(16, 32, 4), symbolic_batch=True), root / "mlp.onnx")
    onnx.save(zoo.bert(layers=1, hidden=32, heads=2, intermediate=64, vocab=50, seq="seq",
                       batch="batch"), root / "bert.onnx")
    onnx.save(zoo.branchy(towers=3, channels=8, size=16), root / "branchy.onnx")
    return root


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = cli.main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_commands_are_registered() -> None:
    parser = cli.build_parser()
    args = parser.parse_args(["compile", "m.onnx", "-o", "m.om", "--input-shape", "x:1,3",
                              "--input-shape", "a:b:-1,2", "--gears", "batch:1,4,16",
                              "--max-streams", "2", "--json-report", "r.json"])
    assert args.handler is cli_compile.cmd_compile
    assert args.input_shape == [("x", (1, 3)), ("a:b", (-1, 2))]
    assert args.gears == offline.Gear("batch", (1, 4, 16))
    assert (args.output, args.max_streams, args.json_report) == ("m.om", 2, "r.json")
    args = parser.parse_args(["inspect", "m.om", "--json"])
    assert (args.handler, args.model, args.json) == (cli_compile.cmd_inspect, "m.om", True)


@pytest.mark.parametrize("argv", [["compile", "m.onnx"], ["compile", "-o", "x"],
                                  ["compile", "m.onnx", "-o", "x", "--input-shape", "x"],
                                  ["compile", "m.onnx", "-o", "x", "--input-shape", "x:1,a"],
                                  ["compile", "m.onnx", "-o", "x", "--gears", "batch"],
                                  ["compile", "m.onnx", "-o", "x", "--gears", "b:0,1"],
                                  ["compile", "m.onnx", "-o", "x", "--gears", "b:1,1"],
                                  ["compile", "m.onnx", "-o", "x", "--option", "fuse"],
                                  ["inspect"]])
def test_bad_usage_exits_2(argv: list[str]) -> None:
    with pytest.raises(SystemExit) as info:
        cli.main(argv)
    assert info.value.code == 2


def test_compile_gears_then_inspect(models: pathlib.Path, tmp_path: pathlib.Path,
                                    capsys: pytest.CaptureFixture[str]) -> None:
    out_path, report_path = tmp_path / "mlp.om", tmp_path / "report.json"
    code, out, err = run(capsys, "compile", models / "mlp.onnx", "-o", out_path, "--gears",
                         "batch:1,4,16", "--json-report", report_path)
    assert code == 0, err
    for k, batch in enumerate((1, 4, 16), start=1):
        assert f"[{k}/3] compiling 'mlp' for batch={batch} ..." in out
    for stage in ("validate", "prepare", "partition", "optimize", "build"):  # per stage
        assert len(re.findall(rf"^    {stage} +\d+ pass runs, +\d+ changed +[\d.]+ ms$", out,
                              re.MULTILINE)) == 3, stage
    assert "compile report for graph 'mlp'" in out
    assert out.rstrip().endswith("3 compiled signatures")

    stored = offline.read_all(out_path)
    assert stored.gear == offline.Gear("batch", (1, 4, 16))
    assert [m.inputs[0].shape for m in stored.models] == [(1, 16), (4, 16), (16, 16)]
    report = json.loads(report_path.read_text())
    assert report["gear"] == {"dim": "batch", "values": [1, 4, 16]}
    assert [c["input_shapes"] for c in report["compiles"]] == [
        {"input": [b, 16]} for b in (1, 4, 16)]
    assert report["compiles"][2]["report"]["tasks"] == stored.models[2].report.tasks

    # The stored model computes what a fresh compile of the ONNX file computes.
    x = np.random.default_rng(0).standard_normal((4, 16)).astype(np.float32)
    fresh = compile_graph(load_model(str(models / "mlp.onnx")), input_shapes={"input": (4, 16)})
    assert np.array_equal(runtime.load(stored.models[1]).execute({"input": x})["output"],
                          runtime.load(fresh).execute({"input": x})["output"])

    code, out, err = run(capsys, "inspect", out_path)
    assert code == 0, err
    assert out.startswith(f"offline model 'mlp' (GEOM format {offline.FORMAT_VERSION}, ")
    assert "signature: input: float32[batch,16] -> output: float32[batch,4]" in out
    assert "gears: batch = 1, 4, 16" in out
    assert "model 2/3: input: float32[4,16] -> output: float32[4,4]" in out
    assert "program #0 device: " in out and "compile report for graph 'mlp'" in out

    code, out, err = run(capsys, "inspect", out_path, "--json")
    assert code == 0, err
    info = json.loads(out)
    assert info["header"]["file_bytes"] == out_path.stat().st_size
    assert [m["inputs"][0]["shape"] for m in info["models"]] == [[1, 16], [4, 16], [16, 16]]
    assert "report_text" not in info["models"][0] and info["models"][0]["report"]["passes"]


def test_input_shapes_with_a_gear_dim_and_max_streams(models: pathlib.Path,
                                                      tmp_path: pathlib.Path,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    out_path = tmp_path / "bert.om"
    code, out, err = run(capsys, "compile", models / "bert.onnx", "-o", out_path,
                         "--input-shape", "input_ids:-1,8", "--input-shape",
                         "attention_mask:-1,8", "--gears", "batch:1,2")
    assert code == 0, err
    stored = offline.read_all(out_path)
    assert [m.inputs[0].shape for m in stored.models] == [(1, 8), (2, 8)]
    assert "compile report for batch=2: arena" in out

    code, out, err = run(capsys, "compile", models / "branchy.onnx", "-o", tmp_path / "b.om",
                         "--max-streams", "3", "--option", "layouts=false")
    assert code == 0, err
    assert offline.read(tmp_path / "b.om").report.streams == 3


@pytest.mark.parametrize("argv, message", [
    (["mlp.onnx"], "input 'input' has symbolic dim 'batch': give --input-shape input:... or "
                   "--gears batch:..."),
    (["bert.onnx", "--gears", "batch:1"], "symbolic dim 'seq'"),
    (["mlp.onnx", "--gears", "seq:1,2"], "no input has a dimension named 'seq'"),
    (["mlp.onnx", "--input-shape", "nope:1,16"], "names 'nope', which is not an input"),
    (["mlp.onnx", "--input-shape", "input:-1,16"], "-1 marks the gear dim"),
    (["missing.onnx", "--input-shape", "input:1,16"], "does not exist"),
    (["mlp.onnx", "--option", "bogus=1", "--input-shape", "input:1,16"],
     "unknown compile option 'bogus'"),
])
def test_usage_errors_exit_2_with_the_reason(models: pathlib.Path, tmp_path: pathlib.Path,
                                             capsys: pytest.CaptureFixture[str], argv, message
                                             ) -> None:
    code, _, err = run(capsys, "compile", models / argv[0], "-o", tmp_path / "x.om", *argv[1:])
    assert code == 2
    assert err.startswith("graphengine compile: error: ") and message in err
    assert not (tmp_path / "x.om").exists()


def test_compile_failure_exits_1(models: pathlib.Path, tmp_path: pathlib.Path,
                                 capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, "compile", models / "mlp.onnx", "-o", tmp_path / "x.om",
                       "--input-shape", "input:2,7")
    assert code == 1
    assert "graphengine compile: failed: INVALID_ARGUMENT:" in err and "does not fit" in err


def test_compile_refuses_an_offline_model_and_inspect_a_damaged_one(
        models: pathlib.Path, tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "m.om"
    assert run(capsys, "compile", models / "mlp.onnx", "-o", path, "--input-shape",
               "input:1,16")[0] == 0
    code, _, err = run(capsys, "compile", path, "-o", tmp_path / "y.om")
    assert code == 2 and "is an offline model already" in err
    data = path.read_bytes()
    path.write_bytes(data[:-8])
    code, _, err = run(capsys, "inspect", path)
    assert code == 2 and f"truncated: expected {len(data)} bytes, got {len(data) - 8}" in err
    path.write_bytes(data[:-8] + bytes(b ^ 0xFF for b in data[-8:]))
    code, _, err = run(capsys, "inspect", path)
    assert code == 2 and "checksum mismatch: the file is corrupted" in err
    code, _, err = run(capsys, "inspect", tmp_path / "absent.om")
    assert code == 2 and "cannot read" in err


def test_the_real_command(models: pathlib.Path, tmp_path: pathlib.Path) -> None:
    """`python -m graphengine.cli` (cli/__main__.py) runs both commands."""
    def command(*args: object) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "graphengine.cli",
                               *map(str, args)], capture_output=True, text=True, timeout=300,
                              check=False)

    done = command("compile", models / "mlp.onnx", "-o", tmp_path / "m.om", "--gears",
                   "batch:2,8")
    assert done.returncode == 0, done.stderr
    assert "[2/2] compiling 'mlp' for batch=8 ..." in done.stdout
    done = command("inspect", tmp_path / "m.om", "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["gear"] == {"dim": "batch", "values": [2, 8]}
    done = command("compile", models / "mlp.onnx", "-o", tmp_path / "x.om")
    assert done.returncode == 2 and "symbolic dim 'batch'" in done.stderr
