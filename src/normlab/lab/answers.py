"""The lab's kept answers on disk: a lab started again shows its lessons at once.

A :class:`~normlab.lab.runner.Runner` keeps the pages' answers (``keep``: a lesson's, and an
experiment page's run of its defaults) in memory for the life of its process. An
:class:`AnswerStore` keeps them across processes, in one SQLite file (default
:func:`default_path`: the user's cache folder): the Runner looks a kept answer up here before
computing it, and writes it here once computed. Ad-hoc runs are never stored.

Several processes may read and write the file at once (two labs, a test suite's workers): it
is in WAL mode (readers never wait for a writer; :func:`normlab.storage.enter_wal` switches a
new file even while another process does) with a busy timeout for writers. It is a
cache, never a source of truth: a file that cannot be opened, read or written (corrupt, locked
past the timeout, on a read-only disk) makes the store log one warning and step aside; the lab
computes its answers as it would without one.

What makes a stored answer the one a fresh run would give (:meth:`AnswerStore.key`): the
project's promise is that every number a page shows is what the plain PyTorch code beside it
prints on the same machine, same thread count, so the key holds everything that number depends
on besides the parameters, and an answer computed under any other key is never shown.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import logging
import os
import platform
import sqlite3
import threading
import time
import weakref
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import normlab
from normlab.storage import enter_wal

log = logging.getLogger(__name__)

MAX_BYTES = 64 << 20
"""What the stored answers may add up to (their JSON), the least recently used going first.
Every lesson's answers together take about 2 MiB and the experiment pages' runs of their
defaults 0.6 MiB (all registered experiments, rendered), so the bound holds those of tens of
versions of normlab (each source change keys them afresh) without the file growing forever.
An answer larger than the bound is not kept."""

BUSY_TIMEOUT_S = 5.0
"""How long a write waits for another process's write to end before the store gives up (a
write takes milliseconds: only a stuck or foreign lock holds it that long)."""

ENVIRONMENT = "NORMLAB_ANSWERS"
"""The environment variable naming the store's file (empty: no store), for the labs a test
suite or a script starts without flags."""

_SCHEMA = """
CREATE TABLE IF NOT EXISTS answers (
    key TEXT PRIMARY KEY,  -- AnswerStore.key: a SHA-256 of the run and its context
    name TEXT NOT NULL,    -- the experiment (to read the file by eye)
    body BLOB NOT NULL,    -- the answer as the Runner renders it: UTF-8 JSON
    used REAL NOT NULL     -- last written or read, seconds since the epoch
)
"""


def default_path() -> Path | None:
    """Where the lab keeps its answers unless told otherwise: ``$NORMLAB_ANSWERS`` when set
    (empty: nowhere, ``None``), else ``$XDG_CACHE_HOME/normlab/answers.sqlite3`` when
    ``XDG_CACHE_HOME`` is an absolute path (the XDG spec ignores a relative one), else
    ``~/.cache/normlab/answers.sqlite3``. The folder is made on the first write."""
    named = os.environ.get(ENVIRONMENT)
    if named is not None:
        return Path(named) if named else None
    base = os.environ.get("XDG_CACHE_HOME", "")
    root = Path(base) if base and os.path.isabs(base) else Path.home() / ".cache"
    return root / "normlab" / "answers.sqlite3"


@functools.cache
def source_digest() -> str:
    """A SHA-256 of every ``.py`` file of the installed normlab package (paths and contents):
    any change to the code changes it, and with it every stored answer's key."""
    root = Path(normlab.__file__).parent
    digest = hashlib.sha256()
    for path in sorted(root.rglob("*.py")):
        digest.update(path.relative_to(root).as_posix().encode() + b"\0")
        digest.update(path.read_bytes() + b"\0")
    return digest.hexdigest()


@functools.cache
def machine() -> str:
    """The platform and the CPU model (``/proc/cpuinfo``'s ``model name`` where there is one,
    else :func:`platform.processor`)."""
    cpu = platform.processor()
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.partition(":")[2].strip()
                    break
    except OSError:
        pass
    return f"{platform.platform()} | {platform.machine()} | {cpu}"


def context() -> dict[str, object]:
    """What a computed answer depends on besides its experiment and parameters, now: read at
    each look-up, since the thread count may change while the lab runs.

    - ``source``: normlab's code (:func:`source_digest`): an experiment, its script or a
      helper it calls may compute differently after any change; hashing all of it is simple
      and safe (a change to an unrelated file only costs one warm-up).
    - ``torch`` and ``numpy``: their versions: kernels and their rounding change between
      releases.
    - ``threads``: torch's intra-op threads (``normlab lab --threads``): a reduction split over
      more threads sums in another order, and the last digits move.
    - ``machine``: the platform and CPU model: another instruction set (AVX-512 or not, ARM)
      takes other kernels, with other rounding; a file copied between machines, or a home
      folder shared by several, must not carry numbers across.
    """
    import numpy  # here: the store itself needs the stdlib alone
    import torch

    return {
        "source": source_digest(),
        "torch": torch.__version__,
        "numpy": numpy.__version__,
        "threads": torch.get_num_threads(),
        "machine": machine(),
    }


