"""The lab's one run manager: experiment runs, cached, and the live training sessions, bounded.

A :class:`Runner` runs what the lab streams, off the event loop in threads of its own, and
stops all of it when the lab shuts down (:meth:`Runner.cancel`; :meth:`Runner.resume` when
it starts again). Two kinds of run:

- an experiment run: validated, cached by the full parameter set (below), queued with
  :attr:`Runner.max_queued`, abandoned when every client has gone;
- a live session of the ``/train`` page (:class:`~normlab.lab.trainruns.Run`): the Runner
  holds a place for it while it is built (:meth:`Runner.book`), then its slot once it is built
  (:meth:`Runner.admit`), at most :attr:`Runner.max_sessions` of both at once, until its
  client leaves (:meth:`Runner.release`, during the build too); its build and steps take the
  Runner's threads kept for sessions (:meth:`Runner.in_session_thread`). What its stream
  sends is :mod:`normlab.lab.trainruns`'s;
- a background job (a sweep started from the lab, :mod:`normlab.lab.labsweeps`): no client
  waits for it, so it runs in the Runner's one job thread, one job at a time, at most
  :attr:`Runner.max_waiting_jobs` waiting (:meth:`Runner.submit`), and stops at its next check
  when the lab shuts down (:meth:`Runner.finish_jobs` waits for that).

The cache key is the experiment name plus every parameter *after* validation and defaults, so
``{}`` and ``{"depth": 10}`` for ``drift`` share one entry. Concurrent requests for the same key
wait for one computation instead of starting several. An answer is the result's ``to_dict()``
with its figure descriptions and tables beside it (``figures``, ``tables``): what a page draws.

A run that every one of its requests has given up on stops at its next step: a learner who
drags a slider past a long setting (a bn-lr at its maxima trains for several seconds) would
otherwise wait for it before the run they now want gets the CPU. After a computation the freed
memory goes back to the system (:func:`trim`).

A request that came from another site (``refuse``, see :mod:`normlab.lab.security`) is given
a finished answer the cache holds and nothing else: it starts no run and joins none
(:class:`RunRefused`). The pages' answers are *kept* (``keep``): a lesson's, and an experiment
page's run of its defaults. They are never evicted, and outside the bounds, so that ad-hoc
requests, however many, never make a page compute again; they are a fixed set (the lesson
templates' calls, one run per registered experiment), so the cache stays bounded.

Kept answers also go to disk (:mod:`normlab.lab.answers`): a kept answer the cache lacks is
looked up in the Runner's :class:`~normlab.lab.answers.AnswerStore` before it is computed,
and written there once computed, so a lab started again on the same machine shows its lessons
and experiment pages at once. Ad-hoc runs never touch the store.
"""

from __future__ import annotations

import asyncio
import ctypes
import json
import math
import sys
import threading
import time
import weakref
from collections import OrderedDict, deque
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any, Literal, NamedTuple, Protocol, TypeVar

import anyio.to_thread

from normlab.experiments import (
    Experiment,
    Live,
    Result,
    get_experiment,
    params_dict,
    run_experiment,
    script,
)
from normlab.lab.answers import AnswerStore, default_path

T = TypeVar("T")


class RunCancelled(Exception):
    """The lab is shutting down: the run stopped at its next step, or did not start."""


class RunAbandoned(Exception):
    """Every request waiting for the run has gone (its client disconnected): it stopped."""


class RunRefused(Exception):
    """The request came from another site and the cache holds no finished answer for it: no
    run starts for it (its message says why)."""


class RunBusy(Exception):
    """:attr:`Runner.max_queued` requests wait for runs already, or :attr:`Runner.max_sessions`
    sessions train already: this one is refused."""


class LiveSession(Protocol):
    """What a :class:`Runner` needs of a live session to hold its slot (the ``/train`` page's
    :class:`~normlab.lab.trainruns.Run` is one): its id, its setups (a compared run trains two
    and counts two), whether it has ended, and how to end it (from any thread)."""

    @property
    def id(self) -> str: ...

    @property
    def setups(self) -> Mapping[str, object]: ...

    @property
    def closed(self) -> bool: ...

    def close(self) -> None: ...


def _sides(sessions: Mapping[str, LiveSession]) -> int:
    """The sides ``sessions`` train (a compared run counts two), the ended ones aside."""
    return sum(len(s.setups) for s in sessions.values() if not s.closed)


