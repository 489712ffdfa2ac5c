"""Custom operators: ops a user registers, with a numpy host kernel and, optionally, a native
kernel from a plugin library that the device engine runs.

`register_op` makes an `OpSchema` like the built-in ones: its `compute` is the user's host
kernel, its `infer` the user's (default: every output has input 0's dtype and shape), and its
`device` lowering names the op's native kernel when a plugin has registered one
(`_runtime.load_kernel_plugin`, the C ABI in graphengine/plugin.h) and declines otherwise. So
a custom op is placed, folded, exported and imported like any op: by its registry key, the
op type in the default domain or "<domain>.<op type>", which is how the ONNX importer names a
node of another domain.

`load_plugin(path)` loads a file of them: a Python module (run once; it calls `register_op`)
or a shared library of native kernels. A native kernel without a Python registration gets
one here whose host kernel is the native kernel itself.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import re
import sys
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple

import numpy as np

from ..dtypes import DType
from ..errors import ExecutionError, GraphEngineError, InvalidPlugin, ShapeError
from ..ir import Node, TensorMeta
from .registry import REQUIRED, AttrKind, AttrSpec, DeviceKernel, OpSchema, all_ops, get, register

_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_DOMAIN = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$")
MAX_NAME = 128
MAX_OPERANDS = 64  # inputs or outputs of a custom op (the native ABI's bound too)
RESERVED_DOMAINS = ("graphengine",)  # the compiler's own fused ops
_PLUGIN_SUFFIXES = (".so", ".dylib")

_lock = threading.Lock()
_custom: set[str] = set()  # registry keys register_op made (they may be registered again)
_loaded: dict[str, list[str]] = {}  # a Python plugin's real path -> the op keys it added


class OpMeta(NamedTuple):
    """What `infer` gets for each input (None for an omitted optional one) and returns for
    each output: a numpy dtype and a shape (ints and symbol strings; None: unknown rank)."""

    dtype: np.dtype
    shape: tuple[int | str, ...] | None


def register_op(op_type: str, compute: Callable[..., Any], *, domain: str = "",
                inputs: int | Sequence[str] | None = None,
                outputs: int | Sequence[str] | None = None,
                attrs: Mapping[str, Any] | None = None,
                infer: Callable[..., Any] | None = None) -> str:
    """Register a custom operator; returns its registry key ("MyOp" or "my.domain.MyOp").

    `compute(*arrays, **attrs)` is the host kernel: numpy arrays in (None for an omitted
    optional input), an array or a tuple of arrays out. `infer(*metas, **attrs)` gives the
    outputs' dtype and shape from the inputs' (`OpMeta`s): one (dtype, shape) pair or a
    list of them; by default every output is like input 0. `inputs`: a count, or names
    (a trailing "?" marks an optional one); None: one or more. `outputs`: a count or names
    (default 1). `attrs`: name -> default value (its type gives the kind: int, float, str,
    or a list of one of them), or a type (int, float, str, list) for a required one.
    Registering the same key again replaces the custom op; a built-in op is never replaced.
    """
    key = _key(op_type, domain)
    if not callable(compute):
        raise InvalidPlugin(f"register_op('{key}'): compute must be callable, got "
                            f"{type(compute).__name__}")
    if infer is not None and not callable(infer):
        raise InvalidPlugin(f"register_op('{key}'): infer must be callable or None")
    low, high, names = _operands(key, "inputs", inputs, default=(1, -1))
    n_out, _, out_names = _operands(key, "outputs", outputs, default=(1, 1))
    specs = _attr_specs(key, attrs or {})
    doc = (getattr(compute, "__doc__", None) or "").strip()
    schema = OpSchema(
        name=key, min_inputs=low, max_inputs=high, min_outputs=n_out, max_outputs=n_out,
        attrs=specs, infer=_infer_fn(key, infer), compute=_compute_fn(key, compute, infer),
        device=_device_fn(key), doc=f"A custom op. {doc}".strip(), input_names=names)
    _register(schema)
    return key


def load_plugin(path: str | os.PathLike) -> list[str]:
    """Load a plugin file: a Python module that calls `register_op`, or a shared library of
    native kernels (graphengine/plugin.h). Returns the op keys it registered; loading a file
    again returns them without loading it twice. InvalidPlugin names the file and what is
    wrong."""
    if not isinstance(path, (str, os.PathLike)):
        raise InvalidPlugin(f"a plugin is a file path, got {type(path).__name__}")
    shown = os.fspath(path)
    if not os.path.isfile(path):
        raise InvalidPlugin(f"plugin '{shown}': no such file")
    if shown.endswith(".py"):
        return _load_python(shown)
    if shown.endswith(_PLUGIN_SUFFIXES) or ".so." in os.path.basename(shown):
        return _load_native(shown)
    raise InvalidPlugin(f"plugin '{shown}': not a .py module or a .so library")


def custom_ops() -> list[str]:
    with _lock:
        return sorted(_custom)


# ---- registration -----------------------------------------------------------------------
def _key(op_type: Any, domain: Any) -> str:
    if not isinstance(op_type, str) or not _NAME.match(op_type) or len(op_type) > MAX_NAME:
        raise InvalidPlugin(f"register_op: op_type {op_type!r:.80} is not a name (letters, "
                            f"digits and '_', at most {MAX_NAME} characters)")
    if not isinstance(domain, str) or (domain and (not _DOMAIN.match(domain)
                                                  or len(domain) > MAX_NAME)):
        raise InvalidPlugin(f"register_op('{op_type}'): domain {domain!r:.80} is not a dotted "
                            "name")
    if domain in RESERVED_DOMAINS:
        raise InvalidPlugin(f"register_op('{op_type}'): domain '{domain}' is GraphEngine's "
                            "own")
    return op_type if domain in ("", "ai.onnx") else f"{domain}.{op_type}"


def _register(schema: OpSchema) -> None:
    with _lock:
        try:
            existing = get(schema.name)
        except GraphEngineError:
            existing = None
        if existing is not None and schema.name not in _custom:
            raise InvalidPlugin(f"register_op: '{schema.name}' is a built-in op; give the custom "
                                "op another name or a domain of its own")
        register(schema, replace=True)
        _custom.add(schema.name)


def _operands(key: str, what: str, given: Any, default: tuple[int, int]
              ) -> tuple[int, int, tuple[str, ...]]:
    """(min, max, names) of `inputs=` / `outputs=`."""
    if given is None:
        return default[0], default[1], ()
    if isinstance(given, (int, np.integer)) and not isinstance(given, bool):
        n = int(given)
        if not (1 if what == "outputs" else 0) <= n <= MAX_OPERANDS:
            raise InvalidPlugin(f"register_op('{key}'): {what}={n} is outside "
                                f"{1 if what == 'outputs' else 0}..{MAX_OPERANDS}")
        return n, n, ()
    if isinstance(given, (str, bytes)) or not isinstance(given, Sequence):
        raise InvalidPlugin(f"register_op('{key}'): {what}= is a count or a list of names, "
                            f"got {given!r:.60}")
    if not given and what == "outputs" or len(given) > MAX_OPERANDS:
        raise InvalidPlugin(f"register_op('{key}'): {len(given)} {what}, outside "
                            f"1..{MAX_OPERANDS}")
    names, required = [], 0
    for i, name in enumerate(given):
        optional = isinstance(name, str) and name.endswith("?") and what == "inputs"
        bare = name[:-1] if optional else name
        if not isinstance(bare, str) or not _NAME.match(bare) or len(bare) > MAX_NAME:
            raise InvalidPlugin(f"register_op('{key}'): {what} name {name!r:.60} is not a name")
        if not optional:
            if required < i:
                raise InvalidPlugin(f"register_op('{key}'): input '{bare}' follows an optional "
                                    "one; optional inputs come last")
            required += 1
        names.append(bare)
    return required if what == "inputs" else len(names), len(names), tuple(names)


_KINDS = {int: AttrKind.INT, float: AttrKind.FLOAT, str: AttrKind.STRING}
_LIST_KINDS = {AttrKind.INT: AttrKind.INTS, AttrKind.FLOAT: AttrKind.FLOATS,
               AttrKind.STRING: AttrKind.STRINGS}


def _attr_specs(key: str, attrs: Mapping[str, Any]) -> dict[str, AttrSpec]:
    if not isinstance(attrs, Mapping):
        raise InvalidPlugin(f"register_op('{key}'): attrs= is a mapping of name -> default")
    specs: dict[str, AttrSpec] = {}
    for name, value in attrs.items():
        if not isinstance(name, str) or not _NAME.match(name) or name.startswith("_") \
                or name in ("name", "outputs") or len(name) > MAX_NAME:
            raise InvalidPlugin(f"register_op('{key}'): attribute name {name!r:.60} is not "
                                "allowed (a name, not starting with '_', not name/outputs)")
        spec = _attr_spec(value)
        if spec is None:
            raise InvalidPlugin(f"register_op('{key}'): attribute '{name}' has default "
                                f"{value!r:.60}; give an int, float, str, a list of one of "
                                "them, or the type (int, float, str) of a required one")
        specs[name] = spec
    return specs


def _attr_spec(value: Any) -> AttrSpec | None:
    if isinstance(value, AttrSpec):
        return value
    if value in (int, float, str):
        return AttrSpec(_KINDS[value], REQUIRED)
    if isinstance(value, bool):
        return AttrSpec(AttrKind.INT, int(value))
    for kind_type, kind in _KINDS.items():
        if isinstance(value, kind_type) or (kind_type is int and isinstance(value, np.integer)):
            return AttrSpec(kind, kind_type(value))
    if isinstance(value, (list, tuple)) and value:
        kinds = {_attr_spec(v).kind if _attr_spec(v) is not None and not isinstance(
            v, (list, tuple)) else None for v in value}
        if kinds == {AttrKind.INT, AttrKind.FLOAT}:
            kinds = {AttrKind.FLOAT}
        if len(kinds) == 1 and None not in kinds:
            kind = _LIST_KINDS[kinds.pop()]
            item = float if kind is AttrKind.FLOATS else (int if kind is AttrKind.INTS else str)
            return AttrSpec(kind, [item(v) for v in value])
    return None


# ---- the schema's functions ----------------------------------------------------------------
def user_attrs(attrs: Mapping[str, Any]) -> dict[str, Any]:
    """The attributes a user's function sees: not the compiler's own (`_n_outputs`, ...)."""
    return {k: v for k, v in attrs.items() if not k.startswith("_")}


def _metas(user_infer: Callable[..., Any] | None, key: str, ins: Sequence[OpMeta | None],
           attrs: Mapping[str, Any], n_out: int) -> list[TensorMeta]:
    if user_infer is None:
        if not ins or ins[0] is None:
            raise ValueError("the default infer copies input 0, which is missing")
        result: Any = [ins[0]] * n_out
    else:
        result = user_infer(*ins, **user_attrs(attrs))
    if isinstance(result, (TensorMeta, OpMeta)) or (
            isinstance(result, tuple) and len(result) == 2 and not isinstance(
                result[0], (tuple, list, TensorMeta, OpMeta))):
        result = [result]
    out = []
    for item in list(result):
        if isinstance(item, TensorMeta):
            out.append(item)
            continue
        dtype, shape = item
        out.append(TensorMeta(_dtype(dtype), None if shape is None else tuple(
            d if isinstance(d, str) else int(d) for d in shape)))
    if len(out) < n_out:
        raise ValueError(f"infer gave {len(out)} outputs, the node has {n_out}")
    return out[:n_out]


def _dtype(dtype: Any) -> DType:
    if isinstance(dtype, DType):
        return dtype
    if isinstance(dtype, str):
        return DType(dtype)
    return DType.from_numpy(dtype)


def _infer_fn(key: str, user_infer: Callable[..., Any] | None):
    def infer(node: Node, attrs: dict[str, Any]) -> list[TensorMeta]:
        ins = [None if v is None or v.meta is None else OpMeta(v.meta.dtype.numpy, v.meta.shape)
               for v in node.inputs]
        try:
            return _metas(user_infer, key, ins, attrs, len(node.outputs))
        except GraphEngineError:
            raise
        except Exception as exc:
            shapes = ", ".join("_" if v is None else str(v.meta) for v in node.inputs)
            raise ShapeError(f"node '{node.name}' ({key}): the custom op's infer failed: "
                             f"{type(exc).__name__}: {exc} (inputs: {shapes})",
                             node=node.name) from None
    return infer


def _compute_fn(key: str, compute: Callable[..., Any], user_infer: Callable[..., Any] | None):
    def run(inputs: Sequence[np.ndarray | None], attrs: dict[str, Any]) -> list[np.ndarray]:
        n_out = int(attrs.get("_n_outputs", 1))
        result = compute(*inputs, **user_attrs(attrs))
        outs = list(result) if isinstance(result, (tuple, list)) else [result]
        if len(outs) != n_out:
            raise ExecutionError(f"custom op '{key}': compute returned {len(outs)} outputs, "
                                 f"the node has {n_out}")
        outs = [np.asarray(o) for o in outs]
        ins = [None if a is None else OpMeta(np.asarray(a).dtype, np.shape(a)) for a in inputs]
        want = _metas(user_infer, key, ins, attrs, n_out)
        for i, (o, w) in enumerate(zip(outs, want)):
            same_shape = w.shape is None or (len(w.shape) == o.ndim and all(
                isinstance(d, str) or d == s for d, s in zip(w.shape, o.shape)))
            if o.dtype != w.dtype.numpy or not same_shape:
                raise ExecutionError(f"custom op '{key}': compute returned "
                                     f"{o.dtype}{list(o.shape)} for output {i}, its infer says "
                                     f"{w}")
        return outs
    return run


def _device_fn(key: str):
    def device(node: Node, attrs: dict[str, Any]) -> DeviceKernel | str:
        from graphengine import _runtime

        if not any(k["op_type"] == key for k in _runtime.plugin_kernels()):
            return (f"custom op '{key}' has no native kernel (a plugin library registers one: "
                    "--plugin FILE.so)")
        kernel_attrs = {k: v for k, v in user_attrs(attrs).items()
                        if isinstance(v, (int, float)) and not isinstance(v, bool)}
        return DeviceKernel(key, kernel_attrs,
                            tuple(-1 if v is None else i for i, v in enumerate(node.inputs)))
    return device


# ---- plugin files -------------------------------------------------------------------------
def _load_python(path: str) -> list[str]:
    real = os.path.realpath(path)
    with _lock:
        if real in _loaded:
            return list(_loaded[real])
    before = {k: get(k) for k in custom_ops()}
    digest = hashlib.sha1(real.encode()).hexdigest()[:12]
    module_name = f"graphengine_plugin_{digest}"
    spec = importlib.util.spec_from_file_location(module_name, real)
    if spec is None or spec.loader is None:
        raise InvalidPlugin(f"plugin '{path}': Python cannot load it as a module")
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    try:
        spec.loader.exec_module(module)
    except InvalidPlugin as exc:
        sys.modules.pop(module_name, None)
        raise InvalidPlugin(f"plugin '{path}': {exc.message}") from None
    except BaseException as exc:  # its code's error, even a SystemExit, is the plugin's
        sys.modules.pop(module_name, None)
        where = ""
        tb = exc.__traceback__
        while tb is not None:
            if tb.tb_frame.f_code.co_filename == real:
                where = f" (line {tb.tb_lineno})"
            tb = tb.tb_next
        if isinstance(exc, SyntaxError):
            where = f" (line {exc.lineno})"
        raise InvalidPlugin(f"plugin '{path}' failed to load{where}: {type(exc).__name__}: "
                            f"{exc}") from None
    added = [k for k in custom_ops() if before.get(k) is not get(k)]
    if not added:
        raise InvalidPlugin(f"plugin '{path}' registered no operator (it should call "
                            "graphengine.register_op)")
    with _lock:
        _loaded[real] = added
    return list(added)


def _load_native(path: str) -> list[str]:
    from graphengine import _runtime

    reserved = [k for k in all_ops() if k not in custom_ops()]
    try:
        kernels = _runtime.load_kernel_plugin(path, reserved)
    except ValueError as exc:
        raise InvalidPlugin(str(exc)) from None
    keys = []
    for k in kernels:
        key = k["op_type"]
        keys.append(key)
        if key not in custom_ops():  # no Python registration: the kernel is the host one too
            _register(_native_schema(k))
    return keys


def _native_schema(kernel: Mapping[str, Any]) -> OpSchema:
    key = kernel["op_type"]
    n_out = kernel["num_outputs"]

    def compute(*arrays: np.ndarray | None, **attrs: Any) -> tuple[np.ndarray, ...]:
        from graphengine import _runtime

        if arrays[0] is None:
            raise ValueError("input 0 is required")
        ins = [None if a is None else (np.asarray(a).dtype.name, np.ascontiguousarray(a))
               for a in arrays]
        outs = [np.empty(np.shape(arrays[0]), np.asarray(arrays[0]).dtype)
                for _ in range(n_out)]
        _runtime.run_plugin_kernel(key, ins, [(o.dtype.name, o) for o in outs], attrs)
        return tuple(outs)

    compute.__doc__ = f"Runs the native kernel from {os.path.basename(kernel['library'])}."
    return OpSchema(name=key, min_inputs=kernel["min_inputs"], max_inputs=kernel["max_inputs"],
                    min_outputs=n_out, max_outputs=n_out, infer=_infer_fn(key, None),
                    compute=_compute_fn(key, compute, None), device=_device_fn(key),
                    doc=f"A custom op. {compute.__doc__}")


__all__ = ["OpMeta", "custom_ops", "load_plugin", "register_op", "user_attrs"]
