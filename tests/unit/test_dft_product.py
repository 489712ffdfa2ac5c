"""A DFT of static length runs as one MatMul by its table (prepare/dft.py, a canonicalize
row): on the device, equal to numpy's FFT, forward and inverse, real and complex input,
every axis; the cases it leaves to the host kernel stay there."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from graphengine.engine.importers import load_model
from graphengine.engine.pipeline import compile_graph
from graphengine.engine.runtime import LoadedModel

RNG = np.random.default_rng(12)


def _model(shape, axis, inverse=0, onesided=0, length=None):
    inputs = ["x", "len" if length is not None else "", "axis"]
    inits = [numpy_helper.from_array(np.array(axis, np.int64), "axis")]
    if length is not None:
        inits.append(numpy_helper.from_array(np.array(length, np.int64), "len"))
    node = helper.make_node("DFT", inputs, ["y"], inverse=inverse, onesided=onesided)
    graph = helper.make_graph([node], "dft",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                              inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)], ir_version=9)


def _want(x, axis, inverse):
    sig = x[..., 0] + (1j * x[..., 1] if x.shape[-1] == 2 else 0)
    res = (np.fft.ifft if inverse else np.fft.fft)(sig.astype(np.complex128), axis=axis)
    return np.stack([res.real, res.imag], axis=-1)


@pytest.mark.parametrize("shape,axis", [((2, 32, 16, 2), 2), ((2, 32, 16, 2), 1),
                                        ((17, 3, 2), 0), ((4, 24, 1), 1), ((2, 20, 6, 1), -3)])
@pytest.mark.parametrize("inverse", [0, 1])
def test_a_static_dft_is_a_product_on_the_device(shape, axis, inverse):
    x = RNG.standard_normal(shape).astype(np.float32)
    compiled = compile_graph(load_model(_model(list(shape), axis, inverse)))
    hosts = [p.node for p in compiled.report.placements if p.engine == "host"]
    assert hosts == [], hosts
    got = LoadedModel(compiled).execute({"x": x})["y"]
    want = _want(x, axis if axis >= 0 else axis + len(shape), inverse)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * np.abs(want).max())


@pytest.mark.parametrize("kw", [{"onesided": 1}, {"length": 40}, {}])
def test_other_dfts_keep_the_host_kernel(kw):
    """Onesided, a length other than the axis's, and a short axis (8 < MIN_LENGTH)."""
    shape = [2, 8 if not kw else 32, 1]
    x = RNG.standard_normal(shape).astype(np.float32)
    compiled = compile_graph(load_model(_model(shape, 1, **kw)))
    assert [p.op_type for p in compiled.report.placements if p.engine == "host"] == ["DFT"]
    got = LoadedModel(compiled).execute({"x": x})["y"]
    sig = x[..., 0].astype(np.complex128)
    n = kw.get("length", shape[1])
    res = np.fft.fft(sig, n=n, axis=1)
    if kw.get("onesided"):
        res = res[:, : n // 2 + 1]
    np.testing.assert_allclose(got, np.stack([res.real, res.imag], -1), rtol=1e-4, atol=1e-4)
