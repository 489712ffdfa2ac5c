"""The fused convolutions as ops of their own (engine/ops/conv_fused.py): graphengine.ConvDw,
.ConvBlock and .ConvHead have a schema, a numpy reference that computes what the unfused
chain computes, device kernels that agree with it, and a domain of their own."""

from __future__ import annotations

import dataclasses

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from graphengine import _runtime
from graphengine.engine import offline, ops
from graphengine.engine.errors import GraphEngineError, InvalidGraph
from graphengine.engine.importers import load_model
from graphengine.engine.ir import Engine
from graphengine.engine.model import DeviceProgram
from graphengine.engine.ops.conv_fused import CONV_BLOCK, CONV_DW, CONV_HEAD, DOMAIN
from graphengine.engine.partition import placement
from graphengine.engine.passes import PassManager
from graphengine.engine.pipeline import CompileOptions, bind_shapes, compile_graph, stages
from graphengine.engine.prepare.validate import _check_attr_types
from graphengine.engine.runtime import load
from tests import zoo

RNG = np.random.default_rng(23)
AVAILABLE = _runtime.conv_block_available()  # the ConvBlock and ConvHead kernels (AVX-512)
CLIP6 = ("Clip", 0.0, 6.0)


class _Builder:
    """One graph twice: as the ONNX nodes a fused op replaces, and as that fused op."""

    def __init__(self) -> None:
        self.inits: dict[str, np.ndarray] = {}
        self.nodes: list[onnx.NodeProto] = []  # the unfused chain

    def weight(self, name: str, shape, scale: float = 0.3) -> str:
        self.inits[name] = RNG.normal(0, scale, shape).astype(np.float32)
        return name

    def conv(self, x: str, w: str, b: str | None, out: str, **attrs) -> str:
        self.nodes.append(helper.make_node("Conv", [x, w] + ([b] if b else []), [out], **attrs))
        return out

    def act(self, x: str, act, out: str) -> str:
        if act is None:
            return x
        op, alpha, beta = act
        if op == "Clip":
            lo, hi = (self.const(f"{out}_{k}", np.float32(v)) for k, v in (("lo", alpha),
                                                                            ("hi", beta)))
            self.nodes.append(helper.make_node("Clip", [x, lo, hi], [out]))
        elif op in ("LeakyRelu", "HardSigmoid"):
            attrs = {"alpha": alpha} | ({"beta": beta} if op == "HardSigmoid" else {})
            self.nodes.append(helper.make_node(op, [x], [out], **attrs))
        else:
            self.nodes.append(helper.make_node(op, [x], [out]))
        return out

    def const(self, name: str, value) -> str:
        self.inits[name] = np.asarray(value)
        return name

    def models(self, fused: onnx.NodeProto, out: str, x_shape) -> tuple[onnx.ModelProto, ...]:
        def model(nodes, y, domain):
            graph = helper.make_graph(
                nodes, "fused_conv", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                   list(x_shape))],
                [helper.make_tensor_value_info(y, TensorProto.FLOAT, None)],
                [numpy_helper.from_array(v, k) for k, v in self.inits.items()])
            opsets = [helper.make_opsetid("", 17)] + (
                [helper.make_opsetid(domain, 1)] if domain else [])
            return helper.make_model(graph, opset_imports=opsets, ir_version=8)

        return model([fused], "y", fused.domain), model(self.nodes, out, None)


def _act_attrs(key: str, act) -> dict:
    if act is None:
        return {}
    op, alpha, beta = act
    return {key: op} | ({f"{key}_alpha": alpha} if alpha is not None else {}) | (
        {f"{key}_beta": beta} if beta is not None else {})


