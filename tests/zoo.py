"""Torch-free model zoo: ONNX models built node by node with ``onnx.helper`` and numpy.

Each builder returns an ``onnx.ModelProto`` (opset 17, IR version 8) with seeded random weights,
laid out the way torch's TorchScript exporter lays out the same architecture (see
``benchmarks/build_models.py``), so the compiler can be tested on these model families without
torch:

* Conv carries its own bias (``conv_bias``) and is followed by a separate BatchNormalization with
  non-trivial running statistics; ReLU6 is ``Clip`` with Constant min/max inputs; residuals are
  ``Add``; the head is GlobalAveragePool -> Flatten -> Gemm(transB=1).
* The BERT encoder has Gather embeddings + Add + LayerNormalization, MatMul + Add projections
  (bias first, as torch writes it), head split/merge via Reshape whose shape comes from
  Shape/Gather/Unsqueeze/Concat chains, Transpose, MatMul, Div by sqrt(d), Add of the extended
  mask (Unsqueeze/Unsqueeze/Cast/Sub/Mul), Softmax, erf-form GELU (Div, Erf, Add, Mul, Mul) and a
  Gather/Gemm/Tanh pooler.

Size knobs keep test models small. ``batch`` (and the BERT ``seq``) may be an int (static) or a
string, which makes that dimension symbolic with that name.
"""

from __future__ import annotations

import math
from collections import defaultdict

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 17
IR_VERSION = 8

__all__ = [
    "IR_VERSION",
    "OPSET",
    "bert",
    "branchy",
    "mlp",
    "mobilenetv2",
    "random_inputs",
    "resnet",
]


class _Graph:
    """Small node-by-node graph builder with torch-export-like value names."""

    def __init__(self, seed: int):
        self.rng = np.random.default_rng(seed)
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []
        self.inputs: list[onnx.ValueInfoProto] = []
        self.outputs: list[onnx.ValueInfoProto] = []
        self._counts: dict[tuple[str, str], int] = defaultdict(int)
        self._init_names: set[str] = set()

    # -- naming ---------------------------------------------------------------------------
    def _name(self, scope: str, op: str) -> str:
        k = self._counts[(scope, op)]
        self._counts[(scope, op)] += 1
        base = op if k == 0 else f"{op}_{k}"
        return f"{scope}/{base}"

    # -- values ---------------------------------------------------------------------------
    def input(self, name: str, elem: int, shape) -> str:
        self.inputs.append(helper.make_tensor_value_info(name, elem, list(shape)))
        return name

    def output(self, name: str, elem: int, shape) -> None:
        self.outputs.append(helper.make_tensor_value_info(name, elem, list(shape)))

    def init(self, name: str, array: np.ndarray) -> str:
        assert name not in self._init_names, name
        self._init_names.add(name)
        self.inits.append(numpy_helper.from_array(np.ascontiguousarray(array), name))
        return name

    def const(self, scope: str, value, dtype=np.float32) -> str:
        """A ``Constant`` node, the way torch emits small literals (scalars, shape pieces)."""
        arr = np.asarray(value, dtype=dtype)
        name = self._name(scope, "Constant")
        out = f"{name}_output_0"
        self.nodes.append(
            helper.make_node(
                "Constant", [], [out], name=name, value=numpy_helper.from_array(arr, out)
            )
        )
        return out

    def op(self, op: str, inputs, scope: str = "", output: str | None = None, **attrs) -> str:
        name = self._name(scope, op)
        out = output or f"{name}_output_0"
        self.nodes.append(helper.make_node(op, list(inputs), [out], name=name, **attrs))
        return out

    # -- random weights -------------------------------------------------------------------
    def normal(self, shape, std: float) -> np.ndarray:
        return (self.rng.standard_normal(shape) * std).astype(np.float32)

    def uniform(self, shape, lo: float, hi: float) -> np.ndarray:
        return self.rng.uniform(lo, hi, shape).astype(np.float32)

    # -- model ----------------------------------------------------------------------------
    def model(self, name: str) -> onnx.ModelProto:
        graph = helper.make_graph(self.nodes, name, self.inputs, self.outputs, self.inits)
        m = helper.make_model(
            graph,
            opset_imports=[helper.make_opsetid("", OPSET)],
            ir_version=IR_VERSION,
            producer_name="graphengine-tests-zoo",
        )
        onnx.checker.check_model(m, full_check=True)
        return m


