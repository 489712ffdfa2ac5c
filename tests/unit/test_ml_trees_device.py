"""TreeEnsembleClassifier / TreeEnsembleRegressor on the device (kernels_trees.cc): random
forests of every branch mode, NaN rows with and without missing-value tracks, AVERAGE, base
values, every post transform, binary and multiclass, against the numpy reference and ONNX
Runtime; malformed trees are load errors naming the node."""

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from graphengine import _runtime
from graphengine.engine.importers import load_model
from graphengine.engine.pipeline import CompileOptions, compile_graph
from graphengine.engine.runtime import LoadedModel
from tests.unit.device_cases import reference

MODES = ["BRANCH_LEQ", "BRANCH_LT", "BRANCH_GTE", "BRANCH_GT", "BRANCH_EQ", "BRANCH_NEQ"]
# Rows and thresholds from one small set, so that EQ / NEQ and the boundaries are hit.
GRID = np.array([-1.0, -0.5, 0.0, 0.5, 1.0, 2.0], np.float32)


def _grow(rng, tree, rows, weights, depth, width, targets, binary, positive, tracks, modes,
          every_target, level=0):
    """Appends one random (sub)tree's nodes and leaf weights; returns its root's node id."""
    nid = sum(r[0] == tree for r in rows)
    if level == depth or (level > 1 and rng.random() < 0.25):
        rows.append((tree, nid, 0, "LEAF", 0.0, 0, 0, 0))
        ids = [0] if binary else list(range(targets)) if every_target else sorted(
            rng.choice(targets, rng.integers(1, targets + 1), replace=False).tolist())
        for c in ids:
            weights.append((tree, nid, c, float(rng.uniform(0 if positive else -1, 1))))
        return nid
    at = len(rows)
    rows.append((tree, nid))
    args = (rng, tree, rows, weights, depth, width, targets, binary, positive, tracks, modes,
            every_target, level + 1)
    yes, no = _grow(*args), _grow(*args)
    rows[at] = (tree, nid, int(rng.integers(width)), str(rng.choice(modes)),
                float(rng.choice(GRID)), yes, no, int(tracks and rng.random() < 0.5))
    return nid


def _forest(rng, trees=7, depth=4, width=5, targets=3, binary=False, positive=False,
            tracks=True, modes=MODES, every_target=True):
    """The nodes_* and leaf weight attributes of a random forest (leaf weights as four lists:
    tree ids, node ids, class/target ids, weights). Tree ids are sparse; a leaf weighs every
    class or target (skl2onnx's form) or, unless `every_target`, a random few."""
    rows, weights = [], []
    for tree in sorted(rng.choice(50, trees, replace=False).tolist()):
        _grow(rng, tree, rows, weights, depth, width, targets, binary, positive, tracks, modes,
              every_target)
    cols = list(zip(*rows))
    nodes = dict(nodes_treeids=cols[0], nodes_nodeids=cols[1], nodes_featureids=cols[2],
                 nodes_modes=cols[3], nodes_values=cols[4], nodes_truenodeids=cols[5],
                 nodes_falsenodeids=cols[6], nodes_missing_value_tracks_true=cols[7])
    return {k: list(v) for k, v in nodes.items()}, [list(c) for c in zip(*weights)]


def _rows(rng, n, width, nan=True):
    x = rng.choice(GRID, (n, width)).astype(np.float32)
    x += rng.choice([0, 0, 0.25], x.shape).astype(np.float32)  # off the grid too
    if nan:
        x[rng.random(x.shape) < 0.15] = np.nan
    return x


def _model(op, attrs, n, width, outputs):
    node = helper.make_node(op, ["X"], [name for name, _, _ in outputs], domain="ai.onnx.ml",
                            **attrs)
    graph = helper.make_graph([node], "trees", [helper.make_tensor_value_info(
        "X", TensorProto.FLOAT, [n, width])], [helper.make_tensor_value_info(*o)
                                               for o in outputs])
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                helper.make_opsetid("ai.onnx.ml", 3)])
    m.ir_version = 8
    return m


