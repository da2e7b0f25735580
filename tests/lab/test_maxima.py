"""Every experiment at its maximum settings, through a real lab: within its stated cost, and the
lab gives the memory back afterwards (issue 19).

A ``normlab lab`` process answers each experiment's costliest allowed request
(:meth:`~normlab.experiments.base.registry.Experiment.maxima`: read from the registry, as the page's
widgets read the same declaration) one after the other. Each request's CPU time is the server
process's user + system time (``/proc/PID/stat``, every thread: the run, its figures, tables,
printed output and JSON), and its memory the server's peak resident set above where it stood
before the request (``VmHWM`` after resetting it through ``/proc/PID/clear_refs``; torch's
allocations are resident memory like any other). Both must be within the
:class:`Cost` that the experiment declares and its parameters' help
states. The lab runs as ``normlab lab`` starts it, one torch thread a computation (its
``--threads`` default; ``tests/lab/test_threads.py`` holds a request to its cost under a
competing load), as ``benchmarks/maxima.py`` measures: with two OpenMP threads on a loaded
two-core machine the waiting one spins, and CPU time would measure the machine's load rather
than the run (20 s instead of 0.8 s for a short error-surface run at a load average of 9).

Afterwards the server's resident memory must be back within :data:`RETURNED_MIB` of where it
started. "Started" is a lab that has answered every experiment once, with its walk's choices,
flags and lists but every size at its minimum (:func:`_smallest`): the lazy imports a first run
of each makes on the walk's code paths, scikit-learn's among them, stay for good and are no
leak, and are not counted in the walk's CPU either. (It answered each at its defaults before,
whose choices can differ from the walk's, for 11 s of CPU; the smallest requests take 2 s.)
The answers the lab caches stay too, by design (the cache is bounded in bytes); the walk's 16
answers at maxima are a few MiB of JSON each, well inside the margin, so what is measured is the
computations' own memory: it must be returned to the system, not kept by the allocator.
"""

from __future__ import annotations

import json
import os
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

import pytest

from normlab.experiments import Experiment, list_experiments

from .real_server import lab_process

pytestmark = pytest.mark.slow

RETURNED_MIB = 200
"""How far above its starting level the lab's resident memory may stay after the walk."""
TICK_S = 1 / os.sysconf("SC_CLK_TCK")


def _post(url: str, body: dict[str, Any]) -> tuple[int, bytes]:
    req = urllib.request.Request(
        url, data=json.dumps(body).encode(), headers={"content-type": "application/json"}
    )
    with urllib.request.urlopen(req, timeout=600) as resp:
        return resp.status, resp.read()


def _cpu_s(pid: int) -> float:
    """User + system seconds of every thread of ``pid`` so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) * TICK_S  # utime, stime: fields 14 and 15


def _status_mib(pid: int, key: str) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1]) / 1024
    raise AssertionError(f"no {key} in /proc/{pid}/status")


def _reset_peak(pid: int) -> bool:
    """Make ``pid``'s peak resident set its current one (Linux 4.0+); False where refused."""
    try:
        Path(f"/proc/{pid}/clear_refs").write_text("5")
    except OSError:
        return False
    return True


def _smallest(e: Experiment) -> dict[str, Any]:
    """The request of the walk (:meth:`~normlab.experiments.base.registry.Experiment.maxima`:
    the same choices, flags and lists) with every number that sizes the run at its minimum."""
    sizes = {p.name: int(cast(float, p.min)) for p in e.parameters if p.sized}
    return {**e.maxima(), **sizes}


@pytest.fixture
def lab(tmp_path: Path) -> Iterator[tuple[str, int]]:
    with lab_process(tmp_path) as (base, server):
        yield base, server.pid


def test_every_experiment_at_its_maxima_stays_within_its_cost(lab: tuple[str, int]) -> None:
    base, pid = lab
    experiments = list_experiments()
    for e in experiments:  # the starting level: each experiment's first run made
        assert _post(f"{base}/api/experiments/{e.name}", _smallest(e))[0] == 200, e.name
    start = _status_mib(pid, "VmRSS")
    over = []
    for e in experiments:
        rss = _status_mib(pid, "VmRSS")
        peaks = _reset_peak(pid)
        before = _cpu_s(pid)
        status, body = _post(f"{base}/api/experiments/{e.name}", e.maxima())
        cpu = _cpu_s(pid) - before
        peak = _status_mib(pid, "VmHWM") - rss if peaks else 0.0
        assert status == 200 and json.loads(body)["experiment"] == e.name
        print(f"{e.name}: {cpu:.1f} s of {e.cost.cpu_s:g}, {peak:.0f} MiB of {e.cost.mib}")
        if cpu > e.cost.cpu_s or peak > e.cost.mib:
            over.append(f"{e.name}: {cpu:.1f} s, {peak:.0f} MiB (bound: {e.cost})")
    assert not over, over
    end = _status_mib(pid, "VmRSS")
    print(f"resident: {start:.0f} MiB at the start, {end:.0f} MiB after the walk")
    assert end - start <= RETURNED_MIB, f"resident {start:.0f} MiB before, {end:.0f} MiB after"
