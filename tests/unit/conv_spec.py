"""A runtime model spec of one fused Conv task, for the kernels' own checks (the tests of
fusion_conv_dw, fusion_conv_block and fusion_conv_head)."""

import numpy as np

CONV_ATTRS = {"group": 1, "strides": [1, 1], "pads": [0, 0, 0, 0], "dilations": [1, 1]}


def conv_task_spec(shapes: dict, arena: set, inputs: list, output: int, attrs: dict,
                   task: str) -> dict:
    """Float32 tensors `shapes` (name -> shape, indexed in that order) in the arena when
    named in `arena`, else zero weights; tensor 0 is the model's input, `output` its output;
    one Conv task named `task` reads `inputs` and writes `output`."""
    tensors, offset = [], {"weight": 0, "arena": 0}
    for name, shape in shapes.items():
        region = "arena" if name in arena else "weight"
        n = int(np.prod(shape)) * 4
        tensors.append({"name": name, "dtype": "float32", "shape": list(shape), "region": region,
                        "offset": offset[region]})
        offset[region] += (n + 63) // 64 * 64
    return {"name": "m", "tensors": tensors, "arena_bytes": offset["arena"],
            "weights": np.zeros(offset["weight"], np.uint8), "num_streams": 1, "num_events": 0,
            "inputs": [0], "outputs": [output],
            "tasks": [{"kind": "kernel", "name": task, "stream": 0, "op": "Conv",
                       "inputs": inputs, "outputs": [output], "attrs": {**CONV_ATTRS, **attrs}}]}
