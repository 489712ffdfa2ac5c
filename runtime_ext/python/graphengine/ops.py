"""One builder function per registered op (GE's `ge::op::*`), made from the op registry.

    from graphengine import ops
    y = ops.Conv(x, w, b, pads=[1, 1, 1, 1])      # x: a Tensor of a graphengine.Graph
    values, indices = ops.TopK(y, np.array([5]))

Inputs are positional (Tensors of one graph; numpy arrays and Python numbers become
constants), attributes are keyword-only, `name=` names the node and `outputs=` asks for a
number of outputs (or names them). `help(ops.Conv)` shows the signature and the attributes.
Ops of other domains are here by their op type (`ops.TreeEnsemble`, ai.onnx.ml) unless the
default domain has one of that name; `ops.op("ai.onnx.ml.TreeEnsemble")` reaches any op by
its registry key. Ops registered later (`graphengine.register_op`) appear as they are added.
"""

from __future__ import annotations

from typing import Any

__all__ = ["op"]

_made: dict[str, tuple[Any, Any]] = {}  # registry key -> (schema, function)


def _keys() -> dict[str, str]:
    """Attribute name -> registry key: default-domain ops first, then the others by op type."""
    from graphengine.engine import ops as registry

    every = registry.all_ops()
    keys = {key: key for key in every if "." not in key}
    for key in every:
        keys.setdefault(key.rpartition(".")[2], key)
    return keys


def op(op_key: str) -> Any:
    """The builder function of the op registered as `op_key` ("Conv", "ai.onnx.ml.Scaler")."""
    from graphengine.engine import ops as registry
    from graphengine.engine.builder import op_function

    schema = registry.get(op_key)
    made = _made.get(op_key)
    if made is None or made[0] is not schema:  # a custom op registered again
        made = _made[op_key] = (schema, op_function(op_key))
    return made[1]


def __getattr__(name: str) -> Any:
    if name.startswith("__"):
        raise AttributeError(name)
    key = _keys().get(name)
    if key is None:
        raise AttributeError(f"graphengine.ops has no op {name!r} (graphengine.ops.op(key) "
                             "takes a registry key such as 'ai.onnx.ml.Scaler')")
    return op(key)


def __dir__() -> list[str]:
    return sorted(set(_keys()) | set(__all__))
