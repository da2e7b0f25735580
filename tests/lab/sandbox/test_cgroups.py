"""Per-run cgroups (:mod:`normlab.lab.sandbox.cgroups`) found from ``/proc``, without a sandbox.

What a run's cgroup limits is checked through real runs in ``test_sandbox.py``.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from pathlib import Path

import pytest

from normlab.lab.sandbox import cgroups


def test_cgroup_parents_are_found_from_proc(tmp_path: Path) -> None:
    (tmp_path / "memory" / "lab").mkdir(parents=True)
    (tmp_path / "pids").mkdir()
    cgroup = tmp_path / "cgroup"
    cgroup.write_text("8:pids:/\n4:memory:/outer/lab\n0::/\n")
    mountinfo = tmp_path / "mountinfo"
    mountinfo.write_text(
        f"30 25 0:26 / {tmp_path}/pids rw,relatime shared:9 - cgroup cgroup rw,pids\n"
        f"31 25 0:27 /outer {tmp_path}/memory rw,relatime - cgroup cgroup rw,memory\n"
    )
    found = cgroups.parents(str(cgroup), str(mountinfo))  # plain folders are writable here
    assert found == {"memory": tmp_path / "memory" / "lab", "pids": tmp_path / "pids"}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cgroup", "memory", "mountinfo", "pids"]
    mountinfo.write_text(mountinfo.read_text().splitlines()[1] + "\n")
    with pytest.raises(cgroups.CgroupsUnavailable, match="'pids' hierarchy is not mounted"):
        cgroups.parents(str(cgroup), str(mountinfo))


def _real_parents() -> dict[str, Path]:
    try:
        return cgroups.parents()
    except cgroups.CgroupsUnavailable as exc:
        pytest.skip(f"no writable cgroup v1 hierarchies here: {exc}")


def _dead_pid() -> int:
    done = subprocess.run(["true"], check=True)
    assert done.returncode == 0
    child = subprocess.Popen(["true"])
    child.wait()
    return child.pid


def test_a_killed_lab_s_run_cgroups_are_removed_and_a_living_lab_s_kept() -> None:
    """A lab that is SIGKILLed never removes its runs' cgroups (issue 32, finding 8); the next
    lab removes those whose lab is dead, killing what is left in them, and keeps those of a
    lab still running (its runs are going)."""
    parents = _real_parents()
    stale = f"normlab-run-{_dead_pid()}-{'ab' * 6}"
    living = f"normlab-run-{os.getpid()}-{'cd' * 6}"
    left = subprocess.Popen(["sleep", "600"])  # what a killed lab's run left running
    try:
        for parent in parents.values():
            (parent / stale).mkdir()
            (parent / living).mkdir()
            (parent / stale / "cgroup.procs").write_text(f"{left.pid}\n")
        removed = cgroups.remove_stale(parents)
        assert sorted(removed) == sorted(parent / stale for parent in parents.values())
        assert left.wait(timeout=10) == -signal.SIGKILL
        for parent in parents.values():
            assert not (parent / stale).exists() and (parent / living).is_dir()
    finally:
        left.kill()
        for parent in parents.values():
            for name in (stale, living):
                with contextlib.suppress(FileNotFoundError):
                    (parent / name).rmdir()


def test_a_sandbox_starting_removes_a_killed_lab_s_run_cgroups() -> None:
    """The removal happens where a lab starts its sandbox, not only when called."""
    from normlab.lab.sandbox import supervisor

    parents = _real_parents()
    stale = f"normlab-run-{_dead_pid()}-{'ef' * 6}"
    for parent in parents.values():
        (parent / stale).mkdir()
    try:
        assert supervisor._cgroup_parents() == parents
        assert not any((parent / stale).exists() for parent in parents.values())
    finally:
        for parent in parents.values():
            with contextlib.suppress(FileNotFoundError):
                (parent / stale).rmdir()
