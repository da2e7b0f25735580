"""``drift``: what the registry-wide tests expect of it (read through
``tests/experiments/expectations.py``)."""

from __future__ import annotations

from typing import Any

# Settings beyond the defaults its script also runs at (tests/test_script.py; the first is
# its notebook's).
SCRIPT_SETTINGS = [{"depth": 20, "activation": "tanh", "seed": 3}, {"norm": "layer", "width": 8}]


def seed_figure(d: dict[str, Any]) -> bool:
    """What its default run must show (tests/lab/test_api.py runs it through HTTP)."""
    return [f"{d['stds'][i]:.4f}" for i in (0, 2, 8, 9)] == ["0.3545", "0.0993", "0.0535", "0.0768"]
