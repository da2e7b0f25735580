"""``linear-scale``: what the registry-wide tests expect of it (read through
``tests/experiments/expectations.py``)."""

from __future__ import annotations

from typing import Any

# Settings beyond the defaults its script also runs at (tests/test_script.py; the first is
# its notebook's).
SCRIPT_SETTINGS = [{"batch": 32, "scale": 3.5, "seed": 4}, {"in_features": 9, "seed": 1}]


def seed_figure(d: dict[str, Any]) -> bool:
    """What its default run must show (tests/lab/test_api.py runs it through HTTP)."""
    return f"{d['output_std']:.4f} {d['scaled_output_std']:.4f}" == "0.6876 6.0035"
