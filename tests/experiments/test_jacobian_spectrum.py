"""``jacobian-spectrum``: the Jacobian is the network's, its spectrum follows Pennington et al.

How far a finite stack may sit from the infinite-width prediction, and why the tolerances below
are what they are (n the width, L the depth):

* Gaussian linear stack, exactly: writing ``p2 = E tr((J J^T)^2) / n`` and ``e = E (tr(J J^T) /
  n)^2``, Wick's theorem for one more Gaussian layer (entries of variance 1/n) gives
  ``p2' = (1 + 1/n) p2 + e`` and ``e' = e + 2 p2 / n^2``, from ``p2 = e = 1``; so
  ``E var(s^2) / L = (p2 - e) / L = 1 + L / (2n) + O(L^2 / n^2)``: a bias of ``L / (2n)``.
  (400 seeds at n = 32, L = 8 measure 1.126 +- 0.047 against its 1.164.)
* One seed's ``var(s^2)`` also scatters around that expectation, because a few large singular
  values carry it: over 10-30 seeds at n = 256, 512 and 1000 (float32 and float64 alike) the
  relative spread is about ``3 L / n``; ReLU and tanh at n = 512, L <= 16 measure at most 4%
  for ``var / mean^2`` (the mean itself drifts at finite width, by a few percent per
  ``sqrt(L / n)``; the prediction's variance is ``mean^2 L (...)``, so ``var / mean^2`` is what
  is compared where the mean is free to drift).

Every class check below runs several depths and seeds at a width where bias + 4 spreads is
inside its tolerance.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
import torch

from normlab import theory
from normlab.experiments import get_experiment, run_experiment
from normlab.experiments.jacobian_spectrum import critical_point, draw_weight, jacobian_spectra

ACTIVATIONS = ("linear", "relu", "tanh")
WEIGHTS = ("gaussian", "orthogonal")


def spectra(activation: str, weights: str, q_star: float, depth: int, width: int, seed: int):
    torch.manual_seed(seed)
    return list(jacobian_spectra(activation, weights, q_star, depth, width, "cpu"))


def relative(s2: torch.Tensor) -> float:
    """var(s^2) / mean(s^2)^2 (biased variance over the n values)."""
    return (s2.var(unbiased=False) / s2.mean() ** 2).item()


@pytest.mark.parametrize("activation", ACTIVATIONS)
@pytest.mark.parametrize("weights", WEIGHTS)
def test_the_product_of_d_w_is_autograd_s_jacobian(activation: str, weights: str) -> None:
    """The specification: the same draws, the forward pass differentiated by autograd."""
    q_star, depth, n, seed = 0.3, 4, 12, 7
    got = spectra(activation, weights, q_star, depth, n, seed)[-1]
    sigma_w2, sigma_b2 = critical_point(activation, q_star)
    phi, _ = theory.activation_pair(activation)
    torch.manual_seed(seed)  # replay jacobian_spectra's draws, in its order
    z = torch.randn(n)
    x0 = phi(z * (q_star / z.pow(2).mean()) ** 0.5)
    layers = []
    for _ in range(depth):
        w = draw_weight(weights, n, sigma_w2)
        layers.append((w, torch.randn(n) * sigma_b2**0.5))

    def forward(x: torch.Tensor) -> torch.Tensor:
        for w, b in layers:
            x = phi(w @ x + b)
        return x

    jac = torch.autograd.functional.jacobian(forward, x0)  # (n, n)
    expected = torch.linalg.svdvals(jac) ** 2
    # float32: a product of 4 matrices with O(1) entries agrees to a few ulps of the largest
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5 * expected.max().item())


@pytest.mark.parametrize("q_star", [0.001, 0.01, 0.1, 1.0, 4.0])
def test_the_critical_point_is_the_theory_s(q_star: float) -> None:
    sigma_w2, sigma_b2 = critical_point("tanh", q_star)
    mf = theory.mean_field("tanh", sigma_w2, sigma_b2)
    # both are Gauss-Hermite quadratures of smooth functions (100 and 200 nodes): 1e-9 is
    # far above their rounding and far below any physical difference
    assert mf.chi_1 == pytest.approx(1.0, abs=1e-9)
    assert mf.q_star == pytest.approx(q_star, rel=1e-6)  # the theory's fixed-point search
    assert theory.critical_sigma_w2("tanh", sigma_b2) == pytest.approx(sigma_w2, rel=1e-6)
    # ReLU and linear: the critical weights whatever q*, and no bias
    assert critical_point("relu", q_star) == pytest.approx((2.0, 0.0), abs=1e-12)
    assert critical_point("linear", q_star) == pytest.approx((1.0, 0.0), abs=1e-12)


def predicted(activation: str, weights: str, q_star: float, depth: int) -> float:
    """The predicted var(s^2) (= var / mean^2: the mean is 1 at the critical point)."""
    return theory.jacobian_spectrum(activation, depth, 512, weights, q_star=q_star).variance


def test_the_predictions_of_the_lesson() -> None:
    per_layer = {(a, w): predicted(a, w, 0.01, 1) for a in ACTIVATIONS for w in WEIGHTS}
    assert per_layer["linear", "gaussian"] == pytest.approx(1.0)
    assert per_layer["linear", "orthogonal"] < 1e-12
    assert per_layer["relu", "gaussian"] == pytest.approx(2.0)  # mu2 / mu1^2 = 2 ...
    assert per_layer["relu", "orthogonal"] == pytest.approx(1.0)  # ... whatever the weights
    # tanh near the origin: phi'(h)^2 ~ 1 - 2 h^2, so mu2 / mu1^2 - 1 ~ 8 q*^2 (to 10% here)
    assert per_layer["tanh", "orthogonal"] == pytest.approx(8 * 0.01**2, rel=0.1)


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_a_gaussian_linear_stack_spreads_as_its_depth(seed: int) -> None:
    # n = 512, L <= 6: bias L / (2n) <= 0.6%, spread 3 L / n <= 3.5%: 15% is above 4 spreads
    got = spectra("linear", "gaussian", 1.0, 6, 512, seed)
    for depth, s2 in enumerate(got, start=1):
        assert s2.var(unbiased=False).item() / depth == pytest.approx(1.0, rel=0.15), depth


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_an_orthogonal_linear_stack_is_an_isometry(seed: int) -> None:
    # exactly s^2 = 1; float32's QR and products leave each s^2 within ~1e-6 of it (var ~1e-13)
    got = spectra("linear", "orthogonal", 1.0, 32, 256, seed)
    for depth, s2 in enumerate(got, start=1):
        assert s2.var(unbiased=False).item() < 1e-6, depth
        assert s2.mean().item() == pytest.approx(1.0, abs=1e-4), depth


@pytest.mark.slow
@pytest.mark.parametrize("seed", [0, 1])
def test_relu_spreads_as_2l_gaussian_and_l_orthogonal(seed: int) -> None:
    # n = 512, L in {4, 8}: var / mean^2 scatters by at most 4.1% over 10 seeds, bias <= 2%:
    # 20% is above 4 spreads. Orthogonal weights halve the spread and cannot remove it.
    for weights, per_layer in (("gaussian", 2.0), ("orthogonal", 1.0)):
        got = spectra("relu", weights, 1.0, 8, 512, seed)
        for depth in (4, 8):
            assert relative(got[depth - 1]) / depth == pytest.approx(per_layer, rel=0.2)


@pytest.mark.slow
@pytest.mark.parametrize("seed", [0, 1])
def test_orthogonal_tanh_near_the_origin_is_nearly_isometric(seed: int) -> None:
    # q* = 0.01: the prediction is 7.3e-4 L orthogonal, (1 + 7.3e-4) L Gaussian. At n = 512,
    # L in {4, 8} the measured ratio scatters by at most 3.4% (10 seeds), bias <= 2%: 15%
    q_star = 0.01
    for weights in WEIGHTS:
        got = spectra("tanh", weights, q_star, 8, 512, seed)
        for depth in (4, 8):
            ratio = relative(got[depth - 1]) / predicted("tanh", weights, q_star, depth)
            assert ratio == pytest.approx(1.0, rel=0.15), (weights, depth)
        if weights == "orthogonal":  # a thousand times narrower than Gaussian weights' ~L
            assert got[-1].var(unbiased=False).item() / 8 < 1e-3


def test_the_default_result_shows_dynamical_isometry() -> None:
    r = run_experiment("jacobian-spectrum")
    d = r.to_dict()
    json.dumps(d, allow_nan=False)
    assert r.hist_depths == [1, 4, 16, 32] and len(r.runs[0].mean) == 32
    gaussian, orthogonal = r.run("gaussian"), r.run("orthogonal")
    assert gaussian.relative[-1] > 10 and orthogonal.relative[-1] < 0.05
    for run in r.runs:  # every s^2 is binned or counted above the range
        for h in run.histograms:
            assert sum(h.counts) + h.beyond == r.width
            assert len(h.edges) == len(h.counts) + 1 == r.params["bins"] + 1
    assert [row[0] for row in r.tables()[0].rows] == ["1", "2", "4", "8", "16", "32"]


def test_the_figures_draw_the_theory_over_the_measurement() -> None:
    r = run_experiment("jacobian-spectrum", activation="linear", depth=5, width=32)
    hist, moments = r.figures()
    assert len(hist.panels) == 2 * len(r.hist_depths) == 2 * 3  # depths 1, 4, 5
    assert all(p.series[0].kind == "histogram" for p in hist.panels)
    assert hist.columns == 2  # a row per depth, Gaussian left, orthogonal right
    assert [p.title.split(":")[0] for p in hist.panels[:3]] == [
        "Gaussian, depth 1",
        "Orthogonal, depth 1",
        "Gaussian, depth 4",
    ]
    for panel in moments.panels:
        measured = [s for s in panel.series if s.kind == "markers"]
        dashed = [s for s in panel.series if s.dash == "dash"]
        assert len(measured) == len(dashed) == 2
        assert panel.x.scale == panel.y.scale == "log"
    spread = moments.panels[1]
    by_name = {s.name: s for s in spread.series}
    assert by_name["gaussian theory"].y == pytest.approx([1.0, 2.0, 3.0, 4.0, 5.0])
    # a linear orthogonal stack's predicted spread is 0: a gap on the log axis, not a point
    assert by_name["orthogonal theory"].y == [None] * 5
    assert all(v is not None and v > 0 for v in by_name["orthogonal measured"].y)
    json.dumps([f.to_dict() for f in r.figures()], allow_nan=False)


def test_a_streamed_run_draws_the_layers_run_so_far() -> None:
    """Every layer of each stack is a step of its progress and a frame: a partial run draws the
    layers so far against the whole stack's theory, and its titles say how far it is."""
    calls: list[tuple[int, int]] = []
    partials: list[Any] = []
    final = run_experiment(
        "jacobian-spectrum",
        **STREAMING,
        progress=lambda done, total: calls.append((done, total)),
        live=lambda partial: partials.append(partial()),
    )
    assert calls == [(k, 6) for k in range(1, 7)]  # 3 Gaussian layers, then 3 orthogonal ones
    hist, moments = partials[3].figures()  # the orthogonal stack's first layer
    assert moments.title.endswith("so far: orthogonal weights to layer 1 of 3")
    by_name = {s.name: s for s in moments.panels[0].series}
    assert len(by_name["gaussian measured"].x) == 3 and len(by_name["orthogonal measured"].x) == 1
    assert len(by_name["orthogonal theory"].x) == 3  # predicted for every layer from the start
    assert [p.title for p in hist.panels][-1] == "Orthogonal, depth 3: to come"
    assert partials[-1].to_dict() == final.to_dict()
    assert all("so far" not in f.title for f in final.figures())


