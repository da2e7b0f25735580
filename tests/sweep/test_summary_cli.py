"""``normlab sweep ... --summary / --plot``: the summary and heat map of a stored sweep.

The store is :mod:`tests.sweep.test_summary`'s hand-made one, so the command runs nothing
(every cell is stored) and its numbers are the hand-computed ones.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from normlab import cli

from .test_summary import HE_SENSITIVITY, XAVIER_SENSITIVITY, fill

GRID = ["--grid", "lr=0.1,1,3", "--grid", "init=he,xavier", "--grid", "steps=2"]
COMMAND = ["sweep", "bn-lr", *GRID, "--grid", "width=2", "--seeds", "2"]


def in_process(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    capsys.readouterr()
    status = cli.main(list(args))
    out, err = capsys.readouterr()
    return status, out, err


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("summary-cli") / "s.sqlite3"
    fill(path)
    return path


def test_plot_writes_the_heat_map_and_summary_prints_the_hand_numbers(
    capsys: pytest.CaptureFixture[str], store: Path, tmp_path: Path
) -> None:
    png = tmp_path / "map.png"
    args = [*COMMAND, "--store", str(store), "--summary", "--json", "--plot", str(png)]
    status, out, err = in_process(capsys, *args, "--x", "init", "--value", "best")
    assert status == 0, err
    summary = json.loads(out)
    by_init = {s["values"]["init"]: s["sensitivity"] for s in summary["sensitivity"]}
    assert by_init == {
        "he": pytest.approx(HE_SENSITIVITY),
        "xavier": pytest.approx(XAVIER_SENSITIVITY),
    }
    assert sum(c["runs"] for c in summary["cells"]) == 12  # all stored: nothing ran
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10_000
    assert f"heat map written to {png}" in err


def test_summary_prints_the_tables(capsys: pytest.CaptureFixture[str], store: Path) -> None:
    status, out, err = in_process(capsys, *COMMAND, "--store", str(store), "--summary")
    assert status == 0, err
    assert "sensitivity" in out and f"{XAVIER_SENSITIVITY:.4f}" in out
    assert "0.1414" in out  # he at lr 0.1: the spread of its two seeds' final losses


@pytest.mark.parametrize(
    ("flags", "words"),
    [
        (["--plot", "m.png", "--x", "width"], "x 'width': not an axis to map, use one of: lr, "),
        (["--plot", "m.png", "--value", "mean"], "value 'mean' not supported, use one of: final, "),
        (["--summary", "--fix", "init=nope"], "fix 'init=nope': init is one of: he, xavier"),
        (["--plot", "m.txt"], "--plot 'm.txt': suffix '.txt' not supported"),
    ],
)
def test_a_bad_view_exits_2_with_one_line_before_anything_runs(
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    flags: list[str],
    words: str,
) -> None:
    monkeypatch.chdir(tmp_path)
    fresh = tmp_path / "fresh.sqlite3"
    status, out, err = in_process(capsys, *COMMAND, "--store", str(fresh), *flags)
    assert (status, out) == (2, "")
    assert err.startswith("normlab: error: " + words) and err.count("\n") == 1, err
    assert not fresh.exists()  # nothing started


def test_an_experiment_without_a_loss_curve_exits_2(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    fresh = tmp_path / "fresh.sqlite3"
    args = ["sweep", "drift", "--grid", "depth=2,3", "--store", str(fresh), "--summary"]
    status, _, err = in_process(capsys, *args)
    assert status == 2 and "'drift': its result has no loss curve 'losses'" in err
    assert not fresh.exists()
