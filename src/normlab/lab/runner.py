"""Runs experiments for the lab: validated, cached by the full parameter set, off the event loop.

The cache key is the experiment name plus every parameter *after* validation and defaults, so
``{}`` and ``{"depth": 10}`` for ``drift`` share one entry. Concurrent requests for the same key
wait for one computation instead of starting several. Where an experiment declares a ``mirror``
(``bn-lr``: toggling BatchNorm shows the same two runs), one computation answers both keys.
"""

from __future__ import annotations

import json
import threading
from collections import OrderedDict
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

import anyio.to_thread

from normlab.experiments import get_experiment, params_dict, run_experiment


class RunCancelled(Exception):
    """The lab is shutting down: the run stopped at its next step, or did not start."""


class Runner:
    """A thread-safe LRU cache in front of :func:`normlab.experiments.run_experiment`."""

    def __init__(self, max_entries: int = 512) -> None:
        if max_entries < 1:
            raise ValueError(f"max_entries must be at least 1, got {max_entries}")
        self.max_entries = max_entries
        self._cache: OrderedDict[str, Future[dict[str, Any]]] = OrderedDict()
        self._lock = threading.Lock()
        self.hits = 0  # answered from this key's entry
        self.misses = 0  # computed
        self.mirrored = 0  # answered from the mirror's entry (see run)
        self._cancelled = threading.Event()

    def cancel(self) -> None:
        """Stop the runs in progress at their next step and refuse new ones (``RunCancelled``).

        The lab calls it when it starts shutting down, so that Ctrl+C does not wait for a long
        run nobody will read. Cached answers are still given.
        """
        self._cancelled.set()

    def resume(self) -> None:
        """Compute again after :meth:`cancel` (an app that is started again)."""
        self._cancelled.clear()

    def _progress(self, done: int, total: int) -> None:
        if self._cancelled.is_set():
            raise RunCancelled("the lab is shutting down")

    @staticmethod
    def key(name: str, params: dict[str, Any]) -> str:
        """Validate ``params`` (raises ``ParameterError``/``ParameterTypeError``) -> cache key."""
        return _key(name, get_experiment(name).make_params(params))

    def run(self, name: str, params: dict[str, Any]) -> dict[str, Any]:
        """The ``to_dict()`` of the run, computed once per distinct full parameter set.

        An experiment with a ``mirror`` (``bn-lr``: ``batch_norm`` on and off train the same two
        runs) is answered from its mirror's entry when that one is cached or being computed.
        """
        experiment = get_experiment(name)
        full = experiment.make_params(params)
        key = _key(name, full)
        mirror: tuple[str, Callable[[dict[str, Any]], dict[str, Any]]] | None = None
        if experiment.mirror is not None:
            other, convert = experiment.mirror(full)
            mirror = (_key(name, other), convert)
        source: Future[dict[str, Any]] | None = None
        with self._lock:
            future = self._cache.get(key)
            if future is not None:
                self._cache.move_to_end(key)
                self.hits += 1
                owner = False
            else:
                future = Future()
                self._cache[key] = future
                owner = True
                if mirror is not None:
                    source = self._cache.get(mirror[0])
                while len(self._cache) > self.max_entries:
                    self._cache.popitem(last=False)
        if owner:
            try:
                value = None
                if source is not None and mirror is not None:
                    try:  # waits if it is being computed
                        value = {**mirror[1](source.result()), "params": params_dict(full)}
                    except Exception:  # that run failed: compute this one itself
                        value = None
                if value is not None:
                    with self._lock:
                        self.mirrored += 1
                else:
                    with self._lock:
                        self.misses += 1
                    self._progress(0, 0)  # refuse at once while shutting down
                    value = run_experiment(name, progress=self._progress, **params).to_dict()
                future.set_result(value)
            except BaseException as exc:
                with self._lock:
                    self._cache.pop(key, None)
                future.set_exception(exc)
        return future.result()

    async def arun(self, name: str, params: dict[str, Any]) -> dict[str, Any]:
        """:meth:`run` in a worker thread, so the event loop keeps answering meanwhile."""
        key = self.key(name, params)  # validate on the loop: bad input answers at once
        with self._lock:
            future = self._cache.get(key)
        if future is not None and future.done() and future.exception() is None:
            with self._lock:
                self.hits += 1
                if key in self._cache:
                    self._cache.move_to_end(key)
            return future.result()
        return await anyio.to_thread.run_sync(self.run, name, params)


def _key(name: str, full: object) -> str:
    return json.dumps([name, params_dict(full)], sort_keys=True)
