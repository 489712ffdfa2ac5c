"""The host's BLAS runs on the calling thread.

numpy's matmul goes to the BLAS it was built with (OpenBLAS in the PyPI wheels), which keeps
a pool of its own threads, one a core, and lets them spin after each call. Host steps (a
mixture-of-experts layer after its NonZero, anything of data-dependent shape) run between
device partitions, whose OpenMP team spins too: the two pools took each other's cores. A
16x128 by 128x512 float32 matmul took 4-12 ms on two threads of a loaded 2-core machine
against 70 us on one, and a small Mixtral's run 163 ms against 5.6 ms (ONNX Runtime: 2.1).

The compile's constant folding runs numpy too: a fresh process's first run then stalled
77-94 ms in 6 of 8 processes (more_funnel, whose run takes 0.3 ms), while OpenBLAS's worker,
woken by a folded MatMul, spun on and held the core the device's team needed; with the pool
at one thread, 0 of 8 stalled.

So the process's BLAS pools are set to one thread when a graph compiles and when a host
program is built: the device's team is where the engine's parallelism lives. The BLAS
libraries are the ones already mapped into the process (numpy loads its own at import),
found in /proc/self/maps and told through their own set-threads entry point; a BLAS without
one, or a platform without /proc, is left as it is.
"""

from __future__ import annotations

import ctypes
from pathlib import Path

# (library name part, set-threads symbols, get-threads symbols), first found wins
_BLAS = (
    ("openblas", ("scipy_openblas_set_num_threads64_", "scipy_openblas_set_num_threads",
                  "openblas_set_num_threads64_", "openblas_set_num_threads"),
     ("scipy_openblas_get_num_threads64_", "scipy_openblas_get_num_threads",
      "openblas_get_num_threads64_", "openblas_get_num_threads")),
    ("mkl_rt", ("MKL_Set_Num_Threads",), ("MKL_Get_Max_Threads",)),
)


def _mapped_libraries(maps: Path = Path("/proc/self/maps")) -> list[str]:
    try:
        text = maps.read_text()
    except OSError:
        return []
    seen: dict[str, None] = {}
    for line in text.splitlines():
        path = line.rsplit(None, 1)[-1] if "/" in line else ""
        if path.startswith("/") and ".so" in path:
            seen.setdefault(path, None)
    return list(seen)


def _entry(lib: ctypes.CDLL, names: tuple[str, ...]):
    for name in names:
        fn = getattr(lib, name, None)
        if fn is not None:
            return fn
    return None


_found: list[tuple[str, object, object]] | None = None  # (path, set, get), found once


def _setters() -> list[tuple[str, object, object]]:
    global _found
    if _found is None:
        found = []
        for path in _mapped_libraries():
            for part, setters, getters in _BLAS:
                if part not in Path(path).name.lower():
                    continue
                try:
                    lib = ctypes.CDLL(path)
                except OSError:
                    continue
                set_ = _entry(lib, setters)
                if set_ is not None:
                    found.append((path, set_, _entry(lib, getters)))
        _found = found
    return _found


def limit_blas_threads(threads: int = 1) -> dict[str, int]:
    """Sets every BLAS library mapped when it first ran to `threads` (>= 1) threads; returns
    the count each had before, by path (-1: the library does not say)."""
    threads = max(1, int(threads))
    before = {}
    for path, set_, get in _setters():
        before[path] = int(get()) if get is not None else -1
        if before[path] != threads:
            set_(ctypes.c_int(threads))
    return before
