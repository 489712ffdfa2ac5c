"""Running one node through its schema: the entry points passes and engines call."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ..errors import ExecutionError, GraphEngineError, InvalidGraph, InvalidInput
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


def kernel_error(name: str, op_type: str, exc: Exception, args: Sequence[Any],
                 graph: str | None = None) -> GraphEngineError:
    """The error for a reference kernel that raised. Shapes and indices only the run's data
    decides (a Reshape target computed from an input, a Gather index, a branch's shapes)
    failing the op's rules are the request's error (InvalidInput), named by node and by what
    it was given; anything else is the kernel's own failure (ExecutionError)."""
    if isinstance(exc, (IndexError, KeyError, ValueError)):
        return InvalidInput(f"node '{name}' ({op_type}): the inputs do not fit the op: {exc} "
                            f"(inputs: {describe_args(args)})", graph=graph, node=name,
                            stage="execute")
    return ExecutionError(f"node '{name}' ({op_type}) failed: {type(exc).__name__}: {exc}",
                          graph=graph, node=name, stage="execute")


def describe_args(args: Sequence[Any]) -> str:
    """A kernel's inputs for a message: dtype[shape] each, small integer ones with their
    values (the repeats, limits or shapes that sized the work)."""
    return ", ".join("none" if a is None else _describe(a) for a in args)


def _describe(value: Any) -> str:
    if isinstance(value, (list, tuple)):
        return f"sequence of {len(value)}"
    arr = np.asarray(value)
    text = f"{arr.dtype.name}[{','.join(map(str, arr.shape))}]"
    if arr.dtype.kind in "iu" and arr.size <= 8:
        text += f" {arr.reshape(-1).tolist()}"
    return text


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
        raise kernel_error(node.name, node.op_type, exc, inputs) from exc
    if len(outs) < len(node.outputs):
        raise ExecutionError(f"node '{node.name}' ({node.op_type}): kernel returned "
                             f"{len(outs)} outputs, the node has {len(node.outputs)}",
                             node=node.name)
    return [np.asarray(o) for o in outs[: len(node.outputs)]]
