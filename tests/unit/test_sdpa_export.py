"""torch's dynamo export of scaled_dot_product_attention below opset 23 (torch 2.13's default
export is opset 20) is one FusedAttention: Kᵀ written as a 3-D transpose between Reshapes,
the scale as Muls on Q and Kᵀ, a boolean mask as Where(mask, 0, -inf), and the probabilities
through Where(IsNaN(P), 0, P) (a row that sees no key gives zeros). Exact against ONNX
Runtime, dead rows included; near misses stay the ops they are."""

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from graphengine import _runtime
from graphengine.engine.importers import load_model
from graphengine.engine.model import DeviceProgram
from graphengine.engine.pipeline import CompileOptions, compile_graph
from graphengine.engine.runtime import LoadedModel
from tests.unit.test_fusion_rope import run_against_ort

RNG = np.random.default_rng(20)
B, H, S, D = 2, 4, 6, 8


def _sdpa(nan_fill=0.0, merged_perm=(0, 2, 1), heads_split=None, kv_heads=H, kv_batch=B):
    """The graph torch 2.13 exports for SDPA with a boolean mask (opset 20); `kv_heads` 1:
    one key/value head that MatMul broadcasts over Q's heads (multi-query attention)."""
    root = np.float32(D ** -0.25)
    heads_split = heads_split or (kv_batch, kv_heads, D, S)
    inits = [numpy_helper.from_array(np.array(v, np.int64), n) for n, v in (
        ("flat", [kv_batch * kv_heads, S, D]), ("split", list(heads_split)))]
    inits += [numpy_helper.from_array(np.array(root), "root"),
              numpy_helper.from_array(np.array(0, np.float32), "zero"),
              numpy_helper.from_array(np.array(-np.inf, np.float32), "ninf"),
              numpy_helper.from_array(np.array(nan_fill, np.float32), "fill")]
    nodes = [helper.make_node("Reshape", ["k", "flat"], ["k3"]),
             helper.make_node("Transpose", ["k3"], ["k3t"], perm=list(merged_perm)),
             helper.make_node("Reshape", ["k3t", "split"], ["kt"]),
             helper.make_node("Mul", ["q", "root"], ["qs"]),
             helper.make_node("Mul", ["kt", "root"], ["kts"]),
             helper.make_node("Where", ["mask", "zero", "ninf"], ["bias"]),
             helper.make_node("MatMul", ["qs", "kts"], ["scores"]),
             helper.make_node("Add", ["scores", "bias"], ["biased"]),
             helper.make_node("Softmax", ["biased"], ["p"], axis=-1),
             helper.make_node("IsNaN", ["p"], ["dead"]),
             helper.make_node("Where", ["dead", "fill", "p"], ["p0"]),
             helper.make_node("MatMul", ["p0", "v"], ["y"])]
    shapes = {"q": (B, H, S, D), "k": (kv_batch, kv_heads, S, D),
              "v": (kv_batch, kv_heads, S, D)}
    inputs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, shapes[n]) for n in "qkv"]
    inputs.append(helper.make_tensor_value_info("mask", TensorProto.BOOL, [B, 1, S, S]))
    graph = helper.make_graph(nodes, "sdpa20", inputs,
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                              inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)],
                              ir_version=9)
    feeds = {n: RNG.standard_normal(shapes[n]).astype(np.float32) for n in "qkv"}
    mask = RNG.random((B, 1, S, S)) < 0.7
    mask[1, 0, 3] = False  # batch 1, query 3 sees no key
    feeds["mask"] = mask
    return model, feeds


_kernels = run_against_ort  # (output, device kernels), checked against ONNX Runtime


def test_torchs_sdpa_export_is_one_fused_attention_with_zero_dead_rows():
    got, kinds = _kernels(*_sdpa())
    assert sorted(kinds) == ["FusedAttention", "Where"], kinds  # the Where is the mask's
    np.testing.assert_array_equal(got[1, :, 3], 0)


