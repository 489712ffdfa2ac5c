"""The offline model file (GE's .om role): compiled models that load and run without compiling.

One file holds one or more CompiledModels of the same graph, one per input signature (the
gears of a symbolic dim, e.g. batch 1, 4 and 16). All integers are little-endian:

    offset size  field
    0      4     magic b"GEOM"
    4      2     format version (FORMAT_VERSION; a reader refuses newer versions and reads
                 older ones: version 1 ran the fused convolutions as Conv tasks, see
                 _fused_conv_v1)
    6      2     flags: bit 0 = several compiled signatures (gears); other bits must be 0
    8      4     header length H (64; a later layout may grow it, readers skip the rest)
    12     4     reserved, 0
    16     8     description length D (the description starts at offset H)
    24     8     weights offset W (64-byte aligned; zero padding between H + D and W)
    32     8     weights length
    40     8     file length (= W + weights length)
    48     4     CRC32 of every byte of the file except these four
    52     12    reserved, 0
    H      D     description: UTF-8 JSON (below)
    W            weights: raw little-endian array bytes, each array 64-byte aligned;
                 identical arrays (the same weights in every gear) are stored once

The description is {"generator", "name", "gear": {"dim", "values"} | null, "models": [...]},
each model a CompiledModel written generically from its dataclass fields as tagged JSON
(engine/offline_codec.py: dataclasses, enums, tuples, numpy arrays by offset/length into the
weights section, IR graphs of control-flow bodies).

Why JSON and not protobuf: the description is written from the dataclasses themselves, so a
field another engineer adds to CompiledModel, a program, a task or the compile report is
stored, loaded and shown by `inspect` with no schema to keep in step; a fixed .proto would
need an edit for every such field (a Struct would be JSON again, less readably). The
description is small (tens of KB for a BERT) because every array lives in the raw weights
section, so JSON costs nothing measurable. Loading builds the dataclasses and views on one
aligned copy of the weights; it runs no pass. A field this build does not know is an error
that names it, never silently dropped.
"""

from __future__ import annotations

import dataclasses
import json
import os
import struct
import zlib
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from .bounds import MAX_OFFLINE_MODELS
from .errors import InvalidGraph, InvalidInput, InvalidModel
from .ir import Graph, TensorMeta
from .model import CompiledModel, DeviceProgram, HostProgram, TensorSig, check_dataflow
from .offline_codec import (
    ALIGN,
    Reader,
    Writer,
    align,
    array_bytes,
    check_nesting,
    plain,
    whole,
)

MAGIC = b"GEOM"
FORMAT_VERSION = 2
FLAG_GEARS = 0x1
_HEADER = struct.Struct("<4sHHIIQQQQI12x")
HEADER_SIZE = _HEADER.size  # 64
_CRC_AT = 48
_TOP_KEYS = {"generator", "name", "gear", "models"}

__all__ = ["FORMAT_VERSION", "MAGIC", "Gear", "OfflineModel", "inspect", "is_offline_model",
           "load", "load_all", "maybe_load", "read", "read_all", "save", "write"]


@dataclasses.dataclass(frozen=True)
class Gear:
    """The symbolic dim the models were compiled for, one model per value, in order."""

    dim: str
    values: tuple[int, ...]


@dataclasses.dataclass
class OfflineModel:
    """What an offline model file holds: one CompiledModel per compiled signature."""

    name: str
    models: list[CompiledModel]
    gear: Gear | None = None

    def signature(self) -> tuple[list[TensorSig], list[TensorSig]]:
        """Inputs and outputs; a dim that differs between the models is symbolic."""
        def merged(per_model: list[list[TensorSig]]) -> list[TensorSig]:
            shapes = _merge_shapes([[(s.name, s.shape) for s in sigs] for sigs in per_model],
                                   self.gear)
            return [TensorSig(s.name, s.dtype, shape) for s, shape in zip(per_model[0], shapes)]

        return merged([m.inputs for m in self.models]), merged([m.outputs for m in self.models])

    def find(self, shapes: Mapping[str, Sequence[Any]]) -> CompiledModel:
        """The model compiled for exactly these input shapes; an offline model never compiles."""
        want = {k: tuple(v) for k, v in shapes.items()}
        for m in self.models:
            if {s.name: tuple(s.shape) for s in m.inputs} == want:
                return m
        held = "; ".join(", ".join(str(s) for s in m.inputs) for m in self.models)
        raise InvalidInput(f"offline model '{self.name}' was compiled for input signatures "
                           f"[{held}]; it holds none for {_shapes_text(want)} (an offline "
                           f"model is not recompiled)", graph=self.name)

    def signature_graph(self, name: str | None = None) -> Graph:
        """A stand-in IR graph: the signature, with one opaque OfflineModel node."""
        ins, outs = self.signature()
        g = Graph(name or self.name)
        values = {s.name: g.add_input(s.name, TensorMeta(s.dtype, s.shape)) for s in ins}
        fresh = [s for s in outs if s.name not in values]
        node = g.add_node("OfflineModel", list(values.values()),
                          outputs=[s.name for s in fresh], name=self.name)
        for v, s in zip(node.outputs, fresh):
            v.meta = TensorMeta(s.dtype, s.shape)
        g.outputs = [g.values[s.name] for s in outs]
        return g


