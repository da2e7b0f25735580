"""``init-compare``: what the registry-wide tests expect of it (read through
``tests/experiments/expectations.py``)."""

from __future__ import annotations

from typing import Any

# Settings beyond the defaults its script also runs at (tests/test_script.py; the first is
# its notebook's).
SCRIPT_SETTINGS = [{"depth": 6, "hist_layer": 3, "seed": 5}, {"width": 16, "bins": 9}]


def seed_figure(d: dict[str, Any]) -> bool:
    """What its default run must show (tests/lab/test_api.py runs it through HTTP)."""
    return f"{d['xavier_max_abs']:.5f} {d['he_std_measured']:.5f}" == "0.17675 0.12582"
