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


# What it streams with in tests/test_registry.py's streaming test.
STREAMING = {"epochs": 3, "n_train": 40, "batch_size": 20, "n_test": 20}


# What grows in its streamed result (the training split's curve without BN, then with), and
# how many partials STREAMING gives before the last yield (tests/test_registry.py): one an epoch.
CURVE = (lambda d: [v for r in d["runs"] for v in r["train"]], 6)


def seed_figure(d: dict[str, Any]) -> bool:
    """What its default run must show (tests/lab/test_api.py runs it through HTTP)."""
    # BN's training-mode output moves with the batch, the plain net's cannot
    return d["runs"][0]["noise"] == 0.0 < d["runs"][1]["noise"]
