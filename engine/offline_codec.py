"""Values <-> tagged JSON for the offline model's description (see engine/offline.py).

JSON values stay as they are; what JSON cannot say is an object tagged by its "$" key:

    {"$": "mod:Class", <field>: ...}   a dataclass of graphengine.engine.<mod>, every field
    {"$": "enum", "type", "value"}      an Enum of graphengine.engine (DType, Engine...)
    {"$": "tuple", "items"}             a tuple (lists stay lists)
    {"$": "array", "dtype", "shape", "nbytes", "offset"}
                                        a numpy array whose bytes are in the weights section,
                                        64-byte aligned, identical arrays stored once;
                                        "pieces": [[offset, nbytes], ...] instead of "offset"
                                        for a big array that shares 64 KiB pieces with one
                                        stored before (gears); string arrays carry "items"
    {"$": "scalar", "dtype", "value"}   a numpy scalar (np.float32 stays np.float32)
    {"$": "float", "value"}             inf, -inf or nan (the JSON is strict)
    {"$": "bytes", "base64"}            bytes
    {"$": "dict", "items": [[k, v]]}    a dict with non-string keys, or a "$" key
    {"$": "graph", ...}                 an IR Graph: If / Loop / Scan bodies in host steps

Dataclasses are written from dataclasses.fields(), so a field added to any of them round-trips
with no change here; on reading, a field this build does not know is an error naming it, and
types are looked up only inside graphengine.engine (a file cannot name other code).
"""

from __future__ import annotations

import base64
import collections.abc
import dataclasses
import enum
import functools
import hashlib
import importlib
import math
import numbers
import re
import types
import typing
from typing import Any

import numpy as np

from .bounds import MAX_NESTING, PIECE_EXPANSION
from .dtypes import DType
from .errors import InvalidModel, bounded_text
from .ir import Graph

ALIGN = 64
PIECE = 1 << 16  # dedup granularity of big arrays across gears
_ENGINE = "graphengine.engine."
_TYPE_NAME = re.compile(r"^[a-z_][a-z0-9_.]*:[A-Za-z_][A-Za-z0-9_.]*$")

__all__ = ["ALIGN", "Reader", "Writer", "align", "array_bytes", "check_nesting", "plain"]


