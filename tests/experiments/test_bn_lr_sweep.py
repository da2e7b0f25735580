"""``bn-lr-sweep``: what the registry-wide tests expect of it (read through
``tests/experiments/expectations.py``)."""

from __future__ import annotations

from typing import Any

# Settings beyond the defaults its script also runs at (tests/test_script.py; the first is
# its notebook's).
SCRIPT_SETTINGS = [
    {"points": 3, "steps": 20, "hidden_layers": 2},
    {"lr_min": 1.0, "lr_max": 4.0, "points": 2, "steps": 15, "tail": 5},
]


# What it trains with in tests/test_registry.py's progress test, and the optimizer steps that
# run takes.
PROGRESS = ({"points": 3, "steps": 10, "tail": 2}, 60)


# What it streams with in tests/test_registry.py's streaming test.
STREAMING = {"points": 3, "steps": 10, "tail": 2}


# What grows in its streamed result, and how many partials STREAMING gives before the last
# yield (tests/test_registry.py).
CURVE = (lambda d: [v for c in d["curves"] for v in c["final_losses"]], 6)


def seed_figure(d: dict[str, Any]) -> bool:
    """What its default run must show (tests/lab/test_api.py runs it through HTTP)."""
    # BN keeps every swept rate stable, the plain net is not
    return all(d["curves"][1]["stable"]) and not all(d["curves"][0]["stable"])
