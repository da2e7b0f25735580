"""The learner's progress: exercise attempts, solved exercises and saved code, in SQLite.

One file holds five tables:

- ``attempts``: every submission to an exercise (its id, the answer or code as JSON, whether
  it passed, the feedback the lab gave, the time);
- ``solved``: each exercise solved at least once, with the time of the first pass;
- ``listings``: the learner's last code for each editable listing of a lesson (id -> code);
- ``exercise_code``: the learner's last code in each code exercise's editor (id -> code), kept
  whether or not it was checked;
- ``learner``: one row, the learner's id: random, made when the file is created, so one
  database is one learner (it seeds the order of the choices each learner sees).

Durability. The database runs in WAL mode with ``synchronous=FULL`` and every write is one
transaction (``BEGIN IMMEDIATE ... COMMIT``), committed before the method returns. A commit
in WAL mode appends the change to the ``-wal`` file; FULL adds an fsync of that file at every
commit. Surviving a killed server (SIGKILL) needs only the append, which reaches the kernel
before ``commit`` returns (NORMAL would do); FULL also keeps an acknowledged write through a
power cut or an OS crash. The cost is one fsync per learner action (a submitted answer, a saved
listing), which no learner can click fast enough to notice.

Threads. The lab's routes run in a thread pool, so one store is used from many threads. It
holds a single connection (opened with ``check_same_thread=False``) and serializes every call
on a lock: the statements are tiny, and SQLite would serialize the writers anyway. Several
processes may open the same file (each its own store); WAL lets their readers run beside a
writer, and ``busy_timeout`` makes a writer wait for another process's transaction instead of
failing.

Default location: ``$XDG_DATA_HOME/normlab/progress.sqlite3``, else
``~/.local/share/normlab/progress.sqlite3`` (see :func:`default_db_path`).

>>> import tempfile, pathlib
>>> with tempfile.TemporaryDirectory() as d:
...     store = ProgressStore(pathlib.Path(d) / "p.sqlite3")
...     _ = store.record_attempt("he-factor", "def he_std(n): ...", False, "check 3 failed")
...     _ = store.record_attempt("he-factor", "def he_std(n): ...", True, "all checks passed")
...     store.save_listing("drift-stack", "print(1)")
...     print(store.progress()["he-factor"], store.listing("drift-stack"))
...     store.close()
{'attempts': 2, 'solved': True} print(1)
"""

from __future__ import annotations

import json
import os
import re
import secrets
import sqlite3
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any

from normlab.storage import enter_wal

__all__ = [
    "LISTING_ID",
    "MAX_LISTINGS",
    "MAX_SAVED_CHARS",
    "Attempt",
    "ProgressLimit",
    "ProgressStore",
    "ProgressStoreError",
    "check_listing_id",
    "default_db_path",
]

LISTING_ID = re.compile(r"[a-z0-9-]{1,64}")
"""What a listing id may be: lowercase letters, digits and dashes, 1 to 64 of them."""

BUSY_TIMEOUT_S = 10.0
"""How long a write waits for another process's transaction (or a new file's switch to WAL)
before it fails."""

_SCHEMA_VERSION = 2  # 2 added exercise_code and learner (a version-1 file gains them on open)
_SCHEMA = (
    """CREATE TABLE IF NOT EXISTS attempts (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        exercise_id TEXT NOT NULL,
        submission TEXT NOT NULL,
        passed INTEGER NOT NULL CHECK (passed IN (0, 1)),
        feedback TEXT NOT NULL,
        created REAL NOT NULL
    )""",
    "CREATE INDEX IF NOT EXISTS attempts_by_exercise ON attempts (exercise_id)",
    """CREATE TABLE IF NOT EXISTS solved (
        exercise_id TEXT PRIMARY KEY,
        first_solved REAL NOT NULL
    )""",
    """CREATE TABLE IF NOT EXISTS listings (
        listing_id TEXT PRIMARY KEY,
        code TEXT NOT NULL,
        updated REAL NOT NULL
    )""",
    """CREATE TABLE IF NOT EXISTS exercise_code (
        exercise_id TEXT PRIMARY KEY,
        code TEXT NOT NULL,
        updated REAL NOT NULL
    )""",
    """CREATE TABLE IF NOT EXISTS learner (
        only_row INTEGER PRIMARY KEY CHECK (only_row = 1),
        learner_id TEXT NOT NULL,
        created REAL NOT NULL
    )""",
)


