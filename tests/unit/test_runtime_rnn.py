"""The runtime's RNN / GRU / LSTM kernel against ONNX Runtime: directions, layouts,
sequence lengths, initial states, peepholes, clip, input_forget, linear_before_reset; the
batch's rows stepping together (one product per step against R packed in panels); other
activations stay on the host."""

import copy
import os

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from graphengine import _runtime as rt
from graphengine.engine.importers import load_model
from graphengine.engine.ops.rnn import run_rnn
from graphengine.engine.pipeline import CompileOptions, compile_graph
from graphengine.engine.runtime import LoadedModel

RNG = np.random.default_rng(21)
GATES = {"RNN": 1, "GRU": 3, "LSTM": 4}


def _model(op, seq=7, batch=3, size=10, hidden=12, direction="forward", layout=0,
           lens=False, states=False, peep=False, weights_input=False, **attrs):
    dirs = 2 if direction == "bidirectional" else 1
    g = GATES[op]
    w = (RNG.standard_normal((dirs, g * hidden, size)) * 0.4).astype(np.float32)
    r = (RNG.standard_normal((dirs, g * hidden, hidden)) * 0.4).astype(np.float32)
    b = (RNG.standard_normal((dirs, 2 * g * hidden)) * 0.2).astype(np.float32)
    x_shape = [batch, seq, size] if layout else [seq, batch, size]
    state = [batch, dirs, hidden] if layout else [dirs, batch, hidden]
    inits = [numpy_helper.from_array(b, "B")]
    inputs = ["x", "W", "R", "B"]
    feeds = {"x": RNG.standard_normal(x_shape).astype(np.float32)}
    graph_inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, x_shape)]
    for name, value in (("W", w), ("R", r)):
        if weights_input:  # not constants: the kernel packs them on every run
            feeds[name] = value
            graph_inputs.append(helper.make_tensor_value_info(name, TensorProto.FLOAT, value.shape))
        else:
            inits.append(numpy_helper.from_array(value, name))
    if lens:
        # every length from 0 to seq among the rows when there are enough of them
        n = RNG.permutation(np.resize(np.arange(seq + 1), batch)) if lens == "all" else \
            RNG.integers(0, seq + 1, batch)
        inits.append(numpy_helper.from_array(n.astype(np.int32), "lens"))
    inputs.append("lens" if lens else "")
    if states:
        for name in ("h0", "c0") if op == "LSTM" else ("h0",):
            feeds[name] = RNG.standard_normal(state).astype(np.float32)
            graph_inputs.append(helper.make_tensor_value_info(name, TensorProto.FLOAT, state))
    inputs += ["h0" if states else ""]
    if op == "LSTM":
        inputs += ["c0" if states else ""]
        if peep:
            inits.append(numpy_helper.from_array(
                (RNG.standard_normal((dirs, 3 * hidden)) * 0.3).astype(np.float32), "P"))
        inputs += ["P" if peep else ""]
    while inputs[-1] == "":
        inputs.pop()
    outs = ["y", "yh", "yc"][: 3 if op == "LSTM" else 2]
    node = helper.make_node(op, inputs, outs, hidden_size=hidden, direction=direction,
                            layout=layout, **attrs)
    graph = helper.make_graph([node], "rnn", graph_inputs,
                              [helper.make_tensor_value_info(o, TensorProto.FLOAT, None)
                               for o in outs], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)],
                             ir_version=8), feeds


def _ort(model, feeds):
    """ONNX Runtime's outputs; it runs layout 0 only, so a layout-1 model runs as its layout-0
    twin on transposed inputs, its outputs transposed back."""
    node = model.graph.node[0]
    layout = next((a.i for a in node.attribute if a.name == "layout"), 0)
    if layout:
        model = copy.deepcopy(model)
        for a in model.graph.node[0].attribute:
            if a.name == "layout":
                a.i = 0
        for v in model.graph.input:
            dims = v.type.tensor_type.shape.dim
            first = dims[0].dim_value
            dims[0].dim_value = dims[1].dim_value
            dims[1].dim_value = first
        feeds = {k: np.ascontiguousarray(np.swapaxes(v, 0, 1)) for k, v in feeds.items()}
    outs = ort.InferenceSession(model.SerializeToString(), providers=[
        "CPUExecutionProvider"]).run(None, feeds)
    if layout:
        outs = [np.transpose(outs[0], (2, 0, 1, 3))] + [np.swapaxes(o, 0, 1) for o in outs[1:]]
    return outs


