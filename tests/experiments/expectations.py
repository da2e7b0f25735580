"""Each experiment's expectations, kept in its own test module.

The tests that run every registered experiment (``tests/test_script.py``,
``tests/test_registry.py``, ``tests/lab/test_api.py``) read what they expect of one from
``tests/experiments/test_<name>.py`` (its name's ``-`` as ``_``):

- ``SCRIPT_SETTINGS``: settings beyond the defaults its script also runs at (the first is its
  notebook's);
- ``PROGRESS``: ``(params, optimizer steps)`` for the progress test;
- ``STREAMING`` and ``CURVE``: what a streaming run is asked for, and ``(what grows, how many
  partials before the last yield)``;
- ``seed_figure(result_dict) -> bool``: what its default run must show.

An experiment without a module, or a module without the name, takes the test's default: adding
an experiment edits no shared list, and a missing expectation never breaks collection.
"""

from __future__ import annotations

import importlib
from pathlib import Path
from types import ModuleType
from typing import Any

HERE = Path(__file__).parent
NAMES = ("SCRIPT_SETTINGS", "PROGRESS", "STREAMING", "CURVE", "seed_figure")


def _module(stem: str) -> ModuleType:
    return importlib.import_module(f"tests.experiments.{stem}")


def expected(name: str, what: str, default: Any = None) -> Any:
    """What experiment ``name``'s test module declares as ``what`` (``default`` if nothing)."""
    if what not in NAMES:
        raise ValueError(f"expectation {what!r} not supported, use one of {NAMES}")
    stem = "test_" + name.replace("-", "_")
    if not (HERE / f"{stem}.py").exists():
        return default
    return getattr(_module(stem), what, default)


def declaring(what: str) -> set[str]:
    """The experiment names whose test modules declare ``what`` (each must be registered)."""
    return {
        path.stem.removeprefix("test_").replace("_", "-")
        for path in HERE.glob("test_*.py")
        if hasattr(_module(path.stem), what)
    }
