"""The torch-free model zoo (tests/zoo.py) builds valid ONNX that onnxruntime runs."""

from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path

import numpy as np
import onnx
import pytest

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import onnxruntime as ort  # noqa: E402

from tests import zoo  # noqa: E402


def _session(model: onnx.ModelProto):
    so = ort.SessionOptions()
    so.intra_op_num_threads = 2
    so.log_severity_level = 3
    return ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])


def _run(model: onnx.ModelProto, feeds: dict) -> dict[str, np.ndarray]:
    sess = _session(model)
    names = [o.name for o in sess.get_outputs()]
    return dict(zip(names, sess.run(names, feeds)))


def _ops(model: onnx.ModelProto) -> set[str]:
    return {n.op_type for n in model.graph.node}


def _check_common(model: onnx.ModelProto) -> None:
    assert model.ir_version == zoo.IR_VERSION == 8
    assert [(o.domain, o.version) for o in model.opset_import] == [("", 17)]
    onnx.checker.check_model(model, full_check=True)


# name -> (builder, expected output shapes at batch 1, op types that must appear)
SMALL = {
    "mlp": (
        lambda: zoo.mlp(sizes=(32, 64, 64, 10)),
        {"output": (1, 10)},
        {"Gemm", "Relu"},
    ),
    "resnet": (
        lambda: zoo.resnet(width=16, image=64, classes=10),
        {"output": (1, 10)},
        {
            "Conv",
            "BatchNormalization",
            "Relu",
            "MaxPool",
            "Add",
            "GlobalAveragePool",
            "Flatten",
            "Gemm",
        },
    ),
    "mobilenetv2": (
        lambda: zoo.mobilenetv2(width_mult=0.35, image=64, classes=10),
        {"output": (1, 10)},
        {"Conv", "BatchNormalization", "Clip", "Add", "GlobalAveragePool", "Flatten", "Gemm"},
    ),
    "bert": (
        lambda: zoo.bert(layers=2, hidden=64, heads=4, intermediate=128, vocab=500, seq=16),
        {"last_hidden_state": (1, 16, 64), "pooler_output": (1, 64)},
        {
            "Gather",
            "Add",
            "LayerNormalization",
            "MatMul",
            "Shape",
            "Unsqueeze",
            "Concat",
            "Reshape",
            "Transpose",
            "Div",
            "Softmax",
            "Erf",
            "Mul",
            "Cast",
            "Sub",
            "Slice",
            "Gemm",
            "Tanh",
        },
    ),
    "branchy": (
        lambda: zoo.branchy(towers=3, channels=8, size=16),
        {"output": (1, 8, 16, 16)},
        {"Conv", "Relu", "Concat"},
    ),
}


@pytest.mark.parametrize("name", sorted(SMALL))
def test_small_model_valid_and_runs(name):
    build, shapes, ops = SMALL[name]
    model = build()
    _check_common(model)
    assert ops <= _ops(model), ops - _ops(model)
    outs = _run(model, zoo.random_inputs(model, seed=1))
    assert {k: v.shape for k, v in outs.items()} == shapes
    for k, v in outs.items():
        assert v.dtype == np.float32, k
        assert np.isfinite(v).all(), k
        assert float(np.std(v)) > 1e-3, f"{k} is degenerate"


@pytest.mark.parametrize("name", sorted(SMALL))
def test_deterministic(name):
    build = SMALL[name][0]
    assert build().SerializeToString() == build().SerializeToString()


def test_seed_changes_weights():
    a = zoo.mlp(sizes=(8, 8), seed=0)
    b = zoo.mlp(sizes=(8, 8), seed=1)
    assert a.graph.initializer[0].raw_data != b.graph.initializer[0].raw_data


def test_full_size_layer_counts():
    """Default sizes are the real architectures (counted, not run: keeps the suite fast)."""
    r18 = Counter(n.op_type for n in zoo.resnet().graph.node)
    assert r18["Conv"] == 20 and r18["BatchNormalization"] == 20 and r18["Add"] == 8
    assert r18["Gemm"] == 1
    conv1 = next(n for n in zoo.resnet().graph.node if n.op_type == "Conv")
    assert len(conv1.input) == 3  # Conv carries a bias; BN stays a separate node

    mb = Counter(n.op_type for n in zoo.mobilenetv2(image=32).graph.node)
    assert mb["Conv"] == 52 and mb["BatchNormalization"] == 52 and mb["Clip"] == 35
    assert mb["Add"] == 10
    depthwise = [
        n
        for n in zoo.mobilenetv2(image=32).graph.node
        if n.op_type == "Conv" and next(a.i for a in n.attribute if a.name == "group") > 1
    ]
    assert len(depthwise) == 17

    bert = zoo.bert(vocab=1000, seq=8)
    c = Counter(n.op_type for n in bert.graph.node)
    assert c["LayerNormalization"] == 9 and c["Softmax"] == 4 and c["Erf"] == 4
    assert c["MatMul"] == 4 * 8  # q, k, v, out, fc1, fc2 + 2 attention matmuls per layer


