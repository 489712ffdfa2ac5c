"""A Col2Im of non-overlapping blocks as a permutation (a canonicalize row).

Col2Im (the fold that undoes an unfold) has no device kernel: MobileViTV2 folds its patches
back with one after each attention stage, three host steps between device programs (0.77x
of the best peer at batch 1). When the blocks tile the image exactly — strides equal to the
block, no dilation, no padding, the image a whole number of blocks — every output pixel takes
exactly one input value, so the fold is a permutation of the input's bytes: [N, C*kh*kw, L]
viewed as [N, C, kh, kw, oh, ow], transposed to [N, C, oh, kh, ow, kw] and viewed as
[N, C, oh*kh, ow*kw] (any number of spatial dims alike). Overlapping or padded folds sum
and keep the host kernel.
"""

from __future__ import annotations

import math

import numpy as np

from ..ir import Graph, Node
from .steps import chain, replace_outputs


def _plan(node: Node) -> tuple[list[int], list[int], list[int]] | None:
    """(input shape, block, image) of a fold this rewrite takes."""
    if node.op_type != "Col2Im" or len(node.outputs) != 1:
        return None
    x, image_v, block_v = node.input(0), node.input(1), node.input(2)
    if x is None or x.meta is None or x.meta.shape is None or image_v is None \
            or block_v is None or not image_v.is_constant or not block_v.is_constant:
        return None
    shape = list(x.meta.shape)
    image = [int(v) for v in np.asarray(image_v.const).reshape(-1)]
    block = [int(v) for v in np.asarray(block_v.const).reshape(-1)]
    nsp = len(image)
    if len(shape) != 3 or not all(isinstance(d, int) and d > 0 for d in shape) \
            or len(block) != nsp or not nsp or min(block) < 1:
        return None
    strides = list(node.attrs.get("strides") or [1] * nsp)
    dilations = list(node.attrs.get("dilations") or [1] * nsp)
    pads = list(node.attrs.get("pads") or [0] * (2 * nsp))
    if strides != block or any(d != 1 for d in dilations) or any(pads):
        return None
    if any(i % b for i, b in zip(image, block)) or shape[1] % math.prod(block) \
            or shape[2] != math.prod(i // b for i, b in zip(image, block)):
        return None
    return shape, block, image


def tiling_col2im(node: Node) -> bool:
    return _plan(node) is not None


def as_permutation(graph: Graph, node: Node) -> None:
    shape, block, image = _plan(node)
    nsp = len(block)
    n, c = shape[0], shape[1] // math.prod(block)
    grid = [i // b for i, b in zip(image, block)]
    step = chain(graph, node)

    def const(v):
        return graph.add_constant(None, np.asarray(v, np.int64))

    # [N, C, k_0..k_{s-1}, g_0..g_{s-1}] -> [N, C, g_0, k_0, g_1, k_1, ...]
    perm = [0, 1] + [d for i in range(nsp) for d in (2 + nsp + i, 2 + i)]
    blocks = step("Reshape", [node.inputs[0], const([n, c] + block + grid)])
    moved = step("Transpose", [blocks], perm=perm)
    y = step("Reshape", [moved, const([n, c] + image)])
    replace_outputs(graph, node, {0: y})
