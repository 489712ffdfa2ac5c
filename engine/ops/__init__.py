"""The op library: importing this package registers every op schema.

`infer_node` and `run_node` are the entry points the compiler passes and the host engine
use; `get`/`has`/`all_ops` query the registry.
"""

from __future__ import annotations

from . import (  # noqa: F401  (imported for their registrations)
    activations,
    attention,
    binary,
    chain,
    contrib_ms,
    control,
    conv,
    conv_fused,
    creation,
    detection,
    elements,
    elementwise,
    eltwise_graph,
    group_norm,
    indexing,
    linalg,
    loss,
    ml,
    ml_trees,
    normalization,
    pool,
    preview,
    quant,
    reduce,
    resize,
    rnn,
    sampling,
    segment_matmul,
    shape_ops,
    signal,
    strings,
    variables,
    weight_quant,
)
from .api import describe_args, infer_node, kernel_error, node_attrs, run_node
from .registry import (
    REQUIRED,
    AttrKind,
    AttrSpec,
    DeviceKernel,
    Layout,
    OpSchema,
    all_ops,
    get,
    has,
    register,
    shape_error,
)

__all__ = [
    "REQUIRED", "AttrKind", "AttrSpec", "DeviceKernel", "Layout", "OpSchema", "all_ops",
    "describe_args", "get", "has", "infer_node", "kernel_error", "node_attrs", "register",
    "run_node", "shape_error",
]
