"""``coord-check``: SP's output grows with width after a few steps, muP's layers hold, and
depth-muP holds the residual stream over depth where muP alone does not.

Tolerances, derived (measured values from ``normlab run coord-check`` with the settings named):

- **Finite-width noise of a size.** A layer whose size does not depend on the width still
  differs from one random init to the next: over 40 seeds the RMS of the third hidden layer at
  width 64 has a coefficient of variation of 6.5% (1.8% at width 1024; the input layer 5.0%).
  The base width is the noisiest, so a width-independent layer's spread over 64 ... 1024 is about
  1 + 2 x 6.5% = 1.13 at two standard deviations. The bound 1.25 is 3.8 of them.
- **SP's growth.** A step moves each of the n weights that feed a unit by about ``lr`` (Adam) or
  by ``lr`` times a gradient entry of order 1 (SGD, output layer), and the n moves add up along
  the unit's input: the update of the output grows like n. At the base width, where the rate
  trains, the update is of the size of the init (the loss falls), so at 16 times the width the
  output is about (1 + 16) / (1 + 1) = 8 times larger. The bound 2 leaves a factor 4, and the
  output's spread *at init* stays below it (10 logits: 14-17% noise, spread 1.2-1.4), so what
  crosses 2 is the training. Measured: 4.0-5.5 (SGD, lr 0.1), 9-76 (Adam, lr 0.01).
- **Depth.** The stream's second moment grows by 1 + s^2 / 6 per block at init
  (:func:`normlab.theory.residual_stream`, ``"none"``): from depth 1 to 32 with s = 1 that is
  sqrt((7/6)^31) = 10.9 in RMS, far above 2, while with s = 1/sqrt(L) it is (1 + 1/(6L))^(L/2),
  1.080 at L = 1 and 1.087 at L = 32. Depth-muP's update is also of order 1 at every depth, so
  its spread is finite-width noise (3% at width 256) plus the L = 1 net's difference from the
  limit (measured 1.01-1.11): below 1.25 again.
"""

from __future__ import annotations

import json
import math
from typing import Any

import pytest
import torch

from normlab.experiments import get_experiment, run_experiment
from normlab.experiments.base.results import Result
from normlab.experiments.coord_check import (
    BRANCH_GAIN,
    CoordCheckResult,
    blobs,
    build_net,
    param_groups,
    rms_sizes,
    spread,
    stream_theory,
    sweep_depths,
    sweep_widths,
)
from normlab.theory import residual_stream

NO_DEPTH_SWEEP = {"max_depth": 2, "depth_width": 16}
"""The width tests' setting for the depth sweep: two tiny nets, so that they time the widths."""
CLASS = [  # (optimizer, a rate where the base width trains, seed, depth)
    ("adam", 0.01, 0, 3),
    ("adam", 0.01, 1, 5),
    ("sgd", 0.1, 0, 3),
    ("sgd", 0.1, 2, 2),
]


def _run(**params: object) -> CoordCheckResult:
    result = run_experiment("coord-check", **params)
    assert isinstance(result, CoordCheckResult)
    return result


# -- the pieces ----------------------------------------------------------------------------------


def test_the_sweeps_widths_and_depths() -> None:
    assert sweep_widths(64, 1024, 5) == [64, 128, 256, 512, 1024]
    assert sweep_widths(64, 100, 2) == [64, 100]
    assert sweep_widths(100, 103, 5) == [100, 101, 102, 103]  # rounded duplicates once
    assert sweep_depths(32) == [1, 2, 4, 8, 16, 32]
    assert sweep_depths(12) == [1, 2, 4, 8, 12]


def test_spread_is_largest_over_smallest_and_says_when_it_has_none() -> None:
    assert spread([2.0, 1.0, 4.0]) == 4.0
    assert spread([1.0, math.nan]) == math.inf  # a diverged run
    assert spread([1.0, math.inf]) == math.inf
    assert math.isnan(spread([0.0, 0.0]))  # a zero-initialized output at init


