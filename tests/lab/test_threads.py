"""The lab computes with a declared thread count, and a request keeps to its declared CPU cost
on a loaded machine (issue 32, finding 3).

With torch's default of one intra-op thread per core and OpenMP's active wait, a run's idle
threads spin on cores that other work needs: on a busy 2-core machine ``bn-lr-sweep`` at its
maxima took 87 s of CPU against its declared 12 s. ``normlab lab`` now computes with
``--threads`` (default 1) and, with more, sets ``OMP_WAIT_POLICY=PASSIVE`` for itself. Here
the lab runs as ``normlab lab`` starts it (no thread setting in its environment) while the test
makes a competing CPU load of its own: one busy process per core.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from normlab.experiments import get_experiment

from .real_server import free_port, wait_until_serving

pytestmark = pytest.mark.serial  # it loads every core itself: no other test may share them

TICK_S = 1 / os.sysconf("SC_CLK_TCK")


def _cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) * TICK_S


def _post(url: str, body: dict[str, Any]) -> dict[str, Any]:
    req = urllib.request.Request(
        url, data=json.dumps(body).encode(), headers={"content-type": "application/json"}
    )
    with urllib.request.urlopen(req, timeout=600) as resp:
        answer: dict[str, Any] = json.loads(resp.read())
        return answer


def _lab(data: Path, *flags: str) -> Iterator[tuple[str, int]]:
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "OMP_WAIT_POLICY")}
    env["XDG_DATA_HOME"] = str(data)
    port = free_port()
    cmd = [sys.executable, "-m", "normlab", "lab", "--port", str(port), "--no-warm", *flags]
    server = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    base = f"http://127.0.0.1:{port}"
    try:
        assert wait_until_serving(server, base) == 200
        yield base, server.pid
    finally:
        server.terminate()
        server.wait(timeout=60)


@pytest.fixture
def lab(tmp_path: Path) -> Iterator[tuple[str, int]]:
    yield from _lab(tmp_path)


@pytest.fixture
def busy() -> Iterator[None]:
    """One process per core spinning in pure Python for the test's length."""
    spinners = [
        subprocess.Popen([sys.executable, "-c", "while True: pass"])
        for _ in range(os.cpu_count() or 1)
    ]
    try:
        yield
    finally:
        for s in spinners:
            s.kill()
            s.wait()


def _threads_of_a_playground_run(base: str) -> int:
    answer = _post(f"{base}/api/run", {"code": "import torch\nprint(torch.get_num_threads())"})
    assert answer["status"] == "ok", answer
    return int(answer["stdout"])


def test_a_request_keeps_to_its_declared_cpu_on_a_loaded_machine(
    lab: tuple[str, int], busy: None
) -> None:
    base, pid = lab
    sweep = get_experiment("bn-lr-sweep")
    assert _post(f"{base}/api/experiments/bn-lr-sweep", {"steps": 10, "tail": 5})[
        "experiment"
    ]  # imports
    before = _cpu_s(pid)
    assert _post(f"{base}/api/experiments/bn-lr-sweep", sweep.maxima())["experiment"]
    cpu = _cpu_s(pid) - before
    print(
        f"bn-lr-sweep at its maxima under load: {cpu:.1f} s of CPU, {sweep.cost.cpu_s:g} declared"
    )
    assert cpu <= sweep.cost.cpu_s


@pytest.mark.parametrize("threads", [None, 2])
def test_the_lab_and_its_playground_compute_with_the_declared_threads(
    tmp_path: Path, threads: int | None
) -> None:
    """Default one; ``--threads 2`` two, with the passive wait. The playground's runs take the
    lab's count, so that they print the lab's numbers (its fork server starts after ``serve``
    has set it)."""
    if threads is not None and (os.cpu_count() or 1) < threads:
        pytest.skip(f"fewer than {threads} cores: --threads {threads} is refused")
    flags = () if threads is None else ("--threads", str(threads))
    for base, pid in _lab(tmp_path, *flags):
        environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        passive = b"OMP_WAIT_POLICY=PASSIVE" in environ  # the lab started itself again with it
        assert passive == (threads is not None)
        assert _threads_of_a_playground_run(base) == (threads or 1)