def test_the_costliest_request_is_the_deepest_widest_stack() -> None:
    # tests/lab/test_maxima.py runs it through a lab and holds it to its Cost (one thread)
    maxima = get_experiment("jacobian-spectrum").maxima()
    assert maxima["depth"] == 100 and maxima["width"] == 512


# -- what the registry-wide tests expect of it (tests/experiments/expectations.py) --------------


# Settings beyond the defaults its script also runs at (tests/test_script.py; the first is
# its notebook's).
SCRIPT_SETTINGS = [
    {"activation": "relu", "depth": 5, "width": 24, "bins": 7, "seed": 2},
    {"activation": "linear", "q_star": 2.5, "depth": 17, "width": 16},
]


# What it streams with in tests/test_registry.py's streaming test.
STREAMING = {"activation": "relu", "depth": 3, "width": 16}


# What grows in its streamed result (the mean s^2 after every layer, Gaussian then orthogonal),
# and how many partials STREAMING gives before the last yield: one a layer, 2 x 3 in all.
CURVE = (lambda d: [m for r in d["runs"] for m in r["mean"]], 5)


def seed_figure(d: dict[str, Any]) -> bool:
    """What its default run must show (tests/lab/test_api.py runs it through HTTP)."""
    # orthogonal tanh near the origin keeps s^2 near 1, Gaussian weights spread it (var / mean^2 ~
    # L = 32 against 8 q*^2 L ~ 0.03; measured 28.6 and 0.025)
    return d["runs"][0]["relative"][-1] > 10 and d["runs"][1]["relative"][-1] < 0.05