def _merge_shapes(per_model: list[list[tuple[str, Sequence[Any]]]], gear: Gear | None
                  ) -> list[tuple[Any, ...]]:
    """One shape per tensor: a dim the models agree on, else the gear's symbol (or a new one)."""
    merged = []
    for column in zip(*per_model):
        name = column[0][0]
        dims: list[Any] = []
        for axis, values in enumerate(zip(*(shape for _, shape in column))):
            if len(set(values)) == 1:
                dims.append(values[0])
            elif gear is not None and tuple(values) == tuple(gear.values):
                dims.append(gear.dim)
            else:
                dims.append(f"{name}_dim{axis}")
        merged.append(tuple(dims))
    return merged


def _shapes_text(shapes: Mapping[str, Sequence[Any]]) -> str:
    return ", ".join(f"{k}[{','.join(map(str, v))}]" for k, v in shapes.items())


# ---- writing ------------------------------------------------------------------------------
def save(compiled: CompiledModel | Sequence[CompiledModel], *, gear: Gear | None = None
         ) -> bytes:
    """The offline model file's bytes for one compiled model, or several (one per gear)."""
    return b"".join(_serialize(compiled, gear))


def write(compiled: CompiledModel | Sequence[CompiledModel], path: str | os.PathLike, *,
          gear: Gear | None = None) -> int:
    """Write the file atomically (a reader never sees half of it); returns its size."""
    chunks = _serialize(compiled, gear)
    # A name of its own per writer (two threads of a process may write one path: the
    # compile cache's replicas and sessions do), created exclusively, with the umask's mode.
    tmp = f"{os.fspath(path)}.{os.urandom(6).hex()}.tmp"
    try:
        with open(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666), "wb") as f:
            for chunk in chunks:
                f.write(chunk)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return sum(memoryview(c).nbytes for c in chunks)


def _serialize(compiled: CompiledModel | Sequence[CompiledModel], gear: Gear | None) -> list:
    models = [compiled] if isinstance(compiled, CompiledModel) else list(compiled)
    _check_models(models, gear)
    writer = Writer()
    desc = {"generator": _generator(), "name": models[0].name,
            "gear": {"dim": gear.dim, "values": list(gear.values)} if gear else None,
            "models": [writer.encode(m, f"models[{k}]") for k, m in enumerate(models)]}
    text = json.dumps(desc, separators=(",", ":"), ensure_ascii=False,
                      allow_nan=False).encode("utf-8")
    weights_at = align(HEADER_SIZE + len(text))
    padding = bytes(weights_at - HEADER_SIZE - len(text))
    size = weights_at + writer.size
    flags = FLAG_GEARS if len(models) > 1 else 0
    header = bytearray(_HEADER.pack(MAGIC, FORMAT_VERSION, flags, HEADER_SIZE, 0, len(text),
                                    weights_at, writer.size, size, 0))
    body = [text, padding, *writer.chunks]
    crc = zlib.crc32(header[_CRC_AT + 4:], zlib.crc32(header[:_CRC_AT]))
    for chunk in body:
        crc = zlib.crc32(chunk, crc)
    struct.pack_into("<I", header, _CRC_AT, crc)
    return [bytes(header), *body]


