"""Sink mode through the API: Session.run_graph(graph_id, inputs, iterations=N,
return_all=False) runs the graph N times in one call and equals N single runs."""

from __future__ import annotations

import numpy as np
import pytest

import graphengine
from graphengine import ops
from graphengine.engine.errors import InvalidInput, NotFound, ResourceExhausted
from graphengine.server.core.session import MAX_SINK_ITERATIONS


def affine(batch: int | str = 2) -> graphengine.Graph:
    """y = relu(x @ w + bias): `x` sliced per iteration, `bias` often shared."""
    w = np.random.default_rng(1).standard_normal((4, 3)).astype(np.float32)
    g = graphengine.Graph("affine")
    x = g.input("x", "float32", (batch, 4))
    bias = g.input("bias", "float32", (3,))
    g.output(ops.Relu(ops.Add(ops.MatMul(x, w), bias)), name="y")
    return g


def singles(session: graphengine.Session, gid: int, xs: np.ndarray, bias: np.ndarray) -> list:
    return [session.run_graph(gid, {"x": x, "bias": bias})["y"] for x in xs]


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng(7)


def test_eight_iterations_equal_eight_single_runs(rng) -> None:
    xs = rng.standard_normal((8, 2, 4)).astype(np.float32)
    bias = rng.standard_normal(3).astype(np.float32)
    with graphengine.Session() as s:
        gid = s.add_graph(affine())
        expected = singles(s, gid, xs, bias)
        before = s.runtime_stats()
        last = s.run_graph(gid, {"x": xs, "bias": bias}, iterations=8)
        after = s.runtime_stats()
        # One device program: the 8 iterations are one native launch.
        assert (after.runs - before.runs, after.iterations - before.iterations) == (1, 8)
        every = s.run_graph(gid, {"x": xs, "bias": bias}, iterations=8, return_all=True)
    np.testing.assert_array_equal(last["y"], expected[-1])
    assert every["y"].shape == (8, 2, 3)
    np.testing.assert_array_equal(every["y"], np.stack(expected))


def test_every_input_sliced_and_a_symbolic_batch(rng) -> None:
    xs = rng.standard_normal((5, 3, 4)).astype(np.float32)
    biases = rng.standard_normal((5, 3)).astype(np.float32)
    with graphengine.Session() as s:
        gid = s.add_graph(affine("batch"))
        expected = [s.run_graph(gid, {"x": x, "bias": b})["y"] for x, b in zip(xs, biases)]
        every = s.run_graph(gid, {"x": xs, "bias": biases}, iterations=5, return_all=True)
    np.testing.assert_array_equal(every["y"], np.stack(expected))


def test_inputs_of_the_declared_rank_are_reused_by_every_iteration(rng) -> None:
    x = rng.standard_normal((2, 4)).astype(np.float32)
    bias = rng.standard_normal(3).astype(np.float32)
    with graphengine.Session() as s:
        gid = s.add_graph(affine())
        one = s.run_graph(gid, {"x": x, "bias": bias})["y"]
        every = s.run_graph(gid, {"x": x, "bias": bias}, iterations=3, return_all=True)
    np.testing.assert_array_equal(every["y"], np.stack([one] * 3))


def test_a_host_program_runs_the_iterations_one_after_the_other(rng) -> None:
    # NonZero's output size depends on the data: the graph is not one device program.
    g = graphengine.Graph("nonzero_count")
    x = g.input("x", "float32", (6,))
    g.output(ops.Shape(ops.NonZero(x)), name="n")
    xs = (rng.standard_normal((4, 6)) > 0).astype(np.float32) * rng.standard_normal((4, 6))
    xs = xs.astype(np.float32)
    with graphengine.Session() as s:
        gid = s.add_graph(g)
        expected = [s.run_graph(gid, {"x": x})["n"] for x in xs]
        every = s.run_graph(gid, {"x": xs}, iterations=4, return_all=True)
    np.testing.assert_array_equal(every["n"], np.stack(expected))
    assert [int(e[1]) for e in expected] == [int(np.count_nonzero(x)) for x in xs]


@pytest.mark.parametrize("iterations", [0, -1, True, 2.0, MAX_SINK_ITERATIONS + 1])
def test_iterations_out_of_range_are_refused(iterations) -> None:
    with graphengine.Session() as s:
        gid = s.add_graph(affine())
        with pytest.raises(InvalidInput, match="iterations must be an integer"):
            s.run_graph(gid, {"x": np.zeros((2, 4), np.float32),
                              "bias": np.zeros(3, np.float32)}, iterations=iterations)


def test_a_leading_axis_of_the_wrong_length_names_the_input() -> None:
    with graphengine.Session() as s:
        gid = s.add_graph(affine())
        with pytest.raises(InvalidInput, match=r"input 'x' has shape \[3, 2, 4\].*4 long"):
            s.run_graph(gid, {"x": np.zeros((3, 2, 4), np.float32),
                              "bias": np.zeros(3, np.float32)}, iterations=4)
        with pytest.raises(InvalidInput, match="missing input 'bias'"):
            s.run_graph(gid, {"x": np.zeros((4, 2, 4), np.float32)}, iterations=4)
        with pytest.raises(InvalidInput, match="input 'x' is not an array"):
            s.run_graph(gid, {"x": [[1.0], [1.0, 2.0]], "bias": np.zeros(3, np.float32)},
                        iterations=2)
        with pytest.raises(NotFound, match="graph 99"):
            s.run_graph(99, {}, iterations=2)


def test_stacked_outputs_beyond_the_session_quota_are_refused_before_running() -> None:
    g = graphengine.Graph("wide")
    x = g.input("x", "float32", (1024,))
    g.output(ops.Tile(x, np.array([64], np.int64)), name="y")  # 256 KiB a run
    with graphengine.Session(graphengine.SessionOptions(memory_limit_bytes=4 << 20)) as s:
        gid = s.add_graph(g)
        feed = {"x": np.ones(1024, np.float32)}
        assert s.run_graph(gid, feed, iterations=64)["y"].shape == (65536,)
        with pytest.raises(ResourceExhausted, match="64 iterations of outputs need 16777216"):
            s.run_graph(gid, feed, iterations=64, return_all=True)
