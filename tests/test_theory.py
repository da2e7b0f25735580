"""normlab.theory against its papers and against closed forms it does not use.

Tolerances: the quadrature is good to about 1e-13 (``RADIUS``, ``RADIAL_POINTS``); the
bisections stop at 1e-13 relative; so closed forms are compared to 1e-9, leaving room. The
papers' figures are quoted to the digits they print (tanh's critical sigma_w2 = 1.761 at
sigma_b2 = 0.05 and xi_c = 3.6 at sigma_w2 = 1.0: Schoenholz et al. 2017, Fig. 1-2).
"""

from __future__ import annotations

import itertools
import math
import sys
import types
from typing import Any

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from normlab import theory
from normlab.experiments import script
from normlab.theory import (
    ACTIVATIONS,
    bn_gradient_growth,
    c_map,
    critical_sigma_w2,
    gauss_expect,
    jacobian_spectrum,
    log_norm_variance,
    mean_field,
    q_map,
    q_trajectory,
    residual_stream,
    trainable_depth,
)

CLOSE = 1e-9


def test_tanh_critical_line_and_depth_scale_as_schoenholz_et_al_print_them() -> None:
    assert critical_sigma_w2("tanh", 0.05) == pytest.approx(1.761, abs=0.005)
    mf = mean_field("tanh", 1.0, 0.05)
    assert mf.phase == "ordered" and mf.c_star == 1.0
    assert round(mf.xi_c, 1) == 3.6
    assert trainable_depth("tanh", 1.0, 0.05) == pytest.approx(6 * mf.xi_c)


def test_relu_without_bias_is_critical_at_2_and_its_length_grows_without_bound_above() -> None:
    assert critical_sigma_w2("relu", 0.0) == pytest.approx(2.0, abs=CLOSE)
    assert mean_field("relu", 2.0, 0.0).phase == "critical"
    above = mean_field("relu", 2.2, 0.0)
    assert above.q_star == math.inf and above.phase == "chaotic"
    assert above.chi_1 == pytest.approx(1.1, abs=CLOSE)  # sigma_w2 / 2 whatever the length
    lengths = q_trajectory("relu", 1.0, 50, 2.2, 0.0)
    assert lengths[-1] == pytest.approx(1.1**50, rel=CLOSE)  # geometric, no fixed point
    below = mean_field("relu", 1.8, 0.0)
    assert below.q_star == 0.0 and below.phase == "ordered"


def test_bn_gradient_growth_of_relu_is_pi_over_pi_minus_1() -> None:
    assert bn_gradient_growth("relu") == pytest.approx(math.pi / (math.pi - 1), abs=CLOSE)
    assert bn_gradient_growth("linear") == pytest.approx(1.0, abs=CLOSE)
    # every nonlinearity that loses variance makes the gradient grow
    for name in ("tanh", "erf", "gelu", "silu", "sigmoid"):
        assert bn_gradient_growth(name) > 1.0, name


@pytest.mark.parametrize("q", [0.1, 1.0, 7.0])
@pytest.mark.parametrize("c", [-0.6, 0.0, 0.3, 0.95])
def test_relu_and_erf_maps_match_their_closed_forms(q: float, c: float) -> None:
    # ReLU: the arc-cosine kernel (Cho & Saul 2009), E[relu(u1) relu(u2)] =
    # q (sqrt(1 - c^2) + (pi - acos c) c) / (2 pi)
    relu_cov = q * (math.sqrt(1 - c * c) + (math.pi - math.acos(c)) * c) / (2 * math.pi)
    assert c_map("relu", c, q, 2.0, 0.0) == pytest.approx(relu_cov / (q / 2), abs=CLOSE)
    # erf (Williams 1997): E[erf(u1) erf(u2)] = (2 / pi) asin(2 q c / (1 + 2 q))
    erf_q = 1.5 * (2 / math.pi) * math.asin(2 * q / (1 + 2 * q)) + 0.1
    assert q_map("erf", q, 1.5, 0.1) == pytest.approx(erf_q, abs=CLOSE)
    erf_cov = 1.5 * (2 / math.pi) * math.asin(2 * q * c / (1 + 2 * q)) + 0.1
    assert c_map("erf", c, q, 1.5, 0.1) == pytest.approx(erf_cov / erf_q, abs=CLOSE)


