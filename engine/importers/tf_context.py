"""What the TensorFlow importer (tf_import) works with: the GraphDef read and bounded, its
tensors and attributes as arrays, and the context converters write the IR through.

Layout: TensorFlow computes images as NHWC, the IR's convolutions and pools as NCHW. A 4-D
value may therefore be held in two forms, the plain one (as TensorFlow sees it) and its NCHW
transpose, each made on demand by a Transpose. Convolutions, pools and batch norms produce
only the NCHW form; elementwise ops, per-channel arithmetic, concatenation, padding and
spatial reductions of a value held as NCHW stay in NCHW (`tf_ops`). So between convolutions
no Transpose is written at all, and the ones left (after an image input, before a flatten)
are those the layout pass makes views of (optimize/layout_views.py).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from google.protobuf.message import DecodeError

from graphengine.tensorflow import graph_def_pb2 as tfpb

from .. import ops
from ..bounds import MAX_RANK, element_count
from ..dtypes import DType
from ..errors import InvalidModel, decode_problem
from ..ir import Dim, Graph, TensorMeta, Value

# TensorFlow's DataType numbers (types.proto) that have an IR dtype.
TF_DTYPES: dict[int, DType] = {
    1: DType.FLOAT32, 2: DType.FLOAT64, 3: DType.INT32, 4: DType.UINT8, 5: DType.INT16,
    6: DType.INT8, 9: DType.INT64, 10: DType.BOOL, 14: DType.BFLOAT16, 17: DType.UINT16,
    19: DType.FLOAT16, 22: DType.UINT32, 23: DType.UINT64,
}
# Which TensorProto field holds the values of a dtype when tensor_content is empty.
_VALUE_FIELD = {
    DType.FLOAT32: "float_val", DType.FLOAT64: "double_val", DType.INT32: "int_val",
    DType.INT16: "int_val", DType.INT8: "int_val", DType.UINT8: "int_val",
    DType.UINT16: "int_val", DType.INT64: "int64_val", DType.BOOL: "bool_val",
    DType.FLOAT16: "half_val", DType.BFLOAT16: "half_val", DType.UINT32: "uint32_val",
    DType.UINT64: "uint64_val",
}
# A TensorProto may give fewer values than its shape holds (TensorFlow repeats the last):
# a few bytes can then claim a huge tensor, so what is filled in this way is bounded.
MAX_SPLAT_ELEMENTS = 1 << 26
# Operands computed at import time from constants (tf_context.evaluate) are this small.
MAX_EVALUATED_ELEMENTS = 1 << 16
NCHW_FROM_NHWC = (0, 3, 1, 2)
NHWC_FROM_NCHW = (0, 2, 3, 1)


class TfNode:
    """One NodeDef as the converters read it: data inputs resolved to tensor names."""

    def __init__(self, nd: tfpb.NodeDef) -> None:
        self.name, self.op, self.attr = nd.name, nd.op, nd.attr
        self.inputs = [tensor_name(i) for i in nd.input if not i.startswith("^")]

    def fail(self, message: str) -> InvalidModel:
        return InvalidModel(f"node '{self.name}' ({self.op}): {message}", node=self.name)


def tensor_name(ref: str) -> str:
    """TensorFlow's "node:0" is "node"; "node:k" stays."""
    return ref[:-2] if ref.endswith(":0") else ref


def producer_name(ref: str) -> str:
    ref = ref.lstrip("^")
    head, sep, tail = ref.rpartition(":")
    return head if sep and tail.isdigit() else ref


# ---- reading the file ----------------------------------------------------------------------
def load_graphdef(model: Any) -> tfpb.GraphDef:
    if isinstance(model, tfpb.GraphDef):
        return model
    what = "bytes"
    if isinstance(model, (str, os.PathLike)):
        path = Path(model)
        what = f"'{path.name}'"
        try:
            model = path.read_bytes()
        except OSError as exc:
            raise InvalidModel(f"cannot read {what}: {exc.strerror}") from None
    elif hasattr(model, "SerializeToString"):  # tensorflow's own GraphDef message
        model = model.SerializeToString()
    gd = tfpb.GraphDef()
    try:
        gd.ParseFromString(bytes(model))
    except (DecodeError, RuntimeError, ValueError) as exc:
        raise InvalidModel(decode_problem(f"{what} are not a TensorFlow GraphDef"
                                          if what == "bytes" else
                                          f"{what} is not a TensorFlow GraphDef",
                                          "the graph", exc, model)) from None
    return gd


# ---- tensors and attributes ----------------------------------------------------------------
def dtype_of(code: int, what: str) -> DType:
    try:
        return TF_DTYPES[code]
    except KeyError:
        label = tfpb.DataType.Name(code) if code in tfpb.DataType.values() else str(code)
        raise InvalidModel(f"{what} has TensorFlow dtype {label}, which has no counterpart "
                           f"here") from None


