"""Shared fixtures: results computed once per test session, and no test near the user's data.

Several test files check the same result from different sides (its seed figures, its code, its
plot); the training experiments take seconds each, so they are computed once and shared. A test
must not change a shared result.

``$XDG_DATA_HOME`` (where the lab keeps its progress database) points into a temporary folder
for the whole session, from before the first fixture: a lab built by a module-wide fixture, or
started as a subprocess, never opens ``~/.local/share/normlab``.

``$NORMLAB_ANSWERS`` (the lab's store of the lessons' computed answers,
:mod:`normlab.lab.answers`) names one fresh file for the whole run, shared by its pytest-xdist
workers (they inherit it from the controller, which sets it before it starts them) and every
lab they start, in process or as a subprocess: a lesson's numbers are computed once a run,
not once a lab, and never read from or written to the user's own cache. A test whose point is
that a lab computes gives its lab no store (``Runner(answers=None)``, ``--no-answers``).
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
from normlab.lab.answers import ENVIRONMENT as ANSWERS


def pytest_configure(config: pytest.Config) -> None:
    home = tempfile.mkdtemp(prefix="normlab-test-data-")
    os.environ["XDG_DATA_HOME"] = home
    config.add_cleanup(lambda: shutil.rmtree(home, ignore_errors=True))
    if "PYTEST_XDIST_WORKER" not in os.environ:  # a worker has its controller's: shared
        answers = tempfile.mkdtemp(prefix="normlab-test-answers-")
        os.environ[ANSWERS] = os.path.join(answers, "answers.sqlite3")
        config.add_cleanup(lambda: shutil.rmtree(answers, ignore_errors=True))


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
