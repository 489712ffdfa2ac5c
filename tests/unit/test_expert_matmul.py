"""transformers' batched_mm experts: each routed row's expert weight gathered, then one
column multiplied by it (prepare/expert_matmul.py): one product by every expert and a pick
of each row's, held to ONNX Runtime; a bad expert index still fails as the Gather did."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from graphengine.engine.errors import GraphEngineError
from graphengine.engine.importers import load_model
from graphengine.engine.model import DeviceProgram
from graphengine.engine.pipeline import CompileOptions, compile_graph
from graphengine.engine.runtime import load


def _batched_mm(rows: int, experts: int, n: int = 24, k: int = 16, index_type=TensorProto.INT64,
                row_form: bool = False, nd: bool = False):
    """`row_form`: each row vector x [1, K] times its gathered expert [K, N] (gpt-oss's
    experts), else the gathered [N, K] times a column x [K, 1] (transformers' batched_mm).
    `nd`: the experts gathered by GatherND of idx [rows, 1] (Qwen3-Next's export)."""
    shape = (experts, k, n) if row_form else (experts, n, k)
    w = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    gather = helper.make_node("GatherND", ["w", "idx"], ["wg"]) if nd else \
        helper.make_node("Gather", ["w", "idx"], ["wg"], axis=0)
    nodes = [gather, helper.make_node("MatMul", ["x", "wg"] if row_form else ["wg", "x"], ["y"])]
    return helper.make_model(helper.make_graph(nodes, "batched_mm", [
        helper.make_tensor_value_info("x", TensorProto.FLOAT, [rows, 1, k] if row_form
                                      else [rows, k, 1]),
        helper.make_tensor_value_info("idx", index_type, [rows, 1] if nd else [rows])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(w, "w")]),
        opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def _kernel_outputs(compiled) -> list[tuple[str, tuple]]:
    """(op, shape of its first output) of every kernel task."""
    return [(t.op, tuple(p.tensors[t.outputs[0]].shape)) for p in compiled.programs
            if isinstance(p, DeviceProgram) for t in p.tasks if t.kind == "kernel"]


@pytest.mark.parametrize("row_form", [False, True])
@pytest.mark.parametrize("index_type, nd", [(TensorProto.INT64, False), (TensorProto.INT32, False),
                                            (TensorProto.INT64, True)])  # GatherND: int64
def test_rows_by_gathered_experts_are_one_product_by_all_experts(index_type, nd, row_form):
    rows, experts = 12, 4
    model = _batched_mm(rows, experts, index_type=index_type, row_form=row_form, nd=nd)
    rng = np.random.default_rng(1)
    dtype = np.int64 if index_type == TensorProto.INT64 else np.int32
    idx = rng.integers(-experts, experts, rows).astype(dtype)  # negatives count back
    feeds = {"x": rng.standard_normal((rows, 1, 16) if row_form else (rows, 16, 1)
                                      ).astype(np.float32),
             "idx": idx.reshape(rows, 1) if nd else idx}
    compiled = compile_graph(load_model(model), CompileOptions(lint=True))
    kernels = _kernel_outputs(compiled)
    # no copy of a weight per row: the only gather picks [rows, N] from the product by all
    assert "Gather" not in {op for op, _ in kernels}, kernels
    assert [shape for op, shape in kernels if op == "GatherND"] == [(rows, 24)], kernels
    got = load(compiled).execute(feeds)["y"]
    want = ort.InferenceSession(model.SerializeToString(), providers=[
        "CPUExecutionProvider"]).run(None, feeds)[0]
    assert got.shape == want.shape == ((rows, 1, 24) if row_form else (rows, 24, 1))
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("row_form", [False, True])
def test_fewer_rows_than_experts_keep_the_gather(row_form):
    """With fewer rows than experts (a decode step of a wide MoE) the product by all
    experts would read weights the gathers never touch: the gathers stay."""
    compiled = compile_graph(load_model(_batched_mm(3, 8, row_form=row_form)), CompileOptions())
    ops = [t.op for p in compiled.programs if isinstance(p, DeviceProgram) for t in p.tasks
           if t.kind == "kernel"]
    assert "Gather" in ops and "GatherND" not in ops, ops


def test_an_expert_index_out_of_range_still_fails():
    model = _batched_mm(8, 4)
    compiled = load(compile_graph(load_model(model), CompileOptions()))
    feeds = {"x": np.ones((8, 16, 1), np.float32), "idx": np.array([0, 1, 2, 3, 4, 0, 1, 2])}
    with pytest.raises(GraphEngineError, match="out of range|index"):
        compiled.execute(feeds)
