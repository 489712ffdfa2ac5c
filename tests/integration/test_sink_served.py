"""Sink mode over the wire: RunGraphRequest.iterations / return_all, through the remote
session against a real server process, equal N single runs."""

from __future__ import annotations

import numpy as np
import pytest

from graphengine.clients import Client
from graphengine.errors import InvalidArgument
from tests.unit.test_sink_mode import affine


def test_iterations_over_the_wire_equal_single_runs(server: str) -> None:
    rng = np.random.default_rng(11)
    xs = rng.standard_normal((8, 2, 4)).astype(np.float32)
    bias = rng.standard_normal(3).astype(np.float32)
    with Client(server, timeout=120) as client, client.session() as session:
        gid = session.add_graph(affine())
        expected = [session.run_graph(gid, {"x": x, "bias": bias})["y"] for x in xs]
        last = session.run_graph(gid, {"x": xs, "bias": bias}, iterations=8)
        every = session.run_graph(gid, {"x": xs, "bias": bias}, iterations=8,
                                  return_all=True)
        np.testing.assert_array_equal(last["y"], expected[-1])
        np.testing.assert_array_equal(every["y"], np.stack(expected))
        with pytest.raises(InvalidArgument, match=r"input 'x' has shape \[8, 2, 4\].*5 long"):
            session.run_graph(gid, {"x": xs, "bias": bias}, iterations=5)
        with pytest.raises(InvalidArgument, match="iterations must be an integer in"):
            session.run_graph(gid, {"x": xs[0], "bias": bias}, iterations=(1 << 20) + 1)
        with pytest.raises(InvalidArgument, match="iterations must be a positive integer"):
            session.run_graph(gid, {"x": xs[0], "bias": bias}, iterations=0)
