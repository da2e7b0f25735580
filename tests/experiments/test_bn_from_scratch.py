"""``bn-from-scratch``: what the registry-wide tests expect of it (read through
``tests/experiments/expectations.py``)."""

from __future__ import annotations

from typing import Any

# Settings beyond the defaults its script also runs at (tests/test_script.py; the first is
# its notebook's).
SCRIPT_SETTINGS = [{"batch": 64, "features": 2}, {"momentum": 0.5, "parity_batches": 3}]


def seed_figure(d: dict[str, Any]) -> bool:
    """What its default run must show (tests/lab/test_api.py runs it through HTTP)."""
    return [round(v, 2) for v in d["before_means"]] == [1.71, 5.23, 5.05, 4.97]
