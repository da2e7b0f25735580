"""Starting a sweep from the lab (``POST /api/sweeps``, issue 34 item 6): bounded, queued like
any run, stopped when the lab stops, resumed by the engine.

Each lab is made here with its own store file in a temporary folder. The sweeps are tiny:
``symmetry`` (one hidden layer of 2 units, 2 SGD steps: its runs go one by one, and a
:class:`~tests.lab.steps.Gate` holds one at an optimizer step) and ``chaos-cell`` (depth 4,
width 16, 2 steps: its cells run batched). A test waits for a sweep with
:meth:`~normlab.lab.runner.Runner.finish_jobs`, never a sleep.
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

with warnings.catch_warnings():  # starlette warns about its httpx-based client on import
    warnings.simplefilter("ignore")
    from fastapi.testclient import TestClient

from normlab.experiments import run_experiment
from normlab.lab import labsweeps
from normlab.lab.app import create_app
from normlab.lab.runner import Runner
from normlab.sweep import Store, Sweep

from .steps import Gate, at_each_step

LAB = "http://127.0.0.1"
WAIT_S = 60.0
"""The most a test waits for a sweep to end: a bug fails the test, it never hangs it."""
STEPS = 2
SYMMETRY = {"lr": "0.1,0.2,0.3", "steps": STEPS, "hidden": 2}
"""Three runs of ``symmetry``, one by one, each of :data:`STEPS` optimizer steps."""
CHAOS = {"sigma_w2": "1,2", "sigma_b2": "0.05,0.1", "depth": 4, "width": 16, "steps": 2}
"""Four ``chaos-cell`` cells that share one batched call."""


class Lab:
    """A lab app (its lifespan running) with its own sweep store, and the store's path."""

    def __init__(self, folder: Path) -> None:
        self.store = folder / "sweeps.sqlite3"
        self.runner = Runner(answers=None)
        app = create_app(self.runner, db_path=folder / "progress.sqlite3", sweeps_store=self.store)
        self.client = TestClient(app, base_url=LAB)

    def post(self, body: dict[str, Any], **headers: str) -> Any:
        return self.client.post("/api/sweeps", json=body, headers=headers)

    def listed(self) -> dict[str, dict[str, Any]]:
        """``GET /api/sweeps``'s sweeps, by id."""
        answer = self.client.get("/api/sweeps")
        assert answer.status_code == 200, answer.text
        return {s["id"]: s for s in answer.json()["sweeps"]}

    def finish(self) -> None:
        assert self.runner.finish_jobs(WAIT_S), "the lab's sweep did not end"


@pytest.fixture
def lab(tmp_path: Path) -> Iterator[Lab]:
    made = Lab(tmp_path)
    with made.client:
        yield made


def _results(sweep: Sweep) -> list[Any]:
    return [(r["status"], r["result"]) for r in sweep.records()]


def test_a_small_sweep_runs_to_the_numbers_the_engine_gives(lab: Lab, tmp_path: Path) -> None:
    answer = lab.post({"experiment": "chaos-cell", "grid": CHAOS, "seeds": None})
    assert answer.status_code == 202, answer.text
    started = answer.json()
    assert (started["total"], started["queued"]) == (4, 0)
    assert started["url"] == f"/sweeps/{started['id']}"
    lab.finish()
    listed = lab.listed()[started["id"]]
    assert (listed["experiment"], listed["done"], listed["total"]) == ("chaos-cell", 4, 4)
    page = lab.client.get(started["url"])
    assert page.status_code == 200 and "4 of 4 cells stored" in page.text

    here = Sweep("chaos-cell", CHAOS, store=tmp_path / "here.sqlite3")
    assert here.run().ran == 4
    ran_by_lab = _results(Sweep("chaos-cell", CHAOS, store=lab.store))
    assert ran_by_lab == _results(here)  # the same numbers, bit for bit (same process, threads)
    assert all(status == "ok" for status, _ in ran_by_lab)


def test_a_bad_axis_is_a_422_naming_it_and_nothing_is_stored(lab: Lab) -> None:
    cases = [
        ({"experiment": "chaos-cell", "grid": {"sigma_w2": "0.5,9"}}, "sigma_w2", "[0.1, 6]"),
        ({"experiment": "chaos-cell", "grid": {"nope": 1}}, "nope", "unknown parameter 'nope'"),
        ({"experiment": "chaos-cell", "grid": ["depth=4", "lr"]}, "grid", "write NAME=VALUES"),
        ({"experiment": "chaos-cell", "seeds": 0}, "seeds", "--seeds 0"),
        ({"experiment": "chaos-cell", "seeds": "2"}, "seeds", "an integer or null"),
        ({"experiment": "chaos-cell", "grid": {"depth": []}}, "depth", "a list of 1 to 48"),
        ({"experiment": "drift"}, "experiment", "the lab sweeps the experiments with a loss"),
        ({"experiment": "bn-lr", "lr": 1}, "lr", "unknown key 'lr'"),
    ]
    for body, parameter, words in cases:
        answer = lab.post(body)
        assert answer.status_code == 422, (body, answer.text)
        detail = answer.json()["detail"]
        assert detail["parameter"] == parameter and words in detail["message"], (body, detail)
    assert not lab.store.exists()  # nothing stored, not even the file
    lab.finish()


