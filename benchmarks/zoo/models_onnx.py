"""Torch-free zoo builders: ONNX models written node by node with ``onnx.helper`` and numpy.

These are the fast subset (``fast=True``) that ``make test`` builds in CI without torch. Each
model is small (builds in well under 2 s, runs in ONNX Runtime in a few ms) and is laid out the
way a real exporter writes that architecture, so that it exercises a known class of compiler
bugs: branch order in residual blocks, Resize in its opset-13 and opset-18 forms, NMS with a
data-dependent output, grouped-query attention with repeat_kv, rank-3 Conv, ConvTranspose with
output_padding, batch dims written as ``-1`` or renamed between inputs and outputs, ...

The builder (``_G``) is ``tests.zoo._Graph`` (torch-export-like value names), plus the pieces
those models need: any opset / IR version, N-d Conv with explicit pads, shape chains.
Text-like models (transformers, renamed dims) are in ``models_onnx_text.py``.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository root
from catalog import Built, ZooEntry, register

from tests import zoo as _tz

F32, I64 = TensorProto.FLOAT, TensorProto.INT64
INT64_MAX = np.iinfo(np.int64).max
B = "batch"  # the symbolic batch dim


class _G(_tz._Graph):
    """``tests.zoo._Graph`` with any opset, shape-chain helpers and a writer."""

    def __init__(self, seed: int, opset: int = 17):
        super().__init__(seed)
        self.opset = opset
        self.value_info: list[onnx.ValueInfoProto] = []

    def i64(self, scope: str, v) -> str:
        return self.const(scope, v, np.int64)

    def f32(self, scope: str, v) -> str:
        return self.const(scope, v, np.float32)

    def unsq(self, x: str, axes, scope: str = "") -> str:
        if self.opset >= 13:
            return self.op("Unsqueeze", [x, self.i64(scope, list(axes))], scope=scope)
        return self.op("Unsqueeze", [x], scope=scope, axes=list(axes))

    def dims(self, x: str, axes, scope: str = "") -> list[str]:
        """torch's ``x.size(i)`` for each axis: Shape -> Gather(scalar) -> Unsqueeze([0])."""
        out = []
        for a in axes:
            sh = self.op("Shape", [x], scope=scope)
            d = self.op("Gather", [sh, self.i64(scope, a)], scope=scope, axis=0)
            out.append(self.unsq(d, [0], scope))
        return out

    def shape_of(self, parts, scope: str = "") -> str:
        """Concat of shape pieces: value names (1-d int64) or python ints (Constants)."""
        ins = [p if isinstance(p, str) else self.i64(scope, [p]) for p in parts]
        return self.op("Concat", ins, scope=scope, axis=0)

    def reduce(self, op: str, x: str, axes, scope: str = "", keepdims: int = 1) -> str:
        """Reduce* with axes as an attribute (opset < 18) or as an input (opset >= 18)."""
        if self.opset >= 18 or (op == "ReduceSum" and self.opset >= 13):
            return self.op(op, [x, self.i64(scope, list(axes))], scope=scope, keepdims=keepdims)
        return self.op(op, [x], scope=scope, axes=list(axes), keepdims=keepdims)

    def split2(self, x: str, half: int, scope: str = "") -> tuple[str, str]:
        """torch.chunk(x, 2, dim=1): Split with a ``split`` input before opset 18,
        with ``num_outputs=2`` from opset 18 on."""
        name = self._name(scope, "Split")
        outs = [f"{name}_output_0", f"{name}_output_1"]
        if self.opset >= 18:
            node = helper.make_node("Split", [x], outs, name=name, axis=1, num_outputs=2)
        else:
            node = helper.make_node(
                "Split", [x, self.i64(scope, [half, half])], outs, name=name, axis=1
            )
        self.nodes.append(node)
        return outs[0], outs[1]

    def save(
        self, folder: Path, name: str, ir_version: int | None = None, full_check: bool = True
    ) -> onnx.ModelProto:
        """Check and write ``folder/model.onnx``; IR 8 up to opset 18, 9 from opset 19 on
        (what the exporters write), unless ``ir_version`` says otherwise."""
        if ir_version is None:
            ir_version = 8 if self.opset <= 18 else 9
        graph = helper.make_graph(
            self.nodes, name, self.inputs, self.outputs, self.inits, value_info=self.value_info
        )
        m = helper.make_model(
            graph,
            opset_imports=[helper.make_opsetid("", self.opset)],
            ir_version=ir_version,
            producer_name="graphengine-zoo",
            producer_version="onnx.helper",
        )
        onnx.checker.check_model(m, full_check=full_check)
        onnx.save(m, str(folder / "model.onnx"))
        return m


