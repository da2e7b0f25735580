"""``bn-regularization``: what the registry-wide tests expect of it (read through
``tests/experiments/expectations.py``)."""

from __future__ import annotations

from typing import Any

# Settings beyond the defaults its script also runs at (tests/test_script.py; the first is
# its notebook's).
SCRIPT_SETTINGS = [
    {"epochs": 3, "n_train": 40, "n_test": 30, "batch_size": 8},
    {"epochs": 2, "hidden_layers": 1, "width": 8, "probes": 4, "seed": 5},
]


# What it trains with in tests/test_registry.py's progress test, and the optimizer steps that
# run takes.
# 2 epochs x 2 batches x 2 nets
PROGRESS = ({"epochs": 2, "n_train": 40, "batch_size": 20}, 8)


def seed_figure(d: dict[str, Any]) -> bool:
    """What its default run must show (tests/lab/test_api.py runs it through HTTP)."""
    # BN's training-mode output moves with the batch, the plain net's cannot
    return d["runs"][0]["noise"] == 0.0 < d["runs"][1]["noise"]
