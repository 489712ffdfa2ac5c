from __future__ import annotations

import dataclasses

import pytest

from graphengine.server.config import ConfigError, ServerConfig, format_address, load_config


def test_defaults_match_the_documented_table() -> None:
    c = load_config(None)
    assert c == ServerConfig()
    assert (c.host, c.port) == ("127.0.0.1", 50051)
    assert c.max_message_bytes == 256 * 1024 * 1024
    assert (c.worker_threads, c.device_threads, c.max_sessions) == (8, 0, 0)
    assert (c.log_level, c.grace_seconds, c.max_tensor_elements) == ("INFO", 10.0, 0)
    # Every field appears in the module docstring's table.
    import graphengine.server.config as module
    for f in dataclasses.fields(ServerConfig):
        assert f"`{f.name}`" in module.__doc__


def test_yaml_file_then_overrides(tmp_path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("host: 0.0.0.0\nport: 6000\nworker_threads: 3\nlog_level: debug\n"
                    "grace_seconds: 2\n")
    c = load_config(path, port=7000, host=None)
    assert c.host == "0.0.0.0"  # None overrides are "not given"
    assert c.port == 7000  # overrides win over the file
    assert c.worker_threads == 3
    assert c.log_level == "DEBUG"
    assert c.grace_seconds == 2.0 and isinstance(c.grace_seconds, float)


def test_empty_file_means_defaults(tmp_path) -> None:
    path = tmp_path / "empty.yaml"
    path.write_text("")
    assert load_config(str(path)) == ServerConfig()


def test_unknown_key_in_file_is_rejected_by_name(tmp_path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("port: 1\nmax_sesions: 3\n")
    with pytest.raises(ConfigError) as info:
        load_config(path)
    message = str(info.value)
    assert "max_sesions" in message and str(path) in message
    assert "max_sessions" in message  # lists the valid keys


def test_unknown_override_is_rejected() -> None:
    with pytest.raises(ConfigError, match="colour"):
        load_config(None, colour="blue")


@pytest.mark.parametrize("text, key", [
    ("port: 70000", "port"),
    ("port: true", "port"),
    ("port: '50051'", "port"),
    ("worker_threads: 0", "worker_threads"),
    ("max_sessions: -1", "max_sessions"),
    ("log_level: LOUD", "log_level"),
    ("grace_seconds: -1", "grace_seconds"),
    ("max_message_bytes: 10", "max_message_bytes"),
    ("host: ''", "host"),
])
def test_bad_values_name_their_key(tmp_path, text: str, key: str) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(text + "\n")
    with pytest.raises(ConfigError, match=key):
        load_config(path)


def test_file_that_is_not_a_mapping(tmp_path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("- port\n- 1\n")
    with pytest.raises(ConfigError, match="mapping"):
        load_config(path)


def test_invalid_yaml_and_missing_file(tmp_path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("port: [1\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_config(bad)
    with pytest.raises(ConfigError, match="cannot read"):
        load_config(tmp_path / "missing.yaml")


def test_config_is_frozen_and_validated_in_code() -> None:
    c = ServerConfig()
    with pytest.raises(dataclasses.FrozenInstanceError):
        c.port = 1  # type: ignore[misc]
    with pytest.raises(ConfigError, match="port"):
        ServerConfig(port=-1)


def test_derived_values() -> None:
    assert ServerConfig(max_message_bytes=4096).tensor_element_limit == 4096
    assert ServerConfig(max_tensor_elements=10).tensor_element_limit == 10
    assert format_address("127.0.0.1", 5) == "127.0.0.1:5"
    assert format_address("::1", 5) == "[::1]:5"
    assert ServerConfig(host="::", port=0).address == "[::]:0"
