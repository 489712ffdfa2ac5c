"""Dynamically quantized models on the device: MatMulInteger on the int8 kernel (oneDNN's
u8/s8 x s8 -> s32 matmul, the weights kept 8-bit), ConvInteger as the exact float32 Conv of
the centred weights, and the native DynamicQuantizeLinear kernel (ddddocr's old CRNN ran
1.3 s a run in numpy)."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from graphengine import _runtime as rt
from graphengine.engine.importers import load_model
from graphengine.engine.model import DeviceProgram
from graphengine.engine.ops.control import run_graph
from graphengine.engine.prepare import integer_products
from graphengine.engine.runtime import load
from tests.unit.device_cases import compile_model, model, native_bf16, onnxruntime, reference
from tests.unit.test_runtime import Const, load_op

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


def test_the_float_rewrite_weighs_each_integer_product_once(monkeypatch):
    """The exactness bound (a pass over the weights) is computed by the rewrite alone,
    not again by a match, and never for a MatMulInteger the int8 kernel takes."""
    calls = []
    weigh = integer_products.centred_weights
    monkeypatch.setattr(integer_products, "centred_weights",
                        lambda node: calls.append(node.op_type) or weigh(node))
    compile_model(_conv_integer(RNG.integers(0, 256, (6, 4, 3, 3)).astype(np.uint8),
                                np.array(121, np.uint8)))
    assert calls == ["ConvInteger"]
    calls.clear()
    compile_model(_matmul_integer(("a", RNG.integers(0, 256, (3, 8)).astype(np.uint8)),
                                  ("b", Const(RNG.integers(0, 256, (8, 5)).astype(np.uint8)))))
    assert calls == []


# ---- MatMulInteger on the int8 kernel ------------------------------------------------------
def _matmul_integer(*inputs):
    """One MatMulInteger over (name, array | Const | None) inputs A, B, A's and B's zero
    points: arrays are graph inputs (fed at run time), Const initializers, None omitted."""
    names, feeds, inits = [], [], []
    for name, v in inputs:
        names.append("" if v is None else name)
        if isinstance(v, Const):
            inits.append(numpy_helper.from_array(v.value, name))
        elif v is not None:
            feeds.append(helper.make_tensor_value_info(
                name, helper.np_dtype_to_tensor_dtype(v.dtype), list(v.shape)))
    graph = helper.make_graph([helper.make_node("MatMulInteger", names, ["y"])], "mmi", feeds,
                              [helper.make_tensor_value_info("y", TensorProto.INT32, None)],
                              inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def _feeds(*inputs):
    return {k: v for k, v in inputs if v is not None and not isinstance(v, Const)}


def _cpu_flags() -> set[str]:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


def _ints(dtype, shape, lo=None, hi=None):
    info = np.iinfo(dtype)
    return RNG.integers(info.min if lo is None else lo, (info.max if hi is None else hi) + 1,
                        shape).astype(dtype)


def _on_the_int8_kernel(m):
    if not {"avx512_vnni", "avx_vnni"} & _cpu_flags():
        pytest.skip("this CPU has no VNNI: the device declines the int8 kernel there (the "
                    "capped-ISA test checks that decline and the float rewrite's answer)")
    compiled = compile_model(m)
    placed = {p.op_type: p for p in compiled.report.placements}
    assert placed["MatMulInteger"].engine == "device", placed["MatMulInteger"].rejections
    assert "MatMul" not in placed  # not the float rewrite
    assert [type(p) for p in compiled.programs] == [DeviceProgram]
    assert [t.op for t in compiled.programs[0].tasks if hasattr(t, "op")] == ["MatMulInteger"]
    return compiled


def _assert_exact(m, inputs, with_ort=True):
    feeds = _feeds(*inputs)
    got = load(_on_the_int8_kernel(m)).execute(feeds)["y"]
    for want in [reference(m, feeds)[0]] + ([onnxruntime(m, feeds)[0]] if with_ort else []):
        assert got.dtype == want.dtype == np.int32 and got.shape == want.shape
        np.testing.assert_array_equal(got, want)


_PAIRS = [(np.uint8, np.uint8), (np.uint8, np.int8), (np.int8, np.int8), (np.int8, np.uint8)]


@pytest.mark.parametrize("za_kind", ["run-time", "constant", "omitted"])
@pytest.mark.parametrize("zb_kind", ["scalar", "per-column", "omitted"])
@pytest.mark.parametrize("xtype,wtype", _PAIRS)
def test_matmul_integer_on_the_int8_kernel_is_exact(xtype, wtype, zb_kind, za_kind):
    rank = 2 + (_PAIRS.index((xtype, wtype)) + len(za_kind) + len(zb_kind)) % 3  # 2, 3 or 4
    k, n = int(RNG.integers(1, 300)), int(RNG.integers(1, 70))
    batch = [int(d) for d in RNG.integers(1, 4, rank - 2)]
    za = _ints(xtype, ())
    zb = {"scalar": _ints(wtype, ()), "per-column": _ints(wtype, (n,)), "omitted": None}[zb_kind]
    inputs = [("a", _ints(xtype, (*batch, int(RNG.integers(1, 20)), k))),
              ("b", Const(_ints(wtype, (k, n)))),
              ("za", {"run-time": za, "constant": Const(za), "omitted": None}[za_kind]),
              ("zb", None if zb is None else Const(zb))]
    # ONNX Runtime's MatMulInteger has no int8 A with uint8 B
    _assert_exact(_matmul_integer(*inputs), inputs,
                  with_ort=(xtype, wtype) != (np.int8, np.uint8))


@pytest.mark.parametrize("x,w,za,zb", [(0, 0, 0, 0), (255, 255, 0, 0), (255, 0, 0, 255),
                                       (0, 255, 255, 0), (255, 255, 255, 255), (0, 0, 255, 255),
                                       (255, 128, 0, 0)])
def test_extreme_uint8_values_are_exact_where_float32_sums_would_round(x, w, za, zb):
    """K = 1500: 255 * 255 * 1500 is far past 2^24 (the float rewrite declines such
    weights), and every zero-point term of the compensation is at its largest."""
    k = 1500
    inputs = [("a", np.full((2, 3, k), x, np.uint8)), ("b", Const(np.full((k, 4), w, np.uint8))),
              ("za", np.array(za, np.uint8)), ("zb", Const(np.array(zb, np.uint8)))]
    _assert_exact(_matmul_integer(*inputs), inputs)


@pytest.mark.parametrize("x,w,za,zb", [(127, 127, -128, -128), (-128, -128, 127, 127),
                                       (-128, 127, 0, 0)])
def test_extreme_int8_values_are_exact(x, w, za, zb):
    k = 1500
    inputs = [("a", np.full((3, k), x, np.int8)), ("b", Const(np.full((k, 5), w, np.int8))),
              ("za", np.array(za, np.int8)), ("zb", Const(np.full(5, zb, np.int8)))]
    _assert_exact(_matmul_integer(*inputs), inputs)


def test_sums_past_int32_wrap_as_the_reference_s_do():
    """(255 - 0) * (0 - 255) * 40000 < -2^31: the exact sum wrapped to int32."""
    k = 40000
    inputs = [("a", np.full((1, k), 255, np.uint8)), ("b", Const(np.zeros((k, 3), np.uint8))),
              ("za", np.array(0, np.uint8)), ("zb", Const(np.array(255, np.uint8)))]
    m = _matmul_integer(*inputs)
    got = load(_on_the_int8_kernel(m)).execute(_feeds(*inputs))["y"]
    np.testing.assert_array_equal(got, np.full((1, 3), np.int64(-255 * 255 * k)
                                               ).astype(np.int32))  # wrapped
    np.testing.assert_array_equal(got, reference(m, _feeds(*inputs))[0])


def test_quantize_dynamic_s_matmul_runs_on_the_int8_kernel_with_8_bit_weights():
    """DynamicQuantizeLinear -> MatMulInteger (its zero point a run-time tensor) -> Cast ->
    Mul, as quantize_dynamic writes it; the weights stay 8-bit in the compiled model."""
    k, n = 256, 96
    b = RNG.integers(0, 256, (k, n)).astype(np.uint8)
    graph = helper.make_graph(
        [helper.make_node("DynamicQuantizeLinear", ["a"], ["aq", "as", "az"]),
         helper.make_node("MatMulInteger", ["aq", "b", "az", "bz"], ["acc"]),
         helper.make_node("Cast", ["acc"], ["accf"], to=TensorProto.FLOAT),
         helper.make_node("Mul", ["accf", "as"], ["y"])], "mmi",
        [helper.make_tensor_value_info("a", TensorProto.FLOAT, [2, 5, k])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None),
         helper.make_tensor_value_info("acc", TensorProto.INT32, None)],
        [numpy_helper.from_array(b, "b"),
         numpy_helper.from_array(np.arange(n, dtype=np.uint8) + 80, "bz")])
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    compiled = compile_model(m)
    assert {p.op_type: p.engine for p in compiled.report.placements}["MatMulInteger"] == "device"
    assert [type(p) for p in compiled.programs] == [DeviceProgram]
    assert compiled.report.memory.weight_bytes < 2 * k * n  # not float32 (4 * k * n)
    a = RNG.standard_normal((2, 5, k)).astype(np.float32)
    got = load(compiled).execute({"a": a})
    want = run_graph(load_model(m), [a], {})
    np.testing.assert_array_equal(got["acc"], want[1])
    np.testing.assert_array_equal(got["y"], want[0])
    # ONNX Runtime: per-column zero points of uint8 weights
    np.testing.assert_array_equal(got["acc"], onnxruntime(m, {"a": a})[1])


def test_batched_constant_weights_keep_the_float_rewrite():
    """The int8 kernel takes a B matrix; a stack of them stays the exact float product."""
    inputs = [("a", _ints(np.uint8, (2, 3, 16))), ("b", Const(_ints(np.uint8, (2, 16, 5)))),
              ("za", np.array(7, np.uint8)), ("zb", Const(np.array(100, np.uint8)))]
    m = _matmul_integer(*inputs)
    compiled = compile_model(m)
    placed = {p.op_type: p.engine for p in compiled.report.placements}
    assert "MatMulInteger" not in placed and placed["MatMul"] == "device"
    np.testing.assert_array_equal(load(compiled).execute(_feeds(*inputs))["y"],
                                  onnxruntime(m, _feeds(*inputs))[0])


@pytest.mark.parametrize("inputs,y,why", [
    ([np.zeros((2, 8), np.uint8), Const(np.zeros((8, 3), np.uint8)), None,
      Const(np.zeros(3, np.int8))], "int32", "B's zero point must be uint8, got int8"),
    ([np.zeros((2, 8), np.uint8), Const(np.zeros((8, 3), np.uint8)),
      Const(np.zeros(2, np.uint8)), None], "int32", "A's zero point must be one value"),
    ([np.zeros((2, 8), np.uint8), Const(np.zeros((8, 3), np.uint8)), None,
      Const(np.zeros(4, np.uint8))], "int32", "B's zero point must be one value or one per"),
    ([np.zeros((2, 8), np.float32), Const(np.zeros((8, 3), np.uint8)), None, None], "int32",
     "A and B must be int8 or uint8, got float32"),
    ([np.zeros((2, 8), np.uint8), Const(np.zeros((7, 3), np.uint8)), None, None], "int32",
     "inner dimensions differ"),
    ([np.zeros((2, 8), np.uint8), np.zeros((8, 3), np.uint8), None, None], "int32",
     "B must be a constant"),
    ([np.zeros((2, 8), np.uint8), Const(np.zeros((8, 3), np.uint8)), None, None], "float32",
     "output Y"),
])
def test_malformed_matmul_integer_is_refused_naming_the_node(inputs, y, why):
    with pytest.raises(rt.InvalidArgument, match=f"'fc'.*{why}"):
        load_op("MatMulInteger", inputs, (2, 3), y)


def test_the_kernel_info_store_gives_the_int8_kernel_s_reason():
    info = rt.Device().kernel_info("MatMulInteger", ["uint8", "uint8", "uint8", "uint8"],
                                   [[4, 8], [8, 3], [4], []])
    assert not info["supported"] and "A's zero point must be one value" in info["reason"]
    assert rt.Device().kernel_info("MatMulInteger", ["uint8", "int8", "uint8", "int8"],
                                   [[2, 4, 8], [8, 3], [], [3]])["supported"]


_UNDER_ISA = """
import numpy as np
from graphengine.engine.runtime import load
from tests.unit.device_cases import compile_model, reference
from tests.unit.test_integer_products import _feeds, _ints, _matmul_integer
from tests.unit.test_runtime import Const
for xtype, wtype in [(np.uint8, np.uint8), (np.int8, np.int8), (np.uint8, np.int8)]:
    inputs = [("a", _ints(xtype, (3, 9, 200))), ("b", Const(_ints(wtype, (200, 33)))),
              ("za", _ints(xtype, ())), ("zb", Const(_ints(wtype, (33,))))]
    m = _matmul_integer(*inputs)
    compiled = compile_model(m)
    placed = {p.op_type: p.engine for p in compiled.report.placements}
    loaded = load(compiled)
    got = loaded.execute(_feeds(*inputs))["y"]
    assert np.array_equal(got, reference(m, _feeds(*inputs))[0])
    print(sorted(placed.items()))