@dataclass(eq=False)
class _Entry:
    """One cache entry: the run's future and who waits for it."""

    future: Future[dict[str, Any]] = field(default_factory=Future)
    waiters: int = 0  # requests waiting that may leave (see Waiter)
    pinned: bool = False  # someone waits who never leaves (the warm-up, a plain run() call)
    kept: bool = False  # a lesson's answer: never evicted, outside the bounds
    abandoned: threading.Event = field(default_factory=threading.Event)
    body: bytes | None = None  # the value as JSON, rendered once (see Runner.arun_json)
    watched: bool = False  # a stream reads its frames (see Runner.astream): make them
    frame: tuple[int, str] | None = None  # (its number, the latest frame as JSON)


class Waiter:
    """One request's interest in a run of ``runner``, given to :meth:`Runner.run`;
    :meth:`leave` when the client has gone. The run stops once every request waiting for it
    has left."""

    def __init__(self, runner: Runner, watches: bool = False) -> None:
        self.gone = False
        self.watches = watches  # a stream reads the run's frames: make them from the start
        self._runner = runner
        self._entry: _Entry | None = None  # the run it waits for (set by Runner.run)

    def leave(self) -> None:
        runner = self._runner
        with runner._lock:
            if self.gone:
                return
            self.gone = True
            entry = self._entry
            if entry is None:  # not waiting yet: run() will refuse to start for it
                return
            entry.waiters -= 1
            if entry.waiters == 0 and not entry.pinned and not entry.future.done():
                entry.abandoned.set()
                runner.abandoned += 1


THREADS = 4
"""Worker threads a Runner's requests use, its own (the runs take turns on the engine anyway):
requests waiting for runs never hold the threads that page routes are answered in."""
MAX_QUEUED = 64
"""Requests that may wait for (or be in) a run at once; one more is refused (:class:`RunBusy`)."""
MAX_BYTES = 256 << 20
"""What the answers a Runner keeps may add up to, counted as their JSON (the parsed values
beside it take a few times more); the least recently used go first."""
MAX_SESSIONS = 4
"""Live sessions training at once (a compared run has two); one more is refused (503)."""
MAX_WAITING_JOBS = 4
"""Background jobs (sweeps started from the lab) that may wait while one computes; one more is
refused (:class:`RunBusy`). Each is bounded (:mod:`normlab.lab.labsweeps`), so the line is too:
a few sweeps a learner queued from the page, not a cluster's work."""

Job = Callable[[Callable[[], None]], None]
"""A background job: called as ``job(check)`` in the Runner's job thread; ``check()`` raises
:class:`RunCancelled` once the lab stops, and the job calls it between its units of work."""


class _Threads(NamedTuple):
    """A Runner's worker threads in one event loop (a limiter belongs to the loop it was made
    in): :data:`THREADS` for experiment requests, one per session slot for the live sessions,
    so that a session's next frame never waits behind a long experiment run, nor a run
    behind the sessions."""

    experiments: anyio.CapacityLimiter
    sessions: anyio.CapacityLimiter


