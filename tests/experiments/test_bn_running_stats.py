"""``bn-running-stats``: what the registry-wide tests expect of it (read through
``tests/experiments/expectations.py``)."""

from __future__ import annotations

from typing import Any

from normlab.experiments import run_experiment

# Settings beyond the defaults its script also runs at (tests/test_script.py; the first is
# its notebook's).
SCRIPT_SETTINGS = [{"passes": 5, "cumulative": True}, {"momentum": 0.5, "features": 2}]


def seed_figure(d: dict[str, Any]) -> bool:
    """What its default run must show (tests/lab/test_api.py runs it through HTTP)."""
    return [round(v, 2) for v in d["running_vars"][-1]] == [7.27, 7.56, 10.97]


def test_a_streamed_run_draws_the_passes_so_far() -> None:
    """Every pass is a step of its progress and a frame: a partial run draws the passes so far,
    its title says how far, and the last yield is the whole run."""
    calls: list[tuple[int, int]] = []
    partials: list[Any] = []
    final = run_experiment(
        "bn-running-stats",
        **STREAMING,
        progress=lambda done, total: calls.append((done, total)),
        live=lambda partial: partials.append(partial()),
    )
    assert calls == [(k, 3) for k in range(1, 4)]
    (figure,) = partials[1].figures()
    assert figure.title.endswith("so far: pass 2 of 3")
    assert len(figure.panels[0].series[0].x) == 3  # the new layer, then passes 1 and 2
    assert partials[-1].to_dict() == final.to_dict() and "so far" not in final.figures()[0].title


# What it streams with in tests/test_registry.py's streaming test.
STREAMING = {"passes": 3, "batch": 4, "features": 2}


# What grows in its streamed result (the running means, a row a pass), and how many partials
# STREAMING gives before the last yield: one a pass.
CURVE = (lambda d: d["running_means"], 2)
