"""Shared fixtures: results computed once per test session, and no test near the user's data.

Several test files check the same result from different sides (its seed figures, its code, its
plot); the training experiments take seconds each, so they are computed once and shared. A test
must not change a shared result.

``$XDG_DATA_HOME`` (where the lab keeps its progress database) points into a temporary folder
for the whole session, from before the first fixture: a lab built by a module-wide fixture, or
started as a subprocess, never opens ``~/.local/share/normlab``.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Callable
from typing import Any

import pytest

from normlab.experiments import Result, run_experiment


def pytest_configure(config: pytest.Config) -> None:
    home = tempfile.mkdtemp(prefix="normlab-test-data-")
    os.environ["XDG_DATA_HOME"] = home
    config.add_cleanup(lambda: shutil.rmtree(home, ignore_errors=True))


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