def shape_of(proto: tfpb.TensorShapeProto, what: str) -> tuple[int, ...] | None:
    """Dims of a TensorShapeProto (-1 for unknown ones); None for an unknown rank."""
    if proto.unknown_rank:
        return None
    if len(proto.dim) > MAX_RANK:
        raise InvalidModel(f"{what}: rank {len(proto.dim)} exceeds the bound of {MAX_RANK}")
    dims = tuple(int(d.size) for d in proto.dim)
    if any(d < -1 for d in dims):
        raise InvalidModel(f"{what}: dimension below -1 in shape {list(dims)}")
    element_count(what, [max(d, 0) for d in dims])
    return dims


def tensor_from_tf(t: tfpb.TensorProto, what: str) -> np.ndarray:
    """A TensorProto's value, every size checked against the bytes or values present."""
    dtype = dtype_of(t.dtype, what)
    shape = shape_of(t.tensor_shape, what)
    if shape is None or -1 in shape:
        raise InvalidModel(f"{what}: a constant needs a fully known shape, got "
                           f"{'unknown rank' if shape is None else list(shape)}")
    np_dtype = dtype.numpy.newbyteorder("<") if dtype.numpy.itemsize > 1 else dtype.numpy
    if t.tensor_content:
        element_count(what, shape, present=len(t.tensor_content), unit=dtype.itemsize)
        return np.frombuffer(t.tensor_content, np_dtype).astype(dtype.numpy).reshape(shape)
    count = element_count(what, shape)
    values = getattr(t, _VALUE_FIELD[dtype])
    if len(values) > count:
        raise InvalidModel(f"{what}: shape {list(shape)} holds {count} values, the tensor "
                           f"gives {len(values)}")
    if len(values) < count and count > MAX_SPLAT_ELEMENTS:
        raise InvalidModel(f"{what}: shape {list(shape)} would be filled from "
                           f"{len(values)} values; at most {MAX_SPLAT_ELEMENTS} elements are "
                           f"filled so")
    if _VALUE_FIELD[dtype] in ("int_val", "half_val"):
        wide = np.asarray(values, np.int64)
        bits = dtype.numpy if dtype not in (DType.FLOAT16, DType.BFLOAT16) else np.uint16
        info = np.iinfo(bits)
        if wide.size and (wide.min() < info.min or wide.max() > info.max):
            raise InvalidModel(f"{what}: a value is outside the range of {dtype.value}")
        given = wide.astype(bits).view(dtype.numpy)
    else:
        given = np.asarray(values, dtype.numpy)
    out = np.zeros(count, dtype.numpy)
    out[:given.size] = given
    if 0 < given.size < count:
        out[given.size:] = given[-1]
    return out.reshape(shape)


