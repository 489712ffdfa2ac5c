"""device_threads 0: the CPUs a process may use, from fake cgroup v1 and v2 trees."""

from __future__ import annotations

import pathlib

import pytest

from graphengine.server.config import ServerConfig
from graphengine.server.cpu_quota import cgroup_quota, cpu_budget
from graphengine.server.rpc.app import device_threads


def _tree(tmp_path: pathlib.Path, proc: str, files: dict[str, str]) -> tuple[str, str]:
    root = tmp_path / "cgroup"
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    root.mkdir(parents=True, exist_ok=True)
    proc_file = tmp_path / "proc_cgroup"
    proc_file.write_text(proc)
    return str(root), str(proc_file)


def test_v2_quota_rounds_up_and_caps_the_affinity(tmp_path) -> None:
    root, proc = _tree(tmp_path, "0::/kubepods/pod1/ctr\n", {
        "kubepods/pod1/ctr/cpu.max": "150000 100000\n",   # 1.5 CPUs: 2 threads
        "kubepods/pod1/cpu.max": "max 100000\n",
        "cpu.max": "max 100000\n"})
    budget = cpu_budget(root, proc, affinity=8)
    assert (budget.threads, budget.quota, budget.affinity) == (2, 1.5, 8)
    assert "cgroup quota 1.5 CPUs" in budget.source and "ctr/cpu.max" in budget.source


def test_v2_parent_level_limits_too(tmp_path) -> None:
    """A pod-level limit above the container's cgroup counts: the smallest level wins."""
    root, proc = _tree(tmp_path, "0::/kubepods/pod1/ctr\n", {
        "kubepods/pod1/ctr/cpu.max": "max 100000\n",
        "kubepods/pod1/cpu.max": "300000 100000\n"})
    assert cgroup_quota(root, proc)[0] == 3.0
    assert cpu_budget(root, proc, affinity=16).threads == 3


def test_v2_without_a_limit_follows_the_affinity(tmp_path) -> None:
    root, proc = _tree(tmp_path, "0::/\n", {"cpu.max": "max 100000\n"})
    budget = cpu_budget(root, proc, affinity=6)
    assert (budget.threads, budget.quota, budget.source) == (6, None, "CPU affinity")


def test_affinity_smaller_than_the_quota_wins(tmp_path) -> None:
    """A Guaranteed pod under the static CPU manager is pinned to its cores."""
    root, proc = _tree(tmp_path, "0::/\n", {"cpu.max": "800000 100000\n"})
    budget = cpu_budget(root, proc, affinity=4)
    assert budget.threads == 4 and budget.quota == 8.0
    assert budget.source == "CPU affinity (cgroup quota 8 CPUs)"


def test_v1_cfs_quota(tmp_path) -> None:
    root, proc = _tree(tmp_path, "12:cpu,cpuacct:/kubepods/pod2/ctr\n3:memory:/x\n", {
        "cpu,cpuacct/kubepods/pod2/ctr/cpu.cfs_quota_us": "50000\n",   # half a CPU: 1 thread
        "cpu,cpuacct/kubepods/pod2/ctr/cpu.cfs_period_us": "100000\n",
        "cpu,cpuacct/cpu.cfs_quota_us": "-1\n",
        "cpu,cpuacct/cpu.cfs_period_us": "100000\n"})
    budget = cpu_budget(root, proc, affinity=4)
    assert (budget.threads, budget.quota) == (1, 0.5)


def test_v1_inside_a_container_reads_the_mount_root(tmp_path) -> None:
    """/proc/self/cgroup shows the host's path, but the container's mount root is its own
    cgroup: the path does not exist below it, so the root's files are the process's."""
    root, proc = _tree(tmp_path, "4:cpu:/docker/abc123\n", {
        "cpu/cpu.cfs_quota_us": "200000\n", "cpu/cpu.cfs_period_us": "100000\n"})
    assert cpu_budget(root, proc, affinity=32).threads == 2


@pytest.mark.parametrize("text", ["", "garbage", "-5 100000", "100000 0", "1 2 3", "max"])
def test_unreadable_or_malformed_quota_is_no_quota(tmp_path, text: str) -> None:
    root, proc = _tree(tmp_path, "0::/\n", {"cpu.max": text})
    assert cgroup_quota(root, proc) == (None, "")
    assert cpu_budget(root, proc, affinity=3).threads == 3


def test_missing_files_and_a_tiny_quota(tmp_path) -> None:
    assert cgroup_quota(str(tmp_path / "none"), str(tmp_path / "none")) == (None, "")
    root, proc = _tree(tmp_path, "0::/\n", {"cpu.max": "1000 100000\n"})  # 0.01 CPU
    assert cpu_budget(root, proc, affinity=4).threads == 1


def test_device_threads_config_wins_over_the_budget() -> None:
    assert device_threads(ServerConfig(device_threads=3)) == (3, "config")
    threads, source = device_threads(ServerConfig())
    assert threads == cpu_budget().threads and source == cpu_budget().source