def test_the_kink_at_zero_costs_no_accuracy() -> None:
    # whole-line Gauss-Hermite with 200 nodes is 0.2% off here; the split rule is exact
    assert gauss_expect(torch.relu) == pytest.approx(1 / math.sqrt(2 * math.pi), abs=1e-13)
    assert gauss_expect(torch.abs, q=4.0) == pytest.approx(2 * math.sqrt(2 / math.pi), abs=1e-12)


def test_linear_stack_fixed_point_is_the_geometric_series() -> None:
    mf = mean_field("linear", 0.6, 0.2)
    assert mf.q_star == pytest.approx(0.2 / (1 - 0.6), rel=CLOSE)
    assert mf.chi_1 == pytest.approx(0.6, abs=CLOSE) and mf.phase == "ordered"
    assert mean_field("linear", 1.3, 0.0).q_star == math.inf


@pytest.mark.parametrize("name", ["tanh", "erf", "relu"])
@pytest.mark.parametrize("sigma_b2", [0.01, 0.05, 0.3])
def test_the_critical_line_separates_the_phases(name: str, sigma_b2: float) -> None:
    w2 = critical_sigma_w2(name, sigma_b2)
    on = mean_field(name, w2, sigma_b2)
    assert on.phase == "critical" and on.xi_c == math.inf
    below, above = mean_field(name, 0.9 * w2, sigma_b2), mean_field(name, 1.1 * w2, sigma_b2)
    assert below.phase == "ordered" and below.c_star == 1.0 and below.chi_1 < 1
    assert above.phase == "chaotic" and above.chi_1 > 1
    if name != "relu":  # a bounded activation decorrelates inputs in its chaotic phase
        assert above.c_star < 1.0
        # c* is a fixed point of the correlation map at q*
        got = c_map(name, above.c_star, above.q_star, 1.1 * w2, sigma_b2)
        assert got == pytest.approx(above.c_star, abs=1e-9)
    # the fixed length is a fixed point of the length map
    assert q_map(name, below.q_star, 0.9 * w2, sigma_b2) == pytest.approx(below.q_star, rel=1e-9)
    # the depth scale is finite on both sides of the line; above it ReLU's length has no fixed
    # point and its correlations settle slower than exponentially (xi_c infinite)
    assert 0 < below.xi_c < math.inf
    assert (above.xi_c == math.inf) if name == "relu" else (0 < above.xi_c < math.inf)


@settings(max_examples=15, deadline=None)
@given(st.floats(0.0, 0.5), st.floats(0.0, 0.5))
def test_tanh_critical_sigma_w2_rises_with_the_bias(b1: float, b2: float) -> None:
    lo, hi = sorted((b1, b2))
    assert critical_sigma_w2("tanh", lo) <= critical_sigma_w2("tanh", hi) + 1e-6


def test_a_callable_pair_is_the_named_activation() -> None:
    pair = (torch.tanh, lambda u: 1 - torch.tanh(u) ** 2)
    assert mean_field(pair, 1.4, 0.1) == mean_field("tanh", 1.4, 0.1)


def test_jacobian_spectrum_moments() -> None:
    for depth in (1, 8, 64):
        gaussian = jacobian_spectrum("linear", depth, 1000)
        orthogonal = jacobian_spectrum("linear", depth, 1000, "orthogonal")
        assert gaussian.mean == pytest.approx(1.0) and gaussian.variance == pytest.approx(depth)
        # Var[phi'^2] of a constant: only (1 - mu1)^2 ~ 1e-32 of rounding per node is left
        assert orthogonal.variance < 1e-20
        assert jacobian_spectrum("relu", depth, 1000).variance == pytest.approx(2 * depth)
        assert jacobian_spectrum("relu", depth, 1000, "orthogonal").variance == pytest.approx(depth)
    # tanh near the origin is nearly isometric with orthogonal weights, not with Gaussian ones
    near = jacobian_spectrum("tanh", 100, 1000, "orthogonal", q_star=1e-4)
    assert near.mean == pytest.approx(1.0) and near.variance < 0.1
    assert jacobian_spectrum("tanh", 100, 1000, "gaussian", q_star=1e-4).variance > 90
    # off the critical line the mean moves as chi^L
    off = jacobian_spectrum("linear", 10, 1000, sigma_w2=1.1)
    assert off.mean == pytest.approx(1.1**10) and off.depth_to_width == 0.01
    with pytest.raises(ValueError, match="q_star"):
        jacobian_spectrum("tanh", 10, 100)
    with pytest.raises(ValueError, match="weights"):
        jacobian_spectrum("linear", 10, 100, "uniform")  # type: ignore[arg-type]