def conv_dw(x_shape=(2, 8, 9, 10), m=24, stride=1, act=CLIP6, dw_act=("Relu", None, None),
            bias=True, domain=DOMAIN):
    """(ConvDw as one node, the 1x1 Conv -> act -> depthwise Conv -> act it stands for)."""
    b = _Builder()
    c = x_shape[1]
    w, dww, dwb = b.weight("w", (m, c, 1, 1)), b.weight("dww", (m, 1, 3, 3)), b.weight("dwb", m)
    bias_name = b.weight("b", m) if bias else None
    h = b.act(b.conv("x", w, bias_name, "e"), act, "e_act")
    h = b.conv(h, dww, dwb, "d", group=m, pads=[1, 1, 1, 1], strides=[stride, stride])
    out = b.act(h, dw_act, "d_act")
    node = helper.make_node("ConvDw", ["x", w, bias_name or "", dww, dwb], ["y"], domain=domain,
                            dw_stride=stride, **_act_attrs("activation", act),
                            **_act_attrs("dw_activation", dw_act))
    return b.models(node, out, x_shape)


def conv_block(x_shape=(2, 16, 9, 9), m=48, p=16, stride=1, expand=True, residual=True,
               acts=(CLIP6, CLIP6, None), domain=DOMAIN):
    """(ConvBlock as one node, the expand -> depthwise -> project [+ x] -> act chain)."""
    b = _Builder()
    c = x_shape[1]
    m = m if expand else c
    h, inputs = "x", ["x", "", ""]
    if expand:
        w, be = b.weight("we", (m, c, 1, 1)), b.weight("be", m)
        h = b.act(b.conv(h, w, be, "e"), acts[0], "e_act")
        inputs[1:] = [w, be]
    wd, bd = b.weight("wd", (m, 1, 3, 3)), b.weight("bd", m)
    h = b.act(b.conv(h, wd, bd, "d", group=m, pads=[1, 1, 1, 1], strides=[stride, stride]),
              acts[1], "d_act")
    wp, bp = b.weight("wp", (p, m, 1, 1)), b.weight("bp", p)
    out = b.conv(h, wp, bp, "q")
    if residual:
        b.nodes.append(helper.make_node("Add", [out, "x"], ["r"]))
        out = "r"
    out = b.act(out, acts[2], "q_act")
    node = helper.make_node(
        "ConvBlock", inputs + [wd, bd, wp, bp] + (["x"] if residual else []), ["y"],
        domain=domain, dw_stride=stride, **_act_attrs("activation", acts[0] if expand else None),
        **_act_attrs("dw_activation", acts[1]), **_act_attrs("pw_activation", acts[2]))
    return b.models(node, out, x_shape)


def conv_head(x_shape=(1, 16, 5, 5), m=40, classes=11, trans_b=1, act=CLIP6, domain=DOMAIN):
    """(ConvHead as one node, the 1x1 Conv -> act -> GlobalAveragePool -> Flatten -> Gemm)."""
    b = _Builder()
    w, bias = b.weight("w", (m, x_shape[1], 1, 1)), b.weight("b", m)
    fc = b.weight("fc", (classes, m) if trans_b else (m, classes), 0.1)
    fcb = b.weight("fcb", classes)
    h = b.act(b.conv("x", w, bias, "c"), act, "c_act")
    b.nodes += [helper.make_node("GlobalAveragePool", [h], ["g"]),
                helper.make_node("Flatten", ["g"], ["f"]),
                helper.make_node("Gemm", ["f", fc, fcb], ["o"], transB=trans_b)]
    node = helper.make_node("ConvHead", ["x", w, bias, fc, fcb], ["y"], domain=domain,
                            trans_b=trans_b, **_act_attrs("activation", act))
    return b.models(node, "o", x_shape)


def _feeds(model: onnx.ModelProto) -> dict[str, np.ndarray]:
    shape = [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim]
    return {"x": RNG.normal(size=shape).astype(np.float32)}


def _ort(model: onnx.ModelProto, feeds) -> np.ndarray:
    return ort.InferenceSession(model.SerializeToString()).run(None, feeds)[0]


def _on_host(monkeypatch) -> None:
    """Place the fused ops on the host engine (their numpy reference)."""
    def device(node):
        return "no" if node.op_type.startswith(DOMAIN) else placement.device_accepts(node)

    monkeypatch.setattr(placement, "ENGINES", [(Engine.DEVICE, device),
                                               (Engine.HOST, placement.host_accepts)])


