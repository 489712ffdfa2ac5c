"""Where a compiled model came from, and what it needs of the CPU (GE's .om header role: the
framework, CANN version and chip a model was built with).

Every CompiledModel carries a `Provenance`, written into offline model files and the compile
cache with the rest of the model (engine/offline_codec.py writes dataclasses generically):

- `producer`: the framework, the exporter and its version the graph came from. Importers
  put it on the IR graph (`Graph.producer`): an ONNX model's producer_name / producer_version
  and its IR version and opset, a TensorFlow GraphDef's producer version, the builder's or
  the torch backend's own name.
- `compiler_version` / `runtime_version`: the GraphEngine that compiled it, and its native
  runtime (the same package; recorded apart so a split build shows).
- `kernel_library`: the kernel library of the backend it was compiled for ("oneDNN 3.2.0").
- `cpu_features`: the CPU features its kernels need to run, from what the compile chose:
  the runtime's own AVX-512 block kernels (ConvBlock, ConvHead) need AVX-512F and VL; every
  other kernel picks its code path when it runs, so it adds nothing. A model is refused at
  load, with FAILED_PRECONDITION naming the missing features, on a CPU (or a runtime with
  AVX-512 forbidden) that lacks one; the loose alternative, failing in the middle of
  building kernels, named a node instead of the cause.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Iterable

from .errors import FailedPrecondition

# Kernel op type -> the CPU features it cannot run without (runtime_ext/src/host: the block
# kernels' block::available() is AVX-512VL with the AVX-512 kernels allowed).
_KERNEL_FEATURES: dict[str, tuple[str, ...]] = {
    "ConvBlock": ("avx512f", "avx512vl"),
    "ConvHead": ("avx512f", "avx512vl"),
}


@dataclasses.dataclass
class Producer:
    framework: str = ""  # "pytorch", "tensorflow", "graphengine.Graph", ... ("" unknown)
    exporter: str = ""   # the format and the writer, e.g. "ONNX IR 8, opset 17"
    version: str = ""    # the framework's version, as the file records it


@dataclasses.dataclass
class Provenance:
    producer: Producer = dataclasses.field(default_factory=Producer)
    compiler_version: str = ""
    runtime_version: str = ""
    kernel_library: str = ""
    cpu_features: tuple[str, ...] = ()
    backend: str = "host"


def producer_of(info: dict | None) -> Producer:
    info = info or {}
    return Producer(str(info.get("framework", "")), str(info.get("exporter", "")),
                    str(info.get("version", "")))


def record(producer: dict | None, ops: Iterable[str], backend: str, library: str
           ) -> Provenance:
    """The provenance of a model compiled now from a graph whose importer said `producer`,
    whose device programs run kernels `ops` on `backend` (kernel library `library`)."""
    from graphengine import __version__

    needed = sorted({f for op in ops for f in _KERNEL_FEATURES.get(op, ())})
    return Provenance(producer_of(producer), __version__, __version__, library,
                      tuple(needed), backend)


@functools.cache
def _cpuinfo_flags() -> frozenset[str]:
    try:
        # ASCII text, read as UTF-8: the codec every process has loaded (an "ascii" one is
        # imported on first use, inside the first model's load)
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.startswith("flags"):
                    return frozenset(line.partition(":")[2].split())
    except OSError:
        pass
    return frozenset()


def available_features(isa: str) -> frozenset[str]:
    """The CPU features kernels may use on a device whose caps say `isa`: the CPU's (Linux
    /proc/cpuinfo), without the AVX-512 ones unless the runtime allows its AVX-512 kernels
    (`isa` "avx512")."""
    flags = _cpuinfo_flags()
    if isa != "avx512":
        flags = frozenset(f for f in flags if not f.startswith("avx512"))
    return flags


def check_cpu(name: str, provenance: Provenance | None, isa: str) -> None:
    """Refuses a model whose kernels need CPU features this machine lacks, or that its
    device (caps["isa"]) does not allow."""
    if provenance is None or not provenance.cpu_features:
        return
    have = available_features(isa)
    if not have:
        return  # no /proc/cpuinfo: the kernels' own checks are the only ones
    missing = [f for f in provenance.cpu_features if f not in have]
    if missing:
        raise FailedPrecondition(
            f"model '{name}' was compiled for CPU features {list(provenance.cpu_features)}; "
            f"this CPU (or runtime: AVX-512 kernels forbidden) lacks {missing}. Recompile it "
            f"on this machine (graphengine compile) instead of loading the compiled model")


__all__ = ["Producer", "Provenance", "available_features", "check_cpu", "producer_of",
           "record"]
