"""The bad-input corpus: each request fails with the right status and a message naming the
culprit, and the server keeps serving afterwards."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import grpc
import numpy as np
import pytest

from graphengine.clients import Client, RemoteSession
from graphengine.clients import errors as ce
from graphengine.engine import wire
from graphengine.v1 import graph_pb2, session_pb2, session_pb2_grpc

from .ge_models import (
    cycle_graphdef,
    dangling_input_graphdef,
    simple_graphdef,
    unknown_op_graphdef,
)

A = np.ones((2, 3), dtype=np.float32)


@pytest.fixture
def client(server: str) -> Iterator[Client]:
    with Client(server, timeout=60) as c:
        yield c
        # After every bad request: still healthy, and still doing real work.
        assert c.health() == "SERVING"
        with c.session() as sess:
            gid = sess.add_graph(simple_graphdef())
            out = sess.run_graph(gid, {"input_a": A, "input_b": A})
            np.testing.assert_allclose(out["sum"], 2 * A)


@pytest.fixture
def session(client: Client) -> Iterator[RemoteSession]:
    with client.session() as sess:
        yield sess


def _fails(fn: Callable[[], object], kind: type[ce.ClientError]) -> ce.ClientError:
    with pytest.raises(kind) as info:
        fn()
    err = info.value
    assert err.message, "the server's message must not be empty"
    return err


@pytest.mark.parametrize("build, culprits", [
    (cycle_graphdef, ("cycle_add", "cycle_relu")),
    (unknown_op_graphdef, ("mystery_node",)),
    (dangling_input_graphdef, ("ghost_tensor",)),
], ids=["cycle", "unknown_op", "dangling_input"])
def test_malformed_graph_is_invalid_argument(session: RemoteSession, build, culprits) -> None:
    err = _fails(lambda: session.add_graph(build()), ce.InvalidArgument)
    assert err.code is grpc.StatusCode.INVALID_ARGUMENT
    assert any(name in err.message for name in culprits), err.message


def test_cycle_message_says_cycle(session: RemoteSession) -> None:
    err = _fails(lambda: session.add_graph(cycle_graphdef()), ce.InvalidArgument)
    assert "cycle" in err.message.lower()


def test_unknown_op_message_names_the_op(session: RemoteSession) -> None:
    err = _fails(lambda: session.add_graph(unknown_op_graphdef()), ce.InvalidArgument)
    assert "NoSuchOp" in err.message


@pytest.mark.parametrize("blob", [b"this is not a model", b"\x08\x07" + b"\xff" * 64],
                         ids=["text", "garbage"])
def test_bytes_that_are_not_a_model(session: RemoteSession, blob: bytes) -> None:
    err = _fails(lambda: session.add_graph(blob), ce.InvalidArgument)
    assert err.code is grpc.StatusCode.INVALID_ARGUMENT


def test_run_with_missing_input(session: RemoteSession) -> None:
    gid = session.add_graph(simple_graphdef())
    err = _fails(lambda: session.run_graph(gid, {"input_a": A}), ce.InvalidArgument)
    assert "input_b" in err.message


def test_run_with_wrong_shape(session: RemoteSession) -> None:
    gid = session.add_graph(simple_graphdef())
    wrong = np.ones((4, 5), dtype=np.float32)
    err = _fails(lambda: session.run_graph(gid, {"input_a": A, "input_b": wrong}),
                 ce.InvalidArgument)
    assert "input_b" in err.message


def test_run_with_wrong_dtype(session: RemoteSession) -> None:
    gid = session.add_graph(simple_graphdef())
    wrong = np.ones((2, 3), dtype=np.int32)
    err = _fails(lambda: session.run_graph(gid, {"input_a": A, "input_b": wrong}),
                 ce.InvalidArgument)
    assert "input_b" in err.message


def test_run_on_unknown_session(client: Client) -> None:
    err = _fails(lambda: client.attach("no-such-session-42").run_graph(1, {"input_a": A}),
                 ce.NotFound)
    assert "no-such-session-42" in err.message


def test_run_on_unknown_graph(session: RemoteSession) -> None:
    err = _fails(lambda: session.run_graph(12345, {"input_a": A}), ce.NotFound)
    assert "12345" in err.message


def test_compile_unknown_graph(session: RemoteSession) -> None:
    err = _fails(lambda: session.compile_graph(777), ce.NotFound)
    assert "777" in err.message


def test_close_session_twice(client: Client) -> None:
    sess = client.session()
    sess.close()
    err = _fails(lambda: client.attach(sess.id).close(), ce.NotFound)
    assert sess.id in err.message


# ---- requests the SDK would never build: raw stubs ------------------------------------
@pytest.fixture
def stub(server: str, client: Client) -> Iterator[session_pb2_grpc.GraphEngineStub]:
    with grpc.insecure_channel(server) as channel:
        yield session_pb2_grpc.GraphEngineStub(channel)


def _raw_fails(call: Callable[[], object], code: grpc.StatusCode) -> str:
    with pytest.raises(grpc.RpcError) as info:
        call()
    assert info.value.code() == code, info.value.details()
    return info.value.details()


def test_add_graph_without_model(stub, session: RemoteSession) -> None:
    details = _raw_fails(
        lambda: stub.AddGraph(session_pb2.AddGraphRequest(session_id=session.id), timeout=30),
        grpc.StatusCode.INVALID_ARGUMENT)
    assert "onnx_model" in details


def test_tensor_data_shorter_than_shape(stub, session: RemoteSession) -> None:
    gid = session.add_graph(simple_graphdef())
    short = graph_pb2.Tensor(name="input_b", dtype=graph_pb2.DT_FLOAT32, shape=[2, 3],
                             data=b"\0" * 8)
    request = session_pb2.RunGraphRequest(session_id=session.id, graph_id=gid,
                                          inputs=[wire.tensor_to_pb("input_a", A), short])
    details = _raw_fails(lambda: stub.RunGraph(request, timeout=30),
                         grpc.StatusCode.INVALID_ARGUMENT)
    assert "input_b" in details


def test_input_given_twice(stub, session: RemoteSession) -> None:
    gid = session.add_graph(simple_graphdef())
    t = wire.tensor_to_pb("input_a", A)
    request = session_pb2.RunGraphRequest(session_id=session.id, graph_id=gid, inputs=[t, t])
    details = _raw_fails(lambda: stub.RunGraph(request, timeout=30),
                         grpc.StatusCode.INVALID_ARGUMENT)
    assert "input_a" in details


def test_empty_session_id(stub) -> None:
    details = _raw_fails(
        lambda: stub.GetGraphInfo(session_pb2.GetGraphInfoRequest(graph_id=1), timeout=30),
        grpc.StatusCode.INVALID_ARGUMENT)
    assert "session_id" in details