def _check_models(models: list[CompiledModel], gear: Gear | None) -> None:
    if not models:
        raise ValueError("an offline model needs at least one compiled model")
    first = models[0]
    seen = set()
    for m in models:
        if _kinds(m) != _kinds(first):
            raise ValueError(f"compiled models '{first.name}' and '{m.name}' have different "
                             f"signatures; one offline model holds gears of one graph")
        key = tuple(tuple(s.shape) for s in m.inputs)
        if key in seen:
            raise ValueError(f"two compiled models share the input signature {key}")
        seen.add(key)
    if gear is not None and len(gear.values) != len(models):
        raise ValueError(f"gear '{gear.dim}' has {len(gear.values)} values for "
                         f"{len(models)} compiled models")


def _kinds(m: CompiledModel) -> tuple:
    """Names, dtypes and ranks of the signature: what every gear of one graph shares."""
    return tuple((s.name, s.dtype, len(s.shape)) for s in [*m.inputs, *m.outputs])


def _generator() -> str:
    from graphengine import __version__

    return f"graphengine {__version__}"


# ---- reading ------------------------------------------------------------------------------
def load(data: bytes | bytearray | memoryview) -> CompiledModel:
    """The compiled model of a file that holds exactly one (see load_all for gears)."""
    stored = load_all(data)
    if len(stored.models) != 1:
        raise InvalidModel(f"offline model '{stored.name}' holds {len(stored.models)} "
                           f"compiled signatures (gears); load it with load_all()")
    return stored.models[0]


def read(path: str | os.PathLike) -> CompiledModel:
    return load(_read_file(path))


def read_all(path: str | os.PathLike) -> OfflineModel:
    return load_all(_read_file(path))


def load_all(data: bytes | bytearray | memoryview | np.ndarray) -> OfflineModel:
    """Every compiled model of the file; checks the header and checksum, compiles nothing."""
    view = memoryview(data).cast("B")
    head = _check_header(view)
    desc = _description(view, head)
    start, size = head["weights_offset"], head["weights_bytes"]
    if isinstance(data, np.ndarray) and data.flags.writeable and not (
            data.ctypes.data + start) % ALIGN:
        weights = data[start:start + size]  # read() put the file in aligned memory: no copy
    else:
        weights = _aligned_copy(view, start, size)
    reader = Reader(weights)
    try:
        unknown = sorted(set(desc) - _TOP_KEYS)
        if unknown:
            raise InvalidModel(f"offline model has top-level field '{unknown[0]}', which this "
                               f"GraphEngine does not know")
        if len(desc["models"]) > MAX_OFFLINE_MODELS:
            raise InvalidModel(f"offline model holds {len(desc['models'])} compiled "
                               f"signatures; at most {MAX_OFFLINE_MODELS} are read")
        models = [reader.decode(m) for m in desc["models"]]
        gear = desc["gear"]
        gear = Gear(str(gear["dim"]), tuple(whole(v, "a gear value") for v in gear["values"])
                    ) if gear else None
        if gear is not None and len(gear.values) != len(models):
            raise InvalidModel(f"offline model gear '{gear.dim}' has {len(gear.values)} "
                               f"values for {len(models)} compiled models")
        name = str(desc["name"])
    except InvalidModel:
        raise
    except (KeyError, TypeError, ValueError, AttributeError, IndexError) as exc:
        raise InvalidModel(f"offline model description is malformed: {type(exc).__name__}: "
                           f"{exc}") from None
    if not models or not all(isinstance(m, CompiledModel) for m in models):
        raise InvalidModel("offline model description is malformed: 'models' must be a "
                           "non-empty list of CompiledModel")
    for m in models:
        try:
            check_dataflow(m)
        except InvalidGraph as exc:
            raise InvalidModel(f"offline model is inconsistent: {exc.message}") from None
        if head["format_version"] < 2:
            for prog in m.programs:
                for task in prog.tasks if isinstance(prog, DeviceProgram) else ():
                    if task.kind == "kernel" and task.op == "Conv":
                        task.op, task.attrs = _fused_conv_v1(task.attrs)
    return OfflineModel(name, models, gear)


