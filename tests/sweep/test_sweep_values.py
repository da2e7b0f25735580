"""The numbers an experiment declares per run (``Experiment(sweep_values=...)``) in a sweep's
summary, its heat map, the lab's view and ``normlab sweep --value``.

A throwaway experiment, declared here, is in the registry for this module only: its result
holds a loss curve and one measured number, ``chi_1``. Its results are written by hand (nothing
runs), chosen so that each rule shows: a mean and its spread over two seeds, a spread of 0, and
a seed whose value is not finite. The expected numbers are means of two decimals: compared to
1e-12 (float64 arithmetic, no float32 anywhere).
"""

from __future__ import annotations

import json
import math
import statistics
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

import normlab.experiments
from normlab import cli
from normlab import figures as fig
from normlab.experiments.base.params import param, seed_param
from normlab.experiments.base.registry import Cost, Experiment
from normlab.experiments.base.results import Result
from normlab.figures import Table
from normlab.sweep import Outcome, Store, Sweep, catalog
from normlab.sweep.summary import SweepSummary, summarize
from normlab.sweep.views import ViewError, heatmap, tables, view

NAME = "throwaway-chi"


@dataclass(frozen=True)
class Params:
    sigma_w2: float = param(1.0, "weight variance", min=0.5, max=4.0)
    sigma_b2: float = param(0.0, "bias variance", min=0.0, max=1.0)
    seed: int = seed_param()


def throwaway_chi(sigma_w2: float, sigma_b2: float, seed: int) -> dict[str, Any]:
    """A loss curve and a number per run (never run here: the results are written by hand)."""
    return {"losses": [1.0, 0.5], "chi_1": sigma_w2 / 2}


def tables_of(result: dict[str, Any]) -> list[dict[str, Any]]:
    return [{"title": "chi_1", "columns": ["chi_1"], "rows": [[str(result["chi_1"])]]}]


@dataclass
class ChiResult(Result):
    losses: list[float]
    chi_1: float | None

    def tables(self) -> list[Table]:
        return Table.from_dicts(tables_of(self.data()))

    def figures(self) -> list[fig.Figure]:
        return []


EXPERIMENT = Experiment(
    name=NAME,
    title="A throwaway measured number",
    summary="a loss curve and chi_1",
    params_type=Params,
    result_type=ChiResult,
    entry=throwaway_chi,
    tables=tables_of,
    code=(throwaway_chi, tables_of),
    cost=Cost(1.0, 256),
    total_steps=lambda p: 1,
    sweep_values=("chi_1",),
)

CHI: dict[tuple[float, float, int], float | None] = {
    # (sigma_w2, sigma_b2, seed): the measured chi_1; None: not finite, as JSON holds nan
    (1.0, 0.0, 0): 0.5,
    (1.0, 0.0, 1): 0.75,
    (2.0, 0.0, 0): 1.0,
    (2.0, 0.0, 1): 1.25,
    (1.0, 0.5, 0): 0.75,
    (1.0, 0.5, 1): None,  # the cell's mean is not finite: a gap, never averaged away
    (2.0, 0.5, 0): 1.5,
    (2.0, 0.5, 1): 1.5,
}
AXES = [("sigma_w2", (1.0, 2.0)), ("sigma_b2", (0.0, 0.5)), ("seed", (0, 1))]
GRID = {"sigma_w2": "1,2", "sigma_b2": "0,0.5"}
COMMAND = ["sweep", NAME, "--grid", "sigma_w2=1,2", "--grid", "sigma_b2=0,0.5", "--seeds", "2"]


@pytest.fixture(scope="module", autouse=True)
def registered() -> Iterator[Experiment]:
    """The throwaway experiment in the registry for this module, and out of it afterwards."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setitem(normlab.experiments._REGISTRY, NAME, EXPERIMENT)  # no unregister
        yield EXPERIMENT


def result(w: float, b: float, seed: int) -> dict[str, Any]:
    return {"losses": [1.0, 0.5], "chi_1": CHI[w, b, seed]}


@pytest.fixture(scope="module")
def summary() -> SweepSummary:
    records = [
        {
            "params": {"sigma_w2": w, "sigma_b2": b, "seed": s},
            "status": "ok",
            "result": result(w, b, s),
        }
        for w, b, s in CHI
    ]
    return summarize(NAME, AXES, records)


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The sweep of :data:`GRID` over two seeds, its results :data:`CHI`, stored as
    ``Sweep.run`` would."""
    path = tmp_path_factory.mktemp("sweep-values") / "s.sqlite3"
    sweep = Sweep(NAME, GRID, seeds=2, store=path)
    with Store(path) as s:
        s.add_sweep(sweep.experiment, sweep.spec(), [c.id for c in sweep.configs])
        for c in sweep.configs:
            p = c.params
            s.put(c, Outcome(c.id, result(p["sigma_w2"], p["sigma_b2"], p["seed"]), None, 0.0))
    return path


def at(s: SweepSummary, w: float, b: float) -> Any:
    return next(c for c in s.cells if c.values == {"sigma_w2": w, "sigma_b2": b})


