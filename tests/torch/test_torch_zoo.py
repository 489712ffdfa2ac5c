"""torch.compile(model, backend=graphengine) on the zoo's torch families (vision, encoders,
decoders with a dynamic sequence length), in process and in a session on a real server
process: outputs within 1e-4 of eager torch (relative to the output's scale, floor 1), every
node compiled, and a decoder's lengths served by one symbolic graph."""

from __future__ import annotations

import functools
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch", reason="needs torch (make test-torch)")
pytest.importorskip("transformers", reason="the zoo's HF models need transformers")

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks" / "zoo"))
import torch_modules  # noqa: E402

import graphengine.torch as gt  # noqa: E402

TOL = 1e-4
NAMES = [m.name for m in torch_modules.MODELS]


@functools.cache
def _model(name: str):
    return torch_modules.BY_NAME[name].make()


def _first(out):
    return out[0] if isinstance(out, (tuple, list)) else out


def test_the_families_are_covered() -> None:
    families = [m.family for m in torch_modules.MODELS]
    assert len(families) >= 15
    assert {"vision", "encoder", "decoder"} <= set(families)


@pytest.mark.parametrize("where", ["in-process", "server"])
@pytest.mark.parametrize("name", NAMES)
def test_zoo_model_matches_eager(name: str, where: str, request) -> None:
    entry = torch_modules.BY_NAME[name]
    server = request.getfixturevalue("server") if where == "server" else None
    model = _model(name)
    dynamic = entry.family == "decoder"
    lengths = (entry.seq, entry.seq - 8, entry.seq + 5) if dynamic else (entry.seq,)
    backend = gt.backend(server=server)
    try:
        with torch.no_grad():
            compiled = torch.compile(model, backend=backend, dynamic=dynamic or None)
            for seq in lengths:
                x = entry.inputs(2, seq, 7)
                want, got = _first(model(*x)), _first(compiled(*x))
                assert got.shape == want.shape
                scale = max(1.0, float(want.abs().max()))
                err = float((got - want).abs().max())
                assert err <= TOL * scale, f"{name} at seq {seq}: max abs err {err:.3g}"
    finally:
        backend.close()
    assert len(backend.reports) == 1, [r.summary() for r in backend.reports]
    (report,) = backend.reports
    assert report.fully_compiled, report.summary()
    assert report.where == (server or "in-process")
    assert report.dynamic == dynamic
