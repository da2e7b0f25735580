"""Runs experiments for the lab: validated, cached by the full parameter set, off the event loop.

The cache key is the experiment name plus every parameter *after* validation and defaults, so
``{}`` and ``{"depth": 10}`` for ``drift`` share one entry. Concurrent requests for the same key
wait for one computation instead of starting several.
"""

from __future__ import annotations

import json
import threading
from collections import OrderedDict
from concurrent.futures import Future
from typing import Any

import anyio.to_thread

from normlab.experiments import get_experiment, run_experiment


class Runner:
    """A thread-safe LRU cache in front of :func:`normlab.experiments.run_experiment`."""

    def __init__(self, max_entries: int = 512) -> None:
        if max_entries < 1:
            raise ValueError(f"max_entries must be at least 1, got {max_entries}")
        self.max_entries = max_entries
        self._cache: OrderedDict[str, Future[dict[str, Any]]] = OrderedDict()
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    @staticmethod
    def key(name: str, params: dict[str, Any]) -> str:
        """Validate ``params`` (raises ``ParameterError``/``ParameterTypeError``) -> cache key."""
        experiment = get_experiment(name)
        full = experiment.make_params(params)
        values = {f: (list(v) if isinstance(v, tuple) else v) for f, v in vars(full).items()}
        return json.dumps([name, values], sort_keys=True)

    def run(self, name: str, params: dict[str, Any]) -> dict[str, Any]:
        """The ``to_dict()`` of the run, computed once per distinct full parameter set."""
        key = self.key(name, params)
        with self._lock:
            future = self._cache.get(key)
            if future is not None:
                self._cache.move_to_end(key)
                self.hits += 1
                owner = False
            else:
                future = Future()
                self._cache[key] = future
                self.misses += 1
                owner = True
                while len(self._cache) > self.max_entries:
                    self._cache.popitem(last=False)
        if owner:
            try:
                future.set_result(run_experiment(name, **params).to_dict())
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
