"""Sin and Cos on the device (trig.cc): a DAC audio encoder's Snake activations
(x + sin²(a x) / a) were 22 host steps between 45 device programs. Held to float64's sin/cos:
within one float32 rounding (|err| <= 2^-24 for results near 1), NaN where it is NaN, -0
kept, every tail length of a 16-lane block, the libm path for |x| >= 2^30, and a team."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

from graphengine.engine.importers import load_model
from graphengine.engine.pipeline import CompileOptions, compile_graph
from graphengine.engine.runtime import DeviceProgram, LoadedModel


def _run(op: str, x: np.ndarray) -> np.ndarray:
    node = helper.make_node(op, ["x"], ["y"])
    graph = helper.make_graph([node], "trig", [helper.make_tensor_value_info(
        "x", TensorProto.FLOAT, list(x.shape))], [helper.make_tensor_value_info(
            "y", TensorProto.FLOAT, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    compiled = compile_graph(load_model(model), CompileOptions())
    ops = [t.op for p in compiled.programs if isinstance(p, DeviceProgram) for t in p.tasks
           if t.kind == "kernel"]
    assert ops == [op], ops
    return LoadedModel(compiled).execute({"x": x})["y"]


def _reference(op: str, x: np.ndarray) -> np.ndarray:
    with np.errstate(invalid="ignore"):
        return (np.sin if op == "Sin" else np.cos)(x.astype(np.float64))


@pytest.mark.parametrize("op", ["Sin", "Cos"])
def test_accuracy_over_a_wide_range_on_a_team(op):
    rng = np.random.default_rng(4)
    x = np.concatenate([np.linspace(-30, 30, 120001), rng.uniform(-1e5, 1e5, 40000),
                        rng.uniform(-1e9, 1e9, 4000), np.ldexp(1.0, -np.arange(1, 140)),
                        np.float32(np.pi) * np.arange(-64, 65) / 2]).astype(np.float32)
    got = _run(op, x)
    want = _reference(op, x)
    err = np.abs(got.astype(np.float64) - want)
    # one rounding to float32 of the true value: half an ulp of the result, at most
    ulp = np.spacing(np.abs(want).astype(np.float32)).astype(np.float64)
    assert (err <= 0.5 * ulp + 1e-45).all(), (x[err.argmax()], err.max())


@pytest.mark.parametrize("op", ["Sin", "Cos"])
def test_special_values_and_the_libm_path(op):
    x = np.array([0.0, -0.0, 1e-30, -1e-30, 2.0 ** 30, -(2.0 ** 30) - 64, 3e12, -7e20,
                  3.4e38, np.inf, -np.inf, np.nan, 1.0, 1e-4], np.float32)
    got = _run(op, x)
    want = _reference(op, x).astype(np.float32)
    np.testing.assert_array_equal(got, want)  # NaN where NaN (inf, nan), exact elsewhere
    np.testing.assert_array_equal(np.signbit(got), np.signbit(want))  # sin(-0) = -0


@pytest.mark.parametrize("n", list(range(1, 34)) + [4095, 16385])
def test_every_tail_length(n):
    x = np.linspace(-7, 7, n, dtype=np.float32)
    x[n // 2] = 5e10  # one lane of the block through the libm call
    for op in ("Sin", "Cos"):
        np.testing.assert_allclose(_run(op, x), _reference(op, x), rtol=0, atol=6e-8)
