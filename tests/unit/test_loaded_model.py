"""LoadedModel (engine/runtime.py): instances, async execution, sink mode, zero copy and
statistics, on small models from the zoo and hand-built ONNX graphs, against onnxruntime or
numpy."""

from __future__ import annotations

import concurrent.futures
import threading

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from graphengine import _runtime
from graphengine.engine.errors import InvalidInput
from graphengine.engine.importers import load_model
from graphengine.engine.model import DeviceProgram, HostProgram
from graphengine.engine.pipeline import compile_graph
from graphengine.engine.runtime import LoadedModel, RuntimeStats, kernel_info
from tests import zoo

DEVICE = _runtime.Device(2)


def _compile(model: onnx.ModelProto, feeds: dict):
    return compile_graph(load_model(model), input_shapes={k: v.shape for k, v in feeds.items()})


@pytest.fixture(scope="module")
def mlp():
    model = zoo.mlp(batch=2, sizes=(32, 64, 16, 8))
    feeds = zoo.random_inputs(model, seed=0)
    return model, feeds, _compile(model, feeds)


def _mlp_ref(model: onnx.ModelProto, x: np.ndarray) -> np.ndarray:
    import onnxruntime as ort

    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, {"input": x})[0]


def _host_in_the_middle():
    """x -> Relu (device) -> CumProd (host) -> Sigmoid (device) -> y."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [3, 4])
    axis = helper.make_tensor("axis", TensorProto.INT64, [], [1])
    nodes = [helper.make_node("Relu", ["x"], ["r"]),
             helper.make_node("CumProd", ["r", "axis"], ["c"]),
             helper.make_node("Sigmoid", ["c"], ["y"])]
    graph = helper.make_graph(nodes, "hostmid", [x], [y], [axis])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def _host_ref(x: np.ndarray) -> np.ndarray:
    return 1 / (1 + np.exp(-np.cumprod(np.maximum(x, 0), axis=1)))


def test_instances_share_weights(mlp):
    model, feeds, compiled = mlp
    one = LoadedModel(compiled, DEVICE)
    three = LoadedModel(compiled, DEVICE, instances=3)
    prog = next(p for p in compiled.programs if isinstance(p, DeviceProgram))
    assert one.instances == 1 and three.instances == 3
    assert three.device_bytes == 3 * prog.arena_bytes + prog.weight_bytes
    s1, s3 = one.stats(), three.stats()
    assert s3.arena_bytes == 3 * s1.arena_bytes
    assert s3.weight_bytes == s1.weight_bytes > 0
    ref = _mlp_ref(model, feeds["input"])
    np.testing.assert_allclose(three.execute(feeds)["output"], ref, rtol=1e-4, atol=1e-5)
    with pytest.raises(InvalidInput, match="instances"):
        LoadedModel(compiled, DEVICE, instances=0)


def test_concurrent_callers_get_their_own_results(mlp):
    model, _, compiled = mlp
    lm = LoadedModel(compiled, DEVICE, instances=2)
    feeds = [zoo.random_inputs(model, seed=s) for s in range(6)]
    refs = [_mlp_ref(model, f["input"]) for f in feeds]
    errors: list[BaseException] = []

    def caller(i: int) -> None:
        try:
            for _ in range(25):
                out = lm.execute(feeds[i])["output"]
                np.testing.assert_allclose(out, refs[i], rtol=1e-4, atol=1e-5)
        except BaseException as e:  # reported below
            errors.append(e)

    threads = [threading.Thread(target=caller, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[0]
    assert lm.stats().runs == 150


def test_one_call_path_and_constant_outputs(mlp):
    model, feeds, compiled = mlp
    m = LoadedModel(compiled, DEVICE)
    assert m.direct is not None
    ref = _mlp_ref(model, feeds["input"])
    np.testing.assert_allclose(m.direct(feeds)["output"], ref, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(m.execute(feeds)["output"], ref, rtol=1e-4, atol=1e-5)
    # Anything but exactly the signature: the native check says which input and how, and
    # Python words it (or converts, for the general path).
    x = feeds["input"]
    mismatches = {
        "dtype": {"input": x.astype(np.float64)},
        "shape": {"input": x[:1]},
        "not_an_array": {"input": np.asfortranarray(x)},  # not C-contiguous
        "missing": {"other": x},
        "count": {"input": x, "extra": x},
    }
    for kind, bad in mismatches.items():
        got = m.direct(bad)
        assert isinstance(got, _runtime.RunMismatch) and got.kind == kind, (kind, got)
        assert got.input == (None if kind == "count" else "input")
    assert m.direct([x]).kind == "not_a_dict" and m.direct([x]).input is None
    with pytest.raises(InvalidInput, match="expected dtype float32, got float64"):
        m.execute(mismatches["dtype"])
    swapped = {"input": x.astype(">f4")}  # the same values in the other byte order
    assert m.direct(swapped).kind in ("dtype", "not_an_array")
    np.testing.assert_allclose(m.execute(swapped)["output"], ref, rtol=1e-4,
                               atol=1e-5)  # converted on the general path
    np.testing.assert_allclose(m.execute(mismatches["not_an_array"])["output"], ref, rtol=1e-4,
                               atol=1e-5)
    with pytest.raises(InvalidInput, match="expected shape"):
        m.execute(mismatches["shape"])
    with pytest.raises(InvalidInput, match="unknown input 'extra'"):
        m.execute(mismatches["count"])
    assert m.run(feeds, ["output"]).keys() == {"output"}
    with pytest.raises(InvalidInput, match="unknown output 'nope'"):
        m.run(feeds, ["nope"])
    # An output folded to a constant is handed out as a copy by the same one call.
    xi = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])
    s = helper.make_tensor_value_info("s", TensorProto.INT64, [2])
    g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"]),
                           helper.make_node("Shape", ["x"], ["s"])], "constout", [xi], [y, s])
    const_model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    xv = np.array([[-1, 2, -3], [4, -5, 6]], np.float32)
    c = LoadedModel(_compile(const_model, {"x": xv}), DEVICE)
    assert c.direct is not None
    for out in (c.execute({"x": xv}), c.direct({"x": xv})):
        assert np.array_equal(out["y"], np.maximum(xv, 0)) and out["s"].tolist() == [2, 3]
        out["s"][0] = 7  # the caller's copy
    assert c.execute({"x": xv})["s"].tolist() == [2, 3]


def test_execute_async_returns_futures(mlp):
    model, _, compiled = mlp
    lm = LoadedModel(compiled, DEVICE, instances=2)
    feeds = [zoo.random_inputs(model, seed=s) for s in range(5)]
    futures = [lm.execute_async(f) for f in feeds]
    assert all(isinstance(f, concurrent.futures.Future) for f in futures)
    for f, feed in zip(futures, feeds):
        np.testing.assert_allclose(f.result(timeout=60)["output"],
                                   _mlp_ref(model, feed["input"]), rtol=1e-4, atol=1e-5)
    bad = lm.execute_async({"input": np.zeros((2, 31), np.float32)})
    with pytest.raises(InvalidInput, match="expected shape"):
        bad.result(timeout=60)
    lm.close()


def test_sink_mode_on_a_device_only_model(mlp):
    model, _, compiled = mlp
    lm = LoadedModel(compiled, DEVICE)
    assert lm._sink_program() is not None
    feeds = [zoo.random_inputs(model, seed=s) for s in range(4)]
    refs = [_mlp_ref(model, f["input"]) for f in feeds]
    last = lm.execute(feeds, iterations=4)
    np.testing.assert_allclose(last["output"], refs[-1], rtol=1e-4, atol=1e-5)
    every = lm.execute(feeds, iterations=4, return_all=True)
    for out, ref in zip(every, refs):
        np.testing.assert_allclose(out["output"], ref, rtol=1e-4, atol=1e-5)
    same = lm.execute(feeds[1], iterations=3, return_all=True)
    assert len(same) == 3
    np.testing.assert_allclose(same[2]["output"], refs[1], rtol=1e-4, atol=1e-5)
    native = lm.stats().programs
    assert sum(s["runs"] for s in native.values()) == 3  # one launch per call
    assert lm.stats().iterations == 11
    with pytest.raises(InvalidInput, match="one per iteration"):
        lm.execute(feeds[:2], iterations=3)
    for wrong in (None, 7, "x"):  # a raw TypeError before (found by the fuzz harness)
        with pytest.raises(InvalidInput, match="must be a mapping of input name to array"):
            lm.execute(wrong, iterations=2)


def test_host_partitions_run_between_device_launches_and_sink_loops():
    model = _host_in_the_middle()
    x = np.random.default_rng(3).standard_normal((3, 4)).astype(np.float32)
    compiled = _compile(model, {"x": x})
    kinds = [type(p) for p in compiled.programs]
    assert HostProgram in kinds and DeviceProgram in kinds
    lm = LoadedModel(compiled, DEVICE, instances=2)
    assert lm._sink_program() is None
    np.testing.assert_allclose(lm.execute({"x": x})["y"], _host_ref(x), rtol=1e-5, atol=1e-6)
    xs = [x + i for i in range(3)]
    outs = lm.execute([{"x": v} for v in xs], iterations=3, return_all=True)
    for out, v in zip(outs, xs):
        np.testing.assert_allclose(out["y"], _host_ref(v), rtol=1e-5, atol=1e-6)


def test_zero_copy_and_copies_are_counted(mlp):
    model, feeds, compiled = mlp
    lm = LoadedModel(compiled, DEVICE)
    x = feeds["input"]
    lm.execute({"input": x})
    assert lm.stats().bytes_copied == 0 and lm.stats().bytes_zero_copy > 0
    xt = np.asfortranarray(x)  # not C-contiguous: one copy, counted
    np.testing.assert_allclose(lm.execute({"input": xt})["output"], _mlp_ref(model, x),
                               rtol=1e-4, atol=1e-5)
    assert lm.stats().bytes_copied == x.nbytes


def test_stats_shape(mlp):
    _, feeds, compiled = mlp
    lm = LoadedModel(compiled, DEVICE)
    lm.execute(feeds)
    s = lm.stats()
    assert isinstance(s, RuntimeStats)
    assert s.instances == 1 and s.weight_bytes > 0 and s.tasks >= 1 and s.programs
    assert s.runs == 1 and s.seconds > 0 and len(s.stream_seconds) == s.streams
    both = s + s  # a session adds its models' statistics up
    assert (both.runs, both.arena_bytes, both.streams, both.programs) == (
        2, 2 * s.arena_bytes, s.streams, {})
    assert both.stream_seconds == tuple(2 * v for v in s.stream_seconds)


def test_branchy_on_two_streams_with_instances():
    model = zoo.branchy(towers=4, channels=8, size=12)
    feeds = zoo.random_inputs(model, seed=1)
    from graphengine.engine.pipeline import CompileOptions

    one = LoadedModel(compile_graph(load_model(model), input_shapes={"input": (1, 8, 12, 12)}),
                      DEVICE)
    two = LoadedModel(compile_graph(load_model(model), CompileOptions(max_streams=2),
                                    input_shapes={"input": (1, 8, 12, 12)}), DEVICE, instances=2)
    ref = one.execute(feeds)["output"]
    for _ in range(3):
        np.testing.assert_allclose(two.execute(feeds)["output"], ref, rtol=1e-4, atol=1e-5)


def test_kernel_info_from_the_engine():
    info = kernel_info("Conv", ["float32", "float32"], [(1, 16, 8, 8), (16, 16, 3, 3)],
                       {"pads": [1, 1, 1, 1]})
    assert info["supported"] and info["preferred_format"] in info["formats"]
