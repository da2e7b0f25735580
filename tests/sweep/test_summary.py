"""A sweep's summary against a tiny store whose every number is computed by hand here.

The store holds ``bn-lr`` cells (``lr`` 0.1, 1, 3 x ``init`` he, xavier x 2 seeds) whose results
are written by the test: loss curves chosen so that each rule shows (a mean and its spread, a
seed that blows up to ``nan``, a seed that ends above where it started, a setting where no rate
trains). Nothing trains here: every test reads the store through the public API, as
``normlab sweep --summary`` and the lab do. The expected numbers are sums of a few decimals:
compared to 1e-12 (float64 arithmetic on them, no float32 anywhere).
"""

from __future__ import annotations

import math
import statistics
from pathlib import Path

import pytest

from normlab.sweep import Outcome, Store, Sweep, catalog
from normlab.sweep.summary import Cell, lr_sensitivity, run_numbers, summarize, summarize_sweep
from normlab.sweep.views import ViewError, heatmap, tables, view

NAN = None  # a non-finite loss, as the stored JSON holds it
CURVES = {
    # (init, lr, seed): the loss at every step, the loss at initialization first
    ("he", 0.1, 0): [1.0, 0.8, 0.6],
    ("he", 0.1, 1): [1.0, 0.7, 0.4],
    ("he", 1.0, 0): [1.0, 0.2, 0.3],
    ("he", 1.0, 1): [1.0, 0.3, 0.1],
    ("he", 3.0, 0): [1.0, 5.0, NAN],  # blows up
    ("he", 3.0, 1): [1.0, 0.9, 1.2],  # ends above its start
    ("xavier", 0.1, 0): [2.0, 1.5],
    ("xavier", 0.1, 1): [2.0, 1.5],
    ("xavier", 1.0, 0): [2.0, 1.0],
    ("xavier", 1.0, 1): [2.0, 3.0],  # ends above its start
    ("xavier", 3.0, 0): [2.0, 0.5],
    ("xavier", 3.0, 1): [2.0, 0.5],
}
GRID = {"lr": "0.1,1,3", "init": "he,xavier", "steps": 2, "width": 2}
HE_SENSITIVITY = ((0.5 - 0.2) + (0.2 - 0.2) + (1.0 - 0.2)) / 3  # lr 3 diverged: counts as 1.0
XAVIER_SENSITIVITY = ((1.5 - 0.5) + (2.0 - 0.5) + (0.5 - 0.5)) / 3


def fill(store: Path, skip: frozenset[tuple[str, float, int]] = frozenset()) -> Sweep:
    """The sweep of :data:`GRID`, its results the :data:`CURVES` (those in ``skip`` left
    pending), stored as ``Sweep.run`` would (the sweep recorded, one row per config)."""
    sweep = Sweep("bn-lr", GRID, seeds=2, store=store)
    with Store(store) as s:
        s.add_sweep(sweep.experiment, sweep.spec(), [c.id for c in sweep.configs])
        for c in sweep.configs:
            key = (c.params["init"], c.params["lr"], c.params["seed"])
            if key not in skip:
                result = {"losses": CURVES[key], "contrast_losses": [0.0]}
                s.put(c, Outcome(c.id, result, None, 0.0))
    return sweep


@pytest.fixture(scope="module")
def sweep(tmp_path_factory: pytest.TempPathFactory) -> Sweep:
    return fill(tmp_path_factory.mktemp("summary") / "s.sqlite3")


def cell(summary_cells: tuple[Cell, ...], init: str, lr: float) -> Cell:
    return next(c for c in summary_cells if c.values == {"lr": lr, "init": init})


def test_a_run_s_numbers_and_the_diverged_rule() -> None:
    fine = run_numbers([1.0, 0.2, 0.3])
    assert (fine.loss0, fine.final, fine.best, fine.diverged) == (1.0, 0.3, 0.2, False)
    blown = run_numbers([1.0, 5.0, None])
    assert (blown.final, blown.best, blown.diverged) == (math.inf, 1.0, True)
    worse = run_numbers([1.0, 0.9, 1.2])  # finite, but ends above where it started
    assert (worse.final, worse.best, worse.diverged) == (1.2, 0.9, True)
    assert not run_numbers([1.0]).diverged  # one step: final == loss0, not above it
    with pytest.raises(ValueError, match="loss curve: empty"):
        run_numbers([])


