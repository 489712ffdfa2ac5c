"""Mixture-of-experts layers as transformers exports them, run on the device.

Each expert's tokens come from a NonZero of the router's one-hot mask; prepare/expert_rows.py
pads that selection to one row per token and masks the scatter back, prepare/routing.py
shows that a token appears at most once per expert. The graphs here are written the two
ways exporters write the layer — Mixtral/OLMoE's loop over the experts hit (a NonZero of the
hit list split into as many parts as the trace saw, ScatterElements back) and the older loop
over every expert (an Equal per expert, GatherND of the weights, ScatterND with add) — and
every answer is held to onnxruntime's, including routers whose experts get no token, that
send every token to one expert, and that tie."""

from __future__ import annotations

import sys

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from graphengine import _runtime
from graphengine.engine.dtypes import DType
from graphengine.engine.importers import load_model
from graphengine.engine.ir import Engine, Graph, TensorMeta
from graphengine.engine.optimize.routed_rows import limit_routed_rows
from graphengine.engine.pipeline import compile_graph
from graphengine.engine.prepare import expert_rows
from graphengine.engine.runtime import LoadedModel

DEVICE = _runtime.Device(2)
T, H, W, E = 12, 16, 8, 4  # tokens, hidden, expert width, experts


def _c(name: str, value) -> onnx.TensorProto:
    return numpy_helper.from_array(np.asarray(value), name)


def _weights(seed: int, tie: bool) -> dict:
    rng = np.random.default_rng(seed)
    router = rng.normal(0, 1, (H, E)).astype(np.float32)
    if tie:  # experts 1 and 2 score the same for every token
        router[:, 2] = router[:, 1]
    return {"router": router,
            "gate_up": rng.normal(0, 0.3, (E, 2 * W, H)).astype(np.float32),
            "down": rng.normal(0, 0.3, (E, H, W)).astype(np.float32)}


def _router(nodes: list, inits: list, w: dict, k: int) -> None:
    """x -> (idx [T, k], weights [T, k]): softmax, top-k, renormalized (Mixtral's gate);
    `bias` [E] is an input, so a test can steer every token to chosen experts."""
    inits += [_c("router", w["router"]), _c("k", np.array([k], np.int64)),
              _c("last", np.array([-1], np.int64))]
    nodes += [
        helper.make_node("MatMul", ["x", "router"], ["scores0"]),
        helper.make_node("Add", ["scores0", "bias"], ["scores"]),
        helper.make_node("Softmax", ["scores"], ["probs"], axis=-1),
        helper.make_node("TopK", ["probs", "k"], ["top", "idx"], axis=-1),
        helper.make_node("ReduceSum", ["top", "last"], ["top_sum"], keepdims=1),
        helper.make_node("Div", ["top", "top_sum"], ["route_w"]),
    ]


def _expert(nodes: list, inits: list, e: str, rows: str, tag: str) -> str:
    """The expert's SwiGLU MLP on `rows` with its weights picked by `e` (a scalar id):
    one fused gate-and-up projection sliced in halves, as transformers' experts do."""
    n = _namer(tag)
    nodes += [
        helper.make_node("Gather", ["gate_up", e], [n("gu")], axis=0),
        helper.make_node("Transpose", [n("gu")], [n("gu_t")], perm=[1, 0]),
        helper.make_node("MatMul", [rows, n("gu_t")], [n("h")]),
        helper.make_node("Slice", [n("h"), "zero1", "half", "last"], [n("g")]),
        helper.make_node("Slice", [n("h"), "half", "full", "last"], [n("u")]),
        helper.make_node("Sigmoid", [n("g")], [n("sg")]),
        helper.make_node("Mul", [n("g"), n("sg")], [n("act")]),
        helper.make_node("Mul", [n("act"), n("u")], [n("a")]),
        helper.make_node("Gather", ["down", e], [n("d")], axis=0),
        helper.make_node("Transpose", [n("d")], [n("d_t")], perm=[1, 0]),
        helper.make_node("MatMul", [n("a"), n("d_t")], [n("y")]),
    ]
    return n("y")


def _namer(i: object):
    return lambda s: f"{s}_{i}"


