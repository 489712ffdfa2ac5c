"""Elementwise regions fused into one EltwiseGraph kernel (optimize/fusion/eltwise_graph.py)."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from graphengine.engine.importers import load_model
from graphengine.engine.ir import Engine
from graphengine.engine.optimize.fusion import eltwise_graph
from graphengine.engine.optimize.fusion.eltwise_graph import _without_cycles, find_regions
from graphengine.engine.pipeline import CompileOptions, compile_graph
from graphengine.engine.prepare.infer_shapes import infer_shapes
from graphengine.engine.runtime import LoadedModel

RNG = np.random.default_rng(31)


def _model(nodes, inputs, outputs, inits=None):
    graph = helper.make_graph(
        nodes, "region",
        [helper.make_tensor_value_info(k, TensorProto.FLOAT, s) for k, s in inputs.items()],
        [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in outputs],
        initializer=[numpy_helper.from_array(np.asarray(v, np.float32), k)
                     for k, v in (inits or {}).items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def _run(model, inputs, scale=1.0, atol=1e-6):
    compiled = compile_graph(load_model(model), CompileOptions(lint=True))
    feeds = {k: (RNG.standard_normal(s) * scale).astype(np.float32) for k, s in inputs.items()}
    got = LoadedModel(compiled).execute(feeds)
    want = ort.InferenceSession(model.SerializeToString(), providers=[
        "CPUExecutionProvider"]).run(None, feeds)
    for g, w in zip(got.values(), want):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=atol)
    return compiled.report.fusions, [p.op_type for p in compiled.report.placements]


def _wkv_steps(steps: int) -> list:
    """RWKV's WKV recurrence unrolled: per step t, inputs k_t and v_t, a running max p, a
    numerator a and denominator b (each read by several ops), an output y_t."""
    nodes = []
    p, a, b = "p0", "a0", "b0"
    for t in range(steps):
        k, v = f"k{t}", f"v{t}"
        nodes += [
            helper.make_node("Add", [k, "u"], [f"ku{t}"]),
            helper.make_node("Max", [p, f"ku{t}"], [f"q{t}"]),
            helper.make_node("Sub", [p, f"q{t}"], [f"d1_{t}"]),
            helper.make_node("Exp", [f"d1_{t}"], [f"e1_{t}"]),
            helper.make_node("Sub", [f"ku{t}", f"q{t}"], [f"d2_{t}"]),
            helper.make_node("Exp", [f"d2_{t}"], [f"e2_{t}"]),
            helper.make_node("Mul", [f"e1_{t}", a], [f"n1_{t}"]),
            helper.make_node("Mul", [f"e2_{t}", v], [f"n2_{t}"]),
            helper.make_node("Add", [f"n1_{t}", f"n2_{t}"], [f"num{t}"]),
            helper.make_node("Mul", [f"e1_{t}", b], [f"m1_{t}"]),
            helper.make_node("Add", [f"m1_{t}", f"e2_{t}"], [f"den{t}"]),
            helper.make_node("Div", [f"num{t}", f"den{t}"], [f"y{t}"]),
            # the state update: decay w, then the same normalised sums
            helper.make_node("Add", [p, "w"], [f"pw{t}"]),
            helper.make_node("Max", [f"pw{t}", k], [f"p{t + 1}"]),
            helper.make_node("Sub", [f"pw{t}", f"p{t + 1}"], [f"g1_{t}"]),
            helper.make_node("Exp", [f"g1_{t}"], [f"f1_{t}"]),
            helper.make_node("Sub", [k, f"p{t + 1}"], [f"g2_{t}"]),
            helper.make_node("Exp", [f"g2_{t}"], [f"f2_{t}"]),
            helper.make_node("Mul", [f"f1_{t}", a], [f"o1_{t}"]),
            helper.make_node("Mul", [f"f2_{t}", v], [f"o2_{t}"]),
            helper.make_node("Add", [f"o1_{t}", f"o2_{t}"], [f"a{t + 1}"]),
            helper.make_node("Mul", [f"f1_{t}", b], [f"r1_{t}"]),
            helper.make_node("Add", [f"r1_{t}", f"f2_{t}"], [f"b{t + 1}"]),
        ]
        p, a, b = f"p{t + 1}", f"a{t + 1}", f"b{t + 1}"
    return nodes


@pytest.mark.parametrize("batch", [1, 3])
def test_unrolled_recurrence_is_one_kernel(batch):
    steps, c = 4, 40
    inputs = {"p0": [batch, c], "a0": [batch, c], "b0": [batch, c]}
    inputs.update({f"{n}{t}": [batch, c] for t in range(steps) for n in ("k", "v")})
    nodes = _wkv_steps(steps)
    # a and b start positive (as the recurrence's sums)
    nodes = [helper.make_node("Exp", ["a0"], ["ea0"]), helper.make_node("Exp", ["b0"], ["eb0"])] \
        + [helper.make_node(n.op_type, [{"a0": "ea0", "b0": "eb0"}.get(i, i) for i in n.input],
                            list(n.output)) for n in nodes]
    outputs = [f"y{t}" for t in range(steps)] + [f"p{steps}"]
    fusions, ops = _run(_model(nodes, inputs, outputs, {"u": RNG.standard_normal(c),
                                                        "w": -np.exp(RNG.standard_normal(c))}),
                        inputs)
    assert ops == ["EltwiseGraph"], ops
    # every live node (the last step's unread state updates are dead code), the 2 x steps
    # inputs, p0, a0, b0, u, w; the outputs y_t and the final max
    live = len(nodes) - 9
    assert fusions[0].startswith(f"EltwiseGraph({live} ops, {2 * steps + 5} inputs, "
                                 f"{steps + 1} outputs)"), fusions


def test_a_path_through_another_kernel_splits_the_region():
    """a = x * 2 feeds a MatMul whose result joins a's own branch again: one kernel for both
    ends would both feed the MatMul and read it (a cycle). The region is cut at the path."""
    nodes = [helper.make_node("Mul", ["x", "two"], ["a"]),
             helper.make_node("Exp", ["a"], ["e"]),
             helper.make_node("MatMul", ["e", "w"], ["m"]),
             helper.make_node("Add", ["a", "m"], ["s"]),
             helper.make_node("Max", ["s", "a"], ["y"])]
    inputs = {"x": [2, 8]}
    model = _model(nodes, inputs, ["y"], {"two": 2.0, "w": RNG.standard_normal((8, 8))})
    graph = load_model(model)
    fusions, ops = _run(model, inputs)
    assert "MatMul" in ops and ops.count("EltwiseGraph") + ops.count("EltwiseChain") <= 2
    # every region found is convex: no member is both upstream and downstream of the MatMul
    for region in find_regions(graph):
        names = {n.op_type for n in region}
        assert not ({"Exp", "Add"} <= names and "Mul" in names), names


def test_branches_meeting_on_broadcast_inputs_match_onnxruntime():
    """A softcapped gate: tanh(x / cap) * cap read twice, a per-row [N, 1] and a per-column
    [C] input, two outputs."""
    nodes = [helper.make_node("Div", ["x", "cap"], ["d"]),
             helper.make_node("Tanh", ["d"], ["t"]),
             helper.make_node("Mul", ["t", "cap"], ["s"]),
             helper.make_node("Sigmoid", ["s"], ["g"]),
             helper.make_node("Mul", ["s", "row"], ["r"]),
             helper.make_node("Add", ["r", "col"], ["c"]),
             helper.make_node("Mul", ["g", "c"], ["y"]),
             helper.make_node("Min", ["s", "y"], ["z"])]
    inputs = {"x": [5, 33], "row": [5, 1]}
    fusions, ops = _run(_model(nodes, inputs, ["y", "z"], {"cap": 3.0,
                                                          "col": RNG.standard_normal(33)}),
                        inputs, scale=4.0)
    assert ops == ["EltwiseGraph"], ops
    assert "2 outputs" in fusions[0]


def test_a_plain_chain_stays_the_chain_rows():
    nodes = [helper.make_node("Mul", ["x", "two"], ["a"]),
             helper.make_node("Tanh", ["a"], ["b"]),
             helper.make_node("Add", ["b", "x2"], ["y"])]
    inputs = {"x": [4, 16], "x2": [4, 16]}
    fusions, ops = _run(_model(nodes, inputs, ["y"], {"two": 2.0}), inputs)
    assert ops == ["EltwiseChain"], ops


def test_a_four_d_region_with_two_outputs_is_left_alone():
    """Among convolutions the layout pass places a fused node by its one output: a 4-D region
    read from outside at two points is not fused (each op keeps the region's format)."""
    nodes = [helper.make_node("Conv", ["x", "k"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("Sigmoid", ["c"], ["s"]),
             helper.make_node("Mul", ["s", "c"], ["m"]),
             helper.make_node("Max", ["m", "c"], ["q"]),
             helper.make_node("Conv", ["s", "k"], ["y1"], pads=[1, 1, 1, 1]),
             helper.make_node("Conv", ["q", "k"], ["y2"], pads=[1, 1, 1, 1])]
    inputs = {"x": [1, 16, 8, 8]}
    fusions, ops = _run(_model(nodes, inputs, ["y1", "y2"],
                               {"k": RNG.standard_normal((16, 16, 3, 3)) * 0.1}), inputs)
    assert "EltwiseGraph" not in ops, ops


def test_regions_stay_on_one_device_partition():
    """A host-only op between two elementwise ops of one value splits the device partition:
    no region crosses it."""
    nodes = [helper.make_node("Exp", ["x"], ["e"]),
             helper.make_node("Atan", ["e"], ["t"]),  # no device kernel
             helper.make_node("Mul", ["t", "e"], ["m"]),
             helper.make_node("Max", ["m", "e"], ["y"])]
    inputs = {"x": [3, 7]}
    model = _model(nodes, inputs, ["y"])
    compiled = compile_graph(load_model(model), CompileOptions(lint=True))
    engines = {p.op_type: p.engine for p in compiled.report.placements}
    assert engines["Atan"] == "host", engines
    fusions, _ = _run(model, inputs)
    assert all("EltwiseGraph(3" not in f and "EltwiseGraph(4" not in f for f in fusions), fusions


def test_two_regions_that_would_need_each_other_are_not_both_fused():
    """A = {a1, a2}, B = {b1, b2} with a1 -> b2 and b1 -> a2: each convex, but fused they
    would read each other. One stays unfused; a region apart from the pair is kept."""
    nodes = [helper.make_node("Exp", ["x"], ["a1"]),
             helper.make_node("Exp", ["y"], ["b1"]),
             helper.make_node("Add", ["a1", "b1"], ["a2"]),
             helper.make_node("Mul", ["b1", "a1"], ["b2"]),
             helper.make_node("Neg", ["z"], ["c1"]),
             helper.make_node("Tanh", ["c1"], ["c2"])]
    model = _model(nodes, {"x": [2, 3], "y": [2, 3], "z": [2, 3]}, ["a2", "b2", "c2"])
    graph = load_model(model)
    infer_shapes(graph)
    by = {n.outputs[0].name: n for n in graph.nodes}
    pair = [[by["a1"], by["a2"]], [by["b1"], by["b2"]]]
    apart = [by["c1"], by["c2"]]
    kept = _without_cycles(graph, pair + [apart])
    assert len(kept) == 2 and apart in kept and (pair[0] in kept) != (pair[1] in kept)
    assert _without_cycles(graph, [pair[0], apart]) == [pair[0], apart]


def test_a_region_reading_another_regions_output():
    """Region A on [2, 8] feeds region B on [3, 2, 8] (a broadcast input): fusing A replaces
    the value B's member reads, and B's node must read A's fused output, not the removed one."""
    nodes = [helper.make_node("Exp", ["x"], ["a"]),
             helper.make_node("Mul", ["a", "a"], ["a2"]),
             helper.make_node("Add", ["y", "a2"], ["b"]),
             helper.make_node("Mul", ["b", "b"], ["c"]),
             helper.make_node("Sub", ["c", "b"], ["d"])]
    inputs = {"x": [2, 8], "y": [3, 2, 8]}
    fusions, ops = _run(_model(nodes, inputs, ["d"]), inputs)
    assert ops == ["EltwiseGraph", "EltwiseGraph"], ops


@pytest.mark.parametrize("op", ["Softplus", "Mish", "Sign", "Round", "Softsign", "Selu", "Celu",
                                "ThresholdedRelu", "Shrink"])
def test_region_only_unary_ops_run_on_the_device(op):
    """Mamba's dt = softplus(x), YOLOv4's Mish, JetMoE's Sign and the other unary ops oneDNN
    has no eltwise for: no longer a host op cutting the device program; alone a
    one-instruction EltwiseGraph, in a region one instruction of it. Values from -60
    (softplus ~1e-26) to 60 (no overflow)."""
    nodes = [helper.make_node("Mul", ["x", "k"], ["a"]),
             helper.make_node(op, ["a"], ["s"]),
             helper.make_node("Mul", ["s", "a"], ["y"])]
    inputs = {"x": [4, 50]}
    model = _model(nodes, inputs, ["y", "s"], {"k": 15.0})
    model.opset_import[0].version = 18  # Mish
    fusions, ops = _run(model, inputs, scale=4.0)
    assert ops == ["EltwiseGraph"], ops


def test_coordinate_attention_scales_are_one_region_among_convolutions():
    """x * a_w * a_h with a_w [N, C, 1, W] and a_h [N, C, H, 1] between convolutions: each
    Mul reads a broadcast the layout keeps plain, so fusing them makes nothing plain that was
    not: one EltwiseGraph (a_w is two runs of the domain's axes, C and W)."""
    c = 16
    nodes = [helper.make_node("Conv", ["x", "k"], ["f"], pads=[1, 1, 1, 1]),
             helper.make_node("ReduceMean", ["f"], ["mh"], axes=[3]),
             helper.make_node("ReduceMean", ["f"], ["mw"], axes=[2]),
             helper.make_node("Sigmoid", ["mh"], ["ah"]),
             helper.make_node("Sigmoid", ["mw"], ["aw"]),
             helper.make_node("Mul", ["f", "aw"], ["g"]),
             helper.make_node("Mul", ["g", "ah"], ["h"]),
             helper.make_node("Conv", ["h", "k"], ["y"], pads=[1, 1, 1, 1])]
    inputs = {"x": [2, c, 9, 7]}
    model = _model(nodes, inputs, ["y"], {"k": RNG.standard_normal((c, c, 3, 3)) * 0.1})
    fusions, ops = _run(model, inputs)
    assert ops.count("EltwiseGraph") == 1 and "Mul" not in ops, ops
    assert any(f.startswith("EltwiseGraph(2 ops, 3 inputs, 1 outputs)") for f in fusions), fusions


def _convex_by_search(region) -> bool:
    """No path leaves the region and comes back: from each member's outside readers, search
    forward; reaching a member is a cycle once fused."""
    members = set(region)
    seen, stack = set(), [u for n in region for u in n.outputs[0].users if u not in members]
    while stack:
        node = stack.pop()
        if node in members:
            return False
        if node in seen:
            continue
        seen.add(node)
        stack += [u for out in node.outputs for u in out.users]
    return True


@pytest.mark.parametrize("seed", range(12))
def test_random_graphs_give_convex_regions_that_compile(seed, monkeypatch):
    """Random DAGs of elementwise ops and MatMuls (no elementwise kernel: paths out of a
    region and back) on one shape: every region the growth makes is convex by a plain search
    (before the contracted graph's cycle check, which would also drop a non-convex one), and
    the compiled graph matches ONNX Runtime."""
    rng = np.random.default_rng(seed)
    values, nodes = ["x", "y"], []
    for k in range(40):
        op = rng.choice(["Add", "Mul", "Max", "Sub", "Tanh", "Sigmoid", "MatMul", "MatMul"])
        a = values[int(rng.integers(max(0, len(values) - 8), len(values)))]
        out = f"v{k}"
        if op in ("Tanh", "Sigmoid"):
            nodes.append(helper.make_node(op, [a], [out]))
        elif op == "MatMul":
            nodes.append(helper.make_node(op, [a, "w"], [out]))
        else:
            b = values[int(rng.integers(0, len(values)))]
            nodes.append(helper.make_node(op, [a, b], [out]))
        values.append(out)
    used = {i for n in nodes for i in n.input}
    outputs = [v for v in values[2:] if v not in used]
    inputs = {"x": [3, 6], "y": [3, 6]}
    model = _model(nodes, inputs, outputs, {"w": RNG.standard_normal((6, 6)) * 0.3})
    graph = load_model(model)
    infer_shapes(graph)
    for n in graph.nodes:
        n.meta.engine, n.meta.partition = Engine.DEVICE, 0
    with monkeypatch.context() as m:
        m.setattr(eltwise_graph, "_without_cycles", lambda graph, regions: regions)
        regions = find_regions(graph)
    assert regions
    for region in regions:
        assert _convex_by_search(region), [n.name for n in region]
    _run(model, inputs, scale=0.5)


def test_signal_ops_around_one_d_convolutions_keep_their_layout():
    """A 1-D convolution runs as the 2-D one of the view [N, C, 1, L], and the layout keeps
    the signal [N, C, L] channels-last around it: rank 3 is a convolution rank there, so a
    statistics pooling's x - mean (a per-channel operand) and its square are a region the
    layout keeps channels-last (the kernel reads the mean plain), not a plain region with a
    conversion before it: one TransData into the convolutions, one out to the plain mean."""
    nodes = [helper.make_node("Conv", ["x", "k"], ["c"], pads=[1, 1]),
             helper.make_node("Relu", ["c"], ["r"]),
             helper.make_node("Conv", ["r", "k"], ["f"], pads=[1, 1]),
             helper.make_node("ReduceMean", ["f"], ["m"], axes=[2]),
             helper.make_node("Sub", ["f", "m"], ["d"]),
             helper.make_node("Mul", ["d", "d"], ["q"]),
             helper.make_node("ReduceMean", ["q"], ["y"], axes=[2], keepdims=0)]
    inputs = {"x": [1, 16, 40]}
    model = _model(nodes, inputs, ["y"], {"k": RNG.standard_normal((16, 16, 3)) * 0.2})
    fusions, ops = _run(model, inputs)
    assert ops.count("TransData") == 2 and "Sub" not in ops, ops
    assert ops.index("EltwiseGraph") < ops.index("TransData", ops.index("Conv")), ops


@pytest.mark.parametrize("c,batch", [(12, 2), (32, 2), (24, 1)])
def test_dynamic_shift_max_is_one_region_in_the_convolutions_format(c, batch):
    """MicroNet's activation: max(x * a1 + r * b1, x * a2 + r * b2), r the channels rolled
    by a Concat of two Slices, a1..b2 [N, C, 1, 1] computed from a pooled branch. The four
    per-channel products join the sums and the max in one region the layout keeps in the
    convolutions' format (the kernel reads the coefficients plain): no Mul left, no
    conversion around the region."""
    h = c // 2
    nodes = [helper.make_node("Conv", ["x", "k"], ["f"], pads=[1, 1, 1, 1]),
             helper.make_node("Conv", ["f", "dw"], ["g"], pads=[1, 1, 1, 1], group=c),
             helper.make_node("Slice", ["g", "s0", "s1", "ax"], ["ga"]),
             helper.make_node("Slice", ["g", "s1", "s2", "ax"], ["gb"]),
             helper.make_node("Concat", ["gb", "ga"], ["r"], axis=1),
             helper.make_node("GlobalAveragePool", ["g"], ["p"]),
             helper.make_node("Conv", ["p", "fc"], ["co"]),
             helper.make_node("Sigmoid", ["co"], ["cs"]),
             helper.make_node("Split", ["cs", "parts"], ["a1", "b1", "a2", "b2"], axis=1),
             helper.make_node("Mul", ["g", "a1"], ["m1"]),
             helper.make_node("Mul", ["r", "b1"], ["m2"]),
             helper.make_node("Add", ["m1", "m2"], ["y1"]),
             helper.make_node("Mul", ["g", "a2"], ["m3"]),
             helper.make_node("Mul", ["r", "b2"], ["m4"]),
             helper.make_node("Add", ["m3", "m4"], ["y2"]),
             helper.make_node("Max", ["y1", "y2"], ["z"]),
             helper.make_node("Conv", ["z", "k2"], ["y"])]
    inputs = {"x": [batch, c, 9, 7]}
    inits = {"k": RNG.standard_normal((c, c, 3, 3)) * 0.1,
             "dw": RNG.standard_normal((c, 1, 3, 3)) * 0.3,
             "fc": RNG.standard_normal((4 * c, c, 1, 1)) * 0.3,
             "k2": RNG.standard_normal((c, c, 1, 1)) * 0.3}
    model = _model(nodes, inputs, ["y"], inits)
    model.graph.initializer.extend(
        numpy_helper.from_array(np.asarray(v, np.int64), k)
        for k, v in {"s0": [0], "s1": [h], "s2": [c], "ax": [1], "parts": [c] * 4}.items())
    fusions, ops = _run(model, inputs, atol=1e-5)  # three convolutions' sums
    assert "Mul" not in ops and ops.count("EltwiseGraph") == 1, ops
    assert any(f.startswith("EltwiseGraph(7 ops, 6 inputs, 1 outputs)") for f in fusions), \
        fusions
    region = ops.index("EltwiseGraph")
    assert "TransData" not in ops[region - 1:region + 2], ops


@pytest.mark.parametrize("fmt", ["nhwc", "nChw16c"])
def test_a_snake_activation_between_convolutions_is_one_region(fmt):
    """Snake, x + sin(a x)^2 / a with a per channel (an audio codec's activation between its
    1-D convolutions): Mul, Sin, Pow and the rest one EltwiseGraph, the sine the Sin kernel's
    own (float64 inside) over the region's registers; arguments up to ~1e3 and a cosine
    branch (a Fourier feature) read from the same value."""
    c = 16
    alpha = RNG.uniform(0.5, 300.0, (1, c, 1)).astype(np.float32)
    nodes = [helper.make_node("Conv", ["x", "w1"], ["h"], pads=[1, 1]),
             helper.make_node("Mul", ["h", "alpha"], ["ax"]),
             helper.make_node("Sin", ["ax"], ["s"]),
             helper.make_node("Pow", ["s", "two"], ["s2"]),
             helper.make_node("Add", ["alpha", "eps"], ["ae"]),
             helper.make_node("Reciprocal", ["ae"], ["inv"]),
             helper.make_node("Mul", ["s2", "inv"], ["t"]),
             helper.make_node("Add", ["h", "t"], ["snake"]),
             helper.make_node("Cos", ["ax"], ["co"]),
             helper.make_node("Add", ["snake", "co"], ["z"]),
             helper.make_node("Conv", ["z", "w2"], ["y"], pads=[1, 1])]
    inits = {"w1": RNG.standard_normal((c, 4, 3)) * 0.5, "w2": RNG.standard_normal((8, c, 3)),
             "alpha": alpha, "two": np.float32(2.0), "eps": np.float32(1e-9)}
    model = _model(nodes, {"x": [2, 4, 300]}, ["y"], inits)
    compiled = compile_graph(load_model(model), CompileOptions(lint=True, layout_format=fmt))
    x = RNG.standard_normal((2, 4, 300)).astype(np.float32)
    got = LoadedModel(compiled).execute({"x": x})["y"]
    want = ort.InferenceSession(model.SerializeToString(),
                                providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-3)
    ops = [p.op_type for p in compiled.report.placements]
    assert ops.count("EltwiseGraph") == 1 and not {"Sin", "Cos", "Mul", "Pow"} & set(ops), ops
