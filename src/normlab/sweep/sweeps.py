"""A sweep: a grid over one experiment, run into a store, resumed, read back as a table.

>>> import tempfile, pathlib
>>> store = pathlib.Path(tempfile.mkdtemp()) / "sweeps.sqlite3"
>>> sweep = Sweep("bn-lr", {"lr": "0.5,1", "steps": 2, "width": 4}, store=store)
>>> sweep.run().ran, sweep.run().ran  # the second run finds both stored
(2, 0)
>>> [row["status"] for row in sweep.records()]
['ok', 'ok']

A sweep file (TOML) holds the same as the command line: the experiment, ``seeds`` and a
``[grid]`` table whose values are texts as ``--grid`` takes them, TOML lists of values, or one
value (a fixed setting)::

    experiment = "bn-lr"
    seeds = 3
    [grid]
    lr = "0.1:3:12"
    batch_norm = [true, false]
    init = ["he", "xavier"]
    steps = 50
"""

from __future__ import annotations

import importlib.util
import json
import math
import tomllib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from normlab.sweep.engine import Backend, Outcome, groups_of, in_process
from normlab.sweep.grid import Config, Grid, GridError
from normlab.sweep.store import DEFAULT_STORE, Store

if TYPE_CHECKING:
    import pandas as pd

EXPORTS = (".parquet", ".csv", ".jsonl")
"""What :meth:`Sweep.export` writes, by the file's suffix."""

_FILE_KEYS = ("experiment", "seeds", "grid")

Progress = Callable[[int, int], None]
"""Called as ``progress(done, total)``: configurations stored (before the run included), of all."""


@dataclass(frozen=True)
class RunSummary:
    """What one :meth:`Sweep.run` did."""

    sweep_id: str
    total: int  # configurations in the sweep
    stored_before: int  # found in the store, not run again
    ran: int  # run now
    errors: int  # of those run now, how many raised


class Sweep:
    """A grid over one experiment, its cells validated now, its results in the store at
    ``store``.

    ``grid`` maps parameter names to what ``--grid`` takes (``{"lr": "0.1:3:12", "init":
    ["he", "xavier"], "steps": 50}``), or is a list of ``NAME=SPEC`` texts, or a :class:`Grid`;
    ``seeds`` adds the axis ``seed = 0..seeds-1``. A bad grid raises :class:`GridError` (a
    ``ValueError``) naming the parameter, before anything runs.
    """

    def __init__(
        self,
        experiment: str,
        grid: Mapping[str, Any] | Sequence[str] | Grid = (),
        seeds: int | None = None,
        store: str | Path = DEFAULT_STORE,
    ) -> None:
        if isinstance(grid, Grid):
            if seeds is not None or grid.experiment != experiment:
                raise GridError("grid", f"a Grid of {grid.experiment!r} with its seeds, no others")
            self.grid = grid
        elif isinstance(grid, Mapping):
            self.grid = Grid.from_mapping(experiment, grid, seeds)
        else:  # NAME=SPEC texts (one text alone is one axis, not its characters)
            self.grid = Grid.parse(experiment, [grid] if isinstance(grid, str) else grid, seeds)
        self.experiment = experiment
        self.configs: list[Config] = self.grid.configs()
        self.store = Path(store)

    @classmethod
    def from_file(
        cls,
        path: str | Path,
        store: str | Path = DEFAULT_STORE,
        grid: Mapping[str, Any] | None = None,
        seeds: int | None = None,
        experiment: str | None = None,
    ) -> Sweep:
        """The sweep a TOML file describes; ``grid`` axes and ``seeds`` given here replace the
        file's, ``experiment`` must agree with it."""
        data = load_file(path)
        named = data.get("experiment")
        if experiment is not None and named is not None and named != experiment:
            raise GridError(
                "experiment", f"{path}: the file sweeps {named!r}, the command {experiment!r}"
            )
        name = experiment or named
        if not isinstance(name, str):
            raise GridError("experiment", f'{path}: name the experiment (experiment = "NAME")')
        axes = {**data.get("grid", {}), **(grid or {})}
        return cls(name, axes, seeds if seeds is not None else data.get("seeds"), store)

    def spec(self) -> dict[str, Any]:
        """The grid as written (the store's record of the sweep)."""
        return self.grid.spec()

    def run(
        self,
        progress: Progress | None = None,
        retry_errors: bool = False,
        backend: Backend | None = None,
    ) -> RunSummary:
        """Run the configurations the store lacks (and those that raised, when
        ``retry_errors``), storing each outcome as it arrives; ``backend`` runs the groups
        (default :func:`~normlab.sweep.engine.in_process`)."""
        ids = [c.id for c in self.configs]
        known = set(ids)
        with Store(self.store) as store:
            sweep_id = store.add_sweep(self.experiment, self.spec(), ids)
            done = store.finished(ids, retry_errors)
            todo = {c.id: c for c in self.configs if c.id not in done}
            stored, errors = len(self.configs) - len(todo), 0
            if progress is not None:
                progress(stored, len(self.configs))
            for outcome in (backend or in_process)(groups_of(list(todo.values()))):
                config = todo.pop(outcome.config_id, None)
                if config is None:
                    _check_known(outcome, known)
                    continue  # a second outcome for a config (a retried task): stored once
                store.put(config, outcome)
                stored, errors = stored + 1, errors + (outcome.error is not None)
                if progress is not None:
                    progress(stored, len(self.configs))
        ran = len(self.configs) - len(done) - len(todo)
        return RunSummary(sweep_id, len(self.configs), len(done), ran, errors)

    def records(self) -> list[dict[str, Any]]:
        """One JSON-ready dict per configuration, in grid order: id, experiment, params,
        status (``ok``, ``error``, or ``pending`` when not stored), result, error, seconds,
        finished."""
        with Store(self.store) as store:
            rows = store.rows(c.id for c in self.configs)
        out = []
        for c in self.configs:
            row = rows.get(c.id)
            record: dict[str, Any] = {"id": c.id, "experiment": c.experiment}
            record["params"] = dict(c.params)
            if row is None:
                record.update(status="pending", result=None, error=None)
                record.update(seconds=None, finished=None)
            else:
                record.update(status=row.status, result=row.result, error=row.error)
                record.update(seconds=row.seconds, finished=row.finished)
            out.append(record)
        return out

    def table(self) -> list[dict[str, Any]]:
        """:meth:`records` flattened, one flat dict per configuration: ``id``, each parameter,
        ``status``, the result's key numbers (see :func:`key_numbers`), ``seconds``,
        ``error``."""
        out = []
        for r in self.records():
            numbers = key_numbers(r["result"], set(r["params"]))
            head = {"id": r["id"], **r["params"], "status": r["status"]}
            out.append({**head, **numbers, "seconds": r["seconds"], "error": r["error"]})
        return out

    def frame(self) -> pd.DataFrame:
        """:meth:`table` as a pandas DataFrame (pandas: ``pip install normlab[sweep]``)."""
        import pandas as pd

        rows = self.table()
        columns: dict[str, None] = {}
        for row in rows:
            columns.update(dict.fromkeys(row))
        return pd.DataFrame(rows, columns=list(columns))

    def export(self, path: str | Path) -> Path:
        """Write the results to ``path``, by its suffix: ``.parquet`` or ``.csv`` (the
        :meth:`frame`), ``.jsonl`` (the whole :meth:`records`, a JSON object a line)."""
        target = Path(path)
        suffix = check_export(target)
        if suffix == ".jsonl":
            lines = [json.dumps(r) + "\n" for r in self.records()]
            target.write_text("".join(lines))
        elif suffix == ".csv":
            self.frame().to_csv(target, index=False)
        else:
            self.frame().to_parquet(target, index=False)
        return target