CASES = {
    "dw": lambda: conv_dw(),
    "dw-stride2-no-bias": lambda: conv_dw(stride=2, act=None, bias=False),
    "dw-leaky-sigmoid": lambda: conv_dw(act=("LeakyRelu", 0.2, None), dw_act=("Sigmoid", None,
                                                                              None)),
    "dw-hardsigmoid": lambda: conv_dw(act=("HardSigmoid", 0.25, 0.4), dw_act=("Tanh", None,
                                                                             None)),
    "block": lambda: conv_block(),
    "block-stride2": lambda: conv_block(stride=2, residual=False, p=24),
    "block-no-expand": lambda: conv_block(expand=False, acts=(None, ("Relu", None, None),
                                                              ("Relu", None, None))),
    "block-act-after-residual": lambda: conv_block(acts=(None, None, CLIP6)),
    "head": lambda: conv_head(),
    "head-fc-not-transposed": lambda: conv_head(trans_b=0, act=("Relu", None, None)),
    "head-batch3": lambda: conv_head(x_shape=(3, 8, 4, 6), act=None),
}
BLOCK_KERNEL = {"block", "block-stride2", "block-no-expand", "block-act-after-residual",
                "head", "head-fc-not-transposed", "head-batch3"}


# ---- the reference kernels compute what the unfused chains compute -----------------------
@pytest.mark.parametrize("case", sorted(CASES))
def test_reference_matches_the_unfused_chain(monkeypatch, case):
    fused, unfused = CASES[case]()
    feeds = _feeds(fused)
    want = _ort(unfused, feeds)
    _on_host(monkeypatch)
    compiled = compile_graph(load_model(fused), CompileOptions(lint=True))
    (placed,) = compiled.report.placements
    assert placed.op_type == f"{DOMAIN}.{fused.graph.node[0].op_type}"
    assert placed.engine == "host"
    got = list(load(compiled).execute(feeds).values())[0]
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    # and the schema's compute on its own, on the node's inputs
    node = next(n for n in fused.graph.node)
    inits = {i.name: numpy_helper.to_array(i) for i in fused.graph.initializer}
    ins = [feeds.get(name, inits.get(name)) if name else None for name in node.input]
    schema = ops.get(f"{DOMAIN}.{node.op_type}")
    attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    attrs = {k: v.decode() if isinstance(v, bytes) else v for k, v in attrs.items()}
    full = {k: s.default for k, s in schema.attrs.items() if s.default is not None} | attrs
    np.testing.assert_allclose(schema.compute(ins, full)[0], want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("case", sorted(CASES))
def test_device_kernel_matches_the_unfused_chain(case):
    fused, unfused = CASES[case]()
    feeds = _feeds(fused)
    compiled = compile_graph(load_model(fused), CompileOptions(lint=True))
    (placed,) = [p for p in compiled.report.placements if p.op_type.startswith(DOMAIN)]
    on_device = AVAILABLE or case not in BLOCK_KERNEL
    assert placed.engine == ("device" if on_device else "host"), placed.rejections
    if not on_device:
        assert "AVX-512" in placed.rejections[0]
    got = list(load(compiled).execute(feeds).values())[0]
    np.testing.assert_allclose(got, _ort(unfused, feeds), rtol=1e-4, atol=1e-4)


def test_the_fusion_rows_make_nodes_their_schemas_accept():
    # every fused node of MobileNetV2 passes validation (arity, attributes and their types:
    # what the validate pass checks of a graph's nodes) and its schema infers the shape the
    # fusion gave it
    model = zoo.mobilenetv2(width_mult=0.35, image=32, classes=10, batch=2)
    g = bind_shapes(load_model(model), None)
    pm = PassManager(lint=True)
    for stage in stages(CompileOptions(lint=True, layouts=False)):
        g = pm.run_stage(stage, g)
    fused = [n for n in g.nodes if n.op_type.startswith(DOMAIN)]
    kinds = {n.op_type for n in fused}
    assert kinds == ({CONV_BLOCK, CONV_HEAD} if AVAILABLE else {CONV_DW})
    for node in fused:
        schema = ops.get(node.op_type)
        schema.check_arity(node)
        _check_attr_types(node, schema)
        assert not any(k.startswith("_") for k in node.attrs), node.attrs
        (meta,) = schema.infer(node, schema.attrs_of(node))
        assert meta == node.outputs[0].meta, node.name
        assert not isinstance(schema.device(node, schema.attrs_of(node)), str)


# ---- a domain of their own ---------------------------------------------------------------
@pytest.mark.parametrize("make", [conv_dw, conv_block, conv_head])
@pytest.mark.parametrize("domain", ["", "ai.onnx", "com.microsoft"])
def test_the_op_names_outside_the_graphengine_domain_are_unknown(make, domain):
    fused, _ = make(domain=domain)
    op = fused.graph.node[0].op_type
    named = op if domain in ("", "ai.onnx") else f"{domain}.{op}"
    with pytest.raises(InvalidGraph, match=f"unknown op type '{named}'"):
        compile_graph(load_model(fused))


def test_a_user_graph_cannot_pass_itself_off_as_a_fused_conv_by_name():
    # "ConvBlock" and friends are not registered under their bare names: only the compiler's
    # fusion rows (or a graph naming the graphengine domain) make them
    for name in ("ConvDw", "ConvBlock", "ConvHead"):
        assert not ops.has(name) and ops.has(f"{DOMAIN}.{name}")
    assert {CONV_DW, CONV_BLOCK, CONV_HEAD} <= set(ops.all_ops())


# ---- the schemas check their operands ------------------------------------------------------
def _edit(model: onnx.ModelProto, **changes) -> onnx.ModelProto:
    node = model.graph.node[0]
    for key, value in changes.items():
        if key == "inputs":
            del node.input[:]
            node.input.extend(value)
        else:
            (attr,) = [a for a in node.attribute if a.name == key]
            attr.CopyFrom(helper.make_attribute(key, value))
    return model


@pytest.mark.parametrize("model,message", [
    (lambda: _edit(conv_dw()[0], dw_stride=3), "dw_stride must be 1 or 2"),
    (lambda: _edit(conv_dw()[0], inputs=["x", "w", "b"]), r"input 3 \(DW_W"),
    (lambda: _edit(conv_dw()[0], inputs=["x", "w", "b", "w", "dwb"]), "depthwise weight has"),
    (lambda: _edit(conv_block(acts=(None, CLIP6, None))[0],
                   inputs=["x", "", "", "wd", "bd", "wp", "bp", "x"]),
     "depthwise weight has shape"),  # without the expansion, 16 channels reach it, not 48
    (lambda: _edit(conv_block(stride=2, residual=False)[0],
                   inputs=["x", "we", "be", "wd", "bd", "wp", "bp", "x"]), "residual R has"),
    (lambda: _edit(conv_block(expand=False)[0], inputs=["x", "", "bd", "wd", "bd", "wp", "bp"]),
     "give W_E too"),
    (lambda: _edit(conv_head()[0], trans_b=0), "FC has shape"),
    (lambda: _edit(conv_head()[0], activation="Softmax"), "activation"),
])
def test_schemas_refuse_bad_operands(model, message):
    with pytest.raises(GraphEngineError, match=message):
        compile_graph(load_model(model()))


def test_device_declines_what_the_block_kernels_do_not_compute():
    # a Sigmoid stage (Relu / Clip only) and computed weights: the host runs the node
    fused, unfused = conv_block(acts=(None, ("Sigmoid", None, None), None))
    compiled = compile_graph(load_model(fused))
    (placed,) = compiled.report.placements
    assert placed.engine == "host" and "Relu or Clip only" in placed.rejections[0]
    feeds = _feeds(fused)
    got = list(load(compiled).execute(feeds).values())[0]
    np.testing.assert_allclose(got, _ort(unfused, feeds), rtol=1e-5, atol=1e-5)
    fused, _ = conv_dw()
    fused.graph.input.append(helper.make_tensor_value_info("dww", TensorProto.FLOAT,
                                                           [24, 1, 3, 3]))
    fused.graph.initializer.remove(next(i for i in fused.graph.initializer if i.name == "dww"))
    compiled = compile_graph(load_model(fused))
    (placed,) = compiled.report.placements
    assert placed.engine == "host" and "constant depthwise weight" in placed.rejections[0]


# ---- compiled models keep them: the runtime's ops and the offline file ---------------------
def _all_three() -> onnx.ModelProto:
    """MobileNetV2 (ConvBlocks, a ConvHead) behind a 1x1 Conv and a depthwise Conv whose
    reader has padding (a ConvDw that no block takes)."""
    model = zoo.mobilenetv2(width_mult=0.35, image=32, classes=10)
    b = _Builder()
    b.conv("input", b.weight("pre_w", (16, 3, 1, 1)), None, "pre_e")
    b.act("pre_e", ("Relu", None, None), "pre_a")
    b.conv("pre_a", b.weight("pre_dww", (16, 1, 3, 3)), b.weight("pre_dwb", 16), "pre_d",
           group=16, pads=[1, 1, 1, 1])
    b.conv("pre_d", b.weight("pre_p", (3, 16, 3, 3)), None, "pre_out", pads=[1, 1, 1, 1])
    for node in model.graph.node:
        node.input[:] = ["pre_out" if i == "input" else i for i in node.input]
    nodes = b.nodes + list(model.graph.node)
    del model.graph.node[:]
    model.graph.node.extend(nodes)
    model.graph.initializer.extend(numpy_helper.from_array(v, k) for k, v in b.inits.items())
    return model


def test_offline_files_round_trip_the_fused_ops():
    model = _all_three()
    feeds = zoo.random_inputs(model, seed=4)
    compiled = compile_graph(load_model(model), CompileOptions(lint=True))
    tasks = [t.op for p in compiled.programs if isinstance(p, DeviceProgram) for t in p.tasks
             if t.kind == "kernel"]
    placed = {p.op_type for p in compiled.report.placements}
    assert "ConvDw" in tasks and CONV_DW in placed
    if AVAILABLE:
        assert {"ConvBlock", "ConvHead"} <= set(tasks) and {CONV_BLOCK, CONV_HEAD} <= placed
    loaded = offline.load(offline.save(compiled))
    assert [dataclasses.asdict(p) if isinstance(p, DeviceProgram) else None
            for p in loaded.programs][0]["tasks"] == \
        [dataclasses.asdict(t) for t in compiled.programs[0].tasks]
    assert [p.op_type for p in loaded.report.placements] == \
        [p.op_type for p in compiled.report.placements]
    fresh = list(load(compiled).execute(feeds).values())[0]
    again = list(load(loaded).execute(feeds).values())[0]
    assert fresh.tobytes() == again.tobytes()
    unfused = compile_graph(load_model(model), CompileOptions(fuse=False))
    np.testing.assert_allclose(fresh, list(load(unfused).execute(feeds).values())[0],
                               rtol=1e-3, atol=1e-4)


def test_3d_convolution_and_pools_run_on_the_device():
    """A video net's Conv3d (depthwise 3x3x3 and temporal 5x1x1, strided), MaxPool3d and
    global pool: the device's convolution and pooling kernels take 5-D tensors (oneDNN's
    ncdhw, converted to its blocked format inside the kernel); they ran as numpy host
    steps (X3D: 42 convolutions on the host)."""
    rng = np.random.default_rng(8)
    inits = [numpy_helper.from_array(rng.standard_normal(s).astype(np.float32) * 0.2, n)
             for n, s in (("w1", (16, 3, 3, 3, 3)), ("w2", (16, 1, 3, 3, 3)),
                          ("w3", (24, 16, 5, 1, 1)), ("b3", (24,)))]
    nodes = [helper.make_node("Conv", ["x", "w1"], ["c1"], pads=[1] * 6, strides=[1, 2, 2]),
             helper.make_node("Relu", ["c1"], ["r1"]),
             helper.make_node("Conv", ["r1", "w2"], ["c2"], pads=[1] * 6, group=16),
             helper.make_node("MaxPool", ["c2"], ["p"], kernel_shape=[1, 3, 3],
                              strides=[1, 2, 2], pads=[0, 1, 1, 0, 1, 1]),
             helper.make_node("Conv", ["p", "w3", "b3"], ["c3"], pads=[2, 0, 0, 2, 0, 0]),
             helper.make_node("GlobalAveragePool", ["c3"], ["g"]),
             helper.make_node("Add", ["c3", "g"], ["y"])]
    model = helper.make_model(helper.make_graph(
        nodes, "video", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                       [2, 3, 6, 16, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits),
        opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    feeds = {"x": rng.standard_normal((2, 3, 6, 16, 16)).astype(np.float32)}
    compiled = compile_graph(load_model(model), CompileOptions(lint=True))
    assert [type(p).__name__ for p in compiled.programs] == ["DeviceProgram"]
    ops = sorted({t.op for p in compiled.programs if isinstance(p, DeviceProgram)
                  for t in p.tasks if t.kind == "kernel"})
    assert {"Conv", "MaxPool"} <= set(ops), ops
    got = load(compiled).execute(feeds)["y"]
    want = ort.InferenceSession(model.SerializeToString(), providers=[
        "CPUExecutionProvider"]).run(None, feeds)[0]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("channels", [16, 21])  # whole vectors of channels and a tail
def test_depthwise_3d_convolution_kernel(channels):
    """Depthwise Conv3d runs the device's own channels-last kernel (oneDNN 3.2 had gemm:jit
    only): strides, dilation, asymmetric pads, a bias, then a residual sum and an activation
    the fusion attaches, held to ONNX Runtime."""
    rng = np.random.default_rng(9)
    c = channels
    inits = [numpy_helper.from_array((rng.standard_normal((c, 1, 3, 3, 3)) * 0.3)
                                     .astype(np.float32), "w"),
             numpy_helper.from_array(rng.standard_normal(c).astype(np.float32), "b"),
             numpy_helper.from_array((rng.standard_normal((c, 1, 3, 1, 3)) * 0.3)
                                     .astype(np.float32), "w2")]
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c1"], group=c, strides=[1, 2, 2],
                              dilations=[2, 1, 1], pads=[2, 1, 0, 2, 0, 1]),
             helper.make_node("Conv", ["c1", "w2"], ["c2"], group=c, pads=[1, 0, 1, 1, 0, 1]),
             helper.make_node("Add", ["c2", "c1"], ["s"]),
             helper.make_node("Relu", ["s"], ["y"])]
    shape = [2, c, 7, 11, 10]
    model = helper.make_model(helper.make_graph(
        nodes, "dw3d", [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits),
        opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    feeds = {"x": rng.standard_normal(shape).astype(np.float32)}
    compiled = compile_graph(load_model(model), CompileOptions(lint=True))
    m = load(compiled)
    got = m.execute(feeds)["y"]
    want = ort.InferenceSession(model.SerializeToString(), providers=[
        "CPUExecutionProvider"]).run(None, feeds)[0]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    impls = [t["impl"] for nat in m.natives.values() for t in nat.profile() if t["op"] == "Conv"]
    if _runtime.conv_block_available():  # the kernel needs AVX-512, as the block kernels
        assert impls and all("depthwise 3-D" in i for i in impls), impls


def test_depthwise_3d_convolution_summing_into_its_residual_in_place():
    """y = tanh(dwconv3d(x) + sigmoid(x)), then a Transpose: the residual's storage is the
    convolution's output (codegen's sum in place), so the kernel adds it before writing the
    output over it (it transposed over it first: 1.18 off)."""
    rng = np.random.default_rng(1)
    c = 16
    inits = [numpy_helper.from_array((rng.standard_normal((c, 1, 3, 3, 3)) * 0.3)
                                     .astype(np.float32), "w")]
    nodes = [helper.make_node("Sigmoid", ["x"], ["r"]),
             helper.make_node("Conv", ["x", "w"], ["cv"], group=c, pads=[1] * 6),
             helper.make_node("Add", ["cv", "r"], ["s"]),
             helper.make_node("Tanh", ["s"], ["t"]),
             helper.make_node("Transpose", ["t"], ["y"], perm=[0, 2, 1, 3, 4])]
    shape = [1, c, 4, 6, 6]
    model = helper.make_model(helper.make_graph(
        nodes, "dw3d_in_place", [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits),
        opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    compiled = compile_graph(load_model(model), CompileOptions(lint=True))
    (prog,) = [p for p in compiled.programs if isinstance(p, DeviceProgram)]
    offsets = {t["name"]: t["offset"] for t in prog.spec(compiled.name, [])["tensors"]}
    assert offsets["r"] == offsets["t"]  # the case this test is for
    feeds = {"x": rng.standard_normal(shape).astype(np.float32)}
    got = load(compiled).execute(feeds)["y"]
    want = ort.InferenceSession(model.SerializeToString(), providers=[
        "CPUExecutionProvider"]).run(None, feeds)[0]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def _video_se_block(shape, c_mid, dw_stride):
    """x -> 1x1x1 conv (Relu) -> depthwise 3x3x3 (stride) -> squeeze-excitation (global
    pool, two 1x1x1 convs, Sigmoid, Mul) -> swish -> 1x1x1 conv + shortcut conv -> MaxPool3d:
    X3D's block, every activation 5-D."""
    rng = np.random.default_rng(12)
    c = shape[1]

    def w(name, *s):
        return numpy_helper.from_array((rng.standard_normal(s) * 0.3).astype(np.float32), name)

    inits = [w("w1", c_mid, c, 1, 1, 1), w("wd", c_mid, 1, 3, 3, 3), w("bd", c_mid),
             w("ws1", 8, c_mid, 1, 1, 1), w("ws2", c_mid, 8, 1, 1, 1),
             w("w3", c, c_mid, 1, 1, 1), w("wsc", c, c, 1, 1, 1)]
    st = [1, dw_stride, dw_stride]
    nodes = [helper.make_node("Conv", ["x", "w1"], ["a"]),
             helper.make_node("Relu", ["a"], ["ar"]),
             helper.make_node("Conv", ["ar", "wd", "bd"], ["d"], group=c_mid, pads=[1] * 6,
                              strides=st),
             helper.make_node("GlobalAveragePool", ["d"], ["g"]),
             helper.make_node("Conv", ["g", "ws1"], ["s1"]),
             helper.make_node("Relu", ["s1"], ["s1r"]),
             helper.make_node("Conv", ["s1r", "ws2"], ["s2"]),
             helper.make_node("Sigmoid", ["s2"], ["sg"]),
             helper.make_node("Mul", ["d", "sg"], ["e"]),
             helper.make_node("Sigmoid", ["e"], ["es"]),
             helper.make_node("Mul", ["e", "es"], ["sw"]),
             helper.make_node("Conv", ["sw", "w3"], ["p"]),
             helper.make_node("Conv", ["x", "wsc"], ["sc"], strides=st),
             helper.make_node("Add", ["p", "sc"], ["sum"]),
             helper.make_node("MaxPool", ["sum"], ["y"], kernel_shape=[1, 2, 2],
                              strides=[1, 2, 2])]
    return helper.make_model(helper.make_graph(
        nodes, "video_se", [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits),
        opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


@pytest.mark.parametrize("shape,c_mid,dw_stride", [
    ([2, 16, 4, 8, 8], 24, 2),     # a channel tail in the depthwise sums, strided
    ([1, 24, 3, 6, 6], 80, 1),     # 64 + 16 channels; small: the elementwise loops
    ([1, 32, 8, 16, 16], 48, 1)])  # large enough for oneDNN's binary and pooling
def test_5d_activations_stay_channels_last_between_convolutions(shape, c_mid, dw_stride):
    """The layout pass keeps a video net's 5-D activations channels-last (N, D, H, W, C)
    between its convolutions, pools, squeeze-excitation and elementwise ops: one conversion
    in, one out. They were plain, so every oneDNN Conv3d converted to its own format and
    back inside the kernel (X3D: 1x1x1 convs 215 us against OpenVINO's 85) and the
    depthwise kernel transposed its input and output."""
    model = _video_se_block(shape, c_mid, dw_stride)
    compiled = compile_graph(load_model(model), CompileOptions(lint=True))
    (prog,) = [p for p in compiled.programs if isinstance(p, DeviceProgram)]
    tasks = [t for t in prog.tasks if t.kind == "kernel"]
    assert sum(t.op == "TransData" for t in tasks) == 2, [t.op for t in tasks]
    formats = {t["name"]: t.get("format", "nchw")
               for t in prog.spec(compiled.name, [])["tensors"]}
    convs = [t for t in tasks if t.op == "Conv"]
    assert convs and all(formats[prog.spec(compiled.name, [])["tensors"][t.outputs[0]]["name"]]
                         == "nhwc" for t in convs if len(t.outputs) == 1), formats
    rng = np.random.default_rng(3)
    feeds = {"x": rng.standard_normal(shape).astype(np.float32)}
    m = load(compiled)
    got = m.execute(feeds)["y"]
    want = ort.InferenceSession(model.SerializeToString(), providers=[
        "CPUExecutionProvider"]).run(None, feeds)[0]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    impls = [t["impl"] for nat in m.natives.values() for t in nat.profile() if t["op"] == "Conv"]
    if _runtime.conv_block_available():
        assert any("depthwise 3-D" in i for i in impls), impls


def test_5d_channels_last_beside_a_blocked_4d_region():
    """A 5-D part (Conv3d, Relu) folded into a 4-D depthwise net: the region's 4-D format is
    the blocked one (asked for), its 5-D values are channels-last (blocked formats are 4-D
    only); the Reshape between them reads plain."""
    blocked = _runtime.blocked_format()
    if not blocked:
        pytest.skip("this CPU has no blocked activation format (AVX2 or AVX-512 needed)")
    rng = np.random.default_rng(5)
    inits = [numpy_helper.from_array((rng.standard_normal(s) * 0.3).astype(np.float32), n)
             for n, s in (("w1", (16, 8, 1, 3, 3)), ("wd", (64, 1, 3, 3)),
                          ("w2", (32, 64, 1, 1)))]
    inits.append(numpy_helper.from_array(np.array([1, 64, 8, 8], np.int64), "shape"))
    nodes = [helper.make_node("Conv", ["x", "w1"], ["a"], pads=[0, 1, 1, 0, 1, 1]),
             helper.make_node("Relu", ["a"], ["ar"]),
             helper.make_node("Reshape", ["ar", "shape"], ["r"]),
             helper.make_node("Conv", ["r", "wd"], ["d"], group=64, pads=[1] * 4),
             helper.make_node("Relu", ["d"], ["dr"]),
             helper.make_node("Conv", ["dr", "w2"], ["y"])]
    model = helper.make_model(helper.make_graph(
        nodes, "mixed", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 4, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits),
        opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    compiled = compile_graph(load_model(model), CompileOptions(lint=True, layout_format=blocked))
    (prog,) = [p for p in compiled.programs if isinstance(p, DeviceProgram)]
    tensors = prog.spec(compiled.name, [])["tensors"]
    formats = {len(t["shape"]): set() for t in tensors}
    for t in tensors:
        formats[len(t["shape"])].add(t.get("format", "nchw"))
    assert "nhwc" in formats[5] and not formats[5] & {"nChw8c", "nChw16c"}, formats
    assert formats[4] & {"nChw8c", "nChw16c"}, formats
    feeds = {"x": rng.standard_normal((1, 8, 4, 8, 8)).astype(np.float32)}
    got = load(compiled).execute(feeds)["y"]
    want = ort.InferenceSession(model.SerializeToString(), providers=[
        "CPUExecutionProvider"]).run(None, feeds)[0]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
