"""The compile target: what the device a model is compiled for can run, asked in one place.

Placement (which kernels exist, for which dtypes and shapes), layout (the blocked format, a
TransData kernel), fusion (rows that need a fused kernel: attention, ConvDw, ConvBlock, ConvHead)
and task generation (how many weight segments a model may have) read a `Target` passed to
them, instead of each asking the native runtime itself. A backend is a registered factory:
each backend of the native runtime (`_runtime.backends()`: `host`, the CPU through oneDNN)
is registered from what its device reports; a CUDA or Ascend backend registered in the
runtime becomes a target the same way (docs/ARCHITECTURE.md, "Backends") and the compiler
does not change. Compile option `target` names it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence

from .errors import InvalidInput

KernelInfo = Callable[[str, Sequence[str], Sequence[Sequence[int]], Mapping | None], dict]


@dataclasses.dataclass(frozen=True)
class Target:
    name: str
    isa: str  # the vector ISA its own kernels use ("avx512", "avx2", ... or "" if none)
    ops: frozenset[str]  # the kernel op types the device implements
    # kernel_info(op, dtypes, shapes, attrs) -> {"supported": bool, "reason": str, ...}: whether
    # the device runs that kernel on these dtypes and shapes (GE's kernel info store)
    kernel_info: KernelInfo = dataclasses.field(repr=False, compare=False)
    blocked_format: str = ""  # the blocked activation format its convolutions prefer, or ""
    conv_blocks: bool = False  # its ConvBlock and ConvHead kernels run (the block kernels' ISA)
    # its Conv, MatMul and Gemm kernels take fused epilogues (bias, residual sum, activation)
    epilogues: bool = False
    conv_activation2: bool = False  # its plain Conv takes a second activation (`activation2`)
    max_weight_segments: int = 1  # weight buffers one loaded model may take in place
    threads: int = 1  # the compute threads of the machine it runs on
    # the native runtime backend (`_runtime.backends()`) its device programs load on: its own
    # name for a backend's target; a target that narrows a backend (a compile-only view)
    # names the backend it narrows
    backend: str = "host"

    def runs(self, op: str) -> bool:
        return op in self.ops


_FACTORIES: dict[str, Callable[[], Target]] = {}


def register(name: str, factory: Callable[[], Target]) -> None:
    """Make a backend's target available by name (to compile option `target`)."""
    _FACTORIES[name] = factory


def get(name: str = "host") -> Target:
    """The target named `name`, as its backend sees the machine now."""
    factory = _FACTORIES.get(name)
    if factory is None:
        raise InvalidInput(f"unknown compile target '{name}'; known: {sorted(_FACTORIES)}")
    return factory()


def names() -> list[str]:
    return sorted(_FACTORIES)


_native_cache: dict[tuple, Target] = {}


def _native(backend: str) -> Target:
    """A backend of the native runtime, as its device describes itself: its kernels, its
    kernel info store and its capabilities. Rebuilt when those change (the host's follow
    its ISA switch: tests run the AVX-512 kernels and the others in one process)."""
    import functools
    import os

    from .runtime import default_device, kernel_info

    device = default_device(backend=backend)
    caps = device.caps
    key = (backend, *sorted(caps.items()))
    if key not in _native_cache:
        _native_cache[key] = Target(
            name=backend, isa=caps["isa"], ops=frozenset(device.supported_ops()),
            kernel_info=functools.partial(kernel_info, device=device),
            blocked_format=caps["blocked_format"], conv_blocks=caps["conv_blocks"],
            epilogues=caps["epilogues"], conv_activation2=bool(caps.get("conv_activation2")),
            max_weight_segments=caps["max_weight_segments"], backend=backend,
            threads=len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity")
            else (os.cpu_count() or 1))
    return _native_cache[key]


def _register_native() -> None:
    """One target per backend the native runtime was built with: a backend added there
    (runtime_ext/src/backends.cc) is a compile target without a change here."""
    from graphengine import _runtime

    for backend in _runtime.backends():
        register(backend, lambda backend=backend: _native(backend))


_register_native()

__all__ = ["KernelInfo", "Target", "get", "names", "register"]