def align(n: int) -> int:
    return -(-n // ALIGN) * ALIGN


def whole(value: Any, what: str) -> int:
    """`value` as an int when it is one (JSON integers; not a bool, a float, inf or text:
    `int()` would truncate 1.5, overflow on inf and parse "7"), else InvalidModel naming
    `what`."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise InvalidModel(f"offline model is corrupted: {what} is "
                           f"{bounded_text(repr(value), 40)}, not an integer")
    return int(value)


def _type_name(cls: type) -> str:
    if not cls.__module__.startswith(_ENGINE) or "<" in cls.__qualname__:
        raise ValueError(f"{cls.__module__}.{cls.__qualname__} is not a type of "
                         f"graphengine.engine")
    return f"{cls.__module__[len(_ENGINE):]}:{cls.__qualname__}"


def _dtype_name(dtype: np.dtype, where: str) -> str:
    try:
        return DType.from_numpy(dtype).value
    except TypeError:
        raise ValueError(f"cannot store a {dtype} array ({where}) in an offline model") from None


class Writer:
    """Encodes values as tagged JSON; arrays go to the weights section, deduplicated."""

    def __init__(self) -> None:
        self.chunks: list[Any] = []
        self.size = 0
        self._stored: dict[tuple[str, int, bytes], int] = {}

    def encode(self, x: Any, where: str) -> Any:
        if isinstance(x, enum.Enum):
            return {"$": "enum", "type": _type_name(type(x)), "value": self.encode(x.value, where)}
        if isinstance(x, np.ndarray):
            return self.array(x, where)
        if isinstance(x, np.generic):  # before float: np.float64 is a float
            return {"$": "scalar", "dtype": _dtype_name(x.dtype, where),
                    "value": self.encode(x.item(), where)}
        if x is None or isinstance(x, (bool, int, str)):
            return x
        if isinstance(x, float):
            return x if math.isfinite(x) else {"$": "float", "value": repr(x)}
        if dataclasses.is_dataclass(x) and not isinstance(x, type):
            out = {"$": _type_name(type(x))}
            for f in dataclasses.fields(x):
                if f.metadata.get("offline", True):  # a compile's own memo is not stored
                    out[f.name] = self.encode(getattr(x, f.name), f"{where}.{f.name}")
            return out
        if isinstance(x, tuple):
            return {"$": "tuple", "items": [self.encode(v, where) for v in x]}
        if isinstance(x, list):
            return [self.encode(v, f"{where}[{k}]") for k, v in enumerate(x)]
        if isinstance(x, dict):
            if all(isinstance(k, str) for k in x) and "$" not in x:
                return {k: self.encode(v, f"{where}[{k!r}]") for k, v in x.items()}
            return {"$": "dict", "items": [[self.encode(k, where), self.encode(v, where)]
                                           for k, v in x.items()]}
        if isinstance(x, (bytes, bytearray)):
            return {"$": "bytes", "base64": base64.b64encode(bytes(x)).decode("ascii")}
        if isinstance(x, Graph):
            return self.graph(x, where)
        raise ValueError(f"cannot store a {type(x).__name__} ({where}) in an offline model")

    def array(self, arr: np.ndarray, where: str) -> dict:
        if arr.dtype.kind in "OUS":  # strings: inline, element by element
            dtype = "object" if arr.dtype.kind == "O" else arr.dtype.str
            return {"$": "array", "dtype": dtype, "shape": list(arr.shape),
                    "items": [self.encode(v, where) for v in arr.reshape(-1).tolist()]}
        name = _dtype_name(arr.dtype, where)
        arr = np.asarray(arr, order="C")  # not ascontiguousarray: it makes 0-d arrays 1-d
        if arr.dtype.byteorder == ">":
            arr = arr.astype(arr.dtype.newbyteorder("<"))
        raw = arr.reshape(-1).view(np.uint8)
        out = {"$": "array", "dtype": name, "shape": list(arr.shape), "nbytes": raw.nbytes}
        # Every byte is hashed once: an array's key is the hash of its 64 KiB pieces' hashes.
        pieces = [raw[k:k + PIECE] for k in range(0, raw.nbytes, PIECE)] or [raw]
        digests = [hashlib.sha256(p).digest() for p in pieces]
        key = ("array", raw.nbytes, hashlib.sha256(b"".join(digests)).digest())
        offset = self._stored.get(key)
        if offset is not None:
            return {**out, "offset": offset}
        # A big array another gear mostly shares (a program's packed weights, where only a
        # few batch-dependent constants differ) is stored as pieces, the shared ones once.
        known = [self._stored.get(("piece", p.nbytes, d)) for p, d in zip(pieces, digests)]
        if len(pieces) > 1 and any(at is not None for at in known):
            spans = []
            for p, d, at in zip(pieces, digests, known):
                if at is None:
                    at = self._stored[("piece", p.nbytes, d)] = self._append(p)
                spans.append([at, p.nbytes])
            return {**out, "pieces": spans}
        offset = self._stored[key] = self._append(raw)
        for k, (p, d) in enumerate(zip(pieces, digests)):
            self._stored.setdefault(("piece", p.nbytes, d), offset + k * PIECE)
        return {**out, "offset": offset}

    def _append(self, raw: np.ndarray) -> int:
        pad = align(self.size) - self.size
        if pad:
            self.chunks.append(bytes(pad))
        offset = self.size + pad
        self.chunks.append(memoryview(raw))
        self.size = offset + raw.nbytes
        return offset

    def graph(self, g: Graph, where: str) -> dict:
        where = f"{where}<graph {g.name}>"
        nodes = [{"name": n.name, "op_type": n.op_type,
                  "inputs": [v.name if v is not None else None for v in n.inputs],
                  "outputs": [[o.name, self.encode(o.meta, where)] for o in n.outputs],
                  "attrs": self.encode(n.attrs, f"{where}.{n.name}"),
                  "meta": self.encode(n.meta, where)} for n in g.nodes]
        return {"$": "graph", "name": g.name, "opset": g.opset,
                "inputs": [[v.name, self.encode(v.meta, where)] for v in g.inputs],
                "constants": [[v.name, self.array(v.const, where), self.encode(v.meta, where)]
                              for v in g.constants()],
                "nodes": nodes, "outputs": [v.name for v in g.outputs]}



@functools.cache
def resolve(name: str, kind: str) -> type:
    """A dataclass or Enum (`kind`) of graphengine.engine, by its "module:Qual.Name"."""
    if not _TYPE_NAME.match(name):
        raise InvalidModel(f"offline model names an invalid type {name!r}")
    module, _, qual = name.partition(":")
    try:
        obj: Any = importlib.import_module(_ENGINE + module)
        for part in qual.split("."):
            obj = getattr(obj, part)
    except (ImportError, AttributeError):
        obj = None
    if not isinstance(obj, type) or not (
            dataclasses.is_dataclass(obj) if kind == "dataclass" else issubclass(obj, enum.Enum)):
        raise InvalidModel(f"offline model holds a value of type '{name}', which this "
                           f"GraphEngine does not know")
    return obj


class Reader:
    """Decodes tagged JSON back into dataclasses, enums, tuples and numpy arrays."""

    def __init__(self, weights: np.ndarray | None) -> None:
        self.weights = weights
        # Bytes that arrays stored as pieces may be rebuilt into, over the whole file: the
        # pieces a few kilobytes of JSON can list are otherwise a free multiplier.
        size = len(weights) if weights is not None else 0
        self.rebuild_left = PIECE_EXPANSION * max(size, PIECE)

    def decode(self, x: Any) -> Any:
        if isinstance(x, list):
            return [self.decode(v) for v in x]
        if not isinstance(x, dict):
            return x
        tag = x.get("$")
        if tag is None:
            return {k: self.decode(v) for k, v in x.items()}
        if ":" in tag:
            return self.dataclass(resolve(tag, "dataclass"), x)
        if tag == "tuple":
            return tuple(self.decode(v) for v in x["items"])
        if tag == "enum":
            cls = resolve(x["type"], "enum")
            try:
                return cls(self.decode(x["value"]))
            except ValueError:
                raise InvalidModel(f"offline model holds {x['value']!r}, which is not a "
                                   f"{cls.__name__} this GraphEngine knows") from None
        if tag == "array":
            return self.array(x)
        if tag == "scalar":
            return DType(x["dtype"]).numpy.type(self.decode(x["value"]))
        if tag == "float":
            return float(x["value"])
        if tag == "bytes":
            return base64.b64decode(x["base64"])
        if tag == "dict":
            return {self.decode(k): self.decode(v) for k, v in x["items"]}
        if tag == "graph":
            return self.graph(x)
        raise InvalidModel(f"offline model holds a value tagged {tag!r}, which this "
                           f"GraphEngine does not know")

    def dataclass(self, cls: type, x: dict) -> Any:
        fields = {f.name: f for f in dataclasses.fields(cls)}
        for key in x:
            if key != "$" and key not in fields:
                raise InvalidModel(f"offline model has field '{cls.__name__}.{key}', which "
                                   f"this GraphEngine does not know (the file was written by "
                                   f"a newer or different build)")
        init, late = {}, {}
        for name, f in fields.items():
            if name in x:
                (init if f.init else late)[name] = self.decode(x[name])
            elif f.init and f.default is dataclasses.MISSING \
                    and f.default_factory is dataclasses.MISSING:
                raise InvalidModel(f"offline model lacks field '{cls.__name__}.{name}'")
        hints = _field_types(cls)
        for name, value in (*init.items(), *late.items()):
            hint = hints.get(name, Any)
            if not _conforms(value, hint):
                raise InvalidModel(f"offline model field '{cls.__name__}.{name}' holds "
                                   f"{_kind(value)}, where {_hint_name(hint)} belongs")
        obj = cls(**init)
        for name, value in late.items():
            object.__setattr__(obj, name, value)
        return obj

    def array(self, x: dict) -> np.ndarray:
        shape = tuple(whole(d, "an array dimension") for d in x["shape"])
        if "items" in x:
            dtype = x["dtype"]
            if dtype != "object" and not re.match(r"^[<>|][US]\d+$", dtype):
                raise InvalidModel(f"offline model holds a string array of dtype {dtype!r}")
            items = [self.decode(v) for v in x["items"]]
            arr = np.empty(len(items), dtype=np.dtype(dtype))
            arr[:] = items
            return arr.reshape(shape)
        try:
            dtype = DType(x["dtype"]).numpy
        except ValueError:
            raise InvalidModel(f"offline model holds an array of unknown dtype "
                               f"{x['dtype']!r}") from None
        nbytes = whole(x["nbytes"], "an array's nbytes")
        if nbytes != math.prod(shape) * dtype.itemsize or min(shape, default=0) < 0:
            raise InvalidModel(f"offline model is corrupted: a {dtype}{list(shape)} array "
                               f"cannot take {nbytes} bytes")
        if "pieces" not in x:
            return self._slice(whole(x["offset"], "an array's offset"), nbytes).view(
                dtype).reshape(shape)
        # Every piece is checked against the bytes the file holds before the array's
        # memory is taken: a declared size alone allocates nothing.
        spans = [(whole(offset, "a piece's offset"), whole(size, "a piece's size"))
                 for offset, size in x["pieces"]]
        at = 0
        for offset, size in spans:
            self._slice(offset, size)
            at += size
        if at != nbytes:
            raise InvalidModel(f"offline model is corrupted: the pieces of a {dtype}"
                               f"{list(shape)} array hold {at} of its {nbytes} bytes")
        if nbytes > self.rebuild_left:
            raise InvalidModel(f"offline model is corrupted: its shared pieces rebuild more "
                               f"than {PIECE_EXPANSION} times its weights section (a "
                               f"{dtype}{list(shape)} array of {nbytes} bytes)")
        self.rebuild_left -= nbytes
        out = np.empty(nbytes, np.uint8)
        at = 0
        for offset, size in spans:
            out[at:at + size] = self._slice(offset, size)
            at += size
        return out.view(dtype).reshape(shape)

    def _slice(self, offset: int, nbytes: int) -> np.ndarray:
        size = len(self.weights) if self.weights is not None else 0
        if offset < 0 or nbytes < 0 or offset % ALIGN or offset + nbytes > size:
            raise InvalidModel(f"offline model is corrupted: array at offset {offset} "
                               f"({nbytes} bytes) lies outside the weights section "
                               f"({size} bytes)")
        return self.weights[offset:offset + nbytes]

    def graph(self, x: dict) -> Graph:
        g = Graph(x["name"])
        g.opset = whole(x["opset"], "a graph's opset")
        try:
            for name, meta in x["inputs"]:
                g.add_input(name, self.decode(meta))
            for name, arr, meta in x["constants"]:
                g.add_constant(name, self.array(arr)).meta = self.decode(meta)
            for n in x["nodes"]:
                node = g.add_node(n["op_type"], [g.values[i] if i is not None else None
                                                 for i in n["inputs"]],
                                  outputs=[o for o, _ in n["outputs"]],
                                  attrs=self.decode(n["attrs"]), name=n["name"])
                for v, (_, meta) in zip(node.outputs, n["outputs"]):
                    v.meta = self.decode(meta)
                node.meta = self.decode(n["meta"])
            g.outputs = [g.values[name] for name in x["outputs"]]
        except KeyError as exc:
            raise InvalidModel(f"offline model graph '{g.name}' reads tensor {exc}, which it "
                               f"does not define") from None
        except InvalidModel:
            raise
        except Exception as exc:  # an IR error: the stored graph is inconsistent
            raise InvalidModel(f"offline model graph '{g.name}' is malformed: {exc}") from None
        return g



@functools.cache
def _field_types(cls: type) -> dict[str, Any]:
    """The resolved annotations of a dataclass's fields ({} where they cannot be resolved:
    then nothing is checked, as before)."""
    try:
        return typing.get_type_hints(cls)
    except Exception:  # an annotation naming something only a type checker imports
        return {}


def _conforms(value: Any, hint: Any) -> bool:
    """Whether a decoded value has the shape of a field's annotation: containers by kind and
    element, dataclasses and enums by class, numbers by kind (a numpy scalar is a number);
    what the annotation does not pin (Any, a type variable, a callable) passes. A file edited
    to put a dict where a program belongs is refused here, not deep in the runtime."""
    if hint is Any or hint is object:
        return True
    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    if origin is typing.Union or origin is types.UnionType:
        return any(_conforms(value, a) for a in args)
    if hint is type(None):
        return value is None
    if origin is typing.Literal:
        return value in args
    if origin in (list, tuple, collections.abc.Sequence):
        if not isinstance(value, (list, tuple)):  # the writer keeps tuples; lists are read
            return False
        if origin is tuple and args and args[-1] is not Ellipsis:
            return len(value) == len(args) and all(map(_conforms, value, args))
        return not args or all(_conforms(v, args[0]) for v in value)
    if origin in (dict, collections.abc.Mapping):
        if not isinstance(value, dict):
            return False
        return not args or all(_conforms(k, args[0]) and _conforms(v, args[1])
                               for k, v in value.items())
    if origin is not None or not isinstance(hint, type):
        return True
    if hint is bool:
        return isinstance(value, (bool, np.bool_))
    if hint is int:
        return isinstance(value, numbers.Integral) and not isinstance(value, (bool, np.bool_))
    if hint is float:
        return isinstance(value, numbers.Real) and not isinstance(value, (bool, np.bool_))
    return isinstance(value, hint)


def _kind(value: Any) -> str:
    if value is None:
        return "None"
    name = type(value).__name__
    return f"{'an' if name[0] in 'aeiou' else 'a'} {name}"


def _hint_name(hint: Any) -> str:
    # A plain class by its name; list[int] as written (on Python 3.10 it passes for a type).
    plain = isinstance(hint, type) and typing.get_origin(hint) is None
    text = getattr(hint, "__name__", None) if plain else None
    return bounded_text(text or str(hint).replace("typing.", ""), 200)


def check_nesting(x: Any, what: str) -> None:
    """Refuse JSON nested deeper than MAX_NESTING, iteratively: decoding it recurses."""
    stack = [(x, 1)]
    while stack:
        value, depth = stack.pop()
        if depth > MAX_NESTING:
            raise InvalidModel(f"{what} is nested too deep: more than {MAX_NESTING} levels")
        children = value.values() if isinstance(value, dict) else value
        stack.extend((v, depth + 1) for v in children if isinstance(v, (dict, list)))


def array_bytes(x: Any) -> int:
    """Bytes of every array in an encoded value."""
    if isinstance(x, list):
        return sum(array_bytes(v) for v in x)
    if not isinstance(x, dict):
        return 0
    if x.get("$") == "array":
        return whole(x.get("nbytes", 0), "an array's nbytes")
    return sum(array_bytes(v) for k, v in x.items() if k != "$")


def plain(x: Any) -> Any:
    """Tagged JSON as plain JSON: dataclasses as dicts, enums as values, arrays summarized."""
    if isinstance(x, list):
        return [plain(v) for v in x]
    if not isinstance(x, dict):
        return x
    tag = x.get("$")
    if tag is None or ":" in tag:
        return {k: plain(v) for k, v in x.items() if k != "$"}
    if tag == "tuple":
        return [plain(v) for v in x.get("items", [])]
    if tag in ("enum", "float", "scalar"):
        return plain(x.get("value"))
    if tag == "array":
        return {"dtype": x.get("dtype"), "shape": x.get("shape"), "nbytes": x.get("nbytes")}
    if tag == "dict":
        return {str(plain(k)): plain(v) for k, v in x.get("items", [])}
    if tag == "graph":
        return {"graph": x.get("name"), "nodes": len(x.get("nodes", []))}
    return f"<{tag}>"