class Runner:
    """The lab's run manager: a thread-safe LRU cache in front of
    :func:`normlab.experiments.run_experiment`, bounded in entries and in bytes, and the slots
    of the live sessions, at most ``max_sessions`` at once.

    ``answers``: where kept answers persist (see the module docstring): an
    :class:`~normlab.lab.answers.AnswerStore`, ``None`` for nowhere, or ``"default"``, the
    file :func:`~normlab.lab.answers.default_path` names when the Runner is made (the user's
    cache folder, or ``$NORMLAB_ANSWERS``).
    """

    def __init__(
        self,
        max_entries: int = 512,
        max_bytes: int = MAX_BYTES,
        max_sessions: int = MAX_SESSIONS,
        answers: AnswerStore | Literal["default"] | None = "default",
    ) -> None:
        if max_entries < 1:
            raise ValueError(f"max_entries must be at least 1, got {max_entries}")
        if max_bytes < 1:
            raise ValueError(f"max_bytes must be at least 1, got {max_bytes}")
        if max_sessions < 1:
            raise ValueError(f"max_sessions must be at least 1, got {max_sessions}")
        self.max_entries = max_entries
        self.max_bytes = max_bytes
        self.max_queued = MAX_QUEUED
        self.max_sessions = max_sessions
        if answers == "default":
            path = default_path()
            answers = None if path is None else AnswerStore(path)
        self.answers: AnswerStore | None = answers
        self.queued = 0  # requests waiting for a run or in one, now
        self._threads_of: weakref.WeakKeyDictionary[Any, _Threads] = weakref.WeakKeyDictionary()
        self._sessions: dict[str, LiveSession] = {}  # by id, each until its stream has ended
        self._booked: dict[str, LiveSession] = {}  # by id, each while it is built
        self.bytes = 0  # the JSON of the answers held
        self._cache: OrderedDict[str, _Entry] = OrderedDict()
        self._lock = threading.Lock()
        self.hits = 0  # answered from this key's entry
        self.misses = 0  # computed
        self.stored = 0  # kept answers read from the answers store instead
        self.abandoned = 0  # runs stopped because every request for them had gone
        self._cancelled = threading.Event()
        self.max_waiting_jobs = MAX_WAITING_JOBS
        self._jobs: deque[tuple[str, Job]] = deque()  # (key, job), waiting, in order
        self._job: str | None = None  # the key of the job computing now
        self._job_thread: threading.Thread | None = None  # alive while jobs run or wait

    def cancel(self) -> None:
        """Stop the runs in progress at their next step, end every live session after its step
        in progress, and refuse new ones of either kind (``RunCancelled``).

        The lab calls it when it starts shutting down, so that Ctrl+C does not wait for a long
        run nobody will read, nor for a session's stream, which never ends by itself. Cached
        answers are still given. The background job computing stops at its next check, those
        waiting are dropped (:meth:`submit`).
        """
        with self._lock:  # no session is admitted between the flag and the closing
            self._cancelled.set()
            sessions = [*self._sessions.values(), *self._booked.values()]
            self._jobs.clear()  # the waiting jobs never start; the one computing stops
        for session in sessions:
            session.close()

    def resume(self) -> None:
        """Run and admit again after :meth:`cancel` (an app that is started again)."""
        self._cancelled.clear()

    @property
    def cancelled(self) -> bool:
        """Whether :meth:`cancel` was called (and no :meth:`resume` since): the lab stops."""
        return self._cancelled.is_set()

    @property
    def sessions(self) -> int:
        """The live sessions training now (a compared run counts two)."""
        with self._lock:
            return _sides(self._sessions)

    @property
    def building(self) -> int:
        """The sessions being built now, each with a place booked (:meth:`book`)."""
        with self._lock:
            return _sides(self._booked)

    def _refuse(self, session: LiveSession, replaces: str | None) -> None:
        """End the session ``session`` replaces; raise if ``session`` may not have a place."""
        old = (self._sessions.get(replaces) or self._booked.get(replaces)) if replaces else None
        if old is not None:
            old.close()
        if self._cancelled.is_set():
            raise RunCancelled("the lab is stopping")
        going = _sides(self._sessions) + _sides(self._booked)
        if going + len(session.setups) > self.max_sessions:
            raise RunBusy(
                f"the lab trains at most {self.max_sessions} sessions at once and {going} "
                "are going (a compared run counts two): close another page that trains, "
                "then try again"
            )

    def book(self, session: LiveSession, replaces: str | None = None) -> None:
        """Hold a place for ``session`` while it is built, ending the session it ``replaces``
        first (its page opened a new setting in its place). A place counts against
        :attr:`max_sessions` as a slot does, so that a full lab refuses before a stream
        starts; :meth:`admit` makes it the session's slot once built, :meth:`release` gives it
        back (its client went during the build).

        Raises:
            RunCancelled: the lab is stopping.
            RunBusy: :attr:`max_sessions` sessions train or are built already.
        """
        with self._lock:
            self._refuse(session, replaces)
            self._booked[session.id] = session

    def admit(self, session: LiveSession, replaces: str | None = None) -> None:
        """Hold a slot for the built ``session`` until :meth:`release`: its booked place
        (:meth:`book`), or a new one, ending the session it ``replaces`` first.

        Raises:
            RunCancelled: the lab is stopping.
            RunBusy: :attr:`max_sessions` sessions train already (one that booked no place).
        """
        with self._lock:
            if self._booked.pop(session.id, None) is not session:
                self._refuse(session, replaces)
            elif self._cancelled.is_set():
                raise RunCancelled("the lab is stopping")
            self._sessions[session.id] = session

    def session(self, session_id: str) -> LiveSession | None:
        """The live session ``session_id``, or ``None`` once it has ended (or never was)."""
        with self._lock:
            session = self._sessions.get(session_id)
        return None if session is None or session.closed else session

    def release(self, session: LiveSession) -> None:
        """End ``session`` and give its slot or place back (its stream has ended); idempotent."""
        session.close()
        with self._lock:
            for held in (self._sessions, self._booked):
                if held.get(session.id) is session:
                    del held[session.id]

    def submit(self, key: str, job: Job) -> int:
        """Run ``job(check)`` in this Runner's job thread once the jobs submitted before it have
        ended, and answer its place in the line: 0 when it starts at once, ``n`` when ``n``
        jobs compute or wait before it. One job computes at a time (it holds the experiments'
        ``ENGINE`` for each of its runs, as any run does); ``check()`` raises
        :class:`RunCancelled` once :meth:`cancel` is called. A job of the same ``key`` already
        waiting or computing is not queued again: its place is answered.

        Raises:
            RunCancelled: the lab is stopping.
            RunBusy: :attr:`max_waiting_jobs` jobs wait already.
        """
        with self._lock:
            if self._cancelled.is_set():
                raise RunCancelled("the lab is stopping")
            ahead = [self._job] if self._job is not None else []
            line = [*ahead, *(k for k, _ in self._jobs)]
            if key in line:
                return line.index(key)
            if len(self._jobs) >= self.max_waiting_jobs:
                raise RunBusy(
                    f"{len(self._jobs)} sweeps wait already behind the one computing (at most "
                    f"{self.max_waiting_jobs}): try again when one has ended"
                )
            self._jobs.append((key, job))
            if self._job_thread is None:
                self._job_thread = threading.Thread(
                    target=self._work, name="normlab-jobs", daemon=True
                )
                self._job_thread.start()
            return len(line)

    def _work(self) -> None:
        """The job thread: the waiting jobs, in order, until none is left (or the lab stops)."""
        while True:
            with self._lock:
                if not self._jobs:
                    self._job, self._job_thread = None, None
                    return
                self._job, job = self._jobs.popleft()
            try:
                job(self._check_job)
            except RunCancelled:
                pass  # the lab stops: what the job stored stays
            except Exception as exc:  # no client waits for it: say it where the lab logs
                print(f"normlab lab: a background job failed: {exc!r}", file=sys.stderr)
            finally:
                trim()

    def _check_job(self) -> None:
        if self._cancelled.is_set():
            raise RunCancelled("the lab is shutting down")

    def finish_jobs(self, timeout: float | None = None) -> bool:
        """Wait (at most ``timeout`` seconds) until no background job computes or waits;
        whether none does. After :meth:`cancel`, the one computing stops at its next check."""
        with self._lock:
            thread = self._job_thread
        if thread is not None:
            thread.join(timeout)
            return not thread.is_alive()
        return True

    def _check(self, entry: _Entry | None) -> None:
        if self._cancelled.is_set():
            raise RunCancelled("the lab is shutting down")
        if entry is not None and entry.abandoned.is_set():
            raise RunAbandoned("every request for this run has gone")

    @staticmethod
    def key(name: str, params: dict[str, Any]) -> str:
        """Validate ``params`` (raises ``ParameterError``/``ParameterTypeError``) -> cache key."""
        return _key(name, get_experiment(name).make_params(params))

    def run(
        self,
        name: str,
        params: dict[str, Any],
        waiter: Waiter | None = None,
        *,
        refuse: str | None = None,
        keep: bool = False,
    ) -> dict[str, Any]:
        """The answer for the run (see the module docstring), computed once per distinct full
        parameter set.

        ``waiter``: this request's :class:`Waiter`; when it and every other request waiting for
        the same run have left, the run stops at its next step and this call raises
        :class:`RunAbandoned`. Without one, the caller waits for good (the warm-up does).
        ``refuse``: why this request may start no run (it came from another site): only a
        finished cached answer is given, else :class:`RunRefused`. ``keep``: a lesson's answer,
        never evicted.
        """
        return self._run(name, params, waiter, refuse, keep).future.result()

    def _run(
        self,
        name: str,
        params: dict[str, Any],
        waiter: Waiter | None,
        refuse: str | None = None,
        keep: bool = False,
    ) -> _Entry:
        """:meth:`run`, returning the finished cache entry (its future raises a failed run's
        error here)."""
        if waiter is not None and waiter._runner is not self:
            raise ValueError("waiter belongs to another Runner: make it with Waiter(this runner)")
        key = self.key(name, params)
        with self._lock:
            if waiter is not None and waiter.gone:
                raise RunAbandoned("the request had gone before its run started")
            entry = self._cache.get(key)
            if entry is not None and entry.abandoned.is_set():
                entry = None  # stopping: start afresh (its clean-up spares the new entry)
            if refuse is not None and (entry is None or not entry.future.done()):
                raise RunRefused(refuse)
            if entry is not None:
                self._cache.move_to_end(key)
                self.hits += 1
                owner = False
            else:
                entry = _Entry()
                self._cache[key] = entry
                owner = True
                self._evict(entry, math.inf)  # one more entry (its bytes come later)
            # an ad-hoc run's finished answer, kept from now on: stored below (a run still going
            # stores it itself when it ends, as it does every kept answer)
            store_now = keep and not entry.kept and not owner and entry.future.done()
            if keep and not entry.kept:
                entry.kept = True
                self.bytes -= len(entry.body or b"")  # counted no more
            # Counted before the lock is let go, so the run cannot be abandoned under a caller
            # still waiting: RunAbandoned reaches only callers whose waiter has left.
            if waiter is None:
                entry.pinned = True
            else:
                entry.waiters += 1
                entry.watched = entry.watched or waiter.watches
                waiter._entry = entry
        if owner:
            self._compute(key, entry, name, params)
        value = entry.future.result()
        if store_now and self.answers is not None:
            self.answers.put(self.answers.key(key), name, render(value))
        return entry

    def _compute(self, key: str, entry: _Entry, name: str, params: dict[str, Any]) -> None:
        try:
            disk_key = self.answers.key(key) if entry.kept and self.answers is not None else None
            if disk_key is not None and self._load(disk_key, entry):
                return
            with self._lock:
                self.misses += 1
            self._check(entry)  # refuse at once while shutting down

            experiment = get_experiment(name)
            # steps done, of the total: known before the first step (a frame may come first)
            count = [0, experiment.steps(experiment.make_params(params)) or 0]

            def progress(done: int, total: int) -> None:
                count[:] = done, total
                self._check(entry)

            live = _framer(entry, count, experiment.unit) if experiment.streams else None
            result = run_experiment(name, progress=progress, live=live, **params)
            value = answer(experiment, result)
            del result  # its tensors and lists go now, and their memory with trim() below
            trim()
            entry.future.set_result(value)
        except BaseException as exc:
            with self._lock:
                if self._cache.get(key) is entry:
                    del self._cache[key]
            trim()  # a run stopped halfway (abandoned, cancelled) held memory too
            entry.future.set_exception(exc)
            return
        if entry.kept and self.answers is not None:  # kept now, by this run or another
            self.answers.put(disk_key or self.answers.key(key), name, render(value))

    def _load(self, disk_key: str, entry: _Entry) -> bool:
        """Finish ``entry`` with the answer the store keeps under ``disk_key``, if it does."""
        assert self.answers is not None
        value = self.answers.load(disk_key)  # None for a damaged row: computed, written over
        if value is None:
            return False
        with self._lock:
            self.stored += 1
        entry.future.set_result(value)
        return True

    async def arun_json(
        self,
        name: str,
        params: dict[str, Any],
        gone: Callable[[], Awaitable[None]] | None = None,
        refuse: str | None = None,
    ) -> bytes:
        """:meth:`run` in a worker thread, so the event loop keeps answering meanwhile, and the
        answer as UTF-8 JSON, rendered once per cache entry (a cached answer is sent as is).

        ``gone``: an async function that returns when the request's client has disconnected;
        the run is then left (see :class:`Waiter`), and this raises :class:`RunAbandoned`
        if it stopped. ``refuse``: as for :meth:`run`.
        """
        key = self.key(name, params)  # validate on the loop: bad input answers at once
        entry = self._finished(key)
        if entry is not None:
            return self._body(entry)
        if refuse is not None:
            raise RunRefused(refuse)
        if gone is None:
            return await self._off_loop(self._run_json, name, params, None)
        waiter = Waiter(self)
        result: bytes | None = None
        error: Exception | None = None

        async def watch() -> None:
            await gone()
            waiter.leave()

        async with anyio.create_task_group() as group:
            group.start_soon(watch)
            try:
                result = await self._off_loop(self._run_json, name, params, waiter)
            except Exception as exc:  # raised below, not wrapped in the group's ExceptionGroup
                error = exc
            group.cancel_scope.cancel()
        if error is not None:
            raise error
        assert result is not None
        return result

    def _threads(self) -> _Threads:
        """This Runner's worker threads in the running event loop (made on first use)."""
        loop = asyncio.get_running_loop()
        threads = self._threads_of.get(loop)
        if threads is None:
            sessions = anyio.CapacityLimiter(self.max_sessions)
            threads = self._threads_of[loop] = _Threads(anyio.CapacityLimiter(THREADS), sessions)
        return threads

    async def _off_loop(self, fn: Callable[..., T], *args: Any) -> T:
        """``fn(*args)`` in one of this Runner's own :data:`THREADS` for experiments; beyond
        :attr:`max_queued` requests at once, :class:`RunBusy`."""
        with self._lock:
            if self.queued >= self.max_queued:
                raise RunBusy(f"{self.queued} requests wait for runs already: try again shortly")
            self.queued += 1
        try:
            return await anyio.to_thread.run_sync(fn, *args, limiter=self._threads().experiments)
        finally:
            with self._lock:
                self.queued -= 1

    async def in_session_thread(self, fn: Callable[..., T], *args: Any, abandon: bool = False) -> T:
        """``fn(*args)`` (a live session's build, steps or frame) in one of this Runner's
        threads kept for sessions, one per slot: a session's stream waits for one at a time,
        so its slot bounds them and no queue is needed. With ``abandon``, a stream cancelled
        meanwhile (its client gone) stops waiting at once, and ``fn`` ends on its own."""
        limiter = self._threads().sessions
        return await anyio.to_thread.run_sync(fn, *args, limiter=limiter, abandon_on_cancel=abandon)

    def _run_json(self, name: str, params: dict[str, Any], waiter: Waiter | None) -> bytes:
        return self._body(self._run(name, params, waiter))  # rendered here, off the event loop

    def _finished(self, key: str) -> _Entry | None:
        """The finished entry of ``key`` (a hit, now the most recently used), or ``None``."""
        with self._lock:
            entry = self._cache.get(key)
            if entry is None or not entry.future.done() or entry.future.exception() is not None:
                return None
            self.hits += 1
            self._cache.move_to_end(key)
            return entry

    def cached(self, name: str, params: dict[str, Any]) -> bytes | None:
        """The run's answer as :meth:`arun_json` gives it, if the cache holds it finished (a
        hit), else ``None``: computes nothing (validates ``params``)."""
        entry = self._finished(self.key(name, params))
        return None if entry is None else self._body(entry)

    def _evict(self, newest: _Entry, max_bytes: float) -> None:
        """Drop the least recently used entries, kept ones aside, until at most
        :attr:`max_entries` are left and, of the finished ones, ``max_bytes`` (``newest``,
        the one just asked for or rendered, always stays). Called with the lock held."""
        loose = [(key, e) for key, e in self._cache.items() if not e.kept]
        count = len(loose)
        for key, old in loose:
            if count <= self.max_entries and self.bytes <= max_bytes:
                break
            if old is not newest and (count > self.max_entries or old.future.done()):
                del self._cache[key]
                self.bytes -= len(old.body or b"")
                count -= 1

    def _body(self, entry: _Entry) -> bytes:
        """``entry``'s value as JSON, rendered on first use (two threads at once render the
        same), then counted against :attr:`max_bytes` (unless kept): the oldest finished
        answers go until the rest fit (the newest one always stays)."""
        body = entry.body
        if body is not None:
            return body
        body = render(entry.future.result())
        trim()  # the text was as large as the body
        with self._lock:
            if entry.body is not None:  # another thread rendered it meanwhile
                return entry.body
            entry.body = body
            if not entry.kept and any(e is entry for e in self._cache.values()):
                self.bytes += len(body)
            self._evict(entry, self.max_bytes)
        return body

    async def astream(
        self, name: str, params: dict[str, Any]
    ) -> AsyncIterator[tuple[str, str | bytes]]:
        """The run as it goes: ``("frame", text)``, the JSON of ``{done, total, unit, figures}``, at
        most every :data:`FRAME_S` while it computes (an experiment that streams), then
        ``("result", body)``, the answer as :meth:`arun_json` gives it (UTF-8 JSON). A cached
        answer comes at once.

        Closing the iterator (the client has gone) leaves the run, which stops at its next step
        once nobody else waits for it. Bad parameters raise before the first item.
        """
        key = self.key(name, params)  # validate first: bad input raises at once
        entry = self._finished(key)
        if entry is not None:
            yield "result", self._body(entry)
            return
        waiter = Waiter(self, watches=True)
        run = asyncio.ensure_future(self._off_loop(self._run_json, name, params, waiter))
        run.add_done_callback(_retrieved)
        shown = 0
        try:
            while not run.done():
                # looked for often until the first frame (a grid's first row comes in tens of
                # ms), then every FRAME_S
                await asyncio.wait({run}, timeout=FRAME_S if shown else FIRST_FRAME_S)
                entry = waiter._entry
                if entry is None:
                    continue
                entry.watched = True
                frame = entry.frame
                if frame is not None and frame[0] != shown and not run.done():
                    shown = frame[0]
                    yield "frame", frame[1]
            yield "result", run.result()
        finally:
            waiter.leave()


