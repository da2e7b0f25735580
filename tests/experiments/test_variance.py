"""``variance``: its tables read the same from a run and from the run's JSON."""

from __future__ import annotations

import json
import math
from typing import Any

from normlab.experiments import run_experiment
from normlab.experiments.variance import VarianceCurve, VarianceResult


def test_an_overflowed_variance_reads_dash_from_the_run_and_from_its_json() -> None:
    # float32 tops out near 3.4e38: a variance past it is inf in the run and null in its JSON
    curve = VarianceCurve(gain=1.5, measured=[2.0, math.inf], theory=[2.25, 5.0625])
    ran = VarianceResult(layers=[1, 2], curves=[curve], activation="linear")
    back = VarianceResult.from_raw(json.loads(json.dumps(ran.to_dict(), allow_nan=False)))
    assert back.curves[0].measured[1] is None
    assert ran.tables()[0].rows == [("1", "2 / 2.25"), ("2", "- / 5.062")]
    assert back.tables() == ran.tables()


def test_a_streamed_run_draws_the_gains_so_far() -> None:
    """Every gain is a step of its progress and a frame: a partial run draws the gains so far,
    its title says how far, and the last yield is the whole run."""
    calls: list[tuple[int, int]] = []
    partials: list[Any] = []
    final = run_experiment(
        "variance",
        **STREAMING,
        progress=lambda done, total: calls.append((done, total)),
        live=lambda partial: partials.append(partial()),
    )
    assert calls == [(1, 2), (2, 2)]
    (figure,) = partials[0].figures()
    assert figure.title.endswith("so far: 1 of 2 gains")
    assert [s.name for s in figure.panels[0].series] == ["g = 0.9 measured", "g = 0.9 theory"]
    assert partials[-1].to_dict() == final.to_dict() and "so far" not in final.figures()[0].title


# -- what the registry-wide tests expect of it (tests/experiments/expectations.py) --------------


# Settings beyond the defaults its script also runs at (tests/test_script.py; the first is
# its notebook's).
SCRIPT_SETTINGS = [{"gains": [1.05], "depth": 15}, {"activation": "relu", "width": 32}]


def seed_figure(d: dict[str, Any]) -> bool:
    """What its default run must show (tests/lab/test_api.py runs it through HTTP)."""
    return [c["gain"] for c in d["curves"]] == [0.85, 1.0, 1.15]


# What it streams with in tests/test_registry.py's streaming test.
STREAMING = {"gains": [0.9, 1.1], "depth": 3, "width": 4, "batch": 4}


# What grows in its streamed result (the gains run), and how many partials STREAMING gives
# before the last yield: one a gain.
CURVE = (lambda d: [c["gain"] for c in d["curves"]], 1)