def test_a_grid_over_the_lab_s_bounds_is_refused_and_points_to_the_command_line(
    lab: Lab,
) -> None:
    most = labsweeps.MAX_CONFIGS
    over = {"sigma_w2": "0.5:5:7:lin", "sigma_b2": "0:0.25:8:lin"}  # 56 cells
    costly = ["lr=0.1:3:12", "batch_norm=true,false"]  # 48 runs of 10 s each at the maxima
    cases = [
        ({"experiment": "chaos-cell", "grid": over}, "grid", f"at most {most}"),
        ({"experiment": "bn-lr", "grid": costly, "seeds": 2}, "grid", "10 s a run: 30 runs"),
        ({"experiment": "bn-lr", "grid": {"lr": "0.1:3:1000000000"}}, "lr", "1000000000 points"),
    ]
    for body, parameter, words in cases:
        answer = lab.post(body)
        assert answer.status_code == 422, (body, answer.text)
        detail = answer.json()["detail"]
        assert detail["parameter"] == parameter and words in detail["message"], (body, detail)
        if parameter == "grid":
            assert "normlab sweep" in detail["message"]
    assert not lab.store.exists()
    # at the bounds, a sweep passes: the 6 x 8 phase diagram, and bn-lr's 12 rates x 2
    assert len(labsweeps.plan("chaos-cell", {**over, "sigma_w2": "0.5:5:6"}, None, "-").configs)
    assert len(labsweeps.plan("bn-lr", costly, None, "-").configs) == 24


def test_a_sweep_is_listed_while_it_runs_and_the_line_is_bounded(lab: Lab) -> None:
    gate = Gate()
    first = {"experiment": "symmetry", "grid": [f"{k}={v}" for k, v in SYMMETRY.items()]}
    with at_each_step(gate):
        gate.close()
        started = lab.post(first).json()  # the form's way: NAME=SPEC lines
        gate.wait_for(1)  # its first run is at its first step, held
        listed = lab.listed()[started["id"]]
        assert (listed["done"], listed["total"]) == (0, 3)
        assert lab.client.get(f"/api/sweeps/{started['id']}").json()["complete"] is False

        second = lab.post({"experiment": "symmetry", "grid": {**SYMMETRY, "lr": 0.4}})
        assert second.status_code == 202 and second.json()["queued"] == 1
        again = lab.post(first)  # the same grid: the same sweep, not queued twice
        assert again.status_code == 202 and again.json() == {**started, "queued": 0}
        lab.runner.max_waiting_jobs = 1
        third = {"experiment": "symmetry", "grid": {**SYMMETRY, "lr": 0.5}}
        full = lab.post(third)
        assert full.status_code == 429 and full.headers["Retry-After"].isdigit()
        assert "sweeps wait already" in full.json()["detail"]["message"]
        assert len(lab.listed()) == 2  # the third was not recorded
        gate.open()
    lab.finish()
    assert [(s["done"], s["total"]) for s in lab.listed().values()] == [(1, 1), (3, 3)]


def test_a_stopping_lab_stops_its_sweep_between_runs_and_a_second_post_runs_the_rest(
    lab: Lab,
) -> None:
    gate = Gate()
    body = {"experiment": "symmetry", "grid": SYMMETRY}
    with at_each_step(gate):
        gate.close()
        started = lab.post(body).json()
        gate.wait_for(1)  # the first run trains
        lab.runner.cancel()  # what the lab's shutdown calls first
        gate.open()
        lab.finish()  # the first run ends and is stored, the next never starts
    assert lab.listed()[started["id"]]["done"] == 1
    with Store(lab.store) as store:
        (first_row,) = store.rows(c.id for c in Sweep("symmetry", SYMMETRY).configs).values()
    assert lab.post(body).status_code == 503  # no sweep starts while the lab stops

    one_run: list[int] = []
    with at_each_step(one_run.append):
        run_experiment("symmetry", lr=0.1, steps=STEPS, hidden=2)
    lab.runner.resume()  # the lab is started again
    steps: list[int] = []
    with at_each_step(steps.append):
        again = lab.post(body)
        assert again.status_code == 202 and again.json()["id"] == started["id"]
        lab.finish()
    assert len(steps) == 2 * len(one_run)  # only the two missing runs trained
    assert lab.listed()[started["id"]]["done"] == 3
    with Store(lab.store) as store:
        assert store.rows([first_row.id])[first_row.id] == first_row  # kept as it was


@pytest.mark.parametrize(
    "headers",
    [{"Origin": "http://evil.example"}, {"Sec-Fetch-Site": "cross-site"}],
    ids=["origin", "sec-fetch-site"],
)
def test_a_post_from_another_site_starts_no_sweep(lab: Lab, headers: dict[str, str]) -> None:
    answer = lab.post({"experiment": "symmetry", "grid": SYMMETRY}, **headers)
    assert answer.status_code == 403 and answer.json()["detail"]["parameter"] == "origin"
    assert not lab.store.exists()
    own = lab.post({"experiment": "symmetry", "grid": SYMMETRY}, Origin=LAB)
    assert own.status_code == 202  # the lab's own page may
    lab.finish()


def test_the_list_page_has_the_form_with_the_sweepable_experiments(lab: Lab) -> None:
    page = lab.client.get("/sweeps")
    assert page.status_code == 200
    assert '<form class="nl-sweep-form"' in page.text and 'src="/static/sweeps.js"' in page.text
    options = re.findall(r'<option value="([^"]+)"( selected)?>', page.text)
    assert [name for name, _ in options] == labsweeps.sweepable()  # drift has no loss curve
    assert [name for name, chosen in options if chosen] == ["chaos-cell"]  # the placeholder's
    assert f"at most {labsweeps.MAX_CONFIGS} configurations" in page.text
