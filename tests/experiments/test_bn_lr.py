"""``bn-lr``: what the registry-wide tests expect of it (read through
``tests/experiments/expectations.py``)."""

from __future__ import annotations

from typing import Any

# Settings beyond the defaults its script also runs at (tests/test_script.py; the first is
# its notebook's).
SCRIPT_SETTINGS = [
    {"batch_norm": True, "lr": 0.5, "steps": 30, "init": "small"},
    {"hidden_layers": 2, "steps": 40, "init": "he"},
]


# What it trains with in tests/test_registry.py's progress test, and the optimizer steps that
# run takes.
PROGRESS = ({"steps": 12}, 24)


# What it streams with in tests/test_registry.py's streaming test.
STREAMING = {"steps": 9}


# What grows in its streamed result, and how many partials STREAMING gives before the last
# yield (tests/test_registry.py).
CURVE = (lambda d: d["losses"] + d["contrast_losses"], 18)


def seed_figure(d: dict[str, Any]) -> bool:
    """What its default run must show (tests/lab/test_api.py runs it through HTTP)."""
    return max(d["losses"]) > 4 and max(d["contrast_losses"][20:]) < 0.5
