"""engine/flops.py: FLOPs of convolutions and matrix products, and the compile report's count."""

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from graphengine.engine.flops import graph_flops, node_flops
from graphengine.engine.importers import load_model
from graphengine.engine.pipeline import compile_graph
from tests import zoo


def _arith_model() -> onnx.ModelProto:
    """x[N,6] -> MatMul [6,8] -> Transpose -> Gemm(transA=1) with B [8,12] -> an image
    [1,4,3,4] -> a 3x3 Conv in two groups of 2 channels."""
    rng = np.random.default_rng(0)
    inits = {
        "w": rng.standard_normal((6, 8)).astype(np.float32),
        "g": rng.standard_normal((8, 12)).astype(np.float32),
        "k": rng.standard_normal((4, 2, 3, 3)).astype(np.float32),
        "shape": np.array([1, 4, 3, 4], np.int64),
    }
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["m"]),
        helper.make_node("Transpose", ["m"], ["mt"], perm=[1, 0]),
        helper.make_node("Gemm", ["mt", "g"], ["y"], transA=1),
        helper.make_node("Reshape", ["y", "shape"], ["img"]),
        helper.make_node("Conv", ["img", "k"], ["out"], group=2, pads=[1, 1, 1, 1]),
    ]
    graph = helper.make_graph(
        nodes, "arith", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 6])],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(v, k) for k, v in inits.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=10)


def test_counts_each_kind_at_the_compiled_shapes():
    compiled = compile_graph(load_model(_arith_model()), input_shapes={"x": (4, 6)})
    matmul = 2 * (4 * 8) * 6              # outputs x K
    gemm = 2 * (4 * 12) * 8               # K of a transposed A is its first dimension
    conv = 2 * (1 * 4 * 3 * 4) * (2 * 9)  # outputs x (input channels per group x taps)
    assert compiled.report.flops == matmul + gemm + conv
    assert f"arithmetic: {(matmul + gemm + conv) / 1e9:.3f} GFLOP" in compiled.report.render()


def test_an_mlp_counts_every_layer_per_row():
    sizes = (16, 32, 8)
    compiled = compile_graph(load_model(zoo.mlp(batch=3, sizes=sizes)))
    assert compiled.report.flops == 3 * sum(2 * a * b for a, b in zip(sizes, sizes[1:]))


def test_symbolic_shapes_and_other_ops_count_nothing():
    graph = load_model(_arith_model())  # N is symbolic and nothing is inferred yet
    assert graph_flops(graph) == 0.0
    assert [node_flops(n) for n in graph.nodes if n.op_type in ("Transpose", "Reshape")] == [0, 0]


def test_an_integer_matrix_product_counts_as_a_matmul():
    rng = np.random.default_rng(1)
    graph = helper.make_graph(
        [helper.make_node("MatMulInteger", ["x", "w"], ["y"])], "mmi",
        [helper.make_tensor_value_info("x", TensorProto.UINT8, [2, 3, 16])],
        [helper.make_tensor_value_info("y", TensorProto.INT32, None)],
        [numpy_helper.from_array(rng.integers(0, 256, (16, 5)).astype(np.uint8), "w")])
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=10)
    assert compile_graph(load_model(m)).report.flops == 2 * (2 * 3 * 5) * 16