def test_cells_are_means_over_seeds_with_their_spread(sweep: Sweep) -> None:
    s = summarize_sweep(sweep)
    assert s.axis_names == ("lr", "init") and s.seeds == 2 and len(s.cells) == 6
    he = cell(s.cells, "he", 0.1)
    assert he.runs == 2 and he.loss0 == 1.0
    assert he.final == pytest.approx(0.5, abs=1e-12)
    assert he.final_std == pytest.approx(statistics.stdev([0.6, 0.4]), abs=1e-12)
    assert he.best == pytest.approx(0.5, abs=1e-12) and he.trainable
    he1 = cell(s.cells, "he", 1.0)
    assert (he1.final, he1.best) == (pytest.approx(0.2, abs=1e-12), pytest.approx(0.15, abs=1e-12))
    he3 = cell(s.cells, "he", 3.0)  # one seed blew up: the mean is not finite, not averaged away
    assert he3.final == math.inf and he3.final_std is None and he3.diverged == 1.0
    assert he3.best == pytest.approx((1.0 + 0.9) / 2, abs=1e-12) and he3.trainable is False
    assert he3.to_dict()["final"] is None  # JSON has no inf
    xa1 = cell(s.cells, "xavier", 1.0)
    assert xa1.diverged == 0.5 and xa1.final == pytest.approx(2.0, abs=1e-12)
    assert xa1.final_std == pytest.approx(math.sqrt(2), abs=1e-12)


def test_the_learning_rate_sensitivity_is_wortsman_s_formula(sweep: Sweep) -> None:
    by_init = {s.values["init"]: s.value for s in summarize_sweep(sweep).sensitivity()}
    assert by_init["he"] == pytest.approx(HE_SENSITIVITY, abs=1e-12)
    assert by_init["xavier"] == pytest.approx(XAVIER_SENSITIVITY, abs=1e-12)


def test_sensitivity_is_zero_when_no_rate_trains_and_none_while_a_rate_is_pending() -> None:
    def c(final: float | None, runs: int = 1) -> Cell:
        loss0 = None if final is None else 1.0
        return Cell({}, runs, 1 - runs, 0, loss0, final, None, final, None, 0.0)

    assert lr_sensitivity([c(1.5), c(math.inf), c(1.0)]) == 0.0  # all capped at loss0
    assert lr_sensitivity([c(0.25), c(0.75)]) == pytest.approx(0.25, abs=1e-12)  # (0 + .5) / 2
    assert lr_sensitivity([c(0.25), c(None, runs=0)]) is None


def test_the_catalog_reads_the_same_summary_from_the_store_alone(sweep: Sweep) -> None:
    listed = catalog.list_sweeps(sweep.store)
    assert [(x.experiment, x.total, x.done) for x in listed] == [("bn-lr", 12, 12)]
    from_store = catalog.load(sweep.store, listed[0].id)
    assert set(from_store.axis_names) == {"lr", "init"}  # the record keeps names, sorted
    assert {tuple(sorted(c.values.items())): c.to_dict() for c in from_store.cells} == {
        tuple(sorted(c.values.items())): c.to_dict() for c in summarize_sweep(sweep).cells
    }
    with pytest.raises(catalog.TooLarge, match="12 configurations, a view reads at most 11"):
        catalog.load(sweep.store, listed[0].id, max_cells=11)
    with pytest.raises(catalog.UnknownSweep, match="'nope': not in the store"):
        catalog.load(sweep.store, "nope")


def test_a_pending_seed_leaves_the_cell_on_the_stored_one(tmp_path: Path) -> None:
    partial = fill(tmp_path / "p.sqlite3", skip=frozenset({("xavier", 1.0, 1)}))
    s = summarize_sweep(partial)
    xa1 = cell(s.cells, "xavier", 1.0)
    assert (xa1.runs, xa1.pending, xa1.final, xa1.diverged) == (1, 1, 1.0, 0.0)
    assert catalog.list_sweeps(partial.store)[0].done == 11