def _check(model, feeds, device=True, threads=None):
    compiled = compile_graph(load_model(model), CompileOptions(lint=True))
    engines = {p.engine for p in compiled.report.placements}
    assert engines == ({"device"} if device else {"host"}), compiled.report.render()
    loaded = LoadedModel(compiled, rt.Device(threads=threads) if threads else None)
    got = loaded.execute(feeds)
    for out, ref in zip(compiled.outputs, _ort(model, feeds)):
        np.testing.assert_allclose(got[out.name], ref, rtol=1e-4, atol=2e-5, err_msg=out.name)
    return loaded, got


def _ran_panels(loaded) -> bool:
    """Whether the step-batched kernel ran (its profile's implementation name)."""
    return any(t["impl"].startswith("rnn panels")
               for native in loaded.natives.values() for t in native.profile())


def _reference(model, feeds):
    """The numpy reference (engine/ops/rnn.py) on the model's own tensors."""
    node = model.graph.node[0]
    values = {**{t.name: numpy_helper.to_array(t) for t in model.graph.initializer}, **feeds}
    attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    attrs["direction"] = attrs.get("direction", b"forward").decode()
    attrs.setdefault("layout", 0)
    attrs.setdefault("input_forget", 0)
    attrs.setdefault("linear_before_reset", 0)
    return run_rnn(node.op_type, [values.get(n) if n else None for n in node.input], attrs)


@pytest.mark.parametrize("op", ["RNN", "GRU", "LSTM"])
@pytest.mark.parametrize("direction", ["forward", "reverse", "bidirectional"])
@pytest.mark.parametrize("layout", [0, 1])
def test_recurrent_layers_run_on_the_device(op, direction, layout):
    _check(*_model(op, direction=direction, layout=layout, lens=True, states=True))


@pytest.mark.parametrize("op,attrs", [("RNN", {}), ("GRU", {"linear_before_reset": 1}),
                                      ("GRU", {"linear_before_reset": 0}), ("LSTM", {})])
@pytest.mark.parametrize("direction", ["forward", "reverse", "bidirectional"])
@pytest.mark.parametrize("hidden", [12, 16, 40])
def test_a_batch_steps_together_with_rows_of_every_length(op, attrs, direction, hidden):
    """Eight rows of lengths 0..7 (and one of the full 7): the rows of a direction share each
    step's product, the shorter ones frozen once done; hidden sizes below, at and past one
    16-column panel (padded panels for 12 and 40); against ONNX Runtime and the reference."""
    model, feeds = _model(op, seq=7, batch=9, size=20, hidden=hidden, direction=direction,
                          lens="all", states=True, **attrs)
    loaded, got = _check(model, feeds)
    for name, ref in zip(("y", "yh", "yc"), _reference(model, feeds)):
        np.testing.assert_allclose(got[name], ref, rtol=1e-4, atol=2e-5, err_msg=name)
    assert _ran_panels(loaded)


@pytest.mark.parametrize("op", ["GRU", "LSTM"])
def test_weights_computed_at_run_time_are_packed_per_run(op):
    model, feeds = _model(op, batch=5, hidden=20, direction="bidirectional",
                          lens="all", weights_input=True)
    loaded, first = _check(model, feeds)
    assert _ran_panels(loaded)
    feeds["R"] = (feeds["R"] * 0.5).astype(np.float32)  # a second run sees the new weights
    feeds["W"] = (feeds["W"] * 0.5).astype(np.float32)
    _, second = _check(model, feeds)
    assert np.abs(first["y"] - second["y"]).max() > 1e-3


@pytest.mark.parametrize("attrs", [{"clip": 0.5}, {"input_forget": 1}, {"peep": True}])
def test_lstm_options(attrs):
    _check(*_model("LSTM", direction="bidirectional", states=True, **attrs))


