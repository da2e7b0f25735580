"""Helper processes for work that should run beside the calling thread, not share its GIL.

Two small training runs on two Python threads do not take the time of one: the Python side of
every op holds the GIL, and each hand-over wakes the other thread, which on a small VM costs
about as much as the op (``benchmarks/widgets.py``, floor section: both runs on threads took
1.2-1.7x the longer run alone in my runs). A helper *process* has an interpreter of its own, so
a run there overlaps with one in the calling thread up to what sharing the two cores costs
(1.0-1.5x the longer run alone, mostly near the low end).

A helper is a fresh interpreter (the ``spawn`` start method: no state forked from a threaded
parent) that imports torch and runs its ``initializer`` once, which takes seconds. Nothing
starts one implicitly: a long-lived process that serves many runs (``normlab lab``) calls
:func:`start` at startup and :func:`stop` at shutdown, and callers ask :func:`submit`, which
answers ``None`` until the helpers are ready, and while every helper is busy with another
caller's work, so that the caller does the work itself instead of waiting for an import or
queueing behind someone else's run. Work handed over can be called off (:func:`cancel`): long
work checks :func:`stopping` now and then.

Example::

    >>> from normlab import workers
    >>> workers.submit(abs, -1) is None  # none started
    True
"""

from __future__ import annotations

import itertools
import multiprocessing
import os
import signal
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from contextlib import contextmanager
from multiprocessing.process import BaseProcess
from typing import Any, TypeVar

__all__ = [
    "BrokenProcessPool",
    "HelperPool",
    "cancel",
    "discard",
    "running",
    "start",
    "stop",
    "stopping",
    "submit",
]

T = TypeVar("T")


def _ready() -> bool:
    """The first task every helper pool runs: it completes once a helper has initialized."""
    return True


# In a helper: its pool's closing flag (a multiprocessing Event) and its cancelled jobs (a
# shared array: slot ``job % _SLOTS`` holds the number of a cancelled job), see stopping(); and
# the number of the job it runs now (0: none).
_SLOTS = 64
_closing: Any = None
_cancelled: Any = None
_job = 0


def stopping() -> bool:
    """Whether the work running in this helper should end early.

    It should when its pool is closing (:meth:`HelperPool.close` says so before it waits for
    the work in progress) or when its caller called it off (:func:`cancel`). ``False`` outside
    a helper. Long work that checks it now and then (``normlab.train``'s runs check it every
    step) stops instead of finishing a result nobody will read.
    """
    if _closing is None:
        return False
    if _closing.is_set():
        return True
    return _job > 0 and _cancelled is not None and _cancelled[_job % _SLOTS] == _job


def _run_job(job: int, fn: Callable[..., T], *args: Any) -> T:
    """Run one submitted call in a helper, numbered so that :func:`cancel` can reach it."""
    global _job
    _job = job
    try:
        return fn(*args)
    finally:
        _job = 0


def _start_helper(
    initializer: Callable[[], None] | None, closing: Any = None, cancelled: Any = None
) -> None:
    """Run first in every helper: end it when its parent ends, then ``initializer``.

    A helper blocks reading its task queue, and holds that queue's write end itself, so it
    would never see the queue close: a parent that dies without :func:`stop` (``kill -9``, a
    crash) would leave it running for good. ``multiprocessing.parent_process().join()`` waits
    on the parent's sentinel, which becomes readable when the parent exits, however it exits.
    """
    global _closing, _cancelled
    _closing, _cancelled = closing, cancelled
    parent = multiprocessing.parent_process()
    if parent is not None:

        def watch(parent: BaseProcess = parent) -> None:
            parent.join()
            os._exit(0)

        threading.Thread(target=watch, name="normlab-helper-watch", daemon=True).start()
    if initializer is not None:
        initializer()


@contextmanager
def _sigint_blocked() -> Iterator[None]:
    """Block SIGINT in this thread for the body: helpers spawned meanwhile keep it blocked.

    Ctrl+C is the parent's to handle (it stops its helpers). A terminal sends it to the whole
    foreground process group, helpers included, and a helper that took it printed a traceback
    from wherever it was (its task queue, or its imports while starting). A child starts with
    the signal mask of the thread that forked it, so SIGINT never reaches a helper spawned in
    the body; a Ctrl+C that comes meanwhile stays pending and reaches this process after it.
    """
    old = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


