"""The compile cache's key: everything a compiled model depends on, hashed.

A cached artifact is only reused when the compile that would replace it must give the same
model, so the key covers (`key_parts`):

- `graph`: the imported graph itself (`graph_digest`: name, opset, inputs, outputs, every
  node with its attributes and control-flow bodies, every constant's bytes), whatever it
  was read from (ONNX with external data, TensorFlow, GraphDef, the builder);
- `signature`: the concrete input shapes this model is specialized for (a gear is one);
- `options`: every compile option (`lint` aside: it only checks);
- `build`: the package version, the offline format version, a digest of the native
  runtime library and of the compiler's Python sources (an editable install changes code
  without a version bump), numpy's version (constant folding runs numpy) and Python's;
- `target`: what the compile target reported (ISA, blocked format, fused kernels,
  epilogues, weight segments, its kernels, oneDNN's version, threads);
- `cpu`: the CPU features the kernels choose by (AVX2, AVX-512 and its VNNI/BF16/FP16
  extensions, AMX) and the environment that narrows them (ONEDNN_MAX_CPU_ISA,
  GE_NO_AVX512), so a replica on another CPU never loads a model planned for this one.

A graph that uses a custom operator is not cached (`uncacheable_reason`): its kernels are
the user's code, which constant folding and placement run at compile time and no digest
here can see.
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import hashlib
import json
import os
import platform
import struct
import sys
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from graphengine.engine.ir import Graph, TensorMeta

KEY_FORMAT = 1  # bump when what goes into the key changes meaning

# /proc/cpuinfo flags that decide which kernels oneDNN and the runtime's own code use.
CPU_FLAGS = ("sse4_2", "avx", "avx2", "fma", "f16c", "avx512f", "avx512cd", "avx512bw",
             "avx512dq", "avx512vl", "avx512_vnni", "avx512vnni", "avx512_bf16",
             "avx512_fp16", "avx_vnni", "amx_tile", "amx_int8", "amx_bf16", "amx_fp16")
ISA_ENVIRONMENT = ("ONEDNN_MAX_CPU_ISA", "DNNL_MAX_CPU_ISA", "GE_NO_AVX512")


class Uncacheable(Exception):
    """The graph holds something the digest cannot give stable bytes for."""


# ---- the graph ----------------------------------------------------------------------------
def graph_digest(graph: Graph) -> str:
    """SHA-256 of the graph as imported: equal digests mean the compiler sees the same
    graph. Raises Uncacheable for an attribute of a kind it cannot encode."""
    h = hashlib.sha256()
    _digest_graph(h, graph)
    return h.hexdigest()


def _put(h: Any, tag: bytes, data: bytes | memoryview = b"") -> None:
    # Tag and length first: no two different sequences of fields give the same stream.
    h.update(tag)
    h.update(struct.pack("<Q", len(data) if isinstance(data, bytes) else data.nbytes))
    h.update(data)


def _text(h: Any, tag: bytes, value: str) -> None:
    _put(h, tag, value.encode("utf-8", "surrogatepass"))


def _meta(h: Any, meta: TensorMeta | None) -> None:
    if meta is None:
        _put(h, b"M-")
        return
    dims = "?" if meta.shape is None else ",".join(
        f"s:{d}" if isinstance(d, str) else str(d) for d in meta.shape)
    _text(h, b"M", f"{meta.dtype.value}[{dims}]")


def _array(h: Any, array: np.ndarray) -> None:
    a = np.asarray(array)
    _text(h, b"A", f"{a.dtype.str}{a.shape}")
    if a.dtype.kind == "O":  # strings held as objects: their values, not their pointers
        for item in a.reshape(-1):
            _value(h, item)
    else:
        # (a byte view: numpy dtypes without a buffer format, bfloat16's, hash too)
        _put(h, b"D", memoryview(np.ascontiguousarray(a).reshape(-1).view(np.uint8)))


def _value(h: Any, value: Any) -> None:
    """One attribute value, by kind."""
    if value is None:
        _put(h, b"N")
    elif isinstance(value, (bool, np.bool_)):
        _put(h, b"B", b"1" if value else b"0")
    elif isinstance(value, (int, np.integer)):
        _text(h, b"I", str(int(value)))
    elif isinstance(value, (float, np.floating)):
        _put(h, b"F", struct.pack("<d", float(value)))
    elif isinstance(value, str):
        _text(h, b"S", value)
    elif isinstance(value, (bytes, bytearray)):
        _put(h, b"Y", bytes(value))
    elif isinstance(value, np.ndarray):
        _array(h, value)
    elif isinstance(value, enum.Enum):
        _text(h, b"E", f"{type(value).__name__}.{value.name}")
    elif isinstance(value, (list, tuple)):
        _put(h, b"L", struct.pack("<Q", len(value)))
        for item in value:
            _value(h, item)
    elif isinstance(value, Mapping):
        _put(h, b"K", struct.pack("<Q", len(value)))
        for key in sorted(value, key=str):
            _text(h, b"k", str(key))
            _value(h, value[key])
    elif isinstance(value, Graph):
        _put(h, b"G")
        _digest_graph(h, value)
    elif isinstance(value, TensorMeta):
        _meta(h, value)
    else:
        raise Uncacheable(f"an attribute of type {type(value).__name__}")


def _digest_graph(h: Any, graph: Graph) -> None:
    _text(h, b"g", graph.name)
    _text(h, b"o", str(graph.opset))
    for tag, values in ((b"i", graph.inputs), (b"O", graph.outputs)):
        _put(h, tag, struct.pack("<Q", len(values)))
        for v in values:
            _text(h, b"n", v.name)
            _meta(h, v.meta)
    for v in graph.constants():
        _text(h, b"c", v.name)
        _array(h, v.const)
    for node in graph.nodes:
        _text(h, b"N", node.name)
        _text(h, b"t", node.op_type)
        _value(h, [v.name if v is not None else "" for v in node.inputs])
        _value(h, [v.name for v in node.outputs])
        _value(h, node.attrs)


def uncacheable_reason(graph: Graph) -> str | None:
    """Why this graph's compiled model cannot be keyed, or None."""
    from graphengine.engine.ops.custom import custom_ops

    custom = set(custom_ops())
    if not custom:
        return None
    for node in _all_nodes(graph):
        if node.op_type in custom:
            return (f"it uses custom operator '{node.op_type}' (node '{node.name}'), whose "
                    f"kernels are code the cache key cannot cover")
    return None