@contextlib.contextmanager
def _writing(db: sqlite3.Connection) -> Iterator[None]:
    """A write transaction on ``db``, committed at the end (rolled back on an error). Begun
    ``IMMEDIATE``: it waits for the write lock (the busy timeout) before it reads anything, so
    another process's write in between cannot leave it on a stale snapshot, which SQLite
    reports at once as "database is locked" without waiting (a deferred transaction's risk in
    WAL mode)."""
    db.execute("BEGIN IMMEDIATE")
    try:
        yield
    except BaseException:
        db.rollback()
        raise
    db.commit()


class AnswerStore:
    """Kept answers in the SQLite file ``path``, at most ``max_bytes`` of them (see the module
    docstring), a write waiting ``busy_timeout_s`` at most for another's. Thread-safe; the file
    is opened on first use.

    :meth:`get` and :meth:`put` never raise: the first failure logs a warning, and from then on
    the store finds nothing and keeps nothing (:attr:`broken`).
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        max_bytes: int = MAX_BYTES,
        busy_timeout_s: float = BUSY_TIMEOUT_S,
    ) -> None:
        if max_bytes < 1:
            raise ValueError(f"max_bytes must be at least 1, got {max_bytes}")
        if busy_timeout_s < 0:
            raise ValueError(f"busy_timeout_s must be at least 0, got {busy_timeout_s}")
        self.path = Path(path)
        self.max_bytes = max_bytes
        self.busy_timeout_s = busy_timeout_s
        self.broken = False  # a failure was logged: the store steps aside
        self._db: sqlite3.Connection | None = None
        self._lock = threading.Lock()

    @staticmethod
    def key(run: str) -> str:
        """The key of ``run`` (the Runner's key: the experiment and its validated parameters as
        canonical JSON) in the current :func:`context`."""
        text = json.dumps([run, context()], sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(text.encode()).hexdigest()

    def get(self, key: str) -> bytes | None:
        """The stored answer of ``key`` (UTF-8 JSON), now the most recently used, or ``None``.
        An answer read is given even if marking it used fails (a write another holds)."""
        with self._lock:
            try:
                db = self._open()
                if db is None:
                    return None
                row = db.execute("SELECT body FROM answers WHERE key = ?", (key,)).fetchone()
            except (sqlite3.Error, OSError) as exc:
                self._fail(exc)
                return None
            if row is None:
                return None
            try:
                with _writing(db):
                    db.execute("UPDATE answers SET used = ? WHERE key = ?", (time.time(), key))
            except sqlite3.Error as exc:
                self._fail(exc)
            return bytes(row[0])

    def load(self, key: str) -> Any:
        """The stored answer of ``key`` read back from its JSON (every float as it was, NaN and
        infinities too), or ``None``: none stored, or a damaged row, which is a miss like any
        other (the store is a cache: the caller computes the answer again and writes it over)."""
        body = self.get(key)
        if body is None:
            return None
        try:
            return json.loads(body)
        except ValueError:
            return None

    def put(self, key: str, name: str, body: bytes) -> None:
        """Keep ``body``, the answer of ``key`` for experiment ``name``; then drop the least
        recently used answers until the rest fit in :attr:`max_bytes`. A body larger than
        that is not kept."""
        if len(body) > self.max_bytes:
            return
        with self._lock:
            try:
                db = self._open()
                if db is None:
                    return
                with _writing(db):
                    db.execute(
                        "INSERT OR REPLACE INTO answers VALUES (?, ?, ?, ?)",
                        (key, name, body, time.time()),
                    )
                    # newest first, a running total: whatever lies past the bound goes
                    db.execute(
                        "DELETE FROM answers WHERE key IN (SELECT key FROM (SELECT key, "
                        "SUM(LENGTH(body)) OVER (ORDER BY used DESC, key) AS total "
                        "FROM answers) WHERE total > ?)",
                        (self.max_bytes,),
                    )
            except (sqlite3.Error, OSError) as exc:
                self._fail(exc)

    def close(self) -> None:
        with self._lock:
            if self._db is not None:
                self._db.close()
                self._db = None

    def _open(self) -> sqlite3.Connection | None:
        """The connection (made on first use), or ``None`` once :attr:`broken`."""
        if self.broken:
            return None
        if self._db is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            db = sqlite3.connect(
                self.path,
                timeout=self.busy_timeout_s,
                isolation_level=None,  # transactions as _writing begins them
                check_same_thread=False,
            )
            try:
                enter_wal(db, self.busy_timeout_s)
                db.execute("PRAGMA synchronous = NORMAL")  # a cache: a lost last write is fine
                made = "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'answers'"
                if db.execute(made).fetchone() is None:  # a read: another's write lock is fine
                    with _writing(db):
                        db.execute(_SCHEMA)
            except BaseException:
                db.close()
                raise
            self._db = db
            weakref.finalize(self, db.close)  # a store dropped unclosed closes its file too
        return self._db

    def _fail(self, exc: BaseException) -> None:
        """Log ``exc`` once and step aside: the lab computes what it would have read."""
        self.broken = True
        if self._db is not None:
            with contextlib.suppress(sqlite3.Error):
                self._db.close()
            self._db = None
        log.warning(
            "normlab lab: the answers store %s cannot be used (%s): computing the lessons' "
            "answers instead (delete the file, or pass --no-answers)",
            self.path,
            exc,
        )
