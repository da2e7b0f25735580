"""The order of the test files for pytest-xdist (:mod:`tests.schedule`)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from tests import schedule

ROOT = Path(__file__).resolve().parents[1]


def _items(*nodeids: str) -> list[Any]:
    return [SimpleNamespace(nodeid=n) for n in nodeids]


def test_costliest_files_go_first_each_in_its_own_order() -> None:
    items = _items("a.py::t1", "a.py::t2", "b.py::t1", "c.py::t2", "c.py::t1", "d.py::t")
    schedule.longest_first(items, {"a.py": 5.0, "c.py": 60.0, "b.py": 20.0})
    assert [i.nodeid for i in items] == [
        "c.py::t2",
        "c.py::t1",
        "b.py::t1",
        "a.py::t1",
        "a.py::t2",
        "d.py::t",  # not measured: after the others
    ]


def test_files_not_measured_keep_their_collection_order() -> None:
    items = _items("z.py::t", "y.py::t", "x.py::t")
    schedule.longest_first(items, {})
    assert [i.nodeid for i in items] == ["z.py::t", "y.py::t", "x.py::t"]


def test_the_recorder_writes_each_file_s_seconds_and_load_reads_them(tmp_path: Path) -> None:
    path = tmp_path / "seconds.json"
    recorder = schedule.Recorder(path)
    for nodeid, duration in [("a.py::t1", 1.25), ("a.py::t1", 0.5), ("b.py::t[x]", 2.6)]:
        recorder.pytest_runtest_logreport(SimpleNamespace(nodeid=nodeid, duration=duration))  # type: ignore[arg-type]
    recorder.pytest_sessionfinish()
    assert schedule.load(path) == {"a.py": 2.0, "b.py": 3.0}
    assert schedule.load(tmp_path / "missing.json") == {}


def test_the_kept_seconds_name_test_files_that_exist() -> None:
    """A file renamed or removed leaves its figure behind, which orders nothing: write the
    seconds again (``make file-seconds``)."""
    seconds = schedule.load()
    assert seconds, f"{schedule.SECONDS} is empty or missing"
    gone = [name for name in seconds if not (ROOT / name).is_file()]
    assert not gone, f"{gone} are gone: run make file-seconds"


def test_this_run_collected_in_that_order(request: pytest.FixtureRequest) -> None:
    """The session's own items follow the kept seconds (the conftest's hook)."""
    seconds = schedule.load()
    files = list(dict.fromkeys(i.nodeid.split("::")[0] for i in request.session.items))
    costs = [seconds.get(f, 0.0) for f in files]
    assert costs == sorted(costs, reverse=True)
