"""If nodes written into the enclosing graph: the branch a constant condition takes, or,
when both branches are small and cannot fail, both of them and a Where between their
results (if-conversion).

An If whose condition is only known at run time was a host step: the device program was cut
in two around it and every run paid a host round trip (~20-40 us) to pick a branch. When
both branches are a few pure ops over static shapes (openWakeWord's classifier: an MLP in
one branch, its input passed through in the other), computing both costs less than that
trip, and `Where(cond, then, else)` keeps the whole model one device program. A branch may
compute garbage it is not taken for (a division by zero, a log of a negative): Where never
lets the unselected value through. Only ops that cannot fail at run time on static shapes
take part (no gathers or scatters of data-dependent indices, no nested control flow), and
the branches together stay under a work bound, so a large branch is never run for nothing
(silero VAD's two sample-rate models stay an If).
"""

from __future__ import annotations

import numpy as np

from ..dtypes import DType
from ..flops import node_flops
from ..ir import Graph, Node, Value

# Pure, total ops: given static shapes they compute a value for any input data.
_TOTAL = frozenset({
    "Abs", "Add", "And", "ArgMax", "ArgMin", "Cast", "Ceil", "Clip", "Concat", "Constant",
    "Conv", "Cos", "Div", "Elu", "Equal", "Erf", "Exp", "Expand", "Flatten", "Floor",
    "Gelu", "Gemm", "Greater", "GreaterOrEqual", "HardSigmoid", "HardSwish", "Identity",
    "LayerNormalization", "LeakyRelu", "Less", "LessOrEqual", "Log", "LogSoftmax", "MatMul",
    "Max", "Mean", "Min", "Mul", "Neg", "Not", "Or", "Pow", "PRelu", "Reciprocal",
    "ReduceL2", "ReduceLogSumExp", "ReduceMax", "ReduceMean", "ReduceMin", "ReduceProd",
    "ReduceSum", "ReduceSumSquare", "Relu", "Reshape", "Selu", "Shape", "Sigmoid", "Sign",
    "Sin", "Size", "Slice", "Softmax", "Softplus", "Softsign", "Sqrt", "Squeeze", "Sub",
    "Sum", "Tanh", "Tile", "Transpose", "Unsqueeze", "Where", "Xor",
})
_MAX_NODES = 64
_MAX_FLOPS = 2e6  # both branches' convolutions and matrix products (~20 us here)
_MAX_ELEMENTS = 1 << 18  # every value both branches write, summed


def copy_branch(graph: Graph, node: Node, branch: Graph) -> dict[Value, Value]:
    """Write `branch`'s nodes into `graph` (before `node`'s readers: the pass manager sorts
    them); returns the map from the branch's values to the enclosing graph's."""
    names = list(node.attrs.get("_outer") or [])
    passed = node.inputs[len(node.inputs) - len(names):] if names else ()
    vmap: dict[Value, Value] = {}
    outer = dict(zip(names, passed))
    for v in branch.inputs:
        if outer.get(v.name) is None:  # the importer passes every value a body reads
            raise ValueError(f"If '{node.name}': branch input '{v.name}' is not passed")
        vmap[v] = outer[v.name]
    for v in branch.constants():
        vmap[v] = graph.add_constant(graph.unique_name(f"{node.name}/{v.name}"), v.const)
    for n in branch.nodes:
        outs = [o.name if o.name not in graph.values else graph.unique_name(o.name)
                for o in n.outputs]
        name = n.name if n.name not in graph._node_names else graph.unique_name(n.name)
        copy = graph.add_node(n.op_type, [None if v is None else vmap[v] for v in n.inputs],
                              outputs=outs, attrs=dict(n.attrs), name=name)
        for o, c in zip(n.outputs, copy.outputs):
            c.meta = o.meta
            vmap[o] = c
    return vmap


def _branch_cost(branch: Graph) -> tuple[float, int] | None:
    """(FLOPs, elements written) of a branch every node of which is total over static
    shapes; None otherwise."""
    flops, elements = 0.0, 0
    for n in branch.nodes:
        if n.op_type not in _TOTAL or any(isinstance(a, Graph) for a in n.attrs.values()):
            return None
        for o in n.outputs:
            if o.meta is None or not o.meta.is_static:
                return None
            elements += o.meta.numel
        flops += node_flops(n)
    for o in branch.outputs:
        if o.meta is None or not o.meta.is_static:
            return None
    return flops, elements


def cheap_if(node: Node) -> bool:
    """An If with a run-time condition whose branches are small, total and agree on every
    output's type: both can be computed and one selected."""
    if node.op_type != "If":
        return False
    cond = node.input(0)
    then, other = node.attrs.get("then_branch"), node.attrs.get("else_branch")
    if cond is None or cond.is_constant or cond.meta is None or not cond.meta.is_static \
            or cond.meta.numel != 1 or cond.meta.dtype is not DType.BOOL \
            or not isinstance(then, Graph) or not isinstance(other, Graph) \
            or len(then.nodes) + len(other.nodes) > _MAX_NODES \
            or not (len(then.outputs) == len(other.outputs) == len(node.outputs)):
        return False
    costs = [_branch_cost(then), _branch_cost(other)]
    if None in costs or sum(c[0] for c in costs) > _MAX_FLOPS \
            or sum(c[1] for c in costs) > _MAX_ELEMENTS:
        return False
    return all(t.meta == e.meta and o.meta == t.meta
               for t, e, o in zip(then.outputs, other.outputs, node.outputs))


def select_branches(graph: Graph, node: Node) -> None:
    """Both branches written into the graph, each output a Where between them (the If's
    output values keep their names and readers)."""
    then = copy_branch(graph, node, node.attrs["then_branch"])
    other = copy_branch(graph, node, node.attrs["else_branch"])
    cond = node.inputs[0]
    if cond.meta.rank:
        scalar = graph.add_constant(None, np.zeros(0, np.int64))
        cond = graph.add_node("Reshape", [cond, scalar],
                              name=graph.unique_name(f"{node.name}_cond")).outputs[0]
    picks = []
    for k, (t, e) in enumerate(zip(node.attrs["then_branch"].outputs,
                                   node.attrs["else_branch"].outputs)):
        picks.append(graph.add_node("Where", [cond, then[t], other[e]], outputs=[],
                                    name=graph.unique_name(f"{node.name}_select{k}")))
    # the Wheres take over the If's output values (names, readers, graph outputs)
    graph.hand_over_outputs(node, picks)