def test_one_key_value_head_broadcast_over_the_query_heads_is_fused():
    """Multi-query attention (Falcon): K and V [B, 1, S, D], MatMul broadcasting them over
    Q's heads, are the kernel's grouped heads with a group of H."""
    got, kinds = _kernels(*_sdpa(kv_heads=1))
    assert sorted(kinds) == ["FusedAttention", "Where"], kinds


def test_keys_broadcast_over_the_batch_are_not_fused():
    """The kernel reads K and V per batch item: one K for every item stays MatMuls."""
    _, kinds = _kernels(*_sdpa(kv_heads=1, kv_batch=1))
    assert "FusedAttention" not in kinds and "Softmax" in kinds, kinds


def test_filling_nan_with_another_value_is_not_absorbed():
    """Where(IsNaN(P), 1, P) is not the kernel's zeroing: the ops stay (and stay exact)."""
    _, kinds = _kernels(*_sdpa(nan_fill=1.0))
    assert "IsNaN" in kinds and "FusedAttention" not in kinds, kinds


def _turned(split):
    """x [2, 3, 4, 5] -> Reshape [6, 4, 5] -> Transpose [0, 2, 1] -> Reshape `split`."""
    inits = [numpy_helper.from_array(np.array(v, np.int64), n) for n, v in (
        ("flat", [6, 4, 5]), ("split", list(split)))]
    nodes = [helper.make_node("Reshape", ["x", "flat"], ["m"]),
             helper.make_node("Transpose", ["m"], ["t"], perm=[0, 2, 1]),
             helper.make_node("Reshape", ["t", "split"], ["r"]),
             helper.make_node("Relu", ["r"], ["y"])]
    graph = helper.make_graph(
        nodes, "turned", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 4, 5])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)],
                              ir_version=8)
    return model, {"x": RNG.standard_normal((2, 3, 4, 5)).astype(np.float32)}


def test_a_3d_transpose_between_merging_and_splitting_reshapes_is_one_4d_transpose():
    model, feeds = _turned((2, 3, 5, 4))
    compiled = compile_graph(load_model(model), CompileOptions(lint=True))
    np.testing.assert_array_equal(LoadedModel(compiled).execute(feeds)["y"],
                                  np.maximum(feeds["x"].transpose(0, 1, 3, 2), 0))
    ops = [(t.op, t.attrs.get("perm")) for p in compiled.programs
           if isinstance(p, DeviceProgram) for t in p.tasks if t.kind == "kernel"]
    assert ops[0] == ("Transpose", [0, 1, 3, 2]) and len(ops) == 2, ops


def test_a_split_into_other_axes_is_not_a_4d_transpose():
    """Split back as [3, 2, ...], the merged axis is regrouped: the Reshapes stay."""
    model, feeds = _turned((3, 2, 5, 4))
    compiled = compile_graph(load_model(model), CompileOptions(lint=True))
    want = np.maximum(feeds["x"].reshape(6, 4, 5).transpose(0, 2, 1).reshape(3, 2, 5, 4), 0)
    np.testing.assert_array_equal(LoadedModel(compiled).execute(feeds)["y"], want)


def test_the_attention_kernel_checks_nan_to_zero():
    spec = {"name": "m", "arena_bytes": 8192, "num_streams": 1, "num_events": 0,
            "tensors": [{"name": n, "dtype": "float32", "shape": [1, 1, 4, 4],
                         "region": "arena", "offset": 1024 * i}
                        for i, n in enumerate(("q", "k", "v", "y"))],
            "tasks": [{"kind": "kernel", "name": "a", "op": "FusedAttention", "stream": 0,
                       "inputs": [0, 1, 2], "outputs": [3],
                       "attrs": {"scale": 0.5, "nan_to_zero": 2}}],
            "inputs": [0, 1, 2], "outputs": [3]}
    with pytest.raises(_runtime.InvalidArgument, match="nan_to_zero 2 must be 0 or 1"):
        _runtime.Model(_runtime.Device(), spec)