def _all_nodes(graph: Graph):
    for node in graph.nodes:
        yield node
        for value in node.attrs.values():
            if isinstance(value, Graph):
                yield from _all_nodes(value)


# ---- the build, the target and the CPU ---------------------------------------------------
@functools.lru_cache(maxsize=1)
def build_id() -> dict[str, str]:
    """What identifies the code that compiles: computed once per process (~10 ms)."""
    import graphengine
    from graphengine import _runtime
    from graphengine.engine import offline

    engine_dir = os.path.dirname(os.path.abspath(offline.__file__))
    return {
        "version": graphengine.__version__,
        "offline_format": str(offline.FORMAT_VERSION),
        "runtime": _file_digest(_runtime.__file__),
        "compiler": _sources_digest(engine_dir),
        "numpy": np.__version__,
        "python": f"{sys.implementation.name}-{sys.version_info[0]}.{sys.version_info[1]}",
        "machine": platform.machine(),
    }


def _file_digest(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _sources_digest(root: str) -> str:
    """The compiler package's Python sources, path and bytes, in a fixed order."""
    h = hashlib.sha256()
    files = []
    for folder, dirs, names in os.walk(root):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__")
        files += [os.path.join(folder, n) for n in names if n.endswith(".py")]
    for path in sorted(files):
        _text(h, b"p", os.path.relpath(path, root).replace(os.sep, "/"))
        with open(path, "rb") as f:
            _put(h, b"b", f.read())
    return h.hexdigest()


def target_description(target: Any) -> dict[str, Any]:
    """The compile target as the compiler reads it (engine.target.Target)."""
    device_library = ""
    try:
        from graphengine.engine.runtime import default_device

        device_library = str(default_device(backend=target.backend).caps.get("library", ""))
    except Exception:  # a target whose backend has no device here: its fields still count
        pass
    return {"name": target.name, "backend": target.backend, "isa": target.isa,
            "blocked_format": target.blocked_format, "conv_blocks": target.conv_blocks,
            "epilogues": target.epilogues, "conv_activation2": target.conv_activation2,
            "max_weight_segments": target.max_weight_segments,
            "threads": target.threads, "library": device_library,
            "ops": hashlib.sha256(",".join(sorted(target.ops)).encode()).hexdigest()}


@functools.lru_cache(maxsize=1)
def _cpuinfo_flags() -> tuple[str, ...]:
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                key, _, value = line.partition(":")
                if key.strip() in ("flags", "Features"):
                    return tuple(sorted(set(value.split())))
    except OSError:
        pass
    return ()


def cpu_features(environ: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The CPU features the compiled kernels were chosen by, and what narrows them."""
    env = os.environ if environ is None else environ
    flags = _cpuinfo_flags()
    return {"flags": [f for f in CPU_FLAGS if f in flags] if flags
            else [platform.processor() or platform.machine()],
            "environment": {k: env[k] for k in ISA_ENVIRONMENT if k in env}}


# ---- the key ------------------------------------------------------------------------------
def key_parts(digest: str, shapes: Mapping[str, Sequence[Any] | None], options: Any,
              target: Any) -> dict[str, Any]:
    """Every component of the key, as plain JSON-ready data (tests change each one)."""
    opts = {f.name: getattr(options, f.name) for f in dataclasses.fields(options)
            if f.name != "lint"}
    return {"key_format": KEY_FORMAT, "graph": digest,
            "signature": sorted([name, None if shape is None else [
                d if isinstance(d, int) else str(d) for d in shape]]
                for name, shape in shapes.items()),
            "options": opts, "build": build_id(), "target": target_description(target),
            "cpu": cpu_features()}


def make_key(parts: Mapping[str, Any]) -> str:
    """The hex SHA-256 of the parts' canonical JSON: the entry's file name."""
    text = json.dumps(parts, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


__all__ = ["KEY_FORMAT", "Uncacheable", "build_id", "cpu_features", "graph_digest",
           "key_parts", "make_key", "target_description", "uncacheable_reason"]
