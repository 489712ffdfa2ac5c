"""Fusion row rope: the rotate-half rotary embedding as one Rope node, exact against ONNX
Runtime; near misses stay the ops they are."""

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from graphengine import _runtime
from graphengine.engine.importers import load_model
from graphengine.engine.model import DeviceProgram
from graphengine.engine.pipeline import CompileOptions, compile_graph
from graphengine.engine.runtime import LoadedModel

RNG = np.random.default_rng(8)
BIG = np.iinfo(np.int64).max


def _rope_model(d=16, swap=False, halves_swapped=False, cos_input=False):
    """q [2, 3, 5, d] rotated by cos/sin [1, 1, 5, d]; `halves_swapped` negates the lower
    half instead (concat(-q[..., :h], q[..., h:]): not a rotation); `swap` writes the Muls'
    and the Add's operands the other way round; `cos_input` makes cos and sin graph inputs
    (computed at run time)."""
    h = d // 2
    bounds = ((0, h), (h, BIG)) if halves_swapped else ((h, BIG), (0, h))
    inits = [numpy_helper.from_array(np.array([v], np.int64), n) for n, v in (
        ("h", bounds[0][0]), ("end", bounds[0][1]), ("zero", bounds[1][0]),
        ("mid", bounds[1][1]), ("last", -1))]
    ang = np.arange(5)[:, None] * (1.0 / 10000 ** (np.arange(h) / h))[None]
    cos = np.cos(np.concatenate([ang, ang], -1)).astype(np.float32)[None, None]
    sin = np.sin(np.concatenate([ang, ang], -1)).astype(np.float32)[None, None]
    inputs = [helper.make_tensor_value_info("q", TensorProto.FLOAT, [2, 3, 5, d])]
    if cos_input:
        inputs += [helper.make_tensor_value_info(n, TensorProto.FLOAT, [1, 1, 5, d])
                   for n in ("cos", "sin")]
    else:
        inits += [numpy_helper.from_array(cos, "cos"), numpy_helper.from_array(sin, "sin")]
    pair = (lambda a, b: [b, a]) if swap else (lambda a, b: [a, b])
    nodes = [helper.make_node("Slice", ["q", "h", "end", "last"], ["x2"]),
             helper.make_node("Neg", ["x2"], ["nx2"]),
             helper.make_node("Slice", ["q", "zero", "mid", "last"], ["x1"]),
             helper.make_node("Concat", ["nx2", "x1"], ["rot"], axis=-1),
             helper.make_node("Mul", pair("q", "cos"), ["a"]),
             helper.make_node("Mul", pair("rot", "sin"), ["b"]),
             helper.make_node("Add", pair("a", "b"), ["y"])]
    graph = helper.make_graph(nodes, "rope", inputs,
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                              inits)
    feeds = {"q": RNG.standard_normal((2, 3, 5, d)).astype(np.float32)}
    if cos_input:
        feeds.update(cos=cos, sin=sin)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)],
                             ir_version=8), feeds


def _kernels(model, feeds):
    compiled = compile_graph(load_model(model), CompileOptions(lint=True))
    got = LoadedModel(compiled).execute(feeds)["y"]
    want = ort.InferenceSession(model.SerializeToString(), providers=[
        "CPUExecutionProvider"]).run(None, feeds)[0]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    return [t.op for p in compiled.programs if isinstance(p, DeviceProgram)
            for t in p.tasks if t.kind == "kernel"]


@pytest.mark.parametrize("swap", [False, True])
@pytest.mark.parametrize("cos_input", [False, True])
def test_rotate_half_rope_is_one_task(swap, cos_input):
    kinds = _kernels(*_rope_model(swap=swap, cos_input=cos_input))
    assert kinds == ["Rope"], kinds


def test_negating_the_other_half_is_not_a_rope():
    kinds = _kernels(*_rope_model(halves_swapped=True))
    assert "Rope" not in kinds and "Concat" in kinds, kinds


def test_the_rope_kernel_checks_its_operands():
    spec = {"name": "m", "arena_bytes": 4096, "num_streams": 1, "num_events": 0,
            "tensors": [{"name": n, "dtype": "float32", "shape": s, "region": "arena",
                         "offset": 1024 * i}
                        for i, (n, s) in enumerate((("x", [2, 4, 6]), ("cos", [1, 4, 6]),
                                                    ("sin", [1, 4, 6]), ("y", [2, 4, 6])))],
            "tasks": [{"kind": "kernel", "name": "r", "op": "Rope", "stream": 0,
                       "inputs": [0, 1, 2], "outputs": [3], "attrs": {}}],
            "inputs": [0, 1, 2], "outputs": [3]}
    m = _runtime.Model(_runtime.Device(), spec)
    x, c, s = (RNG.standard_normal(sh).astype(np.float32) for sh in ((2, 4, 6), (1, 4, 6),
                                                                       (1, 4, 6)))
    (y,) = m.execute([x, c, s])
    np.testing.assert_allclose(y, x * c + np.concatenate([-x[..., 3:], x[..., :3]], -1) * s,
                               rtol=1e-6, atol=1e-6)
    spec["tensors"][1]["shape"] = spec["tensors"][2]["shape"] = [1, 4, 3]
    with pytest.raises(_runtime.InvalidArgument, match=r"must span X's last axis \(6\)"):
        _runtime.Model(_runtime.Device(), spec)
