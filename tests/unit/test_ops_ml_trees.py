"""ai.onnx.ml TreeEnsembleClassifier / TreeEnsembleRegressor against ONNX Runtime."""

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

import graphengine

# Two trees over 3 features; tree 0: x0 <= 0.5 ? (x1 < -1 ? L1 : L2) : L3; tree 1: x2 > 0 ? L4 : L5
NODES = dict(
    nodes_treeids=[0, 0, 0, 0, 0, 1, 1, 1], nodes_nodeids=[0, 1, 2, 3, 4, 0, 1, 2],
    nodes_featureids=[0, 1, 0, 0, 0, 2, 0, 0],
    nodes_modes=["BRANCH_LEQ", "BRANCH_LT", "LEAF", "LEAF", "LEAF", "BRANCH_GT", "LEAF",
                 "LEAF"],
    nodes_values=[0.5, -1.0, 0, 0, 0, 0.0, 0, 0],
    nodes_truenodeids=[1, 2, 0, 0, 0, 1, 0, 0], nodes_falsenodeids=[4, 3, 0, 0, 0, 2, 0, 0],
    nodes_missing_value_tracks_true=[1, 0, 0, 0, 0, 0, 0, 0])
LEAVES = [(0, 2), (0, 3), (0, 4), (1, 1), (1, 2)]


def _run(node, outputs, x):
    graph = helper.make_graph([node], "trees", [helper.make_tensor_value_info(
        "X", TensorProto.FLOAT, ["n", 3])], outputs)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                    helper.make_opsetid("ai.onnx.ml", 3)])
    model.ir_version = 8
    want = ort.InferenceSession(model.SerializeToString(),
                                providers=["CPUExecutionProvider"]).run(None, {"X": x})
    with graphengine.Session() as sess:
        got = sess.run_graph(sess.add_graph(model), {"X": x})
    return list(got.values()), want


X = np.array([[0.1, -2, 1], [0.1, 0, -1], [0.9, 5, 0.5], [np.nan, -3, -2], [0.5, -1, 0]],
             np.float32)


@pytest.mark.parametrize("post", ["NONE", "SOFTMAX", "LOGISTIC"])
@pytest.mark.parametrize("classes", [2, 3])
def test_tree_ensemble_classifier(post, classes):
    rng = np.random.default_rng(classes)
    ids, tids, nids, weights = [], [], [], []
    for t, n in LEAVES:
        for c in range(classes if classes > 2 else 1):  # binary: weights of one class only
            tids.append(t)
            nids.append(n)
            ids.append(c)
            weights.append(float(rng.uniform(-1, 1)))
    node = helper.make_node(
        "TreeEnsembleClassifier", ["X"], ["label", "prob"], domain="ai.onnx.ml", **NODES,
        class_treeids=tids, class_nodeids=nids, class_ids=ids, class_weights=weights,
        classlabels_int64s=list(range(10, 10 + classes)), post_transform=post)
    outputs = [helper.make_tensor_value_info("label", TensorProto.INT64, ["n"]),
               helper.make_tensor_value_info("prob", TensorProto.FLOAT, ["n", classes])]
    (label, prob), (want_label, want_prob) = _run(node, outputs, X)
    np.testing.assert_allclose(prob, want_prob, rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(label, want_label)


@pytest.mark.parametrize("aggregate", ["SUM", "AVERAGE"])
def test_tree_ensemble_regressor(aggregate):
    node = helper.make_node(
        "TreeEnsembleRegressor", ["X"], ["Y"], domain="ai.onnx.ml", **NODES, n_targets=2,
        target_treeids=[t for t, _ in LEAVES], target_nodeids=[n for _, n in LEAVES],
        target_ids=[0, 1, 0, 1, 1], target_weights=[0.5, -1.5, 2.0, 0.25, -0.75],
        aggregate_function=aggregate, base_values=[0.1, -0.2])
    outputs = [helper.make_tensor_value_info("Y", TensorProto.FLOAT, ["n", 2])]
    (y,), (want,) = _run(node, outputs, X)
    np.testing.assert_allclose(y, want, rtol=1e-5, atol=1e-6)
