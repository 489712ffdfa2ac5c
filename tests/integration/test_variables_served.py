"""Session variables over the wire, against a real server process: persistence across runs
and graphs, isolation between sessions, checkpoints streamed to and from the client, a
damaged checkpoint refused, the quota, and concurrent writers from two connections."""

from __future__ import annotations

import threading

import numpy as np
import pytest

import graphengine
from graphengine import ops
from graphengine.clients import Client
from graphengine.errors import InvalidArgument, NotFound, ResourceExhausted
from tests.unit.test_variables import counter, reader


def test_variables_persist_across_remote_runs_and_graphs(server: str) -> None:
    with Client(server, timeout=120) as client, client.session() as s:
        add, read = s.add_graph(counter()), s.add_graph(reader())
        for _ in range(3):
            s.run_graph(add, {"x": np.arange(4, dtype=np.float32)})
        np.testing.assert_array_equal(s.run_graph(read, {})["twice"], 6 * np.arange(4))
        every = s.run_graph(add, {"x": np.ones((4, 4), np.float32)}, iterations=4,
                            return_all=True)["total"]
        np.testing.assert_array_equal(every[:, 0], [1, 2, 3, 4])
        assert [(t.name, t.dtype.value, t.shape) for t in s.list_variables()] == \
            [("acc", "float32", (4,))]
        s.set_variables({"acc": np.full(4, -1, np.float32), "step": np.array(5, np.int64)})
        got = s.get_variables()
        assert got["acc"].tolist() == [-1] * 4 and got["step"].shape == () and got["step"] == 5
        assert s.get_variables(["step"]) == {"step": 5}


def test_another_session_sees_none_of_them(server: str) -> None:
    with Client(server, timeout=120) as client:
        with client.session() as a, client.session() as b:
            a.set_variables({"secret": np.arange(4)})
            with pytest.raises(NotFound, match="variable 'secret' not found"):
                b.get_variables(["secret"])
            assert b.list_variables() == []
            gb = b.add_graph(counter())
            assert b.run_graph(gb, {"x": np.ones(4, np.float32)})["total"].tolist() == [1] * 4
            assert "acc" not in {t.name for t in a.list_variables()}


def test_a_checkpoint_round_trips_through_the_client(server: str, tmp_path) -> None:
    path = tmp_path / "remote.ckpt"
    big = np.random.default_rng(3).standard_normal(600_000).astype(np.float32)  # > 1 chunk
    with Client(server, timeout=120) as client:
        with client.session() as s:
            gid = s.add_graph(counter())
            s.run_graph(gid, {"x": np.arange(4, dtype=np.float32)})
            s.set_variables({"big": big})
            written = s.save_checkpoint(path)
            assert written == path.stat().st_size > big.nbytes
        with client.session() as fresh:
            assert sorted(fresh.restore_checkpoint(path)) == ["acc", "big"]
            np.testing.assert_array_equal(fresh.get_variables(["big"])["big"], big)
            gid = fresh.add_graph(counter())  # the restored state is the graph's
            assert fresh.run_graph(gid, {"x": np.ones(4, np.float32)})["total"].tolist() == \
                [1, 2, 3, 4]
            data = bytearray(path.read_bytes())
            data[len(data) // 2] ^= 0x55
            with pytest.raises(InvalidArgument, match="'big' fails its checksum"):
                fresh.restore_checkpoint(bytes(data))
            with pytest.raises(InvalidArgument, match="not a valid graphengine checkpoint"):
                fresh.restore_checkpoint(b"")
            assert fresh.get_variables(["acc"])["acc"].tolist() == [1, 2, 3, 4]


def test_the_quota_counts_variables_remotely(server: str) -> None:
    with Client(server, timeout=120) as client, \
            client.session({"memory_limit_bytes": 1 << 16}) as s:
        with pytest.raises(ResourceExhausted, match=r"needs 262144 bytes .* 65536 byte limit"):
            s.set_variables({"w": np.zeros(1 << 16, np.float32)})
        s.set_variables({"w": np.zeros(1 << 12, np.float32)})
        assert client.list_sessions()[0].device_bytes >= 1 << 14


def test_two_connections_writing_one_variable_never_tear_it(server: str) -> None:
    runs = 40
    with Client(server, timeout=120) as client, client.session({"instances": 2}) as s:
        gid = s.add_graph(counter("c", 4096, np.int64))

        def write() -> None:
            with Client(server, timeout=120) as other:
                remote = other.attach(s.id)
                for _ in range(runs):
                    remote.run_graph(gid, {"x": np.ones(4096, np.int64)})

        threads = [threading.Thread(target=write) for _ in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        c = s.get_variables(["c"])["c"]
        assert c.min() == c.max() == 2 * runs


def test_variables_past_one_message_travel_as_a_streamed_checkpoint(server_process,
                                                                    tmp_path) -> None:
    config = tmp_path / "small.yaml"
    config.write_text("max_message_bytes: 1048576\n")
    proc = server_process("--config", str(config))
    g = graphengine.Graph("big")
    v = g.variable("big", shape=(300_000,), dtype="float32")  # 1.2 MB, zero-filled
    g.output(ops.Slice(ops.AssignAdd(v, np.float32(1)), np.array([0]), np.array([1])),
             name="first")
    path = tmp_path / "big.ckpt"
    with Client(proc.address, timeout=120, max_message_bytes=1 << 20) as client:
        with client.session() as s:
            assert s.run_graph(s.add_graph(g), {}, iterations=3)["first"].tolist() == [3]
            with pytest.raises(ResourceExhausted, match=r"more than one message carries "
                                                        r"\(1048576\).* save a checkpoint"):
                s.get_variables()
            assert s.save_checkpoint(path) > 1_200_000
        with client.session() as fresh:
            assert fresh.restore_checkpoint(path) == ["big"]
            gid = fresh.add_graph(g)  # the restored value goes on
            assert fresh.run_graph(gid, {})["first"].tolist() == [4]
    assert proc.terminate() == 0