def _classifier(rng, classes, post, n=40, width=5, base=None, **forest):
    nodes, (tids, nids, ids, ws) = _forest(rng, width=width, targets=classes, **forest)
    attrs = dict(nodes, class_treeids=tids, class_nodeids=nids, class_ids=ids,
                 class_weights=ws, classlabels_int64s=list(range(7, 7 + classes)),
                 post_transform=post)
    if base is not None:
        attrs["base_values"] = base
    return _model("TreeEnsembleClassifier", attrs, n, width, [
        ("label", TensorProto.INT64, [n]), ("prob", TensorProto.FLOAT, [n, classes])])


def _regressor(rng, targets, post, aggregate, n=40, width=5, base=None, **forest):
    nodes, (tids, nids, ids, ws) = _forest(rng, width=width, targets=targets, **forest)
    attrs = dict(nodes, target_treeids=tids, target_nodeids=nids, target_ids=ids,
                 target_weights=ws, n_targets=targets, post_transform=post,
                 aggregate_function=aggregate)
    if base is not None:
        attrs["base_values"] = base
    return _model("TreeEnsembleRegressor", attrs, n, width, [
        ("Y", TensorProto.FLOAT, [n, targets])])


def _check(m, x, ort_too=True, atol=1e-6):
    """Runs `m` on the device (asserting it was placed there) and compares with the numpy
    reference and, when `ort_too`, ONNX Runtime: labels exactly, scores to float rounding."""
    compiled = compile_graph(load_model(m), CompileOptions(lint=True))
    assert {p.engine for p in compiled.report.placements} == {"device"}, \
        compiled.report.render()
    got = list(LoadedModel(compiled).execute({"X": x}).values())
    wants = [reference(m, {"X": x})]
    if ort_too:
        wants.append(ort.InferenceSession(m.SerializeToString(), providers=[
            "CPUExecutionProvider"]).run(None, {"X": x}))
    for want in wants:
        for g, w in zip(got, want, strict=True):
            assert g.dtype == w.dtype and g.shape == w.shape
            if g.dtype.kind == "i":
                np.testing.assert_array_equal(g, w)
            else:
                np.testing.assert_allclose(g, w, rtol=1e-5, atol=atol)
    return got


@pytest.mark.parametrize("post", ["NONE", "SOFTMAX", "LOGISTIC", "SOFTMAX_ZERO"])
@pytest.mark.parametrize("tracks", [True, False])
def test_multiclass_forests_of_every_mode(post, tracks):
    rng = np.random.default_rng(len(post) * 2 + tracks)
    m = _classifier(rng, 4, post, tracks=tracks, base=[0.1, -0.2, 0.3, 0.05])
    _check(m, _rows(rng, 40, 5))


@pytest.mark.parametrize("post", ["NONE", "LOGISTIC", "SOFTMAX"])
def test_classes_no_reached_leaf_weighs_keep_their_base_value(post):
    """Leaves weighing only some classes: a class no reached leaf weighs scores its base value
    (a regressor's target scores 0, below), as ONNX Runtime computes them."""
    rng = np.random.default_rng(23)
    m = _classifier(rng, 4, post, trees=2, every_target=False, base=[0.1, -0.2, 0.3, 0.05])
    _check(m, _rows(rng, 40, 5))


def test_multiclass_probit_matches_the_reference():
    """PROBIT through the reference's exact inverse erf (ONNX Runtime's closed form is off by
    up to ~2e-3, so it is compared more loosely)."""
    rng = np.random.default_rng(5)
    m = _classifier(rng, 3, "PROBIT", positive=True, trees=3)
    x = _rows(rng, 40, 5)
    got = _check(m, x, ort_too=False)
    want = ort.InferenceSession(m.SerializeToString(), providers=[
        "CPUExecutionProvider"]).run(None, {"X": x})
    finite = np.isfinite(want[1])
    np.testing.assert_allclose(got[1][finite], want[1][finite], atol=5e-3)


@pytest.mark.parametrize("post,positive", [("NONE", True), ("NONE", False),
                                           ("LOGISTIC", False), ("SOFTMAX", False),
                                           ("SOFTMAX_ZERO", False)])
