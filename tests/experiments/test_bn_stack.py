"""``bn-stack``: what the registry-wide tests expect of it (read through
``tests/experiments/expectations.py``)."""

from __future__ import annotations

from typing import Any

# Settings beyond the defaults its script also runs at (tests/test_script.py; the first is
# its notebook's).
SCRIPT_SETTINGS = [{"depth": 30, "seed": 2}, {"norm": "rms", "activation": "sigmoid"}]


def seed_figure(d: dict[str, Any]) -> bool:
    """What its default run must show (tests/lab/test_api.py runs it through HTTP)."""
    return f"{d['stds'][0]:.4f}" == "0.5861"


# What it streams with in tests/test_registry.py's streaming test.
STREAMING = {"depth": 3, "width": 4, "batch": 8}


# What grows in its streamed result (every block's std), and how many partials STREAMING gives
# before the last yield: one a block.
CURVE = (lambda d: d["stds"], 2)
