"""The client SDK: model coercion, error translation, and calls against a fake core."""

from __future__ import annotations

import pathlib

import grpc
import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import graphengine.errors
from graphengine.clients import Client, ClientError
from graphengine.clients import errors as ce
from graphengine.clients.client import model_fields
from graphengine.engine.errors import InvalidGraph, NotFound
from graphengine.engine.report import CompileReport
from graphengine.v1 import graph_pb2


def tiny_onnx() -> onnx.ModelProto:
    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"])], "tiny",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])])
    return helper.make_model(graph)


# ---- model coercion --------------------------------------------------------------------
def test_model_fields_for_each_accepted_form(tmp_path: pathlib.Path) -> None:
    gd = graph_pb2.GraphDef(name="g")
    assert model_fields(gd) == {"graph": gd}
    assert model_fields(b"abc") == {"onnx_model": b"abc"}
    assert model_fields(bytearray(b"abc")) == {"onnx_model": b"abc"}
    model = tiny_onnx()
    blob = model.SerializeToString()
    assert model_fields(model) == {"onnx_model": blob}
    path = tmp_path / "m.onnx"
    path.write_bytes(blob)
    assert model_fields(path) == {"onnx_model": blob}
    assert model_fields(str(path)) == {"onnx_model": blob}


def test_model_fields_rejects_other_types(tmp_path: pathlib.Path) -> None:
    with pytest.raises(TypeError, match="dict"):
        model_fields({"not": "a model"})
    with pytest.raises(FileNotFoundError):
        model_fields(tmp_path / "missing.onnx")


# ---- error translation -----------------------------------------------------------------
class FakeRpcError(grpc.RpcError):
    def __init__(self, code, details, trailing=()):
        self._code, self._details, self._trailing = code, details, trailing

    def code(self):
        return self._code

    def details(self):
        return self._details

    def trailing_metadata(self):
        return self._trailing


@pytest.mark.parametrize("code, kind", [
    (grpc.StatusCode.INVALID_ARGUMENT, ce.InvalidArgument),
    (grpc.StatusCode.NOT_FOUND, ce.NotFound),
    (grpc.StatusCode.RESOURCE_EXHAUSTED, ce.ResourceExhausted),
    (grpc.StatusCode.UNAVAILABLE, ce.Unavailable),
    (grpc.StatusCode.DEADLINE_EXCEEDED, ce.DeadlineExceeded),
    (grpc.StatusCode.INTERNAL, ce.Internal),
    (grpc.StatusCode.DATA_LOSS, ce.DataLoss),
])
def test_status_codes_pick_the_subclass(code: grpc.StatusCode, kind: type) -> None:
    err = ce.from_rpc_error(FakeRpcError(code, "the message"))
    assert type(err) is kind
    assert err.code.name == code.name and err.message == "the message"
    assert str(err) == "the message"  # the server's text, its context prefix included
    assert isinstance(err, graphengine.errors.GraphEngineError)


def test_error_context_from_trailing_metadata() -> None:
    err = ce.from_rpc_error(FakeRpcError(
        grpc.StatusCode.INVALID_ARGUMENT, "bad node",
        (("graphengine-error-type-bin", b"InvalidGraph"), ("graphengine-node-bin",
                                                           "nœud".encode()),
         ("unrelated", "x"))))
    assert (err.error_type, err.node, err.tensor, err.graph) == ("InvalidGraph", "nœud",
                                                                 None, None)


# ---- against an in-process server over a fake core -------------------------------------
def test_full_flow(fake_server) -> None:
    x = np.arange(4, dtype=np.float32)
    with Client(fake_server.address, timeout=10) as client:
        assert client.health() == "SERVING"
        with client.session({"max_streams": 2, "options": {"k": "v"}}) as sess:
            core_session = fake_server.core.sessions[sess.id]
            assert core_session.options.max_streams == 2
            assert dict(core_session.options.options) == {"k": "v"}

            gid = sess.add_graph(graph_pb2.GraphDef(name="gd"), name="named")
            (model, name), = [args for m, args in core_session.calls if m == "add_graph"]
            assert isinstance(model, graph_pb2.GraphDef) and name == "named"

            report = sess.compile_graph(gid, input_shapes={"input": [4]})
            assert isinstance(report, CompileReport) and report.graph == "named"
            assert report.memory.strategy == "greedy" and report.tasks == 3
            assert core_session.calls[-1] == ("compile_graph", (gid, {"input": (4,)}))

            out = sess.run_graph(gid, {"input": x})
            assert list(out) == ["output", "aux"]
            np.testing.assert_array_equal(out["output"], 2 * x)
            out["output"][0] = 42  # ordinary writable arrays, like the in-process Session
            picked = sess.run_graph(gid, {"input": x}, output_names=["aux"])
            assert list(picked) == ["aux"] and picked["aux"].dtype == np.int64

            sess.remove_graph(gid)
            assert gid not in core_session.graphs
        assert sess.id not in fake_server.core.sessions  # closed on exit
        sess.close()  # a second close is a no-op


def test_errors_keep_code_and_message(fake_server) -> None:
    with Client(fake_server.address, timeout=10) as client, client.session() as sess:
        with pytest.raises(ce.NotFound, match="graph 5 not found") as info:
            sess.run_graph(5, {"input": np.ones(1, np.float32)})
        assert info.value.code is graphengine.errors.ErrorCode.NOT_FOUND
        fake_server.core.raise_on["add_graph"] = InvalidGraph(
            "node 'n1' reads 'ghost', which nothing produces", node="n1", tensor="ghost")
        with pytest.raises(ce.InvalidArgument) as info:
            sess.add_graph(b"model")
        assert "ghost" in info.value.message
        assert (info.value.node, info.value.tensor, info.value.error_type) == (
            "n1", "ghost", "InvalidGraph")


def test_session_exit_does_not_mask_the_original_error(fake_server) -> None:
    with Client(fake_server.address, timeout=10) as client:
        with pytest.raises(ZeroDivisionError), client.session():
            fake_server.core.raise_on["close_session"] = NotFound("gone")
            raise ZeroDivisionError
        # Without an error in flight, a failing close is reported.
        del fake_server.core.raise_on["close_session"]
        with pytest.raises(ce.NotFound, match="gone"), client.session():
            fake_server.core.raise_on["close_session"] = NotFound("gone")


def test_unreachable_server_is_unavailable() -> None:
    with Client("127.0.0.1:1", timeout=5) as client, pytest.raises(ce.Unavailable) as info:
        client.session()
    assert isinstance(info.value, ClientError)