def test_blobs_are_standardized_and_balanced() -> None:
    x, y = blobs(200, 10, 3, "cpu")
    assert x.shape == (200, 2) and y.shape == (200,)
    torch.testing.assert_close(x.mean(0), torch.zeros(2), atol=1e-6, rtol=0)  # float32 sums
    torch.testing.assert_close(x.std(0), torch.ones(2), atol=1e-6, rtol=0)
    assert torch.bincount(y).tolist() == [20] * 10
    assert torch.equal(blobs(200, 10, 3, "cpu")[0], x) and not torch.equal(
        blobs(200, 10, 4, "cpu")[0], x
    )


def test_mup_output_layer_starts_as_table_3_says() -> None:
    """Same seed, same draws: muP's output weights are SP's times sqrt(n0 / n) (variance
    1 / (3 n) * n0 / n, Table 3's 1 / fan_in^2 up to the base), or zero; the rest is SP's."""
    sp = build_net("SP", 256, 2, 10, 64, "scaled", 7)
    mup = build_net("muP", 256, 2, 10, 64, "scaled", 7)
    zero = build_net("muP", 256, 2, 10, 64, "zero", 7)
    torch.testing.assert_close(mup.output.weight, sp.output.weight * 0.5, rtol=0, atol=0)
    assert not zero.output.weight.any()
    for a, b in zip(list(sp.parameters())[:-1], list(zero.parameters())[:-1], strict=True):
        assert torch.equal(a, b)
    assert sp.branch == 1.0 and build_net("depth-muP", 256, 16, 10, 64, "zero", 7).branch == 0.25
    at_base = build_net("muP", 64, 2, 10, 64, "scaled", 7)
    assert torch.equal(
        at_base.output.weight, build_net("SP", 64, 2, 10, 64, "scaled", 7).output.weight
    )


@pytest.mark.parametrize(
    ("parametrization", "optimizer", "rates"),
    [
        ("SP", "adam", [0.01]),
        ("SP", "sgd", [0.01]),
        ("muP", "adam", [0.01, 0.01 / 4, 0.01 / 4]),  # input, hidden, output at n / n0 = 4
        ("muP", "sgd", [0.01 * 4, 0.01, 0.01 / 4]),
        ("depth-muP", "adam", [0.01, 0.01 / 4 / 3, 0.01 / 4]),  # 9 blocks: 1/sqrt(L) = 1/3
        ("depth-muP", "sgd", [0.01 * 4, 0.01, 0.01 / 4]),  # SGD's rate keeps out of depth
    ],
)
def test_learning_rates_per_layer(parametrization: str, optimizer: str, rates: list[float]) -> None:
    net = build_net(parametrization, 256, 9, 10, 64, "zero", 0)
    groups = param_groups(net, parametrization, optimizer, 0.01, 64)
    assert [g["lr"] for g in groups] == pytest.approx(rates, rel=1e-12)
    grouped = [id(p) for g in groups for p in g["params"]]
    assert sorted(grouped) == sorted(id(p) for p in net.parameters())  # each weight once


@pytest.mark.slow
def test_the_residual_stream_at_init_follows_the_theory() -> None:
    """Measured over predicted: the last hidden layer's RMS at init against
    RMS(h_0) * sqrt((1 + s^2 g)^L), g = 1/6, at depth 32 and width 256.

    Over 20 seeds the measured / predicted ratio had mean 1.000 with a standard deviation of
    0.144 for s = 1 (the unscaled stream amplifies the init's finite-width noise) and 0.015 for
    s = 1/sqrt(32). The mean of 8 seeds for s = 1 is then within 3 x 0.144 / sqrt(8) = 0.15 of
    1, and each seed for s = 1/sqrt(32) within 3 x 0.015 = 0.05.
    """
    ratios: dict[str, list[float]] = {"muP": [], "depth-muP": []}
    for seed in range(8):
        x, _ = blobs(200, 10, seed, "cpu")
        for parametrization, scale in (("muP", 1.0), ("depth-muP", 32**-0.5)):
            with torch.no_grad():
                sizes = rms_sizes(build_net(parametrization, 256, 32, 10, 64, "zero", seed)(x))
            moments = residual_stream("none", 32, branch_scale=scale, branch_gain=BRANCH_GAIN)
            predicted = stream_theory(parametrization, 32, sizes[0])  # what the figure draws
            assert predicted == pytest.approx(sizes[0] * moments[-1] ** 0.5, rel=1e-12)
            ratios[parametrization].append(sizes[-2] / predicted)
    assert sum(ratios["muP"]) / 8 == pytest.approx(1.0, abs=0.15)
    assert ratios["depth-muP"] == pytest.approx([1.0] * 8, abs=0.05)


