"""Common-subexpression elimination and constant deduplication."""

from __future__ import annotations

import hashlib
from typing import Any

import numpy as np

from .. import ops
from ..ir import Graph, Value
from ..passes import PassResult


def _attr_key(value: Any) -> Any:
    if isinstance(value, np.ndarray):
        return ("array", value.dtype.str, value.shape, hashlib.sha1(value.tobytes()).digest())
    if isinstance(value, (list, tuple)):
        return tuple(_attr_key(v) for v in value)
    if isinstance(value, (int, float, str, bool)) or value is None:
        return value
    raise TypeError  # subgraphs and other objects: not comparable, never merged


def eliminate_common_subexpressions(graph: Graph) -> PassResult:
    """Merge nodes that compute the same op with the same attributes on the same inputs."""
    seen: dict[tuple, Any] = {}
    merged = 0
    for node in list(graph.nodes):
        if node.graph is not graph or not ops.get(node.op_type, node).foldable:
            continue
        try:
            key = (node.op_type, tuple(id(v) if v is not None else None for v in node.inputs),
                   tuple(sorted((k, _attr_key(v)) for k, v in node.attrs.items())),
                   len(node.outputs))
        except TypeError:
            continue
        other = seen.get(key)
        if other is None:
            seen[key] = node
            continue
        if any(o in graph.outputs for o in node.outputs):
            continue  # keep graph outputs' producers (and names) as they are
        for mine, theirs in zip(node.outputs, other.outputs):
            graph.replace_all_uses(mine, theirs)
        graph.remove_node(node)
        merged += 1
    return PassResult(graph, merged > 0, f"{merged} duplicate nodes merged")


def deduplicate_constants(graph: Graph) -> PassResult:
    """Make constants with identical dtype, shape and bytes one value."""
    groups: dict[tuple, list[Value]] = {}
    for v in graph.constants():
        arr = v.const
        if arr.dtype == object:
            continue
        groups.setdefault((arr.dtype.str, arr.shape), []).append(v)
    merged = 0
    for values in groups.values():
        if len(values) < 2:
            continue
        # Weights of one shape are usually all different: a strided sample tells most
        # of them apart without reading every byte.
        by_sample: dict[bytes, list[Value]] = {}
        for v in values:
            flat = v.const.reshape(-1)
            by_sample.setdefault(flat[:: max(1, flat.size // 64)].tobytes(), []).append(v)
        for group in by_sample.values():
            kept: list[Value] = []
            for v in group:
                same = next((k for k in kept
                             if np.array_equal(k.const, v.const, equal_nan=True)), None)
                if same is None or v in graph.outputs:
                    kept.append(v)
                    continue
                graph.replace_all_uses(v, same)
                merged += 1
    graph.remove_unused_constants()
    return PassResult(graph, merged > 0, f"{merged} duplicate constants merged")
