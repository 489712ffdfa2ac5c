"""The data-parallel split on transformer graphs: their mask and position code is separable
(identity gathers of the flattened mask are views, compare/logic/select ops, CumSum along the
sequence, batch constants sliced per chunk), so an encoder or decoder at batch N runs as one
chunk per stream like a CNN does."""

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from graphengine.engine.importers import load_model
from graphengine.engine.optimize import batch_split
from graphengine.engine.pipeline import CompileOptions, compile_graph
from graphengine.engine.runtime import load
from tests.unit.test_batch_split import DW, W, _compile_and_check, _count, _splits, _tiny

N, S, H = 4, 6, 8
RNG = np.random.default_rng(11)


def _const(name, array):
    return numpy_helper.from_array(np.asarray(array), name)


def _mask_path(nd: bool):
    """The traced `masking_utils` form: the [N, S] mask flattened to rows, gathered back with
    arange indices (Gather, or GatherND of (n, s) pairs in LLaMA's export) and reshaped."""
    if nd:
        pairs = np.stack(np.meshgrid(np.arange(N), np.arange(S), indexing="ij"), -1)
        nodes = [helper.make_node("GatherND", ["mask", "pairs"], ["g"]),
                 helper.make_node("Reshape", ["g", "shape_n1s"], ["m3"])]
        inits = [_const("pairs", pairs.reshape(N, 1, S, 2).astype(np.int64))]
    else:
        nodes = [helper.make_node("Flatten", ["mask"], ["flat"], axis=2),
                 helper.make_node("Gather", ["flat", "rows"], ["g"], axis=0),
                 helper.make_node("Reshape", ["g", "minus1"], ["r"]),
                 helper.make_node("Reshape", ["r", "shape_n1s"], ["m3"])]
        inits = [_const("rows", np.arange(N * S, dtype=np.int64).reshape(N, 1, 1, S)),
                 _const("minus1", np.array([-1], np.int64))]
    return nodes, inits + [_const("shape_n1s", np.array([N, 1, S], np.int64))]


def _encoder(nd: bool = False):
    """x [N, S, H] float and mask [N, S] int64 -> an attention over the sequence with the
    mask as an additive bias, a cumulative sum along it, a class row of a batch constant in
    front, a mean over the features and a table row per sample picked by GatherElements of a
    batch constant."""
    mask_nodes, mask_inits = _mask_path(nd)
    nodes = mask_nodes + [
        helper.make_node("Equal", ["m3", "zero_i"], ["masked"]),
        helper.make_node("Not", ["masked"], ["kept"]),
        helper.make_node("And", ["kept", "causal"], ["allowed"]),
        helper.make_node("Where", ["allowed", "zero_f", "neg"], ["bias"]),
        helper.make_node("MatMul", ["x", "wq"], ["q"]),
        helper.make_node("Transpose", ["x"], ["xt"], perm=[0, 2, 1]),
        helper.make_node("MatMul", ["q", "xt"], ["scores"]),
        helper.make_node("Add", ["scores", "bias"], ["biased"]),
        helper.make_node("Softmax", ["biased"], ["p"], axis=-1),
        helper.make_node("MatMul", ["p", "x"], ["ctx"]),
        helper.make_node("CumSum", ["ctx", "axis1"], ["run"]),
        helper.make_node("Concat", ["cls", "run"], ["seq"], axis=1),
        helper.make_node("GatherElements", ["table", "pos"], ["picked"], axis=1),
        helper.make_node("Cast", ["picked"], ["pickedf"], to=TensorProto.FLOAT),
        helper.make_node("Unsqueeze", ["pickedf", "axis2"], ["pcol"]),
        helper.make_node("ReduceMean", ["seq"], ["mean"], axes=[-1], keepdims=1),
        helper.make_node("Sub", ["seq", "mean"], ["centered"]),
        helper.make_node("Mul", ["centered", "pcol"], ["y"]),
    ]
    causal = np.tril(np.ones((S, S), bool))[None]
    inits = mask_inits + [
        _const("zero_i", np.array(0, np.int64)), _const("causal", causal),
        _const("zero_f", np.array(0.0, np.float32)), _const("neg", np.array(-1e4, np.float32)),
        _const("wq", RNG.normal(size=(H, H)).astype(np.float32)),
        _const("axis1", np.array(1, np.int64)), _const("axis2", np.array([2], np.int64)),
        # batch constants: N rows each (an exported graph's class token and position table
        # expanded to the batch, folded)
        _const("cls", np.repeat(RNG.normal(size=(1, 1, H)).astype(np.float32), N, axis=0)),
        _const("table", np.tile(np.arange(10, 10 + S + 1, dtype=np.int64), (N, 1))
               + np.arange(N, dtype=np.int64)[:, None]),
    ]
    graph = helper.make_graph(
        nodes, "enc",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [N, S, H]),
         helper.make_tensor_value_info("mask", TensorProto.INT64, [N, S]),
         helper.make_tensor_value_info("pos", TensorProto.INT64, [N, S + 1])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [N, S + 1, H])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _feeds():
    mask = np.ones((N, S), np.int64)
    mask[1, 4:] = 0
    mask[3, 2:] = 0
    return {"x": RNG.normal(size=(N, S, H)).astype(np.float32), "mask": mask,
            "pos": RNG.integers(0, S + 1, size=(N, S + 1)).astype(np.int64)}


