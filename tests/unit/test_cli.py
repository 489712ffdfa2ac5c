"""The CLI in-process: argument parsing, npz files, exit codes, messages."""

from __future__ import annotations

import pathlib

import numpy as np
import pytest

from graphengine.cli import commands as cli
from graphengine.engine.errors import InvalidInput


def test_parser_has_the_documented_commands() -> None:
    parser = cli.build_parser()
    args = parser.parse_args(["run", "--server", "h:1", "m.onnx", "--input", "i.npz",
                              "--output", "o.npz"])
    assert (args.command, args.server, args.model, args.input, args.output, args.report) == (
        "run", "h:1", "m.onnx", "i.npz", "o.npz", False)
    assert args.handler is cli.cmd_run
    args = parser.parse_args(["serve", "--port", "0", "--host", "::1", "--config", "c.yaml"])
    assert (args.port, args.host, args.config, args.handler) == (0, "::1", "c.yaml",
                                                                 cli.cmd_serve)


@pytest.mark.parametrize("argv", [[], ["run", "m.onnx"], ["run", "--server", "h:1", "m.onnx",
                                                            "--input", "i.npz"],
                                  ["serve", "--port", "x"]])
def test_bad_usage_exits_2(argv: list[str]) -> None:
    with pytest.raises(SystemExit) as info:
        cli.main(argv)
    assert info.value.code == 2


def test_npz_round_trip_with_awkward_names(tmp_path: pathlib.Path) -> None:
    arrays = {"file": np.arange(3), "allow_pickle": np.ones((2, 2), np.float16),
              "out:0": np.array(1.5)}
    path = tmp_path / "out"  # no .npz suffix: must be written exactly here
    cli.save_npz(str(path), arrays)
    assert path.exists()
    back = cli.load_npz(str(path))
    assert list(back) == list(arrays)
    for k, v in arrays.items():
        assert back[k].dtype == v.dtype
        np.testing.assert_array_equal(back[k], v)


def _files(tmp_path: pathlib.Path, **inputs: np.ndarray) -> tuple[str, str, str]:
    model = tmp_path / "m.onnx"
    model.write_bytes(b"model bytes: the fake core does not parse them")
    np.savez(tmp_path / "in.npz", **inputs)
    return str(model), str(tmp_path / "in.npz"), str(tmp_path / "out.npz")


def test_run_against_fake_core(fake_server, tmp_path, capsys) -> None:
    model, inp, out = _files(tmp_path, input=np.arange(4, dtype=np.float32))
    code = cli.main(["run", "--server", fake_server.address, model, "--input", inp,
                     "--output", out, "--report"])
    stdout = capsys.readouterr().out
    assert code == 0
    assert "compile report for graph 'fake_graph'" in stdout
    assert "output: float32[4]" in stdout and "aux: int64[3]" in stdout
    assert "wrote" in stdout
    with np.load(out) as data:
        np.testing.assert_array_equal(data["output"], 2 * np.arange(4, dtype=np.float32))
    (session,) = fake_server.core.sessions.values() if fake_server.core.sessions else (None,)
    assert session is None  # the CLI closed its session


def test_run_prints_the_server_message_and_exits_1(fake_server, tmp_path, capsys) -> None:
    fake_server.core.raise_on["run_graph"] = InvalidInput(
        "missing input 'input' (expected float32[4])", tensor="input")
    model, inp, out = _files(tmp_path, other=np.zeros(1))
    code = cli.main(["run", "--server", fake_server.address, model, "--input", inp,
                     "--output", out])
    err = capsys.readouterr().err
    assert code == 1
    assert "INVALID_ARGUMENT: missing input 'input' (expected float32[4])" in err
    assert not pathlib.Path(out).exists()


def test_run_with_unreadable_local_files_exits_2(tmp_path, capsys) -> None:
    code = cli.main(["run", "--server", "127.0.0.1:1", str(tmp_path / "missing.onnx"),
                     "--input", "x.npz", "--output", "y.npz"])
    assert code == 2 and "cannot read model" in capsys.readouterr().err
    model, _, out = _files(tmp_path)
    (tmp_path / "bad.npz").write_bytes(b"not a zip")
    code = cli.main(["run", "--server", "127.0.0.1:1", model, "--input",
                     str(tmp_path / "bad.npz"), "--output", out])
    assert code == 2 and "cannot read inputs" in capsys.readouterr().err


def test_serve_with_bad_config_exits_2(tmp_path, capsys) -> None:
    config = tmp_path / "c.yaml"
    config.write_text("prot: 1\n")
    assert cli.main(["serve", "--config", str(config)]) == 2
    assert "unknown setting(s) prot" in capsys.readouterr().err


def test_serve_flags_reach_the_config(monkeypatch, tmp_path: pathlib.Path) -> None:
    import graphengine.server.rpc.app as app

    seen = {}
    monkeypatch.setattr(app, "serve", lambda config: seen.setdefault("config", config) and 0)
    config = tmp_path / "c.yaml"
    config.write_text("worker_threads: 3\nmetrics_port: 9000\n")
    code = cli.main(["serve", "--config", str(config), "--port", "0",
                     "--model-repository", str(tmp_path), "--metrics-port", "9100",
                     "--grace-seconds", "2.5", "--log-format", "json", "--http-port", "8123"])
    assert code == 0
    c = seen["config"]
    assert (c.port, c.model_repository, c.metrics_port, c.grace_seconds, c.log_format,
            c.worker_threads, c.http_port) == (0, str(tmp_path), 9100, 2.5, "json", 3, 8123)


def test_serve_with_a_bad_setting_is_usage_error(capsys) -> None:
    assert cli.main(["serve", "--metrics-port", "70000"]) == 2
    assert "metrics_port" in capsys.readouterr().err
