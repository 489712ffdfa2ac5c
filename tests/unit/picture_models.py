"""A small ResNet-like graph for the dump-graph tests (test_picture, test_dot,
test_cli_dump_graph), built with graphengine.Graph / graphengine.ops.

A stem (Conv+BN+Relu), one bottleneck block whose downsample branch runs beside the main
branch (two streams when max_streams >= 2, so events between them), a global pool, and a
classifier. With `host_op`, a custom op that has no native kernel sits before the
classifier, so the plan has three partitions: device, host, device.
"""

from __future__ import annotations

import numpy as np

import graphengine
from graphengine import ops
from graphengine.engine.importers import load_model
from graphengine.engine.ir import Graph
from graphengine.engine.pipeline import CompileOptions, compile_graph

HOST_OP = graphengine.register_op("HalfScale", lambda x, *, scale=0.5: x * scale,
                                  domain="dump.test", attrs={"scale": 0.5})


def _bn(rng: np.random.Generator, y, c: int):
    return ops.BatchNormalization(y, rng.uniform(0.5, 1.5, c).astype(np.float32),
                                  rng.standard_normal(c).astype(np.float32) * 0.1,
                                  rng.standard_normal(c).astype(np.float32) * 0.1,
                                  rng.uniform(0.5, 1.5, c).astype(np.float32))


def _conv(rng: np.random.Generator, x, cin: int, cout: int, k: int, name: str):
    w = rng.standard_normal((cout, cin, k, k)).astype(np.float32) * 0.2
    return ops.Conv(x, w, pads=[k // 2] * 4, name=name)


def resnet_block(host_op: bool = True, batch: int | str = 1,
                 name: str = "resnet_block") -> graphengine.Graph:
    rng = np.random.default_rng(0)
    g = graphengine.Graph(name)
    x = g.input("image", np.float32, (batch, 4, 16, 16))
    stem = ops.Relu(_bn(rng, _conv(rng, x, 4, 8, 3, "stem/conv"), 8))
    y = ops.Relu(_bn(rng, _conv(rng, stem, 8, 4, 1, "block/conv1"), 4))
    y = ops.Relu(_bn(rng, _conv(rng, y, 4, 4, 3, "block/conv2"), 4))
    y = _bn(rng, _conv(rng, y, 4, 16, 1, "block/conv3"), 16)
    shortcut = _bn(rng, _conv(rng, stem, 8, 16, 1, "block/downsample"), 16)
    y = ops.Relu(y + shortcut)
    y = ops.Flatten(ops.GlobalAveragePool(y))
    if host_op:
        y = ops.HalfScale(y, name="host/half")
    w = rng.standard_normal((16, 10)).astype(np.float32)
    g.output(ops.Gemm(y, w, np.zeros(10, np.float32), name="fc"), name="logits")
    return g


def compiled_with_graph(graph: graphengine.Graph | Graph, max_streams: int = 2,
                        shapes: dict | None = None):
    """(the compile's graph after stage 3, the CompiledModel)."""
    kept = {}
    compiled = compile_graph(load_model(graph), CompileOptions(max_streams=max_streams),
                             input_shapes=shapes,
                             on_stage=lambda stage, g: kept.setdefault(stage, g))
    return kept["optimize"], compiled