@pytest.mark.parametrize("base", [None, [0.2]])
def test_binary_forests_as_skl2onnx_writes_them(post, positive, base):
    """Weights of class 0 only: class 1 scores s, class 0 1 - s (probabilities) or -s."""
    rng = np.random.default_rng(11 + positive)
    m = _classifier(rng, 2, post, binary=True, positive=positive, base=base)
    _check(m, _rows(rng, 40, 5))


@pytest.mark.parametrize("post", ["LOGISTIC", "SOFTMAX", "PROBIT"])
def test_binary_forests_where_onnxruntime_differs_follow_the_reference(post):
    """Positive weights under a transform: ONNX Runtime's binary rule differs from the
    reference's here (reported); the device gives the host's answer."""
    rng = np.random.default_rng(13)
    _check(_classifier(rng, 2, post, binary=True, positive=True), _rows(rng, 40, 5),
           ort_too=False)


@pytest.mark.parametrize("aggregate", ["SUM", "AVERAGE"])
@pytest.mark.parametrize("post", ["NONE", "LOGISTIC", "SOFTMAX", "SOFTMAX_ZERO"])
def test_regressor_forests_with_several_targets(aggregate, post):
    rng = np.random.default_rng(len(post) + len(aggregate))
    m = _regressor(rng, 3, post, aggregate, base=[0.5, -1.0, 0.25])
    _check(m, _rows(rng, 40, 5))


@pytest.mark.parametrize("post", ["NONE", "LOGISTIC"])
def test_regressor_targets_no_reached_leaf_weighs_score_zero(post):
    rng = np.random.default_rng(29)
    m = _regressor(rng, 3, post, "AVERAGE", trees=2, every_target=False, base=[0.5, -1, 2])
    _check(m, _rows(rng, 40, 5))


def test_one_target_regressor_without_missing_tracks():
    rng = np.random.default_rng(3)
    m = _regressor(rng, 1, "NONE", "SUM", tracks=False, base=[1.5])
    _check(m, _rows(rng, 40, 5))


def test_nan_under_neq_takes_the_true_branch():
    """A NaN compares unequal, so BRANCH_NEQ sends it to the true child even untracked (ONNX
    Runtime's rule, now the reference's too)."""
    attrs = dict(nodes_treeids=[0, 0, 0], nodes_nodeids=[0, 1, 2], nodes_featureids=[0, 0, 0],
                 nodes_modes=["BRANCH_NEQ", "LEAF", "LEAF"], nodes_values=[1.0, 0, 0],
                 nodes_truenodeids=[1, 0, 0], nodes_falsenodeids=[2, 0, 0],
                 target_treeids=[0, 0], target_nodeids=[1, 2], target_ids=[0, 0],
                 target_weights=[10.0, 20.0], n_targets=1)
    m = _model("TreeEnsembleRegressor", attrs, 3, 1, [("Y", TensorProto.FLOAT, [3, 1])])
    (y,) = _check(m, np.array([[np.nan], [1.0], [2.0]], np.float32))
    np.testing.assert_array_equal(y.ravel(), [10.0, 20.0, 10.0])


def test_a_large_batch_of_deep_trees_runs_in_parallel_blocks_of_rows():
    """603 rows: blocks of 8 rows on the lane's threads, the last block of 3."""
    rng = np.random.default_rng(17)
    m = _classifier(rng, 5, "SOFTMAX", n=603, width=8, trees=40, depth=8)
    _check(m, _rows(rng, 603, 8))


def test_string_labels_stay_on_the_host_with_a_reason():
    rng = np.random.default_rng(19)
    nodes, (tids, nids, ids, ws) = _forest(rng, targets=2)
    m = _model("TreeEnsembleClassifier", dict(
        nodes, class_treeids=tids, class_nodeids=nids, class_ids=ids, class_weights=ws,
        classlabels_strings=["no", "yes"]), 4, 5, [("label", TensorProto.STRING, [4]),
                                                    ("prob", TensorProto.FLOAT, [4, 2])])
    compiled = compile_graph(load_model(m), CompileOptions(lint=True))
    (placed,) = compiled.report.placements
    assert placed.engine == "host"
    assert "string class labels stay on the host" in str(placed.rejections)


