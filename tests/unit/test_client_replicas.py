"""Which addresses a Client dials: names of several A records become one address each."""

from __future__ import annotations

import socket

import pytest

from graphengine.clients.replicas import expand, split_host_port


def _records(*ips: str):
    def resolve(host, port, family, kind):
        assert (family, kind) == (socket.AF_INET, socket.SOCK_STREAM)
        return [(socket.AF_INET, kind, 6, "", (ip, port)) for ip in ips]
    return resolve


def _unresolvable(host, port, family, kind):
    raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")


def test_a_name_of_several_records_is_one_address_per_record() -> None:
    resolve = _records("10.1.0.7", "10.1.0.5", "10.1.0.7", "10.1.0.6")
    assert expand("ge-sessions.ns.svc:50051", resolve) == [
        "10.1.0.5:50051", "10.1.0.6:50051", "10.1.0.7:50051"]


@pytest.mark.parametrize("address, resolve", [
    ("one.example:50051", _records("10.0.0.1")),          # one record: gRPC resolves it
    ("gone.example:50051", _unresolvable),                # errors come at the first call
    ("127.0.0.1:50051", _records("10.0.0.1", "10.0.0.2")),  # literals are not resolved
    ("[::1]:50051", _records("10.0.0.1", "10.0.0.2")),
    ("localhost:50051", _records("127.0.0.1", "127.0.1.1")),
    ("dns:///many.example:50051", _records("10.0.0.1", "10.0.0.2")),
    ("unix:/tmp/ge.sock", _records("10.0.0.1", "10.0.0.2")),
    ("no-port", _records("10.0.0.1", "10.0.0.2")),
])
def test_everything_else_is_dialled_as_given(address: str, resolve) -> None:
    assert expand(address, resolve) == [address]


def test_split_host_port() -> None:
    assert split_host_port("h:1") == ("h", "1")
    assert split_host_port("[fe80::1]:443") == ("fe80::1", "443")
    assert split_host_port("fe80::1") is None and split_host_port("h:") is None