@pytest.mark.parametrize("nd", [False, True], ids=["gather", "gather_nd"])
def test_transformer_mask_code_splits_one_chunk_per_stream(monkeypatch, nd):
    monkeypatch.setattr(batch_split, "MIN_PARALLEL_FLOPS", 1e3)
    model, feeds = _encoder(nd), _feeds()
    compiled = _compile_and_check(model, feeds, data_parallel=2)
    assert _splits(compiled) == [f"batch split: {N} samples as 2 chunks of {N // 2} on 2 "
                                 "streams at once"]
    # the identity gather and the chain of views are one Reshape (a view: no task)
    assert _count(compiled, "Gather") == 0 and _count(compiled, "GatherND") == 0
    assert _count(compiled, "Flatten") == 0
    (prog,) = [p for p in compiled.programs if hasattr(p, "num_streams")]
    assert prog.num_streams == 2
    assert {t.stream for t in prog.tasks if t.kind == "kernel"} == {0, 1}
    # bit-identical to the whole batch: the same kernels per sample, the constants' rows cut
    whole = load(compile_graph(load_model(model), CompileOptions(data_parallel=0))).execute(feeds)
    split = load(compiled).execute(feeds)
    assert np.array_equal(whole["y"], split["y"])

    # only indices 0..rows-1 in order are a view: a permutation stays a Gather, and the
    # graph (its samples mixed) is not split
    if not nd:
        rows = next(i for i in model.graph.initializer if i.name == "rows")
        perm = np.arange(N * S, dtype=np.int64)[::-1].reshape(N, 1, 1, S)
        rows.CopyFrom(_const("rows", perm))
        mixed = _compile_and_check(model, feeds, data_parallel=2)
        assert _count(mixed, "Gather") == 1 and _splits(mixed) == []


def test_a_constant_with_a_row_per_sample_is_cut_per_chunk(monkeypatch):
    """A constant with the batch's N rows, added elementwise, is not shared by the chunks:
    each adds its own rows (the graph stayed whole before)."""
    monkeypatch.setattr(batch_split, "CACHE_BYTES", 4 << 10)
    k = RNG.normal(size=(4, 8, 6, 6)).astype(np.float32)
    model = _tiny([DW, helper.make_node("Add", ["c", "k"], ["y"])], {**W, "k": k})
    x = RNG.normal(size=(4, 8, 6, 6)).astype(np.float32)
    compiled = _compile_and_check(model, {"x": x})  # against onnxruntime, per sample
    assert _splits(compiled) == ["batch split: 4 samples as 2 chunks of 2"]
    # the compiled weights hold k once, as the chunks' two halves (not k twice)
    (prog,) = [p for p in compiled.programs if hasattr(p, "weights")]
    weight_bytes = sum(w.nbytes for w in prog.weights)
    assert k.nbytes <= weight_bytes < 2 * k.nbytes
