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
answers ``None`` until the helpers are ready (and whenever none are), so that the caller does
the work itself instead of waiting for an import.

Example::

    >>> from normlab import workers
    >>> workers.submit(abs, -1) is None  # none started
    True
"""

from __future__ import annotations

import multiprocessing
import os
import threading
from collections.abc import Callable
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from multiprocessing.process import BaseProcess
from typing import Any, TypeVar

__all__ = [
    "BrokenProcessPool",
    "HelperPool",
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


# In a helper: its pool's closing flag (a multiprocessing Event), see stopping().
_closing: Any = None


def stopping() -> bool:
    """Whether the pool running this helper is closing: long work should end early.

    ``False`` outside a helper. :meth:`HelperPool.close` sets it before it waits for the work
    in progress, so work that checks it now and then (``normlab.train``'s runs check it every
    step) lets a lab shut down without first finishing runs nobody will read.
    """
    return _closing is not None and bool(_closing.is_set())


def _start_helper(initializer: Callable[[], None] | None, closing: Any = None) -> None:
    """Run first in every helper: end it when its parent ends, then ``initializer``.

    A helper blocks reading its task queue, and holds that queue's write end itself, so it
    would never see the queue close: a parent that dies without :func:`stop` (``kill -9``, a
    crash) would leave it running for good. ``multiprocessing.parent_process().join()`` waits
    on the parent's sentinel, which becomes readable when the parent exits, however it exits.
    """
    global _closing
    _closing = closing
    parent = multiprocessing.parent_process()
    if parent is not None:

        def watch(parent: BaseProcess = parent) -> None:
            parent.join()
            os._exit(0)

        threading.Thread(target=watch, name="normlab-helper-watch", daemon=True).start()
    if initializer is not None:
        initializer()


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
        self._closing = context.Event()  # see stopping()
        self._executor = ProcessPoolExecutor(
            processes,
            mp_context=context,
            initializer=_start_helper,
            initargs=(initializer, self._closing),
        )
        self._ready: Future[bool] = self._executor.submit(_ready)

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
        return self._executor.submit(fn, *args)

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
    """Run ``fn(*args)`` in a ready helper; ``None`` if there is none (do the work yourself).

    If the helper dies meanwhile, the future raises :class:`BrokenProcessPool` and fresh
    helpers replace the dead ones (see :func:`discard`).
    """
    pool = running()
    if pool is None:
        return None
    try:
        future = pool.submit(fn, *args)
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
