"""Fusion row conv_split: a Conv whose only reader is a Split along its output channels
becomes one Conv per part (YOLO's C2f: cv1 -> Split -> bottleneck -> Concat), so no
TransData goes around a plain Split in an NHWC region."""

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from graphengine.engine.importers import load_model
from graphengine.engine.pipeline import compile_graph
from graphengine.engine.runtime import LoadedModel, default_device

RNG = np.random.default_rng(5)


def _c2f(sizes=(8, 8), bias=True, residual=False, act=True):
    """x -> 1x1 Conv 6->sum(sizes) [SiLU] -> Split(channels) -> a 3x3 Conv on the last part,
    its [+ part] -> Concat(parts, conv) -> 1x1 Conv."""
    c = sum(sizes)
    inits = {"w": RNG.normal(0, 0.3, (c, 6, 1, 1)), "b": RNG.normal(0, 0.3, c),
             "w2": RNG.normal(0, 0.3, (sizes[-1], sizes[-1], 3, 3)),
             "w3": RNG.normal(0, 0.3, (4, c + sizes[-1], 1, 1)),
             "split": np.array(sizes, np.int64)}
    nodes = [helper.make_node("Conv", ["x", "w", "b"] if bias else ["x", "w"], ["c"])]
    y = "c"
    if act:
        nodes += [helper.make_node("Sigmoid", ["c"], ["s"]),
                  helper.make_node("Mul", ["c", "s"], ["a"])]
        y = "a"
    parts = [f"p{k}" for k in range(len(sizes))]
    nodes.append(helper.make_node("Split", [y, "split"], parts, axis=1))
    nodes.append(helper.make_node("Conv", [parts[-1], "w2"], ["m"], pads=[1, 1, 1, 1]))
    last = "m"
    if residual:
        nodes.append(helper.make_node("Add", ["m", parts[-1]], ["r"]))
        last = "r"
    nodes += [helper.make_node("Concat", [*parts, last], ["cat"], axis=1),
              helper.make_node("Conv", ["cat", "w3"], ["y"])]
    graph = helper.make_graph(
        nodes, "c2f", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 6, 12, 12])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(np.asarray(v, v.dtype if v.dtype == np.int64 else np.float32),
                                 k) for k, v in inits.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


@pytest.mark.parametrize("sizes, bias, residual, act", [
    ((8, 8), True, True, True), ((4, 12), False, False, True), ((5, 3, 8), True, True, False)])
def test_a_conv_split_along_channels_is_a_conv_per_part(sizes, bias, residual, act) -> None:
    model = _c2f(sizes, bias, residual, act=act)
    compiled = compile_graph(load_model(model), input_shapes={"x": (1, 6, 12, 12)})
    ops_ = [p.op_type for p in compiled.report.placements]
    assert "Split" not in ops_, compiled.report.render()
    assert sum(f.startswith("Conv+Split") for f in compiled.report.fusions) == 1
    # the region keeps its format: only the image in and the result out are converted
    tasks = [t.op for p in compiled.programs for t in p.tasks if t.kind == "kernel"]
    assert tasks.count("TransData") <= 2, tasks
    x = RNG.normal(size=(1, 6, 12, 12)).astype(np.float32)
    got = LoadedModel(compiled, default_device(2)).run({"x": x})["y"]
    want = ort.InferenceSession(model.SerializeToString(),
                                providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_a_conv_output_with_another_reader_keeps_its_split() -> None:
    model = _c2f((6, 6), act=False)
    model.graph.node.append(helper.make_node("ReduceMean", ["c"], ["extra"], keepdims=0))
    model.graph.output.append(helper.make_tensor_value_info("extra", TensorProto.FLOAT, None))
    compiled = compile_graph(load_model(model), input_shapes={"x": (1, 6, 12, 12)})
    assert "Split" in [p.op_type for p in compiled.report.placements]
    assert not any(f.startswith("Conv+Split") for f in compiled.report.fusions)
