"""Shared fixtures: results computed once per test session.

Several test files check the same result from different sides (its seed figures, its code, its
plot); the training experiments take seconds each, so they are computed once and shared. A test
must not change a shared result.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest

from normlab.experiments import Result, run_experiment

_RESULTS: dict[str, Result] = {}


def _cached(name: str, **params: Any) -> Result:
    key = json.dumps([name, params], sort_keys=True)
    if key not in _RESULTS:
        _RESULTS[key] = run_experiment(name, **params)
    return _RESULTS[key]


@pytest.fixture(scope="session")
def cached_run() -> Callable[..., Result]:
    """``run_experiment``, computed once per distinct name and parameters in a session."""
    return _cached