class ProgressStoreError(ValueError):
    """The progress database cannot be opened at the path given (a folder, not SQLite, ...)."""


@dataclass(frozen=True)
class Attempt:
    """One stored submission. ``submission`` is the answer or the code, as it was sent."""

    id: int
    exercise_id: str
    submission: Any
    passed: bool
    feedback: str
    created: float  # seconds since the epoch


def default_db_path() -> Path:
    """Where the lab keeps progress unless told otherwise.

    ``$XDG_DATA_HOME/normlab/progress.sqlite3`` when ``XDG_DATA_HOME`` is set to an absolute
    path (the XDG spec says to ignore a relative one), else
    ``~/.local/share/normlab/progress.sqlite3``. The folder is created when a store opens it.
    """
    base = os.environ.get("XDG_DATA_HOME", "")
    root = Path(base) if base and os.path.isabs(base) else Path.home() / ".local" / "share"
    return root / "normlab" / "progress.sqlite3"


def _check_id(value: object, name: str) -> str:
    if not isinstance(value, str):
        raise TypeError(f"{name} must be a str, got {type(value).__name__}")
    if LISTING_ID.fullmatch(value) is None:
        raise ValueError(
            f"{name} {value!r} is not allowed, use 1 to 64 lowercase letters, digits or dashes"
        )
    return value


def check_listing_id(listing_id: object) -> str:
    """Return ``listing_id`` if it is a valid listing id, else raise naming what is allowed."""
    return _check_id(listing_id, "listing_id")


def _check_writable(path: Path) -> None:
    """Refuse a database the lab could read but never write, naming why.

    Every write needs the file and, in WAL mode, its folder (SQLite creates ``-wal`` and
    ``-shm`` files beside it). ``os.access`` answers for a read-only mount even as root.
    """
    folder = path.parent
    if not os.access(folder, os.W_OK):
        why = "a read-only file system" if _read_only_mount(folder) else "no write permission"
        raise ProgressStoreError(
            f"{str(path)!r} is in a read-only location (the folder {str(folder)!r}: {why}): "
            "give a --db path the lab can write"
        )
    if path.exists() and not os.access(path, os.W_OK):
        why = "a read-only file system" if _read_only_mount(path) else "no write permission"
        raise ProgressStoreError(
            f"{str(path)!r} is read-only ({why}): make it writable or give another --db"
        )


def _read_only_mount(place: Path) -> bool:
    """Whether ``place`` sits on a file system mounted read-only."""
    try:
        return bool(os.statvfs(place).f_flag & os.ST_RDONLY)
    except OSError:
        return False


_TABLES = {"attempts", "solved", "listings", "exercise_code", "learner", "sqlite_sequence"}
"""The tables a normlab progress database holds (``sqlite_sequence`` is SQLite's own)."""
_SQLITE_HEADER = b"SQLite format 3\x00"


def _one_line(text: object) -> str:
    """``text`` on one line (SQLite's integrity reports span several)."""
    return " ".join(str(text).split())


def _damaged(path: str | Path, why: object) -> ProgressStoreError:
    return ProgressStoreError(
        f"{str(path)!r} is damaged ({_one_line(why)}): move it aside (the lab starts a new one) "
        "or give another --db"
    )


def _refusal(path: str | Path, exc: sqlite3.Error) -> ProgressStoreError:
    """What an SQLite error on opening ``path`` means to the learner, on one line."""
    if "malformed" in str(exc):
        return _damaged(path, exc)
    return ProgressStoreError(f"{str(path)!r} is not a normlab progress database: {_one_line(exc)}")


def _check_place(path: Path) -> None:
    """Refuse a folder, a parent that cannot be made, or a read-only location."""
    if path.is_dir():
        raise ProgressStoreError(f"{str(path)!r} is a folder, give a file path")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ProgressStoreError(
            f"cannot create the folder {str(path.parent)!r}: {exc.strerror or exc}"
        ) from None
    _check_writable(path)


