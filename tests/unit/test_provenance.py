"""Offline models that say where they came from: producer, compiler and runtime versions,
kernel library and the CPU features their kernels need (`graphengine inspect --json`'s
`provenance`), and a clear FAILED_PRECONDITION when the CPU lacks one."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import graphengine
from graphengine import _runtime, ops
from graphengine.engine import offline
from graphengine.engine.importers import load_model
from graphengine.engine.pipeline import compile_graph
from graphengine.engine.runtime import LoadedModel
from graphengine.errors import FailedPrecondition
from tests import zoo


def _relu_onnx(producer: str, version: str) -> onnx.ModelProto:
    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"])], "relu",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8,
                             producer_name=producer, producer_version=version)


def test_an_onnx_models_producer_and_the_versions_are_recorded(tmp_path) -> None:
    compiled = compile_graph(load_model(_relu_onnx("pytorch", "2.13.0")))
    path = tmp_path / "relu.geom"
    offline.write(compiled, path)
    out = subprocess.run([sys.executable, "-m", "graphengine.cli", "inspect", str(path),
                          "--json"], capture_output=True, text=True, check=True)
    prov = json.loads(out.stdout)["provenance"]
    assert prov["producer"] == {"framework": "pytorch", "version": "2.13.0",
                                "exporter": "ONNX IR 8, opset 17"}
    assert prov["compiler_version"] == graphengine.__version__
    assert prov["runtime_version"] == graphengine.__version__
    assert prov["kernel_library"] == f"oneDNN {_runtime.dnnl_version()}"
    assert prov["cpu_features"] == []  # a Relu runs anywhere
    # and survives the round trip as data
    assert offline.read(path).provenance == compiled.provenance
    text = subprocess.run([sys.executable, "-m", "graphengine.cli", "inspect", str(path)],
                          capture_output=True, text=True, check=True).stdout
    assert "producer: pytorch 2.13.0 (ONNX IR 8, opset 17)" in text


def test_builder_and_graphdef_producers() -> None:
    g = graphengine.Graph("b")
    x = g.input("x", "float32", (2,))
    g.output(ops.Relu(x))
    built = compile_graph(load_model(g)).provenance.producer
    assert (built.framework, built.exporter, built.version) == (
        "graphengine", "graphengine.Graph", graphengine.__version__)
    sent = compile_graph(load_model(g.to_graphdef())).provenance.producer
    assert (sent.framework, sent.exporter) == ("graphengine", "graphengine.v1.GraphDef")


def test_block_kernels_need_avx512_and_a_cpu_without_gets_failed_precondition() -> None:
    if not _runtime.cpu_supports_avx512() or not _runtime.conv_block_available():
        pytest.skip("this CPU has no AVX-512VL: models here never need the block kernels")
    model = zoo.mobilenetv2(width_mult=0.35, image=32, classes=10)
    compiled = offline.load(offline.save(compile_graph(load_model(model))))
    ops_run = {t.op for p in compiled.programs for t in getattr(p, "tasks", ())}
    assert "ConvBlock" in ops_run
    assert compiled.provenance.cpu_features == ("avx512f", "avx512vl")
    _runtime.set_avx512_allowed(False)  # as on a CPU without AVX-512
    try:
        with pytest.raises(FailedPrecondition, match=r"lacks \['avx512f', 'avx512vl'\]"):
            LoadedModel(compiled)
        # compiled here and now, the same graph needs nothing it lacks, and runs
        again = compile_graph(load_model(model))
        assert again.provenance.cpu_features == ()
        feeds = zoo.random_inputs(model, seed=1)
        assert LoadedModel(again).execute(feeds)
    finally:
        _runtime.set_avx512_allowed(True)
    assert LoadedModel(compiled).execute(zoo.random_inputs(model, seed=1))


def test_a_file_written_before_provenance_still_loads() -> None:
    compiled = compile_graph(load_model(_relu_onnx("x", "1")))
    compiled.provenance = None
    data = offline.save(compiled)
    assert offline.inspect(data)["provenance"] is None
    out = LoadedModel(offline.load(data)).execute({"x": -np.ones((2, 3), np.float32)})
    np.testing.assert_array_equal(out["y"], np.zeros((2, 3), np.float32))
