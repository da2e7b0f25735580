"""``two-moons``: what the registry-wide tests expect of it (read through
``tests/experiments/expectations.py``)."""

from __future__ import annotations

from typing import Any

# Settings beyond the defaults its script also runs at (tests/test_script.py; the first is
# its notebook's).
SCRIPT_SETTINGS = [{"n_samples": 60, "noise": 0.05}, {"seed": 3}]


def seed_figure(d: dict[str, Any]) -> bool:
    """What its default run must show (tests/lab/test_api.py runs it through HTTP)."""
    # the notebook's scatter: 200 points, each feature standardized (unbiased std 1.003)
    return [round(s, 3) for s in d["stds"]] == [1.003, 1.003]