def _common_inits(w: dict) -> list:
    return [_c("gate_up", w["gate_up"]), _c("down", w["down"]),
            _c("zero1", np.array([0], np.int64)), _c("half", np.array([W], np.int64)),
            _c("full", np.array([2 * W], np.int64)), _c("zeros", np.zeros((T, H), np.float32)),
            _c("ax0", np.array([0], np.int64)), _c("ax1", np.array([1], np.int64)),
            _c("ax01", np.array([0, 1], np.int64))]


def _model(nodes: list, inits: list, name: str = "moe", width: int = H) -> bytes:
    graph = helper.make_graph(
        nodes, name,
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [T, H]),
         helper.make_tensor_value_info("bias", TensorProto.FLOAT, [E])],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, [T, width])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.checker.check_model(model)
    return model.SerializeToString()


def hit_list_moe(k: int = 2, seed: int = 0, tie: bool = False, traced: int = E) -> bytes:
    """Mixtral's eager experts as torch.onnx traces them: one_hot(idx, E + 1) permuted to
    [E + 1, k, T]; the experts hit (NonZero of the mask's sums) split into as many parts as
    the trace saw hit (`traced`, E unless a test says otherwise); per part
    NonZero(mask[e]) -> (slot, token), rows gathered, the weight picked from the flattened
    [T * k, 1] routing weights at token * k + slot, ScatterElements into zeros, summed."""
    w = _weights(seed, tie)
    nodes: list = []
    inits = _common_inits(w) + [
        _c("depth", np.array(E + 1, np.int64)), _c("onoff", np.array([0, 1], np.int64)),
        _c("sum_axes", np.array([-1, -2], np.int64)), _c("nothing", np.array(0, np.int64)),
        _c("ones_e", np.ones(traced, np.int64)), _c("pair", np.array([1, 1], np.int64)),
        _c("kk", np.array([k], np.int64)), _c("two", np.array([2], np.int64))]
    _router(nodes, inits, w, k)
    nodes += [
        helper.make_node("OneHot", ["idx", "depth", "onoff"], ["hot"], axis=-1),
        helper.make_node("Transpose", ["hot"], ["mask"], perm=[2, 1, 0]),
        helper.make_node("ReduceSum", ["mask", "sum_axes"], ["per_expert"], keepdims=0),
        helper.make_node("Greater", ["per_expert", "nothing"], ["hit_b"]),
        helper.make_node("NonZero", ["hit_b"], ["hit"]),
        helper.make_node("Transpose", ["hit"], ["hit_t"], perm=[1, 0]),
        helper.make_node("Split", ["hit_t", "ones_e"], [f"hit_{i}" for i in range(traced)],
                         axis=0),
        helper.make_node("Unsqueeze", ["route_w", "two"], ["w3"]),
        helper.make_node("Flatten", ["w3"], ["w_flat"], axis=2),
    ]
    acc = "zeros"
    for i in range(traced):
        n = _namer(i)
        nodes += [
            helper.make_node("Squeeze", [n("hit"), "ax01"], [n("e")]),
            helper.make_node("Gather", ["mask", n("e")], [n("m")], axis=0),
            helper.make_node("Cast", [n("m")], [n("mb")], to=TensorProto.BOOL),
            helper.make_node("NonZero", [n("mb")], [n("nz")]),
            helper.make_node("Transpose", [n("nz")], [n("nz_t")], perm=[1, 0]),
            helper.make_node("Split", [n("nz_t"), "pair"], [n("slot2"), n("tok2")], axis=1),
            helper.make_node("Squeeze", [n("slot2"), "ax1"], [n("slot")]),
            helper.make_node("Squeeze", [n("tok2"), "ax1"], [n("tok")]),
            helper.make_node("Gather", ["x", n("tok")], [n("rows")], axis=0),
        ]
        y = _expert(nodes, inits, n("e"), n("rows"), str(i))
        nodes += [
            helper.make_node("Mul", [n("tok"), "kk"], [n("tk")]),
            helper.make_node("Add", [n("slot"), n("tk")], [n("flat")]),
            helper.make_node("Gather", ["w_flat", n("flat")], [n("wsel")], axis=0),
            helper.make_node("Mul", [y, n("wsel")], [n("upd")]),
            helper.make_node("Unsqueeze", [n("tok"), "ax1"], [n("tok_c")]),
            helper.make_node("Shape", [n("upd")], [n("upd_shape")]),
            helper.make_node("Expand", [n("tok_c"), n("upd_shape")], [n("where")]),
            helper.make_node("ScatterElements", ["zeros", n("where"), n("upd")], [n("sc")],
                             axis=0),
            helper.make_node("Add", [acc, n("sc")], ["out" if i == traced - 1 else n("acc")]),
        ]
        acc = n("acc")
    return _model(nodes, inits)


