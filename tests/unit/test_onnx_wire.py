"""Reading ONNX files with their weights in one aligned buffer (importers/onnx_wire)."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from graphengine.engine.errors import InvalidModel
from graphengine.engine.importers import load_model
from graphengine.engine.importers.onnx_wire import WireError, split_weights, weight_buffer_of
from graphengine.engine.model import DeviceProgram
from graphengine.engine.pipeline import compile_graph
from graphengine.engine.runtime import LoadedModel

RNG = np.random.default_rng(7)


def _model() -> onnx.ModelProto:
    """x[2,64] @ w1 + b1 -> Relu -> @ w2, plus int64 / fp16 / tiny / string-free initializers."""
    w1 = RNG.standard_normal((64, 96)).astype(np.float32)
    b1 = RNG.standard_normal(96).astype(np.float32)
    w2 = RNG.standard_normal((96, 8)).astype(np.float32)
    shape = np.array([2, 8], np.int64)
    half = RNG.standard_normal(300).astype(np.float16)
    inits = [numpy_helper.from_array(w1, "w1"), numpy_helper.from_array(b1, "b1"),
             numpy_helper.from_array(w2, "w2"), numpy_helper.from_array(shape, "shape"),
             numpy_helper.from_array(half, "half"),
             # float_data instead of raw_data: stays in the proto
             helper.make_tensor("listed", TensorProto.FLOAT, [3], [1.0, 2.0, 3.0])]
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["h"]),
             helper.make_node("Add", ["h", "b1"], ["hb"]),
             helper.make_node("Relu", ["hb"], ["r"]),
             helper.make_node("MatMul", ["r", "w2"], ["m"]),
             helper.make_node("Reshape", ["m", "shape"], ["y"])]
    graph = helper.make_graph(nodes, "wire", [helper.make_tensor_value_info(
        "x", TensorProto.FLOAT, [2, 64])], [helper.make_tensor_value_info(
            "y", TensorProto.FLOAT, [2, 8])], initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def test_split_moves_large_payloads_and_keeps_the_rest(tmp_path) -> None:
    model = _model()
    data = model.SerializeToString()
    path = tmp_path / "m.onnx"
    path.write_bytes(data)
    for stripped, weights in (split_weights(path=path), split_weights(data=data)):
        assert weights.data.ctypes.data % 64 == 0
        parsed = onnx.ModelProto()
        parsed.ParseFromString(stripped)
        assert len(stripped) < len(data) - 64 * 96 * 4  # w1's payload left the proto
        moved = {t.name: span for t, span in zip(parsed.graph.initializer, weights.spans)}
        assert moved["shape"] is None and moved["listed"] is None  # small or not raw
        for t in model.graph.initializer:
            span = moved[t.name]
            if span is not None:
                assert span[0] % 64 == 0
                raw = weights.data[span[0]:span[0] + span[1]].tobytes()
                assert raw == t.raw_data
        assert [n.op_type for n in parsed.graph.node] == [n.op_type for n in model.graph.node]


def test_imported_weights_are_read_only_views_equal_to_the_file(tmp_path) -> None:
    model = _model()
    path = tmp_path / "m.onnx"
    path.write_bytes(model.SerializeToString())
    g = load_model(str(path))
    for t in model.graph.initializer:
        got = g.values[t.name].const
        np.testing.assert_array_equal(got, numpy_helper.to_array(t))
        assert got.dtype == numpy_helper.to_array(t).dtype
    for name in ("w1", "w2", "b1", "half"):
        arr = g.values[name].const
        assert weight_buffer_of(arr) is not None and not arr.flags.writeable
    assert weight_buffer_of(g.values["shape"].const) is None


def test_compiled_program_uses_the_file_buffer_in_place(tmp_path) -> None:
    model = _model()
    path = tmp_path / "m.onnx"
    path.write_bytes(model.SerializeToString())
    g = load_model(str(path))
    compiled = compile_graph(g)
    (prog,) = [p for p in compiled.programs if isinstance(p, DeviceProgram)]
    assert len(prog.weights) == 2
    shared = prog.weights[0]
    assert np.shares_memory(shared, g.values["w1"].const)  # not copied
    x = RNG.standard_normal((2, 64)).astype(np.float32)
    (got,) = LoadedModel(compiled).execute({"x": x}).values()
    want = ort.InferenceSession(model.SerializeToString(), providers=[
        "CPUExecutionProvider"]).run(None, {"x": x})[0]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    # Only weights the program reads come from the buffer; the rest were not copied.
    w1_slot = next(t for t in prog.tensors if t.name == "w1")
    at = g.values["w1"].const.ctypes.data - shared.ctypes.data
    assert w1_slot.region == "weight" and w1_slot.offset == at


def test_mostly_unused_buffer_is_not_kept(tmp_path) -> None:
    # Conv+BatchNormalization folds into new weights: the file's buffer would be mostly
    # dead, so the program packs its own copy instead of holding the buffer.
    w = RNG.standard_normal((16, 8, 3, 3)).astype(np.float32)
    bn = [np.abs(RNG.standard_normal(16)).astype(np.float32) + 0.5 for _ in range(4)]
    inits = [numpy_helper.from_array(w, "w")] + [
        numpy_helper.from_array(a, n) for a, n in zip(bn, ("s", "b", "mean", "var"))]
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("BatchNormalization", ["c", "s", "b", "mean", "var"], ["y"])]
    graph = helper.make_graph(nodes, "cbn", [helper.make_tensor_value_info(
        "x", TensorProto.FLOAT, [1, 8, 8, 8])], [helper.make_tensor_value_info(
            "y", TensorProto.FLOAT, [1, 16, 8, 8])], initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    path = tmp_path / "cbn.onnx"
    path.write_bytes(model.SerializeToString())
    compiled = compile_graph(load_model(str(path)))
    (prog,) = [p for p in compiled.programs if isinstance(p, DeviceProgram)]
    assert len(prog.weights) == 1
    x = RNG.standard_normal((1, 8, 8, 8)).astype(np.float32)
    (got,) = LoadedModel(compiled).execute({"x": x}).values()
    want = ort.InferenceSession(model.SerializeToString(), providers=[
        "CPUExecutionProvider"]).run(None, {"x": x})[0]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("data", [b"\x3a\xff\xff\xff\xff\x0f", b"\x08", b"\x0b\x00"])
def test_malformed_wire_bytes_raise_wire_error(data) -> None:
    with pytest.raises(WireError):
        split_weights(data=data)


def _mapped(path) -> bool:
    with open("/proc/self/maps") as maps:
        return str(path) in maps.read()


@pytest.mark.parametrize("data", [b"", b"\x3a\xff\xff\xff\xff\x0f", b"\x08", b"\x0b\x00"])
def test_malformed_file_raises_wire_error_and_is_not_left_mapped(tmp_path, data) -> None:
    path = tmp_path / "bad.onnx"
    path.write_bytes(data)
    with pytest.raises(WireError):
        split_weights(path=path)
    assert not _mapped(path)


def test_a_file_is_split_as_its_bytes_are_and_not_left_mapped(tmp_path) -> None:
    # A file's structure is walked in its mapping, the fields between initializers copied a
    # run at a time: the same stripped model as from its bytes, and the mapping closed.
    data = _model().SerializeToString()
    path = tmp_path / "m.onnx"
    path.write_bytes(data)
    from_file, weights = split_weights(path=path)
    from_bytes, _ = split_weights(data=data)
    assert from_file == from_bytes
    assert weights.data.nbytes > 64 * 96 * 4
    assert not _mapped(path)


def test_truncated_file_is_reported_by_the_importer(tmp_path) -> None:
    data = _model().SerializeToString()
    path = tmp_path / "cut.onnx"
    path.write_bytes(data[:len(data) // 2])
    with pytest.raises(InvalidModel, match="is not an ONNX model"):
        load_model(str(path))


@pytest.mark.parametrize("dtype,code", [(np.float32, TensorProto.FLOAT),
                                        (np.float64, TensorProto.DOUBLE)])
def test_listed_weights_are_read_as_one_buffer(monkeypatch, dtype, code) -> None:
    """A weight written as a list of values (PaddlePaddle's Constant nodes) is read from
    the packed field's bytes, not converted value by value: the general reader is never
    asked, and the array equals the list."""
    from graphengine.engine.importers import onnx_import

    w = RNG.standard_normal((16, 8, 3, 3)).astype(dtype)
    nodes = [helper.make_node("Constant", [], ["w"], value=helper.make_tensor(
                 "w", code, list(w.shape), w.ravel().tolist())),
             helper.make_node("Conv", ["x", "w"], ["y"], pads=[1, 1, 1, 1])]
    graph = helper.make_graph(nodes, "listed", [helper.make_tensor_value_info(
        "x", code, [1, 8, 6, 6])], [helper.make_tensor_value_info("y", code, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])

    def general(*args, **kwargs):
        raise AssertionError("the general reader converted a listed weight")

    monkeypatch.setattr(onnx_import.numpy_helper, "to_array", general)
    g = load_model(model.SerializeToString())
    (const,) = [v.const for v in g.constants() if v.const.shape == w.shape]
    assert const.dtype == dtype
    np.testing.assert_array_equal(const, w)


def test_packed_field_joins_chunks_and_refuses_unpacked_values() -> None:
    from graphengine.engine.importers.onnx_wire import packed_field

    a, b = np.arange(3, dtype="<f4").tobytes(), np.arange(5, dtype="<f4").tobytes()
    two = b"\x22" + bytes([len(a)]) + a + b"\x08\x02" + b"\x22" + bytes([len(b)]) + b
    assert packed_field(two, 4) == a + b
    assert packed_field(b"\x08\x02", 4) == b""
    assert packed_field(b"\x25" + a[:4], 4) is None  # one float written unpacked
    with pytest.raises(WireError):
        packed_field(b"\x22\x10\x00", 4)
