"""A ScatterND that writes one contiguous slice of the last axis is a Concat.

torch's exporter writes a slice assignment (`k[..., :d] = k_nope; k[..., d:] = k_pe`: the
query and key halves of DeepSeek's latent attention) as ScatterND with an index tuple per
element, [..., r] long: the runtime's scatter reads each tuple (an unseen DeepSeek-V3: four
of them, 59 us each for 12K elements). When the indices (known at compile time) enumerate,
in order, every position of data[..., a:b] and the updates have that slice's shape, the
result is data[..., :a], the updates and data[..., b:] joined along the last axis: the same
values in the same places, by Slices and a Concat (views and one copy). Reduction none only;
at most MAX_INDICES index tuples are compared.
"""

from __future__ import annotations

import numpy as np

from ..ir import Graph, Node
from ..ops.value_prop import known_value
from .steps import chain

MAX_INDICES = 1 << 20


def _slice_of(node: Node) -> tuple[int, int] | None:
    """(a, b) when the ScatterND writes exactly data[..., a:b] in order."""
    if node.op_type != "ScatterND" or node.attrs.get("reduction", "none") != "none" \
            or len(node.inputs) != 3:
        return None
    data, idx, upd = node.inputs
    if data is None or idx is None or upd is None or data.meta is None or upd.meta is None \
            or not data.meta.is_static or not upd.meta.is_static or data.meta.rank < 1:
        return None
    r = data.meta.rank
    shape, ushape = tuple(data.meta.shape), tuple(upd.meta.shape)
    if len(ushape) != r or ushape[:-1] != shape[:-1] or not 0 < ushape[-1] <= shape[-1]:
        return None
    k = idx.const if idx.is_constant else known_value(idx)
    if k is None or np.asarray(k).dtype.kind not in "iu" or np.size(k) > MAX_INDICES:
        return None
    k = np.asarray(k)
    if k.shape != ushape + (r,):
        return None
    a = int(k.reshape(-1, r)[0, -1])
    if a < 0 or a + ushape[-1] > shape[-1]:
        return None
    grid = np.indices(ushape, dtype=np.int64)
    grid[-1] += a
    return (a, a + ushape[-1]) if np.array_equal(np.moveaxis(grid, 0, -1), k) else None


def slice_scatter(node: Node) -> bool:
    return _slice_of(node) is not None


def as_concat(graph: Graph, node: Node) -> None:
    a, b = _slice_of(node)
    data, _, upd = node.inputs
    width = data.meta.shape[-1]
    step = chain(graph, node)

    def part(start: int, end: int):
        const = graph.add_constant
        return step("Slice", [data, const(None, np.array([start], np.int64)),
                              const(None, np.array([end], np.int64)),
                              const(None, np.array([-1], np.int64))])

    parts = ([part(0, a)] if a > 0 else []) + [upd] + ([part(b, width)] if b < width else [])
    last = next((v.producer for v in reversed(parts) if v is not upd), node)  # after the Slices
    # the whole tensor written: the updates (eliminate_identities drops the Identity)
    out = graph.add_node("Concat" if len(parts) > 1 else "Identity", parts, outputs=0,
                         attrs={"axis": -1} if len(parts) > 1 else {}, after=last,
                         name=graph.unique_name(f"{node.name}_slice"))
    graph.hand_over_outputs(node, [out])