def every_expert_moe(k: int = 2, seed: int = 1, tail: str = "rows") -> bytes:
    """The older export: a loop over every expert, the mask Equal(idx^T, e) [k, T], the
    weights by GatherND(route_w, (token, slot)), ScatterND(acc, token, ..., add).
    `tail`: "rows" (row-wise), "sum" (a ReduceSum over the expert's rows, added to every
    token: not row-wise, so it keeps the host step)."""
    w = _weights(seed, False)
    nodes: list = []
    inits = _common_inits(w) + [_c("pair", np.array([1, 1], np.int64))]
    _router(nodes, inits, w, k)
    nodes.append(helper.make_node("Transpose", ["idx"], ["idx_t"], perm=[1, 0]))
    acc = "zeros"
    for i in range(E):
        n = _namer(i)
        inits.append(_c(n("id"), np.array(i, np.int64)))
        nodes += [
            helper.make_node("Equal", ["idx_t", n("id")], [n("mb")]),
            helper.make_node("NonZero", [n("mb")], [n("nz")]),
            helper.make_node("Transpose", [n("nz")], [n("nz_t")], perm=[1, 0]),
            helper.make_node("Split", [n("nz_t"), "pair"], [n("slot2"), n("tok2")], axis=1),
            helper.make_node("Squeeze", [n("tok2"), "ax1"], [n("tok")]),
            helper.make_node("Gather", ["x", n("tok")], [n("rows")], axis=0),
            helper.make_node("Concat", [n("tok2"), n("slot2")], [n("ts")], axis=1),
            helper.make_node("GatherND", ["route_w", n("ts")], [n("wsel0")]),
            helper.make_node("Unsqueeze", [n("wsel0"), "ax1"], [n("wsel")]),
        ]
        y = _expert(nodes, inits, n("id"), n("rows"), str(i))
        nodes.append(helper.make_node("Mul", [y, n("wsel")], [n("upd")]))
        upd = n("upd")
        if tail == "sum":
            nodes += [helper.make_node("ReduceSum", [upd, "ax0"], [n("total")], keepdims=1),
                      helper.make_node("Add", [upd, n("total")], [n("upd2")])]
            upd = n("upd2")
        nodes.append(helper.make_node("ScatterND", [acc, n("tok2"), upd],
                                      ["out" if i == E - 1 else n("acc")], reduction="add"))
        acc = n("acc")
    return _model(nodes, inits)


def _feeds(seed: int, bias=None) -> dict:
    rng = np.random.default_rng(seed)
    return {"x": rng.normal(0, 1, (T, H)).astype(np.float32),
            "bias": np.zeros(E, np.float32) if bias is None else np.asarray(bias, np.float32)}


def _ort(model: bytes, feeds: dict) -> np.ndarray:
    sess = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
    return sess.run(["out"], feeds)[0]


def _compile(model: bytes):
    compiled = compile_graph(load_model(model))
    return compiled, LoadedModel(compiled, DEVICE)


def _detail(compiled, name: str) -> str:
    return " | ".join(p.detail for p in compiled.report.passes if p.name == name)


def _nonzero_engines(compiled) -> set[str]:
    return {p.engine for p in compiled.report.placements if p.op_type == "NonZero"}


@pytest.mark.parametrize(("k", "seed", "tie"), [(2, 0, False), (1, 3, False), (2, 5, True)])
def test_hit_list_experts_run_in_one_device_program(k: int, seed: int, tie: bool) -> None:
    model = hit_list_moe(k, seed, tie)
    compiled, loaded = _compile(model)
    assert [p.engine for p in compiled.report.partitions] == ["device"], \
        compiled.report.render()
    assert not _nonzero_engines(compiled)  # every NonZero rewritten away
    detail = _detail(compiled, "bound_expert_selections")
    assert f"{E} expert selections bounded" in detail and "1 counts pinned" in detail
    for s in range(3):
        feeds = _feeds(10 * seed + s)
        want = _ort(model, feeds)  # the traced Split needs every expert hit: these inputs do
        np.testing.assert_allclose(loaded.run(feeds)["out"], want, rtol=1e-5, atol=1e-5)


