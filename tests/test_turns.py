"""normlab.turns: cells and widgets' runs take turns at torch's global random state.

In process, with IPython's events played by hand: a cell holds the turn from its
``pre_run_cell`` to its own ``post_run_cell`` (not an empty cell's, not a nested cell's); a
widget's run waits for a turn another thread holds; a cell that waits for its widget, or closes
it, while it holds the turn does not deadlock (the run happens in the cell's thread). A real
kernel's cells and widgets: ``tests/test_widgets.py``'s ``test_seeded_cells_print_...``.
"""

from __future__ import annotations

import threading
from types import SimpleNamespace
from typing import Any

import pytest

import normlab.widgets as widgets
from normlab.experiments import Result, run_experiment
from normlab.turns import TURNS, Cells, Turns

SMALL = {"depth": 3, "width": 4, "batch": 8}  # drift: three layers, milliseconds


def test_a_cell_holds_the_turn_until_its_own_post_run_cell() -> None:
    turns = Turns()
    cells = Cells(turns)
    outer, inner, empty = (SimpleNamespace(raw_cell=c) for c in ("x = 1", "y = 2", ""))
    cells.pre_run_cell(outer)
    assert turns.mine()
    cells.pre_run_cell(inner)  # get_ipython().run_cell(...) inside the cell
    cells.post_run_cell(SimpleNamespace(info=inner))
    assert turns.mine()
    cells.post_run_cell(SimpleNamespace(info=empty))  # IPython fires no pre_run_cell for it
    assert turns.mine()
    cells.post_run_cell(SimpleNamespace(info=outer))
    assert not turns.mine()
    cells.post_run_cell(SimpleNamespace(info=outer))  # nothing to give back: no error
    cells.pre_run_cell(outer)
    cells.post_run_cell(None)  # an interrupted async cell's: no result
    assert not turns.mine()
    took = threading.Event()

    def other() -> None:
        with turns:
            took.set()

    thread = threading.Thread(target=other)
    thread.start()
    thread.join()
    assert took.is_set()  # the turn was given back, so another thread could take it


def test_a_run_waits_for_the_turn_a_cell_holds() -> None:
    TURNS.acquire()  # this thread is a cell that runs
    try:
        w = widgets.Experiment("drift", **SMALL)
        assert w.status == "running"  # its worker waits for the turn: nothing can have run
    finally:
        TURNS.release()
    w.params = {"seed": 3}
    assert w.result.to_dict() == run_experiment("drift", **{**SMALL, "seed": 3}).to_dict()


def test_a_cell_that_waits_for_its_widget_runs_it_itself(monkeypatch: pytest.MonkeyPatch) -> None:
    ran_in: list[threading.Thread] = []
    real = widgets.run_experiment

    def recording(*args: Any, **kwargs: Any) -> Result:
        ran_in.append(threading.current_thread())
        return real(*args, **kwargs)

    monkeypatch.setattr(widgets, "run_experiment", recording)
    with TURNS:  # a cell: the widget's worker cannot run before its end
        w = widgets.Experiment("drift", **SMALL)
        w.params = {"seed": 5}
        assert w.wait(timeout=60)  # without running it here, this would time out
        assert ran_in == [threading.current_thread()]  # the first settings were replaced
        assert w.result.to_dict() == real("drift", **{**SMALL, "seed": 5}).to_dict()
        w.close()  # its worker waits for the turn: close does not wait for it
    assert ran_in == [threading.current_thread()]