# -- the acceptance: the class of settings -------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize(("optimizer", "lr", "seed", "depth"), CLASS)
def test_sp_output_grows_with_width_and_mup_hidden_layers_hold(
    optimizer: str, lr: float, seed: int, depth: int
) -> None:
    r = _run(optimizer=optimizer, lr=lr, seed=seed, depth=depth, **NO_DEPTH_SWEEP)
    sp, mup = r.width_sweep
    assert [run.width for run in sp.runs] == [64, 128, 256, 512, 1024]
    assert len(sp.layers) == depth + 2
    base = sp.runs[0].losses
    assert base[-1] < base[0]  # the rate trains the base width (there SP and muP share rates)
    assert sp.init_spreads[-1] < 2 < sp.spreads[-1]  # what crosses 2 is the training
    assert max(mup.spreads[1:-1]) < 1.25  # muP's hidden layers: finite-width noise only
    assert max(mup.init_spreads[1:-1]) < 1.25


@pytest.mark.slow
@pytest.mark.parametrize(
    ("optimizer", "lr", "seed", "max_depth"), [("adam", 0.01, 0, 32), ("sgd", 0.1, 1, 16)]
)
def test_depth_mup_holds_the_stream_over_depth_and_mup_alone_does_not(
    optimizer: str, lr: float, seed: int, max_depth: int
) -> None:
    r = _run(optimizer=optimizer, lr=lr, seed=seed, max_depth=max_depth, max_width=128, widths=2)
    mup, depth_mup = r.depth_sweep
    assert [run.depth for run in mup.runs] == sweep_depths(max_depth)
    assert mup.layers == ["input", "last hidden", "output"]
    assert mup.init_spreads[1] > 2 and mup.spreads[1] > 2  # (7/6)^(L/2): 7.7 at L = 16
    assert depth_mup.init_spreads[1] < 1.25 and depth_mup.spreads[1] < 1.25


# -- the result ----------------------------------------------------------------------------------


def test_the_result_s_tables_figures_and_json() -> None:
    r = _run(max_width=128, widths=2, depth=2, max_depth=4, depth_width=32, steps=2)
    d = r.to_dict()
    json.dumps(d, allow_nan=False)
    assert d["width_sweep"][1]["init_spreads"][-1] is None  # a zero output at init: no spread
    tables = r.tables()
    assert [t.title.split(",")[0] for t in tables] == ["SP", "muP", "muP", "depth-muP"]
    assert tables[1].rows[-2][-1] == "n/a" and tables[0].rows[0][0] == "input"
    assert tables[0].columns[1:3] == ("64", "128") and tables[2].columns[1:4] == ("1", "2", "4")
    width_figure, depth_figure = r.figures()
    assert [p.x.scale for p in width_figure.panels] == ["log", "log"]
    assert width_figure.panels[0].y.limits == width_figure.panels[1].y.limits  # one scale
    theory = [s for p in depth_figure.panels for s in p.series if s.dash == "dash"]
    assert len(theory) == 2 and all(s.name.endswith("theory") for s in theory)
    json.dumps([f.to_dict() for f in r.figures()], allow_nan=False)


