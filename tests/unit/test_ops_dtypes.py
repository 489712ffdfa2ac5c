"""The low-precision element types (float8, float4, int4, int2 via ml_dtypes): the DType
table, Cast/CastLike/QuantizeLinear/DequantizeLinear against onnx.reference, and the
device engine leaving dtypes the runtime does not know to the host."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from onnx import TensorProto

from graphengine.engine import ops
from graphengine.engine.dtypes import DType, from_onnx, to_onnx
from graphengine.engine.importers import import_onnx
from graphengine.engine.ir import Graph, TensorMeta
from tests.unit.test_ops_common import infer_graph, make_model, reference, run_graph

LOW = {
    TensorProto.FLOAT8E4M3FN: DType.FLOAT8E4M3FN, TensorProto.FLOAT8E4M3FNUZ:
    DType.FLOAT8E4M3FNUZ, TensorProto.FLOAT8E5M2: DType.FLOAT8E5M2,
    TensorProto.FLOAT8E5M2FNUZ: DType.FLOAT8E5M2FNUZ, TensorProto.FLOAT8E8M0: DType.FLOAT8E8M0,
    TensorProto.FLOAT4E2M1: DType.FLOAT4E2M1, TensorProto.INT4: DType.INT4,
    TensorProto.UINT4: DType.UINT4, TensorProto.INT2: DType.INT2, TensorProto.UINT2: DType.UINT2,
}
# Values that hit rounding, the range limits, infinities and NaN.
X = np.array([0.0, -0.0, 0.3, -1.7, 2.5, 3.5, 7.9, -9.0, 300.0, 1e6, -1e6, 1e-7, np.inf,
              -np.inf, np.nan], np.float32)


def as_float(a: np.ndarray) -> np.ndarray:
    return np.asarray(a).astype(np.float32)


def run_and_reference(op: str, inputs, attrs, opset: int, consts=()):
    model = make_model(op, inputs, attrs, opset=opset, consts=consts)
    model.ir_version = 11
    g = import_onnx(model)
    infer_graph(g)
    feeds = {n: a for n, a in inputs if n not in consts}
    (got,) = run_graph(g, feeds)
    (want,) = reference(model, feeds, "ref")
    assert got.dtype == np.asarray(want).dtype and g.outputs[0].meta.dtype.numpy == got.dtype
    return got, np.asarray(want)


@pytest.mark.parametrize("code", sorted(LOW))
def test_dtype_table_round_trips(code: int) -> None:
    dt = LOW[code]
    assert from_onnx(code) is dt and to_onnx(dt) == code
    assert dt.numpy == np.dtype(getattr(ml_dtypes, dt.value)) and dt.itemsize == 1
    assert DType.from_numpy(dt.numpy) is dt
    assert dt.is_float == ("float" in dt.value)


@pytest.mark.parametrize("code", sorted(set(LOW) - {TensorProto.FLOAT8E8M0}))
@pytest.mark.parametrize("saturate", [1, 0])
def test_cast_into_low_precision_matches_reference(code: int, saturate: int) -> None:
    x = X if LOW[code].is_float else np.arange(-5, 6, dtype=np.float32)
    got, want = run_and_reference("Cast", [("x", x)], {"to": code, "saturate": saturate}, 25)
    np.testing.assert_array_equal(as_float(got), as_float(want))
    back, _ = run_and_reference("Cast", [("x", got)], {"to": TensorProto.FLOAT}, 25)
    np.testing.assert_array_equal(back, as_float(got))


@pytest.mark.parametrize("mode", ["up", "down", "nearest"])
def test_cast_to_e8m0_rounds_per_mode(mode: str) -> None:
    x = np.array([0.0, 1e-45, 2.0**-127, 3e-39, 0.124, 0.25, 0.3, 0.375, 0.4, 1.0, 1.5, 3.0,
                  5.0, -6.0, 1e38, 3e38, np.inf, np.nan], np.float32)
    for saturate in (1, 0):
        got, want = run_and_reference("Cast", [("x", x)], {
            "to": TensorProto.FLOAT8E8M0, "round_mode": mode, "saturate": saturate}, 25)
        bits = got.view(np.uint8)
        # inf saturates to the largest value as the Cast spec's table says (the reference
        # gives NaN there); everything else is bit for bit the reference's.
        assert bits[-2] == (254 if saturate else 255) and bits[-1] == 255
        np.testing.assert_array_equal(bits[:-2], want.view(np.uint8)[:-2])


def test_castlike_uses_the_target_tensor_dtype() -> None:
    like = np.zeros(1, ml_dtypes.float8_e5m2)
    got, want = run_and_reference("CastLike", [("x", X), ("like", like)], {}, 25)
    np.testing.assert_array_equal(as_float(got), as_float(want))


@pytest.mark.parametrize("code", [TensorProto.INT4, TensorProto.UINT4, TensorProto.INT2,
                                  TensorProto.FLOAT8E4M3FN, TensorProto.FLOAT8E5M2,
                                  TensorProto.FLOAT4E2M1])
def test_quantize_dequantize_low_precision(code: int) -> None:
    x = np.array([[0.0, 2.5, 4.8, 8.6], [-30.0, -20.0, 6.0, 9.0], [12.0, 15.0, 16.0, 1e5]],
                 np.float32)
    scale = np.array([2.0, 3.0, 4.0], np.float32)
    zero = np.zeros(3, LOW[code].numpy)
    inputs = [("x", x), ("scale", scale), ("zero", zero)]
    q, want = run_and_reference("QuantizeLinear", inputs, {"axis": 0}, 25, consts=("zero",))
    np.testing.assert_array_equal(as_float(q), as_float(want))
    d, want = run_and_reference("DequantizeLinear", [("q", q), ("scale", scale),
                                                     ("zero", zero)], {"axis": 0}, 25,
                                consts=("zero",))
    np.testing.assert_allclose(d, want)


def _node(op: str, dtype: DType, attrs: dict | None = None):
    g = Graph()
    x = g.add_input("x", TensorMeta(dtype, (2, 3)))
    shape = g.add_constant("s", np.array([3, 2], np.int64))
    inputs = [x, shape] if op == "Reshape" else [x]
    node = g.add_node(op, inputs, attrs=attrs or {}, name="n")
    for value, meta in zip(node.outputs, ops.infer_node(node)):
        value.meta = meta
    return node, ops.node_attrs(node)


def test_device_declines_dtypes_the_runtime_lacks() -> None:
    node, attrs = _node("Reshape", DType.BFLOAT16)
    assert "bfloat16 not supported" in ops.get("Reshape").device(node, attrs)
    node, attrs = _node("Cast", DType.FLOAT32, {"to": TensorProto.FLOAT8E4M3FN})
    assert "float8_e4m3fn not supported" in ops.get("Cast").device(node, attrs)
    node, attrs = _node("Cast", DType.FLOAT16, {"to": TensorProto.INT32})
    kernel = ops.get("Cast").device(node, attrs)
    assert kernel.op == "Cast" and kernel.attrs == {"to": "int32"} and kernel.inputs == (0,)
