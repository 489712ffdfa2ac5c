"""Bounds (engine/bounds.py): every number a request, a config or a file gives is checked
before the work it sizes, with INVALID_ARGUMENT beyond a hard bound and RESOURCE_EXHAUSTED
beyond a configured limit; a compile that cannot fit stops right after shape inference."""

from __future__ import annotations

import struct
import tracemalloc
import zlib

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import graphengine
from graphengine import _runtime
from graphengine.api.types import SessionLimits, SessionOptions
from graphengine.engine import bounds, offline, pipeline
from graphengine.engine.errors import InvalidInput, InvalidModel, ResourceExhausted
from graphengine.engine.offline_codec import PIECE, Reader
from graphengine.engine.pipeline import CompileOptions
from graphengine.kserve.v2 import grpc_service_pb2 as kpb
from graphengine.server.config import ConfigError, ServerConfig
from graphengine.server.core.session import Session
from graphengine.server.rpc import kserve_codec
from tests.integration.ge_models import mlp_onnx
from tests.unit.test_offline import reseal


# ---- the helpers -------------------------------------------------------------------------
def test_element_count_orders_hard_bounds_payload_and_limit() -> None:
    assert bounds.element_count("t", [2, 3], limit=6, present=24, unit=4) == 6
    assert bounds.element_count("t", [0, 1 << 20, 1 << 20]) == 0
    with pytest.raises(InvalidInput, match="negative dimension"):
        bounds.element_count("t", [-1, 3])
    with pytest.raises(InvalidInput, match=f"rank 33 exceeds the bound of {bounds.MAX_RANK}"):
        bounds.element_count("t", [1] * 33)
    with pytest.raises(InvalidInput, match=f"bound of {bounds.MAX_ELEMENTS} elements"):
        bounds.element_count("t", [0, 1 << 30, 1 << 30])  # holds nothing, still absurd
    with pytest.raises(InvalidInput, match="needs 24 bytes, the request carries 8"):
        bounds.element_count("t", [2, 3], limit=1, present=8, unit=4)  # malformed first
    with pytest.raises(ResourceExhausted, match="'t'.*7 elements.*at most 6"):
        bounds.element_count("'t'", [7], limit=6)


@pytest.mark.parametrize("make, match", [
    (lambda: CompileOptions(max_streams=10**9), "'max_streams' is 1000000000.*between 1 and 64"),
    (lambda: CompileOptions(data_parallel=10**6), "'data_parallel' is 1000000.*and 64"),
    (lambda: SessionOptions(max_streams=65), "'max_streams' is 65; it must be between 0 and 64"),
    (lambda: SessionOptions(instances=10**6), "'instances' is 1000000.*between 1 and 64"),
    (lambda: SessionOptions(memory_limit_bytes=-1), "'memory_limit_bytes' must be >= 0"),
    (lambda: Session({"max_streams": 10**9}), "max_streams"),
    (lambda: Session({"options": {"data_parallel": "100000"}}), "data_parallel"),
], ids=["compile_streams", "data_parallel", "session_streams", "instances", "memory",
        "session", "session_compile_option"])
def test_options_beyond_their_hard_bound_are_invalid(make, match) -> None:
    with pytest.raises(InvalidInput, match=match):
        make()


def test_a_machine_with_more_threads_than_chunks_still_opens_sessions() -> None:
    assert SessionOptions().compile_options(threads=512).data_parallel == \
        bounds.MAX_DATA_PARALLEL


def test_config_values_are_bounded() -> None:
    for key, value in [("worker_threads", 10**6), ("stream_max_inflight", 10**7),
                       ("max_tensor_elements", 1 << 50), ("repository_load_threads", 10**4)]:
        with pytest.raises(ConfigError, match=key):
            ServerConfig(**{key: value})


# ---- gears and compile shapes ------------------------------------------------------------
@pytest.fixture
def no_expensive_passes(monkeypatch):
    """Fails the test if compiling got past shape inference: folding, placement, build."""
    def refuse(*args, **kwargs):
        raise AssertionError("an expensive compile stage ran for a refused request")

    for name in ("canonicalize", "fold_constants", "place_nodes", "build_programs"):
        monkeypatch.setattr(pipeline, name, refuse)


