"""Test-wide settings: no test reads or writes the user's own lab data; what a Runner computes,
counted."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from normlab.lab import runner


@pytest.fixture(autouse=True)
def _private_data_home(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> Path:
    """``$XDG_DATA_HOME`` (where the lab keeps its progress database) in a temporary folder."""
    home = tmp_path_factory.mktemp("data-home")
    monkeypatch.setenv("XDG_DATA_HOME", str(home))
    return home


@pytest.fixture
def computed(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The experiments the lab's Runners compute from now on, in order (counted at
    :func:`~normlab.experiments.run_experiment` as the Runner calls it)."""
    names: list[str] = []
    run_experiment = runner.run_experiment

    def counted(name: str, **kw: Any) -> Any:
        names.append(name)
        return run_experiment(name, **kw)

    monkeypatch.setattr(runner, "run_experiment", counted)
    return names
