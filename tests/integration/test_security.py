"""TLS and bearer tokens on the real server: tokens from the config file and from the
environment, identities that cannot see each other's sessions, health left open."""

from __future__ import annotations

import pathlib
import shutil
import subprocess

import grpc
import numpy as np
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from graphengine.clients import Client
from graphengine.clients import errors as ce

from .ge_models import simple_graphdef

A = np.ones((2, 3), np.float32)


@pytest.fixture(scope="module")
def certificate(tmp_path_factory) -> tuple[pathlib.Path, pathlib.Path]:
    # Debian's openssl is part of every machine image this project runs on; fail loudly if not.
    assert shutil.which("openssl"), "openssl is needed to make the test certificate"
    root = tmp_path_factory.mktemp("tls")
    cert, key = root / "cert.pem", root / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
                    "-subj", "/CN=localhost", "-addext", "subjectAltName=DNS:localhost,"
                    "IP:127.0.0.1", "-keyout", str(key), "-out", str(cert)],
                   check=True, capture_output=True, timeout=60)
    return cert, key


def test_tls_and_tokens(server_process, certificate, tmp_path, monkeypatch) -> None:
    cert, key = certificate
    config = tmp_path / "secure.yaml"
    config.write_text(f"tls_cert_file: {cert}\ntls_key_file: {key}\n"
                      "auth_tokens: {alice: alice-token-0123}\n")
    monkeypatch.setenv("GRAPHENGINE_AUTH_TOKENS", "bob=bob-token-4567")
    proc = server_process("--config", str(config))
    address = proc.address
    root = cert.read_bytes()

    with Client(address, timeout=10) as plaintext, pytest.raises(ce.Unavailable):
        plaintext.session()  # a plaintext client cannot talk to a TLS port
    with grpc.secure_channel(address, grpc.ssl_channel_credentials(root)) as channel:
        status = health_pb2_grpc.HealthStub(channel).Check(
            health_pb2.HealthCheckRequest(), timeout=10).status  # no token needed
    assert status == health_pb2.HealthCheckResponse.SERVING

    with Client(address, timeout=10, root_certificates=root) as nobody, \
            pytest.raises(ce.Unauthenticated, match="missing"):
        nobody.session()
    with Client(address, timeout=10, root_certificates=root, token="bob-token-9999") as wrong, \
            pytest.raises(ce.Unauthenticated, match="not valid"):
        wrong.session()

    with Client(address, timeout=30, root_certificates=str(cert),
                token="alice-token-0123") as alice, \
            Client(address, timeout=30, root_certificates=root, token="bob-token-4567") as bob:
        mine = alice.session()
        gid = mine.add_graph(simple_graphdef())
        out = mine.run_graph(gid, {"input_a": A, "input_b": A})
        np.testing.assert_allclose(out["sum"], 2 * A)
        assert [s.session_id for s in alice.list_sessions()] == [mine.id]
        assert bob.list_sessions() == []
        with pytest.raises(ce.NotFound, match=mine.id):
            bob.attach(mine.id).run_graph(gid, {"input_a": A, "input_b": A})
        with pytest.raises(ce.NotFound):
            bob.attach(mine.id).close()
        mine.close()
    assert proc.terminate() == 0
    logs = proc.logs()
    assert "tls=True" in logs and "identities=2" in logs
    assert "alice-token-0123" not in logs and "bob-token-4567" not in logs
