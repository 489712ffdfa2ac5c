"""The offline model file: round trips, gears, corruption, versions, unknown fields, Session."""

from __future__ import annotations

import dataclasses
import json
import math
import struct
import zlib

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import graphengine
from graphengine.engine import model as model_module
from graphengine.engine import offline, runtime
from graphengine.engine.errors import InvalidInput, InvalidModel
from graphengine.engine.importers import load_model
from graphengine.engine.model import CompiledModel, HostProgram, HostStep, Task, TensorSig
from graphengine.engine.pipeline import CompileOptions, compile_graph
from graphengine.engine.report import CompileReport
from tests import zoo

HEADER = struct.Struct("<4sHHIIQQQQI12x")  # the documented layout, independently of the code

ZOO = {
    "mlp": lambda: zoo.mlp(sizes=(64, 128, 10)),
    "resnet": lambda: zoo.resnet(depths=(1, 1, 1, 1), width=8, image=32, classes=10),
    "mobilenetv2": lambda: zoo.mobilenetv2(width_mult=0.35, image=32, classes=10),
    "bert": lambda: zoo.bert(layers=2, hidden=64, heads=4, intermediate=128, vocab=100, seq=16),
    "branchy": lambda: zoo.branchy(towers=3, channels=8, size=16),
}


def compiled_zoo(name: str, **options) -> tuple[CompiledModel, dict[str, np.ndarray]]:
    model = ZOO[name]()
    inputs = zoo.random_inputs(model, seed=5)
    compiled = compile_graph(load_model(model), CompileOptions(**options),
                             input_shapes={k: v.shape for k, v in inputs.items()})
    return compiled, inputs


def assert_same(a, b, where: str = "model") -> None:
    """Equal values of equal types all the way down (tuples stay tuples, dtypes stay)."""
    assert type(a) is type(b), f"{where}: {type(a).__name__} != {type(b).__name__}"
    if isinstance(a, np.ndarray):
        assert a.dtype == b.dtype and a.shape == b.shape, where
        if a.dtype == object:
            assert a.tolist() == b.tolist(), where
        else:
            assert a.tobytes() == b.tobytes(), where
    elif dataclasses.is_dataclass(a):
        for f in dataclasses.fields(a):
            assert_same(getattr(a, f.name), getattr(b, f.name), f"{where}.{f.name}")
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b), where
        for k, (x, y) in enumerate(zip(a, b)):
            assert_same(x, y, f"{where}[{k}]")
    elif isinstance(a, dict):
        assert list(a) == list(b), where
        for k in a:
            assert_same(a[k], b[k], f"{where}[{k!r}]")
    elif isinstance(a, float) and math.isnan(a):
        assert math.isnan(b), where
    elif isinstance(a, graphengine.engine.ir.Graph):
        assert a.summary() == b.summary(), where
    else:
        assert a == b, where