def _reference(model_seed: int, feeds: dict, k: int, tie: bool = False) -> np.ndarray:
    """The mixture as the eager module computes it, in float64."""
    w = _weights(model_seed, tie)
    x = feeds["x"].astype(np.float64)
    s = x @ w["router"] + feeds["bias"]
    p = np.exp(s - s.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    idx = np.argsort(-p, axis=-1, kind="stable")[:, :k]
    top = np.take_along_axis(p, idx, -1)
    top /= top.sum(-1, keepdims=True)
    out = np.zeros_like(x)
    for t in range(T):
        for j in range(k):
            e = idx[t, j]
            h = x[t] @ w["gate_up"][e].T
            g, u = h[:W], h[W:]
            out[t] += top[t, j] * ((g / (1 + np.exp(-g)) * u) @ w["down"][e].T)
    return out


def test_hit_list_with_an_expert_no_token_picks() -> None:
    """Every token steered to experts 0 and 1: the traced Split of the hit list fails in
    onnxruntime (2 experts hit, 4 parts); the rewritten graph computes what the eager
    module does, the unpicked experts adding nothing."""
    model = hit_list_moe(2, 0)
    feeds = _feeds(7, bias=[40, 40, -40, -40])
    with pytest.raises(Exception, match="Split"):
        _ort(model, feeds)
    _, loaded = _compile(model)
    np.testing.assert_allclose(loaded.run(feeds)["out"], _reference(0, feeds, 2),
                               rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize(("k", "bias"), [
    (2, None),
    (2, [0, 0, 0, -60]),        # expert 3 never picked
    (1, [0, 0, 60, 0]),         # every token picks expert 2, the others get none
    (2, [50, 0, 50, 0]),        # every token picks experts 0 and 2
])
def test_every_expert_loop_matches_onnxruntime(k: int, bias) -> None:
    model = every_expert_moe(k)
    compiled, loaded = _compile(model)
    assert [p.engine for p in compiled.report.partitions] == ["device"], \
        compiled.report.render()
    assert f"{E} expert selections bounded" in _detail(compiled, "bound_expert_selections")
    for s in range(2):
        feeds = _feeds(20 + s, bias)
        np.testing.assert_allclose(loaded.run(feeds)["out"], _ort(model, feeds),
                                   rtol=1e-5, atol=1e-5)


def test_a_tail_that_mixes_rows_keeps_the_host_step() -> None:
    model = every_expert_moe(2, tail="sum")
    compiled, loaded = _compile(model)
    assert _nonzero_engines(compiled) == {"host"}
    assert "ReduceSum" in _detail(compiled, "bound_expert_selections")
    feeds = _feeds(31, [0, 0, 0, -60])
    np.testing.assert_allclose(loaded.run(feeds)["out"], _ort(model, feeds),
                               rtol=1e-5, atol=1e-5)


def test_a_mask_without_an_exclusive_axis_keeps_the_host_step() -> None:
    """NonZero of x > 0 [T, H]: a token appears once per positive feature, so scattering
    by it is not one row per token."""
    nodes = [
        helper.make_node("Greater", ["x", "zero_f"], ["pos"]),
        helper.make_node("NonZero", ["pos"], ["nz"]),
        helper.make_node("Transpose", ["nz"], ["nz_t"], perm=[1, 0]),
        helper.make_node("Split", ["nz_t", "pair"], ["tok2", "col2"], axis=1),
        helper.make_node("Squeeze", ["tok2", "ax1"], ["tok"]),
        helper.make_node("Gather", ["x", "tok"], ["rows"], axis=0),
        helper.make_node("ScatterND", ["zeros", "tok2", "rows"], ["out0"], reduction="add"),
        helper.make_node("Slice", ["out0", "zero1", "width", "last"], ["out_s"]),
        helper.make_node("Add", ["out_s", "bias"], ["out"]),
    ]
    inits = [_c("zero_f", np.array(0, np.float32)), _c("pair", np.array([1, 1], np.int64)),
             _c("ax1", np.array([1], np.int64)), _c("zeros", np.zeros((T, H), np.float32)),
             _c("zero1", np.array([0], np.int64)), _c("width", np.array([E], np.int64)),
             _c("last", np.array([-1], np.int64))]
    model = _model(nodes, inits, "not_moe", E)
    compiled, loaded = _compile(model)
    assert _nonzero_engines(compiled) == {"host"}
    assert "more than one row" in _detail(compiled, "bound_expert_selections")
    feeds = _feeds(41)
    sess = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
    np.testing.assert_allclose(loaded.run(feeds)["out"], sess.run(["out"], feeds)[0],
                               rtol=1e-5, atol=1e-5)


def test_above_the_row_bound_the_selection_stays_on_the_host(monkeypatch) -> None:
    monkeypatch.setattr(expert_rows, "MAX_ROWS", T - 1)
    model = every_expert_moe(2)
    compiled, loaded = _compile(model)
    assert _nonzero_engines(compiled) == {"host"}
    assert f"{T} token rows is more than {T - 1}" in _detail(compiled, "bound_expert_selections")
    feeds = _feeds(51)
    np.testing.assert_allclose(loaded.run(feeds)["out"], _ort(model, feeds),
                               rtol=1e-5, atol=1e-5)


def test_the_fused_gate_and_up_weight_is_two_products_without_slices() -> None:
    compiled, _ = _compile(every_expert_moe(2))
    ops_ = [p.op_type for p in compiled.report.placements]
    assert "Slice" not in ops_, compiled.report.render()


@pytest.mark.parametrize("axis", [-1, 0, 1])
def test_one_hot_runs_on_the_device_as_equal_and_where(axis: int) -> None:
    ids = np.array([[0, 3, -1], [4, -5, 2]], np.int64)  # -1 counts from the end; 4, -5 off
    graph = helper.make_graph(
        [helper.make_node("OneHot", ["ids", "depth", "values"], ["out"], axis=axis)],
        "one_hot", [helper.make_tensor_value_info("ids", TensorProto.INT64, [2, 3])],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, None)],
        [_c("depth", np.array(4, np.int64)), _c("values", np.array([-0.5, 2.0], np.float32))])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    compiled = compile_graph(load_model(model.SerializeToString()))
    assert [p.engine for p in compiled.report.partitions] == ["device"], \
        compiled.report.render()
    got = LoadedModel(compiled, DEVICE).run({"ids": ids})["out"]
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    np.testing.assert_array_equal(got, sess.run(["out"], {"ids": ids})[0])


