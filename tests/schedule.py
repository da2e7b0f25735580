"""The order in which pytest-xdist hands the test files to its workers: the costliest first.

``make test`` runs its parallel part with ``--dist loadfile``: each file goes whole to one
worker, and a worker that finishes a file takes the next in the queue. Files queued by their
number of tests (pytest-xdist's default) put a file of a minute, with few tests, near the end:
the other workers were done, and for that minute the machine ran one worker (a third of the
parallel part's last 70 s went idle, in one measured run). Queued by cost, longest first (Graham's
LPT rule, "Bounds on multiprocessing timing anomalies", 1969: at most 4/3 of the best order's
length), the workers end close together.

A file's cost is its tests' seconds (setup, call and teardown) in an earlier run of the whole
parallel part, kept in :data:`SECONDS` (``make file-seconds`` writes it again). A file it does
not name (a new one) costs nothing, so it goes after those it does, in collection order; an old
figure only makes the order less good. The order changes no result: each file keeps its own
tests' order, and ``loadfile`` never splits a file.
"""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

import pytest

SECONDS = Path(__file__).with_name("file_seconds.json")
"""Each test file's seconds in a run, by its path from the repository root."""


def load(path: Path = SECONDS) -> dict[str, float]:
    """The seconds of each file, as :func:`write` wrote them; none where ``path`` is missing."""
    if not path.exists():
        return {}
    seconds = json.loads(path.read_text())
    return {str(name): float(s) for name, s in seconds.items()}


def longest_first(items: list[pytest.Item], seconds: dict[str, float]) -> None:
    """Reorder ``items`` in place: whole files, the costliest first; ties (files not named in
    ``seconds``) in collection order, and each file's tests in their own order."""
    files = list(dict.fromkeys(item.nodeid.split("::")[0] for item in items))
    rank = {name: i for i, name in enumerate(files)}
    items.sort(key=lambda item: _key(item.nodeid.split("::")[0], seconds, rank))


def _key(name: str, seconds: dict[str, float], rank: dict[str, int]) -> tuple[float, int]:
    return (-seconds.get(name, 0.0), rank[name])


class Recorder:
    """A plugin that adds up each file's seconds from its tests' reports (on pytest-xdist's
    controller, which receives every worker's) and writes them to ``path`` when the run ends."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.seconds: defaultdict[str, float] = defaultdict(float)

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        self.seconds[report.nodeid.split("::")[0]] += report.duration

    def pytest_sessionfinish(self) -> None:
        write(self.seconds, self.path)


def write(seconds: dict[str, float], path: Path = SECONDS) -> None:
    """``seconds`` to ``path``: whole seconds (enough to order by, and a stable file), sorted
    by name."""
    whole = {name: round(s) for name, s in sorted(seconds.items())}
    path.write_text(json.dumps(whole, indent=1) + "\n")
