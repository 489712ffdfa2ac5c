"""The runtime's EltwiseChain kernel: one oneDNN primitive with post-ops, checked at load."""

from __future__ import annotations

import numpy as np
import pytest

from graphengine import _runtime as rt

RNG = np.random.default_rng(5)


def _chain_spec(ops, operands, n_operands=1, alphas=None, shape=(2, 3)):
    spec = {"name": "m", "arena_bytes": 4096, "num_streams": 1, "num_events": 0,
            "tensors": [{"name": f"t{i}", "dtype": "float32", "shape": list(shape),
                         "region": "arena", "offset": 256 * i} for i in range(n_operands + 2)],
            "tasks": [{"kind": "kernel", "name": "chain", "op": "EltwiseChain", "stream": 0,
                       "inputs": list(range(n_operands + 1)), "outputs": [n_operands + 1],
                       "attrs": {"ops": ops, "operands": operands,
                                 "alphas": alphas or [0.0] * len(operands),
                                 "betas": [0.0] * len(operands)}}],
            "inputs": list(range(n_operands + 1)), "outputs": [n_operands + 1]}
    return spec


def test_runtime_chain_runs_and_checks_its_spec():
    dev = rt.Device()
    m = rt.Model(dev, _chain_spec("Add,Relu,Mul", [1, -1, 0]))
    x, z = (RNG.standard_normal((2, 3)).astype(np.float32) for _ in range(2))
    (y,) = m.execute([x, z])
    np.testing.assert_allclose(y, np.maximum(x + z, 0) * x, rtol=1e-6)
    bad = [("Add,Cosh", [1, -1], "step 1: unknown op 'Cosh'"),
           ("Add,Relu", [1], "one entry per step"),
           ("Add,Relu", [5, -1], r"operand index 5 out of range \[0, 2\)"),
           ("Relu,Relu", [-1, 1], r"step 1 \(Relu\): takes no operand"),
           ("Mul", [-1], r"step 0 \(Mul\): needs an operand")]
    for ops, operands, message in bad:
        with pytest.raises(rt.InvalidArgument, match=r"node 'chain' \(EltwiseChain\): .*"
                                                     + message):
            rt.Model(dev, _chain_spec(ops, operands, alphas=[0.0] * len(operands)))
    wrong = _chain_spec("Add", [1])
    wrong["tensors"][1]["shape"] = [3, 2]
    with pytest.raises(rt.InvalidArgument, match="must have the output's shape"):
        rt.Model(dev, wrong)


def test_runtime_chain_with_scalar_operand_and_empty_tensors():
    dev = rt.Device()
    spec = _chain_spec("Mul,Sigmoid,Sub", [1, -1, 0])
    spec["tensors"][1]["shape"] = []  # one element: a per-tensor operand
    m = rt.Model(dev, spec)
    x = RNG.standard_normal((2, 3)).astype(np.float32)
    k = np.float32(1.7)
    (y,) = m.execute([x, np.asarray(k)])
    np.testing.assert_allclose(y, 1 / (1 + np.exp(-x * k)) - x, rtol=1e-5, atol=1e-6)
    empty = rt.Model(dev, _chain_spec("Add,Relu", [1, -1], shape=(0, 3)))
    (y,) = empty.execute([np.zeros((0, 3), np.float32)] * 2)
    assert y.shape == (0, 3)
