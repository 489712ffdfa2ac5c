"""Model control settings (config keys, their bounds, the serve flags) and the poller."""

from __future__ import annotations

import pathlib
import threading

import pytest

from graphengine.cli import commands as cli
from graphengine.server.config import ConfigError, load_config
from graphengine.server.core.model_control import Poller


def test_defaults_and_file_keys(tmp_path: pathlib.Path) -> None:
    c = load_config(None)
    assert (c.model_control_mode, c.repository_poll_seconds, c.load_models) == ("none", 15.0,
                                                                               ())
    path = tmp_path / "c.yaml"
    path.write_text("model_control_mode: explicit\nload_models: [a, b]\n"
                    "repository_poll_seconds: 2\n")
    c = load_config(path)
    assert (c.model_control_mode, c.load_models) == ("explicit", ("a", "b"))
    assert c.repository_poll_seconds == 2.0 and isinstance(c.repository_poll_seconds, float)


@pytest.mark.parametrize("text, words", [
    ("model_control_mode: auto", "model_control_mode: 'auto' is not one of none, poll, "
                                 "explicit"),
    ("repository_poll_seconds: 0.01", "repository_poll_seconds: 0.01 is outside 0.1..86400"),
    ("repository_poll_seconds: 100000", "is outside"),
    ("model_control_mode: poll\nload_models: [a]", "load_models: only with model_control_mode "
                                                   "explicit"),
    ("model_control_mode: explicit\nload_models: ['../x']", "'../x' is not a model name"),
    ("model_control_mode: explicit\nload_models: [1]", "load_models"),
    ("model_control_mode: explicit\nload_models: [" + ", ".join(["a"] * 4097) + "]",
     "4097 names exceed the bound of 4096"),
])
def test_bad_settings_name_their_key(tmp_path: pathlib.Path, text: str, words: str) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(text + "\n")
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert words in str(info.value)


def test_serve_flags_reach_the_config(monkeypatch, tmp_path: pathlib.Path) -> None:
    import graphengine.server.rpc.app as app

    seen = {}
    monkeypatch.setattr(app, "serve", lambda config: seen.setdefault("config", config) and 0)
    config = tmp_path / "c.yaml"
    config.write_text("load_models: [a]\nmodel_control_mode: explicit\n")
    assert cli.main(["serve", "--config", str(config), "--model-repository", str(tmp_path),
                     "--load-model", "b", "--load-model", "*",
                     "--repository-poll-secs", "0.5"]) == 0
    c = seen["config"]
    assert (c.model_control_mode, c.load_models, c.repository_poll_seconds) == (
        "explicit", ("a", "b", "*"), 0.5)


def test_serve_refuses_load_model_outside_explicit_mode(capsys) -> None:
    assert cli.main(["serve", "--model-control-mode", "poll", "--load-model", "a"]) == 2
    assert "load_models: only with model_control_mode explicit" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        cli.main(["serve", "--model-control-mode", "sometimes"])


def test_the_poller_outlives_a_failing_poll() -> None:
    calls: list[int] = []
    twice = threading.Event()

    def poll() -> None:
        calls.append(1)
        if len(calls) == 1:
            raise OSError("the repository folder went away for a moment")
        twice.set()

    poller = Poller(poll, 0.01)
    poller.start()
    assert twice.wait(30)
    poller.stop()
    assert len(calls) >= 2 and not poller._thread.is_alive()