def test_each_cell_holds_a_declared_value_s_mean_and_spread_over_its_seeds(
    summary: SweepSummary,
) -> None:
    assert summary.measured == ("chi_1",)
    assert summary.value_names == ("final", "best", "diverged", "chi_1")  # no lr axis
    low = at(summary, 1.0, 0.0)
    assert low.measured["chi_1"] == pytest.approx((0.5 + 0.75) / 2, abs=1e-12)
    assert low.measured_std["chi_1"] == pytest.approx(statistics.stdev([0.5, 0.75]), abs=1e-12)
    assert low.value("chi_1") == low.measured["chi_1"]
    flat = at(summary, 2.0, 0.5)  # equal seeds: a spread of 0, not None
    assert (flat.measured["chi_1"], flat.measured_std["chi_1"]) == (1.5, 0.0)
    assert flat.to_dict()["measured"] == {"chi_1": 1.5}
    assert flat.to_dict()["measured_std"] == {"chi_1": 0.0}
    with pytest.raises(ValueError, match="'chi_2' not supported, use one of: final, best, "):
        low.value("chi_2")


def test_a_seed_whose_value_is_not_finite_makes_the_cell_s_mean_not_finite(
    summary: SweepSummary,
) -> None:
    gap = at(summary, 1.0, 0.5)  # seed 1 holds None: the 0.75 of seed 0 is not its mean
    assert math.isnan(gap.measured["chi_1"]) and gap.measured_std["chi_1"] is None
    assert gap.to_dict()["measured"] == {"chi_1": None}  # JSON has no nan
    assert gap.final == 0.5 and gap.trainable  # the loss curve's numbers are untouched
    pending = summarize(NAME, AXES, [{"params": {"sigma_w2": 1.0, "sigma_b2": 0.0, "seed": 0},
                                      "status": "pending", "result": None}])  # fmt: skip
    assert pending.cells[0].measured == {"chi_1": None}  # not run yet, as final


def test_a_result_without_the_declared_number_is_refused_by_name() -> None:
    records = [{"params": {"sigma_w2": 1.0, "sigma_b2": 0.0}, "status": "ok",
                "result": {"losses": [1.0, 0.5], "chi_1": "1.0"}}]  # fmt: skip
    with pytest.raises(ValueError, match=f"{NAME!r}: its result has no number 'chi_1'"):
        summarize(NAME, AXES[:2], records)


def test_the_heat_map_and_the_tables_show_a_declared_value(summary: SweepSummary) -> None:
    chosen = view(summary, value="chi_1")
    assert (chosen.x, chosen.y, chosen.value) == ("sigma_w2", "sigma_b2", "chi_1")
    figure = chosen.figures()[0].to_dict()
    panel = figure["panels"][0]
    assert figure["title"] == f"{NAME}: chi_1 by sigma_w2 and sigma_b2"
    series = panel["series"][0]
    assert series["name"] == "chi_1"
    # z[sigma_b2][sigma_w2]: each cell's mean over its seeds; (1, 0.5) is not finite, a gap
    assert series["z"] == [[pytest.approx(0.625, abs=1e-12), 1.125], [None, 1.5]]
    assert "blank: not finite or not run yet" in panel["note"]
    row = heatmap(summary, "sigma_w2", None, "chi_1", {"sigma_b2": 0.0}).to_dict()
    assert row["panels"][0]["series"][0]["z"] == [[pytest.approx(0.625, abs=1e-12), 1.125]]
    (cells,) = tables(summary)
    assert cells.columns[2:7] == ("final loss", "best loss", "loss at init", "chi_1", "diverged")
    shown = {r[:2]: r[5] for r in cells.rows}
    assert shown["1", "0"] == "0.6250 ± 0.1768" and shown["1", "0.5"] == "-"


def test_the_lab_view_offers_a_declared_value_and_maps_it(store: Path) -> None:
    (listed,) = catalog.list_sweeps(store)
    state = catalog.view_state(store, listed.id, "sigma_w2", "sigma_b2", "chi_1")
    assert state["values"] == ["final", "best", "diverged", "chi_1"]  # no lr: no sensitivity
    assert state["view"]["value"] == "chi_1"
    z = state["figures"][0]["panels"][0]["series"][0]["z"]
    assert z == [[pytest.approx(0.625, abs=1e-12), 1.125], [None, 1.5]]
    with pytest.raises(ViewError, match="'chi_2' not supported, use one of: final, best, "):
        catalog.view_state(store, listed.id, value="chi_2")


def test_cli_value_takes_a_declared_name_and_refuses_another_in_one_line(
    capsys: pytest.CaptureFixture[str], store: Path, tmp_path: Path
) -> None:
    capsys.readouterr()
    args = [*COMMAND, "--store", str(store), "--summary", "--json"]
    assert cli.main([*args, "--value", "chi_1"]) == 0  # every cell stored: nothing runs
    cells = json.loads(capsys.readouterr().out)["cells"]
    assert sorted(c["measured"]["chi_1"] or 0.0 for c in cells) == [0.0, 0.625, 1.125, 1.5]
    fresh = tmp_path / "fresh.sqlite3"
    assert cli.main([*COMMAND, "--store", str(fresh), "--summary", "--value", "chi_2"]) == 2
    out, err = capsys.readouterr()
    allowed = "final, best, diverged, chi_1"  # no lr axis: no sensitivity
    assert (out, err) == (
        "",
        f"normlab: error: value 'chi_2' not supported, use one of: {allowed}\n",
    )
    assert not fresh.exists()  # refused before anything ran
