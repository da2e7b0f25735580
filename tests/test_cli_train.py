"""``normlab train``: the training view's loop on the command line (in process, and one real
interpreter for the exit status)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from normlab import cli
from normlab import trainview as tv

FAST = ["--depth", "2", "--width", "8"]


def test_the_tables_show_the_losses_and_the_doctor_s_labels(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert cli.main(["train", *FAST, "--steps", "5", "--init", "constant"]) == 0
    out = capsys.readouterr().out
    assert "5 steps on moons" in out and "loss at step 4" in out and "accuracy" in out
    assert "The doctor's labels at the last step" in out and "symmetric" in out


def test_json_is_one_line_per_step_with_the_session_s_records(
    capsys: pytest.CaptureFixture[str],
) -> None:
    flags = [*FAST, "--dataset", "circles", "--batch-size", "32", "--optimizer", "adam"]
    assert cli.main(["train", *flags, "--lr", "0.01", "--steps", "4", "--json"]) == 0
    lines = capsys.readouterr().out.splitlines()
    records = [json.loads(line) for line in lines]
    values = {"depth": 2, "width": 8, "dataset": "circles", "batch_size": 32}
    session = tv.Session(tv.make_setup({**values, "optimizer": "adam", "lr": 0.01}))
    assert records == [session.step() for _ in range(4)]
    assert list(records[0]) == ["step", "train_loss", "test_loss", "test_accuracy"]


def test_code_prints_the_script_of_the_setup(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["train", "--norm", "batch", "--no-bias", "--steps", "7", "--code"]) == 0
    expected = tv.script(tv.make_setup({"norm": "batch", "bias": False}), 7)
    assert capsys.readouterr().out == expected


def test_plot_writes_the_curves_and_the_boundary(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = tmp_path / ("a-folder-with-a-long-name-" * 4)  # the path is wider than 80 columns
    folder.mkdir()
    target = folder / "train.png"
    assert cli.main(["train", *FAST, "--steps", "3", "--plot", str(target)]) == 0
    assert target.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert f"plot written to {target}\n" in capsys.readouterr().out  # on one line, to copy
    run = tv.run(tv.make_setup({"depth": 2, "width": 8}), 3)
    [figure] = run.figures()
    kinds = [[s.kind for s in panel.series] for panel in figure.panels]
    assert kinds == [["line", "line"], ["heatmap", "markers", "markers"]]


@pytest.mark.parametrize(
    ("args", "named"),
    [
        (["--depth", "0"], "parameter 'depth': 0 is not allowed, use an integer in [1, 12]"),
        (["--dataset", "rings"], "parameter 'dataset': 'rings' is not allowed, use one of"),
        (["--lr", "-1"], "parameter 'lr': -1.0 is not allowed, use a number in [0.0001, 10]"),
        (["--steps", "0"], "parameter 'steps': 0 is not allowed"),
        (["--norm", "batch", "--batch-size", "1"], "parameter 'batch_size': 1 is not allowed"),
        (["--width", "wide"], "parameter 'width': 'wide' is not an integer"),
        (["--plot", "out.gif"], "--plot 'out.gif': suffix '.gif' not supported"),
        (["--dept", "3"], "unknown option '--dept' for 'train', use one of: --dataset"),
    ],
)
def test_bad_input_is_one_line_naming_it_with_exit_status_2(
    args: list[str], named: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(["train", *args]) == 2
    err = capsys.readouterr().err
    assert err.startswith("normlab: error: ") and named in err
    assert err.count("\n") == 1


def test_the_real_command_line_refuses_depth_0_with_status_2() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "normlab", "train", "--depth", "0"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 2
    assert done.stdout == ""
    assert done.stderr == (
        "normlab: error: parameter 'depth': 0 is not allowed, use an integer in [1, 12]\n"
    )
