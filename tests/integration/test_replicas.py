"""Sessions across replicas: three real server processes, one Client over all of them.

Each server's replica id is its port, and every replica's address is "127.0.0.1:{replica}"
(what a StatefulSet's "{replica}.<service>.<namespace>.svc:50051" is in Kubernetes), so a
NOT_FOUND for another replica's session carries the owner's real address.
"""

from __future__ import annotations

import socket
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

FORMAT = "127.0.0.1:{replica}"


def _free_ports(n: int) -> list[int]:
    sockets = [socket.socket() for _ in range(n)]
    try:
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


@pytest.fixture(scope="module")
def replicas() -> Iterator[list[str]]:
    started: list[ServerProcess] = []
    try:
        for port in _free_ports(3):
            started.append(ServerProcess("--port", str(port), "--replica-id", str(port),
                                         "--replica-address-format", FORMAT))
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
    ports = {a.rsplit(":", 1)[1] for a in replicas}
    with Client(replicas, timeout=60) as client:
        sessions = [client.session() for _ in range(12)]
        try:
            owners = Counter(owner_of(s.id) for s in sessions)
            assert owners == {p: 4 for p in ports}  # round-robin over the three
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
            assert sorted(client.replicas().values()) == sorted(ports)

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
        assert err.replica == second.rsplit(":", 1)[1] and err.address == second
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
    dead = f"127.0.0.1:{_free_ports(1)[0]}"
    with Client([dead, *replicas[:2]], timeout=60) as client:
        sessions = [client.session() for _ in range(4)]
        try:
            owners = {owner_of(s.id) for s in sessions}
            assert owners == {a.rsplit(":", 1)[1] for a in replicas[:2]}
        finally:
            for s in sessions:
                s.close()
        with Client([dead]) as nobody, pytest.raises(ce.Unavailable):
            nobody.session()
