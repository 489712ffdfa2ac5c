"""Control flow: If, Loop, Scan. Their bodies are nested Graphs run by a small interpreter.

A body that reads values of an enclosing graph receives them as extra trailing inputs of
the owning node, named in the node's `_outer` attribute (see importers.onnx_import).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ..dtypes import DType
from ..errors import GraphEngineError, ShapeError
from ..ir import Dim, Graph, Node, TensorMeta
from . import attrs as A
from .api import infer_node, run_node
from .registry import OpSchema, register, shape_error
from .shape_helpers import const_in, meta_in, out, sym


def run_graph(g: Graph, formals: Sequence[np.ndarray | None],
              outer: dict[str, np.ndarray]) -> list[np.ndarray]:
    """Evaluate a body graph: formal inputs by position, enclosing values by name."""
    env: dict[str, Any] = {v.name: v.const for v in g.constants()}
    inputs = [v for v in g.inputs if v.name not in outer]
    for v, x in zip(inputs, formals):
        env[v.name] = x
    for v in g.inputs:
        if v.name in outer:
            env[v.name] = outer[v.name]
    for n in g.nodes:
        res = run_node(n, [env[v.name] if v is not None else None for v in n.inputs])
        for o, r in zip(n.outputs, res):
            env[o.name] = r
    return [env[v.name] for v in g.outputs]


def body_runner(a: dict[str, Any], key: str) -> Callable[[Sequence[Any], dict[str, Any]],
                                                          list[np.ndarray]]:
    """How the body attribute `key` runs: compiled (the loaded model the runtime put in
    `a["_bodies"]`, see `body_signatures`), else interpreted by `run_graph`."""
    compiled = (a.get("_bodies") or {}).get(key)
    if compiled is not None:
        return compiled
    g = a[key]
    return lambda formals, outer: run_graph(g, formals, outer)


def body_signatures(node: Node) -> dict[str, list[TensorMeta]]:
    """For a control-flow node: each body attribute whose every input has one static type
    for every run and iteration, with those types (the body's inputs in order), so that it
    can be compiled once for the device. A body left out is interpreted."""
    spec = _BODY_FORMALS.get(node.op_type)
    if spec is None:
        return {}
    a = node.attrs
    formals, outer = _node_outer(node, a)
    result: dict[str, list[TensorMeta]] = {}
    for key, body_formals in spec(node, a, formals).items():
        body = a.get(key)
        if not isinstance(body, Graph) or body_formals is None:
            continue
        inner = [v for v in body.inputs if v.name not in outer]
        if len(inner) != len(body_formals):
            continue
        metas = []
        for v in body.inputs:
            m = outer[v.name] if v.name in outer else body_formals[inner.index(v)]
            if m is None or m.shape is None or not m.is_static:
                break
            metas.append(m)
        else:
            result[key] = metas
    return result


def body_carries(node: Node) -> list[tuple[int, int]]:
    """(body input, body output) positions of the state a Loop or Scan carries from one
    iteration to the next: a body compiled for one signature must give each back with the
    type it took."""
    if node.op_type == "Loop":
        n = len(_split_outer(node.inputs, node.attrs)[0]) - 2
        return [(2 + k, 1 + k) for k in range(max(n, 0))]
    if node.op_type == "Scan":
        n = len(_split_outer(node.inputs, node.attrs)[0]) - node.attrs["num_scan_inputs"]
        return [(k, k) for k in range(max(n, 0))]
    return []


def _if_formals(node: Node, a: dict[str, Any], formals: list[TensorMeta | None]
                ) -> dict[str, list[TensorMeta | None] | None]:
    return {"then_branch": [], "else_branch": []}


def _loop_formals(node: Node, a: dict[str, Any], formals: list[TensorMeta | None]
                  ) -> dict[str, list[TensorMeta | None] | None]:
    return {"body": [out(DType.INT64, ()), out(DType.BOOL, ()), *formals[2:]]}


def _scan_formals(node: Node, a: dict[str, Any], formals: list[TensorMeta | None]
                  ) -> dict[str, list[TensorMeta | None] | None]:
    if a.get("_batched"):
        formals = [None if f is None or f.shape is None else out(f.dtype, f.shape[1:])
                   for f in formals]
    m = a["num_scan_inputs"]
    n = len(formals) - m
    states, scans = formals[:n], formals[n:]
    axes = _scan_axes(a, "scan_input_axes", m, [None if s is None or s.shape is None
                                                else len(s.shape) for s in scans])
    slices: list[TensorMeta | None] = []
    for s, ax in zip(scans, axes):
        if s is None or s.shape is None or not 0 <= ax < len(s.shape):
            return {"body": None}
        slices.append(out(s.dtype, s.shape[:ax] + s.shape[ax + 1:]))
    return {"body": [*states, *slices]}


def infer_graph(g: Graph, formals: Sequence[TensorMeta | None],
                outer: dict[str, TensorMeta | None]) -> list[TensorMeta | None]:
    """Shape inference over a body graph given its input metas; output metas."""
    for v in g.inputs:
        if v.name in outer:
            v.meta = outer[v.name]
    inputs = [v for v in g.inputs if v.name not in outer]
    for v, m in zip(inputs, formals):
        if m is not None:
            v.meta = m
    for n in g.nodes:
        for o, m in zip(n.outputs, infer_node(n)):
            o.meta = m
    return [v.meta for v in g.outputs]


def _split_outer(node_or_ins: Any, a: dict[str, Any]) -> tuple[list[Any], dict[str, Any]]:
    names = list(a.get("_outer") or [])
    items = list(node_or_ins)
    if not names:
        return items, {}
    return items[: len(items) - len(names)], dict(zip(names, items[len(items) - len(names):]))


def _node_outer(node: Node, a: dict[str, Any]) -> tuple[list[TensorMeta | None],
                                                        dict[str, TensorMeta | None]]:
    metas = [meta_in(node, i) for i in range(len(node.inputs))]
    return _split_outer(metas, a)


def merge_meta(node: Node, metas: Sequence[TensorMeta | None], pos: int) -> TensorMeta:
    known = [m for m in metas if m is not None]
    if not known:
        raise shape_error(node, f"cannot infer the type of output {pos}")
    shapes = [m.shape for m in known]
    if any(s is None for s in shapes) or len({len(s) for s in shapes}) > 1:  # type: ignore
        return out(known[0].dtype, None)
    dims: list[Dim] = []
    for k, ds in enumerate(zip(*shapes)):  # type: ignore[misc]
        dims.append(ds[0] if all(d == ds[0] for d in ds) else sym(node, f"{pos}_{k}"))
    return out(known[0].dtype, dims)


# ---- If ---------------------------------------------------------------------------------------
def _if_infer(node: Node, a: dict[str, Any]) -> list[TensorMeta]:
    _, outer = _node_outer(node, a)
    cond = const_in(node, 0)
    if cond is not None and np.size(cond) == 1:  # only the branch that runs
        return list(infer_graph(a["then_branch" if bool(np.asarray(cond).reshape(-1)[0])
                                  else "else_branch"], [], outer))
    # A branch the data may never take need not fit these shapes: silero VAD's 8 kHz branch
    # cannot run on a 16 kHz chunk, and only the run's sample rate picks it. Its outputs are
    # unknown then; if the run takes it, its node fails there, naming itself.
    results, errors = [], []
    for key in ("then_branch", "else_branch"):
        try:
            results.append(infer_graph(a[key], [], outer))
        except ShapeError as exc:
            results.append(None)
            errors.append(exc)
    if len(errors) == 2:
        raise errors[0]
    then, other = (r if r is not None else [None] * len(results[1 - i])
                   for i, r in enumerate(results))
    if len(then) != len(other):
        raise shape_error(node, f"then_branch has {len(then)} outputs, else_branch "
                                f"{len(other)}")
    return [merge_meta(node, [t, e], k) for k, (t, e) in enumerate(zip(then, other))]


def _if(ins: list[Any], a: dict[str, Any]) -> list[np.ndarray]:
    formals, outer = _split_outer(ins, a)
    return body_runner(a, "then_branch" if bool(np.asarray(formals[0]).reshape(-1)[0])
                       else "else_branch")([], outer)


register(OpSchema("If", 1, -1, _if_infer, _if, max_outputs=1 << 16,
                  attrs={"then_branch": A.graph(), "else_branch": A.graph()}))


# ---- Loop -------------------------------------------------------------------------------------
def _loop_infer(node: Node, a: dict[str, Any]) -> list[TensorMeta]:
    formals, outer = _node_outer(node, a)
    carried = formals[2:]
    body_in = [out(DType.INT64, ()), out(DType.BOOL, ()), *carried]
    res = infer_graph(a["body"], body_in, outer)
    n = len(carried)
    metas = [merge_meta(node, [res[1 + k], carried[k]], k) for k in range(n)]
    trips = static_trip_count(node, a)
    count: Dim = trips if trips is not None else sym(node, "iters")
    for k, m in enumerate(res[1 + n:]):
        if m is None:
            raise shape_error(node, f"cannot infer scan output {k} of the body")
        metas.append(out(m.dtype, None if m.shape is None else (count,) + m.shape))
    return metas


# Bounds of the compile-time run of a Loop's condition (static_trip_count).
MAX_SIMULATED_TRIPS = 1 << 14
_MAX_CONTROL_NODES = 64
_MAX_CONTROL_ELEMENTS = 1 << 10
_MAX_CONTROL_EVALUATIONS = 1 << 16


def static_trip_count(node: Node, a: dict[str, Any]) -> int | None:
    """The iterations a Loop runs, when nothing a run feeds can change it: the trip count
    and the first condition are constants, and the body's condition is computed from the
    iteration number, constants and carried state that is itself computed so (tf2onnx's
    Keras LSTM: `i < n and counter < n` with `counter += 1`). That part of the body (its
    control slice, a few scalar nodes) is run here, iteration by iteration, within bounds;
    the scan outputs then have a static length, and what reads them compiles."""
    names = list(a.get("_outer") or [])
    n_formal = len(node.inputs) - len(names)
    trip = const_in(node, 0) if node.input(0) is not None else None
    cond0 = const_in(node, 1) if n_formal > 1 and node.input(1) is not None else np.array(True)
    if (node.input(0) is not None and trip is None) or cond0 is None or \
            np.size(cond0) != 1 or (trip is not None and np.size(trip) != 1):
        return None
    limit = None if trip is None else max(int(np.asarray(trip).reshape(-1)[0]), 0)
    if not bool(np.asarray(cond0).reshape(-1)[0]):
        return 0
    body: Graph = a["body"]
    formals = [v for v in body.inputs if v.name not in names]
    if len(formals) != n_formal or len(body.outputs) < n_formal - 1:
        return None
    position = {v: k for k, v in enumerate(formals)}
    known: dict[str, Any] = {}  # the slice's inputs that do not change: constants, outer
    slice_nodes: set[Node] = set()
    carried: set[int] = set()
    roots = [body.outputs[0]]
    while roots:
        v = roots.pop()
        if v.name in known or v.producer in slice_nodes:
            continue
        if v.is_constant:
            known[v.name] = v.const
        elif v in position:
            k = position[v]
            if k >= 2 and k - 2 not in carried:
                carried.add(k - 2)
                roots.append(body.outputs[k - 1])
        elif v.producer is None:  # an enclosing value: a constant of this compile, or no count
            if v.name not in names:
                return None
            value = const_in(node, n_formal + names.index(v.name))
            if value is None:
                return None
            known[v.name] = value
        else:
            slice_nodes.add(v.producer)
            if len(slice_nodes) > _MAX_CONTROL_NODES:
                return None
            roots.extend(x for x in v.producer.inputs if x is not None)
    start = {}
    for k in carried:
        value = const_in(node, 2 + k)
        if value is None or np.size(value) > _MAX_CONTROL_ELEMENTS:
            return None
        start[formals[2 + k].name] = value
    order = [n for n in body.nodes if n in slice_nodes]
    cond, i = True, 0
    # at most _MAX_CONTROL_EVALUATIONS node runs in all, whatever the slice's length
    trips = min(MAX_SIMULATED_TRIPS, _MAX_CONTROL_EVALUATIONS // max(len(order), 1))
    bound = trips if limit is None else min(limit, trips + 1)
    try:
        while cond and i < bound:
            env = {**known, **start, formals[0].name: np.array(i, np.int64),
                   formals[1].name: np.array(cond)}
            for n in order:
                outs = run_node(n, [None if x is None else env[x.name] for x in n.inputs])
                for o, r in zip(n.outputs, outs):
                    if np.size(r) > _MAX_CONTROL_ELEMENTS:
                        return None
                    env[o.name] = r
            cond = bool(np.asarray(env[body.outputs[0].name]).reshape(-1)[0])
            start = {formals[2 + k].name: env[body.outputs[1 + k].name] for k in carried}
            i += 1
    except (GraphEngineError, KeyError, ValueError, TypeError, IndexError):
        return None
    if cond and limit is None or i > trips:
        return None
    return i


def _loop(ins: list[Any], a: dict[str, Any]) -> list[np.ndarray]:
    formals, outer = _split_outer(ins, a)
    trip = formals[0] if formals else None
    cond = formals[1] if len(formals) > 1 else None
    carried = list(formals[2:])
    body: Graph = a["body"]
    run = body_runner(a, "body")
    limit = None if trip is None else int(np.asarray(trip).reshape(-1)[0])
    keep_going = True if cond is None else bool(np.asarray(cond).reshape(-1)[0])
    scans: list[list[np.ndarray]] = [[] for _ in range(len(body.outputs) - 1 - len(carried))]
    i = 0
    while keep_going and (limit is None or i < limit):
        res = run([np.array(i, np.int64), np.array(keep_going), *carried], outer)
        keep_going = bool(np.asarray(res[0]).reshape(-1)[0])
        carried = res[1:1 + len(carried)]
        for k, s in enumerate(res[1 + len(carried):]):
            scans[k].append(s)
        i += 1
    stacked = []
    for k, parts in enumerate(scans):
        if parts:
            stacked.append(np.stack(parts))
        else:
            stacked.append(_no_iterations(body.outputs[1 + len(carried) + k].meta))
    return carried + stacked


def _dense(x: Any) -> np.ndarray:
    """A slice as a C-contiguous array of its own rank (a compiled body takes it in place)."""
    x = np.asarray(x)
    return x if x.flags.c_contiguous else x.copy()


def _no_iterations(meta: TensorMeta | None) -> np.ndarray:
    """A scan output of no iterations: [0, *the body output's shape] when it is known."""
    if meta is None:
        return np.zeros((0,), np.float32)
    shape = meta.shape if meta.shape is not None and meta.is_static else ()
    return np.zeros((0, *shape), meta.dtype.numpy)


register(OpSchema("Loop", 0, -1, _loop_infer, _loop, max_outputs=1 << 16,
                  attrs={"body": A.graph()}))


# ---- Scan -------------------------------------------------------------------------------------
def _scan_axes(a: dict[str, Any], key: str, count: int, ranks: Sequence[int | None]
               ) -> list[int]:
    axes = list(a.get(key) or [0] * count)
    return [x + r if x < 0 and r is not None else x for x, r in zip(axes, ranks)]


def _scan_infer(node: Node, a: dict[str, Any]) -> list[TensorMeta]:
    formals, outer = _node_outer(node, a)
    if a.get("_batched"):  # Scan-8: every input and output has a leading batch axis
        batch = next((f.shape[0] for f in formals if f is not None and f.shape), None)
        inner = [None if f is None else out(f.dtype, None if f.shape is None else f.shape[1:])
                 for f in formals]
        metas = _scan_infer_unbatched(node, a, inner, outer)
        return [out(m.dtype, None if m.shape is None or batch is None else (batch, *m.shape))
                for m in metas]
    return _scan_infer_unbatched(node, a, formals, outer)


def _scan_infer_unbatched(node: Node, a: dict[str, Any], formals: list[TensorMeta | None],
                          outer: dict[str, TensorMeta | None]) -> list[TensorMeta]:
    m = a["num_scan_inputs"]
    n = len(formals) - m
    states, scans = formals[:n], formals[n:]
    in_axes = _scan_axes(a, "scan_input_axes", m,
                         [None if s is None or s.shape is None else len(s.shape)
                          for s in scans])
    slices: list[TensorMeta | None] = []
    length: Dim = sym(node, "len")
    for s, ax in zip(scans, in_axes):
        if s is None or s.shape is None:
            slices.append(None if s is None else out(s.dtype, None))
            continue
        length = s.shape[ax]
        slices.append(out(s.dtype, s.shape[:ax] + s.shape[ax + 1:]))
    res = infer_graph(a["body"], [*states, *slices], outer)
    metas = [merge_meta(node, [res[k], states[k]], k) for k in range(n)]
    k_out = len(res) - n
    out_axes = _scan_axes(a, "scan_output_axes", k_out,
                          [None if r is None or r.shape is None else len(r.shape) + 1
                           for r in res[n:]])
    for r, ax in zip(res[n:], out_axes):
        if r is None or r.shape is None:
            metas.append(out(r.dtype if r else DType.FLOAT32, None))
            continue
        dims = list(r.shape)
        dims.insert(ax, length)
        metas.append(out(r.dtype, dims))
    return metas


def _scan(ins: list[Any], a: dict[str, Any]) -> list[np.ndarray]:
    formals, outer = _split_outer(ins, a)
    if a.get("_batched"):  # Scan-8: run the scan once per batch item, stack the results
        per_item = [_scan_unbatched([f[b] for f in formals], outer, a)
                    for b in range(formals[0].shape[0])]
        return [np.stack(parts) for parts in zip(*per_item)]
    return _scan_unbatched(formals, outer, a)


def _scan_unbatched(formals: list[Any], outer: dict[str, Any], a: dict[str, Any]
                    ) -> list[np.ndarray]:
    m = a["num_scan_inputs"]
    n = len(formals) - m
    states, scans = list(formals[:n]), formals[n:]
    in_axes = _scan_axes(a, "scan_input_axes", m, [x.ndim for x in scans])
    in_dirs = list(a.get("scan_input_directions") or [0] * m)
    seqs = [np.moveaxis(x, ax, 0) for x, ax in zip(scans, in_axes)]
    seqs = [s[::-1] if d else s for s, d in zip(seqs, in_dirs)]
    length = seqs[0].shape[0] if seqs else 0
    collected: list[list[np.ndarray]] = []
    run = body_runner(a, "body")
    for t in range(length):
        res = run([*states, *(_dense(s[t]) for s in seqs)], outer)
        states = res[:n]
        if not collected:
            collected = [[] for _ in res[n:]]
        for k, r in enumerate(res[n:]):
            collected[k].append(r)
    k_out = len(a["body"].outputs) - n
    out_dirs = list(a.get("scan_output_directions") or [0] * k_out)
    results = list(states)
    for k in range(k_out):
        parts = collected[k] if collected else []
        stacked = np.stack(parts) if parts else _no_iterations(a["body"].outputs[n + k].meta)
        if out_dirs[k]:
            stacked = stacked[::-1]
        ax = (a.get("scan_output_axes") or [0] * k_out)[k]
        ax = ax + stacked.ndim if ax < 0 else ax
        results.append(np.moveaxis(stacked, 0, ax))
    return results


register(OpSchema("Scan", 1, -1, _scan_infer, _scan, max_outputs=1 << 16, attrs={
    "body": A.graph(), "num_scan_inputs": A.i(A.REQUIRED), "scan_input_axes": A.ints(),
    "scan_input_directions": A.ints(), "scan_output_axes": A.ints(),
    "scan_output_directions": A.ints()}))


_BODY_FORMALS = {"If": _if_formals, "Loop": _loop_formals, "Scan": _scan_formals}
BODY_ATTRS = {"If": ("then_branch", "else_branch"), "Loop": ("body",), "Scan": ("body",)}


# ---- Optional (an optional tensor is the tensor, or an omitted input) ------------------
register(OpSchema("OptionalHasElement", 0, 1, lambda node, a: [out(DType.BOOL, ())],
                  lambda ins, a: [np.array(bool(ins) and ins[0] is not None)]))
register(OpSchema("OptionalGetElement", 1, 1,
                  lambda node, a: [out(meta_in(node, 0).dtype, meta_in(node, 0).shape)],
                  lambda ins, a: [ins[0]]))
register(OpSchema("Optional", 1, 1,
                  lambda node, a: [out(meta_in(node, 0).dtype, meta_in(node, 0).shape)],
                  lambda ins, a: [ins[0]], attrs={"type": A.AttrSpec(A.AttrKind.TENSOR)}))
