"""``init-train``: what the registry-wide tests expect of it (read through
``tests/experiments/expectations.py``)."""

from __future__ import annotations

from typing import Any

# Settings beyond the defaults its script also runs at (tests/test_script.py; the first is
# its notebook's).
SCRIPT_SETTINGS = [{"method": "zeros", "steps": 20}, {"method": "large", "hidden_layers": 3}]


# What it trains with in tests/test_registry.py's progress test, and the optimizer steps that
# run takes.
PROGRESS = ({"steps": 12}, 12)


# What it streams with in tests/test_registry.py's streaming test.
STREAMING = {"steps": 9}


# What grows in its streamed result, and how many partials STREAMING gives before the last
# yield (tests/test_registry.py).
CURVE = (lambda d: d["losses"], 9)


def seed_figure(d: dict[str, Any]) -> bool:
    """What its default run must show (tests/lab/test_api.py runs it through HTTP)."""
    return d["method"] == "he" and len(d["losses"]) == 150
