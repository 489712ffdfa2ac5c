"""Einsum as the device's Transpose / Reshape / ReduceSum / MatMul (engine/prepare/einsum.py):
every equation exact against numpy and, where it lowers, with no host step left."""

import numpy as np
import pytest
from onnx import TensorProto, helper

from graphengine.engine.importers import load_model
from graphengine.engine.pipeline import CompileOptions, compile_graph
from graphengine.engine.runtime import LoadedModel

# (equation, operand shapes): attention as Funnel / XLNet / TF exports write it, plain
# products, outer and dot products, sums over one operand's own labels, an ellipsis, a
# broadcast batch label, single-operand transposes and reductions
CASES = [
    ("bind,bjnd->bnij", [(2, 5, 4, 8), (2, 7, 4, 8)]),
    ("td,dnh->tnh", [(6, 16), (16, 4, 8)]),
    ("binh,tnh->bnit", [(2, 5, 4, 8), (6, 4, 8)]),
    ("bnij,bjnd->bind", [(2, 4, 5, 7), (2, 7, 4, 8)]),
    ("bind,snd->bnis", [(2, 5, 4, 8), (3, 4, 8)]),
    ("ij,jk->ik", [(5, 6), (6, 7)]),
    ("ij,jk", [(5, 6), (6, 7)]),  # implicit output: the labels seen once, sorted
    ("i,i->", [(9,), (9,)]),
    ("i,j->ij", [(4,), (5,)]),
    ("ij,ij->ij", [(3, 4), (3, 4)]),
    ("bij,bkj->bik", [(3, 4, 5), (3, 6, 5)]),
    ("abc,cd->abd", [(2, 3, 4), (4, 5)]),
    ("ijk,kl->li", [(2, 3, 4), (4, 5)]),  # j summed in the first operand alone
    ("...ij,...jk->...ik", [(2, 3, 4, 5), (3, 5, 6)]),
    ("bhqd,bhkd->bhqk", [(1, 2, 5, 8), (3, 2, 6, 8)]),  # b broadcasts from 1
    ("bij->bji", [(2, 3, 4)]),
    ("ij->j", [(5, 6)]),
    ("ijk->ki", [(3, 4, 5)]),
]


def _compile(eq, shapes):
    names = [f"x{i}" for i in range(len(shapes))]
    graph = helper.make_graph(
        [helper.make_node("Einsum", names, ["y"], equation=eq)], "g",
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, list(s))
         for n, s in zip(names, shapes)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    return names, compile_graph(load_model(model), CompileOptions(lint=True))


@pytest.mark.parametrize("eq,shapes", CASES, ids=[c[0] for c in CASES])
def test_einsum_runs_on_the_device_and_matches_numpy(eq, shapes):
    names, compiled = _compile(eq, shapes)
    assert {p.engine for p in compiled.report.placements} == {"device"}, \
        compiled.report.render()
    rng = np.random.default_rng(0)
    feeds = {n: rng.standard_normal(s).astype(np.float32) for n, s in zip(names, shapes)}
    got = LoadedModel(compiled).execute(feeds)["y"]
    want = np.einsum(eq, *[feeds[n].astype(np.float64) for n in names])
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("eq,shapes", [("ii->i", [(4, 4)]), ("ij,jj->i", [(3, 4), (4, 4)])])
def test_a_repeated_label_stays_on_the_host_and_is_right(eq, shapes):
    """A diagonal is no matrix product: the host's numpy einsum runs it."""
    names, compiled = _compile(eq, shapes)
    assert "host" in {p.engine for p in compiled.report.placements}
    rng = np.random.default_rng(1)
    feeds = {n: rng.standard_normal(s).astype(np.float32) for n, s in zip(names, shapes)}
    got = LoadedModel(compiled).execute(feeds)["y"]
    np.testing.assert_allclose(got, np.einsum(eq, *feeds.values()), rtol=1e-5, atol=1e-5)
