"""``bn-columns``: what the registry-wide tests expect of it (read through
``tests/experiments/expectations.py``)."""

from __future__ import annotations

from typing import Any

# Settings beyond the defaults its script also runs at (tests/test_script.py; the first is
# its notebook's).
SCRIPT_SETTINGS = [{"batch": 16, "scales": [0.5, 2000.0]}, {"seed": 7}]


def seed_figure(d: dict[str, Any]) -> bool:
    """What its default run must show (tests/lab/test_api.py runs it through HTTP)."""
    return [round(s, 4) for s in d["output_stds"]] == [1.0, 1.0, 1.0]