FRAME_S = 0.1
"""The shortest time between two frames of a streamed run."""
FIRST_FRAME_S = 0.01
"""How often a stream looks for its run's first frame (the frame is made as soon as the run has
one: a stream's waiter marks its run watched from the start)."""
FRAME_SHARE = 0.2
"""The most of a streamed run's time that making its frames may take: a frame that took
``t`` to make waits ``t / FRAME_SHARE`` before the next (a big result makes fewer frames)."""


def _framer(entry: _Entry, count: list[int], unit: str = "step") -> Live:
    """The ``live`` callback that keeps ``entry.frame`` fresh while a stream reads it:
    :func:`~normlab.experiments.run_experiment` calls it at every yield of the experiment's
    code (the result so far), and it makes the partial result's figures and how many steps are
    done (of ``count``'s total, each one ``unit``: "step", "layer", ...) into JSON, in the
    run's thread, at most every :data:`FRAME_S` and within :data:`FRAME_SHARE` of its time."""
    due = -math.inf

    def live(partial: Callable[[], Result]) -> None:
        nonlocal due
        started = time.monotonic()
        if not entry.watched or started < due:
            return
        figures = [f.to_dict() for f in partial().figures()]
        frame = {"done": count[0], "total": count[1], "unit": unit, "figures": figures}
        text = json.dumps(frame, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
        number = entry.frame[0] + 1 if entry.frame is not None else 1
        entry.frame = (number, text)
        spent = time.monotonic() - started
        due = started + max(FRAME_S, spent / FRAME_SHARE)

    return live


def _libc_trim() -> Callable[[int], int] | None:
    """glibc's ``malloc_trim``, or None where the C library has none (musl, macOS)."""
    try:
        fn = ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError):
        return None
    fn.argtypes, fn.restype = [ctypes.c_size_t], ctypes.c_int
    return fn