@pytest.mark.parametrize("other", ["rows", "scalar", "column"])
def test_a_per_row_mask_selects_whole_rows(other: str) -> None:
    """The bounded scatter's Where([T, 1] mask, updates, target): each row one copy or fill
    (kernels_binary.cc), for a full, a scalar and a strided other side."""
    from tests.unit.test_runtime import load_op
    rng = np.random.default_rng(3)
    keep = rng.random((64, 1)) < 0.5
    x = rng.normal(size=(64, 300)).astype(np.float32)
    y = {"rows": rng.normal(size=(64, 300)), "scalar": np.array(-2.0),
         "column": rng.normal(size=(1, 300))}[other].astype(np.float32)
    m, feeds = load_op("Where", [keep, x, y], [64, 300])
    np.testing.assert_array_equal(m.execute(feeds)[0], np.where(keep, x, y))
    assert m.profile()[0]["impl"] == "row select"
    full = rng.random((64, 300)) < 0.5  # a mask of its own per element: the element loop
    m, feeds = load_op("Where", [full, x, y], [64, 300])
    np.testing.assert_array_equal(m.execute(feeds)[0], np.where(full, x, y))
    assert m.profile()[0]["impl"] == ""


def test_an_expand_to_its_own_shape_is_no_copy() -> None:
    """transformers' experts expand each scaled row block to its own shape before the
    index_add_: no task."""
    graph = helper.make_graph(
        [helper.make_node("Expand", ["x", "shape"], ["e"]),
         helper.make_node("Relu", ["e"], ["out"])], "expand",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [T, H])],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, [T, H])],
        [_c("shape", np.array([1, H], np.int64))])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    compiled, loaded = _compile(model.SerializeToString())
    assert [p.op_type for p in compiled.report.placements] == ["Relu"]
    x = _feeds(61)["x"]
    np.testing.assert_array_equal(loaded.run({"x": x})["out"], np.maximum(x, 0))