def _create_private(path: Path) -> None:
    """Create ``path`` empty, readable and writable by its owner only (0600): it holds the
    learner's code. SQLite gives its ``-wal`` and ``-shm`` files the same permissions."""
    os.close(os.open(path, os.O_WRONLY | os.O_CREAT, 0o600))  # (no O_EXCL: two labs may race)


def _inspect(path: Path) -> None:
    """Look at an existing file read-only and refuse it, on one line, unless it is a normlab
    progress database this version can use: not SQLite, damaged, of a newer schema, or holding
    tables that are not ours (someone else's database given as ``--db``). Nothing is written
    to a refused file."""
    with path.open("rb") as f:
        if f.read(len(_SQLITE_HEADER)) != _SQLITE_HEADER:
            raise ProgressStoreError(
                f"{str(path)!r} is not a normlab progress database: it is not an SQLite file"
            )
    try:
        conn = sqlite3.connect(
            f"{path.resolve().as_uri()}?mode=ro", uri=True, timeout=BUSY_TIMEOUT_S
        )
    except sqlite3.Error as exc:
        raise _refusal(path, exc) from None
    try:
        problems = [row[0] for row in conn.execute("PRAGMA quick_check(1)").fetchall()]
        if problems != ["ok"]:
            raise _damaged(path, problems[0])
        version = conn.execute("PRAGMA user_version").fetchone()[0]
        rows = conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'").fetchall()
    except sqlite3.Error as exc:
        raise _refusal(path, exc) from None
    finally:
        conn.close()
    if version > _SCHEMA_VERSION:
        raise ProgressStoreError(
            f"{str(path)!r} was written by a newer normlab (schema {version}, this one knows "
            f"{_SCHEMA_VERSION}): use that normlab, or give another --db"
        )
    foreign = sorted({name for (name,) in rows} - _TABLES)
    if foreign:
        raise ProgressStoreError(
            f"{str(path)!r} is not a normlab progress database: it holds other tables "
            f"({', '.join(foreign)}); give another --db"
        )


def _set_up(conn: sqlite3.Connection, path: str | Path) -> None:
    """WAL, full sync and the schema (tables a version-1 file lacks are added), in one
    transaction; the first process to open the file names its learner."""
    mode = enter_wal(conn, BUSY_TIMEOUT_S)  # (conn's busy timeout is set where it is opened)
    if path != ":memory:" and mode != "wal":
        raise ProgressStoreError(f"{str(path)!r}: SQLite refused WAL mode ({mode})")
    conn.execute("PRAGMA synchronous = FULL")
    conn.execute("PRAGMA foreign_keys = ON")
    # (not executescript: it would commit before the first statement)
    conn.execute("BEGIN IMMEDIATE")
    for statement in _SCHEMA:
        conn.execute(statement)
    conn.execute(
        "INSERT OR IGNORE INTO learner (only_row, learner_id, created) VALUES (1, ?, ?)",
        (secrets.token_hex(16), time.time()),
    )
    conn.execute(f"PRAGMA user_version = {_SCHEMA_VERSION}")
    conn.execute("COMMIT")


MAX_LISTINGS = 500
"""The most listings a progress database keeps the learner's code of."""
MAX_SAVED_CHARS = 2_000_000
"""The most characters the saved listings hold together."""


class ProgressLimit(ValueError):
    """Saving would pass :data:`MAX_LISTINGS` or :data:`MAX_SAVED_CHARS`; ``param`` names the
    request's part at fault."""

    def __init__(self, param: str, message: str) -> None:
        super().__init__(message)
        self.param = param


def _keep(conn: sqlite3.Connection, table: str, key_column: str, key: str, code: str) -> None:
    """Insert or replace the code kept under ``key`` in ``table``, in ``conn``'s transaction."""
    conn.execute(
        f"INSERT INTO {table} ({key_column}, code, updated) VALUES (?, ?, ?) "
        f"ON CONFLICT ({key_column}) DO UPDATE SET code = excluded.code, "
        "updated = excluded.updated",
        (key, code, time.time()),
    )


