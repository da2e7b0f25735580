"""Shared fixtures: results computed once per test session, and no test near the user's data.

Several test files check the same result from different sides (its seed figures, its code, its
plot); the training experiments take seconds each, so they are computed once and shared. A test
must not change a shared result. Once means once a run: pytest-xdist's workers (each a process
of its own) share the results they computed through a folder of pickles the controller names
(``$NORMLAB_TEST_RESULTS``), as they share the lab's answers below; each worker computes a
result only when no worker has written it yet (every experiment at its defaults: about 12 s of
CPU, paid by each test file that draws, renders or prints them all). A result read back is the
one computed: pickle keeps every float and tensor as it was, on the same machine and threads.

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

import hashlib
import json
import os
import pickle
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from normlab.lab.answers import ENVIRONMENT as ANSWERS

if TYPE_CHECKING:  # torch and the registry: imported by the first run, not by the controller
    from normlab.experiments import Result

RESULTS = "NORMLAB_TEST_RESULTS"
"""The environment variable naming the folder of results shared by a run's workers."""


def pytest_configure(config: pytest.Config) -> None:
    home = tempfile.mkdtemp(prefix="normlab-test-data-")
    os.environ["XDG_DATA_HOME"] = home
    config.add_cleanup(lambda: shutil.rmtree(home, ignore_errors=True))
    if "PYTEST_XDIST_WORKER" not in os.environ:  # a worker has its controller's: shared
        answers = tempfile.mkdtemp(prefix="normlab-test-answers-")
        os.environ[ANSWERS] = os.path.join(answers, "answers.sqlite3")
        config.add_cleanup(lambda: shutil.rmtree(answers, ignore_errors=True))
        results = tempfile.mkdtemp(prefix="normlab-test-results-")
        os.environ[RESULTS] = results
        config.add_cleanup(lambda: shutil.rmtree(results, ignore_errors=True))


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    """With ``-m serial`` (the second part of ``make test``), a test module whose text never
    names the marker is not imported: it holds no serial test. Importing every module to select
    the few that do cost 7 of the part's 10 s of collection."""
    name = collection_path.name
    if config.option.markexpr != "serial" or not (
        name.startswith("test_") and name.endswith(".py")
    ):
        return None
    return "serial" not in collection_path.read_text(encoding="utf-8")


_RESULTS: dict[str, Result] = {}


def _cached(name: str, **params: Any) -> Result:
    key = json.dumps([name, params], sort_keys=True)
    if key not in _RESULTS:
        from normlab.experiments import run_experiment

        _RESULTS[key] = _shared(key, lambda: run_experiment(name, **params))
    return _RESULTS[key]


def _shared(key: str, compute: Callable[[], Result]) -> Result:
    """The result of ``key`` another worker of this run wrote, or computed and written here
    (whole or not at all: written aside, then renamed)."""
    folder = os.environ.get(RESULTS)
    if folder is None:  # a process pytest_configure did not start: nothing to share
        return compute()
    path = os.path.join(folder, hashlib.sha256(key.encode()).hexdigest() + ".pickle")
    try:
        with open(path, "rb") as f:
            result: Result = pickle.load(f)
        return result
    except FileNotFoundError:
        pass
    result = compute()
    aside = f"{path}.{os.getpid()}"
    with open(aside, "wb") as f:
        pickle.dump(result, f)
    os.replace(aside, path)
    return result


@pytest.fixture(scope="session")
def cached_run() -> Callable[..., Result]:
    """``run_experiment``, computed once per distinct name and parameters in a run (by
    whichever of its workers asks first)."""
    return _cached
