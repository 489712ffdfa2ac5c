"""A grouped convolution oneDNN would run as a GEMM, as one dense convolution (a
canonicalize row).

oneDNN's jit convolutions take groups whose channels fill its vectors (16 input and output
channels a group on AVX-512) and depthwise ones (one input and one output channel a
group); other groupings — a 1x1 over 2 to 8 groups of 6 channels, a depthwise layer with a
channel multiplier — get its GEMM convolution (`gemm:jit`, with its post-ops applied by a
scalar reference loop), which also builds its GEMM kernels on its first run. An unseen
MicroNet's stem (6 groups, 1 -> 2 channels, 1x3): 192 us a run against OpenVINO's 25, and
31 ms of its first run. With few groups the same convolution as a dense one, its weight
block-diagonal (zeros between the groups), runs on the jit kernels at g times the
multiplications: taken where the runtime's preferred layout for the grouped form is plain
NCHW (the GEMM convolution's) and for the dense form is not, with at most MAX_GROUPS groups.
The zeros add exact zeros for finite inputs; an infinite or NaN input channel now reaches
the other groups' outputs as NaN (0 x inf), as a dense layer's would.
"""

from __future__ import annotations

import functools

import numpy as np

from ..ir import Graph, Node
from ..target import Target
from ..target import get as get_target

MAX_GROUPS = 8
MAX_DENSE_WEIGHT = 1 << 22  # elements of the dense weight


def _info(node: Node, group: int, w_shape: list[int]) -> str | None:
    attrs = tuple(sorted((k, tuple(v) if isinstance(v, list) else v)
                         for k, v in node.attrs.items() if k != "group" and not k.startswith("_")))
    return _preferred(get_target(), tuple(node.input(0).meta.shape), tuple(w_shape), attrs, group)


@functools.lru_cache(maxsize=256)
def _preferred(target: Target, x_shape: tuple, w_shape: tuple, attrs: tuple,
               group: int) -> str | None:
    """The runtime's preferred layout for the convolution, None if it declines (asked once
    per shape and attributes: each question builds a oneDNN descriptor, and canonicalize
    offers every Conv to the row in every round)."""
    full = {k: list(v) if isinstance(v, tuple) else v for k, v in attrs}
    full["group"] = group
    info = target.kernel_info("Conv", ["float32", "float32"], [list(x_shape), list(w_shape)],
                              full)
    return info.get("preferred_format") if info.get("supported") else None


def gemm_group_conv(node: Node) -> bool:
    if node.op_type != "Conv" or len(node.outputs) != 1:
        return False
    x, w = node.input(0), node.input(1)
    g = int(node.attrs.get("group", 1))
    if x is None or w is None or not w.is_constant or x.meta is None or not x.meta.is_static \
            or len(x.meta.shape) != 4 or x.meta.dtype.numpy != np.float32 \
            or not 2 <= g <= MAX_GROUPS:
        return False
    c = np.asarray(w.const)
    if c.ndim != 4 or c.dtype != np.float32 or c.shape[0] % g or x.meta.shape[1] != c.shape[1] * g:
        return False
    if c.shape[0] * x.meta.shape[1] * c.shape[2] * c.shape[3] > MAX_DENSE_WEIGHT:
        return False
    dense = [c.shape[0], x.meta.shape[1], c.shape[2], c.shape[3]]
    return _info(node, g, list(c.shape)) == "nchw" and _info(node, 1, dense) not in (None, "nchw")


def as_dense_conv(graph: Graph, node: Node) -> None:
    g = int(node.attrs["group"])
    w = np.asarray(node.input(1).const)
    cout, cin_g = w.shape[0], w.shape[1]
    out_g = cout // g
    dense = np.zeros((cout, cin_g * g) + w.shape[2:], np.float32)
    for k in range(g):
        dense[k * out_g:(k + 1) * out_g, k * cin_g:(k + 1) * cin_g] = w[k * out_g:(k + 1) * out_g]
    node.set_inputs([node.inputs[0], graph.add_constant(None, dense), *node.inputs[2:]])
    node.attrs["group"] = 1