class TfContext:
    """The graph being built and, per TensorFlow tensor name, its plain and NCHW forms."""

    def __init__(self, g: Graph, tf_names: set[str], shapes: dict[str, Sequence[int]],
                 keep_nchw: bool) -> None:
        self.g = g
        self.tf_names = tf_names
        self.shapes = shapes
        self.keep_nchw = keep_nchw
        self.plain: dict[str, Value] = {}
        self.nchw_forms: dict[str, Value] = {}

    # ---- names -----------------------------------------------------------------------------
    def fresh(self, prefix: str) -> str:
        while True:
            name = self.g.unique_name(prefix)
            if name not in self.tf_names:
                return name

    @staticmethod
    def out_name(node: TfNode, k: int = 0) -> str:
        return node.name if k == 0 else f"{node.name}:{k}"

    # ---- reading inputs --------------------------------------------------------------------
    def has_nchw(self, ref: str) -> bool:
        return ref in self.nchw_forms

    def value(self, ref: str) -> Value:
        """The plain (TensorFlow layout) form, transposed back from NCHW if need be."""
        v = self.plain.get(ref)
        if v is None:
            src = self.nchw_forms.get(ref)
            if src is None:
                raise InvalidModel(f"tensor '{ref}' is not produced (its node has no such "
                                   f"output)", tensor=ref)
            v = self.plain[ref] = self.emit("Transpose", [src], out=ref,
                                            perm=list(NHWC_FROM_NCHW))
        return v

    def nchw(self, ref: str) -> Value:
        """The NCHW form of a 4-D NHWC tensor, transposed from the plain one if need be."""
        v = self.nchw_forms.get(ref)
        if v is None:
            src = self.value(ref)
            if src.is_constant:
                return self.constant(np.transpose(src.const, NCHW_FROM_NHWC))
            if rank(src) not in (4, None):
                raise InvalidModel(f"tensor '{ref}' has rank {rank(src)}, not the 4 of "
                                   f"an NHWC image", tensor=ref)
            name = f"{ref}:nchw" if f"{ref}:nchw" not in self.g.values else None
            v = self.nchw_forms[ref] = self.emit("Transpose", [src], out=name,
                                                 perm=list(NCHW_FROM_NHWC))
        return v

    def input(self, node: TfNode, i: int) -> str:
        if i >= len(node.inputs):
            raise node.fail(f"has {len(node.inputs)} inputs, input {i} is needed")
        return node.inputs[i]

    def const(self, node: TfNode, i: int) -> np.ndarray:
        """A constant input's value (shape operands, axes, paddings, weights)."""
        v = self.value(self.input(node, i))
        arr = self.evaluate(v)
        if arr is None:
            raise node.fail(f"input {i} ('{v.name}') must be a constant, or computed from "
                            f"constants and static shapes only")
        return arr

    def evaluate(self, v: Value, depth: int = 0) -> np.ndarray | None:
        """The value of `v` when it follows from constants (and static shapes) alone, by the
        ops' reference kernels: Tensordot's permutations are ConcatV2s of constants. Only
        small values (shape operands, axes) are computed so."""
        if v.is_constant:
            return v.const
        node = v.producer
        if node is None or depth > 32 or v.meta is None or not v.meta.is_static \
                or v.meta.numel > MAX_EVALUATED_ELEMENTS:
            return None
        if node.op_type == "Shape":
            src = node.inputs[0]
            args = [np.broadcast_to(np.zeros((), np.int8), src.meta.shape)] \
                if src is not None and src.meta is not None and src.meta.is_static else None
        else:
            args = [None if u is None else self.evaluate(u, depth + 1) for u in node.inputs]
        if args is None or any(a is None and u is not None for a, u in zip(args, node.inputs)):
            return None
        out = np.asarray(ops.run_node(node, args)[v.index])
        return out.astype(v.meta.dtype.numpy, copy=False)

    # ---- writing ---------------------------------------------------------------------------
    def constant(self, array: np.ndarray, name: str | None = None) -> Value:
        return self.g.add_constant(name or self.fresh("tf_const"), np.asarray(array))

    def emit(self, op: str, inputs: Sequence[Value | None], *, out: str | None = None,
             **attrs: Any) -> Value:
        """One IR node; its output's type is inferred now where the inputs' types allow
        (the converters read ranks), else left to the compiler."""
        node = self.g.add_node(op, inputs, outputs=[out or self.fresh("tf")],
                               attrs=attrs, name=self.fresh(f"{op.lower()}"))
        if all(v is None or v.meta is not None for v in inputs):
            try:
                metas = ops.infer_node(node)
            except Exception:  # the compiler's inference reports it, naming the node
                metas = []
            for value, meta in zip(node.outputs, metas):
                value.meta = meta
        return node.outputs[0]

    def result(self, node: TfNode, op: str, inputs: Sequence[Value | None], *,
               nchw: bool = False, k: int = 0, **attrs: Any) -> Value:
        """The node's output k, in plain or NCHW form."""
        name = self.out_name(node, k)
        v = self.emit(op, inputs, out=f"{name}:nchw" if nchw else name, **attrs)
        self.set(node, v, nchw=nchw, k=k)
        return v

    def set(self, node: TfNode, value: Value, *, nchw: bool = False, k: int = 0) -> None:
        name = self.out_name(node, k)
        if not nchw:
            self.plain[name] = value
        elif self.keep_nchw:
            self.nchw_forms[name] = value
        else:
            self.nchw_forms[name] = value
            self.value(name)
            del self.nchw_forms[name]

    def graph_output(self, ref: str) -> Value:
        v = self.value(ref)
        if v.name != ref or v.is_constant or v in self.g.inputs:
            v = self.emit("Identity", [v], out=ref if ref not in self.g.values else None)
        return v

    # ---- inputs ----------------------------------------------------------------------------
    def placeholder(self, node: TfNode) -> None:
        what = f"Placeholder '{node.name}'"
        dtype = dtype_of(node.attr["dtype"].type, what) if "dtype" in node.attr else None
        if dtype is None:
            raise node.fail("has no dtype attribute")
        declared = shape_of(node.attr["shape"].shape, what) if "shape" in node.attr else None
        dims: tuple[int, ...] | None = declared
        if node.name in self.shapes:
            dims = tuple(int(d) for d in self.shapes[node.name])
            if declared is not None and len(declared) != len(dims):
                raise node.fail(f"the given shape {list(dims)} has rank {len(dims)}, the "
                                f"Placeholder's {list(declared)} rank {len(declared)}")
            if any(d < -1 for d in dims):
                raise node.fail(f"the given shape {list(dims)} has a dim below -1")
            element_count(what, [max(d, 0) for d in dims])
        shape: tuple[Dim, ...] | None = None
        if dims is not None:
            shape = tuple(d if d >= 0 else f"{node.name}_d{i}" for i, d in enumerate(dims))
        self.plain[node.name] = self.g.add_input(node.name, TensorMeta(dtype, shape))


def rank(v: Value) -> int | None:
    return v.meta.rank if v.meta is not None else None


__all__ = ["MAX_SPLAT_ELEMENTS", "NCHW_FROM_NHWC", "NHWC_FROM_NCHW", "TF_DTYPES", "TfContext",
           "TfNode", "dtype_of", "load_graphdef", "producer_name", "rank", "shape_of",
           "tensor_from_tf", "tensor_name"]
