"""Error mapping: the table, the interceptor on a bare server, and the servicer end to end
over a fake core."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from concurrent import futures

import grpc
import numpy as np
import pytest

from graphengine.engine import errors as ge
from graphengine.engine import wire
from graphengine.server.rpc.errors import STATUS_BY_CODE, ErrorInterceptor, status_for
from graphengine.v1 import session_pb2 as se
from graphengine.v1 import session_pb2_grpc


def test_every_error_code_maps_to_the_same_named_status() -> None:
    assert set(STATUS_BY_CODE) == set(ge.ErrorCode)
    for code, status in STATUS_BY_CODE.items():
        assert status.name == code.name


@pytest.mark.parametrize("exc, status", [
    (ge.InvalidGraph("x"), grpc.StatusCode.INVALID_ARGUMENT),
    (ge.ShapeError("x"), grpc.StatusCode.INVALID_ARGUMENT),
    (ge.InvalidModel("x"), grpc.StatusCode.INVALID_ARGUMENT),
    (ge.InvalidInput("x"), grpc.StatusCode.INVALID_ARGUMENT),
    (ge.NotFound("x"), grpc.StatusCode.NOT_FOUND),
    (ge.FailedPrecondition("x"), grpc.StatusCode.FAILED_PRECONDITION),
    (ge.ResourceExhausted("x"), grpc.StatusCode.RESOURCE_EXHAUSTED),
    (ge.Unavailable("x"), grpc.StatusCode.UNAVAILABLE),
    (ge.Unauthenticated("x"), grpc.StatusCode.UNAUTHENTICATED),
    (ge.ExecutionError("x"), grpc.StatusCode.INTERNAL),
    (NotImplementedError("x"), grpc.StatusCode.UNIMPLEMENTED),
    (MemoryError(), grpc.StatusCode.RESOURCE_EXHAUSTED),
    (RuntimeError("x"), None),
    (KeyError("x"), None),
])
def test_status_for(exc: BaseException, status: grpc.StatusCode | None) -> None:
    assert status_for(exc) == status


# ---- the interceptor on a bare server -------------------------------------------------
@pytest.fixture
def raising_server() -> Iterator[Callable[[BaseException | str], grpc.RpcError]]:
    """A server whose /test.Svc/Unary and /test.Svc/Stream raise what the client names."""
    to_raise: dict[str, BaseException | str] = {}

    def unary(request: bytes, context: grpc.ServicerContext) -> bytes:
        what = to_raise["exc"]
        if what == "abort":
            context.abort(grpc.StatusCode.PERMISSION_DENIED, "handler aborted itself")
        raise what  # type: ignore[misc]

    def stream(request: bytes, context: grpc.ServicerContext) -> Iterator[bytes]:
        yield b"first"
        raise to_raise["exc"]  # type: ignore[misc]

    server = grpc.server(futures.ThreadPoolExecutor(2), interceptors=[ErrorInterceptor()])
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler("test.Svc", {
        "Unary": grpc.unary_unary_rpc_method_handler(unary),
        "Stream": grpc.unary_stream_rpc_method_handler(stream),
    }),))
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    channel = grpc.insecure_channel(f"127.0.0.1:{port}")

    def call(exc: BaseException | str, method: str = "Unary") -> grpc.RpcError:
        to_raise["exc"] = exc
        with pytest.raises(grpc.RpcError) as info:
            if method == "Unary":
                channel.unary_unary("/test.Svc/Unary")(b"", timeout=10)
            else:
                list(channel.unary_stream("/test.Svc/Stream")(b"", timeout=10))
        return info.value

    yield call
    channel.close()
    server.stop(None)


def test_domain_error_becomes_its_status_with_message_and_context(raising_server) -> None:
    exc = ge.InvalidInput("input 'x' has shape [4] but the graph expects [2]", tensor="x",
                          graph="g", stage="execute")
    err = raising_server(exc)
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert err.details() == str(exc)
    # The kind and context as the standard google.rpc.Status details, decoded here with the
    # googleapis protos alone (what a client in another language does).
    from google.rpc import error_details_pb2, status_pb2

    status = status_pb2.Status.FromString(dict(err.trailing_metadata())["grpc-status-details-bin"])
    assert (status.code, status.message) == (grpc.StatusCode.INVALID_ARGUMENT.value[0], str(exc))
    info = error_details_pb2.ErrorInfo()
    assert status.details[0].Unpack(info)
    assert (info.reason, info.domain) == ("InvalidInput", "graphengine")
    assert dict(info.metadata) == {"tensor": "x", "graph": "g", "stage": "execute"}


def test_unknown_error_is_internal_short_and_logged(raising_server, caplog) -> None:
    with caplog.at_level(logging.ERROR, logger="graphengine.server.rpc"):
        err = raising_server(RuntimeError("secret internal detail"))
    assert err.code() == grpc.StatusCode.INTERNAL
    assert "RuntimeError" in err.details() and "Unary" in err.details()
    assert "secret internal detail" not in err.details()
    logged = [r for r in caplog.records if "rpc_internal_error" in r.getMessage()]
    assert logged and "method=/test.Svc/Unary" in logged[0].getMessage()
    assert logged[0].exc_info is not None  # the traceback is in the log
    ref = err.details().rsplit("ref ", 1)[1].rstrip(")")
    assert f"ref={ref}" in logged[0].getMessage()


def test_handler_abort_passes_through(raising_server) -> None:
    err = raising_server("abort")
    assert err.code() == grpc.StatusCode.PERMISSION_DENIED
    assert err.details() == "handler aborted itself"


def test_builtin_mapping_and_streaming_handlers(raising_server) -> None:
    assert raising_server(NotImplementedError("no")).code() == grpc.StatusCode.UNIMPLEMENTED
    err = raising_server(ge.NotFound("graph 9 not found"), method="Stream")
    assert err.code() == grpc.StatusCode.NOT_FOUND
    assert err.details() == "graph 9 not found"


# ---- the servicer over the fake core --------------------------------------------------
@pytest.fixture
def stub(fake_server) -> Iterator[session_pb2_grpc.GraphEngineStub]:
    with grpc.insecure_channel(fake_server.address) as channel:
        yield session_pb2_grpc.GraphEngineStub(channel)


def _code(call: Callable[[], object]) -> tuple[grpc.StatusCode, str]:
    with pytest.raises(grpc.RpcError) as info:
        call()
    return info.value.code(), info.value.details()


def _open(stub) -> tuple[str, int]:
    sid = stub.CreateSession(se.CreateSessionRequest(), timeout=10).session_id
    gid = stub.AddGraph(se.AddGraphRequest(session_id=sid, onnx_model=b"m"), timeout=10).graph_id
    return sid, gid


def test_core_errors_reach_the_client(stub, fake_server) -> None:
    sid, gid = _open(stub)
    core = fake_server.core
    core.raise_on["run_graph"] = ge.ExecutionError("kernel failed in node 'conv1'",
                                                   node="conv1")
    code, details = _code(lambda: stub.RunGraph(
        se.RunGraphRequest(session_id=sid, graph_id=gid,
                           inputs=[wire.tensor_to_pb("input", np.ones(2, np.float32))]),
        timeout=10))
    assert code == grpc.StatusCode.INTERNAL and "conv1" in details

    core.raise_on["compile_graph"] = ValueError("leaky detail")
    code, details = _code(lambda: stub.CompileGraph(
        se.CompileGraphRequest(session_id=sid, graph_id=gid), timeout=10))
    assert code == grpc.StatusCode.INTERNAL and "leaky detail" not in details
    assert "CompileGraph" in details

    core.raise_on["create"] = ge.ResourceExhausted("the server holds its maximum of 1")
    code, _ = _code(lambda: stub.CreateSession(se.CreateSessionRequest(), timeout=10))
    assert code == grpc.StatusCode.RESOURCE_EXHAUSTED


def test_unknown_ids_are_not_found(stub) -> None:
    code, details = _code(lambda: stub.GetGraphInfo(
        se.GetGraphInfoRequest(session_id="nope-1", graph_id=1), timeout=10))
    assert code == grpc.StatusCode.NOT_FOUND and "nope-1" in details
    sid, _ = _open(stub)
    code, details = _code(lambda: stub.RemoveGraph(
        se.RemoveGraphRequest(session_id=sid, graph_id=99), timeout=10))
    assert code == grpc.StatusCode.NOT_FOUND and "99" in details


def test_request_validation_in_the_servicer(stub) -> None:
    sid, gid = _open(stub)
    big = wire.tensor_to_pb("input", np.zeros(1001, np.float32))  # the fixture allows 1000
    code, details = _code(lambda: stub.RunGraph(
        se.RunGraphRequest(session_id=sid, graph_id=gid, inputs=[big]), timeout=10))
    # A configured limit exceeded by a well-formed tensor: RESOURCE_EXHAUSTED (engine/bounds.py).
    assert code == grpc.StatusCode.RESOURCE_EXHAUSTED and "1000" in details

    ok = wire.tensor_to_pb("input", np.zeros(2, np.float32))
    code, details = _code(lambda: stub.RunGraph(
        se.RunGraphRequest(session_id=sid, graph_id=gid, inputs=[ok],
                           output_names=["aux", "aux"]), timeout=10))
    assert code == grpc.StatusCode.INVALID_ARGUMENT and "aux" in details

    code, details = _code(lambda: stub.CompileGraph(se.CompileGraphRequest(
        session_id=sid, graph_id=gid,
        input_shapes=[se.InputShape(name="input", shape=[1]),
                      se.InputShape(name="input", shape=[2])]), timeout=10))
    assert code == grpc.StatusCode.INVALID_ARGUMENT and "input" in details

    code, details = _code(lambda: stub.AddGraph(
        se.AddGraphRequest(session_id=sid, onnx_model=b""), timeout=10))
    assert code == grpc.StatusCode.INVALID_ARGUMENT and "empty" in details

    code, details = _code(lambda: stub.CreateSession(se.CreateSessionRequest(
        options=se.SessionOptions(max_streams=-1)), timeout=10))
    assert code == grpc.StatusCode.INVALID_ARGUMENT and "max_streams" in details


def test_servicer_passes_domain_types_to_the_core(stub, fake_server) -> None:
    sid, gid = _open(stub)
    session = fake_server.core.sessions[sid]
    assert session.calls[0] == ("add_graph", (b"m", None))
    stub.CompileGraph(se.CompileGraphRequest(
        session_id=sid, graph_id=gid, input_shapes=[se.InputShape(name="input", shape=[3, 4])]),
        timeout=10)
    assert ("compile_graph", (gid, {"input": (3, 4)})) in session.calls
    response = stub.RunGraph(se.RunGraphRequest(
        session_id=sid, graph_id=gid, inputs=[wire.tensor_to_pb("input", np.ones(2, np.int32))],
        output_names=["aux", "output"]), timeout=10)
    assert [t.name for t in response.outputs] == ["aux", "output"]
    np.testing.assert_array_equal(wire.tensor_from_pb(response.outputs[1]), [2, 2])
