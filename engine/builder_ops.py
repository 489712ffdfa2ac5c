"""What the builder reads from an op's schema: the Python signature and docstring of its
`graphengine.ops` function, its attributes checked and converted to the IR's types, and which
inputs share a dtype (so a Python number takes its tensor partner's type).

The schemas say arity and attributes; the parameter names, the type ties and the first
paragraph of the documentation come from ONNX's own operator schemas where the op is ONNX's,
and from `register_op` (`OpSchema.doc`, `input_names`) for a custom op.
"""

from __future__ import annotations

import functools
import inspect
import re
from collections.abc import Iterable
from typing import Any

import numpy as np

from . import ops as oplib

MAX_LIST = 1 << 22  # entries of one list attribute (the ONNX importer's bound)


def split_key(op_key: str) -> tuple[str, str]:
    """("ai.onnx.ml", "Scaler") for "ai.onnx.ml.Scaler"; ("", "Conv") for "Conv"."""
    domain, _, op = op_key.rpartition(".")
    return domain, op


def arity_text(low: int, high: int) -> str:
    if high < 0:
        return f"{low} or more"
    return str(low) if low == high else f"{low} to {high}"


@functools.lru_cache(maxsize=1024)
def onnx_schema(op_key: str) -> Any:
    """ONNX's schema of a registry key, or None (a custom op, or one ONNX does not have)."""
    import onnx.defs

    from .importers.graphdef import CANONICAL_OPSET

    domain, op = split_key(op_key)
    try:
        return onnx.defs.get_schema(op, CANONICAL_OPSET, domain)
    except Exception:
        return None


def type_ties(op_key: str, n: int) -> list[str | None]:
    """For each input position, the ONNX type constraint it shares with others (or None)."""
    schema = onnx_schema(op_key)
    ties: list[str | None] = [None] * n
    if schema is None or not schema.inputs:
        return ties
    for i in range(n):
        formal = schema.inputs[min(i, len(schema.inputs) - 1)]
        if i >= len(schema.inputs) and formal.option != formal.option.Variadic:
            break
        ties[i] = formal.type_str
    return ties


def required_outputs(op_key: str) -> int:
    """Outputs ONNX does not mark optional or variadic (TopK: 2; LSTM, Dropout: 0)."""
    schema = onnx_schema(op_key)
    if schema is None:
        return 0
    return sum(1 for f in schema.outputs if f.option == f.option.Single)


# ---- attributes -------------------------------------------------------------------------
def checked_attrs(schema: oplib.OpSchema, label: str, attrs: dict[str, Any], error: type,
                  graph: str | None = None) -> dict[str, Any]:
    """Attributes converted to the IR's Python types; `error` raised, naming the op, for an
    unknown one, a value of the wrong kind or outside the attribute's choices."""
    out: dict[str, Any] = {}
    for key, value in attrs.items():
        spec = schema.attrs.get(key)
        if spec is None:
            known = ", ".join(sorted(schema.attrs)) or "none"
            raise error(f"{label}: {schema.name} has no attribute '{key}' (its attributes: "
                        f"{known})", graph=graph)
        if value is None:
            continue
        try:
            out[key] = attr_value(spec.kind, value)
        except (TypeError, ValueError, OverflowError) as exc:
            raise error(f"{label}: attribute '{key}' of {schema.name} must be "
                        f"{spec.kind.value}: {exc}", graph=graph) from None
        if spec.choices is not None and out[key] not in spec.choices:
            raise error(f"{label}: attribute '{key}' of {schema.name} is {out[key]!r:.60}, "
                        f"expected one of {list(spec.choices)}", graph=graph)
    return out


def _scalar(kind: type, value: Any) -> Any:
    if kind is str:
        if isinstance(value, bytes):
            return value.decode()
        if not isinstance(value, str):
            raise TypeError(f"got {type(value).__name__} {value!r:.40}")
        return value
    if isinstance(value, (str, bytes)) or (
            kind is int and isinstance(value, (float, np.floating))):
        raise TypeError(f"got {type(value).__name__} {value!r:.40}")
    return kind(value)


