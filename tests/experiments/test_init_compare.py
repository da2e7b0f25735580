"""``init-compare``: what the registry-wide tests expect of it (read through
``tests/experiments/expectations.py``)."""

from __future__ import annotations

from typing import Any

from normlab.experiments import run_experiment

# Settings beyond the defaults its script also runs at (tests/test_script.py; the first is
# its notebook's).
SCRIPT_SETTINGS = [{"depth": 6, "hist_layer": 3, "seed": 5}, {"width": 16, "bins": 9}]


def seed_figure(d: dict[str, Any]) -> bool:
    """What its default run must show (tests/lab/test_api.py runs it through HTTP)."""
    return f"{d['xavier_max_abs']:.5f} {d['he_std_measured']:.5f}" == "0.17675 0.12582"


def test_a_streamed_run_draws_the_schemes_so_far() -> None:
    """Every scheme's stack is a step of its progress and a frame: a partial run draws the
    schemes so far in both figures, its titles say how far, and the last yield is the whole
    race."""
    calls: list[tuple[int, int]] = []
    partials: list[Any] = []
    final = run_experiment(
        "init-compare",
        **STREAMING,
        progress=lambda done, total: calls.append((done, total)),
        live=lambda partial: partials.append(partial()),
    )
    assert calls == [(k, 4) for k in range(1, 5)]
    variance, hist = partials[1].figures()
    assert variance.title.endswith("so far: 2 of 4 schemes") and hist.title.endswith("4 schemes")
    assert [p.title for p in hist.panels] == ["small random (std 0.02)", "large random (std 0.30)"]
    assert partials[-1].to_dict() == final.to_dict()
    assert all("so far" not in f.title for f in final.figures())


# What it streams with in tests/test_registry.py's streaming test.
STREAMING = {"fan_in": 3, "fan_out": 3, "depth": 2, "width": 4, "batch": 4, "hist_layer": 2}


# What grows in its streamed result (the schemes raced), and how many partials STREAMING gives
# before the last yield: one a scheme.
CURVE = (lambda d: [c["scheme"] for c in d["curves"]], 3)
