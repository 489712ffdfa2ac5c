"""canonicalize offers a node only to the rows of its op type (prepare/canonicalize.py's
CANONICAL declares each row's op types): a row's match must accept no other op type, or
the dispatch would skip a rewrite the full scan made."""

from __future__ import annotations

import importlib

import numpy as np
import pytest

from graphengine.engine import ops
from graphengine.engine.dtypes import DType
from graphengine.engine.ir import Graph, TensorMeta

canon = importlib.import_module("graphengine.engine.prepare.canonicalize")

# every op type some row declares, and registered ones that none does
DECLARED = sorted({op for row in canon.CANONICAL for op in row[2]})
OTHERS = [op for op in ("Relu", "Add", "Concat", "Transpose", "Conv", "MatMul", "Gather",
                        "Reshape", "Slice", "ReduceSum", "Softmax", "Expand", "Where", "Cast",
                        "LayerNormalization", "Squeeze", "Unsqueeze", "Split") if ops.has(op)]


def _node(op: str):
    """A node of `op` over two float inputs and a constant: what each match reads first is
    its op type, so the operands do not matter for the types it must refuse."""
    g = Graph("g")
    x = g.add_input("x", TensorMeta(DType.FLOAT32, (2, 3, 4)))
    y = g.add_input("y", TensorMeta(DType.FLOAT32, (2, 3, 4)))
    c = g.add_constant(None, np.ones((4,), np.int64))
    node = g.add_node(op, [x, y, c], attrs={})
    node.outputs[0].meta = TensorMeta(DType.FLOAT32, (2, 3, 4))
    return node


@pytest.mark.parametrize("row", range(len(canon.CANONICAL)))
def test_a_row_matches_no_op_type_it_does_not_declare(row: int) -> None:
    match, _, declared = canon.CANONICAL[row]
    assert declared, f"{match.__name__} declares no op type"
    for op in sorted(set(DECLARED + OTHERS) - set(declared)):
        assert not match(_node(op)), f"{match.__name__} accepts {op}, not in {declared}"


def _small() -> bytes:
    """Nodes several rows rewrite: a 1-D MaxPool, a Tile by constants, a scalar Max, a Split
    that undoes a Concat."""
    from onnx import TensorProto, helper, numpy_helper
    nodes = [helper.make_node("MaxPool", ["x"], ["p"], kernel_shape=[2]),
             helper.make_node("Tile", ["p", "reps"], ["t"]),
             helper.make_node("Max", ["t", "zero"], ["m"]),
             helper.make_node("Concat", ["m", "m"], ["c"], axis=1),
             helper.make_node("Split", ["c", "halves"], ["a", "b"], axis=1),
             helper.make_node("Add", ["a", "b"], ["y"])]
    graph = helper.make_graph(
        nodes, "small", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(np.array([1, 1, 2], np.int64), "reps"),
         numpy_helper.from_array(np.array(0, np.float32), "zero"),
         numpy_helper.from_array(np.array([3, 3], np.int64), "halves")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()


def test_on_real_graphs_every_match_is_of_a_declared_type() -> None:
    """Every row's match over every node of a few whole models (shapes inferred, as the
    prepare stage offers them): where one accepts a node, the node's type is one the row
    declares, so the dispatch offers it that node (a mixture of experts' hit-list form, a
    BERT encoder, a MobileNetV2)."""
    from graphengine.engine.importers import load_model
    from graphengine.engine.prepare import infer_shapes
    from tests import zoo
    from tests.unit import test_expert_rows

    models = [test_expert_rows.hit_list_moe(2, 0), test_expert_rows.every_expert_moe(2),
              zoo.bert().SerializeToString(), zoo.mobilenetv2().SerializeToString(), _small()]
    matched = 0
    for model in models:
        graph = load_model(model)
        infer_shapes(graph)
        for node in list(graph.nodes):
            for match, _, declared in canon.CANONICAL:
                if match(node):
                    matched += 1
                    assert node.op_type in declared, (match.__name__, node.op_type)
                    assert (match, _, declared) in canon._BY_OP[node.op_type]
    assert matched >= 5  # the check saw rows accept nodes (one-hot, pool, tile, max, split)
