"""Dynamically quantized models on the device: ConvInteger / MatMulInteger with constant
8-bit weights as the exact float32 Conv / MatMul of the centred values, and the native
DynamicQuantizeLinear kernel (ddddocr's old CRNN ran 1.3 s a run in numpy)."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from graphengine.engine.importers import load_model
from graphengine.engine.model import DeviceProgram
from graphengine.engine.ops.control import run_graph
from graphengine.engine.runtime import load
from tests.unit.device_cases import compile_model, model, onnxruntime, reference

RNG = np.random.default_rng(7)


def _dql_model(shape):
    return model("DynamicQuantizeLinear", {"x": np.zeros(shape, np.float32)}, {},
                 n_outputs=3)


@pytest.mark.parametrize("case", ["random", "ties", "positive", "negative", "zeros", "nan",
                                  "inf", "large"])
def test_dynamic_quantize_linear_on_the_device_equals_the_reference(case):
    x = RNG.standard_normal((3, 37, 41)).astype(np.float32) * 3
    if case == "ties":  # values on exact halves of the scale: ties round to even
        x = (np.arange(x.size, dtype=np.float32).reshape(x.shape) % 11 - 5) * 0.5
    elif case == "positive":
        x = np.abs(x) + 1
    elif case == "negative":
        x = -np.abs(x) - 1
    elif case == "zeros":
        x = np.zeros_like(x)
    elif case == "nan":
        x[1, 2, 3] = np.nan
    elif case == "inf":
        x[0, 0, 5] = np.inf
    elif case == "large":
        x = x * 1e30
    m = _dql_model(x.shape)
    compiled = compile_model(m)
    assert [type(p) for p in compiled.programs] == [DeviceProgram]
    assert compiled.programs[0].tasks[0].op == "DynamicQuantizeLinear"
    got = list(load(compiled).execute({"x": x}).values())
    want = reference(m, {"x": x})
    for a, b in zip(got, want):
        assert a.dtype == b.dtype and a.shape == b.shape
        np.testing.assert_array_equal(a, b)
    if case in ("random", "ties", "positive", "negative", "zeros"):  # ORT agrees there
        for a, b in zip(got, onnxruntime(m, {"x": x})):
            np.testing.assert_array_equal(a, b)


def _conv_integer(w, zw, x_dtype=np.uint8, pads=(1, 1, 1, 1), group=1):
    """DynamicQuantizeLinear -> ConvInteger -> Cast(float) * scale, as quantize_dynamic
    writes it, plus the int32 result itself as an output."""
    c = w.shape[1] * group
    inits = {"w": w}
    ins = ["xq", "w", "xz"]
    if zw is not None:
        inits["wz"] = zw
        ins.append("wz")
    nodes = [helper.make_node("DynamicQuantizeLinear", ["x"], ["xq", "xs", "xz"]),
             helper.make_node("ConvInteger", ins, ["acc"], pads=list(pads), group=group),
             helper.make_node("Cast", ["acc"], ["accf"], to=TensorProto.FLOAT),
             helper.make_node("Mul", ["accf", "xs"], ["y"])]
    graph = helper.make_graph(
        nodes, "conv_integer", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                              [1, c, 9, 11])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None),
         helper.make_tensor_value_info("acc", TensorProto.INT32, None)],
        [numpy_helper.from_array(v, k) for k, v in inits.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


@pytest.mark.parametrize("wtype,zw", [(np.uint8, np.array(121, np.uint8)),
                                      (np.int8, None),
                                      (np.uint8, np.arange(6, dtype=np.uint8) + 120)])
@pytest.mark.parametrize("group", [1, 2])
def test_conv_integer_runs_as_an_exact_float_conv_on_the_device(wtype, zw, group):
    lo, hi = (0, 256) if wtype == np.uint8 else (-128, 128)
    w = RNG.integers(lo, hi, (6, 4 // group, 3, 3)).astype(wtype)
    m = _conv_integer(w, zw, group=group)
    compiled = compile_model(m)
    placed = {p.op_type for p in compiled.report.placements}
    assert "ConvInteger" not in placed and "Conv" in placed
    assert [type(p) for p in compiled.programs] == [DeviceProgram]
    x = RNG.standard_normal((1, 4, 9, 11)).astype(np.float32)
    got = load(compiled).execute({"x": x})
    # ONNX Runtime has no per-channel ConvInteger: the numpy reference interprets that one
    want = onnxruntime(m, {"x": x}) if zw is None or zw.size == 1 else \
        run_graph(load_model(m), [x], {})
    np.testing.assert_array_equal(got["acc"], want[1])  # the int32 products, exactly
    np.testing.assert_array_equal(got["y"], want[0])


def test_an_integer_conv_whose_sums_could_leave_float32_stays_exact_on_the_host():
    """255 * sum |w - zw| >= 2^24 into one output: float32 could round a partial sum."""
    w = np.full((2, 64, 5, 5), 255, np.uint8)  # 1600 taps of 255 (zero point 0)
    m = _conv_integer(w, None)
    compiled = compile_model(m)
    assert {p.op_type: p.engine for p in compiled.report.placements}["ConvInteger"] == "host"
    x = RNG.standard_normal((1, 64, 9, 11)).astype(np.float32)
    x[0, 0, 0, 0] = -10  # the zero point is not 0
    got = load(compiled).execute({"x": x})
    want = onnxruntime(m, {"x": x})
    np.testing.assert_array_equal(got["acc"], want[1])


def test_matmul_integer_runs_as_an_exact_float_matmul():
    b = RNG.integers(0, 256, (32, 24)).astype(np.uint8)
    graph = helper.make_graph(
        [helper.make_node("DynamicQuantizeLinear", ["a"], ["aq", "as", "az"]),
         helper.make_node("MatMulInteger", ["aq", "b", "az", "bz"], ["acc"])], "mmi",
        [helper.make_tensor_value_info("a", TensorProto.FLOAT, [2, 5, 32])],
        [helper.make_tensor_value_info("acc", TensorProto.INT32, None)],
        [numpy_helper.from_array(b, "b"),
         numpy_helper.from_array(np.array(128, np.uint8), "bz")])
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    compiled = compile_model(m)
    assert {p.op_type for p in compiled.report.placements} >= {"MatMul"}
    assert [type(p) for p in compiled.programs] == [DeviceProgram]
    a = RNG.standard_normal((2, 5, 32)).astype(np.float32)
    np.testing.assert_array_equal(load(compiled).execute({"a": a})["acc"],
                                  onnxruntime(m, {"a": a})[0])