@pytest.mark.parametrize("lbr", [0, 1])
def test_gru_reset_before_or_after(lbr):
    _check(*_model("GRU", linear_before_reset=lbr, clip=2.0))


@pytest.mark.parametrize("op", ["GRU", "LSTM"])
def test_an_empty_sequence_without_lengths_has_zero_last_states(op):
    """seq = 0 and no sequence_lens: every row's sequence is empty, so Y_h (and Y_c) are 0,
    not the initial states (the reference's answer, and ONNX Runtime's for a length of 0)."""
    model, feeds = _model(op, seq=0, batch=3, states=True)
    compiled = compile_graph(load_model(model), CompileOptions(lint=True))
    assert {p.engine for p in compiled.report.placements} == {"device"}
    got = LoadedModel(compiled).execute(feeds)
    for name, ref in zip(("y", "yh", "yc"), _reference(model, feeds)):
        assert got[name].shape == ref.shape and not np.any(got[name]), name
        assert not np.any(ref), name


def test_other_activations_stay_on_the_host():
    _check(*_model("GRU", activations=["HardSigmoid", "Tanh"]), device=False)


def test_a_hidden_size_that_contradicts_r_is_refused_at_compile():
    model, _ = _model("LSTM")
    for a in model.graph.node[0].attribute:
        if a.name == "hidden_size":
            a.i = 13
    from graphengine.engine.errors import ShapeError

    with pytest.raises(ShapeError, match=r"hidden_size 13 does not match R \[1, 48, 12\]"):
        compile_graph(load_model(model), CompileOptions(lint=True))


def _l2_bytes() -> int:
    size = os.sysconf("SC_LEVEL2_CACHE_SIZE") if "SC_LEVEL2_CACHE_SIZE" in os.sysconf_names \
        else -1
    return size if size > 0 else 1 << 20  # the kernel's assumption where it cannot read it


@pytest.mark.parametrize("op,attrs", [("LSTM", {"peep": True}), ("GRU", {"linear_before_reset": 0}),
                                      ("GRU", {"linear_before_reset": 1}), ("RNN", {})])
@pytest.mark.parametrize("direction", ["forward", "bidirectional"])
def test_hidden_units_split_over_threads_where_r_outgrows_l2(op, attrs, direction):
    """A direction's R bigger than half a core's L2 whose share per thread fits: the threads
    split each direction's hidden units (each keeps its share of R in its own L2 across the
    steps) and wait for each other at every step; rows of every length, initial states, and
    a hidden size that is not a whole number of panels (the last share is shorter)."""
    gates = GATES[op]
    # R of one direction about 1.5 L2s (gates * hidden^2 floats), a panel and a bit over
    hidden = int((1.5 * _l2_bytes() / (4 * gates)) ** 0.5) // 16 * 16 + 5
    model, feeds = _model(op, seq=5, batch=3, size=24, hidden=hidden, direction=direction,
                          lens="all", states=True, **attrs)
    for t in model.graph.initializer:  # keep the activations in the gates' useful range
        if t.name == "R":
            r = numpy_helper.to_array(t) * (2.0 / hidden ** 0.5)
            t.CopyFrom(numpy_helper.from_array(r.astype(np.float32), "R"))
    loaded, got = _check(model, feeds, threads=2)  # two threads on any machine
    for name, ref in zip(("y", "yh", "yc"), _reference(model, feeds)):
        np.testing.assert_allclose(got[name], ref, rtol=1e-4, atol=3e-5, err_msg=name)
    impls = [t["impl"] for native in loaded.natives.values() for t in native.profile()]
    assert any("hidden units split over threads" in i for i in impls), impls


def test_a_small_r_keeps_one_direction_per_thread():
    """R within half an L2: each thread steps a direction of its own, no barriers."""
    loaded, _ = _check(*_model("LSTM", batch=2, hidden=40, direction="bidirectional"),
                       threads=2)
    impls = [t["impl"] for native in loaded.natives.values() for t in native.profile()]
    assert impls and not any("split" in i for i in impls), impls
