"""Integer products with constant 8-bit weights (quantize_dynamic's MatMulInteger and
ConvInteger) in the form the device runs best.

A MatMulInteger the target's int8 kernel takes (its kernel info store says so) stays as it
is: oneDNN's u8 x s8 -> s32 matmul with the weights kept 8-bit. Any other such product with
constant weights becomes the exact float32 product of the centred weights when the sums fit
float32's integers (`centred_weights`); past that bound it stays for the host. Each node's
bound is computed once, by the pass that rewrites it.
"""

from __future__ import annotations

import numpy as np

from ..dtypes import DType
from ..ir import Graph, Node, Value
from ..partition.placement import device_accepts
from ..passes import PassResult
from ..target import Target

# An integer product in float32 is exact while every partial sum is an integer below 2^24.
_F32_EXACT = 1 << 24
_ONNX_FLOAT, _ONNX_INT32 = 1, 6
_OPS = ("ConvInteger", "MatMulInteger")
# Ops that only reshape an addend (its values pass through unchanged).
_VIEWS = ("Reshape", "Unsqueeze", "Squeeze", "Flatten")


def centred_weights(node: Node) -> np.ndarray | None:
    """ConvInteger's / MatMulInteger's constant 8-bit weights less their constant zero
    point (per output channel / column, or one), as float32, when the integer sums are
    exact in float32 for any 8-bit input: 255 * the largest sum of |w - zw| into one output
    is below 2^24 (each partial sum is then an integer that float32 holds). Else None."""
    x, w = node.input(0), node.input(1)
    zx = node.input(2) if len(node.inputs) > 2 else None
    zw = node.input(3) if len(node.inputs) > 3 else None
    if x is None or w is None or not w.is_constant or x.meta is None or \
            (zx is not None and (zx.meta is None or zx.meta.numel != 1)) or \
            (zw is not None and not zw.is_constant) or len(node.outputs) != 1:
        return None
    wq = np.asarray(w.const)
    if wq.dtype not in (np.uint8, np.int8) or wq.ndim < 2:
        return None
    zp = np.zeros((), np.int64) if zw is None else np.asarray(zw.const).astype(np.int64)
    conv = node.op_type == "ConvInteger"
    outputs = wq.shape[0] if conv else wq.shape[-1]
    if zp.size not in (1, outputs):
        return None
    if zp.size > 1:
        zp = zp.reshape((-1,) + (1,) * (wq.ndim - 1)) if conv else zp.reshape(-1)
    # int16 holds every difference of two 8-bit values; the sums are taken in int64
    centred = wq.astype(np.int16) - zp.astype(np.int16).reshape(zp.shape if zp.size > 1
                                                                 else ())
    magnitude = np.abs(centred)
    sums = magnitude.reshape(outputs, -1).sum(axis=1, dtype=np.int64) if conv else \
        magnitude.sum(axis=-2, dtype=np.int64)
    if 255 * int(sums.max(initial=0)) >= _F32_EXACT:
        return None
    return centred.astype(np.float32)


def as_float_product(graph: Graph, node: Node, centred: np.ndarray) -> None:
    """ConvInteger / MatMulInteger with constant 8-bit weights as the float32 Conv / MatMul
    of the `centred` weights, exact (see `centred_weights`): the device runs it with
    oneDNN's float kernels, the weights packed once at load (the int32 products ran in
    numpy, ~100x slower than the model's float twin). Its int32 result is a Cast of the
    float one; a reader that casts it back to float32 (dynamic quantization's rescale)
    reads the float result itself, which is the same value."""
    weights = graph.add_constant(None, centred)
    x, zx = node.inputs[0], node.input(2) if len(node.inputs) > 2 else None
    name = node.name
    xf = graph.add_node("Cast", [x], attrs={"to": _ONNX_FLOAT},
                        name=graph.unique_name(f"{name}_x"), after=node).outputs[0]
    if zx is not None:
        zf = graph.add_node("Cast", [zx], attrs={"to": _ONNX_FLOAT},
                            name=graph.unique_name(f"{name}_zero_point")).outputs[0]
        xf = graph.add_node("Sub", [xf, zf], name=graph.unique_name(f"{name}_centred")
                            ).outputs[0]
    if node.op_type == "ConvInteger":
        attrs = {k: v for k, v in node.attrs.items() if not k.startswith("_")}
        # Both operands are integers of magnitude <= 255 and the sums stay below 2^24: the
        # device may multiply them as bfloat16 (exact) with float32 sums (kernels_conv.cc).
        attrs["_integer_operands"] = 1
        product = graph.add_node("Conv", [xf, weights], attrs=attrs,
                                 name=graph.unique_name(name)).outputs[0]
    else:
        product = graph.add_node("MatMul", [xf, weights], name=graph.unique_name(name)
                                 ).outputs[0]
    result = node.outputs[0]
    for user in list(dict.fromkeys(result.users)):
        if user.op_type == "Cast" and user.attrs.get("to") == _ONNX_FLOAT:
            graph.replace_all_uses(user.outputs[0], product)  # the Cast is dead then
        elif user.op_type == "Add":
            _add_in_float(graph, user, result, product)
    cast = graph.add_node("Cast", [product], outputs=0, attrs={"to": _ONNX_INT32},
                          name=graph.unique_name(f"{name}_int32"))
    graph.hand_over_outputs(node, [cast])


