"""Running one node through its schema: the entry points passes and engines call."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ..errors import ExecutionError, GraphEngineError, InvalidGraph
from ..ir import Node, TensorMeta
from . import registry


def node_attrs(node: Node) -> dict[str, Any]:
    """The node's attrs with defaults filled in (and `_n_outputs`, see attrs_of)."""
    return registry.get(node.op_type, node).attrs_of(node)


def infer_node(node: Node) -> list[TensorMeta]:
    """Check arity, fill attributes and infer one TensorMeta per output of `node`."""
    schema = registry.get(node.op_type, node)
    schema.check_arity(node)
    attrs = node_attrs(node)
    metas = list(schema.infer(node, attrs))
    if len(metas) < len(node.outputs):
        raise InvalidGraph(f"node '{node.name}' ({node.op_type}): inference produced "
                           f"{len(metas)} outputs for {len(node.outputs)}", node=node.name)
    return metas[: len(node.outputs)]


def run_node(node: Node, inputs: Sequence[np.ndarray | None]) -> list[np.ndarray]:
    """Compute `node` with the numpy reference kernel; one array per node output."""
    schema = registry.get(node.op_type, node)
    attrs = node_attrs(node)
    try:
        with np.errstate(all="ignore"):  # inf/nan results are data, not errors
            outs = list(schema.compute(list(inputs), attrs))
    except GraphEngineError:
        raise
    except Exception as exc:
        raise ExecutionError(f"node '{node.name}' ({node.op_type}) failed: "
                             f"{type(exc).__name__}: {exc}", node=node.name) from exc
    if len(outs) < len(node.outputs):
        raise ExecutionError(f"node '{node.name}' ({node.op_type}): kernel returned "
                             f"{len(outs)} outputs, the node has {len(node.outputs)}",
                             node=node.name)
    return [np.asarray(o) for o in outs[: len(node.outputs)]]
