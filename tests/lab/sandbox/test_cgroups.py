"""Per-run cgroups (:mod:`normlab.lab.sandbox.cgroups`) found from ``/proc``, without a sandbox.

What a run's cgroup limits is checked through real runs in ``test_sandbox.py``.
"""

from __future__ import annotations

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
