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


def test_every_row_is_offered_its_declared_op_types() -> None:
    for match, rewrite, declared in canon.CANONICAL:
        for op in declared:
            assert (match, rewrite, declared) in canon._BY_OP[op]
