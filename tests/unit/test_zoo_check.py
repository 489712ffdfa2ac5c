"""make zoo's verdict (benchmarks/zoo/check.py): how close an output must be to ONNX
Runtime's."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks" / "zoo"))
import check


def test_float32_outputs_are_held_to_1e_3_of_their_scale():
    ref = np.linspace(-20, 20, 101, dtype=np.float32)
    assert check.compare("y", ref * (1 + 5e-4), ref)[1] is None
    assert "outside rtol" in check.compare("y", ref + 0.1, ref)[1]


def test_a_requantizing_model_is_held_to_a_few_8_bit_steps():
    """A 1-ulp difference before a DynamicQuantizeLinear moves values a whole step of
    1/255 of the range: 0.4% of the output's scale passes there, 5% does not."""
    ref = np.linspace(-20, 20, 101, dtype=np.float32)
    off = ref + 0.004 * 20
    assert "outside rtol" in check.compare("y", off, ref)[1]
    assert check.compare("y", off, ref, requantized=True)[1] is None
    assert "outside rtol" in check.compare("y", ref + 0.05 * 20, ref, requantized=True)[1]
    assert check.REQUANTIZING >= {"DynamicQuantizeLinear", "DynamicQuantizeLSTM"}