def _float_addend(b: Value | None) -> bool:
    """Whether the int32 addend `b` of an integer product y (|y| < 2^24, see
    `centred_weights`) holds only values float32 holds exactly, so that the float sum
    y + float(b) is the correctly rounded int32 sum and Cast(float) of the int32 sum reads
    the same: a constant with |b| <= 2^24, or (through reshapes) a Cast to int32 of a float32
    (quantize_dynamic's bias, Floor(bias / scale)): a truncated float32 below 2^31 is a
    float32 integer. Past |b| >= 2^31 - 2^24 the reference's int32 sum could wrap where the
    float one does not: that bias is 2^31 quantization steps, not a trained one."""
    while b is not None and b.producer is not None and b.producer.op_type in _VIEWS:
        b = b.producer.input(0)
    if b is None or b.meta is None or b.meta.dtype is not DType.INT32:
        return False
    if b.is_constant:
        return bool(np.all(np.abs(np.asarray(b.const, np.int64)) <= _F32_EXACT))
    cast = b.producer
    if cast is None or cast.op_type != "Cast" or cast.attrs.get("to") != _ONNX_INT32:
        return False
    source = cast.input(0)
    return source is not None and source.meta is not None and \
        source.meta.dtype is DType.FLOAT32


def _add_in_float(graph: Graph, add: Node, result: Value, product: Value) -> None:
    """The integer product's int32 Add of an addend (quantize_dynamic's bias) read as
    float32: its float readers read the float product plus the addend as float32 instead,
    which is the same value (`_float_addend`); the int32 Add, and the product's Cast to int32
    (a saturating conversion pass over the output), go when nothing else reads them."""
    if len(add.inputs) != 2 or len(add.outputs) != 1 or \
            (add.input(0) is result) == (add.input(1) is result):
        return
    b = add.input(1) if add.input(0) is result else add.input(0)
    readers = [r for r in dict.fromkeys(add.outputs[0].users)
               if r.op_type == "Cast" and r.attrs.get("to") == _ONNX_FLOAT]
    if not readers or not _float_addend(b):
        return
    bf = graph.add_node("Cast", [b], attrs={"to": _ONNX_FLOAT},
                        name=graph.unique_name(f"{add.name}_addend")).outputs[0]
    total = graph.add_node("Add", [product, bf], name=graph.unique_name(f"{add.name}_float")
                           ).outputs[0]
    for reader in readers:
        graph.replace_all_uses(reader.outputs[0], total)


def lower_integer_products(graph: Graph, target: Target | None = None) -> PassResult:
    """Leaves to the device's int8 kernel the MatMulIntegers it takes; makes the others
    with constant 8-bit weights exact float products where the bound allows. A node kept
    once its input's shape is known (int8 kernel or host) is marked so that the prepare
    stage's repeats do not weigh it again."""
    done = 0
    for node in list(graph.nodes):
        if node.op_type not in _OPS or node.attrs.get("_integer_kept"):
            continue
        x = node.input(0)
        final = x is not None and x.meta is not None and x.meta.is_static
        if node.op_type == "MatMulInteger" and device_accepts(node, target) is None:
            node.attrs["_integer_kept"] = "device"
            continue
        centred = centred_weights(node)
        if centred is None:
            if final:
                node.attrs["_integer_kept"] = "host"
            continue
        as_float_product(graph, node, centred)
        done += 1
    return PassResult(graph, done > 0, f"{done} integer products made float")
