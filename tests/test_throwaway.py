"""A new experiment is everywhere once registered: no other edit, no shared test list.

A throwaway experiment, declared here as any experiment module declares one, is put into the
registry for one test (and taken out after it) and then shows up in every face normlab has: the
CLI's ``list`` and ``run`` (tables, ``--json``, ``--code``, ``--notebook``) and the lab's
``GET /api/experiments``, ``POST /api/experiments/NAME``, its ``/code`` and ``/notebook``, the
OpenAPI document, and its page ``/experiments/NAME`` (with its live widget), listed on
``/experiments``: in the lab before any lesson embeds it.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import nbformat
import pytest
import torch
from fastapi.testclient import TestClient

import normlab.experiments
from normlab import cli
from normlab import figures as fig
from normlab.experiments import get_experiment, list_experiments, run_experiment, script
from normlab.experiments.base.params import device_param, param, seed_param
from normlab.experiments.base.registry import Cost, Experiment
from normlab.experiments.base.results import Result
from normlab.figures import Table
from normlab.lab.app import create_app
from normlab.models import fmt

NAME = "throwaway-mean"
LAB = "http://127.0.0.1"  # the lab answers loopback Host names only


@dataclass(frozen=True)
class Params:
    n: int = param(16, "how many numbers to draw", min=1, max=1000, step=1)
    seed: int = seed_param()
    device: str = device_param()


def throwaway_mean(n: int, seed: int, device: str) -> dict[str, Any]:
    """The mean and std of ``n`` standard normal draws."""
    torch.manual_seed(seed)
    x = torch.randn(n).to(device)  # (n,), drawn on the CPU
    return {"n": n, "mean": x.mean().item(), "std": x.std().item()}


def tables(result: dict[str, Any]) -> list[dict[str, Any]]:
    """The two numbers."""
    row = [str(result["n"]), fmt(result["mean"], 6), fmt(result["std"], 6)]
    return [{"title": "Draws", "columns": ["n", "mean", "std"], "rows": [row], "notes": []}]


@dataclass
class ThrowawayResult(Result):
    n: int
    mean: float
    std: float

    def tables(self) -> list[Table]:
        return Table.from_dicts(tables(self.data()))

    def figures(self) -> list[fig.Figure]:
        bars = fig.Series("draws", ["mean", "std"], [self.mean, self.std], kind="bars")
        return [fig.Figure("Draws", [fig.Panel(fig.Axis(""), fig.Axis("value"), [bars])])]


EXPERIMENT = Experiment(
    name=NAME,
    title="A throwaway experiment",
    summary="the mean and std of a few standard normal draws",
    params_type=Params,
    result_type=ThrowawayResult,
    entry=throwaway_mean,
    tables=tables,
    code=(throwaway_mean, fmt, tables),
    cost=Cost(1.0, 256),
)


@pytest.fixture
def registered(monkeypatch: pytest.MonkeyPatch) -> Iterator[Experiment]:
    """The throwaway experiment in the registry for one test, and out of it afterwards."""
    registry = normlab.experiments._REGISTRY  # there is no unregister: the dict is restored
    monkeypatch.setitem(registry, NAME, EXPERIMENT)
    yield EXPERIMENT
    monkeypatch.undo()
    assert NAME not in {e.name for e in list_experiments()}


def _cli(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    assert cli.main(list(argv)) == 0
    return capsys.readouterr().out


def test_the_registry_serves_it(registered: Experiment) -> None:
    assert get_experiment(NAME) is registered and list_experiments()[-1] is registered
    result = run_experiment(NAME, n=8, seed=3)
    assert result.to_dict()["params"] == {"n": 8, "seed": 3, "device": "cpu"}


def test_the_cli_lists_and_runs_it(
    registered: Experiment, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    assert NAME in _cli(capsys, "list")
    listed = json.loads(_cli(capsys, "list", "--json"))
    assert listed[-1]["name"] == NAME
    assert [p["name"] for p in listed[-1]["parameters"]] == ["n", "seed", "device"]
    expected = run_experiment(NAME, n=5, seed=2)
    assert fmt(expected.mean, 6) in _cli(capsys, "run", NAME, "--n", "5", "--seed", "2")
    as_json = json.loads(_cli(capsys, "run", NAME, "--json", "--n", "5", "--seed", "2"))
    assert as_json == expected.to_dict()
    path = tmp_path / "draws.ipynb"
    _cli(capsys, "run", NAME, "--n", "5", "--seed", "2", "--notebook", str(path))
    nb = nbformat.reads(path.read_text(), as_version=4)
    nbformat.validate(nb)
    run = next(c for c in nb.cells if c.get("id") == "run")  # its figure's cells follow
    assert run.outputs[0]["text"] == script.output(registered, expected)


def test_its_code_runs_without_normlab_and_prints_what_normlab_reports(
    registered: Experiment, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    text = _cli(capsys, "run", NAME, "--code", "--n", "7", "--seed", "4")
    assert text == script.render(registered, registered.make_params({"n": 7, "seed": 4}))
    (tmp_path / "normlab").mkdir()  # run where normlab refuses to import
    (tmp_path / "normlab" / "__init__.py").write_text('raise ImportError("no normlab")\n')
    done = subprocess.run(
        [sys.executable, "-c", text], cwd=tmp_path, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == script.output(registered, run_experiment(NAME, n=7, seed=4))


def test_the_lab_serves_it_and_documents_it(registered: Experiment) -> None:
    with TestClient(create_app(), base_url=LAB) as client:  # its routes are made here
        listed = client.get("/api/experiments").json()
        assert [e["name"] for e in listed] == [e.name for e in list_experiments()]
        assert listed[-1]["name"] == NAME and listed[-1]["trains"] is False
        r = client.post(f"/api/experiments/{NAME}", json={"n": 9})
        assert r.status_code == 200, r.text
        d = r.json()
        assert d["experiment"] == NAME and d["mean"] == run_experiment(NAME, n=9).mean
        bad = client.post(f"/api/experiments/{NAME}", json={"n": 0})
        assert bad.status_code == 422 and bad.json()["detail"]["parameter"] == "n"
        code = client.get(f"/api/experiments/{NAME}/code", params={"n": "9"}).json()
        assert code["script"] == script.render(registered, registered.make_params({"n": 9}))
        notebook = client.get(f"/api/experiments/{NAME}/notebook", params={"n": "9"})
        assert notebook.status_code == 200
        nbformat.validate(nbformat.reads(notebook.text, as_version=4))
        paths = client.get("/openapi.json").json()["paths"]
        assert paths[f"/api/experiments/{NAME}"]["post"]["summary"] == registered.title
        for face in ("code", "notebook"):
            assert "get" in paths[f"/api/experiments/{NAME}/{face}"]
        page = client.get(f"/experiments/{NAME}")
        assert page.status_code == 200, page.text[-2000:]
        assert f"<h1>{registered.title}</h1>" in page.text
        assert f'data-experiment="{NAME}"' in page.text  # its widget, lab.js builds the rest
        initial = re.search(
            r'<script type="application/json" class="nl-initial">(.*?)</script>', page.text
        )
        default = run_experiment(NAME).mean  # the page draws the run of the defaults
        assert initial is not None and json.loads(initial.group(1))["mean"] == default
        assert f'<a href="/experiments/{NAME}">' in client.get("/experiments").text
