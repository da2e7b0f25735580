"""/sweeps in a real browser: a sweep's heat map drawn, redrawn as its cells arrive, and the
controls that choose what it maps.

The lab runs as ``normlab lab --sweeps STORE`` would serve it; the store is
:mod:`tests.sweep.test_summary`'s hand-made one, two of its cells left pending, and the test
writes them while the page is open, as ``normlab sweep`` in another process would.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from typing import Any

import pytest
from labpage import ROOT, lab_serving, screenshot

from normlab.sweep import Outcome, Store, Sweep, catalog

sys.path.insert(0, str(ROOT))  # the hand-made store of the summary's tests
from tests.sweep.test_summary import CURVES, fill

pytestmark = pytest.mark.browser

PENDING = frozenset({("xavier", 3.0, 0), ("xavier", 3.0, 1)})
Z = """() => { const gd = document.querySelector('.nl-sweep-plot .nl-figure-plot');
  return gd && gd.data ? gd.data[0].z : null; }"""


@pytest.fixture(scope="module")
def sweep(tmp_path_factory: pytest.TempPathFactory) -> Sweep:
    return fill(tmp_path_factory.mktemp("sweeps") / "s.sqlite3", skip=PENDING)


@pytest.fixture(scope="module")
def server(sweep: Sweep, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """This module's lab, reading ``sweep``'s store (the ``page`` fixture opens pages on it)."""
    data = tmp_path_factory.mktemp("d")
    app = "create_app(sweeps_store=sys.argv[1])"
    with lab_serving(app, "/api/sweeps", data, str(sweep.store)) as base:
        yield base


def _store_the_pending_cells(sweep: Sweep) -> None:
    with Store(sweep.store) as s:
        for c in sweep.configs:
            key = (c.params["init"], c.params["lr"], c.params["seed"])
            if key in PENDING:
                s.put(c, Outcome(c.id, {"losses": CURVES[key]}, None, 0.0))


def test_a_sweep_is_drawn_redrawn_as_it_fills_and_its_controls_choose_the_map(
    page: Any, server: str, sweep: Sweep
) -> None:
    page.set_default_timeout(60_000)  # nothing trains: a hang guard
    sweep_id = catalog.list_sweeps(sweep.store)[0].id
    page.goto(f"{server}/sweeps")
    page.click(f'a[href="/sweeps/{sweep_id}"]')
    page.wait_for_function("() => document.querySelector('.nl-sweep')?.dataset.done === '10'")
    root = page.locator(".nl-sweep")
    assert root.get_attribute("data-complete") == "false"
    page.wait_for_function(f"() => ({Z})() !== null")
    assert page.evaluate(Z) == [[0.5, 0.2, None], [1.5, 2.0, None]]  # z[init][lr]: lr 3 pending
    assert page.locator(".nl-sweep-controls select").count() == 3  # x, y, value: nothing to fix

    _store_the_pending_cells(sweep)  # the sweep goes on in "another process"
    page.wait_for_function("() => document.querySelector('.nl-sweep').dataset.complete === 'true'")
    assert root.get_attribute("data-done") == "12"
    assert page.evaluate(Z)[1] == [1.5, 2.0, 0.5]
    assert "12 of 12 cells stored" in page.locator(".nl-sweep-progress").inner_text()

    page.select_option('select[name="value"]', "diverged")
    page.wait_for_function(
        "() => document.querySelector('.nl-sweep').dataset.view.endsWith('|diverged')"
    )
    assert page.evaluate(Z) == [[0.0, 0.0, 1.0], [0.0, 0.5, 0.0]]
    assert "value=diverged" in page.url  # the view is a shareable URL
    page.select_option('select[name="x"]', "init")  # x takes y's axis: the two trade places
    page.wait_for_function(
        "() => document.querySelector('.nl-sweep').dataset.view === 'init|lr|diverged'"
    )
    assert page.evaluate(Z) == [[0.0, 0.0], [0.0, 0.5], [1.0, 0.0]]
    rows = page.locator(".nl-sweep-table tbody tr").count()
    assert rows == 6 + 2  # the cells, then each init's sensitivity
    screenshot(page, "sweep.png", full_page=True)


def test_the_form_starts_a_small_sweep_and_says_the_server_s_refusal(
    page: Any, server: str
) -> None:
    """The form posts its lines as the command line's NAME=SPEC texts: a refused grid shows the
    server's message beside it; a good one opens the sweep's page, which fills to complete."""
    page.set_default_timeout(60_000)  # two tiny runs: a hang guard
    page.goto(f"{server}/sweeps")
    page.select_option('select[name="experiment"]', "chaos-cell")
    page.fill('textarea[name="grid"]', "sigma_w2=0.5,9\ndepth=4")
    page.guard.expect_422()
    page.click('.nl-sweep-form button[type="submit"]')
    problem = page.locator(".nl-sweep-form-error")
    problem.wait_for(state="visible")
    assert "parameter 'sigma_w2': 9.0 is not allowed" in problem.inner_text()
    assert page.url == f"{server}/sweeps"  # refused: the page stays
    screenshot(page.locator(".nl-sweep-form"), "sweep-form.png")

    page.fill('textarea[name="grid"]', "sigma_w2=1,2\n\ndepth=4\nwidth=16\nsteps=2")
    page.click('.nl-sweep-form button[type="submit"]')
    page.wait_for_url(f"{server}/sweeps/*")
    page.wait_for_function("() => document.querySelector('.nl-sweep')?.dataset.complete === 'true'")
    assert "2 of 2 cells stored" in page.locator(".nl-sweep-progress").inner_text()
