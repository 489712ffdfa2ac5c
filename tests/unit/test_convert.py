from __future__ import annotations

import numpy as np
import pytest

from graphengine.api import convert
from graphengine.engine.dtypes import DType
from graphengine.engine.errors import InvalidInput, ResourceExhausted
from graphengine.engine.report import (
    CompileReport,
    MemoryRecord,
    PartitionRecord,
    PassRecord,
    PlacementRecord,
)
from graphengine.v1 import graph_pb2, session_pb2


def full_report() -> CompileReport:
    return CompileReport(
        graph="g",
        passes=[PassRecord("prepare", "fold_constants", 0.25, True, "folded 2"),
                PassRecord("build", "plan_memory", 0.5, False)],
        partitions=[PartitionRecord(0, "device", ["a", "b"], ["x"], ["y"]),
                    PartitionRecord(1, "host", ["c"], ["y"], ["z"])],
        placements=[PlacementRecord("c", "NonZero", "host", ["device: no kernel"])],
        fusions=["conv1+relu1"],
        memory=MemoryRecord(4096, 2048, 1000, "greedy_by_size"),
        streams=2, events=1, tasks=7, nodes_before=9, nodes_after=5, total_seconds=1.5,
        flops=3.5e9)


def test_report_round_trip() -> None:
    report = full_report()
    msg = convert.report_to_pb(report)
    assert isinstance(msg, session_pb2.CompileReport)
    assert msg.memory.arena_bytes == 4096 and msg.partitions[1].engine == "host"
    # Through bytes, as over the wire.
    back = convert.report_from_pb(session_pb2.CompileReport.FromString(msg.SerializeToString()))
    assert back == report
    assert back.render() == report.render()


def test_empty_report_round_trip() -> None:
    assert convert.report_from_pb(convert.report_to_pb(CompileReport("e"))) == CompileReport("e")


class _Tensor:
    def __init__(self, name, dtype, shape):
        self.name, self.dtype, self.shape = name, dtype, shape


class _Info:
    graph_id, name, num_nodes, compiled = 3, "net", 12, True
    inputs = (_Tensor("x", DType.FLOAT32, ("batch", 3, 224, 224)),)
    outputs = (_Tensor("y", DType.INT64, (4,)), _Tensor("s", DType.FLOAT16, ()))


def test_graph_info_to_pb() -> None:
    msg = convert.graph_info_to_pb(_Info())
    assert (msg.graph_id, msg.name, msg.num_nodes, msg.compiled) == (3, "net", 12, True)
    x = msg.inputs[0]
    assert x.name == "x" and x.dtype == graph_pb2.DT_FLOAT32
    assert x.shape[0].symbol == "batch" and [d.size for d in x.shape[1:]] == [3, 224, 224]
    assert [o.name for o in msg.outputs] == ["y", "s"]
    assert msg.outputs[0].dtype == graph_pb2.DT_INT64 and msg.outputs[1].shape == []


def test_graph_info_from_pb_uses_the_core_types() -> None:
    from graphengine.server.core import session
    info = convert.graph_info_from_pb(convert.graph_info_to_pb(_Info()))
    assert isinstance(info, session.GraphInfo)
    assert info.inputs[0] == session.TensorInfo("x", DType.FLOAT32, ("batch", 3, 224, 224))
    assert info.outputs[1].shape == ()


def test_session_options_to_pb_from_mapping_object_and_none() -> None:
    assert convert.session_options_to_pb(None) == session_pb2.SessionOptions()
    msg = convert.session_options_to_pb({"max_streams": 2, "options": {"fold_constants": False}})
    assert msg.max_streams == 2 and dict(msg.options) == {"fold_constants": "False"}

    class Opts:
        max_streams, memory_limit_bytes, options = 3, 1 << 20, {"a": "b"}
    msg = convert.session_options_to_pb(Opts())
    assert (msg.max_streams, msg.memory_limit_bytes, dict(msg.options)) == (3, 1 << 20,
                                                                             {"a": "b"})
    with pytest.raises(TypeError, match="max_stream"):
        convert.session_options_to_pb({"max_stream": 2})


def test_session_options_from_pb() -> None:
    from graphengine.server.core import session
    default = convert.session_options_from_pb(session_pb2.SessionOptions())
    assert default == session.SessionOptions()  # 0 on the wire: the server's defaults
    opts = convert.session_options_from_pb(session_pb2.SessionOptions(
        max_streams=4, memory_limit_bytes=100, options={"k": "v"}))
    assert (opts.max_streams, opts.memory_limit_bytes, dict(opts.options)) == (4, 100,
                                                                               {"k": "v"})
    with pytest.raises(InvalidInput, match="memory_limit_bytes"):
        convert.session_options_from_pb(session_pb2.SessionOptions(memory_limit_bytes=-1))


def test_input_shapes() -> None:
    assert convert.input_shapes_from_pb([]) is None
    msgs = convert.input_shapes_to_pb({"x": [1, 3], "y": (2,)})
    assert convert.input_shapes_from_pb(msgs) == {"x": (1, 3), "y": (2,)}
    with pytest.raises(InvalidInput, match="'x'"):
        convert.input_shapes_from_pb([session_pb2.InputShape(name="x", shape=[-1])])


def test_tensors_round_trip_and_checks() -> None:
    arrays = {"a": np.arange(6, dtype=np.float32).reshape(2, 3), "b": np.array(True),
              "c": np.zeros((0, 4), dtype=np.int64)}
    back = convert.tensors_from_pb(convert.tensors_to_pb(arrays))
    assert list(back) == ["a", "b", "c"]
    for name, array in arrays.items():
        assert back[name].dtype == array.dtype and back[name].shape == array.shape
        np.testing.assert_array_equal(back[name], array)

    t = convert.tensors_to_pb({"a": arrays["a"]})[0]
    with pytest.raises(InvalidInput, match="'a' is given twice"):
        convert.tensors_from_pb([t, t])
    with pytest.raises(ResourceExhausted, match="at most 5 per tensor"):
        convert.tensors_from_pb([t], max_elements=5)
    with pytest.raises(InvalidInput, match="no name"):
        convert.tensors_from_pb([graph_pb2.Tensor(dtype=graph_pb2.DT_FLOAT32)])
