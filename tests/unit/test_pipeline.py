"""End to end in-process: ONNX -> six stages -> native runtime, against onnxruntime."""

import numpy as np
import onnxruntime as ort
import pytest

from graphengine.engine.importers import load_model
from graphengine.engine.pipeline import CompileOptions, compile_graph
from graphengine.engine.runtime import load
from tests import zoo

LINT = CompileOptions(lint=True)


def ort_outputs(model, inputs):
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    names = [o.name for o in sess.get_outputs()]
    return dict(zip(names, sess.run(names, inputs)))


def run_ours(model, inputs, options=LINT):
    compiled = compile_graph(load_model(model), options)
    return compiled, load(compiled).execute(inputs)


CASES = {
    "mlp": lambda: zoo.mlp(sizes=(64, 128, 128, 10)),
    "resnet": lambda: zoo.resnet(width=16, image=64, classes=10),
    "resnet_nobias": lambda: zoo.resnet(depths=(1, 1, 1, 1), width=8, image=32, classes=10,
                                        conv_bias=False),
    # the downsample branch after the main one: fusing the residual Add into the main
    # branch's Conv makes it read a value defined later; the pass manager restores order
    "resnet_downsample_last": lambda: zoo.resnet(depths=(1, 1), width=8, image=32,
                                                 classes=10, downsample_last=True),
    "mobilenetv2": lambda: zoo.mobilenetv2(width_mult=0.35, image=64, classes=10),
    "bert": lambda: zoo.bert(layers=2, hidden=64, heads=4, intermediate=128, vocab=100, seq=16),
    "branchy": lambda: zoo.branchy(towers=3, channels=8, size=16),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_model_matches_onnxruntime(name):
    model = CASES[name]()
    inputs = zoo.random_inputs(model, seed=1)
    compiled, ours = run_ours(model, inputs)
    ref = ort_outputs(model, inputs)
    assert set(ours) == set(ref)
    for key in ref:
        np.testing.assert_allclose(ours[key], ref[key], rtol=1e-3, atol=1e-4, err_msg=key)
    # everything in these models runs on the device engine once shapes are folded
    engines = {p.engine for p in compiled.report.partitions}
    assert engines == {"device"}, compiled.report.render()


def test_conv_bn_relu_fusions_are_reported():
    compiled, _ = run_ours(CASES["resnet"](), zoo.random_inputs(CASES["resnet"]()))
    fusions = compiled.report.fusions
    assert sum("Conv+BatchNormalization" in f for f in fusions) == 20
    assert any("Conv+Relu" in f for f in fusions)
    ops = {p.op_type for p in compiled.report.placements}
    assert "BatchNormalization" not in ops


def test_memory_plan_reuses_activations():
    model = CASES["resnet"]()
    compiled, _ = run_ours(model, zoo.random_inputs(model))
    mem = compiled.report.memory
    assert mem.lower_bound_bytes <= mem.arena_bytes <= 1.25 * mem.lower_bound_bytes
    total = sum(int(np.prod(s.shape)) * 4 for p in compiled.programs
                for s in getattr(p, "tensors", []) if s.region == "arena")
    assert mem.arena_bytes < total / 2  # reuse, not one slot per tensor


def test_host_partition_runs_ops_the_device_lacks():
    from onnx import TensorProto, helper

    # Atan has no device kernel: it must land on the host between two device partitions.
    nodes = [helper.make_node("Relu", ["x"], ["a"]),
             helper.make_node("Atan", ["a"], ["b"]),
             helper.make_node("Sigmoid", ["b"], ["y"])]
    graph = helper.make_graph(
        nodes, "hostmix", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 5])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 5])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    x = np.random.default_rng(0).normal(size=(2, 5)).astype(np.float32)
    compiled, ours = run_ours(model, {"x": x})
    assert [p.engine for p in compiled.report.partitions] == ["device", "host", "device"]
    host = [p for p in compiled.report.placements if p.engine == "host"]
    assert host and "no device kernel" in host[0].rejections[0]
    np.testing.assert_allclose(ours["y"], ort_outputs(model, {"x": x})["y"], rtol=1e-5)


def test_symbolic_batch_compiles_per_signature():
    model = zoo.mlp(sizes=(16, 32, 4), symbolic_batch=True)
    graph = load_model(model)
    for batch in (1, 5):
        x = np.random.default_rng(batch).normal(size=(batch, 16)).astype(np.float32)
        compiled = compile_graph(graph, LINT, input_shapes={graph.inputs[0].name: (batch, 16)})
        out = load(compiled).execute({graph.inputs[0].name: x})
        ref = ort_outputs(model, {graph.inputs[0].name: x})
        for k in ref:
            np.testing.assert_allclose(out[k], ref[k], rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("name", ["resnet", "mobilenetv2", "bert"])
def test_memory_plan_is_within_five_percent_of_the_lower_bound(name):
    model = CASES[name]()
    compiled = compile_graph(load_model(model), LINT,
                             input_shapes={k: v.shape for k, v in
                                           zoo.random_inputs(model).items()})
    mem = compiled.report.memory
    assert mem.lower_bound_bytes <= mem.arena_bytes <= 1.05 * mem.lower_bound_bytes


def test_folded_weights_are_weight_segments_in_place(monkeypatch):
    # Every BN-folded convolution weight is aligned, so with the size floor lowered the
    # largest become segments of their own (as many as the runtime takes), used in place;
    # the results, and an offline model's, are the bits of the packed layout.
    from graphengine import _runtime
    from graphengine.engine import offline
    from graphengine.engine.codegen import tasks
    from graphengine.engine.model import DeviceProgram

    model = zoo.resnet(depths=(1, 1, 1, 1), width=8, image=32, classes=10)
    inputs = zoo.random_inputs(model, seed=2)
    monkeypatch.setattr(tasks, "IN_PLACE_BYTES", 1 << 40)
    packed = compile_graph(load_model(model), LINT)
    monkeypatch.setattr(tasks, "IN_PLACE_BYTES", 1)
    split = compile_graph(load_model(model), LINT)
    (p1,) = [p for p in packed.programs if isinstance(p, DeviceProgram)]
    (p2,) = [p for p in split.programs if isinstance(p, DeviceProgram)]
    # packed: the arrays of 64 KiB and more, and the smaller rest (tasks.PACK_APART)
    assert len(p1.weights) == 2
    assert len(p2.weights) == _runtime.MAX_WEIGHT_SEGMENTS
    assert all(w.ctypes.data % 64 == 0 for w in p2.weights[:-2])  # the last two: packed
    assert sum(w.nbytes for w in p2.weights) <= p1.weight_bytes + 64 * len(p2.weights)
    want = load(packed).execute(inputs)
    reloaded = offline.load(offline.save(split))
    for got in (load(split).execute(inputs), load(reloaded).execute(inputs)):
        for key in want:
            np.testing.assert_array_equal(got[key], want[key])
