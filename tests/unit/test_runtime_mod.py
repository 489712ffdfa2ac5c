"""Mod on the device (a CANINE's hashed character ids took four host steps and cut its
program in three): both sign rules, every integer and float type the runtime computes on,
held to the host's reference kernel (numpy) and to ONNX Runtime where ONNX defines it."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from graphengine.engine.importers import load_model
from graphengine.engine.ops.binary import _mod
from graphengine.engine.pipeline import CompileOptions, compile_graph
from graphengine.engine.runtime import DeviceProgram, LoadedModel

ONNX_TYPE = {np.int64: TensorProto.INT64, np.int32: TensorProto.INT32,
             np.float32: TensorProto.FLOAT, np.float64: TensorProto.DOUBLE}


def _model(dtype, fmod: int, a_shape, b_shape):
    t = ONNX_TYPE[dtype]
    node = helper.make_node("Mod", ["a", "b"], ["y"], fmod=fmod)
    graph = helper.make_graph([node], "mod", [helper.make_tensor_value_info("a", t, a_shape),
                                              helper.make_tensor_value_info("b", t, b_shape)],
                              [helper.make_tensor_value_info("y", t, None)])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def _run(model, feeds):
    compiled = compile_graph(load_model(model), CompileOptions())
    ops = [t.op for p in compiled.programs if isinstance(p, DeviceProgram) for t in p.tasks
           if t.kind == "kernel"]
    assert ops == ["Mod"], ops  # on the device, not a host step
    return LoadedModel(compiled).execute(feeds)["y"]


@pytest.mark.parametrize("dtype", [np.int64, np.int32])
@pytest.mark.parametrize("fmod", [0, 1])
def test_integer_mod_in_both_sign_rules(dtype, fmod):
    rng = np.random.default_rng(5)
    a = rng.integers(-1000, 1000, (4, 33)).astype(dtype)
    b = rng.integers(1, 40, (1, 33)).astype(dtype) * rng.choice([-1, 1], (1, 33)).astype(dtype)
    model = _model(dtype, fmod, [4, 33], [1, 33])
    got = _run(model, {"a": a, "b": b})
    want = ort.InferenceSession(model.SerializeToString(), providers=[
        "CPUExecutionProvider"]).run(None, {"a": a, "b": b})[0]
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(got, np.mod(a, b) if fmod == 0 else np.fmod(a, b))


@pytest.mark.parametrize("dtype", [np.int64, np.int32])
@pytest.mark.parametrize("fmod", [0, 1])
def test_integer_edge_divisors_match_the_host_kernel(dtype, fmod):
    """A zero divisor gives 0 (the host kernel's answer; ONNX leaves it undefined) and the
    lowest value % -1 is 0, not an overflow trap."""
    lo = np.iinfo(dtype).min
    a = np.array([lo, lo, 7, -7, 0, lo, 5], dtype)
    b = np.array([-1, 1, 0, 0, 0, 3, -1], dtype)
    got = _run(_model(dtype, fmod, [7], [7]), {"a": a, "b": b})
    np.testing.assert_array_equal(got, _mod(a, b, {"fmod": fmod}))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("fmod", [0, 1])
def test_float_mod_with_signed_zeros_infinities_and_nans(dtype, fmod):
    a = np.array([5.5, -5.5, 5.5, -5.5, 6.0, -6.0, 0.0, np.inf, 3.0, np.nan, 1e30, 2.5],
                 dtype)
    b = np.array([2.0, 2.0, -2.0, -2.0, -3.0, 3.0, -1.0, 2.0, np.inf, 1.0, 7.0, 0.0],
                 dtype)
    got = _run(_model(dtype, fmod, [12], [12]), {"a": a, "b": b})
    with np.errstate(invalid="ignore"):  # the NaNs are the point
        want = _mod(a, b, {"fmod": fmod})
    np.testing.assert_array_equal(got, want)  # NaNs where numpy has them
    np.testing.assert_array_equal(np.signbit(got), np.signbit(want))  # zeros' signs too
    if fmod == 1:  # ONNX defines float Mod for fmod = 1 only
        model = _model(dtype, fmod, [12], [12])
        ref = ort.InferenceSession(model.SerializeToString(), providers=[
            "CPUExecutionProvider"]).run(None, {"a": a, "b": b})[0]
        np.testing.assert_array_equal(got, ref)
