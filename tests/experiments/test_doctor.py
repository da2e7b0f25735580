"""``doctor``: what the registry-wide tests expect of it (read through
``tests/experiments/expectations.py``)."""

from __future__ import annotations

import json
from typing import Any

import pytest
import torch

from normlab import init, zoo
from normlab.experiments import run_experiment
from normlab.experiments.doctor import fix_stages


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
    """Every forward and backward pass is a step of its progress and a frame, after the fix's
    (one for xavier): each partial after it carries the fix report and the diagnosis of the
    passes so far, its title says how far, and the last yield is the whole run."""
    calls: list[tuple[int, int]] = []
    partials: list[Any] = []
    params = {"init": "xavier", "steps": 3, "batch": 8}
    final = run_experiment(
        "doctor",
        **params,
        progress=lambda done, total: calls.append((done, total)),
        live=lambda partial: partials.append(partial()),
    )
    assert calls == [(k, 4) for k in range(1, 5)]
    assert [p.steps for p in partials] == [0, 1, 2, 3]
    assert all(p.to_dict()["fix"] == final.to_dict()["fix"] is not None for p in partials)
    titles = [p.figures()[0].title for p in partials]
    assert titles[0].endswith("so far: xavier done")
    assert titles[1].endswith("so far: pass 1 of 3") and titles[2].endswith("pass 2 of 3")
    assert "so far" not in titles[3] and partials[-1].to_dict() == final.to_dict()


def test_a_streamed_lsuv_run_counts_each_layer_it_rescales_then_the_passes() -> None:
    """LSUV is most of a run at the maxima (pre-ln, batch 128): its progress starts with the
    first layer rescaled, counts every layer (9 in dead-relu: 8 hidden and the head) and then
    the pass; each frame of the fix draws the output variances so far, each within LSUV's
    tolerance of 1 (``lsuv_``'s own stopping rule), and its title says how far."""
    calls: list[tuple[int, int]] = []
    partials: list[Any] = []
    final = run_experiment(
        "doctor",
        model="dead-relu",
        init="lsuv",
        steps=1,
        batch=8,
        progress=lambda done, total: calls.append((done, total)),
        live=lambda partial: partials.append(partial()),
    )
    assert calls == [(k, 10) for k in range(1, 11)]
    fixing, last = partials[:9], partials[9]
    assert [p.steps for p in fixing] == [0] * 9 and last.to_dict() == final.to_dict()
    assert fixing[-1].to_dict()["fix"] == final.to_dict()["fix"]
    for k, p in enumerate(fixing, start=1):
        assert p.layers == [] and len(p.fix.lsuv.layers) == k
        (figure,) = p.figures()
        assert figure.title.endswith(f"so far: LSUV, layer {k} of 9 rescaled")
        (series,) = figure.panels[0].series
        assert series.y == p.fix.lsuv.variances and all(abs(v - 1) < 0.1 for v in series.y)
        assert json.dumps(figure.to_dict(), allow_nan=False)


@pytest.mark.parametrize(
    ("model", "norm"), [("transformer", "none"), ("lstm", "none"), ("dead-relu", "batch")]
)
def test_the_fix_stages_counted_from_the_parameters_are_the_layers_lsuv_rescales(
    model: str, norm: str
) -> None:
    """Where the count could go wrong: attention (a Linear its forward may not call), an LSTM
    (only the head is a Linear), an MLP with norms (which add no Linear)."""
    net = zoo.build(model, 0, norm)
    x = torch.randn(zoo.input_shape(model, 4), generator=torch.Generator().manual_seed(0))
    assert fix_stages(model, norm, "lsuv") == len(init.lsuv_(net, x).layers)
