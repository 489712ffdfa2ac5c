"""Fixtures the unit tests share."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

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


@pytest.fixture
def kserve_servers() -> Iterator[Callable[..., tuple[Any, Any]]]:
    """Start-your-own in-process server: `start(**ServerConfig settings)` -> (its
    ServerParts, a KServe stub on it); all stopped and closed at the end."""
    import grpc

    from graphengine.kserve.v2 import grpc_service_pb2_grpc as kgrpc
    from graphengine.server.config import ServerConfig
    from graphengine.server.rpc.app import build_server, start_background

    made = []

    def start(**settings) -> tuple[Any, Any]:
        parts = build_server(ServerConfig(port=0, **settings))
        parts.server.start()
        start_background(parts)
        channel = grpc.insecure_channel(f"127.0.0.1:{parts.port}")
        made.append((parts, channel))
        return parts, kgrpc.GRPCInferenceServiceStub(channel)

    yield start
    for parts, channel in made:
        channel.close()
        parts.server.stop(None)
        if parts.repository is not None:
            parts.repository.close()
        parts.sessions.close_all()
