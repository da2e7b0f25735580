"""``benchmarks/playground.py`` still runs and prints its table and verdict.

Not among the sandbox's ``serial`` tests: it asserts what the script prints, never how fast
this machine is (the benchmark itself is where that is measured), so it may share the cores.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest


@pytest.mark.slow
def test_playground_benchmark_runs() -> None:
    # One repeat: whether the script still works and prints a ratio per snippet and its
    # verdict, not how fast this machine is (benchmarks/playground.py is where that's measured).
    script = Path(__file__).resolve().parents[3] / "benchmarks" / "playground.py"
    done = subprocess.run(
        [sys.executable, str(script), "--repeats", "1"],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode in (0, 1), done.stderr  # 1: ran, and the target was missed
    for snippet in ("print(1)", "torch randn", "torch SGD"):
        assert re.search(
            rf"^  {re.escape(snippet)} +\d+\.\d +\d+\.\d +\d+\.\d+x$", done.stdout, re.M
        )
    verdict = re.search(
        r"^verdict: (PASS|FAIL) \(faster: torch randn .*, torch SGD .*\)$", done.stdout, re.M
    )
    assert verdict is not None, done.stdout
    assert (verdict[1] == "PASS") == (done.returncode == 0)