def test_a_hit_list_traced_shorter_than_the_experts_stays_a_host_step() -> None:
    """Three parts for four experts: the list cannot be pinned (four can be hit), so its
    NonZero stays on the host; each expert's selection is still bounded on the device, and
    the runs the traced graph takes (exactly three experts hit) match onnxruntime."""
    model = hit_list_moe(2, 0, traced=E - 1)
    compiled, loaded = _compile(model)
    assert _nonzero_engines(compiled) == {"host"}
    detail = _detail(compiled, "bound_expert_selections")
    assert f"{E - 1} expert selections bounded" in detail and "0 counts pinned" in detail
    assert [p.engine for p in compiled.report.partitions].count("device") >= 2
    for s in range(2):
        feeds = _feeds(70 + s, bias=[0, 0, 0, -60])  # expert 3 never picked
        np.testing.assert_allclose(loaded.run(feeds)["out"], _ort(model, feeds),
                                   rtol=1e-5, atol=1e-5)


# ---- products over the picked rows only (optimize/routed_rows.py, kernels_matmul.cc) ----
MANY = 256  # tokens: enough for the MatMul kernel's row blocks (an eighth of the rows each)


def _expert_tasks(loaded) -> list[dict]:
    return [t for nat in loaded.natives.values() for t in nat.profile()
            if t["op"] == "MatMul"
            and ("row blocks" in t["impl"] or "counted rows" in t["impl"])]


@pytest.mark.parametrize(("form", "k", "bias"), [
    ("every", 2, None),
    ("every", 1, [0, 0, 60, 0]),         # one expert gets every token: its whole product
    ("every", 2, [0, 0, 0, -60]),        # one expert gets none: no block runs for it
    ("every", 1, [0.5, 0, 0, -60]),
    ("hit_list", 2, None),
    ("hit_list", 2, [40, 40, -40, -40]),  # two experts hit of the four traced
])
def test_each_expert_multiplies_only_the_rows_routed_to_it(monkeypatch, form, k, bias) -> None:
    """The selection lists the picked tokens first and tags its products with their count;
    the device's MatMul then runs only the blocks of rows the count covers (an expert
    given a quarter of the tokens: a quarter of the dense product). Each answer is held to
    the eager module's, whatever share of the tokens each expert gets."""
    monkeypatch.setattr(sys.modules[__name__], "T", MANY)
    model = every_expert_moe(k, seed=2) if form == "every" else hit_list_moe(k, seed=2)
    compiled, loaded = _compile(model)
    assert [p.engine for p in compiled.report.partitions] == ["device"], \
        compiled.report.render()
    products = 3 * E  # gate, up (the fused weight's two column products) and down
    assert f"{products} of {products} routed products" in _detail(compiled, "limit_routed_rows")
    assert len(_expert_tasks(loaded)) == products
    # the gated product and the routing weight (one factor a row) are the products' own
    assert sum("MatMul+Mul" in f for f in compiled.report.fusions) == 2 * E
    for s in range(2):
        feeds = _feeds(80 + s, bias)
        np.testing.assert_allclose(loaded.run(feeds)["out"], _reference(2, feeds, k),
                                   rtol=1e-4, atol=1e-5)



@pytest.mark.parametrize("where", ["beside", "other partition", "host", "gone"])
def test_a_product_gets_its_count_only_beside_it(where: str) -> None:
    """The count becomes the tagged MatMul's last input only where both are device nodes of
    one partition; anywhere else (or once the count's node is gone) the product stays whole,
    which is the same answer."""
    g = Graph("g")
    flags = g.add_input("flags", TensorMeta(DType.INT64, (64,)))
    x = g.add_input("x", TensorMeta(DType.FLOAT32, (64, 8)))
    count = g.add_node("ReduceSum", [flags, g.add_constant(None, np.array([0], np.int64))],
                       attrs={"keepdims": 1}, name="count")
    count.outputs[0].meta = TensorMeta(DType.INT64, (1,))
    mm = g.add_node("MatMul", [x, g.add_constant(None, np.ones((8, 4), np.float32))],
                    attrs={"_rows_count": "count" if where != "gone" else "lost",
                           "_rows_unit": 1}, name="expert")
    for node in (count, mm):
        node.meta.engine, node.meta.partition = Engine.DEVICE, 0
    if where == "other partition":
        count.meta.partition = 1
    elif where == "host":
        count.meta.engine = Engine.HOST
    result = limit_routed_rows(g)
    if where == "beside":
        assert result.changed and mm.attrs["_rows_input"] == 2
        assert mm.input(2) is count.outputs[0]
    else:
        assert not result.changed and "_rows_input" not in mm.attrs and len(mm.inputs) == 2
    assert "of 1 routed products" in result.detail
