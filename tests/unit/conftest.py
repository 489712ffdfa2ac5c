"""Fixtures the unit tests share."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from graphengine import _runtime


@pytest.fixture(params=["avx512", "fallback"])
def isa(request) -> Iterator[str]:
    """Each case on both paths of the runtime's kernels: its own AVX-512 ones allowed, and
    forbidden (`_runtime.set_avx512_allowed`). On a CPU without AVX-512F the AVX-512 half
    says so and does not run (pytest -ra lists it)."""
    if request.param == "avx512" and not _runtime.cpu_supports_avx512():
        pytest.skip("this CPU has no AVX-512F: the AVX-512 kernels were not run")
    _runtime.set_avx512_allowed(request.param == "avx512")
    try:
        yield request.param
    finally:
        _runtime.set_avx512_allowed(True)