def test_residual_stream_predictions() -> None:
    pre = residual_stream("pre", 48)
    assert pre[16] == 1 + 16 / 2 and pre[48] == 1 + 48 / 2
    assert residual_stream("post", 10) == [1.0] * 11 == residual_stream("rezero", 10)
    assert residual_stream("peri", 4) == [1.0, 2.0, 3.0, 4.0, 5.0]
    # no normalization: geometric growth, held to e^g by 1 / sqrt(L) branches
    assert residual_stream("none", 10)[-1] == pytest.approx(1.5**10)
    for depth in (4, 64, 512):
        last = residual_stream("none", depth, branch_scale=depth**-0.5)[-1]
        assert last < math.exp(0.5)
    # DyT squashes a large stream: it grows slower than pre-LN once tanh saturates
    dyt = residual_stream("dyt", 48)
    assert all(b > a for a, b in itertools.pairwise(dyt)) and dyt[-1] < pre[-1]


def test_log_norm_variance() -> None:
    assert log_norm_variance(20, 50) == pytest.approx(2.0)
    assert log_norm_variance(3, [10, 20, 40]) == pytest.approx(5 * (0.1 + 0.05 + 0.025))
    with pytest.raises(ValueError, match="widths"):
        log_norm_variance(3, [10, 20])


def test_bad_input_names_the_parameter_and_the_allowed_values() -> None:
    with pytest.raises(ValueError, match=r"activation 'softplus' not supported.*tanh"):
        mean_field("softplus", 1.0, 0.0)
    with pytest.raises(TypeError, match="activation"):
        mean_field(3, 1.0, 0.0)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="sigma_w2"):
        mean_field("tanh", -1.0, 0.0)
    with pytest.raises(ValueError, match="sigma_b2"):
        critical_sigma_w2("tanh", float("nan"))
    with pytest.raises(ValueError, match="placement"):
        residual_stream("middle", 3)
    with pytest.raises(ValueError, match="no critical sigma_w2"):
        critical_sigma_w2((torch.tanh, lambda u: 0.0 * u), 0.1)


def test_every_named_activation_has_its_derivative() -> None:
    x = torch.linspace(-3, 3, 61, dtype=torch.float64, requires_grad=True)
    for name in ACTIVATIONS:
        phi, dphi = theory.activation_pair(name)
        (grad,) = torch.autograd.grad(phi(x).sum(), x)
        torch.testing.assert_close(dphi(x.detach()), grad, atol=1e-12, rtol=0, msg=name)
    assert theory.activation_pair("gelu")[0] is torch.nn.functional.gelu
    assert tuple(theory.PLACEMENTS) == ("post", "pre", "peri", "dyt", "none", "rezero")


@pytest.mark.parametrize(
    ("code", "call"),
    [
        (theory.MEAN_FIELD_CODE, 'critical_sigma_w2("tanh", 0.05), mean_field("erf", 1.3, 0.2)'),
        (theory.JACOBIAN_CODE, 'jacobian_spectrum("tanh", 8, 100, "orthogonal", q_star=0.3)'),
        (theory.BN_GROWTH_CODE, 'bn_gradient_growth("gelu")'),
        (theory.RESIDUAL_CODE, 'residual_stream("dyt", 12, branch_scale=0.5)'),
    ],
)
def test_the_code_an_experiment_pastes_runs_on_its_own(code: tuple[Any, ...], call: str) -> None:
    """Each ``*_CODE`` tuple, pasted as a script pastes it (its sources and the imports they
    use, no normlab), defines what it lists and computes what the module computes."""
    sources = [script.source_of(obj) for obj in code]
    body = "\n\n".join([*sources, f"answer = {call}"])
    text = "\n".join([*script.imports(code, body), body])
    assert "normlab" not in text
    pasted = types.ModuleType("pasted")  # a module of its own, as a script's __main__ is
    sys.modules["pasted"] = pasted
    try:
        exec(compile(text, "pasted.py", "exec"), vars(pasted))
    finally:
        del sys.modules["pasted"]
    assert repr(pasted.answer) == repr(eval(call, vars(theory)))
