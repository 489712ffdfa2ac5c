"""A mixture of experts' products over the rows the router picked, not all of them.

prepare/expert_rows.py runs each expert on T padded rows, the n picked ones first, and tags
the MatMuls of its tail whose folded rows start with the selection's (`_rows_count`: the
node giving n; `_rows_unit`: rows of the fold per selected row). After fusion has settled
which node each product is, this pass hands n to every tagged MatMul on the device that
shares a partition with it: the count becomes the node's last input (`_rows_input`; the
task's `rows` attribute, codegen/tasks.py) and the host kernel multiplies only the blocks
of rows n covers (kernels_matmul.cc). Where the count is elsewhere (another partition, the
host) or gone, the product stays whole: the same results, the dense work.
"""

from __future__ import annotations

import math

from ..dtypes import DType
from ..ir import Engine, Graph, Node
from ..passes import PassResult


def _counted(node: Node, count: Node | None) -> bool:
    if count is None or "_rows_input" in node.attrs:
        return False
    if node.meta.engine is not Engine.DEVICE or count.meta.engine is not Engine.DEVICE \
            or node.meta.partition != count.meta.partition:
        return False
    n, a = count.outputs[0].meta, node.input(0).meta if node.input(0) is not None else None
    if n is None or not n.is_static or n.numel != 1 or n.dtype is not DType.INT64:
        return False
    if a is None or not a.is_static or len(a.shape) < 2:
        return False
    unit = node.attrs.get("_rows_unit")
    return isinstance(unit, int) and unit >= 1 and math.prod(a.shape[:-1]) % unit == 0


def limit_routed_rows(graph: Graph) -> PassResult:
    """Gives each tagged MatMul its selection's count (module docstring)."""
    tagged = [n for n in graph.nodes if n.op_type == "MatMul" and "_rows_count" in n.attrs]
    if not tagged:
        return PassResult(graph, False, "no routed products")
    by_name = {n.name: n for n in graph.nodes}
    done = 0
    for node in tagged:
        count = by_name.get(node.attrs["_rows_count"])
        if not _counted(node, count):
            continue
        node.attrs["_rows_input"] = len(node.inputs)
        node.set_inputs([*node.inputs, count.outputs[0]])
        done += 1
    return PassResult(graph, done > 0,
                      f"{done} of {len(tagged)} routed products multiply only the picked rows")
