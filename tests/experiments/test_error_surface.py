"""``error-surface``: what the registry-wide tests expect of it (read through
``tests/experiments/expectations.py``)."""

from __future__ import annotations

from typing import Any

# Settings beyond the defaults its script also runs at (tests/test_script.py; the first is
# its notebook's).
SCRIPT_SETTINGS = [{"steps": 30, "points": 7}, {"width": 4, "hidden_layers": 1, "seed": 2}]


# What it trains with in tests/test_registry.py's progress test, and the optimizer steps that
# run takes.
PROGRESS = ({"steps": 12}, 24)  # two starts


# What it streams with in tests/test_registry.py's streaming test.
STREAMING = {"steps": 5, "points": 5}


# What grows in its streamed result (start A's curve, then B's), and how many partials
# STREAMING gives before the last yield (tests/test_registry.py): one a step.
CURVE = (lambda d: [v for c in d["losses"] for v in c], 10)


def seed_figure(d: dict[str, Any]) -> bool:
    """What its default run must show (tests/lab/test_api.py runs it through HTTP)."""
    # two starts end in two valleys with a ridge between them
    return max(d["slice"]) > max(d["final_losses"]) + 0.1
