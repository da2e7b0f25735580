"""``normlab doctor`` through real subprocesses: reports, JSON, --fix, --html, --data, bad input."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch

from normlab import doctor, zoo

ZOO = str(Path(zoo.__file__))

MODELS = """
import torch
from torch import nn


def vanishing():
    torch.manual_seed(0)
    layers = []
    for _ in range(12):
        lin = nn.Linear(16, 16)
        nn.init.normal_(lin.weight, std=0.01)
        nn.init.zeros_(lin.bias)
        layers += [lin, nn.Tanh()]
    return nn.Sequential(*layers)


def boom():
    raise RuntimeError("no weights today\\n(second line)")


def not_a_module():
    return 3


class _Dict(nn.Module):
    def forward(self, x):
        return {"y": x, "w": x}


def no_tensor_out():
    return _NoTensor()


class _NoTensor(nn.Module):
    def forward(self, x):
        return {"feature_maps": (), "label": "cat"}


def stages_out():
    return _Stages()


class _Stages(nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.first, self.second = nn.Linear(16, 16), nn.Linear(16, 8)

    def forward(self, x):
        h = torch.relu(self.first(x))
        return {"feature_maps": (h, torch.relu(self.second(h)))}


def dict_out():
    return _Dict()


class _Pair(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(16, 4)

    def forward(self, x):
        return self.lin(x), "state"


def pair_out():
    return _Pair()


class _Argmax(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(16, 4)

    def forward(self, x):
        return self.lin(x).argmax(dim=-1)


def argmax_out():
    return _Argmax()


class _Tokens(nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.embed = nn.Embedding(50, 16)
        nn.init.normal_(self.embed.weight, std=0.02)
        self.lin = nn.Linear(16, 16)
        self.act = nn.GELU()
        self.head = nn.Linear(16, 50)

    def forward(self, ids):
        return {"logits": self.head(self.act(self.lin(self.embed(ids)))), "extra": ids * 1.0}


def tokens():
    return _Tokens()


class _Boom(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x.clone()

    @staticmethod
    def backward(ctx, grad):
        raise ValueError("no gradients on Tuesdays")


class _BoomNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(16, 4)

    def forward(self, x):
        return _Boom.apply(self.lin(x))


def boom_backward():
    return _BoomNet()


class _TwoInputs(nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.left = nn.Linear(16, 8)
        self.right = nn.Linear(16, 8)
        self.act = nn.ReLU()
        self.head = nn.Linear(8, 2)

    def forward(self, a, b):
        return self.head(self.act(self.left(a) + self.right(b)))


def two_inputs():
    return _TwoInputs()
"""


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("doctor")
    (d / "models.py").write_text(MODELS)
    (d / "broken.py").write_text("import torch\nraise ImportError('cannot build today')\n")
    torch.save({"x": torch.zeros(2)}, d / "dict.pt")
    torch.save(3, d / "int.pt")
    g = torch.Generator().manual_seed(0)
    pair = (torch.randn(32, 16, generator=g), torch.randn(32, 16, generator=g))
    torch.save(pair, d / "pair.pt")
    torch.save({"a": pair[0], "b": pair[1]}, d / "keywords.pt")
    return d


def _env(columns: str | None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    if columns is not None:
        env["COLUMNS"] = columns  # wide tables: no wrapped cells to parse around
    return env


def normlab(*args: str, cwd: Path, columns: str | None = "250") -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "normlab", "doctor", *args],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=cwd,
        env=_env(columns),
    )


# Many commands, one interpreter: a driver calls normlab.cli.main per argv, with COLUMNS as
# that command's own (main makes its rich Console then, which reads it), and reports its exit
# status and output (each command through its own process would cost a torch import apiece).
DRIVER = """
import contextlib, io, json, os, sys
from normlab.cli import main
results = []
for columns, argv in json.loads(sys.argv[1]):
    os.environ.pop("COLUMNS", None)
    if columns is not None:
        os.environ["COLUMNS"] = columns
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        status = main(argv)
    results.append([status, out.getvalue(), err.getvalue()])
print(json.dumps(results))
"""


def driven(*argvs: list[Any], cwd: Path, columns: str | None = "250") -> list[list[Any]]:
    """``normlab doctor ARGV`` for every argv, in one process: [status, stdout, stderr] each.
    An argv may start with ``("COLUMNS", value)``: that command's own terminal width."""
    commands = []
    for argv in argvs:
        width, args = (argv[0][1], argv[1:]) if isinstance(argv[0], tuple) else (columns, argv)
        commands.append([width, ["doctor", *args]])
    out = subprocess.run(
        [sys.executable, "-c", DRIVER, json.dumps(commands)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=cwd,
        env=_env(columns),
    )
    assert out.returncode == 0, out.stderr
    results: list[list[Any]] = json.loads(out.stdout)
    return results


def data_x() -> torch.Tensor:
    """The input of the --data test: 48 rows of 16 at std 5."""
    return 5.0 * torch.randn(48, 16, generator=torch.Generator().manual_seed(0))


QUICK_CHECK = ("--check-seeds", "2", "--check-steps", "10")
"""The shortest training check (the least the CLI allows): the advice is still tried and
reported, and these tests read how the report shows it, not what it measured (the checks'
numbers are tests/test_doctor_remedies.py's; --fix's default trial is checked below)."""

JSON_REPORTS = {
    "vanishing": ["models.py:vanishing", "--input-shape", "64,16", *QUICK_CHECK, "--json"],
    "data": ["models.py:pair_out", "--data", "x.pt", "--steps", "1", "--json"],
    "feature maps": ["models.py:stages_out", "--input-shape", "8,16", "--json"],
    "tokens": ["models.py:tokens", "--input-shape", "8,6", "--tokens", "50", "--json"],
    "pair.pt": ["models.py:two_inputs", "--data", "pair.pt", "--steps", "2", "--json"],
    "keywords.pt": ["models.py:two_inputs", "--data", "keywords.pt", "--steps", "2", "--json"],
}
"""The JSON reports the tests below read, each test its own."""


SIGMOID = (f"{ZOO}:vanishing_sigmoid", "--input-shape", "64,32")
FIX_IT = ["models.py:vanishing", "--input-shape", "64,16", "--fix", "xavier"]


def commands(workdir: Path) -> dict[str, list[Any]]:
    """Every command the tests below read that needs no process of its own, by name: the
    :data:`JSON_REPORTS`, the text reports, ``--fix`` and :data:`BAD`'s cases."""
    fixed = workdir / "fixed"
    return {
        **JSON_REPORTS,
        "exploding": [f"{ZOO}:exploding_relu", "--input-shape", "32,32", "--steps", "2",
                      *QUICK_CHECK],
        "narrow": [("COLUMNS", "80"), *SIGMOID, "--no-check"],
        "fix json": [*FIX_IT, "--out", str(fixed / "cured.pt"), "--html",
                     str(fixed / "report.html"), "--json"],
        "fix text": [*FIX_IT, "--out", str(fixed / "again.pt")],
        "traceback": ["models.py:boom_backward", "--input-shape", "8,16", "--traceback"],
        **{f"bad {i}": list(args) for i, (args, _) in enumerate(BAD)},
    }  # fmt: skip


@pytest.fixture(scope="module")
def reports(workdir: Path) -> dict[str, list[Any]]:
    """[status, stdout, stderr] of each of :func:`commands`, made in one process (the
    DRIVER): each through its own process would cost a torch import apiece."""
    torch.save(data_x(), workdir / "x.pt")
    (workdir / "fixed").mkdir()
    todo = commands(workdir)
    return dict(zip(todo, driven(*todo.values(), cwd=workdir), strict=True))


def test_text_report_names_the_exploding_layers_and_the_cure(
    reports: dict[str, list[Any]],
) -> None:
    # He's suggestion stands only when its check measures a cure: 10 steps give a log gain of
    # 74 over a spread of 0 (the given stack's output is 1e16x its input's: no step helps it)
    status, stdout, stderr = reports["exploding"]
    assert status == 0, stderr
    assert "Advice checked in training (10 Adam steps on a proxy task, 2 seeds)" in stdout
    lines = stdout.splitlines()
    last = next(line for line in lines if line.strip("│ ").startswith("model[20] "))  # output
    assert "Linear" in last and last.rstrip(" │").endswith("exploding")
    assert any(line.startswith("Verdict: the scale is exploding from") for line in lines)
    assert "He (init.kaiming_normal_, nonlinearity='relu')" in stdout
    assert "input (32, 32)" in stdout and "2 step(s)" in stdout


def test_piped_report_shows_every_digit_of_the_gradient_ratio(
    workdir: Path, reports: dict[str, list[Any]]
) -> None:
    # no COLUMNS and no terminal: rich would fit 80 columns and cut the nine-column table's cells
    out = normlab(*SIGMOID, *QUICK_CHECK, cwd=workdir, columns=None)  # with its advice
    assert out.returncode == 0, out.stderr
    assert "…" not in out.stdout and "Advice checked in training" in out.stdout
    lines = out.stdout.splitlines()
    header = next(line for line in lines if "grad ratio" in line)
    names = [cell.strip() for cell in header.split("┃")[1:-1]]
    assert names == [
        "layer", "kind", "act mean", "act std", "dead", "saturated", "grad std", "grad ratio",
        "labels",
    ]  # fmt: skip  # each header whole, on one line
    first = next(line for line in lines if line.strip("│ ").startswith("model[0][0] "))
    cells = [c.strip() for c in first.split("│")[1:-1]]
    assert cells[1] == "Linear" and cells[-1] == "vanishing" and "e-1" in cells[7]
    assert any(
        line.startswith("Verdict: the gradient is vanishing on its way back") for line in lines
    )
    # the same layer table at 80 columns (no training check: the cut cells are the table's)
    narrow = reports["narrow"][1]
    assert "…" in narrow  # COLUMNS still rules: rich fits the table as it is told


def test_json_has_layers_labels_verdict_and_suggestions(reports: dict[str, list[Any]]) -> None:
    status, stdout, stderr = reports["vanishing"]
    assert status == 0, stderr
    d = json.loads(stdout)
    assert d["model"] == "models.py:vanishing" and d["problems"] == ["vanishing"]
    assert d["input_shape"] == [64, 16] and d["steps"] == 3
    assert [layer["name"] for layer in d["layers"]] == [str(i) for i in range(24)]
    for layer in d["layers"]:
        assert set(layer) >= {"name", "kind", "labels", "act_mean", "act_std", "dead_frac"}
        assert set(layer["labels"]) <= set(doctor.LABELS)
    assert d["layers"][-1]["labels"] == ["vanishing"] and d["verdict"] and d["suggestions"]
    assert "fix" not in d


@pytest.mark.slow
def test_fix_saves_a_cured_state_dict_and_an_html_report(
    workdir: Path, reports: dict[str, list[Any]]
) -> None:
    saved, page = workdir / "fixed" / "cured.pt", workdir / "fixed" / "report.html"
    # in the DRIVER's process: what the commands print is the point, not the boundary
    (status, stdout, stderr), (text_status, text, _) = reports["fix json"], reports["fix text"]
    assert status == 0, stderr
    d = json.loads(stdout)
    assert d["problems"] == ["vanishing"]  # the model as given
    fix = d["fix"]
    assert fix["method"] == "xavier" and fix["out"] == str(saved)
    assert fix["follows"] == ["tanh"] * 12
    assert fix["after"]["problems"] == []
    assert all(layer["labels"] == ["ok"] for layer in fix["after"]["layers"])
    assert fix["skipped"] == [] and fix["trial"]["cured"] is True
    assert len(fix["trial"]["before"]) == len(fix["trial"]["after"]) == doctor.TRIAL_SEEDS
    assert len(fix["trial"]["curve_after"]) == doctor.TRIAL_STEPS and fix["trial"]["flagged"] == []
    assert "state_dict written" in stderr and "report written" in stderr
    assert text_status == 0 and f"training check ({doctor.TRIAL_STEPS} Adam steps" in text
    assert "the fix lowered the loss" in text

    sys.path.insert(0, str(workdir))
    try:
        import models  # type: ignore[import-not-found]
    finally:
        sys.path.pop(0)
    net = models.vanishing()
    net.load_state_dict(torch.load(saved, weights_only=True))
    assert doctor.diagnose(net, torch.randn(64, 16)).healthy  # what was saved is the cure

    html = page.read_text()
    assert html.startswith("<!DOCTYPE html>") and "data:image/png;base64," in html
    assert "://" not in html  # self-contained: nothing to fetch
    assert "The model as given" in html and "The model after --fix xavier" in html
    assert html.count('<span class="label"') == 2 * 24


def test_data_file_is_the_input(reports: dict[str, list[Any]]) -> None:
    x = data_x()
    status, stdout, stderr = reports["data"]
    assert status == 0, stderr  # a (tensor, other) tuple output is accepted
    d = json.loads(stdout)
    assert d["input_shape"] == [48, 16] and d["steps"] == 1
    assert d["input_std"] == pytest.approx(x.std(unbiased=False).item(), rel=1e-5)
    assert [layer["name"] for layer in d["layers"]] == ["lin"]


# -- bad input ---------------------------------------------------------------------------------

# Many cases, one interpreter (the DRIVER): each through its own process would cost a torch
# import apiece.
BAD: list[tuple[tuple[str, ...], str]] = [
    (("models.py:vanishing", "--input-shape", "8,16", "--fix-tied"), "--fix-tied is only used"),
    (("models.py:argmax_out", "--input-shape", "8,16"), "carries no gradient"),
    (("models.py:dict_out", "--input-shape", "8,16", "--output", "y"), "carries no gradient"),
    (("models.py:dict_out", "--input-shape", "8,16", "--output", "z"), "'z' is not one of"),
    (("models.py:pair_out", "--input-shape", "8,16", "--output", "z"), "names a field, but"),
    (("models.py:tokens", "--input-shape", "8,6", "--tokens", "0"), "--tokens: '0' is not all"),
    (("models.py:tokens", "--tokens", "9", "--data", "dict.pt"), "use it with --input-shape"),
    (
        ("models.py:tokens", "--input-shape", "8,6", "--tokens", "50", "--output", "extra"),
        "carries no gradient",  # ids * 1.0
    ),
    (("models.py:vanishing", "--input-shape", "16,16", "--dtype", "float64"), "Double"),
    (
        ("models.py:boom_backward", "--input-shape", "8,16"),
        "the model's backward pass raised ValueError: no gradients on Tuesdays",
    ),
    (("nofile.py:build", "--input-shape", "8,16"), "file 'nofile.py' not found"),
    (("models.py", "--input-shape", "8,16"), "use FILE.py:FACTORY, e.g. mymodel.py:build"),
    (
        ("models.py:nope", "--input-shape", "8,16"),
        "no function 'nope' in 'models.py', use one of: argmax_out, boom, boom_backward, dict_out",
    ),
    (
        ("models.py:boom", "--input-shape", "8,16"),
        "boom() raised RuntimeError: no weights today (second line)",
    ),
    (
        ("broken.py:build", "--input-shape", "8,16"),
        "importing it raised ImportError: cannot build today",
    ),
    (
        ("models.py:not_a_module", "--input-shape", "8,16"),
        "not_a_module() returned int, use a factory that returns a torch.nn.Module",
    ),
    (
        ("models.py:vanishing", "--input-shape", "8,5"),
        "the model rejected input of shape (8, 5): RuntimeError: mat1 and mat2 shapes",
    ),
    (
        ("models.py:dict_out", "--input-shape", "8,16"),
        "the model returned dict with tensor fields ['y', 'w']: name one with output=",
    ),
    (
        ("models.py:no_tensor_out", "--input-shape", "8,16"),
        "the model returned dict with no tensor in its fields ['feature_maps (tuple)', 'label "
        "(str)']: return the scores as a tensor or a tuple of tensors, in a field that output= "
        "names",
    ),
    (("models.py:vanishing", "--input-shape", "8,x"), "--input-shape '8,x': use positive"),
    (("models.py:vanishing", "--input-shape", "8"), "--input-shape '8': use positive integers"),
    (("models.py:vanishing", "--input-shape", "0,16"), "--input-shape '0,16': use positive"),
    (("models.py:vanishing",), "doctor needs --input-shape N,D[,...] (or --data FILE.pt)"),
    (
        ("models.py:vanishing", "--input-shape", "8,16", "--fix", "he"),
        "--fix needs --out FILE.pt",
    ),
    (
        ("models.py:vanishing", "--input-shape", "8,16", "--fix", "kaiming", "--out", "a.pt"),
        "--fix 'kaiming' is not a method, use one of: he, xavier, orthogonal, lsuv",
    ),
    (
        ("models.py:vanishing", "--input-shape", "8,16", "--out", "a.pt"),
        "--out is only used with --fix METHOD",
    ),
    (
        ("models.py:vanishing", "--input-shape", "8,16", "--steps", "0"),
        "argument --steps: '0' is not allowed, use an integer in [1, 100]",
    ),
    (("models.py:vanishing", "--data", "none.pt"), "--data 'none.pt': file not found"),
    (("models.py:vanishing", "--data", "int.pt"), "--data 'int.pt': holds int, use a tensor"),
    (("models.py:vanishing", "--data", "dict.pt"), "unexpected keyword argument 'x'"),
    (("models.py:vanishing", "--input-shape", "8,16", "--dtype", "int8"), "invalid choice"),
    (
        ("models.py:vanishing", "--input-shape", "8,16", "--html", "/no/dir/r.html"),
        "--html '/no/dir/r.html': folder '/no/dir' does not exist",
    ),
    (
        ("models.py:vanishing", "--input-shape", "8,16", "--seed", "-4"),
        "argument --seed: '-4' is not allowed, use an integer in [0, 2147483647]",
    ),
    (
        ("models.py:vanishing", "--input-shape", "8,16", "--seed", "x"),
        "argument --seed: 'x' is not allowed, use an integer in [0, 2147483647]",
    ),
    (("models.py:vanishing", "--input-shape", "8,16", "--frob"), "unrecognized arguments: --frob"),
]


@pytest.fixture(scope="module")
def bad_results(reports: dict[str, list[Any]]) -> list[list[Any]]:
    return [reports[f"bad {i}"] for i in range(len(BAD))]


@pytest.mark.parametrize("case", range(len(BAD)), ids=[" ".join(a[:3]) for a, _ in BAD])
def test_bad_input_exits_2_with_one_clear_line(bad_results: list[list[Any]], case: int) -> None:
    status, stdout, stderr = bad_results[case]
    assert status == 2 and stdout == ""
    lines = stderr.strip().splitlines()
    assert len(lines) == 1, stderr
    assert lines[0].startswith("normlab: error: ")
    assert BAD[case][1] in lines[0]


def test_the_cli_offers_every_fix_the_library_has(capsys: pytest.CaptureFixture[str]) -> None:
    from normlab import cli

    argv = ["doctor", "m.py:f", "--input-shape", "8,16", "--fix", "bogus", "--out", "a.pt"]
    assert cli.main(argv) == 2
    assert capsys.readouterr().err.endswith(f"use one of: {', '.join(doctor.FIX_METHODS)}\n")


def test_exit_status_2_reaches_the_shell(workdir: Path) -> None:
    out = normlab("models.py:vanishing", "--input-shape", "8,5", cwd=workdir)
    assert out.returncode == 2 and out.stdout == ""
    assert out.stderr.count("\n") == 1 and "(8, 5)" in out.stderr


def test_an_output_of_feature_maps_is_read_whole_and_said(reports: dict[str, list[Any]]) -> None:
    """A dict (a ``ModelOutput``) whose only field is a tuple of feature maps: every map is
    read, so both layers get a gradient, and the report's notes say what was read."""
    status, stdout, stderr = reports["feature maps"]
    assert status == 0, stderr
    d = json.loads(stdout)
    assert [la["name"] for la in d["layers"]] == ["first", "second"]
    assert all(la["grad_std"] > 0 for la in d["layers"])
    assert d["notes"][0] == (
        "the model returned dict; its only field that holds tensors, feature_maps, holds 2 "
        "tensors of shapes [(8, 16), (8, 8)]: the readout reads every one of them"
    )


def test_token_ids_and_a_model_output_field(reports: dict[str, list[Any]]) -> None:
    status, stdout, stderr = reports["tokens"]
    assert status == 0, stderr
    d = json.loads(stdout)
    assert d["input_shape"] == [8, 6] and d["problems"] == []
    assert [la["name"] for la in d["layers"]] == ["embed", "lin", "act", "head"]
    assert d["input_std"] == 1.0  # token ids have no scale: the embedding starts it
    assert d["layers"][0]["role"] == "embedding" and d["layers"][1]["anchor"] == "embed"
    assert "no scale of its own" in d["notes"][0]


def test_traceback_shows_the_model_s_own_frames(reports: dict[str, list[Any]]) -> None:
    status, stdout, stderr = reports["traceback"]
    assert status == 2 and stdout == ""
    assert "Traceback (most recent call last)" in stderr
    assert 'raise ValueError("no gradients on Tuesdays")' in stderr  # the model's own line
    assert stderr.strip().splitlines()[-1].startswith("normlab: error: model ")


@pytest.mark.parametrize("data", ["pair.pt", "keywords.pt"])
def test_positional_and_keyword_inputs_from_data(reports: dict[str, list[Any]], data: str) -> None:
    status, stdout, stderr = reports[data]
    assert status == 0, stderr
    d = json.loads(stdout)
    assert d["steps"] == 2 and d["input_shape"] == [32, 16]
    assert [la["name"] for la in d["layers"]] == ["left", "right", "act", "head"]
