"""bench_zoo's agreement check: how far an engine's outputs are from ONNX Runtime's."""

import importlib.util
from pathlib import Path

import numpy as np
import pytest

# by path: benchmarks/ and benchmarks/zoo/ both hold a run.py that other tests import
_spec = importlib.util.spec_from_file_location(
    "bench_agreement", Path(__file__).resolve().parents[2] / "benchmarks" / "agreement.py")
_agreement = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_agreement)
deviation = _agreement.deviation


def test_float_outputs_are_held_to_the_reference_scale():
    ref = {"y": np.array([[4.0, -2.0], [1.0, 0.5]], np.float32)}
    assert deviation({"y": ref["y"].copy()}, ref) == 0.0
    moved = ref["y"].copy()
    moved[1, 1] += 0.04  # 0.04 of a tensor whose largest magnitude is 4
    assert deviation({"y": moved}, ref) == pytest.approx(0.01)


def test_the_worst_output_counts_and_only_shared_names():
    ref = {"a": np.ones(3, np.float32), "b": np.arange(4, dtype=np.int64)}
    outs = {"a": np.ones(3, np.float32), "b": np.array([0, 1, 2, 5]), "extra": np.zeros(2)}
    assert deviation(outs, ref) == pytest.approx(0.25)  # one of four indices differs
    assert deviation({"other": np.ones(3)}, ref) is None


def test_nan_where_the_reference_has_nan_agrees_and_elsewhere_does_not():
    ref = {"y": np.array([np.nan, 1.0, np.inf], np.float32)}
    assert deviation({"y": ref["y"].copy()}, ref) == 0.0
    assert deviation({"y": np.array([np.nan, np.nan, np.inf], np.float32)}, ref) == np.inf
    assert deviation({"y": np.zeros((1, 3), np.float32)}, ref) == np.inf  # shape differs