def _spec(attrs, width=3, rows=2, targets=1):
    """A one-kernel device program of a regressor over [rows, width]."""
    return {"name": "m", "arena_bytes": 4096, "num_streams": 1, "num_events": 0,
            "tensors": [{"name": "x", "dtype": "float32", "shape": [rows, width],
                         "region": "arena", "offset": 0},
                        {"name": "y", "dtype": "float32", "shape": [rows, targets],
                         "region": "arena", "offset": 2048}],
            "tasks": [{"kind": "kernel", "name": "forest", "op": "TreeEnsembleRegressor",
                       "stream": 0, "inputs": [0], "outputs": [1],
                       "attrs": {"n_targets": targets, **attrs}}],
            "inputs": [0], "outputs": [1]}


# One tree: x0 <= 0.5 ? node 1 : (x2 < 2 ? node 3 : node 4)
GOOD = dict(nodes_treeids=[0] * 5, nodes_nodeids=[0, 1, 2, 3, 4],
            nodes_featureids=[0, 0, 2, 0, 0], nodes_modes=[0, -1, 1, -1, -1],
            nodes_values=[0.5, 0.0, 2.0, 0.0, 0.0], nodes_truenodeids=[1, 0, 3, 0, 0],
            nodes_falsenodeids=[2, 0, 4, 0, 0], weights_treeids=[0, 0, 0],
            weights_nodeids=[1, 3, 4], weights_ids=[0, 0, 0], weights=[1.0, 2.0, 3.0])


def test_the_kernel_runs_a_program_of_its_own():
    m = _runtime.Model(_runtime.Device(), _spec(GOOD))
    (y,) = m.execute([np.array([[0.0, 9, 9], [1.0, 9, 1.0]], np.float32)])
    np.testing.assert_array_equal(y.ravel(), [1.0, 2.0])


@pytest.mark.parametrize("change,message", [
    ({"nodes_truenodeids": [1, 0, 7, 0, 0]}, r"tree 0 node 2: its true child 7 is not a node"),
    ({"nodes_featureids": [0, 0, 3, 0, 0]}, r"tree 0 node 2 reads feature 3 of rows with 3"),
    ({"nodes_featureids": [-1, 0, 2, 0, 0]}, r"tree 0 node 0 reads feature -1"),
    ({"nodes_falsenodeids": [2, 0, 0, 0, 0]}, r"tree 0 has a cycle through node 0"),
    ({"weights_ids": [0, 1, 0]}, r"tree 0 node 3: class/target id 1 is out of range \[0, 1\)"),
    ({"weights_nodeids": [1, 3, 9]}, r"a weight names tree 0 node 9, which does not exist"),
    ({"nodes_modes": [0, -1, 9, -1, -1]}, r"tree 0 node 2: unknown mode 9"),
    ({"nodes_values": [0.5]}, r"nodes_values has 1 values for 5 nodes"),
    ({"nodes_nodeids": [0, 1, 2, 3, 3]}, r"tree 0 has node 3 twice"),
])
def test_malformed_trees_are_load_errors(change, message):
    with pytest.raises(_runtime.InvalidArgument, match=message):
        _runtime.Model(_runtime.Device(), _spec({**GOOD, **change}))


def test_a_malformed_graph_fails_to_load_naming_the_node():
    attrs = dict(nodes_treeids=[0, 0, 0], nodes_nodeids=[0, 1, 2], nodes_featureids=[4, 0, 0],
                 nodes_modes=["BRANCH_LEQ", "LEAF", "LEAF"], nodes_values=[1.0, 0, 0],
                 nodes_truenodeids=[1, 0, 0], nodes_falsenodeids=[2, 0, 0],
                 target_treeids=[0], target_nodeids=[1], target_ids=[0],
                 target_weights=[1.0], n_targets=1)
    m = _model("TreeEnsembleRegressor", attrs, 2, 3, [("Y", TensorProto.FLOAT, [2, 1])])
    compiled = compile_graph(load_model(m), CompileOptions(lint=True))
    with pytest.raises(Exception, match=r"TreeEnsembleRegressor.*reads feature 4 of rows "
                                        r"with 3 features"):
        LoadedModel(compiled)
