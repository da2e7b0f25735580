"""The sweeps a store holds, read back for a view (the lab's ``/sweeps``), without running any.

A view only reads: a store file that does not exist is an empty list (nothing is created), and
a sweep is rebuilt from its record (its experiment, its grid as written, its configuration ids).
The record keeps the grid's axes by name, not in the order the ids were made, so each id's
parameters are found by building the grid's cells again (the same ids, in another order);
an id that the current code no longer makes (its version changed) takes the parameters its
stored row holds, and one neither finds is left out (it would never be run again as it is).

Each read is bounded: a sweep of more than ``max_cells`` configurations is refused
(:class:`TooLarge`): the command line summarizes any size (``normlab sweep ... --plot``).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from normlab.experiments import get_experiment
from normlab.sweep.grid import SEED, Grid
from normlab.sweep.store import Store, SweepRecord
from normlab.sweep.summary import LR_AXIS, SweepSummary, summarize
from normlab.sweep.sweeps import Sweep
from normlab.sweep.views import text, view

MAX_VIEW_CELLS = 2000
"""The most configurations one view reads (each result is a JSON text of a few kB: 2000 of
them parse in a fraction of a second); larger sweeps are the command line's."""


MAX_LISTED = 50
"""The most sweeps a list shows (the newest): each costs a count of its stored cells."""


class UnknownSweep(LookupError):
    """No sweep of that id in the store."""


class TooLarge(ValueError):
    """A sweep with more configurations than a view reads."""


class StaleSweep(ValueError):
    """A recorded sweep the current registry cannot rebuild (its experiment is gone, or a
    value of its grid is no longer allowed)."""


@dataclass(frozen=True)
class Listed:
    """One sweep of a store, with how far it has run."""

    id: str
    experiment: str
    spec: dict[str, Any]
    created: str
    total: int
    done: int  # stored with a result or an error

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "experiment": self.experiment,
            "spec": self.spec,
            "created": self.created,
            "total": self.total,
            "done": self.done,
        }


def list_sweeps(path: str | Path, limit: int = MAX_LISTED) -> list[Listed]:
    """The ``limit`` newest sweeps recorded in the store at ``path``, newest first (``[]`` when
    there is no file). Raises :class:`~normlab.sweep.store.StoreError` for a file that is no
    sweep store."""
    if not Path(path).is_file():
        return []
    with Store(path) as store:
        records = store.sweeps()[::-1][:limit]
        return [
            Listed(r.id, r.experiment, r.spec, r.created, len(r.config_ids), _done(store, r))
            for r in records
        ]


def load(path: str | Path, sweep_id: str, max_cells: int | None = None) -> SweepSummary:
    """The summary of sweep ``sweep_id`` as the store at ``path`` holds it now (at most
    ``max_cells`` configurations, default :data:`MAX_VIEW_CELLS`).

    Raises:
        UnknownSweep: no such sweep (or no store file).
        TooLarge: the sweep has more than ``max_cells`` configurations.
        StaleSweep: its experiment or its grid no longer fits the registry.
        ValueError: a stored result without the experiment's loss curve.
    """
    record = _record(path, sweep_id)
    max_cells = MAX_VIEW_CELLS if max_cells is None else max_cells
    if len(record.config_ids) > max_cells:
        raise TooLarge(
            f"sweep {sweep_id!r} has {len(record.config_ids)} configurations, a view reads at "
            f"most {max_cells}: summarize it with normlab sweep ... --plot FILE.png"
        )
    sweep = _sweep_of(record)
    params = {c.id: dict(c.params) for c in sweep.configs}
    with Store(path) as store:
        rows = store.rows(record.config_ids)
    records = []
    for cid in record.config_ids:
        row = rows.get(cid)
        found = params.get(cid, row.params if row is not None else None)
        if found is None:
            continue  # made by other code and never stored: nothing to show
        status = "pending" if row is None else row.status
        result = None if row is None else row.result
        records.append({"params": found, "status": status, "result": result})
    axes = [(a.name, a.values) for a in sweep.grid.axes]
    return summarize(record.experiment, axes, records)


def _record(path: str | Path, sweep_id: str) -> SweepRecord:
    if Path(path).is_file():
        with Store(path) as store:
            for record in store.sweeps():
                if record.id == sweep_id:
                    return record
    raise UnknownSweep(f"sweep {sweep_id!r}: not in the store {str(path)!r}")


def _sweep_of(record: SweepRecord) -> Sweep:
    """The sweep the record describes (its grid as written: ``--grid`` texts, or JSON for the
    values a sweep file gave as TOML lists and numbers)."""
    spec = dict(record.spec)
    seeds = None
    seed_text = str(spec.get(SEED, ""))
    if seed_text.startswith("--seeds "):
        seeds = int(seed_text.split()[1])
        del spec[SEED]
    try:
        axes = {k: _value(v) for k, v in spec.items()}
        return Sweep(record.experiment, Grid.from_mapping(record.experiment, axes, seeds))
    except ValueError as exc:  # GridError, UnknownExperiment: the code has changed since
        raise StaleSweep(f"sweep {record.id!r} cannot be shown by this version: {exc}") from None


def _value(text: str) -> Any:
    """A stored axis spec: JSON (a list, a number, a bool) as a sweep file gave it, else the
    command line's text (``he,xavier`` is no JSON)."""
    try:
        value = json.loads(text)
    except json.JSONDecodeError:
        return text
    return value if isinstance(value, list | bool | int | float) else text


def _done(store: Store, record: SweepRecord) -> int:
    return len(store.finished(record.config_ids))


def view_state(
    path: str | Path,
    sweep_id: str,
    x: str | None = None,
    y: str | None = None,
    value: str = "final",
    fixed: Sequence[str] = (),
) -> dict[str, Any]:
    """What a view shows of one sweep now, JSON-ready: its record, how far it has run, its
    axes (names, the registry's help, the values as texts), the axis the sensitivity is taken
    over (``lr_axis``: no map of the sensitivity uses it), the view chosen (``x``, ``y``,
    ``value``, ``fixed``: see :func:`normlab.sweep.views.view`) with the values it may show
    (``values``: the built-in ones, then those the experiment declares), and its figures and
    tables described as data. Raises as :func:`load` and
    :class:`~normlab.sweep.views.ViewError`."""
    summary = load(path, sweep_id)
    chosen = view(summary, x, y, value, fixed)
    declared = {p.name: p for p in get_experiment(summary.experiment).parameters}
    runs = sum(c.runs for c in summary.cells)
    pending = sum(c.pending for c in summary.cells)
    errors = sum(c.errors for c in summary.cells)
    return {
        "id": sweep_id,
        "experiment": summary.experiment,
        "seeds": summary.seeds,
        "total": runs + pending + errors,
        "done": runs + errors,
        "errors": errors,
        "complete": pending == 0,
        "axes": [
            {"name": n, "help": declared[n].help, "values": [text(v) for v in vs]}
            for n, vs in summary.axes
        ],
        "values": list(summary.value_names),  # built-in, then the experiment's sweep_values
        "lr_axis": LR_AXIS,
        "view": {
            "x": chosen.x,
            "y": chosen.y,
            "value": chosen.value,
            "fixed": {k: text(v) for k, v in chosen.fixed.items()},
        },
        "figures": [f.to_dict() for f in chosen.figures()],
        "tables": [t.to_dict() for t in chosen.tables()],
    }