class ProgressStore:
    """A learner's progress in one SQLite file; safe to share between threads.

    Args:
        path: the database file; its parent folders are created. ``":memory:"`` keeps
            everything in memory (for tests; nothing survives :meth:`close`).

    Raises:
        ProgressStoreError: the path is a folder, cannot be created, is in a read-only
            location, or is not an SQLite database of this layout.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = str(path) if str(path) == ":memory:" else Path(path)
        self._lock = threading.Lock()
        self._conn: sqlite3.Connection | None = self._open()
        self.learner_id: str = self._read("SELECT learner_id FROM learner")[0][0]
        """This database's learner: 32 hex digits, the same on every open of the file."""

    def _open(self) -> sqlite3.Connection:
        if isinstance(self.path, Path):
            _check_place(self.path)
            if self.path.exists() and self.path.stat().st_size > 0:
                _inspect(self.path)  # refuse a file that is not ours before writing to it
            elif not self.path.exists():
                _create_private(self.path)
        try:
            # isolation_level=None: no implicit transactions; each write opens its own below.
            conn = sqlite3.connect(
                self.path, timeout=BUSY_TIMEOUT_S, isolation_level=None, check_same_thread=False
            )
        except sqlite3.Error as exc:
            raise ProgressStoreError(f"cannot open {str(self.path)!r}: {exc}") from None
        try:
            _set_up(conn, self.path)
        except sqlite3.Error as exc:
            conn.close()
            raise _refusal(self.path, exc) from None
        except ProgressStoreError:
            conn.close()
            raise
        return conn

    # -- writes: each one transaction, committed (and fsynced) before returning --------------

    @contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        """Hold the lock and one write transaction; commit on success, roll back on error."""
        with self._lock:
            conn = self._connection()
            conn.execute("BEGIN IMMEDIATE")  # take the write lock now, not at the first write
            try:
                yield conn
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            conn.execute("COMMIT")

    def record_attempt(self, exercise_id: str, submission: Any, passed: bool, feedback: str) -> int:
        """Store one attempt (and mark the exercise solved if it passed); return its id.

        Args:
            exercise_id: the exercise's id.
            submission: the answer or the code, anything ``json.dumps`` accepts.
            passed: whether the check passed.
            feedback: what the lab told the learner.
        """
        if not isinstance(exercise_id, str) or not exercise_id:
            raise ValueError(f"exercise_id must be a non-empty str, got {exercise_id!r}")
        if not isinstance(passed, bool):
            raise TypeError(f"passed must be a bool, got {type(passed).__name__}")
        if not isinstance(feedback, str):
            raise TypeError(f"feedback must be a str, got {type(feedback).__name__}")
        text = json.dumps(submission)
        now = time.time()
        with self._transaction() as conn:
            cur = conn.execute(
                "INSERT INTO attempts (exercise_id, submission, passed, feedback, created) "
                "VALUES (?, ?, ?, ?, ?)",
                (exercise_id, text, int(passed), feedback, now),
            )
            if passed:
                conn.execute(
                    "INSERT OR IGNORE INTO solved (exercise_id, first_solved) VALUES (?, ?)",
                    (exercise_id, now),
                )
        return cur.lastrowid or 0

    def save_listing(self, listing_id: str, code: str) -> None:
        """Keep ``code`` as the learner's last version of listing ``listing_id``.

        What a learner keeps is bounded, so that :meth:`listings` (which ``GET /api/progress``
        answers with) is too: at most :data:`MAX_LISTINGS` listings, and :data:`MAX_SAVED_CHARS`
        characters in all (the lessons have a few dozen listings of a few hundred characters).

        Raises:
            ProgressLimit: saving it would pass either bound; nothing is saved.
        """
        check_listing_id(listing_id)
        if not isinstance(code, str):
            raise TypeError(f"code must be a str, got {type(code).__name__}")
        with self._transaction() as conn:
            others, chars = conn.execute(
                "SELECT COUNT(*), COALESCE(SUM(LENGTH(code)), 0) FROM listings "
                "WHERE listing_id != ?",
                (listing_id,),
            ).fetchone()
            if others >= MAX_LISTINGS:
                raise ProgressLimit(
                    "listing_id", f"{others:,} listings are saved, the most the lab keeps"
                )
            if chars + len(code) > MAX_SAVED_CHARS:
                raise ProgressLimit(
                    "code",
                    f"the saved listings would hold {chars + len(code):,} characters, the lab "
                    f"keeps at most {MAX_SAVED_CHARS:,}: put back the original of a listing "
                    "you no longer need",
                )
            _keep(conn, "listings", "listing_id", listing_id, code)

    def save_code(self, exercise_id: str, code: str) -> None:
        """Keep ``code`` as the learner's last code in the editor of exercise ``exercise_id``."""
        _check_id(exercise_id, "exercise_id")
        self._keep_code("exercise_code", "exercise_id", exercise_id, code)

    def _keep_code(self, table: str, key_column: str, key: str, code: str) -> None:
        """Insert or replace the code kept under ``key`` in ``table`` (one of the schema's)."""
        if not isinstance(code, str):
            raise TypeError(f"code must be a str, got {type(code).__name__}")
        with self._transaction() as conn:
            _keep(conn, table, key_column, key, code)

    # -- reads -------------------------------------------------------------------------------

    def code(self, exercise_id: str) -> str | None:
        """The learner's last code in one exercise, or ``None`` if none was kept."""
        _check_id(exercise_id, "exercise_id")
        rows = self._read("SELECT code FROM exercise_code WHERE exercise_id = ?", (exercise_id,))
        return rows[0][0] if rows else None

    def codes(self) -> dict[str, str]:
        """Every exercise's kept code: ``{exercise_id: code}``, sorted by id."""
        rows = self._read("SELECT exercise_id, code FROM exercise_code ORDER BY exercise_id")
        return {exercise_id: code for exercise_id, code in rows}

    def standing(self, exercise_id: str) -> dict[str, Any]:
        """One exercise's ``{"attempts": n, "solved": bool}``, as :meth:`progress` counts them."""
        rows = self._read(
            "SELECT (SELECT COUNT(*) FROM attempts WHERE exercise_id = ?), "
            "EXISTS (SELECT 1 FROM solved WHERE exercise_id = ?)",
            (exercise_id, exercise_id),
        )
        attempts, solved = rows[0]
        return {"attempts": attempts, "solved": bool(solved)}

    def _read(self, sql: str, args: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        with self._lock:
            return self._connection().execute(sql, args).fetchall()

    def listing(self, listing_id: str) -> str | None:
        """The saved code of one listing, or ``None`` if the learner never saved it."""
        check_listing_id(listing_id)
        rows = self._read("SELECT code FROM listings WHERE listing_id = ?", (listing_id,))
        return rows[0][0] if rows else None

    def listings(self) -> dict[str, str]:
        """Every saved listing: ``{listing_id: code}``, sorted by id."""
        rows = self._read("SELECT listing_id, code FROM listings ORDER BY listing_id")
        return {listing_id: code for listing_id, code in rows}

    def progress(self) -> dict[str, dict[str, Any]]:
        """Per exercise with at least one attempt: ``{id: {"attempts": n, "solved": bool}}``."""
        rows = self._read(
            "SELECT a.exercise_id, COUNT(*), s.exercise_id IS NOT NULL FROM attempts AS a "
            "LEFT JOIN solved AS s ON s.exercise_id = a.exercise_id "
            "GROUP BY a.exercise_id ORDER BY a.exercise_id"
        )
        return {ex: {"attempts": n, "solved": bool(solved)} for ex, n, solved in rows}

    def attempts(self, exercise_id: str | None = None) -> list[Attempt]:
        """Stored attempts, oldest first; only those of ``exercise_id`` if given."""
        sql = "SELECT id, exercise_id, submission, passed, feedback, created FROM attempts"
        args: tuple[Any, ...] = ()
        if exercise_id is not None:
            sql += " WHERE exercise_id = ?"
            args = (exercise_id,)
        rows = self._read(sql + " ORDER BY id", args)
        return [
            Attempt(i, ex, json.loads(sub), bool(passed), feedback, created)
            for i, ex, sub, passed, feedback, created in rows
        ]

    def journal_mode(self) -> str:
        """SQLite's journal mode for this file (``"wal"``)."""
        return str(self._read("PRAGMA journal_mode")[0][0])

    # -- lifetime ------------------------------------------------------------------------------

    def _connection(self) -> sqlite3.Connection:
        if self._conn is None:
            raise ValueError(f"the progress store {str(self.path)!r} is closed")
        return self._conn

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` was called."""
        return self._conn is None

    def close(self) -> None:
        """Close the connection (idempotent). SQLite folds the WAL back into the file."""
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None

    def __enter__(self) -> ProgressStore:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
