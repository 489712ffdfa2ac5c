"""ONNX Attention (opset 23, torch's export of scaled_dot_product_attention) runs on the device
as one FusedAttention, exact against ONNX Runtime and the ONNX reference evaluator, including
grouped heads, causal and window biases, boolean and float masks, rows with no visible key and
a KV cache; what the device steps cannot compute exactly stays the host's Attention. ONNX
RotaryEmbedding runs as the device's Rope."""

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

from graphengine.engine.importers import load_model
from graphengine.engine.model import DeviceProgram, HostProgram
from graphengine.engine.pipeline import CompileOptions, compile_graph
from graphengine.engine.runtime import LoadedModel

RNG = np.random.default_rng(23)
F, BOOL = TensorProto.FLOAT, TensorProto.BOOL


def _model(shapes, attrs=None, mask=None, past=None, outputs=("y",)):
    """Q, K, V of `shapes` (3-D or 4-D), optional mask (name, dtype, shape) and past key/value
    shapes, into one Attention node; the listed outputs are graph outputs."""
    names = ["q", "k", "v"]
    inputs = [helper.make_tensor_value_info(n, F, s) for n, s in zip(names, shapes)]
    feeds = {n: RNG.standard_normal(s).astype(np.float32) for n, s in zip(names, shapes)}
    ins = list(names)
    if mask is not None:
        name, dtype, shape = mask
        ins.append(name)
        if dtype == BOOL:
            value = RNG.random(shape) < 0.6
        else:
            value = np.where(RNG.random(shape) < 0.6, 0, -np.inf).astype(np.float32)
            value += RNG.standard_normal(shape).astype(np.float32) * (value == 0)
        inputs.append(helper.make_tensor_value_info(name, dtype, shape))
        feeds[name] = value
    if past is not None:
        ins += [""] * (4 - len(ins)) + ["past_k", "past_v"]
        for n in ("past_k", "past_v"):
            inputs.append(helper.make_tensor_value_info(n, F, past))
            feeds[n] = RNG.standard_normal(past).astype(np.float32)
    node = helper.make_node("Attention", ins, list(outputs), **(attrs or {}))
    graph = helper.make_graph([node], "attention23", inputs,
                              [helper.make_tensor_value_info(n, F, None) for n in outputs])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 23)],
                              ir_version=10)
    return model, feeds


def _run(model, feeds):
    compiled = compile_graph(load_model(model), CompileOptions(lint=True))
    got = LoadedModel(compiled).execute(feeds)
    kinds = [t.op for p in compiled.programs if isinstance(p, DeviceProgram)
             for t in p.tasks if t.kind == "kernel"]
    host = [n.op_type for p in compiled.programs if isinstance(p, HostProgram)
            for n in p.steps]
    return got, kinds, host


def _check(model, feeds, against_ort=True):
    got, kinds, host = _run(model, feeds)
    want = ReferenceEvaluator(model).run(None, feeds)
    names = [o.name for o in model.graph.output]
    assert sorted(got) == sorted(names)
    for name, w in zip(names, want):
        np.testing.assert_allclose(got[name], w, rtol=2e-5, atol=2e-6, err_msg=name)
    if against_ort:
        theirs = ort.InferenceSession(model.SerializeToString(), providers=[
            "CPUExecutionProvider"]).run(None, feeds)
        for name, w in zip(names, theirs):
            np.testing.assert_allclose(got[name], w, rtol=2e-5, atol=2e-6, err_msg=name)
    return kinds, host


@pytest.mark.parametrize("causal", [0, 1])
@pytest.mark.parametrize("heads", [(4, 4), (4, 2), (6, 1)])
def test_a_4d_attention_is_one_fused_task(causal, heads):
    hq, hk = heads
    model, feeds = _model([(2, hq, 7, 8), (2, hk, 7, 8), (2, hk, 7, 8)],
                          {"is_causal": causal})
    kinds, host = _check(model, feeds)
    assert kinds == ["FusedAttention"] and not host, (kinds, host)


def test_a_3d_attention_splits_and_merges_heads_in_the_fused_task():
    model, feeds = _model([(2, 5, 32), (2, 5, 16), (2, 5, 16)],
                          {"q_num_heads": 4, "kv_num_heads": 2, "is_causal": 1, "scale": 0.3})
    kinds, host = _check(model, feeds)
    assert kinds == ["FusedAttention"] and not host, (kinds, host)


@pytest.mark.parametrize("dtype", [BOOL, F])
@pytest.mark.parametrize("shape", [(2, 1, 6, 6), (6, 6), (2, 4, 6, 6)])
def test_a_mask_with_rows_that_see_no_key_gives_zeros_there(dtype, shape):
    """The reference zeroes a row whose every key is masked (Softmax alone gives NaN): the
    device steps clamp the bias and multiply by the row's visibility."""
    model, feeds = _model([(2, 4, 6, 8)] * 3, mask=("m", dtype, shape))
    m = feeds["m"]
    m[..., 2, :] = False if dtype == BOOL else -np.inf  # row 2 sees nothing
    kinds, host = _check(model, feeds, against_ort=False)
    got, _, _ = _run(model, feeds)
    assert not np.isnan(got["y"]).any()
    np.testing.assert_array_equal(got["y"][:, :, 2], 0)
    assert "FusedAttention" in kinds and not host, (kinds, host)


def test_a_3d_attention_with_a_mask_zeroes_the_dead_rows_after_the_merge():
    model, feeds = _model([(2, 5, 24), (2, 5, 24), (2, 5, 24)],
                          {"q_num_heads": 3, "kv_num_heads": 3}, mask=("m", BOOL, (2, 1, 5, 5)))
    feeds["m"][1, 0, 3] = False
    kinds, host = _check(model, feeds, against_ort=False)
    assert "FusedAttention" in kinds and not host, (kinds, host)