class HelperPool:
    """``processes`` spawned helper processes, each running ``initializer`` once at start.

    Args:
        processes: how many helpers (at least 1).
        initializer: a module-level function (it is pickled by name) run in each helper first.
    """

    def __init__(self, processes: int = 1, initializer: Callable[[], None] | None = None) -> None:
        if not isinstance(processes, int) or isinstance(processes, bool):
            raise TypeError(f"processes must be an integer, got {type(processes).__name__}")
        if processes < 1:
            raise ValueError(f"processes must be at least 1, got {processes}")
        context = multiprocessing.get_context("spawn")
        self.processes = processes
        self._closing = context.Event()  # see stopping()
        self._cancelled = context.RawArray("q", _SLOTS)  # see stopping() and cancel()
        self._executor = ProcessPoolExecutor(
            processes,
            mp_context=context,
            initializer=_start_helper,
            initargs=(initializer, self._closing, self._cancelled),
        )
        with _sigint_blocked():  # submit() spawns helpers as work needs them
            self._ready: Future[bool] = self._executor.submit(_ready)
        self._lock = threading.Lock()
        self._numbers = itertools.count(1)
        self._jobs: dict[Future[Any], int] = {}  # submitted and not done -> its number

    def ready(self) -> bool:
        """Whether a helper has started and initialized (without waiting)."""
        return self._ready.done() and self._ready.exception() is None

    def wait_ready(self, timeout: float | None = None) -> bool:
        """Wait up to ``timeout`` seconds for :meth:`ready`; return it."""
        try:
            self._ready.result(timeout)
        except Exception:  # a helper that failed to start answers False, as ready() does
            return False
        return True

    def submit(self, fn: Callable[..., T], *args: Any) -> Future[T]:
        """Run ``fn(*args)`` in a helper (``fn`` and ``args`` must pickle)."""
        with self._lock:
            future = self._submit(fn, args)
        return self._forget_when_done(future)

    def submit_if_idle(self, fn: Callable[..., T], *args: Any) -> Future[T] | None:
        """:meth:`submit`, or ``None`` when every helper has work already (queueing behind it
        would wait for someone else's run)."""
        with self._lock:  # (done futures may wait a moment for _forget: they don't count)
            busy = sum(not future.done() for future in self._jobs)
            if busy >= self.processes:
                return None
            future = self._submit(fn, args)
        return self._forget_when_done(future)

    def _submit(self, fn: Callable[..., T], args: tuple[Any, ...]) -> Future[T]:
        number = next(self._numbers)
        with _sigint_blocked():
            future: Future[T] = self._executor.submit(_run_job, number, fn, *args)
        self._jobs[future] = number
        return future

    def _forget_when_done(self, future: Future[T]) -> Future[T]:
        # Outside the lock: a job already done runs _forget at once, in this thread.
        future.add_done_callback(self._forget)
        return future

    def _forget(self, future: Future[Any]) -> None:
        with self._lock:
            self._jobs.pop(future, None)

    def cancel(self, future: Future[Any]) -> None:
        """Call off ``future``'s work: dropped if it has not started, else :func:`stopping`
        turns true in its helper. Nothing happens to work that is done or not this pool's."""
        if future.cancel():
            return
        with self._lock:
            number = self._jobs.get(future)
        if number is not None:
            self._cancelled[number % _SLOTS] = number

    def close(self) -> None:
        """Cancel what has not started, tell what has to stop (:func:`stopping`), wait for it,
        and end the helpers."""
        self._closing.set()
        self._executor.shutdown(wait=True, cancel_futures=True)


# The process-wide helpers: started by start(), shared by every caller of submit().
_lock = threading.Lock()
_pool: HelperPool | None = None
_config: tuple[int, Callable[[], None] | None] = (1, None)
_users = 0


def start(processes: int = 1, initializer: Callable[[], None] | None = None) -> HelperPool:
    """Start the process-wide helpers unless they run already; count one more user.

    Returns at once: the helpers import and initialize in the background. Each call must be
    paired with one :func:`stop`; the helpers end when the last user stops.
    """
    global _pool, _users, _config
    with _lock:
        if _pool is None:
            _pool = HelperPool(processes, initializer)
            _config = (processes, initializer)
        _users += 1
        return _pool


def stop() -> None:
    """Count one user less; end the helpers when none is left (waits for running work)."""
    global _pool, _users
    with _lock:
        _users = max(0, _users - 1)
        pool = _pool if _users == 0 else None
        if pool is not None:
            _pool = None
    if pool is not None:
        pool.close()


def running() -> HelperPool | None:
    """The process-wide helpers if they are started and ready, else ``None``."""
    pool = _pool
    return pool if pool is not None and pool.ready() else None


def submit(fn: Callable[..., T], *args: Any) -> Future[T] | None:
    """Run ``fn(*args)`` in a ready, idle helper; ``None`` if there is none (do the work yourself).

    A helper busy with another caller's work counts as none: waiting for it would add that
    run's time to this one's (two lab requests at once, or a run whose request was dropped and
    is still stopping). If the helper dies meanwhile, the future raises
    :class:`BrokenProcessPool` and fresh helpers replace the dead ones (see :func:`discard`).
    """
    pool = running()
    if pool is None:
        return None
    try:
        future = pool.submit_if_idle(fn, *args)
        if future is None:
            return None
    except BrokenProcessPool:
        discard(pool)
        return None
    except RuntimeError:  # shut down meanwhile by the last stop()
        return None

    def check(done: Future[T]) -> None:
        if not done.cancelled() and isinstance(done.exception(), BrokenProcessPool):
            discard(pool)

    future.add_done_callback(check)
    return future


def cancel(future: Future[Any]) -> None:
    """Call off work handed over by :func:`submit` (see :meth:`HelperPool.cancel`)."""
    pool = _pool
    if pool is not None:
        pool.cancel(future)
    else:
        future.cancel()


def discard(pool: HelperPool) -> None:
    """Replace ``pool``, whose helper died, by fresh helpers (while anyone uses them).

    Until the new ones are ready, :func:`submit` answers ``None``. The dead pool is closed on a
    thread of its own: this may run on the pool's own management thread, which can't join itself.
    """
    global _pool
    with _lock:
        if _pool is not pool:
            return  # replaced or stopped already
        _pool = HelperPool(*_config) if _users > 0 else None
    threading.Thread(target=pool.close, name="normlab-helpers-close", daemon=True).start()
