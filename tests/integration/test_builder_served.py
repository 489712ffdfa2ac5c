"""Graphs built with graphengine.Graph / graphengine.ops, sent to a real server process by
the remote session: the same outputs as numpy (and as the in-process Session)."""

from __future__ import annotations

import numpy as np
import pytest

import graphengine
from graphengine.clients import Client
from tests import builder_models


@pytest.mark.parametrize("make", [builder_models.mlp, builder_models.basic_block])
def test_built_models_match_numpy_through_a_server(server: str, make) -> None:
    graph, inputs, reference = make(np.random.default_rng(5))
    with graphengine.Session() as local:
        expected_local = local.run_graph(local.add_graph(graph), inputs)
    with Client(server, timeout=120) as client, client.session() as session:
        gid = session.add_graph(graph)
        info = session.graph_info(gid)
        assert info.name == graph.name
        assert [t.name for t in info.inputs] == [t.name for t in graph.inputs]
        out = session.run_graph(gid, inputs)
    (name,) = out
    np.testing.assert_allclose(out[name], reference(inputs["x"]), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(out[name], expected_local[name], rtol=1e-6, atol=1e-6)


def test_a_saved_graph_file_is_sent_by_path(server: str, tmp_path) -> None:
    graph, inputs, reference = builder_models.mlp(np.random.default_rng(6))
    with Client(server, timeout=120) as client, client.session() as session:
        for path in (tmp_path / "mlp.graphdef", tmp_path / "mlp.pbtxt"):
            graph.save(path)
            out = session.run_graph(session.add_graph(str(path)), inputs)
            np.testing.assert_allclose(out["probs"], reference(inputs["x"]), rtol=1e-4,
                                       atol=1e-6)
