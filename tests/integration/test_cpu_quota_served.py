"""device_threads 0 on a real server in a real cgroup with a CPU quota of half a CPU.

The test makes a cgroup (v1 `cpu` hierarchy, or v2 with the cpu controller), gives it the
quota, starts `graphengine serve` inside it and reads the `serving` log line; it removes the
cgroup afterwards. Making a cgroup needs root and a writable cgroup filesystem: without
them it is skipped, saying so.
"""

from __future__ import annotations

import os
import pathlib
import re
import signal
import subprocess
import sys
import uuid

import pytest

from tests.conftest import READY

V1 = pathlib.Path("/sys/fs/cgroup/cpu")
V2 = pathlib.Path("/sys/fs/cgroup")


def _make_cgroup() -> tuple[pathlib.Path, str]:
    """A fresh cgroup limited to half a CPU, and the file the limit is in."""
    name = f"graphengine-test-{uuid.uuid4().hex[:8]}"
    try:
        if (V1 / "cpu.cfs_quota_us").exists():
            group = V1 / name
            group.mkdir()
            (group / "cpu.cfs_period_us").write_text("100000")
            (group / "cpu.cfs_quota_us").write_text("50000")
            return group, "cpu.cfs_quota_us"
        if "cpu" in (V2 / "cgroup.subtree_control").read_text().split():
            group = V2 / name
            group.mkdir()
            (group / "cpu.max").write_text("50000 100000")
            return group, "cpu.max"
    except OSError as exc:
        pytest.skip(f"cannot make a cgroup with a CPU quota here: {exc}")
    pytest.skip("no cgroup cpu controller to set a quota with (v1 cpu hierarchy or v2 "
                "cpu in cgroup.subtree_control)")


def test_device_threads_follow_the_cgroup_quota(tmp_path) -> None:
    group, limit_file = _make_cgroup()
    log = tmp_path / "server.log"
    proc = None
    try:
        with open(log, "w") as err:
            proc = subprocess.Popen(
                ["sh", "-c", 'echo $$ > "$1" && shift && exec "$@"', "sh",
                 str(group / "cgroup.procs"), sys.executable, "-m", "graphengine.cli",
                 "serve", "--port", "0"],
                stdout=subprocess.PIPE, stderr=err, text=True,
                env={**os.environ, "PYTHONUNBUFFERED": "1"})
            assert proc.stdout is not None
            for line in proc.stdout:
                if READY.match(line.strip()):
                    break
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(timeout=60) == 0, log.read_text()
        serving = next(line for line in log.read_text().splitlines() if "event=serving" in line)
        assert re.search(r"\bdevice_threads=1\b", serving), serving
        assert f'device_threads_from="cgroup quota 0.5 CPUs ({group}/{limit_file})"' in serving
    finally:
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait()
        group.rmdir()
