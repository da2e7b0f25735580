"""Follow a :func:`normlab.watch` log as it grows: what the lab's ``/watch`` page shows.

A training run appends one JSON line per recorded step to its log (:mod:`normlab.watching`).
:class:`LogTail` reads only what the file gained since its last look, and only complete lines
(the line being written is read once its newline is there), at most :data:`CHUNK_BYTES` per
look, and keeps the last :data:`~normlab.watching.KEEP` records parsed: the cost of a look is
bounded and memory stays flat however long the log grows. A line that is not a watch record is
skipped and named by its line number; the file being absent (not written yet), replaced or
truncated is a state of the log, not an error of the lab.

:func:`watch_state` turns the kept records into what the page shows: a summary, the
:func:`~normlab.doctor.view.training_figure` described as data, the labels gained and
lost (:func:`~normlab.watching.events`) and the last record's per-layer table. It draws nothing.
:class:`WatchLog` shares one tail between all the lab's requests and rebuilds the state only
when the file changed.

>>> import json, tempfile, pathlib
>>> log = pathlib.Path(tempfile.mkdtemp()) / "run.jsonl"
>>> tail = LogTail(log)
>>> tail.poll(), tail.status
(True, 'waiting')
>>> layer = dict(name="0", kind="Linear", labels=["ok"], act_mean=0.0, act_std=1.0, scale=1.0,
...              dead_frac=0.0, saturated_frac=None, unit_spread=1.0, grad_std=0.1, grad_ratio=1.0)
>>> record = {"step": 0, "input_std": 1.0, "problems": [], "layers": [layer]}
>>> _ = log.write_text(json.dumps(record) + "\\n" + '{"step": 10, "inp')  # a line being written
>>> tail.poll(), tail.count, tail.status
(True, 1, 'ok')
>>> watch_state(tail)["summary"]
'1 record, steps 0 to 0'
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import stat
import threading
import time
from collections import deque
from pathlib import Path
from typing import Any

from normlab.watching import KEEP, events

POLL_S = 0.5
"""How often the log's size and modification time are looked at, in seconds."""
CHUNK_BYTES = 8 << 20
"""The most a look reads (8 MiB); a longer backlog is read over the next looks."""
MAX_ERRORS = 5
"""Messages about skipped lines kept (the newest); the count of skipped lines is kept whole."""
_NUMBERS = (
    "act_mean",
    "act_std",
    "scale",
    "dead_frac",
    "saturated_frac",
    "unit_spread",
    "grad_std",
    "grad_ratio",
)  # the fields of a logged layer that its table and the figure read


class WatchLogError(ValueError):
    """A path that can never be a watch log (a directory, a path that cannot be read)."""


def check_path(path: str | os.PathLike[str]) -> Path:
    """``path`` as a :class:`~pathlib.Path` if it is a readable file or does not exist yet.

    Raises:
        WatchLogError: it is a directory or another non-file, or it cannot be read.
    """
    found = Path(path)
    try:
        mode = os.stat(found).st_mode
    except FileNotFoundError:
        return found  # the training run will create it
    except (OSError, ValueError) as exc:  # ValueError: a NUL byte in the path
        raise WatchLogError(f"cannot read it: {getattr(exc, 'strerror', None) or exc}") from None
    if stat.S_ISDIR(mode):
        raise WatchLogError("is a directory; give the JSON-lines file normlab.watch writes")
    if not stat.S_ISREG(mode):
        raise WatchLogError("is not a regular file; give the JSON-lines file normlab.watch writes")
    try:
        with found.open("rb"):
            pass
    except OSError as exc:
        raise WatchLogError(f"cannot read it: {exc.strerror or exc}") from None
    return found


def _is_number(value: object) -> bool:
    return value is None or (isinstance(value, int | float) and not isinstance(value, bool))


def _check_layer(layer: object, i: int) -> None:
    if not isinstance(layer, dict):
        raise ValueError(f"layers[{i}] is not an object")
    for key in ("name", "kind"):
        if not isinstance(layer.get(key), str):
            raise ValueError(f"layers[{i}] has no string {key!r}")
    labels = layer.get("labels")
    if not isinstance(labels, list) or not all(isinstance(s, str) for s in labels):
        raise ValueError(f"layers[{i}] has no list of label strings")
    for key in _NUMBERS:
        if key not in layer or not _is_number(layer[key]):
            raise ValueError(f"layers[{i}] has no number {key!r}")
    if not _is_number(layer.get("update_ratio")):  # optional: a log written before has none
        raise ValueError(f"layers[{i}] has an 'update_ratio' that is not a number")


