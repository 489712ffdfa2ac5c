"""An ATen FX graph (after AOT autograd's decompositions) as a graphengine graph.

`FxConverter` walks the FX nodes in order and writes each through the builder
(`graphengine.Graph`), so every node's dtype and shape are inferred by the op schemas as it
is written and compared with what torch's fake tensors say (`_conform`): a converter that
gets a shape wrong fails at its node, naming it, instead of giving wrong numbers later.

Values: a tensor node is a builder `Tensor`; a SymInt node (a dim under `dynamic=True`) is a
0-d int64 tensor computed from the inputs' shapes (`Shape` + `Gather`), which the compiler's
value propagation folds once a run's shapes are known; a concrete int stays a Python int.
The per-op converters are tables in `aten_ops.py` and `aten_shapes.py`.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import torch
import torch.fx

from graphengine.engine.builder import Graph, Tensor

Converter = Callable[["FxConverter", torch.fx.Node, dict], Any]
CONVERTERS: dict[Any, Converter] = {}

# torch dtypes that cross into the engine (numpy has no bfloat16; complex has no ops here).
DTYPES = {
    torch.float32: np.float32, torch.float16: np.float16, torch.float64: np.float64,
    torch.int64: np.int64, torch.int32: np.int32, torch.int16: np.int16,
    torch.int8: np.int8, torch.uint8: np.uint8, torch.bool: np.bool_,
}
INT64_MAX = (1 << 63) - 1


class Unsupported(Exception):
    """This node cannot be converted; the reason goes to the compile report."""


class Missing:
    """An output of a multi-output ATen op the conversion does not produce (the saved
    mean and rstd of native_layer_norm, max_pool's indices): reading it is unsupported."""

    def __init__(self, what: str) -> None:
        self.what = what


def converts(*targets: Any) -> Callable[[Converter], Converter]:
    def register(fn: Converter) -> Converter:
        for t in targets:
            CONVERTERS[t] = fn
        return fn
    return register


def np_dtype(dtype: torch.dtype) -> np.dtype:
    if dtype not in DTYPES:
        raise Unsupported(f"dtype {dtype} has no engine type")
    return np.dtype(DTYPES[dtype])


def schema_args(node: torch.fx.Node) -> dict[str, Any]:
    """The node's arguments by schema name, defaults filled in (positional for Python
    operators such as getitem and SymInt arithmetic)."""
    schema = getattr(node.target, "_schema", None)
    if schema is None:
        return {str(i): a for i, a in enumerate(node.args)}
    out: dict[str, Any] = {}
    for i, arg in enumerate(schema.arguments):
        if i < len(node.args):
            out[arg.name] = node.args[i]
        elif arg.name in node.kwargs:
            out[arg.name] = node.kwargs[arg.name]
        elif arg.has_default_value():
            out[arg.name] = arg.default_value
        else:
            out[arg.name] = None
    return out


def fake(node: Any) -> Any:
    return node.meta.get("val") if isinstance(node, torch.fx.Node) else node


def is_symint(x: Any) -> bool:
    return isinstance(x, torch.SymInt) and not isinstance(x.node.maybe_as_int(), int)


class FxConverter:
    """Builds one graphengine graph from FX nodes.

    `constants` maps placeholder nodes to the tensors they hold for good (parameters and
    buffers: frozen at compile time). With `probe=True` an argument whose producer was not
    converted becomes a fresh graph input, so every node is tried on its own (the support
    check); otherwise that is an error."""

    def __init__(self, name: str, constants: Mapping[torch.fx.Node, torch.Tensor],
                 probe: bool = False) -> None:
        self.g = Graph(name)
        self.g.producer = {"framework": "pytorch", "version": torch.__version__,
                           "exporter": "torch.compile, graphengine.torch (core ATen)"}
        self.constants = constants
        self.probe = probe
        self.env: dict[torch.fx.Node, Any] = {}
        self.inputs: list[torch.fx.Node] = []  # fx placeholders fed at run time, in order
        self._symbols: dict[Any, Tensor] = {}  # sympy symbol -> its 0-d int64 tensor
        self._pending_syms: list[torch.fx.Node] = []

    # ---- inputs ---------------------------------------------------------------------------
    def add_placeholders(self, nodes: list[torch.fx.Node]) -> None:
        syms = []
        for n in nodes:
            if n in self.constants:
                self.env[n] = self.g.constant(self.constants[n].detach().numpy(),
                                              name=n.name)
            elif isinstance(fake(n), torch.Tensor):
                self._tensor_input(n)
            else:
                syms.append(n)
        for n in syms:  # a size: taken from an input holding it, else fed as an int
            val = fake(n)
            if isinstance(val, (int, torch.SymInt)) and not is_symint(val):
                self.env[n] = int(val)
                continue
            src = self._symbols.get(val.node.expr) if isinstance(val, torch.SymInt) else None
            if src is not None:
                self.env[n] = src
            else:
                self.env[n] = self.g.input(n.name, np.int64, ())
                self.inputs.append(n)

    def _tensor_input(self, n: torch.fx.Node) -> Tensor:
        val = fake(n)
        dims: list[Any] = []
        for i, d in enumerate(val.shape):
            if is_symint(d):
                expr = d.node.expr
                dims.append(str(expr) if getattr(expr, "is_Symbol", False)
                            else f"{n.name}_d{i}")
            else:
                dims.append(int(d))
        t = self.g.input(n.name, np_dtype(val.dtype), dims)
        self.env[n] = t
        self.inputs.append(n)
        for i, d in enumerate(val.shape):
            if is_symint(d) and getattr(d.node.expr, "is_Symbol", False):
                self._symbols.setdefault(d.node.expr, None)
                if self._symbols[d.node.expr] is None:
                    self._symbols[d.node.expr] = self.dim(t, i)
        return t

    # ---- values ---------------------------------------------------------------------------
    def tensor(self, arg: Any) -> Tensor:
        if not isinstance(arg, torch.fx.Node):
            raise Unsupported(f"expected a tensor argument, got {type(arg).__name__}")
        if arg not in self.env:
            if not self.probe:
                raise Unsupported(f"argument '{arg.name}' was not converted")
            val = fake(arg)
            if isinstance(val, torch.Tensor):
                self._tensor_input(arg)
            else:
                self.env[arg] = self.g.input(arg.name, np.int64, ())
        v = self.env[arg]
        if isinstance(v, Missing):
            raise Unsupported(f"reads {v.what}, which the conversion does not produce")
        if isinstance(v, int):
            return self.g.constant(np.array(v, np.int64))
        return v

    def value(self, arg: Any, dtype: torch.dtype) -> Tensor:
        """A tensor argument as it is, or a Python scalar as a 0-d constant of `dtype`."""
        if isinstance(arg, torch.fx.Node):
            return self.tensor(arg)
        return self.g.constant(np.array(arg).astype(np_dtype(dtype)))

    def cast(self, t: Tensor, dtype: torch.dtype) -> Tensor:
        want = np_dtype(dtype)
        if t.dtype == want:
            return t
        from graphengine.engine.dtypes import DType, to_onnx
        return self.g.add("Cast", [t], {"to": to_onnx(DType.from_numpy(want))})

    def dim(self, t: Tensor, axis: int) -> Tensor | int:
        """Dim `axis` of `t`: an int when static, else a 0-d int64 tensor."""
        d = t.shape[axis] if t.shape is not None else None
        if isinstance(d, int):
            return d
        shape = self.g.add("Shape", [t])
        return self.g.add("Gather", [shape, np.array(axis, np.int64)], {"axis": 0})

    def int_arg(self, arg: Any) -> int | Tensor:
        """An int argument: a Python int, or a 0-d int64 tensor when it is symbolic."""
        if isinstance(arg, Tensor):
            return arg
        if isinstance(arg, torch.fx.Node):
            val = fake(arg)
            if isinstance(val, (int, torch.SymInt)) and not is_symint(val):
                return int(val)
            return self.cast(self.tensor(arg), torch.int64)
        if isinstance(arg, (bool, float)):
            raise Unsupported(f"expected an int, got {arg!r}")
        return int(arg)

    def ints(self, args: Any) -> list[int] | Tensor:
        """A list of ints as Python ints, or as a 1-D int64 tensor if any is symbolic."""
        items = [self.int_arg(a) for a in args]
        if all(isinstance(i, int) for i in items):
            return items
        parts = [self.g.add("Reshape", [i, np.array([1], np.int64)]) if isinstance(i, Tensor)
                 else np.array([i], np.int64) for i in items]
        parts = [p if isinstance(p, Tensor) else self.g.constant(p) for p in parts]
        return self.g.add("Concat", parts, {"axis": 0})

    def as_tensor(self, ints: list[int] | Tensor) -> Tensor:
        return ints if isinstance(ints, Tensor) else self.g.constant(np.array(ints, np.int64))

    def op(self, op_type: str, *inputs: Any, **attrs: Any) -> Any:
        return self.g.add(op_type, list(inputs), attrs)

    # ---- nodes ----------------------------------------------------------------------------
    def convert(self, node: torch.fx.Node) -> None:
        """Convert one call_function node into the graph (raises Unsupported)."""
        fn = CONVERTERS.get(node.target)
        if fn is None:
            raise Unsupported(f"no converter for {_target_name(node.target)}")
        val = fake(node)
        for t in (val if isinstance(val, (tuple, list)) else [val]):
            if isinstance(t, torch.Tensor):
                np_dtype(t.dtype)
                if t.device.type != "cpu":
                    raise Unsupported(f"a {t.device.type} tensor (the engine runs on the CPU)")
        out = fn(self, node, schema_args(node))
        self.env[node] = self._conform(node, out, val)

    def _conform(self, node: torch.fx.Node, out: Any, val: Any) -> Any:
        if isinstance(out, tuple) and isinstance(val, (tuple, list)):
            return tuple(self._conform(node, o, v) for o, v in zip(out, val))
        if not isinstance(out, Tensor) or not isinstance(val, torch.Tensor):
            return out
        out = self.cast(out, val.dtype)
        want = tuple(val.shape)
        got = out.shape
        bad = got is None or len(got) != len(want) or any(
            isinstance(g, int) and not is_symint(w) and g != int(w) for g, w in zip(got, want))
        if bad:
            raise Unsupported(f"converted to shape {got}, torch's is {list(want)}")
        return out

    def output(self, results: list[Any]) -> list[str | int | None]:
        """Mark the FX output values graph outputs; per result its output name, or the
        Python int / None to return as it is."""
        names: list[str | int | None] = []
        given: dict[str, str] = {}
        for i, r in enumerate(results):
            v = self.env.get(r) if isinstance(r, torch.fx.Node) else r
            if isinstance(v, Tensor):
                if v.name not in given:
                    given[v.name] = self.g.output(v, name=f"out_{i}").name
                names.append(given[v.name])
            elif v is None or isinstance(v, int):
                names.append(v)
            else:
                raise Unsupported(f"output {i} is a {type(v).__name__}")
        return names


def _target_name(target: Any) -> str:
    if isinstance(target, torch._ops.OpOverload):
        return str(target)  # aten.add.Tensor, prims.convert_element_type.default
    return getattr(target, "__name__", None) or str(target)


def target_name(node: torch.fx.Node) -> str:
    return _target_name(node.target)


# ---- Python operators on sizes and multi-output results ------------------------------------
@converts(operator.getitem)
def _getitem(ctx: FxConverter, node: torch.fx.Node, a: dict) -> Any:
    src, index = a["0"], a["1"]
    if not isinstance(src, torch.fx.Node):
        raise Unsupported("getitem of a constant")
    if src not in ctx.env and ctx.probe:
        raise Unsupported(f"reads an output of '{src.name}', which was not converted")
    v = ctx.env[src]
    if not isinstance(v, tuple):
        raise Unsupported(f"getitem of a {type(v).__name__}")
    item = v[index]
    if isinstance(item, Missing):
        raise Unsupported(f"reads {item.what}, which the conversion does not produce")
    return item


def _sym_binary(op_type: str) -> Converter:
    def convert(ctx: FxConverter, node: torch.fx.Node, a: dict) -> Any:
        val = fake(node)
        if not is_symint(val) and isinstance(val, (int, torch.SymInt)):
            return int(val)
        x, y = (ctx.int_arg(a[k]) for k in ("0", "1"))
        x, y = (ctx.as_tensor(v) if isinstance(v, Tensor) else
                ctx.g.constant(np.array(v, np.int64)) for v in (x, y))
        return ctx.op(op_type, x, y)
    return convert


for _op, _onnx in ((operator.mul, "Mul"), (operator.add, "Add"), (operator.sub, "Sub"),
                   (operator.floordiv, "Div")):
    converts(_op)(_sym_binary(_onnx))


@converts(torch.ops.aten.sym_size.int)
def _sym_size(ctx: FxConverter, node: torch.fx.Node, a: dict) -> Any:
    val = fake(node)
    if not is_symint(val):
        return int(val)
    x = ctx.tensor(a["self"])
    return ctx.dim(x, a["dim"] % len(x.shape))


__all__ = ["CONVERTERS", "FxConverter", "Missing", "Unsupported", "converts", "fake",
           "np_dtype", "schema_args", "target_name"]