def test_gear_count_and_size_are_bounded() -> None:
    with Session() as sess:
        with pytest.raises(InvalidInput, match="17 gears given; a graph may have at most 16"):
            sess.add_graph(mlp_onnx(batch="N"), gears=list(range(1, 18)))
        with pytest.raises(InvalidInput, match="gear 1000000 exceeds the bound of 65536"):
            sess.add_graph(mlp_onnx(batch="N"), gears=[1, 10**6])


def test_a_gear_over_the_element_limit_is_refused_at_add_graph(no_expensive_passes) -> None:
    with Session(limits=SessionLimits(max_tensor_elements=10_000)) as sess:
        with pytest.raises(ResourceExhausted, match=r"gear 1000: input 'x'.*16000 elements"):
            sess.add_graph(mlp_onnx(batch="N", features=16), gears=[1, 1000])
        assert not sess.list_graphs()


def test_a_gear_over_the_memory_quota_stops_after_shape_inference(no_expensive_passes) -> None:
    with Session({"memory_limit_bytes": 100_000}) as sess:
        gid = sess.add_graph(mlp_onnx(batch="N", features=16), gears=[60_000])
        with pytest.raises(ResourceExhausted) as info:
            sess.compile_graph(gid)
    message = str(info.value)
    assert "gear 60000" in message and "tensor 'x'" in message and "100000 byte limit" in message
    assert info.value.tensor == "x" and sess.device_bytes == 0


def test_a_huge_compile_shape_is_refused_before_inference(monkeypatch) -> None:
    monkeypatch.setattr(pipeline, "compile_graph", lambda *a, **k: pytest.fail("compiled"))
    with Session() as sess:
        gid = sess.add_graph(mlp_onnx(batch="N"))
        with pytest.raises(ResourceExhausted, match=r"input 'x'.*at most 2147483648"):
            sess.compile_graph(gid, {"x": (10**9, 16)})
        with pytest.raises(InvalidInput, match="negative dimension"):
            sess.compile_graph(gid, {"x": (-5, 16)})


def test_a_compile_shape_over_the_device_memory_names_the_tensor(no_expensive_passes) -> None:
    # 100M x 16 float32 = 6.4 GB: within the element limit, beyond a 1 GB device.
    with Session(limits=SessionLimits(device_memory_bytes=1 << 30)) as sess:
        gid = sess.add_graph(mlp_onnx(batch="N"))
        with pytest.raises(ResourceExhausted, match=r"tensor 'x' \(an input.*the device has"):
            sess.compile_graph(gid, {"x": (100_000_000, 16)})


def test_a_symbolic_run_with_a_huge_shape_is_refused_without_compiling(monkeypatch) -> None:
    monkeypatch.setattr(pipeline, "compile_graph", lambda *a, **k: pytest.fail("compiled"))
    with Session() as sess:
        gid = sess.add_graph(mlp_onnx(batch="N"))
        huge = np.broadcast_to(np.float32(1), (1 << 30, 16))  # zero strides: no memory
        with pytest.raises(ResourceExhausted, match="input 'x'"):
            sess.run_graph(gid, {"x": huge})


