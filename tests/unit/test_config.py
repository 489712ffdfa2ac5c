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
    assert (c.max_graphs_per_session, c.max_nodes_per_graph, c.session_memory_limit_bytes) == (
        0, 0, 0)
    assert (c.session_idle_seconds, c.stream_max_inflight, c.metrics_port) == (3600.0, 32, 0)
    assert (c.model_repository, c.repository_load_threads, c.strict_readiness) == ("", 2, False)
    assert (c.log_format, c.tls, c.auth, c.auth_tokens) == ("kv", False, False, {})
    assert c.http_port == 8000  # Triton's HTTP port: KServe HTTP/REST is on unless turned off
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
    ("strict_readiness: 1", "strict_readiness"),
    ("log_format: xml", "log_format"),
    ("metrics_port: 50051", "metrics_port"),
    ("http_port: 50051", "http_port: 50051 is also the port"),
    ("{metrics_port: 9000, http_port: 9000}", "http_port: 9000 is also the metrics_port"),
    ("http_port: -2", "http_port: -2 is outside -1..65535"),
    ("http_port: 65536", "http_port"),
    ("tls_cert_file: c.pem", "tls_key_file"),
    ("tls_client_ca_file: ca.pem", "tls_client_ca_file"),
    ("auth_tokens: {alice: short}", "auth_tokens"),
    ("auth_tokens: {'a b': long-enough-token}", "auth_tokens"),
    ("auth_tokens: [x]", "auth_tokens"),
    ("stream_max_inflight: 0", "stream_max_inflight"),
    ("session_idle_seconds: -1", "session_idle_seconds"),
])
def test_bad_values_name_their_key(tmp_path, text: str, key: str) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(text + "\n")
    with pytest.raises(ConfigError, match=key):
        load_config(path)


def test_http_port_off_or_free(tmp_path) -> None:
    assert load_config(None, http_port=-1).http_port == -1
    assert load_config(None, http_port=0, port=0, metrics_port=0).http_port == 0


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


def test_tokens_from_file_and_environment(tmp_path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("auth_tokens: {alice: alice-token-1}\n")
    env = {"GRAPHENGINE_AUTH_TOKENS": "bob=bob-token-22, carol=carol-token-3"}
    c = load_config(path, environ=env)
    assert c.auth and c.auth_tokens == {"alice": "alice-token-1", "bob": "bob-token-22",
                                        "carol": "carol-token-3"}
    assert "bob-token-22" not in repr(c)  # secrets stay out of logs and tracebacks
    assert load_config(None, environ={"OTHER": "x=yyyyyyyyy"},
                       auth_tokens_env="OTHER").auth_tokens == {"x": "yyyyyyyyy"}
    with pytest.raises(ConfigError, match="GRAPHENGINE_AUTH_TOKENS"):
        load_config(None, environ={"GRAPHENGINE_AUTH_TOKENS": "no-equals-sign"})
    with pytest.raises(ConfigError, match="same token"):
        load_config(None, environ={"GRAPHENGINE_AUTH_TOKENS": "a=same-token,b=same-token"})


def test_new_settings_round_trip(tmp_path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("model_repository: /models\nmetrics_port: 9100\nstrict_readiness: true\n"
                    "tls_cert_file: c.pem\ntls_key_file: k.pem\nlog_format: json\n"
                    "session_idle_seconds: 5\n")
    c = load_config(path, environ={})
    assert (c.model_repository, c.metrics_port, c.strict_readiness, c.tls) == (
        "/models", 9100, True, True)
    assert c.session_idle_seconds == 5.0 and c.log_format == "json"


def test_deploy_configs_load() -> None:
    """The image's config and the session pods' config (deploy/base/); how the rendered
    pods use them: tests/unit/test_deploy_check.py."""
    import pathlib

    base = pathlib.Path(__file__).resolve().parents[2] / "deploy" / "base"
    c = load_config(base / "graphengine.yaml", environ={})
    assert c.host == "0.0.0.0" and c.metrics_port and c.model_repository == "/models"
    assert c.grace_seconds == 25.0
    s = load_config(base / "sessions.yaml", environ={})
    assert s.host == "0.0.0.0" and not s.model_repository and s.max_sessions == 64