def test_a_streamed_run_draws_the_sweeps_it_has_begun() -> None:
    """Every net trained is a frame: each partial run draws the nets so far, the sweep under
    way named in its title, and the last partial is the whole check."""
    partials: list[Result] = []
    run_experiment("coord-check", **STREAMING, live=lambda partial: partials.append(partial()))
    assert len(partials) == 8  # (SP, muP) x 2 widths, then (muP, depth-muP) x 2 depths
    first, third, fifth = partials[0], partials[2], partials[4]
    [width] = first.figures()  # SP at the base width: no depth figure yet
    assert width.title.endswith("SP trained at width 64 so far")
    assert [len(s.x) for s in width.panels[0].series] == [1, 1, 1]  # input, hidden, output
    assert third.figures()[0].title.endswith("muP trained at width 64 so far")
    width, depth = fifth.figures()  # the width sweep done, the depth sweep begun
    assert width.title == partials[-1].figures()[0].title and "so far" not in width.title
    assert depth.title.endswith("muP trained at depth 1 so far")
    assert "so far" not in partials[-1].figures()[1].title
    for r in partials:
        json.dumps([f.to_dict() for f in r.figures()], allow_nan=False)


def test_a_diverged_run_says_so() -> None:
    r = _run(optimizer="sgd", lr=1.0, max_width=1024, widths=2, depth=6, **NO_DEPTH_SWEEP)
    sp = r.width_sweep[0]
    assert not math.isfinite(sp.runs[-1].final[-1]) and sp.spreads[-1] == math.inf
    row = r.tables()[0].rows[-2]
    assert row[2] == "diverged" and row[3] == "diverged"
    assert r.to_dict()["width_sweep"][0]["spreads"][-1] is None
    json.dumps([f.to_dict() for f in r.figures()], allow_nan=False)


def test_the_costliest_request_is_the_declared_one() -> None:
    e = get_experiment("coord-check")
    top = e.maxima()
    assert top["optimizer"] == "adam" and top["max_width"] == 1024 and top["depth_width"] == 512
    assert e.total_steps is not None and e.total_steps(e.make_params(top)) == 2 * 5 * (5 + 6)


# -- what the registry-wide tests expect of it (tests/experiments/expectations.py) --------------


# Settings beyond the defaults its script also runs at (tests/test_script.py; the first is
# its notebook's).
SCRIPT_SETTINGS = [
    {"optimizer": "sgd", "lr": 0.1, "max_width": 256, "widths": 3, "max_depth": 4},
    {"readout": "scaled", "depth": 2, "steps": 2, "max_width": 128, "depth_width": 32},
]


# What it trains with in tests/test_registry.py's progress test, and the optimizer steps that
# run takes.
# 2 steps x 2 parametrizations x (2 widths + 3 depths: 1, 2, 4)
PROGRESS = (
    {"steps": 2, "max_width": 128, "widths": 2, "max_depth": 4, "depth_width": 32},
    20,
)


# What it streams with in tests/test_registry.py's streaming test.
STREAMING = {"steps": 1, "max_width": 128, "widths": 2, "depth": 1, "max_depth": 2}
STREAMING |= {"depth_width": 16}


# What grows in its streamed result (every net's sizes after its steps, sweep after sweep), and
# how many partials STREAMING gives before the last yield: one a net, 2 x 2 + 2 x 2 in all.
CURVE = (
    lambda d: [
        r["final"] for key in ("width_sweep", "depth_sweep") for s in d[key] for r in s["runs"]
    ],
    7,
)


def seed_figure(d: dict[str, Any]) -> bool:
    """What its default run must show (tests/lab/test_api.py runs it through HTTP)."""
    # after 3 Adam steps SP's output grows with width (update ~ lr * n), muP's hidden layers hold
    # (tests/experiments/test_coord_check.py derives the 2 and the 1.25)
    return (
        d["width_sweep"][0]["spreads"][-1] > 2 and max(d["width_sweep"][1]["spreads"][1:-1]) < 1.25
    )
