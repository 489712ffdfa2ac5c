"""The runtime's backend seam (runtime_ext/src/device.h): backends registered by name, each a
compile target the compiler learns from the device itself, and models compiled for one run on
its device. `ref` — plain kernels, memory it keeps apart from the host's — is a second
backend beside `host`: what it lacks the compiler places on the host engine, and every input
and output crosses through the device's copies, as for a discrete accelerator."""

from __future__ import annotations

import dataclasses

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from graphengine import _runtime
from graphengine.engine import offline
from graphengine.engine import target as targets
from graphengine.engine.errors import InvalidInput
from graphengine.engine.importers import load_model
from graphengine.engine.model import DeviceProgram
from graphengine.engine.pipeline import CompileOptions, compile_graph
from graphengine.engine.runtime import LoadedModel, default_device


def _mlp(rng) -> onnx.ModelProto:
    """MatMul -> Add -> Relu -> MatMul -> Softmax, with a Sigmoid branch added back in."""
    w1 = numpy_helper.from_array(rng.standard_normal((8, 16)).astype(np.float32), "w1")
    b1 = numpy_helper.from_array(rng.standard_normal((4, 16)).astype(np.float32), "b1")
    w2 = numpy_helper.from_array(rng.standard_normal((16, 6)).astype(np.float32), "w2")
    nodes = [
        helper.make_node("MatMul", ["x", "w1"], ["m1"], name="mm1"),
        helper.make_node("Add", ["m1", "b1"], ["a1"], name="bias"),
        helper.make_node("Relu", ["a1"], ["r1"], name="relu"),
        helper.make_node("Sigmoid", ["a1"], ["s1"], name="gate"),
        helper.make_node("Mul", ["r1", "s1"], ["g1"], name="mix"),
        helper.make_node("MatMul", ["g1", "w2"], ["m2"], name="mm2"),
        helper.make_node("Softmax", ["m2"], ["y"], name="softmax", axis=1),
    ]
    graph = helper.make_graph(
        nodes, "mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 6])], [w1, b1, w2])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _ort(model: onnx.ModelProto, feeds: dict) -> np.ndarray:
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)[0]


def test_backends_are_registered_by_name_and_each_is_a_compile_target():
    assert {"host", "ref"} <= set(_runtime.backends())
    assert set(_runtime.backends()) <= set(targets.names())
    with pytest.raises(_runtime.InvalidArgument, match="unknown backend 'cuda'; registered: host"):
        _runtime.Device(1, "cuda")
    with pytest.raises(_runtime.InvalidArgument, match="threads must be in"):
        _runtime.Device(-1, "ref")
    host, ref = _runtime.Device(1, "host"), _runtime.Device(1, "ref")
    assert (host.name, ref.name) == ("host", "ref")
    assert host.caps["host_visible"] and not ref.caps["host_visible"]
    assert host.caps["library"].startswith("oneDNN ") and ref.caps["library"] == ""
    assert set(ref.supported_ops()) < set(host.supported_ops())
    # The target is what the device says of itself.
    t = targets.get("ref")
    assert t.backend == "ref" and t.ops == frozenset(ref.supported_ops())
    assert not t.epilogues and not t.conv_blocks and t.blocked_format == ""
    assert targets.get("host").epilogues


def test_each_device_answers_for_its_own_kernels():
    ref = _runtime.Device(1, "ref")
    ok = ref.kernel_info("Add", ["float32", "float32"], [[2, 3], [2, 3]])
    assert ok["supported"] and ok["reason"] == ""
    broadcast = ref.kernel_info("Add", ["float32", "float32"], [[2, 3], [3]])
    assert not broadcast["supported"] and "equal shapes" in broadcast["reason"]
    f64 = ref.kernel_info("Relu", ["float64"], [[2]])
    assert not f64["supported"] and "float32 only" in f64["reason"]
    attrs = ref.kernel_info("MatMul", ["float32", "float32"], [[2, 3], [3, 4]],
                            {"_activation": "Relu"})
    assert not attrs["supported"] and "'_activation'" in attrs["reason"]
    assert not ref.kernel_info("Softmax", ["float32"], [[2, 3]])["supported"]
    # The host answers the broadcast Add the ref device refuses.
    assert _runtime.Device(1).kernel_info("Add", ["float32", "float32"], [[2, 3], [3]])["supported"]