def _fused_conv_v1(attrs: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """A version-1 Conv task as the kernel it is now: version 1 ran the fused convolutions
    as Conv tasks marked dw=1 (ConvDw), pw=1 (ConvBlock; dw=1 when it had an expansion, else
    its `activation` was the depthwise stage's) and head=1 (ConvHead, head_trans_b default 1),
    which are kernels of their own since version 2."""
    a = dict(attrs)
    head, pw, dw = (a.pop(key, 0) for key in ("head", "pw", "dw"))
    if head:
        a["trans_b"] = a.pop("head_trans_b", 1)
        return "ConvHead", a
    if pw:
        a["expand"] = dw
        if not dw:
            for key in ("activation", "activation_alpha", "activation_beta"):
                if key in a:
                    a[f"dw_{key}"] = a.pop(key)
        return "ConvBlock", a
    return ("ConvDw" if dw else "Conv"), a


def is_offline_model(model: Any) -> bool:
    """True for offline model bytes, or a path to an offline model file."""
    if isinstance(model, (bytes, bytearray, memoryview)):
        return bytes(memoryview(model)[:len(MAGIC)]) == MAGIC
    if isinstance(model, (str, os.PathLike)):
        try:
            with open(model, "rb") as f:
                return f.read(len(MAGIC)) == MAGIC
        except (OSError, ValueError):
            return False
    return False


def maybe_load(model: Any) -> OfflineModel | None:
    """The offline model in `model` (bytes or path), or None when it is not one."""
    if not is_offline_model(model):
        return None
    return load_all(model) if not isinstance(model, (str, os.PathLike)) else read_all(model)


def _read_file(path: str | os.PathLike) -> np.ndarray:
    """The file in 64-byte aligned memory, so that its arrays can be views of it."""
    try:
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            buf = np.empty(size + ALIGN, np.uint8)
            start = -buf.ctypes.data % ALIGN
            data = buf[start:start + size]
            got = f.readinto(memoryview(data))
            return data[:got]
    except OSError as exc:
        raise InvalidModel(f"cannot read offline model {os.fspath(path)}: "
                           f"{exc.strerror}") from None


def _check_header(view: memoryview) -> dict[str, int]:
    n = len(view)
    if n < len(MAGIC) or bytes(view[:len(MAGIC)]) != MAGIC:
        raise InvalidModel(f"not an offline model: bad magic {bytes(view[:len(MAGIC)])!r} "
                           f"(expected {MAGIC!r})")
    if n < 6:
        raise InvalidModel(f"offline model is truncated: expected at least {HEADER_SIZE} "
                           f"bytes (the header), got {n}")
    version = int.from_bytes(view[4:6], "little")
    if version > FORMAT_VERSION:
        raise InvalidModel(f"file format version {version} is newer than this GraphEngine "
                           f"supports ({FORMAT_VERSION})")
    if version < 1:
        raise InvalidModel(f"offline model has an invalid format version {version}")
    if n < HEADER_SIZE:
        raise InvalidModel(f"offline model is truncated: expected at least {HEADER_SIZE} "
                           f"bytes (the header), got {n}")
    _, _, flags, hlen, _, dlen, woff, wlen, flen, crc = _HEADER.unpack_from(view)
    if hlen < HEADER_SIZE or hlen + dlen > woff or woff % ALIGN or woff + wlen != flen:
        raise InvalidModel(f"offline model header is corrupted: header {hlen} B, description "
                           f"{dlen} B, weights {wlen} B at {woff}, file {flen} B do not fit")
    if n < flen:
        raise InvalidModel(f"offline model is truncated: expected {flen} bytes, got {n}")
    if n > flen:
        raise InvalidModel(f"offline model has {n - flen} bytes past its end ({flen} bytes): "
                           f"the file is corrupted")
    actual = zlib.crc32(view[_CRC_AT + 4:], zlib.crc32(view[:_CRC_AT]))
    if actual != crc:
        raise InvalidModel(f"checksum mismatch: the file is corrupted (CRC32 {actual:08x}, "
                           f"header says {crc:08x})")
    if flags & ~FLAG_GEARS:
        raise InvalidModel(f"offline model uses flags 0x{flags:04x}, which this GraphEngine "
                           f"does not support")
    return {"format_version": version, "flags": flags, "header_bytes": hlen,
            "description_bytes": dlen, "weights_offset": woff, "weights_bytes": wlen,
            "file_bytes": flen, "crc32": crc}


def _description(view: memoryview, head: Mapping[str, int]) -> dict:
    start = head["header_bytes"]
    try:
        desc = json.loads(bytes(view[start:start + head["description_bytes"]]).decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise InvalidModel(f"offline model description is not valid JSON: {exc}") from None
    except RecursionError:  # the parser's own guard, far below which check_nesting stops
        raise InvalidModel("offline model description is nested too deep for the JSON "
                           "parser") from None
    if not isinstance(desc, dict):
        raise InvalidModel("offline model description is not a JSON object")
    check_nesting(desc, "offline model description")
    return desc


def _aligned_copy(view: memoryview, offset: int, n: int) -> np.ndarray:
    """The weights section in writable, 64-byte aligned memory (arrays are views of it)."""
    buf = np.empty(n + ALIGN, np.uint8)
    start = -buf.ctypes.data % ALIGN
    out = buf[start:start + n]
    out[:] = np.frombuffer(view, np.uint8, n, offset)
    return out


# ---- inspect ------------------------------------------------------------------------------
def inspect(data: bytes | bytearray | memoryview) -> dict:
    """A JSON-ready summary of the file, read from its description; builds no model."""
    view = memoryview(data).cast("B")
    head = _check_header(view)
    desc = _description(view, head)
    header = {"magic": MAGIC.decode(), **head, "crc32": f"{head['crc32']:08x}"}
    try:
        models = [_model_summary(m) for m in desc.get("models", [])]
        gear = desc.get("gear")
        signature = _signature_summary(models, Gear(gear["dim"], tuple(gear["values"]))
                                       if gear else None)
    except (AttributeError, TypeError, ValueError, KeyError) as exc:
        raise InvalidModel(f"offline model description is malformed: {type(exc).__name__}: "
                           f"{exc}") from None
    return {"header": header, "generator": desc.get("generator"), "name": desc.get("name"),
            "provenance": _provenance_summary(models), "gear": gear, "signature": signature,
            "models": models, "weights_bytes": head["weights_bytes"]}


def _provenance_summary(models: list[dict]) -> dict | None:
    """The file's provenance: its first model's, with the CPU features every model needs
    (the gears of one graph are compiled together); None for a file written before it was
    recorded."""
    found = [m["provenance"] for m in models if isinstance(m.get("provenance"), dict)]
    if not found:
        return None
    first = found[0]
    features = sorted({str(f) for p in found for f in p.get("cpu_features") or ()})
    return {"producer": first.get("producer") or {},
            **{k: first.get(k, "") for k in ("compiler_version", "runtime_version",
                                              "kernel_library", "backend")},
            "cpu_features": features}


def _signature_summary(models: list[dict], gear: Gear | None) -> dict | None:
    if not models:
        return None
    out = {}
    for key in ("inputs", "outputs"):
        shapes = _merge_shapes([[(s["name"], s["shape"]) for s in m[key]] for m in models], gear)
        out[key] = [{**sig, "shape": list(shape)} for sig, shape in zip(models[0][key], shapes)]
    return out


def _model_summary(m: dict) -> dict:
    programs = []
    for p in m.get("programs", []):
        kind = p.get("$", "").rpartition(":")[2]
        if kind == DeviceProgram.__name__:
            programs.append({"index": p.get("index"), "engine": "device",
                             "tensors": len(p.get("tensors", [])),
                             "tasks": len(p.get("tasks", [])),
                             "streams": p.get("num_streams"), "events": p.get("num_events"),
                             "arena_bytes": p.get("arena_bytes"),
                             "weights_bytes": array_bytes(p.get("weights"))})
        elif kind == HostProgram.__name__:
            programs.append({"index": p.get("index"), "engine": "host",
                             "steps": len(p.get("steps", [])),
                             "constants": len(p.get("constants", {})),
                             "weights_bytes": array_bytes(p.get("constants"))})
        else:
            programs.append({"index": p.get("index"), "engine": kind})
    report = m.get("report") or {}
    try:
        report_text = Reader(None).decode(report).render()
    except Exception:  # a report this build cannot rebuild: the JSON below still shows it
        report_text = None
    return {"name": m.get("name"), "inputs": plain(m.get("inputs")),
            "outputs": plain(m.get("outputs")), "programs": programs,
            "memory": plain(report.get("memory")),
            "weights_bytes": sum(p.get("weights_bytes", 0) for p in programs) + array_bytes(
                m.get("constants")),
            "report": plain(report), "report_text": report_text,
            "provenance": plain(m.get("provenance"))}


