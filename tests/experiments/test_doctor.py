"""``doctor``: what the registry-wide tests expect of it (read through
``tests/experiments/expectations.py``)."""

from __future__ import annotations

from typing import Any


def seed_figure(d: dict[str, Any]) -> bool:
    """What its default run must show (tests/lab/test_api.py runs it through HTTP)."""
    # the default zoo model is the vanishing tanh stack, and the doctor says so
    return d["problems"] == ["vanishing"] and "vanishing" in d["layers"][-1]["labels"]