def test_a_model_compiled_for_the_ref_backend_runs_on_its_device():
    rng = np.random.default_rng(0)
    model = _mlp(rng)
    feeds = {"x": rng.standard_normal((4, 8)).astype(np.float32)}
    compiled = compile_graph(load_model(model), CompileOptions(target="ref"))
    assert compiled.backend == "ref"
    engines = {p.node: p.engine for p in compiled.report.placements}
    assert engines["mm1"] == engines["relu"] == engines["mix"] == "device"
    assert engines["softmax"] == "host"  # the ref device has no Softmax
    softmax = next(p for p in compiled.report.placements if p.node == "softmax")
    assert any("the ref device has no Softmax kernel" in r for r in softmax.rejections)
    assert compiled.report.fusions == []  # no epilogues, no EltwiseChain on this device
    loaded = LoadedModel(compiled)
    assert loaded.device.name == "ref"
    got = loaded.execute(feeds)["y"]
    np.testing.assert_allclose(got, _ort(model, feeds), rtol=1e-5, atol=1e-6)
    stats = loaded.stats()
    # Not host visible: nothing bound in place, the input and the device program's outputs
    # were copied through the device.
    assert stats.bytes_zero_copy == 0 and stats.bytes_copied >= feeds["x"].nbytes
    # The same model on the host fuses and binds in place.
    on_host = compile_graph(load_model(model), CompileOptions())
    assert on_host.backend == "host" and on_host.report.fusions
    host_run = LoadedModel(on_host)
    np.testing.assert_allclose(host_run.execute(feeds)["y"], got, rtol=1e-5, atol=1e-6)
    assert host_run.stats().bytes_zero_copy > 0


def test_streams_and_sink_mode_on_a_device_that_is_not_host_visible():
    """Two streams (events between them) and N iterations per launch through the copies."""
    rng = np.random.default_rng(1)
    model = _mlp(rng)
    compiled = compile_graph(load_model(model), CompileOptions(target="ref", max_streams=2))
    prog = next(p for p in compiled.programs if isinstance(p, DeviceProgram))
    assert prog.num_streams == 2 and prog.num_events > 0  # Relu and Sigmoid side by side
    loaded = LoadedModel(compiled, instances=2)
    xs = rng.standard_normal((3, 4, 8)).astype(np.float32)
    for x in xs:
        np.testing.assert_allclose(loaded.execute({"x": x})["y"], _ort(model, {"x": x}),
                                   rtol=1e-5, atol=1e-6)
    native = loaded.natives[prog.index]
    assert prog.input_names == ["x"]
    outs = native.execute([[x] for x in xs], iterations=3, return_all=True)
    assert len(outs) == 3
    for x, out in zip(xs, outs):
        for a, b in zip(out, native.execute([x])):
            np.testing.assert_array_equal(a, b)
    assert not np.array_equal(outs[0][0], outs[1][0])


def test_a_model_loads_only_on_the_backend_it_was_compiled_for(tmp_path):
    rng = np.random.default_rng(2)
    compiled = compile_graph(load_model(_mlp(rng)), CompileOptions(target="ref"))
    with pytest.raises(InvalidInput, match="compiled for backend 'ref', not for a 'host' device"):
        LoadedModel(compiled, default_device())
    # The backend travels in the offline model.
    again = offline.load(offline.save(compiled))
    assert again.backend == "ref" and LoadedModel(again).device.name == "ref"
    elsewhere = dataclasses.replace(compiled, backend="npu")
    with pytest.raises(InvalidInput, match="unknown backend 'npu'; registered: host, ref"):
        LoadedModel(elsewhere)


def test_a_session_compiles_for_the_target_its_options_name():
    """Compile option `target` in a session: its models load on that backend's device, the
    session's own (host) device stays for models compiled for the host."""
    import graphengine

    rng = np.random.default_rng(3)
    model = _mlp(rng)
    feeds = {"x": rng.standard_normal((4, 8)).astype(np.float32)}
    with graphengine.Session({"options": {"target": "ref"}}) as sess:
        gid = sess.add_graph(model)
        report = sess.compile_graph(gid)
        assert {p.engine for p in report.placements} == {"device", "host"}
        np.testing.assert_allclose(sess.run_graph(gid, feeds)["y"], _ort(model, feeds),
                                   rtol=1e-5, atol=1e-6)
        assert sess.runtime_stats().bytes_zero_copy == 0  # its device binds nothing in place
    with pytest.raises(InvalidInput, match="compile option 'target' must be one of"):
        graphengine.Session({"options": {"target": "tpu"}})
