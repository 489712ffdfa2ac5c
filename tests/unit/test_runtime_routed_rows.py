"""The runtime's MatMul over routed rows (rows=1): only the first count * rows_unit rows of
A's folded batch matter (a mixture of experts' padded selection, prepare/expert_rows.py), so
the kernel multiplies only the blocks of rows the count covers (kernels_matmul.cc), and the
narrow layers' dot products stop at the count (kernels_gemv.cc)."""

from __future__ import annotations

import numpy as np
import pytest

from graphengine import _runtime as rt
from tests.unit.test_runtime import Const, load_op

RNG = np.random.default_rng(11)


def _randn(*shape) -> np.ndarray:
    return RNG.standard_normal(shape).astype(np.float32)


def _counted(a, b, count, *, unit: int = 1, extra=(), **attrs):
    """Loads MatMul(A, B[, extra...], count) with rows=1; returns it and its feeds."""
    out = [*a.shape[:-1], b.shape[-1]]
    return load_op("MatMul", [a, Const(b), *extra, np.asarray(count)], out, rows=1,
                   rows_unit=unit, **attrs)


@pytest.mark.parametrize("count", [0, 1, 31, 32, 33, 100, 127, 128, 200, 256, 300, -3])
@pytest.mark.parametrize(("n", "impl"), [(40, "row blocks"), (10, "counted rows")])
def test_the_picked_rows_are_the_product_and_the_count_is_bounded(count: int, n: int,
                                                                    impl: str) -> None:
    """oneDNN's matmul by blocks of rows, and (10 outputs) the narrow layers' dot
    products; a count past either end is clamped to the rows there are."""
    a, b = _randn(256, 48), _randn(48, n)
    m, feeds = _counted(a, b, np.array([count], np.int64))
    assert impl in m.profile()[0]["impl"], m.profile()
    (y,) = m.execute(feeds)
    picked = min(max(count, 0), 256)
    np.testing.assert_allclose(y[:picked], a[:picked] @ b, rtol=1e-4, atol=1e-4)


def test_a_multiplier_and_an_activation_apply_to_the_picked_rows() -> None:
    """The gated MLP's up projection (times silu(gate)) and its gate (Swish), as fusion
    leaves them on a tagged product."""
    a, b, g, count = _randn(128, 32), _randn(32, 40), _randn(128, 40), 40
    m, feeds = _counted(a, b, np.array([count], np.int64), extra=(g,), mul=1)
    assert "row blocks" in m.profile()[0]["impl"]
    (y,) = m.execute(feeds)
    np.testing.assert_allclose(y[:count], (a[:count] @ b) * g[:count], rtol=1e-4, atol=1e-4)
    m, feeds = _counted(a, b, np.array([count], np.int64), activation="Swish")
    (y,) = m.execute(feeds)
    h = a[:count] @ b
    np.testing.assert_allclose(y[:count], h / (1 + np.exp(-h)), rtol=1e-4, atol=1e-4)


def test_counted_rows_of_a_folded_batch_cover_their_inner_rows() -> None:
    """A [64, 3, K]: each counted row is 3 rows of the fold (rows_unit)."""
    a, b, count = _randn(64, 3, 16), _randn(16, 32), 9
    m, feeds = _counted(a, b, np.array([count], np.int64), unit=3)
    assert "row blocks" in m.profile()[0]["impl"]
    (y,) = m.execute(feeds)
    np.testing.assert_allclose(y[:count], a[:count] @ b, rtol=1e-4, atol=1e-4)


def test_a_count_that_is_not_one_int64_is_refused() -> None:
    a, b = _randn(64, 8), _randn(8, 32)
    with pytest.raises(rt.InvalidArgument, match="row count"):
        _counted(a, b, np.array([3], np.int32))
    with pytest.raises(rt.InvalidArgument, match="one element"):
        _counted(a, b, np.array([3, 4], np.int64))
