"""The store: one row per configuration id, a result written once, an error replaced only by a
retry; and a sweep run on it: resumed, read back as records, a frame and exported files."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from normlab.sweep import engine, sweeps
from normlab.sweep.engine import Group, Outcome, in_process
from normlab.sweep.grid import Grid
from normlab.sweep.store import Store, StoreError
from normlab.sweep.sweeps import Sweep

TINY = {"steps": 2, "width": 2, "hidden_layers": 1}
GRID = {**TINY, "lr": "0.5,1", "batch_norm": [True, False]}


@pytest.fixture(scope="module")
def done(tmp_path_factory: pytest.TempPathFactory) -> Sweep:
    """A finished sweep of 8 tiny cells (read only)."""
    sweep = Sweep("bn-lr", GRID, seeds=2, store=tmp_path_factory.mktemp("done") / "s.sqlite3")
    sweep.run()
    return sweep


def rows(path: Path) -> list[tuple[Any, ...]]:
    with sqlite3.connect(path) as db:
        return db.execute("SELECT id, status, result, error FROM results ORDER BY id").fetchall()


def test_the_store_is_wal_and_holds_one_row_per_config(done: Sweep) -> None:
    with sqlite3.connect(done.store) as db:
        assert db.execute("PRAGMA journal_mode").fetchone() == ("wal",)
    assert sorted(r[0] for r in rows(done.store)) == sorted(c.id for c in done.configs)
    with Store(done.store) as store:
        [record] = store.sweeps()
    assert record.experiment == "bn-lr" and record.config_ids == [c.id for c in done.configs]
    assert record.spec == {
        **{"steps": "2", "width": "2", "hidden_layers": "1"},
        **{"lr": "0.5,1", "batch_norm": "[true,false]", "seed": "--seeds 2"},
    }


def test_a_result_is_stored_once_and_an_error_only_replaced(tmp_path: Path) -> None:
    [config] = Grid.parse("bn-lr", ["steps=1"]).configs()
    first = Outcome(config.id, {"loss": 1.0}, None, 0.5)
    with Store(tmp_path / "s.sqlite3") as store:
        store.put(config, Outcome(config.id, None, "Traceback: boom", 0.1))
        assert rows(store.path) == [(config.id, "error", None, "Traceback: boom")]
        store.put(config, first)  # a retry replaces the error
        store.put(config, Outcome(config.id, {"loss": 2.0}, None, 0.5))  # never a result
        store.put(config, Outcome(config.id, None, "later error", 0.1))
        assert rows(store.path) == [(config.id, "ok", '{"loss": 1.0}', None)]
        assert store.count() == 1


def test_a_file_that_is_not_a_sweep_store_is_refused(tmp_path: Path) -> None:
    text = tmp_path / "notes.sqlite3"
    text.write_text("not a database at all, " * 100)
    with pytest.raises(StoreError, match=r"notes\.sqlite3"):
        Store(text)
    other = tmp_path / "other.sqlite3"
    with sqlite3.connect(other) as db:
        db.execute("CREATE TABLE results (id TEXT, loss REAL)")
    with pytest.raises(StoreError, match="not a sweep store"):
        Store(other)


def stopping_after(count: int, ran: list[str]) -> Any:
    """An in-process backend that is interrupted (Ctrl+C) after ``count`` outcomes."""

    def backend(groups: Sequence[Group]) -> Iterator[Outcome]:
        for i, outcome in enumerate(in_process(groups)):
            if i == count:
                raise KeyboardInterrupt
            ran.append(outcome.config_id)
            yield outcome

    return backend


def test_a_restart_runs_only_what_is_missing(tmp_path: Path) -> None:
    sweep = Sweep("bn-lr", GRID, seeds=2, store=tmp_path / "s.sqlite3")
    first: list[str] = []
    with pytest.raises(KeyboardInterrupt):
        sweep.run(backend=stopping_after(3, first))
    assert len(rows(sweep.store)) == 3
    second: list[str] = []
    summary = sweep.run(backend=stopping_after(99, second))
    assert (summary.stored_before, summary.ran, summary.errors) == (3, 5, 0)
    assert set(second) == {c.id for c in sweep.configs} - set(first)
    assert len(rows(sweep.store)) == 8
    assert sweep.run(backend=stopping_after(0, [])).ran == 0  # nothing left: nothing runs


def test_an_error_is_stored_and_retried_only_when_asked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    sweep = Sweep("bn-lr", GRID, store=tmp_path / "s.sqlite3")
    real = engine.run_experiment

    def flaky(name: str, **params: Any) -> Any:
        if params["lr"] == 1.0:
            raise FloatingPointError("lr 1 diverged")
        return real(name, **params)

    monkeypatch.setattr(engine, "run_experiment", flaky)
    assert sweep.run().errors == 2
    failed = {r["id"] for r in sweep.records() if r["status"] == "error"}
    assert {c.id for c in sweep.configs if c.params["lr"] == 1.0} == failed
    assert all("lr 1 diverged" in r["error"] for r in sweep.records() if r["id"] in failed)
    monkeypatch.setattr(engine, "run_experiment", real)  # the cause is fixed
    assert sweep.run().ran == 0  # a stored error is kept...
    summary = sweep.run(retry_errors=True)  # ...until a retry is asked for
    assert (summary.ran, summary.errors, summary.stored_before) == (2, 0, 2)
    assert [r["status"] for r in sweep.records()] == ["ok"] * 4


def test_frame_has_a_row_per_config_with_params_and_key_numbers(
    done: Sweep, tmp_path: Path
) -> None:
    frame = done.frame()
    assert list(frame["id"]) == [c.id for c in done.configs]
    for name in done.configs[0].params:
        assert list(frame[name]) == [c.params[name] for c in done.configs]
    results = {r["id"]: r["result"] for r in done.records()}
    assert list(frame["losses_last"]) == [results[i]["losses"][-1] for i in frame["id"]]
    assert list(frame["losses_min"]) == [min(results[i]["losses"]) for i in frame["id"]]
    assert set(frame["status"]) == {"ok"}
    # a sweep not yet run: its rows are pending
    pending = Sweep("bn-lr", {**GRID, "seed": 7}, store=done.store).frame()
    assert list(pending["status"]) == ["pending"] * 4


@pytest.mark.parametrize("suffix", [".csv", ".parquet"])
def test_a_table_export_reads_back_as_the_frame(done: Sweep, tmp_path: Path, suffix: str) -> None:
    path = done.export(tmp_path / f"results{suffix}")
    back = pd.read_csv(path) if suffix == ".csv" else pd.read_parquet(path)
    expected = done.frame()
    if suffix == ".csv":  # a CSV cell has no type: read the empty error column as objects
        back["error"] = back["error"].astype(object).where(back["error"].notna(), None)
    pd.testing.assert_frame_equal(back, expected, check_dtype=suffix == ".parquet")


def test_the_jsonl_export_holds_each_whole_record(done: Sweep, tmp_path: Path) -> None:
    path = done.export(tmp_path / "results.jsonl")
    lines = path.read_text().splitlines()
    assert [json.loads(line) for line in lines] == done.records()
    assert len(lines) == len(done.configs)


def test_an_unknown_export_suffix_is_refused(done: Sweep, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"suffix '\.xlsx', use one of"):
        done.export(tmp_path / "results.xlsx")


def test_a_table_export_without_its_library_names_the_extra(
    done: Sweep, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = sweeps.importlib.util.find_spec
    monkeypatch.setattr(
        sweeps.importlib.util, "find_spec", lambda n: None if n == "pyarrow" else real(n)
    )
    with pytest.raises(ValueError, match=r"parquet needs pyarrow: pip install 'normlab\[sweep\]'"):
        done.export(tmp_path / "results.parquet")
    assert not (tmp_path / "results.parquet").exists()


def test_a_backend_s_second_outcome_for_a_config_is_dropped(tmp_path: Path) -> None:
    # a Ray task retried after its worker died may answer a config twice
    sweep = Sweep("bn-lr", {**TINY, "lr": "0.5,1"}, store=tmp_path / "s.sqlite3")
    counted: list[tuple[int, int]] = []

    def twice(groups: Sequence[Group]) -> Iterator[Outcome]:
        for outcome in in_process(groups):
            yield outcome
            yield Outcome(outcome.config_id, {"again": True}, None, 0.0)

    summary = sweep.run(progress=lambda done, total: counted.append((done, total)), backend=twice)
    assert (summary.ran, counted) == (2, [(0, 2), (1, 2), (2, 2)])
    assert all("again" not in r["result"] for r in sweep.records())

    def stranger(groups: Sequence[Group]) -> Iterator[Outcome]:
        yield Outcome("0" * 20, {}, None, 0.0)

    with pytest.raises(RuntimeError, match="no config of this sweep"):
        Sweep("bn-lr", {**TINY, "lr": "2"}, store=tmp_path / "s.sqlite3").run(backend=stranger)
