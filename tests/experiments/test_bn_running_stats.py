"""``bn-running-stats``: what the registry-wide tests expect of it (read through
``tests/experiments/expectations.py``)."""

from __future__ import annotations

from typing import Any

# Settings beyond the defaults its script also runs at (tests/test_script.py; the first is
# its notebook's).
SCRIPT_SETTINGS = [{"passes": 5, "cumulative": True}, {"momentum": 0.5, "features": 2}]


def seed_figure(d: dict[str, Any]) -> bool:
    """What its default run must show (tests/lab/test_api.py runs it through HTTP)."""
    return [round(v, 2) for v in d["running_vars"][-1]] == [7.27, 7.56, 10.97]