def attr_value(kind: oplib.AttrKind, value: Any) -> Any:
    k = oplib.AttrKind
    if kind in (k.INT, k.FLOAT, k.STRING):
        return _scalar({k.INT: int, k.FLOAT: float, k.STRING: str}[kind], value)
    if kind in (k.INTS, k.FLOATS, k.STRINGS):
        if isinstance(value, (str, bytes)) or not isinstance(value, (Iterable, np.ndarray)):
            raise TypeError(f"got {type(value).__name__} {value!r:.40}, not a sequence")
        items = list(value.reshape(-1).tolist() if isinstance(value, np.ndarray) else value)
        if len(items) > MAX_LIST:
            raise ValueError(f"{len(items)} entries, above {MAX_LIST}")
        item = {k.INTS: int, k.FLOATS: float, k.STRINGS: str}[kind]
        return [_scalar(item, v) for v in items]
    if kind is k.TENSOR:
        arr = np.array(value)
        if arr.dtype == object:
            raise TypeError(f"got {type(value).__name__}")
        return arr
    if kind is k.GRAPH:
        if not hasattr(value, "to_ir"):
            raise TypeError(f"got {type(value).__name__}, not a graphengine.Graph")
        return value.to_ir()
    if kind is k.GRAPHS:
        return [attr_value(k.GRAPH, v) for v in value]
    raise TypeError(f"attributes of kind {kind.value} are not supported")


# ---- signatures and documentation --------------------------------------------------------
def _identifier(text: str, fallback: str) -> str:
    text = re.sub(r"\W", "_", text)
    if not text or text[0].isdigit() or text in ("name", "outputs") or not text.isidentifier():
        return fallback
    return text


def signature(op_key: str) -> inspect.Signature:
    """Inputs positional-only (optional ones default to None; a variadic tail as *args),
    attributes keyword-only with their defaults, then `name=` and `outputs=`."""
    schema = oplib.get(op_key)
    formal = onnx_schema(op_key)
    positional = inspect.Parameter.POSITIONAL_ONLY
    params: list[inspect.Parameter] = []
    names: list[str] = []
    if formal is not None and formal.inputs:
        given = [(f.name, f.option == f.option.Variadic) for f in formal.inputs]
    else:
        custom = list(getattr(schema, "input_names", ()) or ())
        count = schema.min_inputs if schema.max_inputs < 0 else schema.max_inputs
        given = [(custom[i] if i < len(custom) else f"input{i}", False) for i in range(count)]
        if schema.max_inputs < 0:
            given.append(("inputs", True))
    for i, (text, variadic) in enumerate(given):
        pname = _identifier(text, f"input{i}")
        if pname in names:
            pname = f"input{i}"
        names.append(pname)
        if variadic:
            params.append(inspect.Parameter(pname, inspect.Parameter.VAR_POSITIONAL))
            break
        optional = i >= schema.min_inputs
        params.append(inspect.Parameter(pname, positional,
                                        default=None if optional else inspect.Parameter.empty))
    for key, spec in sorted(schema.attrs.items()):
        default = inspect.Parameter.empty if spec.default is oplib.REQUIRED else spec.default
        params.append(inspect.Parameter(_identifier(key, key), inspect.Parameter.KEYWORD_ONLY,
                                        default=default))
    params.append(inspect.Parameter("name", inspect.Parameter.KEYWORD_ONLY, default=None))
    params.append(inspect.Parameter("outputs", inspect.Parameter.KEYWORD_ONLY, default=None))
    return inspect.Signature(params)


def docstring(op_key: str) -> str:
    schema = oplib.get(op_key)
    formal = onnx_schema(op_key)
    domain, op = split_key(op_key)
    where = f" (domain {domain})" if domain else ""
    lines = [f"{op}{where}: {arity_text(schema.min_inputs, schema.max_inputs)} inputs, "
             f"{arity_text(max(1, schema.min_outputs), schema.max_outputs)} outputs."]
    custom_doc = getattr(schema, "doc", "")
    if formal is not None and formal.doc:
        first = formal.doc.strip().split("\n\n")[0]
        lines += ["", " ".join(first.split())]
    elif custom_doc:
        lines += ["", custom_doc.strip()]
    if schema.attrs:
        lines += ["", "Attributes:"]
        for key, spec in sorted(schema.attrs.items()):
            default = ("required" if spec.default is oplib.REQUIRED else
                       "optional" if spec.default is None else f"default {spec.default!r}")
            choice = f", one of {list(spec.choices)}" if spec.choices else ""
            lines.append(f"    {key} ({spec.kind.value}): {default}{choice}")
    lines += ["", "Inputs are Tensors of one graphengine.Graph, numpy arrays or numbers "
              "(constants). Returns a Tensor, or a tuple of Tensors for several outputs."]
    return "\n".join(lines)


__all__ = ["arity_text", "attr_value", "checked_attrs", "docstring", "onnx_schema",
           "required_outputs", "signature", "split_key", "type_ties"]