_MALLOC_TRIM = _libc_trim()


def trim() -> None:
    """Give the memory the allocator holds free back to the system (glibc's ``malloc_trim(0)``).

    A large run frees its tensors and lists when it ends, but glibc keeps freed heap memory
    for reuse: in each thread's arena, and below its (growing) mmap threshold, so after a
    boundary sweep the lab held gigabytes it no longer used (issue 19). Trimming costs a few
    milliseconds, once per computed answer. Elsewhere it does nothing.
    """
    if _MALLOC_TRIM is not None:
        _MALLOC_TRIM(0)


def _retrieved(task: asyncio.Future[Any]) -> None:
    """Take a stream's run's outcome, so that one nobody read is not reported as lost."""
    if not task.cancelled():
        task.exception()


def answer(experiment: Experiment, result: Result) -> dict[str, Any]:
    """What the lab sends for a result: its data, its figures described as data, its tables,
    and what the experiment's script prints for it (``output``)."""
    return {
        **result.to_dict(),
        "figures": [f.to_dict() for f in result.figures()],
        "tables": [t.to_dict() for t in result.tables()],
        "output": script.output(experiment, result),
    }


def render(value: dict[str, Any]) -> bytes:
    """An answer as UTF-8 JSON, as Starlette's JSONResponse renders it: ``to_dict()`` values
    are plain JSON types, NaN and infinities already ``None``, so FastAPI's
    ``jsonable_encoder`` walk is not needed."""
    return json.dumps(value, ensure_ascii=False, allow_nan=False, separators=(",", ":")).encode()


def _key(name: str, full: object) -> str:
    return json.dumps([name, params_dict(full)], sort_keys=True)