def test_an_intermediate_blow_up_names_its_node(no_expensive_passes) -> None:
    graph = helper.make_graph(
        [helper.make_node("Tile", ["x", "reps"], ["wide"], name="tile_up"),
         helper.make_node("ReduceSum", ["wide", "axes"], ["y"], name="sum", keepdims=0)],
        "blow_up", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        initializer=[numpy_helper.from_array(np.array([1, 1 << 20], np.int64), "reps"),
                     numpy_helper.from_array(np.array([1], np.int64), "axes")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    # 16 MiB per sample: batch splitting could not make it smaller than that.
    with Session({"memory_limit_bytes": 1 << 20}) as sess:
        gid = sess.add_graph(model)
        with pytest.raises(ResourceExhausted,
                           match=r"tensor 'wide' \(an output of node 'tile_up', per sample"):
            sess.compile_graph(gid, {"x": (2, 4)})


def test_a_quota_that_fits_still_compiles_and_runs() -> None:
    with Session({"memory_limit_bytes": 1 << 26}) as sess:
        gid = sess.add_graph(mlp_onnx(batch="N"), gears=[1, 4])
        sess.compile_graph(gid)
        out = sess.run_graph(gid, {"x": np.ones((3, 16), np.float32)})
        assert out["y"].shape == (3, 5)


# ---- host programs: kernels that size their outputs from data -----------------------------
def test_host_budget_counts_what_numpy_holds_and_refuses_past_it() -> None:
    guard = _runtime.HostBudget(1 << 20)
    with guard:
        a = np.ones(1000, np.float32)
        assert guard.held >= 4000 and a.ctypes.data % 64 == 0
        with pytest.raises(MemoryError):
            np.tile(a, 1 << 20)  # 4 GiB
        b = np.concatenate([a, a])
    outside = np.ones(1 << 20)  # after exit: numpy's own allocator, not counted
    assert guard.refused >= 4000 << 20 and guard.peak < 1 << 20
    assert guard.held >= 12000
    del a, b  # arrays made inside free through the budget after it is left
    assert guard.held == 0 and outside.sum() == 1 << 20


def _host_sized(op: str) -> onnx.ModelProto:
    """A graph whose host node sizes its output from the input 'n'."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 2])
    n = helper.make_tensor_value_info("n", TensorProto.INT64, [2])
    nodes = {
        "Tile": [helper.make_node("Tile", ["x", "n"], ["y"], name="grow")],
        "Expand": [helper.make_node("Expand", ["x1", "n"], ["y"], name="grow")],
        "ConstantOfShape": [helper.make_node("ConstantOfShape", ["n"], ["y"], name="grow")],
        "Range": [helper.make_node("ReduceProd", ["n"], ["lim"], keepdims=0),
                  helper.make_node("Cast", ["lim"], ["limf"], to=TensorProto.FLOAT),
                  helper.make_node("Range", ["zero", "limf", "one"], ["y"], name="grow")],
    }[op]
    inits = [numpy_helper.from_array(np.array(0, np.float32), "zero"),
             numpy_helper.from_array(np.array(1, np.float32), "one")]
    if op == "Expand":
        nodes.insert(0, helper.make_node("ReduceMax", ["x"], ["x1"], keepdims=0))
    graph = helper.make_graph(nodes, f"sized_{op}", [x, n],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                              initializer=inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize("op", ["Tile", "Expand", "ConstantOfShape", "Range"])
def test_a_host_kernel_sized_by_data_is_held_to_the_quota(op) -> None:
    x = np.ones((2, 2), np.float32)
    with Session({"memory_limit_bytes": 1 << 26}) as sess:
        gid = sess.add_graph(_host_sized(op))
        assert sess.run_graph(gid, {"x": x, "n": np.array([4, 3])})["y"].size > 0
        given = r"float32\[\], float32\[\]" if op == "Range" else r"int64\[2\] \[100000, 100000\]"
        with pytest.raises(ResourceExhausted, match=(
                rf"node 'grow' \({op}\) needs more memory.* would hold \d+ bytes.*{given}.*"
                rf"session '.*' uses \d+ of its 67108864 byte limit")):
            sess.run_graph(gid, {"x": x, "n": np.array([100000, 100000])})
        assert sess.run_graph(gid, {"x": x, "n": np.array([4, 3])})["y"].size > 0


def test_an_offline_host_step_is_held_to_the_quota() -> None:
    """A file's host step sizes its output from the file's own numbers (here an attribute
    the load does not re-infer): the run is held to the quota all the same."""
    graph = helper.make_graph(
        [helper.make_node("RandomNormal", [], ["noise"], name="noise", shape=[2, 3]),
         helper.make_node("Add", ["x", "noise"], ["y"], name="add")], "noisy",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    with graphengine.Session() as sess:
        data = sess.export_model(sess.add_graph(model))

    def huge(desc: dict) -> dict:
        (step,) = [s for p in desc["models"][0]["programs"] for s in p.get("steps", ())]
        step["attrs"]["shape"] = [1 << 20, 1 << 20]
        return desc

    with Session({"memory_limit_bytes": 1 << 26}) as sess:
        gid = sess.add_graph(reseal(data, huge))
        with pytest.raises(ResourceExhausted, match=r"node 'noise' \(RandomNormal\)"):
            sess.run_graph(gid, {"x": np.ones((2, 3), np.float32)})


# ---- offline files -----------------------------------------------------------------------
@pytest.fixture(scope="module")
def small_file() -> bytes:
    with graphengine.Session() as sess:
        return sess.export_model(sess.add_graph(mlp_onnx(batch=2)))


def _first_array(desc: dict) -> dict:
    stack = [desc]
    while stack:
        x = stack.pop()
        if isinstance(x, dict) and x.get("$") == "array" and "offset" in x:
            return x
        stack.extend(x.values() if isinstance(x, dict) else x if isinstance(x, list) else [])
    raise AssertionError("no stored array")


def test_a_tiny_file_declaring_a_huge_array_allocates_nothing(small_file) -> None:
    def huge(desc: dict) -> dict:
        arr = _first_array(desc)
        nbytes = 1 << 34  # 16 GiB, from four pieces of 64 bytes the file lists
        itemsize = np.dtype(arr["dtype"]).itemsize
        arr.update(shape=[nbytes // itemsize], nbytes=nbytes, pieces=[[0, 64]] * 4)
        del arr["offset"]
        return desc

    data = reseal(small_file, huge)
    assert len(data) < 64 * 1024
    tracemalloc.start()
    try:
        with pytest.raises(InvalidModel, match="pieces .* hold 256 of its 17179869184"):
            offline.load_all(data)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 16 << 20, peak  # the file's own size in copies, not the declared 16 GiB


def test_shared_pieces_cannot_multiply_the_weights_without_bound() -> None:
    reader = Reader(np.zeros(PIECE, np.uint8))
    count = bounds.PIECE_EXPANSION + 1
    spec = {"$": "array", "dtype": "uint8", "shape": [count * PIECE], "nbytes": count * PIECE,
            "pieces": [[0, PIECE]] * count}
    with pytest.raises(InvalidModel, match=f"more than {bounds.PIECE_EXPANSION} times"):
        reader.array(spec)
    ok = dict(spec, shape=[2 * PIECE], nbytes=2 * PIECE, pieces=[[0, PIECE]] * 2)
    assert reader.array(ok).nbytes == 2 * PIECE


@pytest.mark.parametrize("depth", [bounds.MAX_NESTING + 1, 100_000], ids=["decoded", "parser"])
def test_deeply_nested_description_is_invalid_not_a_recursion_error(small_file, depth) -> None:
    # A placeholder string exactly as long as the brackets that replace it: the header's
    # lengths stay right, and only the checksum is redone (no JSON parser touches it here).
    placeholder = "x" * (2 * depth - 2)

    def mark(desc: dict) -> dict:
        desc["models"][0]["report"]["graph"] = placeholder
        return desc

    data = bytearray(reseal(small_file, mark))
    at = data.index(f'"{placeholder}"'.encode())
    data[at:at + 2 * depth] = b"[" * depth + b"]" * depth
    struct.pack_into("<I", data, 48, zlib.crc32(data[52:], zlib.crc32(data[:48])))
    with pytest.raises(InvalidModel, match="nested too deep"):
        offline.load_all(bytes(data))


def test_too_many_stored_signatures_are_refused(small_file) -> None:
    def many(desc: dict) -> dict:
        desc["models"] = desc["models"] * (bounds.MAX_OFFLINE_MODELS + 1)
        return desc

    with pytest.raises(InvalidModel, match=f"at most {bounds.MAX_OFFLINE_MODELS}"):
        offline.load_all(reseal(small_file, many))


# ---- KServe ------------------------------------------------------------------------------
def _kserve(shape: list[int], raw: bytes) -> kpb.ModelInferRequest:
    request = kpb.ModelInferRequest(model_name="m")
    request.inputs.add(name="x", datatype="FP32", shape=shape)
    request.raw_input_contents.append(raw)
    return request


@pytest.mark.parametrize("shape, match", [
    ([1 << 20, 1 << 10], "needs 4294967296 bytes, the request carries 16"),
    ([0, 1 << 40, 1 << 40], "exceeds the bound"),  # numpy cannot even shape it
    ([1] * 70, "rank 70"),
], ids=["more_than_its_bytes", "zero_and_huge", "rank"])
def test_kserve_shapes_are_checked_against_the_request(shape, match) -> None:
    with pytest.raises(InvalidInput, match=match):
        kserve_codec.decode_inputs(_kserve(shape, b"\0" * 16))
