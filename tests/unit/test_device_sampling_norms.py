"""Device paths found missing or slow on an unseen third set: GridSample (a deformable
detector's sampling), PRelu (a separation net's activation), the global layer norm
(statistics over a whole sample) as a GroupNorm of one group, and the elementwise loops'
walk over short broadcast rows; each held to ONNX Runtime (and numpy) and checked to run on
the device."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from graphengine.engine.importers import load_model
from graphengine.engine.model import DeviceProgram
from graphengine.engine.ops.sampling import grid_sample
from graphengine.engine.pipeline import CompileOptions, compile_graph
from graphengine.engine.runtime import load


def _model(nodes, inputs, inits=(), name="g"):
    return helper.make_model(helper.make_graph(
        nodes, name, [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in inputs],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], list(inits)),
        opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def _run(model, feeds):
    compiled = compile_graph(load_model(model), CompileOptions(lint=True))
    ops = [t.op for p in compiled.programs if isinstance(p, DeviceProgram)
           for t in p.tasks if t.kind == "kernel"]
    hosts = [type(p).__name__ for p in compiled.programs].count("HostProgram")
    got = load(compiled).execute(feeds)["y"]
    want = ort.InferenceSession(model.SerializeToString(), providers=[
        "CPUExecutionProvider"]).run(None, feeds)[0]
    return got, want, ops, hosts


@pytest.mark.parametrize("mode", ["bilinear", "nearest"])
@pytest.mark.parametrize("padding", ["zeros", "border", "reflection"])
@pytest.mark.parametrize("align", [0, 1])
def test_grid_sample_runs_on_the_device(mode, padding, align):
    """Points inside and outside the image (the grid spans [-1.3, 1.3]), 300 of them (two
    chunks of the kernel's 256), against ONNX Runtime and the host's float64 rules."""
    rng = np.random.default_rng(7)
    x = rng.standard_normal((2, 5, 6, 7)).astype(np.float32)
    grid = rng.uniform(-1.3, 1.3, (2, 15, 20, 2)).astype(np.float32)
    model = _model([helper.make_node("GridSample", ["x", "g"], ["y"], mode=mode,
                                     padding_mode=padding, align_corners=align)],
                   [("x", x.shape), ("g", grid.shape)], name="grid_sample")
    model.opset_import[0].version = 16
    got, want, ops, hosts = _run(model, {"x": x, "g": grid})
    assert ops == ["GridSample"] and hosts == 0, ops
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    host = grid_sample(x, grid, {"mode": mode, "padding_mode": padding, "align_corners": align})
    np.testing.assert_allclose(got, host, rtol=1e-5, atol=1e-5)


def _conv_act(act_nodes, inits):
    rng = np.random.default_rng(3)
    w = [numpy_helper.from_array((rng.standard_normal(s) * 0.3).astype(np.float32), n)
         for n, s in (("w1", (32, 8, 3, 3)), ("w2", (16, 32, 1, 1)))]
    nodes = [helper.make_node("Conv", ["x", "w1"], ["c"], pads=[1] * 4), *act_nodes,
             helper.make_node("Conv", ["a", "w2"], ["y"])]
    return _model(nodes, [("x", (2, 8, 10, 10))], w + inits, name="prelu")


def test_prelu_by_one_slope_is_the_convolutions_leaky_relu():
    """torch's nn.PReLU() (one slope, [1]): LeakyRelu, which the Conv takes as a post-op.
    PRelu had no device kernel: each was a host step between two device programs."""
    slope = numpy_helper.from_array(np.array([0.2], np.float32), "s")
    model = _conv_act([helper.make_node("PRelu", ["c", "s"], ["a"])], [slope])
    x = np.random.default_rng(4).standard_normal((2, 8, 10, 10)).astype(np.float32)
    got, want, ops, hosts = _run(model, {"x": x})
    assert hosts == 0 and "PRelu" not in ops and ops.count("Conv") == 2, ops
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_prelu_by_channel_runs_on_the_device():
    """A slope per channel ([C, 1, 1]) is the device's broadcasting PRelu, in the
    convolutions' NHWC region (the loops read the slope over the stored channels)."""
    rng = np.random.default_rng(5)
    slope = numpy_helper.from_array(rng.uniform(0.05, 0.5, (32, 1, 1)).astype(np.float32), "s")
    model = _conv_act([helper.make_node("PRelu", ["c", "s"], ["a"])], [slope])
    x = rng.standard_normal((2, 8, 10, 10)).astype(np.float32)
    got, want, ops, hosts = _run(model, {"x": x})
    assert hosts == 0 and "PRelu" in ops, ops
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("gamma_first", [True, False])
def test_a_global_layer_norm_is_one_group_norm(gamma_first):
    """Conv-TasNet's gLN, g * (x - mean) / sqrt(var + eps) + b with the statistics over the
    channels and time of each sample (or the scale after the division): one GroupNorm of one
    group, where it ran as two reductions and four elementwise tasks."""
    rng = np.random.default_rng(6)
    c, length = 32, 40
    inits = [numpy_helper.from_array(rng.uniform(0.7, 1.3, (1, c, 1)).astype(np.float32), "g"),
             numpy_helper.from_array(rng.uniform(-0.1, 0.1, (1, c, 1)).astype(np.float32), "b"),
             numpy_helper.from_array(np.array([1, 2], np.int64), "axes"),
             numpy_helper.from_array(np.array(2.0, np.float32), "two"),
             numpy_helper.from_array(np.array(1e-8, np.float32), "eps")]
    nodes = [helper.make_node("ReduceMean", ["x", "axes"], ["m"], keepdims=1),
             helper.make_node("Sub", ["x", "m"], ["d"]),
             helper.make_node("Pow", ["d", "two"], ["sq"]),
             helper.make_node("ReduceMean", ["sq", "axes"], ["v"], keepdims=1),
             helper.make_node("Add", ["v", "eps"], ["ve"]),
             helper.make_node("Sqrt", ["ve"], ["sd"])]
    if gamma_first:
        nodes += [helper.make_node("Mul", ["g", "d"], ["gd"]),
                  helper.make_node("Div", ["gd", "sd"], ["n"]),
                  helper.make_node("Add", ["n", "b"], ["y"])]
    else:
        nodes += [helper.make_node("Div", ["d", "sd"], ["n"]),
                  helper.make_node("Mul", ["n", "g"], ["gn"]),
                  helper.make_node("Add", ["gn", "b"], ["y"])]
    model = _model(nodes, [("x", (2, c, length))], inits, name="gln")
    model.opset_import[0].version = 18
    x = (rng.standard_normal((2, c, length)) * 2 + 0.5).astype(np.float32)
    got, want, ops, hosts = _run(model, {"x": x})
    assert ops == ["GroupNorm"], ops
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("a_shape,b_shape", [
    ((1, 128, 1, 16), (1, 128, 32, 1)),   # Mamba's outer products: 4096 rows of 16, two threads
    ((3, 1, 5, 1, 7), (1, 4, 1, 6, 1)),   # every axis broadcast one way or the other
    ((2, 1, 300), (2, 70, 1))])           # rows over the threads' block edges
def test_two_sided_broadcasts_walk_their_rows(a_shape, b_shape):
    """The elementwise loops walk whole rows with an odometer (a division per axis per row
    cost more than a row of 16): every row's operands still found, held to numpy."""
    rng = np.random.default_rng(9)
    a = rng.standard_normal(a_shape).astype(np.float32)
    b = rng.standard_normal(b_shape).astype(np.float32)
    model = _model([helper.make_node("Mul", ["a", "b"], ["m"]),
                    helper.make_node("Sub", ["m", "b"], ["y"])],
                   [("a", a_shape), ("b", b_shape)], name="broadcast")
    got, want, ops, hosts = _run(model, {"a": a, "b": b})
    assert hosts == 0 and got.shape == np.broadcast_shapes(a_shape, b_shape)
    np.testing.assert_allclose(got, a * b - b, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)
