"""How many CPUs this process may use: its CPU affinity and its cgroup's CPU quota.

A container with a CPU limit (Kubernetes `resources.limits.cpu`) still sees every core of
its node, but the kernel lets it run only `quota / period` CPUs' worth of time per period;
a thread pool sized to the node's cores is throttled for most of each period. So
`device_threads: 0` means the smaller of the CPUs the process may be scheduled on
(sched_getaffinity: the static CPU manager pins a Guaranteed pod's cores this way) and the
quota, rounded up, read from every cgroup level between the process and the root:

- cgroup v2: `cpu.max` ("max 100000" or "<quota> <period>");
- cgroup v1: `cpu.cfs_quota_us` (-1: none) and `cpu.cfs_period_us` of the `cpu` hierarchy.

`root` and `proc_cgroup` are parameters so that tests can point them at fake files.
"""

from __future__ import annotations

import dataclasses
import math
import os
from collections.abc import Iterator

MAX_THREADS = 1024  # the device's own bound (config.device_threads)


@dataclasses.dataclass(frozen=True)
class CpuBudget:
    threads: int        # what device_threads 0 becomes
    affinity: int       # CPUs the process may be scheduled on
    quota: float | None  # CPUs' worth of time per period, the smallest of every level
    source: str         # where `threads` came from, for the log line


def _affinity() -> int:
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def _read(path: str, limit: int = 256) -> str | None:
    """The file's first `limit` characters, stripped; None if it cannot be read."""
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.read(limit).strip()
    except OSError:
        return None


def _levels(base: str, path: str) -> Iterator[str]:
    """`base/path`, then each parent folder up to `base` (a pod's limit sits above its
    container's cgroup)."""
    parts = [p for p in path.split("/") if p and p not in (".", "..")]
    for n in range(len(parts), -1, -1):
        yield os.path.join(base, *parts[:n])


def _quota_v2(text: str | None) -> float | None:
    fields = (text or "").split()
    if len(fields) != 2 or fields[0] == "max":
        return None
    try:
        quota, period = int(fields[0]), int(fields[1])
    except ValueError:
        return None
    return quota / period if quota > 0 and period > 0 else None


def _quota_v1(quota_text: str | None, period_text: str | None) -> float | None:
    try:
        quota, period = int(quota_text or ""), int(period_text or "")
    except ValueError:
        return None
    return quota / period if quota > 0 and period > 0 else None


def _cgroup_paths(proc_cgroup: str) -> tuple[str | None, str | None]:
    """The process's cgroup v2 path and its cgroup v1 `cpu` controller path."""
    v2 = v1 = None
    for line in (_read(proc_cgroup, 64 * 1024) or "").splitlines():
        hier, _, rest = line.partition(":")
        controllers, _, path = rest.partition(":")
        if hier == "0" and controllers == "":
            v2 = path
        elif "cpu" in controllers.split(","):
            v1 = path
    return v2, v1


def _smallest(quotas: Iterator[tuple[float | None, str]]) -> tuple[float | None, str]:
    best: tuple[float | None, str] = (None, "")
    for quota, where in quotas:
        if quota is not None and (best[0] is None or quota < best[0]):
            best = (quota, where)
    return best


def cgroup_quota(root: str = "/sys/fs/cgroup", proc_cgroup: str = "/proc/self/cgroup"
                 ) -> tuple[float | None, str]:
    """The smallest CPU quota over the process's cgroup levels, in CPUs, and the file that
    set it; (None, "") when no level has one."""
    v2, v1 = _cgroup_paths(proc_cgroup)
    found: list[tuple[float | None, str]] = []
    if v2 is not None:
        found += [(_quota_v2(_read(os.path.join(d, "cpu.max"))), os.path.join(d, "cpu.max"))
                  for d in _levels(root, v2)]
    if v1 is not None:
        # The cpu controller is mounted as cpu, cpu,cpuacct or cpuacct,cpu; inside a
        # container its mount root is the container's own cgroup, so the path from
        # /proc/self/cgroup (the host's view) may not exist below it: then the mount's
        # root is the process's level.
        for mount in ("cpu", "cpu,cpuacct", "cpuacct,cpu"):
            base = os.path.join(root, mount)
            if not os.path.isdir(base):
                continue
            levels = [d for d in _levels(base, v1) if os.path.isdir(d)]
            found += [(_quota_v1(_read(os.path.join(d, "cpu.cfs_quota_us")),
                                 _read(os.path.join(d, "cpu.cfs_period_us"))),
                       os.path.join(d, "cpu.cfs_quota_us")) for d in levels]
            break
    return _smallest(iter(found))


def cpu_budget(root: str = "/sys/fs/cgroup", proc_cgroup: str = "/proc/self/cgroup",
               affinity: int | None = None) -> CpuBudget:
    """The threads `device_threads: 0` stands for: min(affinity, ceil(quota)), >= 1."""
    cpus = affinity if affinity is not None else _affinity()
    quota, where = cgroup_quota(root, proc_cgroup)
    if quota is not None and math.ceil(quota) < cpus:
        threads, source = math.ceil(quota), f"cgroup quota {quota:g} CPUs ({where})"
    else:
        threads, source = cpus, "CPU affinity" + (f" (cgroup quota {quota:g} CPUs)"
                                                 if quota is not None else "")
    return CpuBudget(max(1, min(threads, MAX_THREADS)), cpus, quota, source)