def check_record(record: object) -> None:
    """Raise :class:`ValueError` saying why ``record`` is not a :func:`normlab.watch` record.

    A record is an object with an integer ``step``, a number (or ``null``) ``input_std``, a
    list of ``problems`` and ``layers``: objects holding ``name``, ``kind``, ``labels`` and the
    doctor's numbers (``act_mean``, ``act_std``, ``scale``, ..., ``grad_ratio``) and, if
    given, a number (or ``null``) ``update_ratio``.
    """
    if not isinstance(record, dict):
        raise ValueError(f"a record is a JSON object, this is a {type(record).__name__}")
    step = record.get("step")
    if not isinstance(step, int) or isinstance(step, bool):
        raise ValueError("it has no integer 'step'")
    if "input_std" not in record or not _is_number(record["input_std"]):
        raise ValueError("it has no number 'input_std'")
    problems = record.get("problems")
    if not isinstance(problems, list) or not all(isinstance(p, str) for p in problems):
        raise ValueError("it has no list of 'problems'")
    layers = record.get("layers")
    if not isinstance(layers, list):
        raise ValueError("it has no list of 'layers'")
    for i, layer in enumerate(layers):
        _check_layer(layer, i)


def _parse(line: bytes) -> dict[str, Any]:
    """One line as a checked record; :class:`ValueError` saying why it is not one."""
    try:
        record = json.loads(line)
    except json.JSONDecodeError as exc:
        raise ValueError(f"not JSON ({exc.msg} at column {exc.colno})") from None
    except UnicodeDecodeError:
        raise ValueError("not UTF-8 text") from None
    except RecursionError:
        raise ValueError("nested too deeply") from None
    check_record(record)
    return dict(record)


class LogTail:
    """The last ``keep`` records of a growing watch log, read a new piece at a time.

    Args:
        path: the log (it may not exist yet).
        keep: records kept in memory, the newest.

    Attributes:
        records: the kept records, oldest first.
        count: records read so far (kept or not); ``lines``: lines read so far.
        status: ``"waiting"`` (no file yet), ``"ok"`` or ``"error"`` (``message`` says why).
        errors: the newest :data:`MAX_ERRORS` messages about skipped lines; ``skipped``: how
            many lines were skipped in all.
        behind: the last look stopped at :data:`CHUNK_BYTES` with more to read.
    """

    def __init__(self, path: str | os.PathLike[str], keep: int = KEEP) -> None:
        self.path = Path(path)
        self.keep = keep
        self._reset()
        self.status, self.message = "waiting", ""

    def _reset(self) -> None:
        self.records: deque[dict[str, Any]] = deque(maxlen=self.keep)
        self.count = self.lines = self.skipped = self.offset = 0
        self.errors: deque[str] = deque(maxlen=MAX_ERRORS)
        self.behind = self._long_line = False
        self._seen: tuple[int, int, int] | None = None  # (inode, size, mtime) at the last look

    def _set(self, status: str, message: str) -> bool:
        changed = (status, message) != (self.status, self.message)
        self.status, self.message = status, message
        return changed

    def poll(self) -> bool:
        """Read what the log gained since the last look; whether anything shown changed."""
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            if self._seen is not None:  # the log was removed: a new run will write it anew
                self._reset()
            return self._set("waiting", f"waiting for {self.path}: the file does not exist yet")
        except OSError as exc:
            return self._set("error", f"cannot read {self.path}: {exc.strerror or exc}")
        if not stat.S_ISREG(st.st_mode):
            return self._set("error", f"{self.path} is not a regular file")
        seen = (st.st_ino, st.st_size, st.st_mtime_ns)
        if seen == self._seen and not self.behind:
            return self._set("ok", "")
        replaced = self._seen is not None and (
            st.st_ino != self._seen[0] or st.st_size < self.offset
        )
        if replaced:  # a new run truncated or replaced the log: start again from its first line
            self._reset()
        try:
            with self.path.open("rb") as f:
                f.seek(self.offset)
                chunk = f.read(CHUNK_BYTES)
        except OSError as exc:
            return self._set("error", f"cannot read {self.path}: {exc.strerror or exc}")
        self._seen = seen
        self.behind = len(chunk) == CHUNK_BYTES
        return self._take(chunk) | self._set("ok", "") | replaced

    def _take(self, chunk: bytes) -> bool:
        """Parse the complete lines of ``chunk`` (read at ``offset``); whether any was read."""
        start = 0
        if self._long_line:  # inside a line longer than a chunk: skip to its end
            start = chunk.find(b"\n") + 1
            if start == 0:
                self.offset += len(chunk)
                return False
            self._long_line = False
            self.lines += 1
            self._skip(self.lines, f"it is longer than {CHUNK_BYTES >> 20} MiB")
        end = chunk.rfind(b"\n") + 1  # after the last complete line (>= start)
        if end == 0 and len(chunk) == CHUNK_BYTES:  # a whole chunk and no end of line
            self._long_line = True
            self.offset += len(chunk)
            return False
        for line in chunk[start:end].splitlines():
            self.lines += 1
            if line.strip():
                try:
                    self.records.append(_parse(line))
                    self.count += 1
                except ValueError as exc:
                    self._skip(self.lines, str(exc))
        self.offset += end
        return end > 0

    def _skip(self, number: int, why: str) -> None:
        self.skipped += 1
        self.errors.append(f"line {number} of {self.path.name} is not a watch record: {why}")