def test_mlp_symbolic_batch():
    model = zoo.mlp(sizes=(16, 32, 4), symbolic_batch=True)
    _check_common(model)
    assert model.graph.input[0].type.tensor_type.shape.dim[0].dim_param == "batch"
    feeds = zoo.random_inputs(model, batch=3)
    assert feeds["input"].shape == (3, 16)
    assert _run(model, feeds)["output"].shape == (3, 4)


def test_vision_batch():
    model = zoo.resnet(depths=(1, 1), width=8, image=32, classes=5, batch=2)
    out = _run(model, zoo.random_inputs(model))["output"]
    assert out.shape == (2, 5) and np.isfinite(out).all()


def test_bert_symbolic_batch_and_sequence():
    model = zoo.bert(
        layers=1, hidden=32, heads=2, intermediate=64, vocab=100, seq="sequence", batch="batch"
    )
    _check_common(model)
    sess = _session(model)
    for b, s in ((1, 8), (3, 20)):
        feeds = zoo.random_inputs(model, batch=b, dims={"sequence": s})
        hidden, pooled = sess.run(["last_hidden_state", "pooler_output"], feeds)
        assert hidden.shape == (b, s, 32) and pooled.shape == (b, 32)
        assert np.isfinite(hidden).all() and np.isfinite(pooled).all()


def test_bert_mask_hides_padded_tokens():
    """Changing tokens where attention_mask == 0 must not change the unmasked outputs."""
    model = zoo.bert(layers=2, hidden=32, heads=4, intermediate=64, vocab=100, seq=12)
    feeds = zoo.random_inputs(model, seed=3)
    mask = feeds["attention_mask"]
    assert mask[0, 0] == 1 and mask[0, -1] == 0
    keep = mask[0] == 1
    a = _run(model, feeds)["last_hidden_state"]
    ids = feeds["input_ids"].copy()
    ids[0, ~keep] = (ids[0, ~keep] + 1) % 100
    b = _run(model, {**feeds, "input_ids": ids})["last_hidden_state"]
    np.testing.assert_allclose(a[0, keep], b[0, keep], rtol=1e-4, atol=1e-4)
    assert not np.allclose(a[0, ~keep], b[0, ~keep])


def test_batchnorm_stats_are_non_trivial():
    model = zoo.resnet(depths=(1,), width=8, image=16, classes=3)
    inits = {t.name: onnx.numpy_helper.to_array(t) for t in model.graph.initializer}
    for n in model.graph.node:
        if n.op_type == "BatchNormalization":
            scale, bias, mean, var = (inits[i] for i in n.input[1:])
            assert not np.allclose(scale, 1) and not np.allclose(bias, 0)
            assert not np.allclose(mean, 0) and not np.allclose(var, 1)
            assert (var > 0).all()


def test_random_inputs_rules():
    model = zoo.bert(layers=1, hidden=16, heads=2, intermediate=32, vocab=37, seq=64, batch=4)
    feeds = zoo.random_inputs(model, seed=5)
    ids, mask = feeds["input_ids"], feeds["attention_mask"]
    assert ids.dtype == np.int64 and mask.dtype == np.int64
    assert ids.shape == mask.shape == (4, 64)
    assert ids.min() >= 0 and ids.max() < 37 and len(np.unique(ids)) > 10
    assert set(np.unique(mask)) == {0, 1}
    for row in mask:  # ones then a few trailing zeros
        n = int(row.sum())
        assert 0 < n < 64 and (row[:n] == 1).all() and (row[n:] == 0).all()
    again = zoo.random_inputs(model, seed=5)
    assert all(np.array_equal(feeds[k], again[k]) for k in feeds)

    img = zoo.random_inputs(zoo.branchy(towers=2, channels=4, size=8), seed=0)["input"]
    assert img.dtype == np.float32 and img.shape == (1, 4, 8, 8)
