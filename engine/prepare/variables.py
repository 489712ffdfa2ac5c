"""Session variables: check a graph's use of them, and order its reads before its writes.

A variable's bytes are read and written in place (no copy per run), so the order of the
tasks decides what a reader sees. The semantics are the data flow's: a reader of a
reference (a Variable's output, or a write's) sees the value at that point of the
variable's chain of writes, wherever the node is listed.

`check_variables` (run when a graph is added and when it compiles): Variable nodes that
name one variable agree on its dtype, shape and initial value and become one node; each
write takes a reference as its input 0, and no reference is written twice (two writes
with no order between them: which would win?).

`order_variable_access` (the compile's "variables" stage, before placement): every node
that reads a reference before its next write — directly or through nodes that may alias
its bytes (Reshape, Squeeze, Identity, a leading Slice: views the build makes no copy
for) — gets its output added to the write's ordering inputs (inputs past the write's own,
which its kernel never sees), so the build's dependencies run it first; partitions
inherit the order, since a node only joins a partition after those of its inputs. What
cannot be ordered before the write gets a copy taken before it (`graphengine.Snapshot`):
a graph output (copied out when its program ends) and a reader that also depends on the
write (Add(v, Assign(v, x)) reads both values).
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from .. import ops
from ..errors import InvalidGraph
from ..ir import Graph, Node, Value
from ..ops.variables import SNAPSHOT, VARIABLE, WRITES, declared_meta, is_reference, variable_of
from ..passes import PassResult


def check_variables(graph: Graph) -> PassResult:
    """One Variable node per variable name, declarations agreeing; writes chained."""
    first: dict[str, Node] = {}
    merged = 0
    for node in graph.nodes:
        body = next((a for a in node.attrs.values() if isinstance(a, Graph)), None)
        if body is not None and _uses_variables(body):
            raise InvalidGraph(f"node '{node.name}' ({node.op_type}): a body reads or writes "
                               f"session variables; variables are used in the top-level "
                               f"graph only", graph=graph.name, node=node.name)
    for node in list(graph.nodes):
        if node.op_type != VARIABLE:
            continue
        meta = declared_meta(node)
        name = node.attrs["variable"]
        kept = first.setdefault(name, node)
        if kept is node:
            continue
        kept_meta = declared_meta(kept)
        if kept_meta != meta or not _same_value(kept.attrs.get("value"), node.attrs.get("value")):
            what = f"{kept_meta} and {meta}" if kept_meta != meta else "different initial values"
            raise InvalidGraph(f"variable '{name}' is declared by nodes '{kept.name}' and "
                               f"'{node.name}' with {what}", graph=graph.name, node=node.name)
        graph.replace_all_uses(node.outputs[0], kept.outputs[0])
        graph.remove_node(node)
        merged += 1
    written: dict[Value, Node] = {}
    for node in graph.nodes:
        if node.op_type not in WRITES:
            continue
        ref = node.inputs[0] if node.inputs else None
        if not is_reference(ref):
            raise InvalidGraph(f"node '{node.name}' ({node.op_type}): input 0 must be a variable "
                               f"(a Variable's output or a write's)", graph=graph.name,
                               node=node.name)
        other = written.setdefault(ref, node)
        if other is not node:
            raise InvalidGraph(
                f"variable '{variable_of(ref)}' is written by '{other.name}' and '{node.name}' "
                f"from the same value '{ref.name}', with no order between them; chain them "
                f"(give one the other's output as its variable input)", graph=graph.name,
                node=node.name)
    return PassResult(graph, merged > 0, f"{len(first)} variables, {len(written)} writes"
                      + (f", {merged} duplicate Variable nodes merged" if merged else ""))


def _uses_variables(graph: Graph) -> bool:
    return any(ops.get(n.op_type, n).stateful or any(
        isinstance(a, Graph) and _uses_variables(a) for a in n.attrs.values())
        for n in graph.nodes)


def _same_value(a: object, b: object) -> bool:
    if a is None or b is None:
        return a is b
    return np.array_equal(np.asarray(a), np.asarray(b))


def _may_alias(node: Node) -> bool:
    """Whether the build may make `node`'s output a view of input 0's bytes (no copy)."""
    return 0 in ops.get(node.op_type, node).alias or node.op_type == "Slice"


def _aliases(ref: Value) -> Iterator[Value]:
    """`ref` and every value that may share its bytes through views."""
    todo, seen = [ref], {ref}
    while todo:
        v = todo.pop()
        yield v
        for user in v.users:
            if user.inputs and user.inputs[0] is v and _may_alias(user) and \
                    user.outputs[0] not in seen:
                seen.add(user.outputs[0])
                todo.append(user.outputs[0])


def _downstream(node: Node) -> set[Node]:
    """Nodes that (transitively) read one of `node`'s outputs."""
    seen: set[Node] = set()
    todo = [node]
    while todo:
        for out in todo.pop().outputs:
            for user in out.users:
                if user not in seen:
                    seen.add(user)
                    todo.append(user)
    return seen


def _snapshot(graph: Graph, v: Value, made: dict[Value, Value]) -> Value:
    """A copy of `v` (one per value and write)."""
    if v not in made:
        node = graph.add_node(SNAPSHOT, [v], name=graph.unique_name("snapshot"))
        node.outputs[0].meta = v.meta
        made[v] = node.outputs[0]
    return made[v]


def order_variable_access(graph: Graph) -> PassResult:
    """Every read of a reference runs before its next write (see the module's doc)."""
    writes = [n for n in graph.nodes if n.op_type in WRITES]
    ordered = copies = 0
    for write in writes:
        ref = write.inputs[0]
        later = _downstream(write)
        after: list[Value] = []
        snaps: dict[Value, Value] = {}
        for value in list(_aliases(ref)):
            for user in list(dict.fromkeys(value.users)):
                if user is write:
                    continue
                if user in later:  # reads the old value and depends on the write
                    user.replace_input(value, _snapshot(graph, value, snaps))
                elif user.outputs:
                    after.append(user.outputs[0])
            if value in graph.outputs:  # copied out at the end: keep the value it had here
                copy = _snapshot(graph, value, snaps)
                graph.outputs = [copy if v is value else v for v in graph.outputs]
        after += snaps.values()
        have = set(write.inputs)
        extra = [v for v in dict.fromkeys(after) if v not in have]
        if extra:
            write.set_inputs([*write.inputs, *extra])
        ordered += len(extra)
        copies += len(snaps)
    return PassResult(graph, bool(ordered or copies),
                      f"{len(writes)} writes: {ordered} reads ordered before them, "
                      f"{copies} values copied")


__all__ = ["check_variables", "order_variable_access"]
