"""Device lowerings: the runtime kernel, its attrs (resolved, normalized) and its inputs,
or the reason the device declines."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest

from graphengine.engine import ops
from graphengine.engine.dtypes import DType
from graphengine.engine.ir import Graph, Node, TensorMeta
from graphengine.engine.partition import placement

F32 = DType.FLOAT32


def build(op: str, inputs: list[Any], attrs: dict[str, Any] | None = None,
          n_outputs: int = 1) -> Node:
    """A node whose inputs are metas (graph inputs), arrays (constants) or None."""
    g = Graph()
    values = []
    for k, item in enumerate(inputs):
        if item is None:
            values.append(None)
        elif isinstance(item, np.ndarray):
            values.append(g.add_constant(f"c{k}", item))
        else:
            values.append(g.add_input(f"in{k}", item))
    node = g.add_node(op, values, outputs=n_outputs, attrs=attrs or {}, name=f"{op.lower()}0")
    for value, meta in zip(node.outputs, ops.infer_node(node)):
        value.meta = meta
    g.outputs = [node.outputs[0]]
    return node


def lower(node: Node) -> ops.DeviceKernel | str:
    schema = ops.get(node.op_type)
    assert schema.device is not None, f"{node.op_type} has no device lowering"
    return schema.device(node, ops.node_attrs(node))


def t(*shape: Any, dtype: DType = F32) -> TensorMeta:
    return TensorMeta(dtype, shape)


def test_conv_resolves_same_padding() -> None:
    w = np.zeros((8, 3, 3, 3), np.float32)
    k = lower(build("Conv", [t(1, 3, 8, 8), w], {"auto_pad": "SAME_UPPER", "strides": [2, 2]}))
    assert isinstance(k, ops.DeviceKernel) and k.op == "Conv"
    assert k.attrs == {"strides": [2, 2], "pads": [0, 0, 1, 1], "dilations": [1, 1], "group": 1}
    assert k.inputs == (0, 1, -1)
    k = lower(build("Conv", [t(1, 3, 8, 8), w, np.zeros(8, np.float32)],
                    {"pads": [1, 2, 1, 2], "group": 1}))
    assert k.attrs["pads"] == [1, 2, 1, 2] and k.inputs == (0, 1, 2)


def test_conv_rejections() -> None:
    assert lower(build("Conv", [t(1, 3, 8, 8, 8, 8), np.zeros((4, 3, 3, 3, 3, 3), np.float32)])) \
        == "device Conv is 1-D, 2-D or 3-D only, input has rank 6"
    assert lower(build("Conv", [t("n", 3, 8, 8), np.zeros((4, 3, 3, 3), np.float32)])) == \
        "input 0 shape is not static"
    # Element types are the runtime's answer (kernel info), asked at placement.
    w64 = np.zeros((4, 3, 1, 1), np.float64)
    node = build("Conv", [t(1, 3, 4, 4, dtype=DType.FLOAT64), w64])
    assert placement.device_accepts(node) == \
        "runtime kernel 'Conv': Conv takes float32, got float64"


def test_pools() -> None:
    k = lower(build("MaxPool", [t(1, 2, 8, 8)], {"kernel_shape": [3, 3], "strides": [2, 2],
                                                 "pads": [1, 1, 1, 1]}))
    assert k.op == "MaxPool" and k.attrs == {"kernel_shape": [3, 3], "strides": [2, 2],
                                             "pads": [1, 1, 1, 1], "ceil_mode": 0,
                                             "count_include_pad": 0}
    k = lower(build("AveragePool", [t(1, 2, 7, 7)], {"kernel_shape": [2, 2],
                                                     "auto_pad": "SAME_LOWER"}))
    assert k.attrs["pads"] == [1, 1, 0, 0] and k.attrs["count_include_pad"] == 0
    two = build("MaxPool", [t(1, 2, 8, 8)], {"kernel_shape": [2, 2]}, n_outputs=2)
    assert lower(two) == "device MaxPool has no Indices output"
    dil = build("MaxPool", [t(1, 2, 8, 8)], {"kernel_shape": [2, 2], "dilations": [2, 2]})
    assert lower(dil).attrs["dilations"] == [2, 2]  # oneDNN's pooling and the plane loop dilate
    k = lower(build("GlobalAveragePool", [t(2, 3, 4, 4)]))
    assert k.op == "GlobalAveragePool" and k.inputs == (0,)


def test_gemm_matmul_binary() -> None:
    k = lower(build("Gemm", [t(2, 3), t(4, 3)], {"transB": 1, "alpha": 2.0}))
    assert k.attrs == {"alpha": 2.0, "beta": 1.0, "transA": 0, "transB": 1}
    assert k.inputs == (0, 1, -1)
    assert lower(build("MatMul", [t(2, 3), t(3, 4)])).inputs == (0, 1)
    assert lower(build("Add", [t(2, 3, dtype=DType.INT64), t(3, dtype=DType.INT64)])).op == "Add"
    # Which element types run is the runtime's answer, asked at placement.
    assert placement.device_accepts(
        build("Div", [t(2, dtype=DType.INT64), t(2, dtype=DType.INT64)])) is None
    assert placement.device_accepts(build("Div", [t(2, dtype=DType.INT8), t(2, dtype=DType.INT8)])
                                    ) == ("runtime kernel 'Div': Div takes float32, float64, "
                                          "int64 or int32, got int8")
    assert lower(build("Max", [t(2), t(2), t(2)])) == "device Max takes exactly 2 inputs, got 3"
    assert lower(build("Pow", [t(2, 3), t(1)])).op == "Pow"


def test_unary_and_clip() -> None:
    for op in ("Relu", "Sigmoid", "Tanh", "Exp", "Log", "Sqrt", "Abs", "Neg", "Erf", "Floor",
               "Ceil", "Reciprocal", "HardSwish"):
        k = lower(build(op, [t(2, 3)]))
        assert k.op == op and k.inputs == (0,) and dict(k.attrs) == {}
    # Softplus and Mish run as a one-instruction EltwiseGraph (oneDNN's soft_relu is ~1% off
    # below -5; the region kernel's own exp and log1p are not)
    for op in ("Softplus", "Mish", "Sign", "Round", "Softsign", "Celu", "ThresholdedRelu"):
        k = lower(build(op, [t(2, 3)]))
        assert k.op == "EltwiseGraph" and k.inputs == (0,) and k.attrs["ops"] == op
    # with the instruction's alpha and beta from the node's attributes
    k = lower(build("Selu", [t(2, 3)], {"alpha": 1.5, "gamma": 2.0}))
    assert (k.attrs["ops"], k.attrs["alphas"], k.attrs["betas"]) == ("Selu", [1.5], [2.0])
    k = lower(build("Shrink", [t(2, 3)], {"lambd": 0.25}))
    assert (k.attrs["ops"], k.attrs["alphas"], k.attrs["betas"]) == ("Shrink", [0.25], [0.0])
    assert "float32 only" in lower(build("Sign", [t(2, 3, dtype=DType.INT64)]))
    assert lower(build("Gelu", [t(4)], {"approximate": "tanh"})).attrs == {"approximate": "tanh"}
    assert lower(build("LeakyRelu", [t(4)], {"alpha": 0.1})).attrs == {"alpha": 0.1}
    assert lower(build("HardSigmoid", [t(4)])).attrs == {"alpha": 0.2, "beta": 0.5}
    k = lower(build("Clip", [t(4), np.array(0.0, np.float32), np.array(6.0, np.float32)]))
    assert k.attrs == {"min": 0.0, "max": 6.0} and k.inputs == (0,)
    k = lower(build("Clip", [t(4), None, np.array(1.0, np.float32)]))
    assert k.attrs == {"min": -math.inf, "max": 1.0}
    # a bound the graph computes stays an input, which the kernel reads at run time
    k = lower(build("Clip", [t(4), t()]))
    assert k.attrs == {"max": math.inf} and k.inputs == (0, 1)
    k = lower(build("Clip", [t(4), None, t(1)]))
    assert k.attrs == {"min": -math.inf} and k.inputs == (0, -1, 2)
    assert lower(build("Clip", [t(4), t(2)])) == ("Clip min is neither a constant scalar nor "
                                                 "one element of x's rank or less")


def test_softmax_norms_reduce() -> None:
    assert lower(build("Softmax", [t(2, 3, 4)], {"axis": -1})).attrs == {"axis": 2}
    assert lower(build("LogSoftmax", [t(2, 3)], {"axis": -2})).attrs == {"axis": 0}
    ln = build("LayerNormalization", [t(2, 3, 4), np.ones(4, np.float32)], {"epsilon": 1e-6})
    k = lower(ln)
    assert k.attrs == {"axis": 2, "epsilon": 1e-6} and k.inputs == (0, 1, -1)
    c = np.ones(3, np.float32)
    k = lower(build("BatchNormalization", [t(1, 3, 2, 2), c, c, c, c]))
    assert k.op == "BatchNormalization" and k.inputs == (0, 1, 2, 3, 4)
    k = lower(build("ReduceMean", [t(2, 3, 4), np.array([-1, 0], np.int64)], {"keepdims": 0}))
    assert k.attrs == {"axes": [0, 2], "keepdims": 0} and k.inputs == (0,)
    assert lower(build("ReduceSum", [t(2, 3)])).attrs == {"axes": [0, 1], "keepdims": 1}
    assert lower(build("ReduceSum", [t(2, 3), t(1, dtype=DType.INT64)])) == \
        "ReduceSum axes are not constant"


def test_data_movement() -> None:
    i64 = DType.INT64
    k = lower(build("Concat", [t(2, 3, dtype=i64), t(2, 1, dtype=i64)], {"axis": -1}))
    assert k.attrs == {"axis": 1} and k.inputs == (0, 1)
    assert lower(build("Transpose", [t(2, 3, 4)])).attrs == {"perm": [2, 1, 0]}
    k = lower(build("Gather", [t(5, 4), t(3, dtype=DType.INT32)], {"axis": -2}))
    assert k.attrs == {"axis": 0} and k.inputs == (0, 1)
    k = lower(build("Slice", [t(4, 6), np.array([-3], np.int64), np.array([100], np.int64),
                              np.array([1], np.int64)]))
    assert k.attrs == {"starts": [0, 3], "ends": [4, 6], "axes": [0, 1], "steps": [1, 1]}
    neg = build("Slice", [t(4), np.array([3], np.int64), np.array([0], np.int64),
                          np.array([0], np.int64), np.array([-1], np.int64)])
    k = lower(neg)  # normalized: a negative step's end -1 runs through index 0
    assert k.attrs == {"starts": [3], "ends": [0], "axes": [0], "steps": [-1]}
    k = lower(build("Slice", [t(4), np.array([-1], np.int64), np.array([-9], np.int64),
                              np.array([0], np.int64), np.array([-1], np.int64)]))
    assert k.attrs == {"starts": [3], "ends": [-1], "axes": [0], "steps": [-1]}
    k = lower(build("Where", [t(2, 3, dtype=DType.BOOL), t(2, 3), t(3)]))
    assert k.op == "Where" and k.inputs == (0, 1, 2)
    assert lower(build("Cast", [t(3, dtype=i64)], {"to": 1})).attrs == {"to": "float32"}
    k = lower(build("Expand", [t(3, 1), np.array([2, 3, 4], np.int64)]))
    assert k.op == "Expand" and k.inputs == (0,)
    k = lower(build("Pad", [t(2, 3), np.array([0, 1, 0, 2], np.int64),
                            np.array(0.5, np.float32)]))
    assert k.attrs == {"pads": [0, 1, 0, 2], "value": 0.5} and k.inputs == (0,)
    refl = build("Pad", [t(2, 3), np.array([0, 1, 0, 1], np.int64)], {"mode": "reflect"})
    assert lower(refl).attrs == {"pads": [0, 1, 0, 1], "mode": "reflect"}
    wrap = build("Pad", [t(2, 3), np.array([0, 1, 0, 1], np.int64)], {"mode": "wrap"})
    assert lower(wrap) == "device Pad has no wrap mode"


@pytest.mark.parametrize("op,inputs,attrs", [
    ("Reshape", [t(2, 6), np.array([3, 4], np.int64)], {}),
    ("Flatten", [t(2, 3, 4)], {}),
    ("Squeeze", [t(1, 3), np.array([0], np.int64)], {}),
    ("Unsqueeze", [t(3), np.array([0], np.int64)], {}),
    ("Identity", [t(3)], {}),
    ("Dropout", [t(3)], {}),
])
def test_views_alias_their_input(op: str, inputs: list, attrs: dict) -> None:
    k = lower(build(op, inputs, attrs))
    assert k == ops.DeviceKernel(op="Copy", attrs={}, inputs=(0,))
    assert ops.get(op).alias == {0: 0}


def test_host_only_ops_have_no_lowering() -> None:
    for op in ("Shape", "NonZero", "Loop", "Einsum", "Unique"):
        assert ops.get(op).device is None
    assert not ops.get("RandomNormal").foldable