def conv(
    g: _G,
    x: str,
    cin: int,
    cout: int,
    k: int,
    scope: str,
    stride: int = 1,
    pad=None,
    groups: int = 1,
    bias: bool = True,
    gain: float = 2.0,
    rank: int = 2,
) -> str:
    """Conv over ``rank`` spatial dims; ``pad`` an int (all sides) or the full pads list."""
    ks = [k] * rank
    fan_in = cin // groups * k**rank
    w = g.init(f"{scope}.weight", g.normal((cout, cin // groups, *ks), math.sqrt(gain / fan_in)))
    ins = [x, w]
    if bias:
        ins.append(g.init(f"{scope}.bias", g.normal((cout,), 0.05)))
    p = k // 2 if pad is None else pad
    pads = list(p) if isinstance(p, (list, tuple)) else [p] * (2 * rank)
    return g.op(
        "Conv",
        ins,
        scope=f"/{scope}",
        dilations=[1] * rank,
        group=groups,
        kernel_shape=ks,
        pads=pads,
        strides=[stride] * rank,
    )


bn = _tz._bn


def conv_bn(g, x, cin, cout, k, scope, stride=1, groups=1, relu=True, gamma=(0.5, 1.0)):
    """torchvision's conv (bias=False) -> BatchNorm -> ReLU, module names ``scope.0/1/2``."""
    x = conv(g, x, cin, cout, k, f"{scope}.0", stride=stride, groups=groups, bias=False)
    x = bn(g, x, cout, f"{scope}.1", gamma=gamma)
    return g.op("Relu", [x], scope=f"/{scope}.2") if relu else x


def head(g: _G, x: str, cin: int, classes: int, output: str = "output", gain=3.0) -> str:
    """GlobalAveragePool -> Flatten -> Gemm(transB=1): torchvision's classifier head (weights
    ``gain`` times the usual scale: pooled features of random images are small)."""
    x = g.op("GlobalAveragePool", [x], scope="/avgpool")
    x = g.op("Flatten", [x], scope="", axis=1)
    w = g.init("fc.weight", g.normal((classes, cin), gain / math.sqrt(cin)))
    b = g.init("fc.bias", g.normal((classes,), 0.02))
    return g.op("Gemm", [x, w, b], scope="/fc", output=output, alpha=1.0, beta=1.0, transB=1)


def classifier(g: _G, x: str, cin: int, folder: Path, name: str, image: int) -> Built:
    """The head over 10 classes as output "output", saved; a 3-channel image input."""
    head(g, x, cin, 10)
    g.output("output", F32, [B, 10])
    g.save(folder, name)
    return Built(inputs=image_feeds("input", 3, image, image))


def gelu(g: _G, x: str, scope: str) -> str:
    """Exact GELU as torch exports it: x * (1 + erf(x / sqrt 2)) * 0.5."""
    e = g.op("Erf", [g.op("Div", [x, g.f32(scope, math.sqrt(2.0))], scope=scope)], scope=scope)
    e = g.op("Add", [e, g.f32(scope, 1.0)], scope=scope)
    return g.op("Mul", [g.op("Mul", [x, e], scope=scope), g.f32(scope, 0.5)], scope=scope)


def image_feeds(name: str, *tail: int, fixed_batch: int | None = None, channel_axis: int = 0):
    """``inputs(batch, seed)``: float32 [batch, *tail] of unit scale whose rows differ in more
    than noise: a per-(row, channel) offset and ramp on top of normal noise, so that a pooled
    classifier's outputs differ between rows (a row mix-up shows). ``channel_axis`` indexes
    ``tail`` (-1 for NHWC)."""

    def inputs(batch: int, seed: int) -> dict:
        b = fixed_batch or batch
        rng = np.random.default_rng(seed)
        x = rng.standard_normal((b, *tail)) * 0.6
        c = tail[channel_axis]
        shape = [1] * (len(tail) + 1)
        shape[0], shape[channel_axis % len(tail) + 1] = b, c
        offset = rng.standard_normal((b, c)).reshape(shape) * 0.6
        slope = rng.standard_normal((b, c)).reshape(shape) * 0.6
        sp = [i for i in range(len(tail)) if i != channel_axis % len(tail)][-1]  # last spatial
        ramp_shape = [1] * (len(tail) + 1)
        ramp_shape[sp + 1] = tail[sp]
        ramp = np.linspace(-1.0, 1.0, tail[sp]).reshape(ramp_shape)
        return {name: (x + offset + slope * ramp).astype(np.float32)}

    return inputs


def _zoo(name: str, family: str, batched: bool = True, notes: str = ""):
    """Decorator: register a builder as a fast, torch-free zoo entry."""

    def deco(fn):
        register(
            ZooEntry(
                name=name,
                family=family,
                source="onnx",
                build=fn,
                batched=batched,
                fast=True,
                notes=notes,
            )
        )
        return fn

    return deco


# ----------------------------------------------------------------------------------------------
# 1. ResNet-50-style bottlenecks, downsample emitted after the main branch
# ----------------------------------------------------------------------------------------------


@_zoo(
    "resnet_bottleneck",
    "vision",
    notes="torchvision Bottleneck (expansion 4, stride on the 3x3); the downsample branch's "
    "Conv+BN come after the main branch's nodes in the node list, as torch emits them",
)
def build_resnet_bottleneck(folder: Path) -> Built:
    g = _G(101, opset=17)
    w = 16
    x = _tz.resnet_stem(g, g.input("input", F32, [B, 3, 64, 64]), w, False, conv=conv)
    cin = w
    for i, (planes, blocks) in enumerate(((16, 1), (32, 2), (64, 1))):
        for j in range(blocks):
            s = f"layer{i + 1}.{j}"
            stride = 2 if (j == 0 and i > 0) else 1
            cout = planes * 4
            y = conv(g, x, cin, planes, 1, f"{s}.conv1", bias=False)
            y = g.op("Relu", [bn(g, y, planes, f"{s}.bn1")], scope=f"/{s}/relu")
            y = conv(g, y, planes, planes, 3, f"{s}.conv2", stride=stride, bias=False)
            y = g.op("Relu", [bn(g, y, planes, f"{s}.bn2")], scope=f"/{s}/relu_1")
            y = conv(g, y, planes, cout, 1, f"{s}.conv3", bias=False)
            y = bn(g, y, cout, f"{s}.bn3", gamma=(0.2, 0.5))
            if stride != 1 or cin != cout:  # called after bn3 in Bottleneck.forward
                idn = conv(g, x, cin, cout, 1, f"{s}.downsample.0", stride=stride, bias=False)
                idn = bn(g, idn, cout, f"{s}.downsample.1", gamma=(0.3, 0.6))
            else:
                idn = x
            x = g.op("Relu", [g.op("Add", [y, idn], scope=f"/{s}")], scope=f"/{s}/relu_2")
            cin = cout
    return classifier(g, x, cin, folder, "resnet_bottleneck", 64)


# ----------------------------------------------------------------------------------------------
# 2. FPN / UNet-style segmentation head, opset 13 Resize (roi, scales, sizes inputs)
# ----------------------------------------------------------------------------------------------


@_zoo(
    "fpn_seg",
    "segmentation",
    notes="opset 13: Resize nearest (scales, empty-Constant roi), linear half_pixel (sizes from "
    "a Shape chain), linear align_corners (scales, '' roi); Split with a split input; Concat",
)
def build_fpn_seg(folder: Path) -> Built:
    g = _G(102, opset=13)
    classes = 5
    x = g.input("input", F32, [B, 3, 64, 64])
    c2 = conv_bn(g, x, 3, 16, 3, "backbone.0", stride=2)  # 32x32
    c3 = conv_bn(g, c2, 16, 32, 3, "backbone.1", stride=2)  # 16x16
    c4 = conv_bn(g, c3, 32, 64, 3, "backbone.2", stride=2)  # 8x8
    lat = {
        n: conv(g, c, ci, 32, 1, f"fpn.lateral{n}", gain=1.0)
        for n, c, ci in ((4, c4, 64), (3, c3, 32), (2, c2, 16))
    }
    scales2 = g.f32("", [1.0, 1.0, 2.0, 2.0])
    # nearest x2 with scales; the roi an empty Constant (as torch < 1.13 wrote it)
    up4 = g.op(
        "Resize",
        [lat[4], g.f32("", np.zeros(0)), scales2],
        scope="/fpn/up4",
        coordinate_transformation_mode="asymmetric",
        mode="nearest",
        nearest_mode="floor",
        cubic_coeff_a=-0.75,
    )
    p3 = g.op("Add", [lat[3], up4], scope="/fpn")
    # bilinear to lat2's size: F.interpolate(size=lat2.shape[-2:]) -> sizes from Shape/Slice
    n_c = g.op("Slice", [g.op("Shape", [p3]), g.i64("", [0]), g.i64("", [2]), g.i64("", [0])])
    hw = g.op("Slice", [g.op("Shape", [lat[2]]), g.i64("", [2]), g.i64("", [4]), g.i64("", [0])])
    sizes = g.op("Concat", [n_c, hw], axis=0)
    up3 = g.op(
        "Resize",
        [p3, "", "", sizes],
        scope="/fpn/up3",
        coordinate_transformation_mode="half_pixel",
        mode="linear",
        nearest_mode="floor",
    )
    p2 = g.op("Add", [lat[2], up3], scope="/fpn")
    p2 = g.op("Relu", [conv(g, p2, 32, 32, 3, "fpn.smooth2")], scope="/fpn/smooth2")
    p3 = g.op("Relu", [conv(g, p3, 32, 32, 3, "fpn.smooth3")], scope="/fpn/smooth3")
    p4 = g.op("Relu", [conv(g, lat[4], 32, 32, 3, "fpn.smooth4")], scope="/fpn/smooth4")
    # align_corners bilinear upsampling of p3 (x2) and p4 (x4) onto p2's grid
    u3 = g.op(
        "Resize",
        [p3, "", scales2],
        scope="/head/up3",
        coordinate_transformation_mode="align_corners",
        mode="linear",
    )
    u4 = g.op(
        "Resize",
        [p4, "", g.f32("", [1.0, 1.0, 4.0, 4.0])],
        scope="/head/up4",
        coordinate_transformation_mode="align_corners",
        mode="linear",
    )
    cat = g.op("Concat", [p2, u3, u4], scope="/head", axis=1)  # 96 ch, 32x32
    a, b = g.split2(cat, 48, "/head")
    a = g.op("Relu", [conv(g, a, 48, 32, 3, "head.branch_a")], scope="/head/branch_a")
    gate = g.op("Sigmoid", [conv(g, b, 48, 32, 1, "head.branch_b", gain=1.0)], scope="/head")
    y = g.op("Mul", [a, gate], scope="/head")
    y = conv(g, y, 32, classes, 1, "head.classifier", gain=1.0)
    g.op(
        "Resize",
        [y, g.f32("", np.zeros(0)), scales2],
        scope="/head/final",
        output="output",
        coordinate_transformation_mode="half_pixel",
        mode="linear",
    )
    g.output("output", F32, [B, classes, 64, 64])
    g.save(folder, "fpn_seg")
    return Built(inputs=image_feeds("input", 3, 64, 64))


# ----------------------------------------------------------------------------------------------
# 3. Tiny single-stage detector with NonMaxSuppression
# ----------------------------------------------------------------------------------------------


@_zoo(
    "detector_nms",
    "detection",
    batched=False,
    notes="conv head -> Reshape/Transpose to [N, A, 4+C] -> Sigmoid, box decode with constant "
    "anchors (Slice/Mul/Add/Exp/Concat) -> NonMaxSuppression -> Gather/GatherND of the "
    "selection; the input keeps a symbolic batch but the outputs' K is data-dependent, so "
    "it is checked at batch 1 only",
)
def build_detector_nms(folder: Path) -> Built:
    g = _G(103, opset=17)
    na, nc, img, stride = 3, 3, 64, 8
    grid = img // stride
    x = g.input("images", F32, [B, 3, img, img])
    y = conv_bn(g, x, 3, 16, 3, "backbone.0", stride=2)
    y = conv_bn(g, y, 16, 32, 3, "backbone.1", stride=2)
    y = conv_bn(g, y, 32, 32, 3, "backbone.2", stride=2)  # 8x8
    y = conv(g, y, 32, na * (4 + nc), 1, "head.pred", gain=1.0)
    (n,) = g.dims(y, [0], "/head")
    y = g.op("Reshape", [y, g.shape_of([n, na, 4 + nc, grid, grid], "/head")], scope="/head")
    y = g.op("Transpose", [y], scope="/head", perm=[0, 1, 3, 4, 2])
    y = g.op("Reshape", [y, g.shape_of([n, -1, 4 + nc], "/head")], scope="/head")  # [N, A, 7]
    ax = g.i64("", [2])
    sl = lambda t, a, b: g.op("Slice", [t, g.i64("", [a]), g.i64("", [b]), ax, g.i64("", [1])])  # noqa: E731
    deltas = sl(y, 0, 4)
    scores = g.op("Sigmoid", [sl(y, 4, INT64_MAX)], scope="/post")
    scores = g.op("Transpose", [scores], scope="/post", perm=[0, 2, 1])  # [N, C, A]
    # anchors (cy, cx, h, w) in the (anchor, y, x) order of the reshape
    cyx = (np.arange(grid, dtype=np.float32) + 0.5) * stride
    anchors = np.array(
        [[cy, cx, s, s] for s in (10.0, 18.0, 28.0) for cy in cyx for cx in cyx], np.float32
    )
    anc = g.init("anchors", anchors)
    a_ctr = g.op("Slice", [anc, g.i64("", [0]), g.i64("", [2]), g.i64("", [1]), g.i64("", [1])])
    a_wh = g.op("Slice", [anc, g.i64("", [2]), g.i64("", [4]), g.i64("", [1]), g.i64("", [1])])
    ctr = g.op("Mul", [g.op("Mul", [sl(deltas, 0, 2), a_wh]), g.f32("", 0.1)], scope="/decode")
    ctr = g.op("Add", [ctr, a_ctr], scope="/decode")
    wh = g.op("Exp", [g.op("Mul", [sl(deltas, 2, 4), g.f32("", 0.2)])], scope="/decode")
    half = g.op("Mul", [g.op("Mul", [wh, a_wh]), g.f32("", 0.5)], scope="/decode")
    boxes = g.op(
        "Concat",
        [g.op("Sub", [ctr, half], scope="/decode"), g.op("Add", [ctr, half], scope="/decode")],
        scope="/decode",
        axis=-1,
    )  # [N, A, 4] as y1, x1, y2, x2
    sel = g.op(
        "NonMaxSuppression",
        [boxes, scores, g.i64("", [20]), g.f32("", [0.4]), g.f32("", [0.7])],
        scope="/nms",
        output="selected_indices",
        center_point_box=0,
    )
    col = lambda c: g.op("Gather", [sel, g.i64("", c)], scope="/nms", axis=1)  # noqa: E731
    flat = g.op("Add", [g.op("Mul", [col(0), g.i64("", na * grid * grid)]), col(2)], scope="/nms")
    flat_boxes = g.op("Reshape", [boxes, g.i64("", [-1, 4])], scope="/nms")
    g.op("Gather", [flat_boxes, flat], scope="/nms", output="det_boxes", axis=0)
    g.op("GatherND", [scores, sel], scope="/nms", output="det_scores", batch_dims=0)
    g.output("selected_indices", I64, ["num_selected", 3])
    g.output("det_boxes", F32, ["num_selected", 4])
    g.output("det_scores", F32, ["num_selected"])
    g.save(folder, "detector_nms")
    return Built(inputs=image_feeds("images", 3, img, img, fixed_batch=1))


# ----------------------------------------------------------------------------------------------
# 5. wav2vec2-like Conv1d feature encoder
# ----------------------------------------------------------------------------------------------


@_zoo(
    "audio_conv1d",
    "audio",
    notes="rank-3 Conv (k10 s5, k3 s2, k2 s2, no bias); GroupNorm as torch exports it "
    "(Reshape/InstanceNormalization/Reshape/Mul/Add); LayerNorm over channels between two "
    "Transposes; erf GELU; Transpose + LayerNormalization + MatMul projection",
)
def build_audio_conv1d(folder: Path) -> Built:
    g = _G(105, opset=17)
    c = 32
    x = g.input("input_values", F32, [B, 1, 4000])
    s0 = "feature_extractor.conv_layers.0"
    y = conv(g, x, 1, c, 10, f"{s0}.conv", stride=5, pad=0, bias=False, rank=1)  # L 799
    # GroupNorm(num_groups=c, num_channels=c) as torch exports it
    shp = g.op("Shape", [y], scope=f"/{s0}/layer_norm")
    r = g.op("Reshape", [y, g.i64(f"/{s0}/layer_norm", [0, c, -1])], scope=f"/{s0}/layer_norm")
    r = g.op(
        "InstanceNormalization",
        [
            r,
            g.init(f"{s0}.in_scale", np.ones(c, np.float32)),
            g.init(f"{s0}.in_bias", np.zeros(c, np.float32)),
        ],
        scope=f"/{s0}/layer_norm",
        epsilon=1e-5,
    )
    r = g.op("Reshape", [r, shp], scope=f"/{s0}/layer_norm")
    r = g.op("Mul", [r, g.init(f"{s0}.layer_norm.weight", g.uniform((c, 1), 0.7, 1.3))])
    r = g.op("Add", [r, g.init(f"{s0}.layer_norm.bias", g.normal((c, 1), 0.1))])
    y = gelu(g, r, f"/{s0}/activation")
    for i, (k, s) in enumerate(((3, 2), (3, 2), (2, 2)), start=1):
        sc = f"feature_extractor.conv_layers.{i}"
        y = conv(g, y, c, c, k, f"{sc}.conv", stride=s, pad=0, bias=False, rank=1)
        if i == 1:  # wav2vec2 "layer" norm: transpose(-2, -1) -> LayerNorm -> transpose back
            t = g.op("Transpose", [y], scope=f"/{sc}/layer_norm", perm=[0, 2, 1])
            t = g.op(
                "LayerNormalization",
                [
                    t,
                    g.init(f"{sc}.layer_norm.weight", g.uniform((c,), 0.7, 1.3)),
                    g.init(f"{sc}.layer_norm.bias", g.normal((c,), 0.1)),
                ],
                scope=f"/{sc}/layer_norm",
                axis=-1,
                epsilon=1e-5,
            )
            y = g.op("Transpose", [t], scope=f"/{sc}/layer_norm", perm=[0, 2, 1])
        y = gelu(g, y, f"/{sc}/activation")
    # L: 799 -> 399 -> 199 -> 99
    t = g.op("Transpose", [y], scope="/feature_projection", perm=[0, 2, 1])
    t = g.op(
        "LayerNormalization",
        [
            t,
            g.init("feature_projection.layer_norm.weight", g.uniform((c,), 0.8, 1.2)),
            g.init("feature_projection.layer_norm.bias", g.normal((c,), 0.05)),
        ],
        scope="/feature_projection/layer_norm",
        axis=-1,
        epsilon=1e-5,
    )
    w = g.init("feature_projection.projection.weight_t", g.normal((c, 48), 1 / math.sqrt(c)))
    t = g.op("MatMul", [t, w], scope="/feature_projection/projection")
    bias = g.init("feature_projection.projection.bias", g.normal((48,), 0.02))
    g.op("Add", [bias, t], scope="/feature_projection/projection", output="last_hidden_state")
    g.output("last_hidden_state", F32, [B, 99, 48])
    g.save(folder, "audio_conv1d")
    return Built(inputs=image_feeds("input_values", 1, 4000))


# ----------------------------------------------------------------------------------------------
# 6. UNet with MaxPool, ConvTranspose, skip Concat and reflect / edge Pad
# ----------------------------------------------------------------------------------------------


@_zoo(
    "unet_convtranspose",
    "segmentation",
    notes="opset 19 (IR 9), odd sizes (42/21/10/5): MaxPool (floor, ceil_mode=1), ConvTranspose "
    "k3 s2 p1 and k4 s2 p1 with output_padding 1, k2 s2; skip Concat; Pad reflect and edge "
    "(pads a Constant input) before an unpadded 3x3 Conv; an opset-19 linear Resize to "
    "sizes from Shape chains",
)
def build_unet_convtranspose(folder: Path) -> Built:
    g = _G(106, opset=19)
    x = g.input("input", F32, [B, 3, 42, 42])

    def block(x, cin, cout, scope, mode):
        pads = g.i64(f"/{scope}", [0, 0, 1, 1, 0, 0, 1, 1])
        x = g.op("Pad", [x, pads], scope=f"/{scope}", mode=mode)
        x = conv(g, x, cin, cout, 3, f"{scope}.conv", pad=0)
        return g.op("Relu", [bn(g, x, cout, f"{scope}.bn")], scope=f"/{scope}")

    def pool(x, scope, ceil=0):
        return g.op(
            "MaxPool",
            [x],
            scope=f"/{scope}",
            ceil_mode=ceil,
            kernel_shape=[2, 2],
            pads=[0, 0, 0, 0],
            strides=[2, 2],
        )

    def up(x, cin, cout, k, scope, pad, out_pad):
        w = g.init(f"{scope}.weight", g.normal((cin, cout, k, k), math.sqrt(1.0 / (cin * k))))
        b = g.init(f"{scope}.bias", g.normal((cout,), 0.05))
        return g.op(
            "ConvTranspose",
            [x, w, b],
            scope=f"/{scope}",
            dilations=[1, 1],
            group=1,
            kernel_shape=[k, k],
            output_padding=[out_pad, out_pad],
            pads=[pad] * 4,
            strides=[2, 2],
        )

    e1 = block(x, 3, 8, "enc1", "reflect")  # 42
    e2 = block(pool(e1, "pool1"), 8, 16, "enc2", "reflect")  # 21
    e3 = block(pool(e2, "pool2"), 16, 32, "enc3", "edge")  # 10 (floor drops a row)
    m = block(pool(e3, "pool3", ceil=1), 32, 64, "mid", "edge")  # 5
    d3 = up(m, 64, 32, 3, "up3", 1, 1)  # (5-1)*2 - 2 + 3 + 1 = 10
    d3 = block(g.op("Concat", [d3, e3], scope="/dec3", axis=1), 64, 32, "dec3", "edge")
    d2 = up(d3, 32, 16, 4, "up2", 1, 1)  # (10-1)*2 - 2 + 4 + 1 = 21
    d2 = block(g.op("Concat", [d2, e2], scope="/dec2", axis=1), 32, 16, "dec2", "reflect")
    d1 = up(d2, 16, 8, 2, "up1", 0, 0)  # (21-1)*2 + 2 = 42
    d1 = block(g.op("Concat", [d1, e1], scope="/dec1", axis=1), 16, 8, "dec1", "reflect")
    w = g.init("out.weight", g.normal((2, 8, 1, 1), math.sqrt(1.0 / 8)))
    b = g.init("out.bias", g.normal((2,), 0.05))
    y = g.op("Conv", [d1, w, b], scope="/out", kernel_shape=[1, 1])
    # deep supervision from the bottleneck: 1x1 conv, then an opset-19 Resize (no antialias
    # attribute) to the input's size, sizes from a Shape chain
    aux = conv(g, m, 64, 2, 1, "aux", gain=1.0)
    n_c = g.op("Slice", [g.op("Shape", [aux]), g.i64("", [0]), g.i64("", [2]), g.i64("", [0])])
    hw = g.op("Slice", [g.op("Shape", [x]), g.i64("", [2]), g.i64("", [4]), g.i64("", [0])])
    sizes = g.op("Concat", [n_c, hw], scope="/aux", axis=0)
    aux = g.op(
        "Resize",
        [aux, "", "", sizes],
        scope="/aux",
        coordinate_transformation_mode="pytorch_half_pixel",
        mode="linear",
    )
    g.op("Add", [y, aux], scope="", output="output")
    g.output("output", F32, [B, 2, 42, 42])
    g.save(folder, "unet_convtranspose")
    return Built(inputs=image_feeds("input", 3, 42, 42))


# ----------------------------------------------------------------------------------------------
# 7. An old producer's model: batch written as dim_value -1, opset 11, IR 6
# ----------------------------------------------------------------------------------------------


def _vi_neg1(name: str, elem: int, tail) -> onnx.ValueInfoProto:
    """A value info whose first dim is literally ``dim_value: -1`` (keras2onnx, old tf2onnx)."""
    vi = helper.make_tensor_value_info(name, elem, [1, *tail])
    vi.type.tensor_type.shape.dim[0].dim_value = -1
    return vi


@_zoo(
    "old_producer_neg1",
    "vision",
    notes="keras2onnx-style: opset 11, IR 6, NHWC input with Transpose, batch written as "
    "dim_value -1 on the graph input/output and on internal value_info; Reshape [-1, n]",
)
def build_old_producer_neg1(folder: Path) -> Built:
    g = _G(107, opset=11)
    g.inputs.append(_vi_neg1("input_1", F32, [28, 28, 1]))
    x = g.op("Transpose", ["input_1"], scope="conv2d", perm=[0, 3, 1, 2])
    x = g.op("Relu", [conv(g, x, 1, 8, 3, "conv2d", pad=1)], scope="conv2d")
    x = g.op("MaxPool", [x], scope="max_pooling2d", kernel_shape=[2, 2], strides=[2, 2])
    g.value_info.append(_vi_neg1(x, F32, [8, 14, 14]))
    x = g.op("Relu", [conv(g, x, 8, 16, 3, "conv2d_1", pad=1)], scope="conv2d_1")
    x = g.op("MaxPool", [x], scope="max_pooling2d_1", kernel_shape=[2, 2], strides=[2, 2])
    x = g.op("Transpose", [x], scope="max_pooling2d_1", perm=[0, 2, 3, 1])  # back to NHWC
    g.value_info.append(_vi_neg1(x, F32, [7, 7, 16]))
    x = g.op("Reshape", [x, g.init("flatten/shape", np.array([-1, 784], np.int64))], "flatten")
    g.value_info.append(_vi_neg1(x, F32, [784]))
    w1 = g.init("dense/kernel", g.normal((784, 32), math.sqrt(2.0 / 784)))
    x = g.op("Add", [g.op("MatMul", [x, w1], "dense"), g.init("dense/bias", g.normal((32,), 0.05))])
    x = g.op("Relu", [x], "dense")
    w2 = g.init("dense_1/kernel", g.normal((32, 10), math.sqrt(2.0 / 32)))
    x = g.op("MatMul", [x, w2], "dense_1")
    x = g.op("Add", [x, g.init("dense_1/bias", g.normal((10,), 0.05))], "dense_1")
    g.op("Softmax", [x], "dense_1", output="dense_1/Softmax:0", axis=1)
    g.outputs.append(_vi_neg1("dense_1/Softmax:0", F32, [10]))
    g.save(folder, "old_producer_neg1", ir_version=6)
    return Built(
        inputs=image_feeds("input_1", 28, 28, 1, channel_axis=-1),
        producer="keras2onnx layout (-1 dims)",
    )


# ----------------------------------------------------------------------------------------------
# 9. Squeeze-excitation + channel shuffle (ShuffleNetV2-like)
# ----------------------------------------------------------------------------------------------


@_zoo(
    "se_shuffle_net",
    "vision",
    notes="opset 18 ShuffleNetV2 units: Split (chunk) with num_outputs=2, depthwise 3x3/5x5 "
    "at stride 1 and 2, SE (GlobalAveragePool/Conv/Relu/Conv/HardSigmoid/Mul), channel shuffle as "
    "Reshape [N,g,C/g,H,W] (Shape chain) -> Transpose -> Reshape [N,-1,H,W]",
)
def build_se_shuffle_net(folder: Path) -> Built:
    g = _G(109, opset=18)
    x = g.input("input", F32, [B, 3, 64, 64])
    x = conv_bn(g, x, 3, 24, 3, "conv1", stride=2)  # 32
    x = g.op(
        "MaxPool",
        [x],
        scope="/maxpool",
        ceil_mode=0,
        kernel_shape=[3, 3],
        pads=[1, 1, 1, 1],
        strides=[2, 2],
    )  # 16

    def se(x, c, scope):
        s = g.op("GlobalAveragePool", [x], scope=f"/{scope}/avgpool")
        s = g.op("Relu", [conv(g, s, c, c // 4, 1, f"{scope}.fc1", gain=2.0)], scope=f"/{scope}")
        s = conv(g, s, c // 4, c, 1, f"{scope}.fc2", gain=2.0)
        s = g.op("HardSigmoid", [s], scope=f"/{scope}", alpha=1.0 / 6.0, beta=0.5)
        return g.op("Mul", [s, x], scope=f"/{scope}")

    def shuffle(x, c, groups, scope):
        n, h, w = g.dims(x, [0, 2, 3], f"/{scope}")
        x = g.op("Reshape", [x, g.shape_of([n, groups, c // groups, h, w], f"/{scope}")])
        x = g.op("Transpose", [x], scope=f"/{scope}", perm=[0, 2, 1, 3, 4])
        n, h, w = g.dims(x, [0, 3, 4], f"/{scope}")
        return g.op("Reshape", [x, g.shape_of([n, -1, h, w], f"/{scope}")], scope=f"/{scope}")

    def branch(x, cin, c, k, stride, scope):
        y = conv_bn(g, x, cin, c, 1, f"{scope}.0")
        y = conv_bn(g, y, c, c, k, f"{scope}.3", stride=stride, groups=c, relu=False)
        y = conv_bn(g, y, c, c, 1, f"{scope}.5")
        return se(y, c, f"{scope}.se")

    # downsampling unit: both branches stride 2
    s = "stage2.0"
    b1 = conv_bn(g, x, 24, 24, 3, f"{s}.branch1.0", stride=2, groups=24, relu=False)
    b1 = conv_bn(g, b1, 24, 24, 1, f"{s}.branch1.2")
    b2 = branch(x, 24, 24, 5, 2, f"{s}.branch2")
    x = shuffle(g.op("Concat", [b1, b2], scope=f"/{s}", axis=1), 48, 2, s)  # 8x8
    for i, k in ((1, 3), (2, 5)):
        s = f"stage2.{i}"
        x1, x2 = g.split2(x, 24, f"/{s}")
        b2 = branch(x2, 24, 24, k, 1, f"{s}.branch2")
        x = shuffle(g.op("Concat", [x1, b2], scope=f"/{s}", axis=1), 48, 2, s)
    x = conv_bn(g, x, 48, 64, 1, "conv5")
    return classifier(g, x, 64, folder, "se_shuffle_net", 64)


# ----------------------------------------------------------------------------------------------
# 10. DenseNet
# ----------------------------------------------------------------------------------------------


@_zoo(
    "dense_net",
    "vision",
    notes="opset 13 torchvision DenseNet: every layer starts with a Concat of all previous "
    "features (a one-input Concat for the first), BN/Relu/1x1/BN/Relu/3x3, transition "
    "BN/Relu/1x1 + AveragePool 2x2",
)
def build_dense_net(folder: Path) -> Built:
    g = _G(110, opset=13)
    growth, bott = 8, 32
    x = g.input("input", F32, [B, 3, 32, 32])
    x = conv(g, x, 3, 16, 3, "features.conv0", bias=False)
    x = g.op("Relu", [bn(g, x, 16, "features.norm0")], scope="/features/relu0")
    x = g.op(
        "MaxPool",
        [x],
        scope="/features/pool0",
        ceil_mode=0,
        kernel_shape=[3, 3],
        pads=[1, 1, 1, 1],
        strides=[2, 2],
    )  # 16x16
    c = 16
    for bi in (1, 2):
        feats = [x]
        for li in range(1, 4):
            s = f"features.denseblock{bi}.denselayer{li}"
            y = g.op("Concat", list(feats), scope=f"/{s}", axis=1)
            cin = c + growth * (li - 1)
            y = g.op("Relu", [bn(g, y, cin, f"{s}.norm1")], scope=f"/{s}/relu1")
            y = conv(g, y, cin, bott, 1, f"{s}.conv1", bias=False)
            y = g.op("Relu", [bn(g, y, bott, f"{s}.norm2")], scope=f"/{s}/relu2")
            feats.append(conv(g, y, bott, growth, 3, f"{s}.conv2", bias=False))
        x = g.op("Concat", feats, scope=f"/features/denseblock{bi}", axis=1)
        c += 3 * growth
        if bi == 1:
            s = "features.transition1"
            x = g.op("Relu", [bn(g, x, c, f"{s}.norm")], scope=f"/{s}/relu")
            x = conv(g, x, c, c // 2, 1, f"{s}.conv", bias=False)
            c //= 2
            x = g.op(
                "AveragePool",
                [x],
                scope=f"/{s}/pool",
                ceil_mode=0,
                count_include_pad=1,
                kernel_shape=[2, 2],
                pads=[0, 0, 0, 0],
                strides=[2, 2],
            )
    x = g.op("Relu", [bn(g, x, c, "features.norm5")], scope="")
    return classifier(g, x, c, folder, "dense_net", 32)


# ----------------------------------------------------------------------------------------------
# 12. Classifier with post-processing in the graph
# ----------------------------------------------------------------------------------------------


@_zoo(
    "topk_argmax_head",
    "vision",
    notes="opset 18: TopK (k=5 input), ArgMax, ReduceMax/ReduceMin/ReduceSum with axes inputs, "
    "Greater/Less/Equal, Where, And/Or/Not, Cast of bool; every output follows the batch",
)
def build_topk_argmax_head(folder: Path) -> Built:
    g = _G(112, opset=18)
    k, classes = 5, 20
    x = g.input("input", F32, [B, 3, 32, 32])
    x = conv_bn(g, x, 3, 16, 3, "features.0", stride=2)
    x = conv_bn(g, x, 16, 32, 3, "features.1", stride=2, relu=False)  # zero-mean features
    logits = head(g, x, 32, classes, output="logits")
    logits = g.op("Mul", [logits, g.f32("/post", 2.0)], scope="/post")  # temperature 1/2
    probs = g.op("Softmax", [logits], scope="/post", axis=-1)
    top_v, top_i = "topk_values", "topk_indices"
    g.nodes.append(
        helper.make_node(
            "TopK",
            [probs, g.i64("/post", [k])],
            [top_v, top_i],
            name="/post/TopK",
            axis=-1,
            largest=1,
            sorted=1,
        )
    )
    am = g.op("ArgMax", [logits], scope="/post", output="argmax", axis=1, keepdims=0)
    maxp = g.reduce("ReduceMax", probs, [1], "/post")
    minp = g.reduce("ReduceMin", probs, [1], "/post")
    is_max = g.op("Equal", [probs, maxp], scope="/post")
    is_min = g.op("Equal", [probs, minp], scope="/post")
    above = g.op("Greater", [probs, g.f32("/post", 0.04)], scope="/post")
    keep = g.op("Or", [is_max, g.op("And", [above, g.op("Not", [is_min])])], scope="/post")
    g.op("Where", [keep, probs, g.f32("/post", 0.0)], scope="/post", output="filtered_probs")
    kept = g.op("Cast", [keep], scope="/post", to=I64)
    g.reduce("ReduceSum", kept, [1], "/post", keepdims=0)
    g.nodes[-1].output[0] = "num_kept"
    unsure = g.op("Less", [maxp, g.f32("/post", 0.25)], scope="/post")
    g.op("Cast", [unsure], scope="/post", output="unsure", to=TensorProto.BOOL)
    top1 = g.op("Gather", [top_i, g.i64("/post", 0)], scope="/post", axis=1)
    g.op(
        "Cast",
        [g.op("Equal", [top1, am], scope="/post")],
        scope="/post",
        output="agree",
        to=TensorProto.INT32,
    )
    spread = g.op("Sub", [top_v, minp], scope="/post")
    below = g.op("Cast", [g.op("Not", [above], scope="/post")], scope="/post", to=F32)
    g.op("Mul", [probs, below], scope="/post", output="below_probs")
    g.op("Identity", [spread], scope="/post", output="spread")
    for name, elem, tail in (
        ("logits", F32, [classes]),
        (top_v, F32, [k]),
        (top_i, I64, [k]),
        ("argmax", I64, []),
        ("filtered_probs", F32, [classes]),
        ("num_kept", I64, []),
        ("unsure", TensorProto.BOOL, [1]),
        ("agree", TensorProto.INT32, []),
        ("below_probs", F32, [classes]),
        ("spread", F32, [k]),
    ):
        g.output(name, elem, [B, *tail])
    g.save(folder, "topk_argmax_head")
    return Built(inputs=image_feeds("input", 3, 32, 32))


from models_onnx_text import *  # noqa: E402, F403  (registers the text-like models)
