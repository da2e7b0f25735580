"""The sweep store: one SQLite file, one row per configuration id, each result written once.

Two tables. ``results``: a row per configuration that ran (id, experiment, params JSON,
status ``ok`` or ``error``, result JSON, error text, seconds, finished time), keyed by the
configuration's id (:func:`normlab.sweep.grid.config_id`). ``sweeps``: a row per sweep (its
experiment, its grid as written, its configuration ids), so that a later view can list them.

Nothing is lost and nothing is stored twice:

- each outcome is committed as soon as it arrives (:meth:`Store.put`), so a killed driver loses
  at most what was running;
- the insert cannot duplicate: the id is the primary key, and a second outcome for an id only
  replaces a stored *error* (a retry), never a stored result;
- the file is in WAL mode (readers, such as a live view, do not block the writer) with SQLite's
  default ``synchronous=FULL``: a commit survives a killed process and a power cut;
- a restart asks :meth:`Store.finished` which ids are done and runs the others.
"""

from __future__ import annotations

import datetime
import hashlib
import json
import sqlite3
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from normlab.storage import enter_wal
from normlab.sweep.engine import Outcome
from normlab.sweep.grid import Config

DEFAULT_STORE = "normlab-sweeps.sqlite3"
"""The store's file when none is named: in the working folder, beside the work it records."""

BUSY_TIMEOUT_S = 30.0
"""How long a write waits for another process's (or a new file's switch to WAL)."""

_SCHEMA = """
CREATE TABLE IF NOT EXISTS results (
    id TEXT PRIMARY KEY,
    experiment TEXT NOT NULL,
    params TEXT NOT NULL,
    status TEXT NOT NULL CHECK (status IN ('ok', 'error')),
    result TEXT,
    error TEXT,
    seconds REAL NOT NULL,
    finished TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS sweeps (
    id TEXT PRIMARY KEY,
    experiment TEXT NOT NULL,
    spec TEXT NOT NULL,
    config_ids TEXT NOT NULL,
    created TEXT NOT NULL
);
"""

_PUT = """
INSERT INTO results (id, experiment, params, status, result, error, seconds, finished)
VALUES (?, ?, ?, ?, ?, ?, ?, ?)
ON CONFLICT (id) DO UPDATE SET
    status = excluded.status, result = excluded.result, error = excluded.error,
    seconds = excluded.seconds, finished = excluded.finished
WHERE results.status = 'error'
"""
"""A result is written once: a second outcome for the same id replaces only an error."""

_CHUNK = 500
"""Ids per ``IN (...)`` query (SQLite allows 32766 variables; smaller keeps each query short)."""


class StoreError(ValueError):
    """A store file that cannot be opened or is not a sweep store."""


@dataclass(frozen=True)
class Row:
    """One stored configuration."""

    id: str
    experiment: str
    params: dict[str, Any]
    status: str  # "ok" or "error"
    result: dict[str, Any] | None
    error: str | None
    seconds: float
    finished: str  # ISO 8601, UTC


@dataclass(frozen=True)
class SweepRecord:
    """One sweep as the ``sweeps`` table names it."""

    id: str
    experiment: str
    spec: dict[str, Any]
    config_ids: list[str]
    created: str


class Store:
    """The SQLite store at ``path`` (created when missing). Use it as a context manager, or
    :meth:`close` it."""

    def __init__(self, path: str | Path = DEFAULT_STORE) -> None:
        self.path = Path(path)
        try:
            self._db = sqlite3.connect(self.path, timeout=BUSY_TIMEOUT_S, isolation_level=None)
            enter_wal(self._db, BUSY_TIMEOUT_S)
            self._db.executescript(_SCHEMA)
            columns = [r[1] for r in self._db.execute("PRAGMA table_info(results)")]
        except sqlite3.Error as exc:
            raise StoreError(f"store {str(self.path)!r}: {exc}") from None
        if columns != list(Row.__dataclass_fields__):
            self._db.close()
            raise StoreError(f"store {str(self.path)!r}: its results table is not a sweep store's")

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._db.close()

    def add_sweep(self, experiment: str, spec: Mapping[str, Any], ids: Sequence[str]) -> str:
        """Record a sweep (once: the same experiment, grid and ids give the same sweep id)."""
        text = json.dumps(spec, sort_keys=True)
        ids_text = json.dumps(list(ids))
        sweep_id = hashlib.sha256(f"{experiment}\n{text}\n{ids_text}".encode()).hexdigest()[:16]
        with self._db:
            self._db.execute(
                "INSERT INTO sweeps VALUES (?, ?, ?, ?, ?) ON CONFLICT (id) DO NOTHING",
                (sweep_id, experiment, text, ids_text, _now()),
            )
        return sweep_id

    def sweeps(self) -> list[SweepRecord]:
        """Every recorded sweep, oldest first."""
        rows = self._db.execute("SELECT * FROM sweeps ORDER BY created, rowid").fetchall()
        return [SweepRecord(r[0], r[1], json.loads(r[2]), json.loads(r[3]), r[4]) for r in rows]

    def put(self, config: Config, outcome: Outcome) -> None:
        """Store ``config``'s outcome, committed at once (see :data:`_PUT`)."""
        if outcome.config_id != config.id:
            raise ValueError(f"outcome of {outcome.config_id!r} stored as {config.id!r}")
        status = "ok" if outcome.error is None else "error"
        result = None if outcome.result is None else json.dumps(outcome.result)
        values = (config.id, config.experiment, json.dumps(dict(config.params)), status)
        with self._db:  # one transaction, committed on leaving
            self._db.execute(_PUT, (*values, result, outcome.error, outcome.seconds, _now()))

    def finished(self, ids: Iterable[str], retry_errors: bool = False) -> set[str]:
        """The ids among ``ids`` that need not run: stored ``ok``, and stored ``error`` unless
        ``retry_errors``."""
        status = "status = 'ok'" if retry_errors else "1"
        found: set[str] = set()
        for chunk in _chunks(list(ids)):
            marks = ",".join("?" * len(chunk))
            query = f"SELECT id FROM results WHERE {status} AND id IN ({marks})"
            found.update(r[0] for r in self._db.execute(query, chunk))
        return found

    def rows(self, ids: Iterable[str]) -> dict[str, Row]:
        """The stored rows among ``ids``, by id."""
        out: dict[str, Row] = {}
        for chunk in _chunks(list(ids)):
            marks = ",".join("?" * len(chunk))
            query = f"SELECT * FROM results WHERE id IN ({marks})"
            for r in self._db.execute(query, chunk):
                result = None if r[4] is None else json.loads(r[4])
                out[r[0]] = Row(r[0], r[1], json.loads(r[2]), r[3], result, r[5], r[6], r[7])
        return out

    def count(self) -> int:
        """How many configurations are stored."""
        row = self._db.execute("SELECT count(*) FROM results").fetchone()
        return int(row[0])


def _chunks(ids: list[str]) -> Iterator[list[str]]:
    for start in range(0, len(ids), _CHUNK):
        yield ids[start : start + _CHUNK]


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).isoformat(timespec="milliseconds")