def test_heat_maps_of_two_axes_one_fixed_or_averaged(sweep: Sweep) -> None:
    s = summarize_sweep(sweep)
    final = heatmap(s, "lr", "init", "final").to_dict()
    panel = final["panels"][0]
    assert panel["x"]["tick_labels"] == ["0.1", "1", "3"]
    assert panel["y"]["tick_labels"] == ["he", "xavier"]
    z = panel["series"][0]["z"]  # z[init][lr]; he at lr 3 diverged: a gap
    assert z == [[pytest.approx(0.5), pytest.approx(0.2), None], [1.5, 2.0, 0.5]]
    assert "mean over 2 seeds" in panel["note"]
    diverged = heatmap(s, "init", "lr", "diverged").to_dict()["panels"][0]["series"][0]
    assert diverged["z"] == [[0.0, 0.0], [0.0, 0.5], [1.0, 0.0]] and diverged["zlimits"] == [0, 1]
    averaged = heatmap(s, "lr", None, "best").to_dict()["panels"][0]  # one row, over init
    he3_best = (1.0 + 0.9) / 2
    expected = [(0.5 + 1.5) / 2, (0.15 + (1.0 + 2.0) / 2) / 2, (he3_best + 0.5) / 2]
    assert averaged["series"][0]["z"] == [[pytest.approx(v, abs=1e-12) for v in expected]]
    assert "mean over init (2)" in averaged["note"]
    fixed = view(s, "lr", None, "final", ["init=xavier"]).figures()[0].to_dict()
    assert fixed["panels"][0]["series"][0]["z"] == [[1.5, 2.0, 0.5]]
    sens = view(s, value="sensitivity").figures()[0].to_dict()["panels"][0]
    assert sens["x"]["label"] == "init"
    got = sens["series"][0]["z"][0]
    assert got == [pytest.approx(HE_SENSITIVITY), pytest.approx(XAVIER_SENSITIVITY)]


def test_the_tables_show_each_cell_s_mean_and_spread(sweep: Sweep) -> None:
    cells, sens = tables(summarize_sweep(sweep))
    assert cells.columns[:3] == ("lr", "init", "final loss")
    rows = {row[:2]: row[2:] for row in cells.rows}
    assert rows["0.1", "he"] == ("0.5000 ± 0.1414", "0.5000 ± 0.1414", "1.0000", "0/2", "2 done")
    assert rows["3", "he"] == ("-", "0.9500 ± 0.0707", "1.0000", "2/2", "2 done")
    assert sens.rows == [("he", f"{HE_SENSITIVITY:.4f}"), ("xavier", f"{XAVIER_SENSITIVITY:.4f}")]


@pytest.mark.parametrize(
    ("options", "words"),
    [
        ({"x": "width"}, "x 'width': not an axis to map, use one of: lr, init"),
        ({"x": "lr", "y": "lr"}, "y 'lr': the same axis as x"),
        ({"value": "mean"}, "value 'mean' not supported, use one of"),
        ({"value": "sensitivity", "x": "lr"}, "x 'lr': not an axis to map, use one of: init"),
        ({"fixed": ["init=nope"]}, "fix 'init=nope': init is one of: he, xavier"),
        ({"fixed": ["lr"]}, "fix 'lr': write NAME=VALUE, NAME one of: lr"),
    ],
)
def test_a_bad_view_names_the_option_and_what_is_allowed(
    sweep: Sweep, options: dict[str, object], words: str
) -> None:
    with pytest.raises(ViewError, match="^" + words.replace("(", r"\(")):
        view(summarize_sweep(sweep), **options)  # type: ignore[arg-type]


def test_an_experiment_without_a_loss_curve_is_refused_by_name() -> None:
    with pytest.raises(ValueError, match="'drift': its result has no loss curve 'losses'"):
        summarize("drift", [("depth", (2, 3))], [])


def test_the_list_shows_the_newest_sweeps_first_up_to_its_limit(tmp_path: Path) -> None:
    older = fill(tmp_path / "two.sqlite3")
    with Store(older.store) as s:
        newer = s.add_sweep("bn-lr", {"lr": "0.1"}, [older.configs[0].id])
    assert [x.id for x in catalog.list_sweeps(older.store, limit=1)] == [newer]
    assert [x.total for x in catalog.list_sweeps(older.store)] == [1, 12]


def test_a_view_maps_the_axes_with_the_most_values_unless_told() -> None:
    """Without ``x`` and ``y`` a view maps the learning rate first, then the axes with the most
    values, whatever order the record lists them in (the lab's lists them by name)."""
    result = {"losses": [1.0], "chi_1": 1.0, "chi_1_theory": 1.0}
    records = [
        {"params": {"sigma_b2": b, "sigma_w2": w}, "status": "ok", "result": result}
        for b in (0.0, 0.1)
        for w in (0.5, 1.0, 2.0)
    ]
    s = summarize("chaos-cell", [("sigma_b2", (0.0, 0.1)), ("sigma_w2", (0.5, 1.0, 2.0))], records)
    chosen = view(s)
    assert (chosen.x, chosen.y) == ("sigma_w2", "sigma_b2")
    assert (view(s, x="sigma_b2").x, view(s, x="sigma_b2").y) == ("sigma_b2", "sigma_w2")
    with_lr = summarize("bn-lr", [("init", ("he", "xavier", "small")), ("lr", (0.1, 1.0))], [])
    assert (view(with_lr).x, view(with_lr).y) == ("lr", "init")
