"""Sessions across replicas: three real server processes, one Client over all of them.

The servers listen on 127.0.0.1, .2 and .3, one port; replica k's id is "k" and every
replica's address is "127.0.0.{replica}:PORT" (what a StatefulSet's
"{replica}.<service>.<namespace>.svc:50051" is in Kubernetes), so a NOT_FOUND for another
replica's session carries the owner's real address. A name with three A records is made in
a private mount namespace whose /etc/hosts lists the three addresses.
"""

from __future__ import annotations

import json
import pathlib
import shutil
import socket
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator

import numpy as np
import pytest

import graphengine
from graphengine import ops
from graphengine.api.session_ids import owner_of
from graphengine.clients import Client
from graphengine.clients import errors as ce
from tests.conftest import ServerProcess

HOSTS = ("127.0.0.1", "127.0.0.2", "127.0.0.3")


def _free_port(hosts: tuple[str, ...] = HOSTS) -> int:
    """A port free on every one of `hosts`."""
    while True:
        with socket.socket() as first:
            first.bind((hosts[0], 0))
            port = first.getsockname()[1]
            others = [socket.socket() for _ in hosts[1:]]
            try:
                for s, host in zip(others, hosts[1:]):
                    s.bind((host, port))
                return port
            except OSError:
                continue
            finally:
                for s in others:
                    s.close()


def _replica(address: str) -> str:
    """The replica id of a fixture server: its IP's last number."""
    return address.rsplit(":", 1)[0].rsplit(".", 1)[1]


@pytest.fixture(scope="module")
def replicas() -> Iterator[list[str]]:
    started: list[ServerProcess] = []
    port = _free_port()
    try:
        for host in HOSTS:
            started.append(ServerProcess(
                "--host", host, "--port", str(port), "--replica-id", host.rsplit(".", 1)[1],
                "--replica-address-format", f"127.0.0.{{replica}}:{port}"))
        yield [p.address for p in started]
        for p in started:
            assert p.terminate() == 0, p.logs()
    finally:
        for p in started:
            p.cleanup()


def _graph(scale: float) -> graphengine.Graph:
    """y = relu(x) * scale: each session's graph answers differently."""
    g = graphengine.Graph(f"scaled_{scale:g}")
    x = g.input("x", "float32", ("batch", 4))
    g.output(ops.Mul(ops.Relu(x), np.full((1, 4), scale, np.float32)), name="y")
    return g


X = np.array([[-1.0, 0.5, 2.0, -3.0], [4.0, -0.5, 0.0, 1.0]], np.float32)


def _expected(scale: float) -> np.ndarray:
    return np.maximum(X, 0) * np.float32(scale)


def test_one_client_serves_sessions_on_three_replicas(replicas: list[str]) -> None:
    ids = {_replica(a) for a in replicas}
    with Client(replicas, timeout=60) as client:
        sessions = [client.session() for _ in range(12)]
        try:
            owners = Counter(owner_of(s.id) for s in sessions)
            assert owners == {r: 4 for r in ids}  # round-robin over the three
            graphs = {}
            for i, sess in enumerate(sessions):
                graphs[sess.id] = sess.add_graph(_graph(i + 1))
                sess.compile_graph(graphs[sess.id], {"x": [2, 4]})
            # Every call of every session reaches its owner: unary, async and stream.
            for i, sess in enumerate(sessions):
                gid = graphs[sess.id]
                np.testing.assert_allclose(sess.run_graph(gid, {"x": X})["y"], _expected(i + 1))
                future = sess.run_graph_async(gid, {"x": X})
                np.testing.assert_allclose(future.result(timeout=60)["y"], _expected(i + 1))
                streamed = list(sess.run_graph_stream(gid, [("a", {"x": X}), ("b", {"x": X})]))
                assert sorted(r.request_id for r in streamed) == ["a", "b"]
                assert all(r.error is None for r in streamed)
                assert sess.graph_info(gid).name == f"scaled_{i + 1}"
            assert sorted(s.session_id for s in client.list_sessions()) == sorted(
                s.id for s in sessions)
            assert client.replicas() == {a: _replica(a) for a in replicas}

            # Another client, addresses in another order, knows none of these sessions: it
            # asks each address which replica it is and sends each session to its owner.
            with Client(list(reversed(replicas)), timeout=60) as other:
                for i, sess in enumerate(sessions):
                    out = other.attach(sess.id).run_graph(graphs[sess.id], {"x": X})
                    np.testing.assert_allclose(out["y"], _expected(i + 1))
        finally:
            for sess in sessions:
                sess.close()
        assert client.list_sessions() == []


