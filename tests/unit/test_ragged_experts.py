"""JetMoE's / Granite-MoE's ParallelExperts: rows split by computed sizes, each part through
its own Linear, joined again (prepare/ragged_experts.py): one SegmentMatMul on the device,
each segment's rows through its expert, held to ONNX Runtime; sizes that do not cover the
rows, or a negative one, fail the run naming them, and the model runs on after it."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from graphengine.engine.errors import GraphEngineError
from graphengine.engine.importers import load_model
from graphengine.engine.pipeline import CompileOptions, compile_graph
from graphengine.engine.runtime import load

ROWS, K, N = 20, 12, 10


def _parallel_experts(experts: int, form: str, rows: int = ROWS):
    """X [ROWS, K] split by sizes (computed: a graph input plus zero, as a router's counts
    are) into `experts` parts; part i through Gemm (transB, bias), Gemm without bias, or
    MatMul by [K, N]; the parts' results concatenated."""
    rng = np.random.default_rng(experts)
    nodes = [helper.make_node("Add", ["counts", "zero"], ["sizes"]),
             helper.make_node("Split", ["x", "sizes"], [f"p{i}" for i in range(experts)],
                              axis=0)]
    inits = [numpy_helper.from_array(np.zeros(experts, np.int64), "zero")]
    for i in range(experts):
        if form == "matmul":
            inits.append(numpy_helper.from_array(rng.standard_normal((K, N)).astype(np.float32),
                                                 f"w{i}"))
            nodes.append(helper.make_node("MatMul", [f"p{i}", f"w{i}"], [f"y{i}"]))
            continue
        inits.append(numpy_helper.from_array(rng.standard_normal((N, K)).astype(np.float32),
                                             f"w{i}"))
        ins = [f"p{i}", f"w{i}"]
        if form == "gemm_bias":
            inits.append(numpy_helper.from_array(rng.standard_normal(N).astype(np.float32),
                                                 f"b{i}"))
            ins.append(f"b{i}")
        nodes.append(helper.make_node("Gemm", ins, [f"y{i}"], transB=1))
    nodes.append(helper.make_node("Concat", [f"y{i}" for i in range(experts)], ["y"], axis=0))
    nodes.append(helper.make_node("Relu", ["y"], ["out"]))
    graph = helper.make_graph(nodes, "parallel_experts", [
        helper.make_tensor_value_info("x", TensorProto.FLOAT, [rows, K]),
        helper.make_tensor_value_info("counts", TensorProto.INT64, [experts])],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, None)], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


@pytest.mark.parametrize("form", ["gemm_bias", "gemm", "matmul"])
@pytest.mark.parametrize("counts", [
    [5, 7, 0, 8], [20, 0, 0, 0], [0, 0, 0, 20], [1, 2, 3, 14],
    # 200 rows: 64-row blocks where more than 48 rows of a segment are left, their tails past
    # the segment's end (130 = 64 + 64 + 2; 49 one big block; 48 three small ones), and a
    # last segment whose big block reads the spare rows
    [130, 0, 21, 49], [64, 64, 24, 48], [7, 0, 0, 193]])
def test_ragged_parts_are_one_segment_product(form, counts):
    experts, rows = len(counts), sum(counts)
    model = _parallel_experts(experts, form, rows)
    compiled = compile_graph(load_model(model), CompileOptions(lint=True))
    engines = {(p.op_type, p.engine) for p in compiled.report.placements}
    assert all(e == "device" for _, e in engines), compiled.report.render()
    assert not {"Split", "Concat"} & {op for op, _ in engines}
    assert "SegmentMatMul" in {op for op, _ in engines}
    feeds = {"x": np.random.default_rng(3).standard_normal((rows, K)).astype(np.float32),
             "counts": np.array(counts, np.int64)}
    model_ = load(compiled)
    got = model_.execute(feeds)["out"]
    want = ort.InferenceSession(model.SerializeToString(), providers=[
        "CPUExecutionProvider"]).run(None, feeds)[0]
    assert got.shape == want.shape == (rows, N)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    impls = {t["impl"] for nat in model_.natives.values() for t in nat.profile()
             if t["op"] == "SegmentMatMul"}
    assert impls and all(i.endswith("16/64-row blocks" if rows >= 64 else "16-row blocks")
                         for i in impls), impls


@pytest.mark.parametrize("counts,message", [
    ([5, 5, 5], "add up to 15, not the 20 rows"), ([30, -5, -5], "size 30 of segment 0"),
    ([25, -5, 0], "size 25 of segment 0"), ([10, -1, 11], "size -1 of segment 1")])
def test_sizes_that_do_not_cover_the_rows_fail_the_run(counts, message):
    model = _parallel_experts(3, "gemm_bias")
    loaded = load(compile_graph(load_model(model), CompileOptions()))
    feeds = {"x": np.ones((ROWS, K), np.float32), "counts": np.array(counts, np.int64)}
    with pytest.raises(GraphEngineError, match=f"SegmentMatMul.*{message}"):
        loaded.execute(feeds)
    feeds["counts"] = np.array([10, 5, 5], np.int64)  # and the model still runs after it
    assert loaded.execute(feeds)["out"].shape == (ROWS, N)