def _dim(d):
    """int -> static dim; str -> symbolic dim name (``make_tensor_value_info`` accepts both)."""
    if isinstance(d, str):
        return d
    d = int(d)
    if d < 1:
        raise ValueError(f"dimension must be >= 1, got {d}")
    return d


# ----------------------------------------------------------------------------------------------
# Shared layer helpers
# ----------------------------------------------------------------------------------------------


def _gemm(g: _Graph, x: str, cin: int, cout: int, scope: str, output: str | None = None) -> str:
    w = g.init(f"{scope}.weight", g.normal((cout, cin), 1.0 / math.sqrt(cin)))
    b = g.init(f"{scope}.bias", g.normal((cout,), 0.02))
    return g.op("Gemm", [x, w, b], scope=f"/{scope}", output=output, alpha=1.0, beta=1.0, transB=1)


def _conv(
    g: _Graph,
    x: str,
    cin: int,
    cout: int,
    k: int,
    scope: str,
    stride: int = 1,
    groups: int = 1,
    bias: bool = True,
    gain: float = 2.0,
) -> str:
    fan_in = cin // groups * k * k
    w = g.init(f"{scope}.weight", g.normal((cout, cin // groups, k, k), math.sqrt(gain / fan_in)))
    ins = [x, w]
    if bias:
        ins.append(g.init(f"{scope}.bias", g.normal((cout,), 0.05)))
    p = k // 2
    return g.op(
        "Conv",
        ins,
        scope=f"/{scope}",
        dilations=[1, 1],
        group=groups,
        kernel_shape=[k, k],
        pads=[p, p, p, p],
        strides=[stride, stride],
    )


def _bn(g: _Graph, x: str, c: int, scope: str, gamma=(0.5, 1.0)) -> str:
    """Inference BatchNormalization with non-trivial affine params and running stats."""
    scale = g.init(f"{scope}.weight", g.uniform((c,), *gamma))
    bias = g.init(f"{scope}.bias", g.normal((c,), 0.1))
    mean = g.init(f"{scope}.running_mean", g.normal((c,), 0.1))
    var = g.init(f"{scope}.running_var", g.uniform((c,), 0.5, 1.5))
    return g.op(
        "BatchNormalization",
        [x, scale, bias, mean, var],
        scope=f"/{scope}",
        epsilon=1e-5,
        momentum=0.9,
    )


def _head(g: _Graph, x: str, cin: int, classes: int, batch) -> None:
    x = g.op("GlobalAveragePool", [x], scope="")
    x = g.op("Flatten", [x], scope="", axis=1)
    _gemm(g, x, cin, classes, "fc", output="output")
    g.output("output", TensorProto.FLOAT, [batch, classes])


def _out_size(n: int, k: int, s: int, p: int) -> int:
    return (n + 2 * p - k) // s + 1


# ----------------------------------------------------------------------------------------------
# Builders
# ----------------------------------------------------------------------------------------------


def mlp(batch=1, sizes=(784, 1024, 1024, 10), symbolic_batch=False, seed=0) -> onnx.ModelProto:
    """Gemm(+ReLU) stack: input "input" [batch, sizes[0]] -> output "output" [batch, sizes[-1]]."""
    if len(sizes) < 2:
        raise ValueError("mlp needs at least an input and an output size")
    b = "batch" if symbolic_batch else _dim(batch)
    g = _Graph(seed)
    x = g.input("input", TensorProto.FLOAT, [b, sizes[0]])
    n = len(sizes) - 1
    for i in range(n):
        last = i == n - 1
        x = _gemm(g, x, sizes[i], sizes[i + 1], f"net.{2 * i}", output="output" if last else None)
        if not last:
            x = g.op("Relu", [x], scope=f"/net.{2 * i + 1}")
    g.output("output", TensorProto.FLOAT, [b, sizes[-1]])
    return g.model("mlp")


def resnet_stem(g: _Graph, x: str, width: int, bias: bool, conv=None) -> str:
    """torchvision's ResNet stem: 7x7/2 conv (padded 3) -> BN -> ReLU -> 3x3/2 max pool."""
    x = (conv or _conv)(g, x, 3, width, 7, "conv1", stride=2, bias=bias)
    x = _bn(g, x, width, "bn1")
    x = g.op("Relu", [x], scope="/relu")
    return g.op("MaxPool", [x], scope="/maxpool", ceil_mode=0, dilations=[1, 1],
                kernel_shape=[3, 3], pads=[1, 1, 1, 1], strides=[2, 2])


def resnet(
    depths=(2, 2, 2, 2),
    width=64,
    image=224,
    classes=1000,
    batch=1,
    conv_bias=True,
    seed=0,
    downsample_last=False,
) -> onnx.ModelProto:
    """ResNet with BasicBlocks (ResNet-18 at the defaults).

    input "input" [batch, 3, image, image] -> output "output" [batch, classes].
    ``downsample_last`` emits a block's downsample branch after its main branch, as torch's
    exporter does for torchvision's Bottleneck (the residual Add then reads a value defined
    after the main branch's last Conv).
    """
    b = _dim(batch)
    g = _Graph(seed)
    x = resnet_stem(g, g.input("input", TensorProto.FLOAT, [b, 3, image, image]), width,
                    conv_bias)
    cin = width
    for i, n in enumerate(depths):
        cout = width * 2**i
        for j in range(n):
            s = f"layer{i + 1}.{j}"
            stride = 2 if (j == 0 and i > 0) else 1
            downsample = stride != 1 or cin != cout

            def _downsample(x=x, s=s, cin=cin, cout=cout, stride=stride):
                idn = _conv(g, x, cin, cout, 1, f"{s}.downsample.0", stride=stride, bias=conv_bias)
                return _bn(g, idn, cout, f"{s}.downsample.1", gamma=(0.3, 0.6))

            idn = _downsample() if downsample and not downsample_last else x
            y = _conv(g, x, cin, cout, 3, f"{s}.conv1", stride=stride, bias=conv_bias)
            y = _bn(g, y, cout, f"{s}.bn1")
            y = g.op("Relu", [y], scope=f"/{s}/relu")
            y = _conv(g, y, cout, cout, 3, f"{s}.conv2", bias=conv_bias)
            y = _bn(g, y, cout, f"{s}.bn2", gamma=(0.2, 0.5))
            if downsample and downsample_last:
                idn = _downsample()
            y = g.op("Add", [y, idn], scope=f"/{s}")
            x = g.op("Relu", [y], scope=f"/{s}/relu_1")
            cin = cout
    _head(g, x, cin, classes, b)
    return g.model("resnet")


def _make_divisible(v: float, divisor: int = 8) -> int:
    new_v = max(divisor, int(v + divisor / 2) // divisor * divisor)
    if new_v < 0.9 * v:
        new_v += divisor
    return new_v


_MBV2_SETTINGS = (
    # expansion t, channels c, repeats n, stride s
    (1, 16, 1, 1),
    (6, 24, 2, 2),
    (6, 32, 3, 2),
    (6, 64, 4, 2),
    (6, 96, 3, 1),
    (6, 160, 3, 2),
    (6, 320, 1, 1),
)


def mobilenetv2(
    width_mult=1.0, image=224, classes=1000, batch=1, conv_bias=True, seed=0
) -> onnx.ModelProto:
    """MobileNetV2 (inverted residuals, ReLU6 as Clip, depthwise Conv via ``group``).

    input "input" [batch, 3, image, image] -> output "output" [batch, classes].
    """
    b = _dim(batch)
    g = _Graph(seed)

    def conv_bn_relu6(x, cin, cout, k, scope, stride=1, groups=1):
        x = _conv(g, x, cin, cout, k, f"{scope}.0", stride=stride, groups=groups, bias=conv_bias)
        x = _bn(g, x, cout, f"{scope}.1")
        lo = g.const(f"/{scope}.2", 0.0)
        hi = g.const(f"/{scope}.2", 6.0)
        return g.op("Clip", [x, lo, hi], scope=f"/{scope}.2")

    x = g.input("input", TensorProto.FLOAT, [b, 3, image, image])
    cin = _make_divisible(32 * width_mult)
    last = _make_divisible(1280 * max(1.0, width_mult))
    x = conv_bn_relu6(x, 3, cin, 3, "features.0", stride=2)
    idx = 1
    for t, c, n, s in _MBV2_SETTINGS:
        cout = _make_divisible(c * width_mult)
        for i in range(n):
            stride = s if i == 0 else 1
            scope = f"features.{idx}.conv"
            hidden = round(cin * t)
            y, k = x, 0
            if t != 1:
                y = conv_bn_relu6(y, cin, hidden, 1, f"{scope}.{k}")
                k += 1
            y = conv_bn_relu6(y, hidden, hidden, 3, f"{scope}.{k}", stride=stride, groups=hidden)
            y = _conv(g, y, hidden, cout, 1, f"{scope}.{k + 1}", bias=conv_bias, gain=1.0)
            y = _bn(g, y, cout, f"{scope}.{k + 2}", gamma=(0.3, 0.6))
            x = g.op("Add", [x, y], scope=f"/features.{idx}") if stride == 1 and cin == cout else y
            cin = cout
            idx += 1
    x = conv_bn_relu6(x, cin, last, 1, f"features.{idx}")
    _head(g, x, last, classes, b)
    return g.model("mobilenetv2")


def bert(
    layers=4,
    hidden=256,
    heads=4,
    intermediate=1024,
    vocab=30522,
    seq=128,
    batch=1,
    max_positions=512,
    eps=1e-12,
    pooler=True,
    seed=0,
) -> onnx.ModelProto:
    """BERT encoder as torch exports it.

    inputs "input_ids", "attention_mask" int64 [batch, seq] -> outputs "last_hidden_state"
    [batch, seq, hidden] and (``pooler``) "pooler_output" [batch, hidden].
    """
    if hidden % heads:
        raise ValueError("hidden must be divisible by heads")
    if isinstance(seq, int) and seq > max_positions:
        raise ValueError("seq exceeds max_positions")
    b, s = _dim(batch), _dim(seq)
    d = hidden // heads
    g = _Graph(seed)
    ids = g.input("input_ids", TensorProto.INT64, [b, s])
    mask = g.input("attention_mask", TensorProto.INT64, [b, s])

    def i64(scope, v):
        return g.const(scope, v, np.int64)

    # Embeddings: positions sliced from a position_ids buffer by the runtime sequence length.
    pos_ids = g.init("position_ids", np.arange(max_positions, dtype=np.int64)[None, :])
    word = g.init("word.weight", g.normal((vocab, hidden), 1.0))
    pos_tab = g.init("position.weight", g.normal((max_positions, hidden), 1.0))
    shp = g.op("Shape", [ids])
    n = g.op("Gather", [shp, i64("", 1)], axis=0)
    end = g.op("Unsqueeze", [n, i64("", [0])])
    pos = g.op("Slice", [pos_ids, i64("", [0]), end, i64("", [1]), i64("", [1])])
    x = g.op(
        "Add",
        [
            g.op("Gather", [word, ids], scope="/word"),
            g.op("Gather", [pos_tab, pos], scope="/position"),
        ],
    )
    x = g.op("Add", [x, g.init("token_type_row", g.normal((hidden,), 1.0))])

    def layer_norm(x, scope, output=None):
        w = g.init(f"{scope}.weight", g.uniform((hidden,), 0.8, 1.2))
        bb = g.init(f"{scope}.bias", g.normal((hidden,), 0.05))
        return g.op(
            "LayerNormalization", [x, w, bb], scope=f"/{scope}", output=output, axis=-1, epsilon=eps
        )

    x = layer_norm(x, "ln")

    # Extended attention mask: (1 - mask[:, None, None, :]) * -10000
    m = g.op("Unsqueeze", [mask, i64("", [1])])
    m = g.op("Unsqueeze", [m, i64("", [2])])
    m = g.op("Cast", [m], to=TensorProto.FLOAT)
    m = g.op("Sub", [g.const("", 1.0), m])
    ext = g.op("Mul", [m, g.const("", -10000.0)])

    def linear(x, cin, cout, scope):
        w = g.init(f"{scope}.weight_t", g.normal((cin, cout), 1.0 / math.sqrt(cin)))
        bias = g.init(f"{scope}.bias", g.normal((cout,), 0.02))
        y = g.op("MatMul", [x, w], scope=f"/{scope}")
        return g.op("Add", [bias, y], scope=f"/{scope}")

    def dyn_shape(x, scope, tail):
        """Concat(Unsqueeze(Shape(x)[0]), Unsqueeze(Shape(x)[1]), *tail): torch's view() shape."""
        parts = []
        for axis in (0, 1):
            sh = g.op("Shape", [x], scope=scope)
            parts.append(g.op("Gather", [sh, i64(scope, axis)], scope=scope, axis=0))
        parts = [g.op("Unsqueeze", [p, i64(scope, [0])], scope=scope) for p in parts]
        return g.op("Concat", parts + [i64(scope, [t]) for t in tail], scope=scope, axis=0)

    def split_heads(x, scope):
        return g.op("Reshape", [x, dyn_shape(x, scope, (heads, d))], scope=scope, allowzero=0)

    for li in range(layers):
        p = f"layers.{li}"
        sa = f"/{p}/attn"
        q = linear(x, hidden, hidden, f"{p}.attn.query")
        q = g.op("Transpose", [split_heads(q, sa)], scope=sa, perm=[0, 2, 1, 3])
        k = split_heads(linear(x, hidden, hidden, f"{p}.attn.key"), sa)
        v = split_heads(linear(x, hidden, hidden, f"{p}.attn.value"), sa)
        v = g.op("Transpose", [v], scope=sa, perm=[0, 2, 1, 3])
        k = g.op("Transpose", [k], scope=sa, perm=[0, 2, 3, 1])
        scores = g.op("MatMul", [q, k], scope=sa)
        scores = g.op("Div", [scores, g.const(sa, math.sqrt(d))], scope=sa)
        scores = g.op("Add", [scores, ext], scope=sa)
        probs = g.op("Softmax", [scores], scope=sa, axis=-1)
        ctx = g.op("MatMul", [probs, v], scope=sa)
        ctx = g.op("Transpose", [ctx], scope=sa, perm=[0, 2, 1, 3])
        ctx = g.op("Reshape", [ctx, dyn_shape(ctx, sa, (hidden,))], scope=sa, allowzero=0)
        attn = linear(ctx, hidden, hidden, f"{p}.attn.out")
        x = layer_norm(g.op("Add", [x, attn], scope=f"/{p}"), f"{p}.ln1")

        h = linear(x, hidden, intermediate, f"{p}.fc1")
        act = f"/{p}/act"  # exact GELU: x * (1 + erf(x / sqrt 2)) * 0.5
        e = g.op("Erf", [g.op("Div", [h, g.const(act, math.sqrt(2.0))], scope=act)], scope=act)
        e = g.op("Add", [e, g.const(act, 1.0)], scope=act)
        h = g.op("Mul", [g.op("Mul", [h, e], scope=act), g.const(act, 0.5)], scope=act)
        h = linear(h, intermediate, hidden, f"{p}.fc2")
        last = li == layers - 1
        x = layer_norm(
            g.op("Add", [x, h], scope=f"/{p}"),
            f"{p}.ln2",
            output="last_hidden_state" if last else None,
        )
    if layers == 0:
        x = g.op("Identity", [x], output="last_hidden_state")
    g.output("last_hidden_state", TensorProto.FLOAT, [b, s, hidden])

    if pooler:
        first = g.op("Gather", [x, i64("", 0)], axis=1)
        pooled = _gemm(g, first, hidden, hidden, "pooler")
        g.op("Tanh", [pooled], output="pooler_output")
        g.output("pooler_output", TensorProto.FLOAT, [b, hidden])
    return g.model("bert")


def branchy(towers=4, channels=64, size=56, batch=1, depth=3, seed=0) -> onnx.ModelProto:
    """Parallel conv towers (depth x [Conv3x3 + Relu]) on one input, Concat, 1x1 Conv.

    input "input" [batch, channels, size, size] -> output "output" [batch, channels, size, size].
    """
    b = _dim(batch)
    g = _Graph(seed)
    x = g.input("input", TensorProto.FLOAT, [b, channels, size, size])
    outs = []
    for t in range(towers):
        y = x
        for j in range(depth):
            y = _conv(g, y, channels, channels, 3, f"towers.{t}.{2 * j}")
            y = g.op("Relu", [y], scope=f"/towers.{t}/{2 * j + 1}")
        outs.append(y)
    cat = g.op("Concat", outs, axis=1) if towers > 1 else outs[0]
    w = g.init(
        "join.weight",
        g.normal((channels, channels * towers, 1, 1), math.sqrt(1.0 / (channels * towers))),
    )
    bias = g.init("join.bias", g.normal((channels,), 0.05))
    g.nodes.append(
        helper.make_node(
            "Conv",
            [cat, w, bias],
            ["output"],
            name="/join/Conv",
            dilations=[1, 1],
            group=1,
            kernel_shape=[1, 1],
            pads=[0, 0, 0, 0],
            strides=[1, 1],
        )
    )
    g.output("output", TensorProto.FLOAT, [b, channels, size, size])
    return g.model("branchy")


# ----------------------------------------------------------------------------------------------
# Inputs
# ----------------------------------------------------------------------------------------------

_NP = {
    TensorProto.FLOAT: np.float32,
    TensorProto.DOUBLE: np.float64,
    TensorProto.FLOAT16: np.float16,
    TensorProto.INT64: np.int64,
    TensorProto.INT32: np.int32,
    TensorProto.INT8: np.int8,
    TensorProto.UINT8: np.uint8,
    TensorProto.BOOL: np.bool_,
}
_PASS_THROUGH = {"Cast", "Reshape", "Flatten", "Unsqueeze", "Squeeze", "Identity", "Expand"}


def gather_vocab(model: onnx.ModelProto, name: str) -> int | None:
    """Rows of the (axis-0) Gather table indexed by graph value ``name``, following shape-only
    ops (Cast, Reshape, Unsqueeze, ...); None when it feeds no such Gather."""
    graph = model.graph
    tables = {t.name: list(t.dims) for t in graph.initializer}
    for node in graph.node:
        if node.op_type == "Constant" and node.attribute and node.attribute[0].name == "value":
            tables[node.output[0]] = list(node.attribute[0].t.dims)
    users = defaultdict(list)
    for node in graph.node:
        for i in node.input:
            users[i].append(node)
    seen, todo = {name}, [name]
    while todo:
        cur = todo.pop()
        for node in users[cur]:
            if node.op_type == "Gather" and len(node.input) > 1 and node.input[1] == cur:
                axis = next((a.i for a in node.attribute if a.name == "axis"), 0)
                dims = tables.get(node.input[0])
                if dims and axis == 0:
                    return int(dims[0])
            elif node.op_type in _PASS_THROUGH and node.input[0] == cur:
                for o in node.output:
                    if o not in seen:
                        seen.add(o)
                        todo.append(o)
    return None


def random_inputs(
    model: onnx.ModelProto, seed: int = 0, batch: int = 1, dims: dict | None = None
) -> dict[str, np.ndarray]:
    """Valid random feeds for ``model``'s graph inputs.

    float: standard normal; integer inputs that index a Gather table: ids in [0, rows); inputs
    named like a mask: ones with 1..seq/8 trailing zeros per row (never all zero); other
    integers: 0/1. Symbolic dims take ``dims[name]``, else ``batch`` for the first axis and 128
    for later ones.
    """
    rng = np.random.default_rng(seed)
    inits = {t.name for t in model.graph.initializer}
    feeds: dict[str, np.ndarray] = {}
    for vi in model.graph.input:
        if vi.name in inits:
            continue
        tt = vi.type.tensor_type
        dtype = _NP.get(tt.elem_type)
        if dtype is None:
            raise ValueError(f"input {vi.name}: unsupported element type {tt.elem_type}")
        shape = []
        for i, dm in enumerate(tt.shape.dim):
            if dm.HasField("dim_value") and dm.dim_value > 0:
                shape.append(dm.dim_value)
            elif dims and dm.dim_param in dims:
                shape.append(int(dims[dm.dim_param]))
            else:
                shape.append(batch if i == 0 else 128)
        if np.issubdtype(dtype, np.floating):
            feeds[vi.name] = rng.standard_normal(shape).astype(dtype)
        elif dtype is np.bool_:
            feeds[vi.name] = np.ones(shape, np.bool_)
        elif "mask" in vi.name.lower():
            arr = np.ones(shape, dtype)
            if len(shape) >= 2 and shape[-1] > 1:
                rows = arr.reshape(-1, shape[-1])
                for r in rows:
                    z = min(int(rng.integers(1, max(2, shape[-1] // 8) + 1)), shape[-1] - 1)
                    r[shape[-1] - z :] = 0
            feeds[vi.name] = arr
        else:
            rows = gather_vocab(model, vi.name)
            feeds[vi.name] = rng.integers(0, rows or 2, size=shape).astype(dtype)
    return feeds
