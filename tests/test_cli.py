"""The command line: every command through a real subprocess, and each kind of bad input.

Bad input is answered by :func:`normlab.cli.main` (status 2, one line on stderr) before anything
runs, so its cases call that function in this process; one case goes through ``python -m
normlab`` to show the status and the line reach the shell (each process costs a torch import,
4 s of CPU). So does each command once (list, run with a table, with --json and a plot, --help
and Ctrl+C); their other forms (list --json, a PNG plot, the token from the environment) are
answered by the same function here.
"""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import time
import types
from collections.abc import Callable
from pathlib import Path

import pytest


def normlab(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "normlab", *args],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=cwd,
    )


def in_process(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    """``normlab ARGS`` answered by :func:`normlab.cli.main` here: status, stdout, stderr."""
    from normlab import cli

    capsys.readouterr()  # what came before is not this command's
    status = cli.main(list(args))
    out, err = capsys.readouterr()
    return status, out, err


def test_list_shows_every_experiment_and_its_parameters() -> None:
    out = normlab("list")
    assert out.returncode == 0, out.stderr
    for name in ("linear-scale", "drift", "bn-lr", "init-compare"):
        assert name in out.stdout
    assert "--depth" in out.stdout and "--batch-norm" in out.stdout


def test_list_json_is_the_registry(capsys: pytest.CaptureFixture[str]) -> None:
    # in-process: `list` through a real process is the test above
    status, out, err = in_process(capsys, "list", "--json")
    assert status == 0, err
    registry = json.loads(out)
    drift = next(e for e in registry if e["name"] == "drift")
    depth = next(p for p in drift["parameters"] if p["name"] == "depth")
    assert depth == {
        "name": "depth",
        "kind": "int",
        "help": depth["help"],
        "default": 10,
        "min": 1,
        "max": 100,
        "step": 1,
    }


def test_run_name_help_lists_every_parameter_of_every_experiment(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # in-process: the help is text only, and 13 interpreters would cost ~40 s
    from normlab import cli
    from normlab.experiments import list_experiments

    for e in list_experiments():
        assert cli.main(["run", e.name, "--help"]) == 0
        out = capsys.readouterr().out
        assert out.startswith(f"usage: normlab run {e.name} [--json] [--plot FILE]")
        flat = " ".join(out.split())  # argparse wraps long lines
        assert e.summary in flat and "--json" in flat and "--plot FILE" in flat
        for p in e.parameters:
            default = cli._default(p.default)
            if p.kind == "bool":
                assert f"{p.flag}, --no-{p.flag[2:]}" in flat
                assert f"default {default}" in flat
            else:
                assert f"default {default}; {' '.join(p.allowed().split())}" in flat, p.name


def test_run_help_through_the_script(capsys: pytest.CaptureFixture[str]) -> None:
    out = normlab("run", "bn-lr", "--lr", "99", "-h")  # help wins over the other flags
    assert (out.returncode, out.stderr) == (0, "")
    flat = " ".join(out.stdout.split())
    assert "--lr X SGD learning rate; default 2.0; a number in [0.01, 5]" in flat
    assert "--seed N" in flat and "an integer in [0, 2147483647]" in flat
    status, stdout, stderr = in_process(capsys, "run", "--help")  # the same parser, here
    assert (status, stderr) == (0, "")
    listed = stdout.split("experiments (see `normlab list`):")[1]
    names = re.findall(r"^    (\S+)", listed, flags=re.MULTILINE)  # one sub-parser each
    assert names[:3] == ["linear-scale", "drift", "bn-columns"] and "bn-lr-sweep" in names
    assert "`normlab run NAME --help` lists NAME's parameters" in " ".join(stdout.split())


def test_run_prints_the_seed_table() -> None:
    out = normlab("run", "drift")
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    row = next(line for line in lines if "layer 3 " in line)
    assert "0.0647" in row and "0.0993" in row
    assert any("input" in line and "0.0322" in line and "1.0280" in line for line in lines)


def test_run_with_params_json_and_plot(tmp_path: Path) -> None:
    plot = tmp_path / "stack.svg"
    out = normlab("run", "bn-stack", "--depth", "4", "--width=8", "--json", "--plot", str(plot))
    assert out.returncode == 0, out.stderr
    d = json.loads(out.stdout)
    assert d["experiment"] == "bn-stack" and d["params"]["depth"] == 4
    assert d["params"]["width"] == 8 and len(d["stds"]) == 4
    assert plot.read_text().lstrip().startswith("<?xml")
    assert "plot written" in out.stderr


def test_run_bool_list_and_float_flags(capsys: pytest.CaptureFixture[str]) -> None:
    # in-process: the flags' values reaching the run is the point (--json through a real
    # process is test_run_with_params_json_and_plot's)
    status, out, err = in_process(
        capsys, "run", "bn-lr", "--batch-norm", "--steps", "5", "--lr", "0.5", "--json"
    )
    assert status == 0, err
    d = json.loads(out)
    assert d["batch_norm"] is True and len(d["losses"]) == 5 and d["lr"] == 0.5
    status, out, err = in_process(
        capsys, "run", "bn-lr", "--no-batch-norm", "--steps", "2", "--json"
    )
    assert status == 0, err
    assert json.loads(out)["batch_norm"] is False
    status, out, err = in_process(
        capsys, "run", "variance", "--gains", "0.9,1.1", "--depth", "3", "--json"
    )
    assert status == 0, err
    assert [c["gain"] for c in json.loads(out)["curves"]] == [0.9, 1.1]


def test_run_flags_take_every_form_of_a_value() -> None:
    # in-process, parsing only: what `run NAME ...` hands to make_params
    from normlab import cli
    from normlab.experiments import get_experiment

    def parsed(*argv: str) -> tuple[dict[str, object], bool, str | None]:
        args, extra = cli._build_parser().parse_known_args(["run", *argv])
        assert extra == []
        return cli._values(get_experiment(args.name), args.flags), args.json, args.plot

    assert parsed("bn-lr") == ({}, False, None)
    assert parsed("bn-lr", "--batch-norm")[0] == {"batch_norm": True}
    assert parsed("bn-lr", "--batch-norm", "false")[0] == {"batch_norm": False}
    assert parsed("bn-lr", "--batch-norm=off", "--lr", "0.5")[0] == {"batch_norm": False, "lr": 0.5}
    assert parsed("bn-lr", "--no-batch-norm")[0] == {"batch_norm": False}
    assert parsed("bn-lr", "--steps=5", "--steps", "6")[0] == {"steps": 6}  # the last one counts
    assert parsed("variance", "--gains", "0.9,1.1")[0] == {"gains": (0.9, 1.1)}
    assert parsed("drift", "--json", "--plot", "a.svg") == ({}, True, "a.svg")
    assert parsed("--json", "drift") == ({}, True, None)  # also before NAME


@pytest.mark.parametrize(
    ("name", "params", "bar"),
    [
        ("jacobian-spectrum", {"depth": 3, "width": 8}, r"running \S+ \S+ 6/6 layers"),
        ("bn-lr", {"steps": 3}, r"training bn-lr \S+ 6/6 steps"),
    ],
    ids=["stages", "optimizer steps"],
)
def test_a_run_on_a_terminal_shows_its_steps_done_of_all(
    name: str, params: dict[str, int], bar: str
) -> None:
    """The progress bar counts a run's own steps (a training run's optimizer steps, another's
    stages) out of the total known before it starts, in their unit."""
    import io

    from rich.console import Console

    from normlab import cli
    from normlab.experiments import get_experiment

    experiment, shown = get_experiment(name), io.StringIO()
    cli._run(experiment, experiment.make_params(params), Console(file=shown, force_terminal=True))
    text = re.sub(r"\x1b\[[0-9;?]*[a-zA-Z]", "", shown.getvalue())  # without the escapes
    assert re.search(bar, text), text
    assert "/?" not in text  # the total is known from the first frame of the bar


def test_run_png_plot(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # in-process: a plot written by a real process is test_run_with_params_json_and_plot's
    plot = tmp_path / "scale.png"
    status, out, err = in_process(capsys, "run", "linear-scale", "--plot", str(plot))
    assert status == 0, err
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "6.0035" in out


@pytest.mark.parametrize(
    ("args", "pattern"),
    [
        (("run", "nope"), "experiment 'nope' not found, use one of: linear-scale"),
        (("run", "drift", "--depht", "3"), "unknown option '--depht' for 'drift', use one of:"),
        (
            ("run", "drift", "--depth", "0"),
            "parameter 'depth': 0 is not allowed, use an integer in [1, 100]",
        ),
        (("run", "drift", "--depth", "1000"), "parameter 'depth': 1000 is not allowed"),
        (
            ("run", "drift", "--depth", "ten"),
            "parameter 'depth': 'ten' is not an integer in [1, 100]",
        ),
        (("run", "drift", "--depth"), "option '--depth' needs a value: an integer in [1, 100]"),
        (
            ("run", "drift", "--activation", "gelu"),
            "parameter 'activation': 'gelu' is not allowed, use one of 'relu'",
        ),
        (("run", "drift", "5"), "unknown option '5' for 'drift', use one of: --depth"),
        (("run", "bn-lr", "--lr", "nan"), "parameter 'lr': nan is not allowed"),
        (("run", "bn-lr", "--no-batch-norm=yes"), "option '--no-batch-norm' takes no value"),
        (
            ("run", "bn-lr", "--batch-norm=maybe"),
            "parameter 'batch_norm': 'maybe' is not true or false",
        ),
        (
            ("run", "variance", "--gains", "1,x"),
            "parameter 'gains': '1,x' is not a list of numbers",
        ),
        (
            ("run", "init-compare", "--hist-layer", "30"),
            "parameter 'hist_layer': 30 must be at most depth (20)",
        ),
        (("run", "drift", "--plot", "out.pdf"), "--plot 'out.pdf': suffix '.pdf' not supported"),
        (("run", "drift", "--plot", "/no/such/dir/x.png"), "folder '/no/such/dir' does not exist"),
        (("run",), "the following arguments are required: name (one of: linear-scale, drift,"),
        (("run", "--json"), "the following arguments are required: name"),
        (("run", "nope", "--help"), "experiment 'nope' not found, use one of: linear-scale"),
        (("frobnicate",), "invalid choice: 'frobnicate'"),
        (("list", "--extra"), "unrecognized arguments: --extra"),
        (("lab", "--port", "70000"), "'70000' is not a port"),
        (("lab", "--token", "short"), "a token needs at least 16 characters"),
        (("lab", "--token", "sixteen chars or more"), "a token needs at least 16 characters"),
        (("lab", "--threads", "0"), "0 threads: give 1 to"),
        (("lab", "--threads", "two"), "'two' is not a whole number of threads"),
    ],
)
def test_bad_input_exits_2_with_one_line(
    args: tuple[str, ...], pattern: str, capsys: pytest.CaptureFixture[str]
) -> None:
    status, out, err = in_process(capsys, *args)
    assert status == 2
    assert out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("normlab: error: ")
    assert pattern in lines[0]


def test_bad_input_reaches_the_shell_as_status_2_and_one_line() -> None:
    out = normlab("run", "drift", "--depth", "0")
    assert (out.returncode, out.stdout) == (2, "")
    assert out.stderr == (
        "normlab: error: parameter 'depth': 0 is not allowed, use an integer in [1, 100]\n"
    )


def test_bad_token_from_the_environment_exits_2(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    fake_lab: list[dict[str, object]],
) -> None:
    # in-process (status 2 reaching the shell is the test above): no lab is made
    monkeypatch.setenv("NORMLAB_TOKEN", "tiny")
    status, out, err = in_process(capsys, "lab", "--port", "0")
    assert (status, out, fake_lab) == (2, "", [])
    lines = err.strip().splitlines()
    assert lines == [lines[0]] and lines[0].startswith("normlab: error: $NORMLAB_TOKEN: ")


def _wait_until_importing_torch(proc: subprocess.Popen[str], timeout: float = 120) -> None:
    """Return once ``proc`` has loaded torch's C++ library, i.e. is inside ``import torch``
    (the rest of the import takes about a second more here); fail if it exits first."""
    maps = Path(f"/proc/{proc.pid}/maps")
    deadline = time.monotonic() + timeout
    while proc.poll() is None and time.monotonic() < deadline:
        try:
            if "libtorch" in maps.read_text():
                return
        except OSError:
            pass
        time.sleep(0.005)
    pytest.fail("the command exited (or hung) before importing torch")


def _ctrl_c(
    command: list[str], wait: Callable[[subprocess.Popen[str]], object]
) -> tuple[int, str, str]:
    """Start ``command``, ``wait(proc)``, press Ctrl+C; return its status, stdout and stderr."""
    # `with`: the pipes are closed here even when the test fails, not left to the garbage
    # collector (whose ResourceWarning would fail a later test)
    # No preexec_fn resetting SIGINT: normlab answers it whatever it inherits (ignored, as in
    # a background job of a script, or blocked), and these tests check that too.
    with subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    ) as proc:
        try:
            wait(proc)
            proc.send_signal(signal.SIGINT)
            out, err = proc.communicate(timeout=120)
        finally:
            if proc.poll() is None:  # a failed wait or a hang: end it before `with` waits
                proc.kill()
    return proc.returncode, out, err


@pytest.mark.parametrize(
    "command",
    [[sys.executable, "-m", "normlab"], [str(Path(sys.executable).with_name("normlab"))]],
    ids=["python -m normlab", "normlab script"],
)
def test_ctrl_c_while_importing_exits_130_with_one_line(command: list[str]) -> None:
    # Ctrl+C during the first seconds, while torch is being imported (before normlab.cli.main
    # runs): the same one line and status as later, not a traceback through the imports.
    args = [*command, "run", "bn-lr", "--steps", "500"]
    status, out, err = _ctrl_c(args, _wait_until_importing_torch)
    assert (status, err, out) == (130, "normlab: interrupted\n", "")


def test_ctrl_c_exits_130_with_one_line() -> None:
    # The longest bn-lr (6 x 128 blocks, 500 steps: seconds), interrupted 2 s after torch
    # began to load, while still importing on a slow machine or while training here; either
    # way one line, no traceback, and the run on the other thread stops too (the timeout
    # guards a hang). Counted from torch, not from the start: before its entry point, normlab
    # has no handler yet, however loaded the machine.
    def wait(proc: subprocess.Popen[str]) -> None:
        _wait_until_importing_torch(proc)
        time.sleep(2.0)

    args = ["run", "bn-lr", "--steps", "500", "--hidden-layers", "6", "--width", "128"]
    status, out, err = _ctrl_c([sys.executable, "-m", "normlab", *args], wait)
    assert (status, err, out) == (130, "normlab: interrupted\n", "")


@pytest.fixture
def fake_lab(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, object]]:
    """``normlab lab`` without a lab: the keywords each ``create_app`` call was given."""
    from normlab.lab import app as lab_app

    made: list[dict[str, object]] = []

    def create_app(**kw: object) -> object:  # no lab: the flags are the point
        made.append(kw)
        return types.SimpleNamespace(
            state=types.SimpleNamespace(lab=types.SimpleNamespace(watch=None))
        )

    monkeypatch.setattr(lab_app, "create_app", create_app)
    monkeypatch.setattr(lab_app, "serve", lambda app, host, port, threads=1: None)
    return made


def test_lab_warns_that_a_token_flag_is_visible_to_others(
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    fake_lab: list[dict[str, object]],
) -> None:
    made = fake_lab
    token = "a-token-of-twenty-chars"
    status, _, err = in_process(
        capsys, "lab", "--host", "0.0.0.0", "--token", token, "--db", str(tmp_path / "p.db")
    )
    assert status == 0 and made[0]["token"] == token
    assert "--token is visible to other users" in err and "$NORMLAB_TOKEN" in err
    monkeypatch.setenv("NORMLAB_TOKEN", token)
    status, _, err = in_process(capsys, "lab", "--host", "0.0.0.0", "--db", str(tmp_path / "q"))
    assert status == 0 and "warning" not in err


def test_lab_warms_the_lessons_unless_told_not_to(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, fake_lab: list[dict[str, object]]
) -> None:
    made = fake_lab
    assert in_process(capsys, "lab", "--db", str(tmp_path / "p.db"))[0] == 0
    assert in_process(capsys, "lab", "--no-warm", "--db", str(tmp_path / "p.db"))[0] == 0
    assert [kw["warm"] for kw in made] == [True, False]
    status, out, _ = in_process(capsys, "lab", "--help")
    assert status == 0
    assert "each lesson computes its figures on its first visit" in " ".join(out.split())
