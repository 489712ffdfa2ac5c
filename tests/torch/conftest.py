"""tests/torch: the torch.compile backend (`make test-torch`, which installs torch==2.13.0;
`make test` leaves this folder out). Every test needs torch; without it they are skipped."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch", reason="the torch.compile backend's tests need torch "
                            "(make test-torch installs torch==2.13.0)")


@pytest.fixture(autouse=True)
def _fresh_dynamo():
    """Each test compiles from scratch: dynamo's caches (and its recompile limit per code
    object, which the zoo's shared wrappers would reach) are reset around it."""
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()
