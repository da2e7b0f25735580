"""``drift``: what the registry-wide tests expect of it (read through
``tests/experiments/expectations.py``)."""

from __future__ import annotations

from typing import Any

from normlab.experiments import run_experiment

# Settings beyond the defaults its script also runs at (tests/test_script.py; the first is
# its notebook's).
SCRIPT_SETTINGS = [{"depth": 20, "activation": "tanh", "seed": 3}, {"norm": "layer", "width": 8}]


def seed_figure(d: dict[str, Any]) -> bool:
    """What its default run must show (tests/lab/test_api.py runs it through HTTP)."""
    return [f"{d['stds'][i]:.4f}" for i in (0, 2, 8, 9)] == ["0.3545", "0.0993", "0.0535", "0.0768"]


def test_a_streamed_run_draws_the_layers_so_far() -> None:
    """Every block is a step of its progress and a frame: a partial run draws the layers so
    far, its title says how far, and the last yield is the whole run."""
    calls: list[tuple[int, int]] = []
    partials: list[Any] = []
    final = run_experiment(
        "drift",
        **STREAMING,
        progress=lambda done, total: calls.append((done, total)),
        live=lambda partial: partials.append(partial()),
    )
    assert calls == [(k, 3) for k in range(1, 4)]
    (figure,) = partials[0].figures()
    assert figure.title.endswith("so far: layer 1 of 3")
    assert [len(s.x) for s in figure.panels[0].series] == [2, 2]  # the input and layer 1
    assert partials[-1].to_dict() == final.to_dict() and "so far" not in final.figures()[0].title


# What it streams with in tests/test_registry.py's streaming test.
STREAMING = {"depth": 3, "width": 4, "batch": 8}


# What grows in its streamed result (every block's std), and how many partials STREAMING gives
# before the last yield: one a block.
CURVE = (lambda d: d["stds"], 2)
