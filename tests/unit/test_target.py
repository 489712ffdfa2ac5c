"""The compile target seam (engine/target.py): placement, fusion, layout and task generation
read what the device can run from a registered Target, so another backend changes what is
compiled without a change to the compiler."""

from __future__ import annotations

import dataclasses

import numpy as np
import onnxruntime as ort
import pytest

from graphengine.engine import target as targets
from graphengine.engine.errors import InvalidInput
from graphengine.engine.importers import load_model
from graphengine.engine.model import DeviceProgram
from graphengine.engine.pipeline import CompileOptions, compile_graph
from graphengine.engine.runtime import LoadedModel
from tests import zoo


@pytest.fixture
def narrow(monkeypatch):
    """A backend like the host without convolutions, fused kernels or blocked formats, and
    one weight segment: a smaller device, registered by name."""
    host = targets.get("host")
    no_conv = frozenset(host.ops - {"Conv", "ConvDw", "ConvBlock", "ConvHead", "FusedAttention"})

    def kernel_info(op, dtypes, shapes, attrs=None):
        if op not in no_conv:
            return {"supported": False, "reason": f"the narrow device has no {op} kernel"}
        return host.kernel_info(op, dtypes, shapes, attrs)

    monkeypatch.setitem(targets._FACTORIES, "narrow", lambda: dataclasses.replace(
        host, name="narrow", ops=no_conv, kernel_info=kernel_info, blocked_format="",
        conv_blocks=False, max_weight_segments=1))
    return "narrow"


def test_host_target_describes_this_machine():
    host = targets.get("host")
    assert host.name == "host" and host.runs("MatMul") and host.max_weight_segments >= 1
    assert "host" in targets.names()
    with pytest.raises(InvalidInput, match="compile option 'target' must be one of"):
        CompileOptions(target="cuda")
    with pytest.raises(InvalidInput, match="unknown compile target 'cuda'"):
        targets.get("cuda")


def test_a_registered_target_changes_placement_and_fusion_not_the_compiler(narrow):
    model = zoo.mobilenetv2(width_mult=0.35, image=32, classes=10)
    graph = load_model(model)
    on_host = compile_graph(graph, CompileOptions())
    on_narrow = compile_graph(graph, CompileOptions(target=narrow))
    engines = {p.op_type: p.engine for p in on_narrow.report.placements}
    assert engines["Conv"] == "host" and engines["Gemm"] == "device"
    assert not any("Conv" in f for f in on_narrow.report.fusions)  # no conv rows fire
    assert any(p.op_type == "Conv" and p.engine == "device"
               for p in on_host.report.placements)
    for prog in on_narrow.programs:
        if isinstance(prog, DeviceProgram):
            assert len(prog.weights) <= 1  # the target's one weight segment
    feeds = zoo.random_inputs(model, seed=2)
    got = LoadedModel(on_narrow).execute(feeds)["output"]
    want = ort.InferenceSession(model.SerializeToString(), providers=[
        "CPUExecutionProvider"]).run(None, feeds)[0]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * np.abs(want).max())