def run_sweep(
    experiment: str,
    grid: Mapping[str, Any] | Sequence[str] | Grid = (),
    seeds: int | None = None,
    store: str | Path = DEFAULT_STORE,
    progress: Progress | None = None,
    retry_errors: bool = False,
    backend: Backend | None = None,
) -> Sweep:
    """Build the :class:`Sweep` and run it (see :meth:`Sweep.run`); returns the sweep."""
    sweep = Sweep(experiment, grid, seeds, store)
    sweep.run(progress, retry_errors, backend)
    return sweep


def load_file(path: str | Path) -> dict[str, Any]:
    """A sweep file's TOML, its keys checked (``experiment``, ``seeds``, ``[grid]``)."""
    try:
        data = tomllib.loads(Path(path).read_text())
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise GridError("file", f"sweep file {str(path)!r}: {exc}") from None
    unknown = [k for k in data if k not in _FILE_KEYS]
    if unknown:
        raise GridError(
            unknown[0], f"sweep file {str(path)!r}: unknown key {unknown[0]!r}, use {_FILE_KEYS}"
        )
    if not isinstance(data.get("grid", {}), dict):
        raise GridError("grid", f"sweep file {str(path)!r}: grid must be a table ([grid])")
    return data


def check_export(path: Path) -> str:
    """``path``'s suffix when :meth:`Sweep.export` can write it, else a :class:`GridError`."""
    suffix = path.suffix.lower()
    if suffix not in EXPORTS:
        shown = suffix or "(none)"
        raise GridError("export", f"--export {str(path)!r}: suffix {shown!r}, use one of {EXPORTS}")
    if not path.parent.is_dir():
        raise GridError("export", f"--export {str(path)!r}: folder {str(path.parent)!r} is missing")
    needs = {".csv": ("pandas",), ".parquet": ("pandas", "pyarrow")}.get(suffix, ())
    missing = [name for name in needs if importlib.util.find_spec(name) is None]
    if missing:
        words = " and ".join(missing)
        raise GridError("export", f"--export {suffix} needs {words}: pip install 'normlab[sweep]'")
    return suffix


def key_numbers(result: Mapping[str, Any] | None, params: set[str]) -> dict[str, Any]:
    """A result's key numbers, for a table: each top-level number, bool or text (those that
    repeat a parameter left out), and of each list of numbers (a loss curve) its last value and
    its smallest finite one, as ``NAME_last`` and ``NAME_min``. A diverged value is None."""
    out: dict[str, Any] = {}
    for name, value in (result or {}).items():
        if name in ("experiment", "params") or name in params:
            continue
        if value is None or isinstance(value, bool | int | float | str):
            out[name] = value
        elif _numbers(value):
            finite = [v for v in value if v is not None and math.isfinite(v)]
            out[f"{name}_last"] = value[-1]
            out[f"{name}_min"] = min(finite) if finite else None
    return out


def _numbers(value: object) -> bool:
    return (
        isinstance(value, list)
        and bool(value)
        and all(
            v is None or (isinstance(v, int | float) and not isinstance(v, bool)) for v in value
        )
    )


def _check_known(outcome: Outcome, ids: set[str]) -> None:
    if outcome.config_id not in ids:
        raise RuntimeError(f"the backend answered {outcome.config_id!r}, no config of this sweep")
