"""TensorFlow frozen GraphDef -> IR Graph (GE's TF parser, ATC's --framework=3 role).

A frozen graph holds its weights as Const nodes; Placeholders are the inputs, and the
outputs are the nodes nothing else reads (or the ones asked for). Only what the outputs
depend on is converted, so an unsupported op elsewhere does not matter; every unsupported
op they do depend on is named in one error. The op mapping is `tf_ops.CONVERTERS` (filled by
tf_ops and tf_shape_ops); the context the converters write through is tf_context's.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from graphengine.tensorflow import graph_def_pb2 as tfpb

from ..errors import GraphEngineError, InvalidModel, bounded_text
from ..ir import Graph
from . import tf_shape_ops  # noqa: F401  (registers its converters)
from .graphdef import CANONICAL_OPSET
from .text import check_text
from .tf_context import TfContext, TfNode, load_graphdef, producer_name, tensor_name
from .tf_ops import CONVERTERS

# Ops that compute nothing a graph output could be.
_NOT_OUTPUTS = {"NoOp", "Const", "Placeholder", "Assert", "SaveV2", "RestoreV2"}


def import_tf(model: Any, name: str | None = None, *,
              input_shapes: Mapping[str, Sequence[int]] | None = None,
              outputs: Sequence[str] | None = None, keep_nchw: bool = True) -> Graph:
    """Build a Graph from a frozen TensorFlow GraphDef (ours or tensorflow's message, bytes,
    or a .pb path).

    `input_shapes` replaces Placeholders' declared shapes (-1: a symbolic dim);
    `outputs` names the output tensors ("node" or "node:k"), by default every node no
    other node reads. `keep_nchw=False` converts every NCHW result straight back to NHWC
    (what a naive importer writes; kept to measure the layout handling against).
    """
    gd = load_graphdef(model)
    check_text(gd, "the graph")
    nodes: dict[str, tfpb.NodeDef] = {}
    for nd in gd.node:
        if not nd.name or nd.name in nodes:
            raise InvalidModel(f"node name '{nd.name}' is empty or used twice",
                               node=nd.name or None)
        nodes[nd.name] = nd
    if not nodes:
        raise InvalidModel("the TensorFlow GraphDef has no nodes")
    wanted = [tensor_name(o) for o in outputs] if outputs else _default_outputs(gd)
    if not wanted:
        raise InvalidModel("the TensorFlow graph computes nothing: every node is a Const, "
                           "Placeholder or NoOp, or is read by another node")
    order = _reachable_order(nodes, wanted)
    unsupported: dict[str, list[str]] = {}
    for nd in order:
        if nd.op not in CONVERTERS:
            unsupported.setdefault(nd.op, []).append(nd.name)
    if unsupported:
        listed = "; ".join(f"{op} ({_names(names)})" for op, names in sorted(unsupported.items()))
        raise InvalidModel(f"the TensorFlow graph uses {len(unsupported)} unsupported op "
                           f"type{'s' if len(unsupported) > 1 else ''}: {listed}",
                           node=next(iter(unsupported.values()))[0])
    g = Graph(name or "tf_graph")
    g.opset = CANONICAL_OPSET
    g.producer = {"framework": "tensorflow", "exporter": "frozen GraphDef",
                  "version": f"GraphDef producer {gd.versions.producer}"}
    ctx = TfContext(g, set(nodes), dict(input_shapes or {}), keep_nchw)
    for nd in order:
        node = TfNode(nd)
        for ref in node.inputs:
            if producer_name(ref) not in nodes:
                raise node.fail(f"reads '{ref}', which no node of the graph produces")
        try:
            CONVERTERS[nd.op](ctx, node)
        except InvalidModel:
            raise
        except (GraphEngineError, ValueError, TypeError, IndexError) as exc:
            raise node.fail(getattr(exc, "message", None) or str(exc)) from None
    unused = sorted(set(ctx.shapes) - {v.name for v in g.inputs})
    if unused:
        raise InvalidModel(f"input shapes name {unused}, which are not Placeholders the "
                           f"outputs depend on; those are {[v.name for v in g.inputs]}")
    g.outputs = [ctx.graph_output(t) for t in wanted]
    return g


def _names(names: list[str], shown: int = 8) -> str:
    head = ", ".join(f"'{bounded_text(n, 80)}'" for n in names[:shown])
    more = f" and {len(names) - shown} more" if len(names) > shown else ""
    return f"node{'s' if len(names) > 1 else ''} {head}{more}"


def _default_outputs(gd: tfpb.GraphDef) -> list[str]:
    read = {producer_name(i) for nd in gd.node for i in nd.input if not i.startswith("^")}
    return [nd.name for nd in gd.node if nd.name not in read and nd.op not in _NOT_OUTPUTS]


def _reachable_order(nodes: dict[str, tfpb.NodeDef], wanted: Iterable[str]
                     ) -> list[tfpb.NodeDef]:
    """The nodes the wanted tensors depend on (data inputs only), producers first."""
    order: list[tfpb.NodeDef] = []
    state: dict[str, int] = {}  # 1 visiting, 2 done
    for ref in wanted:
        root = producer_name(ref)
        if root not in nodes:
            raise InvalidModel(f"output '{ref}' names no node of the graph", tensor=ref)
        if state.get(root) == 2:
            continue
        stack = [(root, iter(nodes[root].input))]
        state[root] = 1
        while stack:
            cur, it = stack[-1]
            for ref_in in it:
                if ref_in.startswith("^"):
                    continue
                p = producer_name(ref_in)
                if p not in nodes or state.get(p) == 2:
                    continue  # a dangling input is reported with its reader
                if state.get(p) == 1:
                    raise InvalidModel(f"the TensorFlow graph has a cycle through node '{p}' "
                                       f"(control flow loops are not supported)", node=p)
                state[p] = 1
                stack.append((p, iter(nodes[p].input)))
                break
            else:
                stack.pop()
                state[cur] = 2
                order.append(nodes[cur])
    return order


__all__ = ["import_tf"]
