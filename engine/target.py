"""The compile target: what the device a model is compiled for can run, asked in one place.

Placement (which kernels exist, for which dtypes and shapes), layout (the blocked format, a
TransData kernel), fusion (rows that need a fused kernel: attention, ConvDw, ConvBlock, ConvHead)
and task generation (how many weight segments a model may have) read a `Target` passed to
them, instead of each asking the native runtime itself. A backend is a registered factory:
`host` (the native runtime with oneDNN, this machine) is the one there is; a CUDA or Ascend
backend registers its own (docs/ARCHITECTURE.md, "Backends") and the compiler does not change.
Compile option `target` names it.
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
    max_weight_segments: int = 1  # weight buffers one loaded model may take in place
    threads: int = 1  # the compute threads of the machine it runs on

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


_host_cache: dict[tuple, Target] = {}


def _host() -> Target:
    """The native runtime on this CPU. Rebuilt when its ISA switch changes (tests run the
    AVX-512 kernels and the others in one process)."""
    import os

    from graphengine import _runtime

    from .runtime import device_kernel_ops, kernel_info

    avx512 = _runtime.cpu_has_avx512()
    key = (avx512, _runtime.conv_block_available())
    if key not in _host_cache:
        _host_cache[key] = Target(
            name="host", isa="avx512" if avx512 else "avx2", ops=device_kernel_ops(),
            kernel_info=kernel_info, blocked_format=_runtime.blocked_format(),
            conv_blocks=key[1], max_weight_segments=_runtime.MAX_WEIGHT_SEGMENTS,
            threads=len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity")
            else (os.cpu_count() or 1))
    return _host_cache[key]


register("host", _host)

__all__ = ["KernelInfo", "Target", "get", "names", "register"]