def reseal(data: bytes, edit=None, *, version: int | None = None, flags: int | None = None
           ) -> bytes:
    """The file with its description edited (edit(desc) -> desc) and a valid checksum."""
    magic, ver, fl, hlen, _, dlen, woff, wlen, _, _ = HEADER.unpack_from(data)
    desc = json.loads(data[hlen:hlen + dlen])
    text = json.dumps(edit(desc) if edit else desc).encode()
    weights = data[woff:woff + wlen]
    new_woff = -(-(hlen + len(text)) // 64) * 64
    size = new_woff + len(weights)
    header = bytearray(HEADER.pack(magic, ver if version is None else version,
                                   fl if flags is None else flags, hlen, 0, len(text),
                                   new_woff, len(weights), size, 0))
    body = text + bytes(new_woff - hlen - len(text)) + weights
    crc = zlib.crc32(body, zlib.crc32(header[52:], zlib.crc32(header[:48])))
    struct.pack_into("<I", header, 48, crc)
    return bytes(header) + body


# ---- round trips -----------------------------------------------------------------------
@pytest.mark.parametrize("name", sorted(ZOO))
def test_zoo_round_trip_runs_bit_identically(name: str) -> None:
    compiled, inputs = compiled_zoo(name, max_streams=2)
    data = offline.save(compiled)
    loaded = offline.load(data)
    assert_same(compiled, loaded)  # every field, e.g. TensorSlot.format, comes back as it was
    fresh = runtime.load(compiled).execute(inputs)
    again = runtime.load(loaded).execute(inputs)
    assert list(fresh) == list(again)
    for key in fresh:
        assert fresh[key].dtype == again[key].dtype
        assert fresh[key].tobytes() == again[key].tobytes(), key


def _as_version_1(task: dict) -> dict:
    """A task of a fused convolution as version 1 wrote it: a Conv marked dw/pw/head."""
    attrs = dict(task["attrs"])
    if task["op"] == "ConvDw":
        attrs["dw"] = 1
    elif task["op"] == "ConvBlock":
        attrs["pw"], attrs["dw"] = 1, attrs.pop("expand")
        if not attrs["dw"]:
            for key in [k for k in attrs if k.startswith("dw_activation")]:
                attrs[key[3:]] = attrs.pop(key)
    elif task["op"] == "ConvHead":
        attrs["head"], attrs["head_trans_b"] = 1, attrs.pop("trans_b")
    else:
        return task
    return {**task, "op": "Conv", "attrs": attrs}


def _tasks_as_version_1(x):
    if isinstance(x, dict):
        if str(x.get("$", "")).endswith(":Task") and x.get("kind") == "kernel":
            return _as_version_1(x)
        return {k: _tasks_as_version_1(v) for k, v in x.items()}
    if isinstance(x, list):
        return [_tasks_as_version_1(v) for v in x]
    return x


def test_version_1_files_run_their_fused_convolutions_as_the_kernels_they_are_now() -> None:
    # Version 1 wrote ConvDw / ConvBlock / ConvHead tasks as Conv tasks with attributes; the
    # reader maps them to today's kernels, so the file runs as it did (the plain Conv kernel
    # would refuse them)
    from tests.unit.test_ops_conv_fused import _all_three

    model = _all_three()
    inputs = zoo.random_inputs(model, seed=6)
    compiled = compile_graph(load_model(model))
    data = offline.save(compiled)
    ops = {t.op for p in compiled.programs for t in getattr(p, "tasks", [])}
    assert "ConvDw" in ops
    old = reseal(data, _tasks_as_version_1, version=1)
    assert b'"ConvDw"' not in old and b'"ConvBlock"' not in old and b'"ConvHead"' not in old
    loaded = offline.load(old)

    def kernels(m):
        return [(t.name, t.op, t.inputs, t.outputs, t.attrs) for p in m.programs
                for t in getattr(p, "tasks", [])]

    assert kernels(loaded) == kernels(compiled)  # the attributes in any order
    want = runtime.load(compiled).execute(inputs)
    got = runtime.load(loaded).execute(inputs)
    for key in want:
        assert want[key].tobytes() == got[key].tobytes(), key


def test_file_layout_matches_the_documented_header(tmp_path) -> None:
    compiled, _ = compiled_zoo("mlp")
    size = offline.write(compiled, tmp_path / "m.om")
    data = (tmp_path / "m.om").read_bytes()
    magic, version, flags, hlen, _, dlen, woff, wlen, flen, crc = HEADER.unpack_from(data)
    assert (magic, version, flags, hlen) == (b"GEOM", offline.FORMAT_VERSION, 0, 64)
    assert flen == size == len(data) and woff % 64 == 0 and woff + wlen == flen
    assert hlen + dlen <= woff
    assert crc == zlib.crc32(data[52:], zlib.crc32(data[:48]))
    desc = json.loads(data[hlen:hlen + dlen])
    assert desc["name"] == "mlp" and desc["gear"] is None and len(desc["models"]) == 1
    assert wlen >= compiled.programs[0].weight_bytes
    assert list(tmp_path.iterdir()) == [tmp_path / "m.om"]  # the temporary file is gone
    for loaded in (offline.read(tmp_path / "m.om"), offline.load(data)):
        assert_same(loaded, compiled)
        for segment in loaded.programs[0].weights:
            assert segment.ctypes.data % 64 == 0  # aligned for the runtime
            assert segment.flags.writeable


def test_loading_runs_no_compile_work(monkeypatch) -> None:
    compiled, inputs = compiled_zoo("resnet")
    data = offline.save(compiled)
    want = runtime.load(compiled).execute(inputs)

    def refuse(*args, **kwargs):
        raise AssertionError("loading an offline model must not run a pass")

    monkeypatch.setattr("graphengine.engine.passes.PassManager.run_pass", refuse)
    monkeypatch.setattr("graphengine.engine.pipeline.compile_graph", refuse)
    got = runtime.load(offline.load(data)).execute(inputs)
    assert all(np.array_equal(want[k], got[k]) for k in want)


def control_flow_model() -> onnx.ModelProto:
    """If with branches reading an outer value, a host op, folded and pass-through outputs."""
    then_g = helper.make_graph([helper.make_node("Add", ["x", "x"], ["t"])], "then", [],
                               [helper.make_tensor_value_info("t", TensorProto.FLOAT, [2, 3])])
    else_g = helper.make_graph([helper.make_node("Mul", ["x", "x"], ["e"])], "else", [],
                               [helper.make_tensor_value_info("e", TensorProto.FLOAT, [2, 3])])
    nodes = [helper.make_node("ReduceSum", ["x"], ["s"], keepdims=0),
             helper.make_node("Greater", ["s", "zero"], ["c"]),
             helper.make_node("If", ["c"], ["y"], then_branch=then_g, else_branch=else_g),
             helper.make_node("NonZero", ["y"], ["nz"]),
             helper.make_node("Shape", ["x"], ["shp"])]
    outs = [("y", TensorProto.FLOAT), ("nz", TensorProto.INT64), ("shp", TensorProto.INT64),
            ("x", TensorProto.FLOAT)]
    graph = helper.make_graph(
        nodes, "control", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
        [helper.make_tensor_value_info(n, t, None) for n, t in outs],
        [numpy_helper.from_array(np.array(0.0, np.float32), "zero")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def test_host_programs_subgraphs_and_folded_outputs_round_trip() -> None:
    compiled = compile_graph(load_model(control_flow_model()))
    assert any(isinstance(p, HostProgram) for p in compiled.programs) and compiled.constants
    loaded = offline.load(offline.save(compiled))
    assert_same(compiled, loaded)
    for x in (np.ones((2, 3), np.float32), -np.arange(6, dtype=np.float32).reshape(2, 3)):
        want = runtime.load(compiled).execute({"x": x})
        got = runtime.load(loaded).execute({"x": x})
        assert all(want[k].tobytes() == got[k].tobytes() for k in want)
        assert all(want[k].flags.writeable == got[k].flags.writeable for k in want)


def hand_made(attrs: dict, constants: dict | None = None) -> CompiledModel:
    step = HostStep("s", "Identity", attrs, ["x"], ["y"])
    program = HostProgram(0, [step], dict(constants or {}), ["x"], ["y"])
    x, y = (TensorSig(n, graphengine.engine.dtypes.DType.FLOAT32, (2,)) for n in "xy")
    return CompiledModel("hand", [x], [y], ["y"], [program], {}, CompileReport(graph="hand"))


def test_values_json_cannot_say_round_trip_exactly() -> None:
    attrs = {"tuple": (1, (2.5, "a")), "list": [1, [2]], "inf": math.inf, "nan": math.nan,
             "f32": np.float32(0.1), "i8": np.int8(-3), "bool": np.bool_(True),
             "bytes": b"\x00\xff", "int_keys": {1: "one"}, "dollar": {"$": "not a tag"},
             "none": None, "empty": np.zeros((0, 3), np.int32), "scalar": np.array(2.5),
             "strings": np.array([["a", "bc"], ["", "d"]], dtype=object),
             "bf16": np.arange(5).astype(np.float32).astype(graphengine.engine.dtypes.DType
                                                             .BFLOAT16.numpy)}
    constants = {"big": np.arange(40000, dtype=np.float64).reshape(200, 200),
                 "view": np.arange(12, dtype=np.int64).reshape(3, 4).T}  # not contiguous
    compiled = hand_made(attrs, constants)
    assert_same(compiled, offline.load(offline.save(compiled)))


def test_new_fields_and_types_round_trip_without_changes_here(monkeypatch) -> None:
    """What another engineer adds to the model's dataclasses is written and read generically."""

    @dataclasses.dataclass
    class StreamTask(Task):  # a subclass with a field this module has never heard of
        priority: int = 0
        lanes: tuple[int, ...] = ()

    StreamTask.__module__, StreamTask.__qualname__ = model_module.__name__, "StreamTask"
    monkeypatch.setattr(model_module, "StreamTask", StreamTask, raising=False)
    compiled, inputs = compiled_zoo("mlp")
    program = compiled.programs[0]
    program.tasks = [StreamTask(**{f.name: getattr(t, f.name) for f in dataclasses.fields(t)},
                                priority=k, lanes=(k, k + 1)) for k, t in enumerate(program.tasks)]
    loaded = offline.load(offline.save(compiled))
    assert_same(compiled, loaded)
    assert loaded.programs[0].tasks[-1].lanes == (len(program.tasks) - 1, len(program.tasks))


def test_a_value_that_cannot_be_stored_is_named() -> None:
    with pytest.raises(ValueError, match=r"cannot store a complex64 array .*attrs\['z'\]"):
        offline.save(hand_made({"z": np.zeros(2, np.complex64)}))
    with pytest.raises(ValueError, match=r"cannot store a object .*attrs\['o'\]"):
        offline.save(hand_made({"o": object()}))


# ---- gears ------------------------------------------------------------------------------
def gear_models(values=(1, 4, 16)) -> tuple[onnx.ModelProto, list[CompiledModel]]:
    model = zoo.bert(layers=1, hidden=128, heads=2, intermediate=256, vocab=400, seq=8,
                     batch="batch")
    graph = load_model(model)
    return model, [compile_graph(graph, input_shapes={"input_ids": (b, 8),
                                                      "attention_mask": (b, 8)})
                   for b in values]


def test_gears_share_one_file_and_their_weights() -> None:
    model, models = gear_models()
    gear = offline.Gear("batch", (1, 4, 16))
    data = offline.save(models, gear=gear)
    single = len(offline.save(models[0]))
    assert len(data) < 1.5 * single  # the packed weights are stored once, not three times
    assert HEADER.unpack_from(data)[2] == offline.FLAG_GEARS
    stored = offline.load_all(data)
    assert stored.gear == gear and stored.name == "bert" and len(stored.models) == 3
    for fresh, loaded, batch in zip(models, stored.models, gear.values):
        assert_same(fresh, loaded)
        inputs = zoo.random_inputs(model, seed=batch, batch=batch, dims={"seq": 8})
        want, got = runtime.load(fresh).execute(inputs), runtime.load(loaded).execute(inputs)
        assert all(want[k].tobytes() == got[k].tobytes() for k in want)
    ins, outs = stored.signature()
    assert [tuple(s.shape) for s in ins] == [("batch", 8), ("batch", 8)]
    assert [tuple(s.shape) for s in outs] == [("batch", 8, 128), ("batch", 128)]
    assert stored.find({"input_ids": (4, 8), "attention_mask": (4, 8)}) is stored.models[1]
    assert [s["shape"] for s in offline.inspect(data)["signature"]["outputs"]] == [
        ["batch", 8, 128], ["batch", 128]]
    with pytest.raises(InvalidInput, match=r"compiled for input signatures .*\[2,8\]"):
        stored.find({"input_ids": (2, 8), "attention_mask": (2, 8)})
    with pytest.raises(InvalidModel, match="holds 3 compiled signatures"):
        offline.load(data)


def test_gears_must_belong_to_one_graph() -> None:
    _, models = gear_models((1, 2))
    other, _ = compiled_zoo("mlp")
    with pytest.raises(ValueError, match="different signatures"):
        offline.save([models[0], other])
    with pytest.raises(ValueError, match="share the input signature"):
        offline.save([models[0], models[0]])
    with pytest.raises(ValueError, match="3 values for 2 compiled models"):
        offline.save(models, gear=offline.Gear("batch", (1, 2, 3)))


# ---- damaged files ----------------------------------------------------------------------
@pytest.fixture(scope="module")
def mlp_file() -> bytes:
    compiled, _ = compiled_zoo("mlp")
    return offline.save(compiled)


def flip(data: bytes, at: int) -> bytes:
    return data[:at] + bytes([data[at] ^ 0x40]) + data[at + 1:]


@pytest.mark.parametrize("damage, message", [
    (lambda d: b"", r"bad magic b'' \(expected b'GEOM'\)"),
    (lambda d: b"PK\x03\x04" + d[4:], "not an offline model: bad magic"),
    (lambda d: d[:40], "truncated: expected at least 64 bytes"),
    (lambda d: d[:len(d) // 2], lambda d: f"truncated: expected {len(d)} bytes, got "
                                          f"{len(d) // 2}"),
    (lambda d: d[:-1], lambda d: f"truncated: expected {len(d)} bytes, got {len(d) - 1}"),
    (lambda d: d + b"\0", "1 bytes past its end"),
    (lambda d: flip(d, len(d) - 100), "checksum mismatch: the file is corrupted"),
    (lambda d: flip(d, 200), "checksum mismatch: the file is corrupted"),
    (lambda d: flip(d, 6), "checksum mismatch"),  # the flags are covered too
    (lambda d: flip(d, 33), "header is corrupted"),
    (lambda d: reseal(d, version=3), r"file format version 3 is newer than this GraphEngine "
                                     r"supports \(2\)"),
    (lambda d: reseal(d, flags=0x8), "uses flags 0x0008"),
])
def test_damaged_files_give_clear_errors(mlp_file: bytes, damage, message) -> None:
    if callable(message):
        message = message(mlp_file)
    with pytest.raises(InvalidModel, match=message):
        offline.load(damage(mlp_file))
    with pytest.raises(InvalidModel, match=message):
        offline.inspect(damage(mlp_file))


def first_slot(desc: dict) -> dict:
    return desc["models"][0]["programs"][0]["tensors"][0]


def weights_of(desc: dict) -> dict:
    return desc["models"][0]["programs"][0]["weights"][-1]


def with_edit(fn):
    def edit(desc: dict) -> dict:
        fn(desc)
        return desc

    return edit


@pytest.mark.parametrize("edit, message", [
    (with_edit(lambda d: first_slot(d).update(colour="red")),
     r"field 'TensorSlot.colour', which this GraphEngine does not know"),
    (with_edit(lambda d: first_slot(d).pop("name")), "lacks field 'TensorSlot.name'"),
    (with_edit(lambda d: first_slot(d).update({"$": "model:Nope"})),
     "type 'model:Nope', which this GraphEngine does not know"),
    (with_edit(lambda d: first_slot(d).update({"$": "os:system"})),
     "type 'os:system', which this GraphEngine does not know"),
    (with_edit(lambda d: d.update(extra=1)), "top-level field 'extra'"),
    (with_edit(lambda d: weights_of(d).update(offset=1 << 40)),
     "lies outside the weights section"),
    (with_edit(lambda d: weights_of(d).update(nbytes=3)), "cannot take 3 bytes"),
    (with_edit(lambda d: weights_of(d).update(dtype="float128")), "unknown dtype"),
    (with_edit(lambda d: d["models"][0]["inputs"][0]["dtype"].update(value="float99")),
     "'float99', which is not a DType"),
    (with_edit(lambda d: d["models"][0]["inputs"][0].update({"$": "x"})), "tagged 'x'"),
    (with_edit(lambda d: d.pop("models")), "description is malformed: KeyError"),
    # A value of the wrong kind where a field's annotation says what belongs (found by the
    # fuzz harness: each of these reached the runtime as an AttributeError or TypeError).
    (with_edit(lambda d: d["models"][0]["programs"].__setitem__(0, "x")),
     r"'CompiledModel.programs' holds a list, where list\[.*DeviceProgram"),
    (with_edit(lambda d: d["models"][0]["programs"][0].pop("$")),
     r"'CompiledModel.programs' holds a list"),
    (with_edit(lambda d: first_slot(d).update(shape={"a": 1})),
     r"'TensorSlot.shape' holds a dict, where list\[int\] belongs"),
    (with_edit(lambda d: first_slot(d).update(offset="0")),
     r"'TensorSlot.offset' holds a str, where int belongs"),
    (with_edit(lambda d: d["models"][0]["inputs"][0].update(name=7)),
     r"'TensorSig.name' holds an int, where str belongs"),
    (with_edit(lambda d: d["models"][0]["programs"][0]["tensors"].__setitem__(0, [1])),
     r"'DeviceProgram.tensors' holds a list"),
    # An array's numbers that are not integers (found by the fuzz harness: inf reached
    # int() as a raw OverflowError; 1.5 would have been truncated and "8" parsed).
    (with_edit(lambda d: weights_of(d).update(offset=float("inf"))),
     r"an array's offset is inf, not an integer"),
    (with_edit(lambda d: weights_of(d).update(nbytes=1.5)),
     r"an array's nbytes is 1.5, not an integer"),
    (with_edit(lambda d: weights_of(d)["shape"].__setitem__(0, "8")),
     r"an array dimension is '8', not an integer"),
    (with_edit(lambda d: weights_of(d)["shape"].__setitem__(0, True)),
     r"an array dimension is True, not an integer"),
    # Consistent kinds, inconsistent data flow: refused at load naming the tensor, not a
    # KeyError in the first run.
    (with_edit(lambda d: d["models"][0]["inputs"][0].update(name="renamed")),
     r"device program 0 reads tensor '.*', which nothing before it makes"),
    (with_edit(lambda d: d["models"][0]["programs"][0]["inputs"].__setitem__(0, 999)),
     r"device program 0 names tensor slot 999 of"),
])
def test_unknown_or_inconsistent_descriptions_are_named(mlp_file: bytes, edit, message) -> None:
    with pytest.raises(InvalidModel, match=message):
        offline.load(reseal(mlp_file, edit))


def test_description_that_is_not_json(mlp_file: bytes) -> None:
    hlen, dlen = HEADER.unpack_from(mlp_file)[3], HEADER.unpack_from(mlp_file)[5]
    raw = bytearray(mlp_file)
    raw[hlen:hlen + 2] = b"{]"
    crc = zlib.crc32(raw[52:], zlib.crc32(raw[:48]))
    struct.pack_into("<I", raw, 48, crc)
    with pytest.raises(InvalidModel, match="description is not valid JSON"):
        offline.load(bytes(raw))
    assert dlen > 2


# ---- inspect ----------------------------------------------------------------------------
def test_inspect_summarizes_without_building() -> None:
    compiled, _ = compiled_zoo("branchy", max_streams=3)
    data = offline.save(compiled)
    info = offline.inspect(data)
    json.dumps(info)  # JSON-ready
    assert info["header"]["magic"] == "GEOM" and info["header"]["file_bytes"] == len(data)
    assert info["name"] == "branchy" and info["gear"] is None
    assert info["signature"] == {
        "inputs": [{"name": "input", "dtype": "float32", "shape": [1, 8, 16, 16]}],
        "outputs": [{"name": "output", "dtype": "float32", "shape": [1, 8, 16, 16]}]}
    (summary,) = info["models"]
    (program,) = compiled.programs
    assert summary["programs"] == [{
        "index": program.index, "engine": "device", "tensors": len(program.tensors),
        "tasks": len(program.tasks), "streams": program.num_streams,
        "events": program.num_events, "arena_bytes": program.arena_bytes,
        "weights_bytes": program.weight_bytes}]
    assert program.num_streams == 3
    assert summary["inputs"] == [{"name": s.name, "dtype": s.dtype.value, "shape": list(s.shape)}
                                 for s in compiled.inputs]
    assert summary["memory"] == dataclasses.asdict(compiled.report.memory)
    assert summary["weights_bytes"] == program.weight_bytes
    assert summary["report"]["passes"] == json.loads(compiled.report.to_json())["passes"]
    assert summary["report_text"] == compiled.report.render()


def test_inspect_still_reads_a_file_with_fields_it_does_not_know(mlp_file: bytes) -> None:
    data = reseal(mlp_file, with_edit(lambda d: d["models"][0]["report"].update(novel=1)))
    info = offline.inspect(data)
    assert info["models"][0]["report"]["novel"] == 1
    assert info["models"][0]["report_text"] is None  # the report cannot be rebuilt here


# ---- Session ----------------------------------------------------------------------------
def test_session_runs_offline_bytes_and_paths_without_compiling(tmp_path, monkeypatch) -> None:
    compiled, inputs = compiled_zoo("mobilenetv2")
    want = runtime.load(compiled).execute(inputs)
    offline.write(compiled, tmp_path / "m.om")

    def refuse(*args, **kwargs):
        raise AssertionError("an offline model must not be compiled")

    monkeypatch.setattr("graphengine.server.core.session.compile_graph", refuse)
    monkeypatch.setattr("graphengine.server.core.session.analyze", refuse)
    with graphengine.Session() as sess:
        for source in ((tmp_path / "m.om").read_bytes(), str(tmp_path / "m.om"),
                       tmp_path / "m.om"):
            gid = sess.add_graph(source)
            info = sess.graph_info(gid)
            assert info.name == "mobilenetv2" and not info.compiled
            assert [(i.name, i.shape) for i in info.inputs] == [("input", (1, 3, 32, 32))]
            report = sess.compile_graph(gid)
            assert_same(report, compiled.report)
            got = sess.run_graph(gid, inputs)
            assert all(want[k].tobytes() == got[k].tobytes() for k in want)
        named = sess.add_graph((tmp_path / "m.om").read_bytes(), name="renamed")
        assert sess.graph_info(named).name == "renamed"


def test_session_serves_stored_gears_without_compiling(monkeypatch) -> None:
    model, models = gear_models((1, 4))
    data = offline.save(models, gear=offline.Gear("batch", (1, 4)))
    monkeypatch.setattr("graphengine.server.core.session.compile_graph", None)  # never called
    with graphengine.Session() as sess:
        gid = sess.add_graph(data)
        info = sess.graph_info(gid)
        assert info.inputs[0].shape == ("batch", 8)
        report = sess.compile_graph(gid)  # no shapes: the stored report of a stored gear
        assert report in [m.report for m in models]
        for batch, compiled in ((4, models[1]), (1, models[0])):
            inputs = zoo.random_inputs(model, seed=batch, batch=batch, dims={"seq": 8})
            want = runtime.load(compiled).execute(inputs)
            got = sess.run_graph(gid, inputs)
            assert all(want[k].tobytes() == got[k].tobytes() for k in want)
        assert sess.compile_graph(gid, {"input_ids": (4, 8), "attention_mask": (4, 8)}) \
            == models[1].report


def test_session_refuses_a_signature_the_file_does_not_hold() -> None:
    """Gears of a dim that is not the batch: a run must match one stored signature exactly."""
    model = zoo.bert(layers=1, hidden=32, heads=2, intermediate=64, vocab=50, seq="seq")
    graph = load_model(model)
    models = [compile_graph(graph, input_shapes={"input_ids": (1, q), "attention_mask": (1, q)})
              for q in (8, 16)]
    with graphengine.Session() as sess:
        gid = sess.add_graph(offline.save(models, gear=offline.Gear("seq", (8, 16))))
        assert sess.graph_info(gid).inputs[0].shape == (1, "seq")
        inputs = zoo.random_inputs(model, seed=1, dims={"seq": 16})
        want = runtime.load(models[1]).execute(inputs)
        got = sess.run_graph(gid, inputs)
        assert all(want[k].tobytes() == got[k].tobytes() for k in want)
        with pytest.raises(InvalidInput, match=r"compiled for input signatures .* it holds none "
                                               r"for input_ids\[1,12\]"):
            sess.run_graph(gid, zoo.random_inputs(model, seed=1, dims={"seq": 12}))


def test_session_rejects_a_damaged_offline_model(mlp_file: bytes) -> None:
    with graphengine.Session() as sess, pytest.raises(InvalidModel, match="checksum mismatch"):
        sess.add_graph(flip(mlp_file, len(mlp_file) - 10))
