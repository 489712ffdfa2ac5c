"""Helpers of the fused-convolution tests (fusion_conv_dw, fusion_conv_block,
fusion_conv_head): a runtime model of one convolution task (SpecBuilder), for the kernels'
own checks, and the convolution nodes a compile placed."""

from collections import Counter

import numpy as np

from graphengine.engine.ops.conv_fused import FUSED_CONVS
from tests.unit.test_runtime import SpecBuilder

CONV_ATTRS = {"group": 1, "strides": [1, 1], "pads": [0, 0, 0, 0], "dilations": [1, 1]}


def conv_task_spec(shapes: dict, arena: set, inputs: list, output: int, attrs: dict,
                   task: str, op: str = "Conv") -> dict:
    """Float32 tensors `shapes` (name -> shape, indexed in that order): the first is the
    model's input, those named in `arena` are computed values, the rest zero constants;
    `output` (an index) is the model's output; one `op` task named `task` reads `inputs` and
    writes `output`."""
    b = SpecBuilder()
    for i, (name, shape) in enumerate(shapes.items()):
        if i == 0:
            b.input(name, "float32", shape)
        elif name in arena:
            b.tensor(name, "float32", shape)
        else:
            b.const(name, np.zeros(shape, np.float32))
    b.outputs.append(output)
    b.kernel(op, inputs, [output], name=task, **{**CONV_ATTRS, **attrs})
    return b.spec()


def conv_ops(compiled) -> Counter:
    """The op types of the convolution nodes the compiled model runs (after fusion): Conv and
    the fused ones (graphengine.ConvDw, .ConvBlock, .ConvHead)."""
    return Counter(p.op_type for p in compiled.report.placements
                   if p.op_type == "Conv" or p.op_type in FUSED_CONVS)

