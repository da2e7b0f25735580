"""``doctor``: what the registry-wide tests expect of it (read through
``tests/experiments/expectations.py``)."""

from __future__ import annotations

from typing import Any

from normlab.experiments import run_experiment


def seed_figure(d: dict[str, Any]) -> bool:
    """What its default run must show (tests/lab/test_api.py runs it through HTTP)."""
    # the default zoo model is the vanishing tanh stack, and the doctor says so
    return d["problems"] == ["vanishing"] and "vanishing" in d["layers"][-1]["labels"]


# What it streams with in tests/test_registry.py's streaming test, and what grows there: the
# passes measured (each partial is the diagnosis of the batches so far), one partial before
# the last yield.
STREAMING = {"steps": 2, "batch": 8}
CURVE = (lambda d: list(range(1, d["steps"] + 1)), 1)


def test_a_streamed_run_diagnoses_the_passes_so_far() -> None:
    """Every forward and backward pass is a step of its progress and a frame, after the fix:
    each partial carries the fix report and the diagnosis of the passes so far, its title says
    how far, and the last yield is the whole run."""
    calls: list[tuple[int, int]] = []
    partials: list[Any] = []
    params = {"init": "xavier", "steps": 3, "batch": 8}
    final = run_experiment(
        "doctor",
        **params,
        progress=lambda done, total: calls.append((done, total)),
        live=lambda partial: partials.append(partial()),
    )
    assert calls == [(k, 3) for k in range(1, 4)]
    assert [p.steps for p in partials] == [1, 2, 3]
    assert all(p.to_dict()["fix"] == final.to_dict()["fix"] is not None for p in partials)
    titles = [p.figures()[0].title for p in partials]
    assert titles[0].endswith("so far: pass 1 of 3") and titles[1].endswith("pass 2 of 3")
    assert "so far" not in titles[2] and partials[-1].to_dict() == final.to_dict()