def _plural(n: int, word: str) -> str:
    return f"{n:,} {word}{'' if n == 1 else 's'}"


def _summary(tail: LogTail) -> str:
    records = tail.records
    if not records:
        return "no record yet" if tail.status == "ok" else tail.message
    steps = f"steps {records[0]['step']} to {records[-1]['step']}"
    if tail.count > len(records):
        steps += f" (the last {len(records):,} shown)"
    out = f"{_plural(tail.count, 'record')}, {steps}"
    return out + (", reading on" if tail.behind else "")


def _layer_table(record: dict[str, Any]) -> dict[str, Any]:
    """The last record's per-layer table, as :func:`~normlab.doctor.view.diagnosis_tables`
    makes it for any diagnosis, with the update:data ratios (:func:`normlab.report.log_tables`)."""
    from normlab.report import UPDATE_NOTE, log_tables

    table = log_tables(record, f"Every layer at step {record['step']}")[0]
    std = record["input_std"]
    input_std = f"{std:.3g}" if std is not None and math.isfinite(std) else "-"
    problems = ", ".join(record["problems"]) or "none"
    note = f"input std {input_std}; problems at this step: {problems}"
    notes = (note, *[n for n in table.notes if n == UPDATE_NOTE])
    return dataclasses.replace(table, notes=notes).to_dict()


def watch_state(tail: LogTail, version: int = 0) -> dict[str, Any]:
    """What the ``/watch`` page shows of ``tail``, JSON-ready (``GET /api/watch``'s answer).

    Args:
        tail: the log, as far as it has been read.
        version: a number that changes whenever the state does (the page redraws on a new one).

    Returns:
        ``path``, ``version``, ``status`` and ``message`` (see :class:`LogTail`), ``summary``
        (one line), ``records`` (read in all), ``kept``, ``first_step`` and ``last_step`` (of
        the kept records; ``None`` before the first), ``problems`` (the last record's),
        ``events``, ``errors`` and ``skipped``, ``behind``, and ``figures`` and ``tables``
        described as data (empty before the first record).
    """
    from normlab.doctor.view import training_figure

    records = list(tail.records)
    last = records[-1] if records else None
    return {
        "path": str(tail.path),
        "version": version,
        "status": tail.status,
        "message": tail.message,
        "summary": _summary(tail),
        "records": tail.count,
        "kept": len(records),
        "first_step": records[0]["step"] if records else None,
        "last_step": last["step"] if last else None,
        "problems": last["problems"] if last else [],
        "events": events(records),
        "errors": list(tail.errors),
        "skipped": tail.skipped,
        "behind": tail.behind,
        "figures": [training_figure(records).to_dict()] if records else [],
        "tables": [_layer_table(last)] if last else [],
    }


class WatchLog:
    """The one log a lab follows (``normlab lab --watch-log``), shared by all its requests.

    :meth:`state` looks at the file at most once every ``interval`` seconds, whoever asks, and
    rebuilds the state only when the look found a change. Thread-safe: requests call it from
    worker threads.

    Args:
        path: the log; it may not exist yet.
        interval: the least time between two looks at the file, in seconds.

    Raises:
        WatchLogError: ``path`` is a directory or cannot be read (see :func:`check_path`).
    """

    def __init__(self, path: str | os.PathLike[str], interval: float = POLL_S / 2) -> None:
        self.tail = LogTail(check_path(path).absolute())
        self.interval = interval
        self.closed = False  # set when the lab shuts down: the streams end
        self._lock = threading.Lock()
        self._looked = -math.inf
        self._version = 0
        self._state: dict[str, Any] | None = None

    @property
    def path(self) -> Path:
        return self.tail.path

    def state(self) -> dict[str, Any]:
        """The log's current :func:`watch_state` (its ``version`` goes up on every change)."""
        with self._lock:
            now = time.monotonic()
            if self._state is None or now - self._looked >= self.interval:
                self._looked = now
                if self.tail.poll() or self._state is None:
                    self._version += 1
                    self._state = watch_state(self.tail, self._version)
            return self._state

    def close(self) -> None:
        """End every stream of the log (at their next look)."""
        self.closed = True
