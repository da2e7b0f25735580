"""``normlab sweep``: bad grids answered with one line before anything runs, a run's JSON and
export, and the issue's acceptance test: a driver killed (SIGKILL) at a random point and
restarted ends with every configuration stored exactly once."""

from __future__ import annotations

import json
import random
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from normlab import cli
from normlab.sweep.grid import Grid


def in_process(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    capsys.readouterr()
    status = cli.main(list(args))
    out, err = capsys.readouterr()
    return status, out, err


@pytest.mark.parametrize(
    ("grid", "words"),
    [
        (["--grid", "nope=1"], "unknown parameter 'nope' for 'bn-lr', use one of: batch_norm, "),
        (
            ["--grid", "lr=0.001,1"],
            "parameter 'lr': 0.001 is not allowed, use a number in [0.01, 5]",
        ),
        (["--grid", "lr=1:2"], "parameter 'lr': '1:2' is not a range A:B:N[:log|:lin]"),
        (
            ["--grid", "init=he,nope"],
            "parameter 'init': 'nope' is not allowed, use one of 'default'",
        ),
        (["--grid", "width=2:4:9"], "parameter 'width': '2:4:9' repeats integers"),
        (["--seeds", "0"], "--seeds 0: use an integer in [1, "),
        (["--seeds", "x"], "argument --seeds: invalid int value: 'x'"),
        (["--export", "r.xlsx"], "--export 'r.xlsx': suffix '.xlsx', use one of"),
    ],
)
def test_a_bad_grid_exits_2_with_one_line_and_runs_nothing(
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    grid: list[str],
    words: str,
) -> None:
    monkeypatch.chdir(tmp_path)
    store = tmp_path / "s.sqlite3"
    status, out, err = in_process(capsys, "sweep", "bn-lr", *grid, "--store", str(store))
    assert (status, out) == (2, "")
    assert err.startswith("normlab: error: " + words) and err.count("\n") == 1, err
    assert not store.exists()  # nothing started


def test_a_sweep_prints_json_and_exports(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    store, export = tmp_path / "s.sqlite3", tmp_path / "r.jsonl"
    grid = ["--grid", "depth=2", "--grid", "norm=none,batch", "--seeds", "2"]
    args = ["sweep", "drift", *grid, "--store", str(store)]
    status, out, err = in_process(capsys, *args, "--json", "--export", str(export))
    assert status == 0, err
    summary = json.loads(out)
    assert (summary["total"], summary["ran"], summary["stored_before"]) == (4, 4, 0)
    assert [(r["norm"], r["seed"], r["status"]) for r in summary["rows"]] == [
        ("none", 0, "ok"),
        ("none", 1, "ok"),
        ("batch", 0, "ok"),
        ("batch", 1, "ok"),
    ]
    assert len(export.read_text().splitlines()) == 4
    status, out, err = in_process(capsys, *args)  # again: all stored, a table
    assert status == 0 and "4 configurations: 0 run now (0 raised), 4 already stored" in out


def stored(path: Path) -> dict[str, str]:
    """The store's rows, id -> finished time (empty before the driver made the table)."""
    if not path.exists():
        return {}
    try:
        with sqlite3.connect(path, timeout=30) as db:
            return dict(db.execute("SELECT id, finished FROM results").fetchall())
    except sqlite3.OperationalError:  # no table yet
        return {}


@pytest.mark.slow
@pytest.mark.parametrize("trial", range(5))
def test_a_driver_killed_at_a_random_point_and_restarted_stores_each_once(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, trial: int
) -> None:
    store = tmp_path / "s.sqlite3"
    # drift: a forward pass through a stack, no training (a driver's first optimizer step costs
    # seconds of one-time setup)
    args = ["sweep", "drift", "--grid", "norm=none,batch", "--seeds", "24", "--store", str(store)]
    total = 48
    # the kill point: once k results are stored, k drawn from the first third (the rest, at
    # least 32 runs of about 10 ms each, is the margin for the kill to land before the end)
    k = random.Random(trial).randint(1, total // 3)
    with subprocess.Popen(
        [sys.executable, "-m", "normlab", *args],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    ) as driver:
        try:
            while len(stored(store)) < k:
                try:  # the poll's pause is a wait on the driver: its exit wakes it
                    driver.wait(timeout=0.005)
                    pytest.fail(f"the driver ended before {k} results: {driver.stderr.read()}")
                except subprocess.TimeoutExpired:
                    pass
        finally:
            driver.kill()  # SIGKILL: no handler, no cleanup, maybe inside a commit
            driver.wait()
    before = stored(store)
    assert k <= len(before) < total  # some but not all
    # the driver, another process (another str hash seed), computed this process's ids
    configs = Grid.parse("drift", ["norm=none,batch"], seeds=24).configs()
    assert set(before) <= {c.id for c in configs}

    status, out, err = in_process(capsys, *args, "--json")
    assert status == 0, err
    summary = json.loads(out)
    assert (summary["stored_before"], summary["ran"]) == (len(before), total - len(before))
    after = stored(store)
    assert len(after) == total and {r["status"] for r in summary["rows"]} == {"ok"}
    assert set(after) == {r["id"] for r in summary["rows"]}  # every config, once (a key)
    assert {i: after[i] for i in before} == before  # none stored before was run again