def test_a_window_that_hides_a_whole_row_gives_zeros_there():
    """Causal with a left window of 1, six queries over three keys: query i sees keys i-1
    and i, so queries 4 and 5 see none; the reference gives zeros there."""
    model, feeds = _model([(1, 2, 6, 8), (1, 2, 3, 8), (1, 2, 3, 8)],
                          {"is_causal": 1, "left_window_size": 1})
    kinds, host = _check(model, feeds, against_ort=False)
    got, _, _ = _run(model, feeds)
    np.testing.assert_array_equal(got["y"][:, :, 4:], 0)
    assert np.abs(got["y"][:, :, :4]).min() > 0
    assert "FusedAttention" in kinds and not host, (kinds, host)


def test_a_kv_cache_concatenates_the_past_and_gives_the_present():
    model, feeds = _model([(2, 4, 3, 8), (2, 2, 3, 8), (2, 2, 3, 8)], {"is_causal": 1},
                          past=(2, 2, 5, 8), outputs=("y", "present_k", "present_v"))
    kinds, host = _check(model, feeds)
    assert "FusedAttention" in kinds and not host, (kinds, host)


def test_present_outputs_without_a_past_stay_the_hosts_attention():
    """Without a past the present key is K itself: the node stays whole (on the host)."""
    model, feeds = _model([(2, 4, 3, 8)] * 3, outputs=("y", "present_k", "present_v"))
    kinds, host = _check(model, feeds)
    assert host == ["Attention"], (kinds, host)


def test_softcap_stays_the_hosts_attention():
    model, feeds = _model([(2, 4, 5, 8)] * 3, {"softcap": 2.0})
    kinds, host = _check(model, feeds, against_ort=False)
    assert host == ["Attention"] and "FusedAttention" not in kinds, (kinds, host)


def _rotary_model(x_shape, r=0, interleaved=0, num_heads=None, positions=False):
    """RotaryEmbedding of X (4-D [B, H, S, D] or 3-D [B, S, H*D]) with caches [B, S, r/2]
    or, with `positions`, [max_pos, r/2] read at position_ids [B, S]."""
    b = x_shape[0]
    s = x_shape[2] if len(x_shape) == 4 else x_shape[1]
    d = x_shape[3] if len(x_shape) == 4 else x_shape[2] // num_heads
    half = (r or d) // 2
    cache = (11, half) if positions else (b, s, half)
    ang = RNG.random(cache).astype(np.float32) * 3
    feeds = {"x": RNG.standard_normal(x_shape).astype(np.float32),
             "cos": np.cos(ang), "sin": np.sin(ang)}
    inputs = [helper.make_tensor_value_info("x", F, x_shape),
              helper.make_tensor_value_info("cos", F, cache),
              helper.make_tensor_value_info("sin", F, cache)]
    ins = ["x", "cos", "sin"]
    if positions:
        feeds["pos"] = RNG.integers(0, 11, (b, s)).astype(np.int64)
        inputs.append(helper.make_tensor_value_info("pos", TensorProto.INT64, (b, s)))
        ins.append("pos")
    attrs = {"interleaved": interleaved, "rotary_embedding_dim": r}
    if num_heads:
        attrs["num_heads"] = num_heads
    node = helper.make_node("RotaryEmbedding", ins, ["y"], **attrs)
    graph = helper.make_graph([node], "rotary23", inputs,
                              [helper.make_tensor_value_info("y", F, None)])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 23)],
                             ir_version=10), feeds


@pytest.mark.parametrize("interleaved", [0, 1])
@pytest.mark.parametrize("form", ["4d", "3d", "4d_partial", "3d_positions", "4d_positions"])
def test_rotary_embedding_is_the_devices_rope(interleaved, form):
    shapes = {"4d": ((2, 3, 5, 8), 0, None, False), "3d": ((2, 5, 24), 0, 3, False),
              "4d_partial": ((2, 3, 5, 8), 4, None, False),
              "3d_positions": ((2, 5, 24), 6, 3, True),
              "4d_positions": ((2, 3, 5, 8), 0, None, True)}
    x_shape, r, heads, positions = shapes[form]
    model, feeds = _rotary_model(x_shape, r, interleaved, heads, positions)
    kinds, host = _check(model, feeds)
    assert "Rope" in kinds and not host, (kinds, host)


def test_the_qk_output_as_a_graph_output_stays_the_hosts_attention():
    """The scores output (qk_matmul_output) has no device step: the node stays whole."""
    model, feeds = _model([(2, 4, 3, 8)] * 3, past=(2, 4, 2, 8),
                          outputs=("y", "present_k", "present_v", "qk"))
    kinds, host = _check(model, feeds, against_ort=False)
    assert host == ["Attention"], (kinds, host)


def test_a_causal_bias_past_the_bound_stays_the_hosts_attention(monkeypatch):
    """The causal bias is a compile-time constant [Sq, Sk]; past MAX_WINDOW_BIAS elements
    the node is left to the host's reference (here the bound is lowered to 7x7 - 1)."""
    from graphengine.engine.prepare import attention_op
    monkeypatch.setattr(attention_op, "MAX_WINDOW_BIAS", 48)
    model, feeds = _model([(2, 4, 7, 8)] * 3, {"is_causal": 1})
    kinds, host = _check(model, feeds)
    assert host == ["Attention"], (kinds, host)