def test_the_wrong_replica_answers_not_found_naming_the_owner(replicas: list[str]) -> None:
    first, second = replicas[0], replicas[1]
    with Client(second, timeout=60) as owner_side, owner_side.session() as sess:
        gid = sess.add_graph(_graph(2))
        with Client(first, timeout=60) as wrong:  # one address: no routing, a plain client
            with pytest.raises(ce.NotFound) as caught:
                wrong.attach(sess.id).run_graph(gid, {"x": X})
        err = caught.value
        assert err.error_type == "SessionElsewhere"
        assert err.replica == _replica(second) and err.address == second
        assert f"held by replica '{err.replica}' at {second}" in err.message
        # The owner still has it, untouched.
        np.testing.assert_allclose(sess.run_graph(gid, {"x": X})["y"], _expected(2))


def test_a_client_follows_the_owners_advertised_address(replicas: list[str]) -> None:
    """Given only the first replica's address (as a list: a routing client), a session of
    the third is found at the address the first one's NOT_FOUND names."""
    with Client(replicas[2], timeout=60) as owner_side, owner_side.session() as sess:
        gid = sess.add_graph(_graph(3))
        with Client([replicas[0]], timeout=60) as client:
            handle = client.attach(sess.id)
            np.testing.assert_allclose(handle.run_graph(gid, {"x": X})["y"], _expected(3))
            assert repr(handle).endswith(f"on {replicas[2]})")


def test_sessions_are_opened_on_the_replicas_that_answer(replicas: list[str]) -> None:
    """A replica that is gone (nothing listens at its address) is passed over."""
    dead = f"127.0.0.1:{_free_port(('127.0.0.1',))}"
    with Client([dead, *replicas[:2]], timeout=60) as client:
        sessions = [client.session() for _ in range(4)]
        try:
            owners = {owner_of(s.id) for s in sessions}
            assert owners == {_replica(a) for a in replicas[:2]}
        finally:
            for s in sessions:
                s.close()
        with Client([dead]) as nobody, pytest.raises(ce.Unavailable):
            nobody.session()


# Run in a mount namespace where "ge-replicas" has three A records (the three servers).
_DNS_CLIENT = """
import json, sys
import numpy as np
from graphengine.clients import Client
from tests.integration.test_replicas import X, _expected, _graph
from graphengine.api.session_ids import owner_of

with Client(sys.argv[1], timeout=60) as client:
    sessions = [client.session() for _ in range(6)]
    for i, sess in enumerate(sessions):
        gid = sess.add_graph(_graph(i + 1))
        np.testing.assert_allclose(sess.run_graph(gid, {"x": X})["y"], _expected(i + 1))
    listed = sorted(s.session_id for s in client.list_sessions())
    result = {"owners": [owner_of(s.id) for s in sessions], "replicas": client.replicas(),
              "listed": listed == sorted(s.id for s in sessions)}
    for sess in sessions:
        sess.close()
print(json.dumps(result))
"""


def test_a_name_with_several_records_is_every_replica(replicas: list[str], tmp_path) -> None:
    if not shutil.which("unshare") or subprocess.run(
            ["unshare", "--mount", "true"], capture_output=True).returncode != 0:
        pytest.skip("giving a name three A records needs a private /etc/hosts: unshare "
                    "--mount (root) is not available here")
    hosts = tmp_path / "hosts"
    hosts.write_text("".join(f"{h} ge-replicas\n" for h in HOSTS))
    port = replicas[0].rsplit(":", 1)[1]
    done = subprocess.run(
        ["unshare", "--mount", "sh", "-c", 'mount --bind "$1" /etc/hosts && shift && exec "$@"',
         "sh", str(hosts), sys.executable, "-c", _DNS_CLIENT, f"ge-replicas:{port}"],
        capture_output=True, text=True, timeout=120, cwd=pathlib.Path(__file__).parents[2])
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout.splitlines()[-1])
    assert Counter(result["owners"]) == {"1": 2, "2": 2, "3": 2}
    assert result["replicas"] == {a: _replica(a) for a in replicas} and result["listed"]
