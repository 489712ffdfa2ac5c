"""DepthToSpace and SpaceToDepth as permutations (a canonicalize row).

Neither has a device kernel: Swin2SR's PixelShuffle upsampler (DepthToSpace) ran as a host
step between two device programs. Both move every element once, so each is a view, a
Transpose and a view (ONNX's own definitions), which the device runs and the layout passes
may fold into neighbours:

- DepthToSpace DCR (the default): [N, C, H, W] -> [N, b, b, C/b², H, W], perm
  [0, 3, 4, 1, 5, 2], -> [N, C/b², H·b, W·b]; CRD: [N, C/b², b, b, H, W], perm
  [0, 1, 4, 2, 5, 3].
- SpaceToDepth: [N, C, H/b, b, W/b, b], perm [0, 3, 5, 1, 2, 4] (DCR; CRD, opset 28:
  [0, 1, 3, 5, 2, 4]), -> [N, C·b², H/b, W/b].
"""

from __future__ import annotations

import numpy as np

from ..ir import Graph, Node
from .steps import chain, replace_outputs


def _plan(node: Node) -> tuple[list[int], list[int], list[int]] | None:
    """(first view, permutation, output shape) of a node this rewrite takes."""
    if node.op_type not in ("DepthToSpace", "SpaceToDepth") or len(node.outputs) != 1:
        return None
    x = node.input(0)
    if x is None or x.meta is None or x.meta.shape is None or len(x.meta.shape) != 4 \
            or not all(isinstance(d, int) and d > 0 for d in x.meta.shape):
        return None
    b = node.attrs.get("blocksize")
    if not isinstance(b, int) or b < 1:
        return None
    n, c, h, w = x.meta.shape
    mode = node.attrs.get("mode", "DCR")
    if mode not in ("DCR", "CRD"):
        return None
    if node.op_type == "SpaceToDepth":  # (opset 28 added CRD, the inverse of DepthToSpace's)
        if h % b or w % b:
            return None
        perm = [0, 3, 5, 1, 2, 4] if mode == "DCR" else [0, 1, 3, 5, 2, 4]
        return [n, c, h // b, b, w // b, b], perm, [n, c * b * b, h // b, w // b]
    if c % (b * b):
        return None
    out = [n, c // (b * b), h * b, w * b]
    if mode == "CRD":
        return [n, c // (b * b), b, b, h, w], [0, 1, 4, 2, 5, 3], out
    return [n, b, b, c // (b * b), h, w], [0, 3, 4, 1, 5, 2], out


def depth_space_move(node: Node) -> bool:
    return _plan(node) is not None


def as_block_transpose(graph: Graph, node: Node) -> None:
    view, perm, out = _plan(node)
    step = chain(graph, node)

    def const(v):
        return graph.add_constant(None, np.asarray(v, np.int64))

    blocks = step("Reshape", [node.inputs[0], const(view)])
    moved = step("Transpose", [blocks], perm=perm)
    replace_outputs(graph, node, {0: step("Reshape", [moved, const(out)])})