"""


# The VNNI flag each capped ISA needs from the CPU (a cap above the CPU runs the CPU's ISA).
_VNNI_FLAG = {"AVX512_CORE_VNNI": "avx512_vnni", "AVX2_VNNI": "avx_vnni"}


@pytest.mark.parametrize("isa,kernel", [("AVX512_CORE_VNNI", True), ("AVX2_VNNI", True),
                                        ("AVX512_CORE", False), ("AVX2", False)])
def test_the_int8_kernel_needs_vnni_and_is_exact_on_each_isa_with_it(isa, kernel):
    """oneDNN capped at `isa` (ONEDNN_MAX_CPU_ISA, fixed per process): the VNNI paths run
    the int8 kernel exactly; without VNNI (16-bit saturating pair sums) the device declines
    it and the exact float rewrite runs (K = 200 keeps the weights inside its bound). This
    CPU's own ISA (AMX here) runs in the tests above. An ISA the CPU lacks is capped to
    what it has, so that case runs the CPU's."""
    import os
    import pathlib
    import subprocess
    import sys

    root = pathlib.Path(__file__).resolve().parents[2]
    env = dict(os.environ, ONEDNN_MAX_CPU_ISA=isa, PYTHONPATH=str(root))
    done = subprocess.run([sys.executable, "-c", _UNDER_ISA], env=env, cwd=root,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    # on a CPU without that VNNI the cap gives less, and the device must decline instead
    kernel = kernel and _VNNI_FLAG[isa] in _cpu_flags()
    for line in done.stdout.splitlines():
        assert ("('MatMulInteger', 'device')" in line) == kernel, line
        assert ("('MatMul', 'device')" in line) != kernel, line


# ---- quantize_dynamic's ConvInteger with its bias, as the CRNN of ddddocr has it ---------
def _conv_integer_with_bias(w, zw, w_scale, bias, pads=(1, 0, 2, 1), strides=(2, 1)):
    """DynamicQuantizeLinear -> ConvInteger, plus the bias quantized at run time
    (Cast(Floor(bias / (x_scale * w_scale))) to int32, reshaped per channel) added in int32,
    -> Cast(float) * (x_scale * w_scale) -> Sigmoid * itself: onnxruntime's older
    quantize_dynamic of a Conv with a bias and SiLU. The int32 sum and the rescaled float
    result z (exact: integer sums, one float product) are outputs too."""
    m_out = w.shape[0]
    inits = {"w": w, "wz": zw, "ws": w_scale, "bias": bias,
             "shape": np.array([1, m_out, 1, 1], np.int64)}
    nodes = [helper.make_node("DynamicQuantizeLinear", ["x"], ["xq", "xs", "xz"]),
             helper.make_node("Mul", ["xs", "ws"], ["s"]),
             helper.make_node("Div", ["bias", "s"], ["bs"]),
             helper.make_node("Floor", ["bs"], ["bf"]),
             helper.make_node("Cast", ["bf"], ["bq"], to=TensorProto.INT32),
             helper.make_node("Reshape", ["bq", "shape"], ["bqr"]),
             helper.make_node("ConvInteger", ["xq", "w", "xz", "wz"], ["acc"],
                              pads=list(pads), strides=list(strides)),
             helper.make_node("Add", ["acc", "bqr"], ["sum"]),
             helper.make_node("Cast", ["sum"], ["sumf"], to=TensorProto.FLOAT),
             helper.make_node("Mul", ["sumf", "s"], ["z"]),
             helper.make_node("Sigmoid", ["z"], ["g"]),
             helper.make_node("Mul", ["z", "g"], ["y"])]
    graph = helper.make_graph(
        nodes, "conv_integer_bias",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, w.shape[1], 13, 17])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None),
         helper.make_tensor_value_info("sum", TensorProto.INT32, None),
         helper.make_tensor_value_info("z", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(v, k) for k, v in inits.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def _biased_case(per_channel, channels=(19, 5)):
    m_out, c = channels  # odd channel counts by default
    w = RNG.integers(0, 256, (m_out, c, 3, 3)).astype(np.uint8)
    zw = (RNG.integers(90, 160, m_out).astype(np.uint8) if per_channel
          else np.array(131, np.uint8))
    ws = (RNG.uniform(0.001, 0.01, m_out).astype(np.float32).reshape(1, m_out, 1, 1)
          if per_channel else np.array(0.0041, np.float32))
    bias = RNG.standard_normal(m_out).astype(np.float32)
    if per_channel:  # over per-channel scales: the division broadcasts per channel
        bias = bias.reshape(1, m_out, 1, 1)
    return _conv_integer_with_bias(w, zw, ws, bias), c


@pytest.mark.parametrize("per_channel", [False, True])
def test_the_int32_bias_of_an_integer_conv_is_added_in_float(per_channel):
    """The run-time bias of quantize_dynamic's ConvInteger (an int32 Cast of a float32)
    joins the float product as float32: no Cast of the product to int32 and back, no int32
    Add, and the same values as the reference (the int32 sum too, where it is read)."""
    m, c = _biased_case(per_channel)
    compiled = compile_model(m)
    assert [type(p) for p in compiled.programs] == [DeviceProgram]
    tasks = compiled.programs[0].tasks
    int32_reads = [t.name for t in tasks if t.op == "Cast" and "_int32" in t.name]
    float_adds = [t.name for t in tasks if t.op == "Add" and "_float" in t.name]
    assert float_adds, [t.name for t in tasks]
    x = RNG.standard_normal((1, c, 13, 17)).astype(np.float32) * 2 + 0.3
    got = load(compiled).execute({"x": x})
    want = run_graph(load_model(m), [x], {})
    np.testing.assert_array_equal(got["sum"], want[1])
    np.testing.assert_array_equal(got["z"], want[2])
    # only the activation's last bits differ (oneDNN's logistic against numpy's)
    np.testing.assert_allclose(got["y"], want[0], rtol=1e-6, atol=1e-6)
    # the int32 sum is an output here, so the product's int32 form is kept for it alone
    assert len(int32_reads) == 1
    if not per_channel:  # ONNX Runtime has no per-channel ConvInteger zero point
        np.testing.assert_array_equal(got["z"], onnxruntime(m, {"x": x})[2])


def test_without_an_int32_reader_the_product_never_leaves_float():
    m, c = _biased_case(False)
    del m.graph.output[1]  # only the float results are read
    compiled = compile_model(m)
    ops = [t.op for t in compiled.programs[0].tasks]
    assert not any(t.op == "Cast" and "_int32" in t.name
                   for t in compiled.programs[0].tasks), ops
    assert "Add" in ops
    x = RNG.standard_normal((1, c, 13, 17)).astype(np.float32)
    np.testing.assert_array_equal(load(compiled).execute({"x": x})["z"],
                                  onnxruntime(m, {"x": x})[1])


def test_an_int32_addend_float32_cannot_hold_keeps_the_integer_add():
    """A constant int32 addend past 2^24 is not a float32 integer: the Add stays int32."""
    m, c = _biased_case(False)
    big = numpy_helper.from_array(np.full((1, 19, 1, 1), (1 << 24) + 1, np.int32), "big")
    m.graph.initializer.append(big)
    for node in m.graph.node:
        if node.op_type == "Add":
            node.input[1] = "big"
    compiled = compile_model(m)
    names = [t.name for t in compiled.programs[0].tasks]
    assert not any("_float" in n for n in names), names
    x = RNG.standard_normal((1, c, 13, 17)).astype(np.float32)
    got = load(compiled).execute({"x": x})
    want = run_graph(load_model(m), [x], {})
    np.testing.assert_array_equal(got["sum"], want[1])
    np.testing.assert_array_equal(got["z"], want[2])


def _conv_impls(compiled, feeds):
    loaded = load(compiled)
    got = loaded.execute(feeds)
    convs = {t.name for t in compiled.programs[0].tasks if t.op == "Conv"}
    impls = [t["impl"] for nat in loaded.natives.values() for t in nat.profile()
             if t["name"] in convs]
    return got, impls


@pytest.mark.parametrize("per_channel", [False, True])
def test_the_rewritten_integer_conv_multiplies_in_bfloat16_where_the_cpu_does(per_channel):
    """ConvInteger's float Conv tells the kernel its operands are integers of magnitude
    <= 255 (`integer_operands`): on a CPU with AMX or AVX512_BF16 it runs oneDNN's bf16
    convolution (exact for such operands, float32 sums), with the same int32 sums and
    rescaled results as the reference. Elsewhere it is the float32 kernel (said so)."""
    m, c = _biased_case(per_channel, channels=(32, 48))
    compiled = compile_model(m)
    conv = [t for t in compiled.programs[0].tasks if t.op == "Conv"]
    assert len(conv) == 1 and conv[0].attrs.get("integer_operands") == 1
    x = RNG.standard_normal((1, c, 13, 17)).astype(np.float32) * 3
    got, impls = _conv_impls(compiled, {"x": x})
    if native_bf16():
        assert len(impls) == 1 and ("amx" in impls[0] or "bf16" in impls[0]), impls
    else:  # no native bf16 here: the float32 kernel (the path is still exact)
        assert len(impls) == 1 and "bf16" not in impls[0] and "amx" not in impls[0], impls
    want = run_graph(load_model(m), [x], {})
    np.testing.assert_array_equal(got["sum"], want[1])
    np.testing.assert_array_equal(got["z"], want[2])


def test_extreme_integer_operands_are_exact_in_bfloat16():
    """Operands of magnitude 255 (uint8 weights 0 and 255 about zero points 0 and 255, the
    input quantized to 0 and 255) and sums up to 255 * 255 * 9 * 28 = 16386300, just under
    the 2^24 bound of the rewrite: bf16 holds each operand, float32 each sum."""
    m_out, c = 32, 28
    w = np.where(RNG.random((m_out, c, 3, 3)) < 0.2, 0, 255).astype(np.uint8)
    w[0] = 255  # one output's every tap at 255 - 0
    zw = np.where(np.arange(m_out) % 2 == 0, 0, 255).astype(np.uint8)
    m = _conv_integer_with_bias(w, zw, np.array(0.003, np.float32),
                                RNG.standard_normal(m_out).astype(np.float32))
    compiled = compile_model(m)
    assert "ConvInteger" not in {p.op_type for p in compiled.report.placements}
    x = np.where(RNG.random((1, c, 13, 17)) < 0.1, 0.0, 7.0).astype(np.float32)
    got, impls = _conv_impls(compiled, {"x": x})
    if native_bf16():
        assert len(impls) == 1 and ("amx" in impls[0] or "bf16" in impls[0]), impls
    want = run_graph(load_model(m), [x], {})
    assert np.abs(want[1]).max() > 1 << 23
    np.testing.assert_array_equal(got["sum"], want[1])
    np.testing.assert_array_equal(got["z"], want[2])


def test_scaled_integer_weights_are_not_taken_for_bfloat16():
    """A constant per-channel scale after the integer product folds into the Conv's weights
    (conv_bias): they are no longer integers, and the kernel keeps float32 for them."""
    m_out, c = 32, 48
    w = RNG.integers(0, 256, (m_out, c, 3, 3)).astype(np.uint8)
    scale = RNG.uniform(0.001, 0.01, (1, m_out, 1, 1)).astype(np.float32)
    nodes = [helper.make_node("DynamicQuantizeLinear", ["x"], ["xq", "xs", "xz"]),
             helper.make_node("ConvInteger", ["xq", "w", "xz", "wz"], ["acc"], pads=[1, 1, 1, 1]),
             helper.make_node("Cast", ["acc"], ["accf"], to=TensorProto.FLOAT),
             helper.make_node("Mul", ["accf", "scale"], ["y"])]
    graph = helper.make_graph(
        nodes, "scaled", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, c, 9, 11])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(w, "w"), numpy_helper.from_array(np.array(120, np.uint8), "wz"),
         numpy_helper.from_array(scale, "scale")])
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    compiled = compile_model(m)
    x = RNG.standard_normal((1, c, 9, 11)).astype(np.float32)
    got, impls = _conv_impls(compiled, {"x": x})
    assert len(impls) == 1 and "bf16" not in impls[0] and "amx" not in impls[0], impls
    want = run_graph(load_model(m), [x], {})[0]  # the folded scale rounds other sums
    np.testing.assert_allclose(got["y"], want, rtol=0, atol=1e-5 * np.abs(want).max())
