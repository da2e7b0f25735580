"""The predictions: what signal propagation theory says a deep network does at initialization.

Every function here is a formula from a paper, evaluated with plain torch (float64) and numpy; the
experiments measure the same quantities on real stacks and draw them over these predictions.

**Variance propagation** (Glorot & Bengio 2010; He et al. 2015). For a layer :math:`a = W h` with
fan-in :math:`n` and zero-mean weights of variance :math:`\\sigma_w^2`, :math:`\\mathrm{Var}(a) =
n \\sigma_w^2\\, \\mathbb{E}[h^2]`. With :math:`g^2 = n \\sigma_w^2` a linear stack multiplies the
variance by :math:`g^2` per layer; behind a ReLU the second moment halves, which :math:`g^2 = 2`
cancels.

**Mean field** (Poole et al. 2016, "Exponential expressivity in deep neural networks through
transient chaos"; Schoenholz et al. 2017, "Deep information propagation"). Weights
:math:`W_{ij} \\sim \\mathcal{N}(0, \\sigma_w^2 / n)`, biases :math:`b_i \\sim \\mathcal{N}(0,
\\sigma_b^2)`, pre-activations :math:`h^{l+1} = W \\phi(h^l) + b`. The variance argument, written
for any :math:`\\phi`, is the *length map*

.. math::
    q^{l+1} = \\sigma_w^2\\, \\mathbb{E}_z\\big[\\phi(\\sqrt{q^l} z)^2\\big] + \\sigma_b^2,
    \\qquad z \\sim \\mathcal{N}(0, 1),

with fixed point :math:`q^*`. Two inputs at correlation :math:`c` move by the *correlation map*
:math:`c^{l+1} = (\\sigma_w^2 \\mathbb{E}[\\phi(u_1)\\phi(u_2)] + \\sigma_b^2) / q^{l+1}`, with
:math:`u_1 = \\sqrt{q} z_1`, :math:`u_2 = \\sqrt{q}(c z_1 + \\sqrt{1 - c^2} z_2)`. Its slope at
:math:`c = 1`,

.. math::
    \\chi_1 = \\sigma_w^2\\, \\mathbb{E}_z\\big[\\phi'(\\sqrt{q^*} z)^2\\big],

is also the growth of a small perturbation (and of the gradient's squared norm) per layer:
:math:`\\chi_1 < 1` is the ordered phase (inputs merge), :math:`\\chi_1 > 1` the chaotic one
(they decorrelate), :math:`\\chi_1 = 1` the edge of chaos. Correlations approach their fixed point
:math:`c^*` as :math:`e^{-l/\\xi_c}` with :math:`\\xi_c = -1/\\ln \\chi_c`, :math:`\\chi_c =
\\sigma_w^2 \\mathbb{E}[\\phi'(u_1)\\phi'(u_2)]` at :math:`c^*`; a network trains when its depth is
below about :math:`6 \\xi_c`.

**Jacobian spectra** (Pennington, Schoenholz & Ganguli 2017, "Resurrecting the sigmoid in deep
learning through dynamical isometry"). **BatchNorm's gradients** (Yang et al. 2019, "A mean field
theory of batch normalization"). **Residual streams** (Xiong et al. 2020; Kim et al. 2025,
"Peri-LN"; Bachlechner et al. 2020, "ReZero"; Zhu et al. 2025, "Transformers without
normalization"). **Finite width** (Hanin & Rolnick 2018, "How to start training").

Gaussian expectations are Gauss-Legendre quadratures split at the activations' kinks (see
:func:`gauss_expect`: whole-line Gauss-Hermite is three digits off on ReLU's). These are
infinite-width predictions; a layer of width :math:`n` wanders around them by a relative
:math:`O(1/\\sqrt{n})`.
"""

from __future__ import annotations

import functools
import itertools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np
import torch
import torch.nn.functional as F

Fn = Callable[[torch.Tensor], torch.Tensor]
Activation = str | tuple[Fn, Fn]
"""An activation by name (:data:`ACTIVATIONS`) or as a pair ``(phi, dphi)`` of callables."""

ACTIVATIONS: tuple[str, ...] = ("tanh", "relu", "linear", "erf", "gelu", "silu", "sigmoid")
"""The activations known by name (:func:`activation_pair` gives each with its derivative)."""

# The functions below that an experiment's script pastes (``*_CODE`` at the end of the module)
# read no module-level value: their constants are their own defaults and literals.


def gelu_grad(x: torch.Tensor) -> torch.Tensor:
    """The derivative of the exact GELU :math:`x \\Phi(x)`: :math:`\\Phi(x) + x \\varphi(x)`."""
    cdf = 0.5 * (1.0 + torch.erf(x / math.sqrt(2.0)))  # Phi(x)
    pdf = torch.exp(-0.5 * x * x) / math.sqrt(2.0 * math.pi)  # phi(x)
    return cdf + x * pdf


def activation_pair(activation: Activation) -> tuple[Fn, Fn]:
    """``(phi, dphi)``: the activation called ``activation`` (one of :data:`ACTIVATIONS`) and its
    derivative, as functions of a float64 tensor, or a pair of callables as it is.

    >>> phi, dphi = activation_pair("tanh")
    >>> float(dphi(torch.tensor(0.0)))
    1.0
    """
    pairs: dict[str, tuple[Fn, Fn]] = {
        "tanh": (torch.tanh, lambda x: 1.0 - torch.tanh(x) ** 2),
        "relu": (torch.relu, lambda x: (x > 0).to(x.dtype)),
        "linear": (lambda x: x, torch.ones_like),
        "erf": (torch.erf, lambda x: 2.0 / math.sqrt(math.pi) * torch.exp(-x * x)),
        "gelu": (F.gelu, gelu_grad),
        "silu": (
            torch.nn.functional.silu,
            lambda x: torch.sigmoid(x) * (1 + x * torch.sigmoid(-x)),
        ),
        "sigmoid": (torch.sigmoid, lambda x: torch.sigmoid(x) * torch.sigmoid(-x)),
    }
    if isinstance(activation, str):
        if activation not in pairs:
            raise ValueError(f"activation {activation!r} not supported, use one of {list(pairs)}")
        return pairs[activation]
    if (
        isinstance(activation, tuple)
        and len(activation) == 2
        and all(callable(f) for f in activation)
    ):
        return activation
    raise TypeError(
        f"activation {activation!r} is neither a name in {list(pairs)} "
        "nor a pair (phi, dphi) of callables"
    )


def clamp_length(q: float) -> float:
    """A length of 0 or inf as 1e-300 or 1e300: the derivative's limit there (a ReLU's is
    scale-free, tanh's at 0 is 1)."""
    return min(max(q, 1e-300), 1e300)


@functools.cache
def _unit_legendre(n: int) -> tuple[torch.Tensor, torch.Tensor]:
    x, w = np.polynomial.legendre.leggauss(n)  # on [-1, 1]
    return torch.from_numpy(x), torch.from_numpy(w)


def _legendre(n: int, low: float, high: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Gauss-Legendre nodes and weights on ``[low, high]``: exact for polynomials of degree
    ``2n - 1``, exponentially accurate for a function smooth on the interval."""
    x, w = _unit_legendre(n)
    half = 0.5 * (high - low)
    return low + half * (x + 1.0), half * w


@functools.cache
def _half_line() -> tuple[torch.Tensor, torch.Tensor]:
    """Nodes :math:`x` on :math:`[0, 13]` and weights :math:`w \\varphi(x)` for
    :math:`\\int_0^\\infty f(x) \\varphi(x)\\, dx`: the same for every expectation, so made once."""
    x, weights = _legendre(96, 0.0, 13.0)  # (P,): mass past 13 sd (1e-38) left out
    density = torch.exp(-0.5 * x * x) / math.sqrt(2.0 * math.pi)  # (P,): phi(x)
    return x, weights * density  # (P,), (P,)


def gauss_expect(f: Fn, q: float = 1.0) -> float:
    """:math:`\\mathbb{E}_z[f(\\sqrt{q} z)]`, :math:`z \\sim \\mathcal{N}(0, 1)`, by quadrature.

    The two half-lines are integrated apart (:math:`\\int_0^\\infty [f(\\sqrt q x) +
    f(-\\sqrt q x)]\\, \\varphi(x)\\, dx`), so ReLU's kink at 0 sits on an end of the rule:
    Gauss-Hermite over the whole line loses three digits there (0.2% on
    :math:`\\mathbb{E}|z|` with 200 nodes, an error falling only as :math:`1/n`).

    >>> round(gauss_expect(lambda u: u**2, q=3.0), 12)
    3.0
    >>> round(gauss_expect(torch.relu) * math.sqrt(2 * math.pi), 12)  # E[relu(z)] = 1/sqrt(2 pi)
    1.0
    """
    x, weights = _half_line()  # (P,), (P,): the rule times phi(x), made once
    u = math.sqrt(q) * x  # (P,)
    return float((weights * (f(u) + f(-u))).sum())


def pair_expect(f: Fn, g: Fn, q: float, c: float) -> float:
    """:math:`\\mathbb{E}[f(u_1) g(u_2)]` for :math:`u_1, u_2` of variance ``q`` and correlation
    ``c``: :math:`u_1 = \\sqrt{q} z_1`, :math:`u_2 = \\sqrt{q}(c z_1 + \\sqrt{1 - c^2} z_2)`.

    In polar coordinates :math:`(z_1, z_2) = r(\\cos\\theta, \\sin\\theta)` a kink of ``f``
    or ``g`` at 0 is a ray, at :math:`\\theta = \\pm\\pi/2` for :math:`u_1` and
    :math:`\\theta_0 \\pm \\pi/2` for :math:`u_2` (:math:`\\tan\\theta_0 = \\sqrt{1-c^2}/c`):
    each arc between rays gets its own rule, and the radius its own, weighted by
    :math:`r e^{-r^2/2} / 2\\pi`.

    >>> round(pair_expect(lambda u: u, lambda u: u, q=2.0, c=0.3), 12)
    0.6
    >>> round(pair_expect(torch.relu, torch.relu, 1.0, 0.0) * 2 * math.pi, 12)  # E[relu]^2
    1.0
    """
    c = min(max(c, -1.0), 1.0)
    s = math.sqrt(1.0 - c * c)
    theta0 = math.atan2(s, c)
    rays = sorted(
        (a + math.pi) % (2 * math.pi) - math.pi
        for a in (math.pi / 2, -math.pi / 2, theta0 + math.pi / 2, theta0 - math.pi / 2)
    )
    ends = [*rays, rays[0] + 2 * math.pi]
    r, r_weights = _legendre(96, 0.0, 13.0)  # (Pr,)
    radial = r_weights * r * torch.exp(-0.5 * r * r) / (2.0 * math.pi)  # (Pr,)
    total = 0.0
    for low, high in itertools.pairwise(ends):
        if high - low < 1e-15:
            continue
        theta, t_weights = _legendre(48, low, high)  # (Pa,), (Pa,)
        z1 = r[:, None] * torch.cos(theta)[None, :]  # (Pr, Pa)
        z2 = r[:, None] * torch.sin(theta)[None, :]  # (Pr, Pa)
        u1, u2 = math.sqrt(q) * z1, math.sqrt(q) * (c * z1 + s * z2)
        total += float((radial[:, None] * t_weights[None, :] * f(u1) * g(u2)).sum())
    return total


def q_map(activation: Activation, q: float, sigma_w2: float, sigma_b2: float) -> float:
    """One layer of the length map: :math:`\\sigma_w^2 \\mathbb{E}[\\phi(\\sqrt{q} z)^2] +
    \\sigma_b^2`, the variance argument for any activation.

    >>> round(q_map("linear", 1.0, 2.0, 0.0), 12), round(q_map("relu", 1.0, 2.0, 0.0), 12)
    (2.0, 1.0)
    """
    phi, _ = activation_pair(activation)
    return sigma_w2 * gauss_expect(lambda u: phi(u) ** 2, q) + sigma_b2


def c_map(activation: Activation, c: float, q: float, sigma_w2: float, sigma_b2: float) -> float:
    """One layer of the correlation map for two inputs of length ``q`` and correlation ``c``:
    their covariance after the layer over its length :math:`q^{l+1}` (= ``q_map``).

    >>> round(c_map("linear", 0.5, 1.0, 1.0, 0.0), 12)
    0.5
    """
    phi, _ = activation_pair(activation)
    q = clamp_length(q)
    covariance = sigma_w2 * pair_expect(phi, phi, q, c) + sigma_b2
    return covariance / q_map(activation, q, sigma_w2, sigma_b2)


def q_trajectory(
    activation: Activation, q0: float, depth: int, sigma_w2: float, sigma_b2: float
) -> list[float]:
    """The predicted pre-activation length after each of ``depth`` layers, from inputs whose
    first layer sees length ``q0`` (:math:`q^1 = \\sigma_w^2 q^0 + \\sigma_b^2` for raw inputs is
    the caller's choice; here every layer applies the map).

    >>> [round(q, 3) for q in q_trajectory("relu", 1.0, 3, 2.0, 0.0)]
    [1.0, 1.0, 1.0]
    """
    out, q = [], q0
    for _ in range(depth):
        q = q_map(activation, q, sigma_w2, sigma_b2)
        out.append(q)
    return out


def c_trajectory(
    activation: Activation, c0: float, q0: float, depth: int, sigma_w2: float, sigma_b2: float
) -> list[float]:
    """The predicted correlation of two inputs after each of ``depth`` layers, both starting at
    length ``q0`` and correlation ``c0`` (the length moves along :func:`q_trajectory`).

    >>> [round(c, 6) for c in c_trajectory("linear", 0.5, 1.0, 2, 1.0, 0.0)]
    [0.5, 0.5]
    """
    out, c, q = [], c0, q0
    for _ in range(depth):
        c, q = c_map(activation, c, q, sigma_w2, sigma_b2), q_map(activation, q, sigma_w2, sigma_b2)
        out.append(c)
    return out


def _bisect(f: Callable[[float], float], lo: float, hi: float, steps: int = 200) -> float:
    """A root of ``f`` between ``lo`` and ``hi`` where ``f`` changes sign, to 1e-13 relative
    (geometric midpoints when both are positive and far apart, so decades take few steps)."""
    f_lo = f(lo)
    if f_lo == 0.0 or f(hi) == 0.0:  # a root on an end (the gap's rounding floor makes it 0)
        return lo if f_lo == 0.0 else hi
    for _ in range(steps):
        if hi - lo <= 1e-13 * max(abs(lo), abs(hi)):
            break
        mid = math.sqrt(lo * hi) if lo > 0 and hi / lo > 4 else 0.5 * (lo + hi)
        f_mid = f(mid)
        if (f_mid > 0) == (f_lo > 0):
            lo, f_lo = mid, f_mid
        else:
            hi = mid
    return 0.5 * (lo + hi)


def fixed_length(
    activation: Activation, sigma_w2: float, sigma_b2: float, q0: float = 1.0
) -> float:
    """The fixed point :math:`q^*` the length map reaches from ``q0``: ``0`` where lengths die
    out, ``inf`` where they grow without bound (ReLU above :math:`\\sigma_w^2 = 2`).

    >>> fixed_length("relu", 1.5, 0.0), fixed_length("relu", 2.5, 0.0)
    (0.0, inf)
    >>> round(fixed_length("linear", 0.5, 0.1), 9)  # sigma_b2 / (1 - sigma_w2)
    0.2
    """

    def gap(q: float) -> float:  # above the diagonal by more than rounding: q grows
        step = q_map(activation, q, sigma_w2, sigma_b2) - q
        return 0.0 if abs(step) <= 1e-12 * q else step

    g0 = gap(q0)
    if g0 == 0.0:  # every length is fixed (ReLU at sigma_w2 = 2, sigma_b2 = 0): it stays
        return q0
    lo = hi = q0
    if g0 > 0:  # the length grows: double until the map falls below the diagonal
        while gap(hi) > 0:
            lo, hi = hi, hi * 2.0
            if hi > 1e300:
                return math.inf
    else:  # it shrinks: halve until the map rises above the diagonal (the bias holds it up)
        while gap(lo) < 0:
            lo, hi = lo / 2.0, lo
            if lo < 1e-300:
                return 0.0
    return _bisect(gap, lo, hi)


def _chi(activation: Activation, q: float, sigma_w2: float, c: float = 1.0) -> float:
    """:math:`\\sigma_w^2 \\mathbb{E}[\\phi'(u_1)\\phi'(u_2)]` at length ``q``, correlation ``c``
    (:math:`\\chi_1` at ``c = 1``, :math:`\\chi_c` at :math:`c^*`)."""
    _, dphi = activation_pair(activation)
    q = clamp_length(q)
    if c >= 1.0:
        return sigma_w2 * gauss_expect(lambda u: dphi(u) ** 2, q)
    return sigma_w2 * pair_expect(dphi, dphi, q, c)


def _c_slope(
    activation: Activation, q: float, sigma_w2: float, sigma_b2: float, c: float = 1.0
) -> float:
    """The correlation map's slope :math:`\\partial c^{l+1} / \\partial c^l` at ``c``:
    :math:`\\chi_c\\, q / q^{l+1}`, which is :math:`\\chi_c` at the fixed point and 1 for a
    length with none (ReLU without biases: its correlations settle slower than exponentially)."""
    q = clamp_length(q)
    return _chi(activation, q, sigma_w2, c) * q / q_map(activation, q, sigma_w2, sigma_b2)


def _fixed_correlation(activation: Activation, q: float, sigma_w2: float, sigma_b2: float) -> float:
    """:math:`c^*`: 1 unless the map's slope at 1 exceeds 1 (chaos), then the stable fixed point
    below 1, which attracts the correlation from any start."""

    def gap(c: float) -> float:
        return c_map(activation, c, q, sigma_w2, sigma_b2) - c

    if _c_slope(activation, q, sigma_w2, sigma_b2) <= 1.0 + 1e-6:
        return 1.0
    lo = 0.0 if gap(0.0) > 0 else -1.0
    return _bisect(gap, lo, 1.0 - 1e-9)


@dataclass(frozen=True)
class MeanField:
    """The mean-field state of a deep stack: where it sits in the phase diagram."""

    q_star: float  # the fixed-point pre-activation variance (0 or inf where none is finite)
    chi_1: float  # sigma_w2 * E[phi'(sqrt(q*) z)^2]: growth of a perturbation per layer
    c_star: float  # the fixed-point correlation of two inputs
    xi_c: float  # -1 / ln chi_c: depth over which correlations settle (inf at criticality)
    phase: str  # "ordered" (chi_1 < 1), "critical" or "chaotic" (chi_1 > 1)


def mean_field(activation: Activation, sigma_w2: float, sigma_b2: float) -> MeanField:
    """Where a stack with weight variance ``sigma_w2 / n`` and bias variance ``sigma_b2`` sits:
    :math:`q^*`, :math:`\\chi_1`, :math:`c^*`, :math:`\\xi_c` and its phase (Schoenholz et al.
    2017, from Poole et al. 2016).

    Args:
        activation: a name in :data:`ACTIVATIONS` or a pair ``(phi, dphi)``.
        sigma_w2: :math:`n\\,\\mathrm{Var}(W)`, positive.
        sigma_b2: :math:`\\mathrm{Var}(b)`, at least 0.

    >>> mf = mean_field("tanh", 1.0, 0.05)
    >>> mf.phase, round(mf.xi_c, 1)
    ('ordered', 3.6)
    >>> mean_field("relu", 2.0, 0.0).phase
    'critical'
    """
    _check_variances(sigma_w2, sigma_b2)
    q_star = fixed_length(activation, sigma_w2, sigma_b2)
    chi_1 = _chi(activation, q_star, sigma_w2)
    c_star = _fixed_correlation(activation, q_star, sigma_w2, sigma_b2)
    chi_c = _c_slope(activation, q_star, sigma_w2, sigma_b2, c_star)
    xi_c = math.inf if abs(chi_c - 1.0) <= 1e-6 else -1.0 / math.log(chi_c)
    phase = "ordered" if chi_1 < 1.0 else "chaotic"
    if abs(chi_1 - 1.0) <= 1e-6:  # on the line, to what critical_sigma_w2's bisection reaches
        phase = "critical"
    return MeanField(q_star, chi_1, c_star, xi_c, phase)


def _check_variances(sigma_w2: float, sigma_b2: float) -> None:
    if not (isinstance(sigma_w2, int | float) and math.isfinite(sigma_w2) and sigma_w2 > 0):
        raise ValueError(f"sigma_w2 {sigma_w2!r} not allowed, use a finite number above 0")
    if not (isinstance(sigma_b2, int | float) and math.isfinite(sigma_b2) and sigma_b2 >= 0):
        raise ValueError(f"sigma_b2 {sigma_b2!r} not allowed, use a finite number at least 0")


def critical_sigma_w2(activation: Activation, sigma_b2: float) -> float:
    """The weight variance on the critical line :math:`\\chi_1 = 1` for bias variance
    ``sigma_b2`` (Schoenholz et al. 2017, Fig. 1): below it the stack is ordered, above chaotic.

    >>> round(critical_sigma_w2("tanh", 0.05), 3)
    1.761
    >>> round(critical_sigma_w2("relu", 0.0), 6)
    2.0
    """
    _check_variances(1.0, sigma_b2)

    def excess(sigma_w2: float) -> float:  # chi_1 - 1, increasing in sigma_w2
        return _chi(activation, fixed_length(activation, sigma_w2, sigma_b2), sigma_w2) - 1.0

    lo, hi = 1e-3, 1.0
    while excess(hi) < 0:
        lo, hi = hi, hi * 2.0
        if hi > 1e4:
            raise ValueError(
                f"activation {activation!r} has no critical sigma_w2 below 1e4 at sigma_b2 "
                f"{sigma_b2}: chi_1 stays below 1"
            )
    return _bisect(excess, lo, hi)


def trainable_depth(activation: Activation, sigma_w2: float, sigma_b2: float) -> float:
    """The depth below which a stack still trains, :math:`6 \\xi_c` (Schoenholz et al. 2017,
    Fig. 5: the trainable band of MNIST and CIFAR-10 networks); ``inf`` on the critical line.

    >>> round(trainable_depth("tanh", 1.0, 0.05), 1)
    21.8
    """
    return 6.0 * mean_field(activation, sigma_w2, sigma_b2).xi_c


@dataclass(frozen=True)
class JacobianSpectrum:
    """Predicted moments of :math:`\\lambda = s^2`, the squared singular values of the
    input-output Jacobian."""

    mean: float  # chi^L
    variance: float  # chi^(2L) L (mu2 / mu1^2 - 1 - s1)
    depth_to_width: float  # L / n: the predictions hold while this is small


Weights = Literal["gaussian", "orthogonal"]


def jacobian_spectrum(
    activation: Activation,
    depth: int,
    width: int,
    weights: Weights = "gaussian",
    q_star: float | None = None,
    sigma_w2: float | None = None,
) -> JacobianSpectrum:
    """The mean and variance of the squared singular values of :math:`J = \\prod_l D_l W_l`
    (Pennington, Schoenholz & Ganguli 2017, eq. 16-17), with :math:`D_l = \\mathrm{diag}\\,
    \\phi'(h^l)` at the fixed point :math:`q^*`.

    .. math::
        \\mu_k = \\mathbb{E}_z[\\phi'(\\sqrt{q^*} z)^{2k}], \\quad
        \\chi = \\sigma_w^2 \\mu_1, \\quad m_1 = \\chi^L, \\quad
        \\sigma^2 = \\chi^{2L} L \\Big(\\frac{\\mu_2}{\\mu_1^2} - 1 - s_1\\Big)

    Each layer's :math:`W^\\top D^2 W` is free of the others, so the ratio variance / mean^2 adds
    up over layers. :math:`s_1 = -1` for Gaussian weights and 0 for orthogonal ones: a linear
    orthogonal stack is exactly isometric, a Gaussian one has :math:`\\sigma^2 = L`; ReLU has
    :math:`\\mu_2 / \\mu_1^2 = 2` whatever :math:`q^*`, so no weights make it isometric; tanh
    near the origin (:math:`q^* \\to 0`) has :math:`\\mu_2 / \\mu_1^2 \\to 1`.

    Args:
        activation: a name in :data:`ACTIVATIONS` or a pair ``(phi, dphi)``.
        depth: the number of layers :math:`L` (at least 1).
        width: the layers' width :math:`n` (these are its :math:`n \\to \\infty` limits; the
            finite-width corrections grow with :math:`L / n`, reported as ``depth_to_width``).
        weights: ``"gaussian"`` or ``"orthogonal"``.
        q_star: the pre-activation length the Jacobian is taken at; needed unless the
            activation's derivative is scale-free (linear, ReLU).
        sigma_w2: the weight variance; ``None`` takes the critical one, :math:`1 / \\mu_1`.

    >>> s = jacobian_spectrum("linear", 10, 500)
    >>> round(s.mean, 12), round(s.variance, 12)
    (1.0, 10.0)
    >>> round(jacobian_spectrum("relu", 10, 500, "orthogonal").variance, 12)
    10.0
    """
    if not (isinstance(depth, int) and depth >= 1):
        raise ValueError(f"depth {depth!r} not allowed, use an integer at least 1")
    if not (isinstance(width, int) and width >= 1):
        raise ValueError(f"width {width!r} not allowed, use an integer at least 1")
    # the first S-transform coefficient of W^T W / sigma_w2: Marchenko-Pastur's -1, and 0 for an
    # orthogonal matrix, whose spectrum is a single point
    s1 = {"gaussian": -1.0, "orthogonal": 0.0}
    if weights not in s1:
        raise ValueError(f"weights {weights!r} not supported, use one of {list(s1)}")
    _, dphi = activation_pair(activation)
    if q_star is None:
        if not _scale_free(dphi):
            raise ValueError(f"q_star is needed for activation {activation!r}: give a length > 0")
        q_star = 1.0
    mu1 = gauss_expect(lambda u: dphi(u) ** 2, q_star)
    # mu2 / mu1^2 - 1 as Var[phi'^2] / mu1^2: 0 for a linear stack to 1e-28, not to 1e-14
    spread = gauss_expect(lambda u: (dphi(u) ** 2 - mu1) ** 2, q_star) / mu1**2
    chi = (1.0 / mu1 if sigma_w2 is None else sigma_w2) * mu1
    ratio = spread - s1[weights]
    return JacobianSpectrum(chi**depth, chi ** (2 * depth) * depth * ratio, depth / width)


def _scale_free(dphi: Fn) -> bool:
    """Whether :math:`\\mathbb{E}[\\phi'(\\sqrt q z)^2]` is the same at every length (linear,
    ReLU): then the Jacobian's spectrum does not depend on :math:`q^*`."""
    at = [gauss_expect(lambda u: dphi(u) ** 2, q) for q in (0.25, 1.0, 4.0)]
    return max(at) - min(at) <= 1e-12


def bn_gradient_growth(activation: Activation) -> float:
    """The factor by which the squared gradient norm grows per layer, going down a deep
    BatchNorm MLP without skips (Yang et al. 2019), in the large-batch limit.

    .. math::
        \\lambda = \\frac{\\mathbb{E}_z[\\phi'(z)^2]}{\\mathrm{Var}_z[\\phi(z)]},
        \\qquad z \\sim \\mathcal{N}(0, 1)

    BatchNorm hands every unit a standard normal pre-activation :math:`z`; the next layer's
    pre-activations have variance :math:`n \\sigma_w^2 \\mathrm{Var}[\\phi(z)]`, which BatchNorm
    divides out on the way back, while the gradient picks up :math:`n \\sigma_w^2
    \\mathbb{E}[\\phi'^2]`: the weight scale cancels, and :math:`\\lambda > 1` for every
    nonlinearity that loses variance (:math:`\\pi / (\\pi - 1)` for ReLU). A batch of :math:`B`
    removes 2 of its :math:`B` directions per layer (mean and scale): for a linear stack the
    exact factor is :math:`(B - 2) / (B - 3)`, about :math:`1 + 1/B`.

    The step :math:`\\mathbb{E}[\\phi'(z)^2 g^2] = \\mathbb{E}[\\phi'(z)^2]\\,\\mathbb{E}[g^2]`
    treats the gradient :math:`g` as independent of the unit's own pre-activation. That holds
    for a positively homogeneous activation (ReLU, linear: :math:`\\phi'^2` is a function of the
    sign alone, which the gradient does not see), where this is Yang et al.'s exact limit, and
    within about 1% for tanh; it does not for GELU, whose samples' norms drift apart with depth
    (measured 1.35-1.38 against 1.319 here, at widths 512-2048 and batches 32-512).

    >>> round(bn_gradient_growth("relu"), 6) == round(math.pi / (math.pi - 1), 6)
    True
    >>> round(bn_gradient_growth("linear"), 12)
    1.0
    """
    phi, dphi = activation_pair(activation)
    mean = gauss_expect(phi)
    variance = gauss_expect(lambda u: (phi(u) - mean) ** 2)
    return gauss_expect(lambda u: dphi(u) ** 2) / variance


PLACEMENTS: tuple[str, ...] = ("post", "pre", "peri", "dyt", "none", "rezero")
"""Where a residual stream's normalization sits (:func:`residual_stream`)."""


def residual_stream(
    placement: str, depth: int, branch_scale: float = 1.0, branch_gain: float = 0.5
) -> list[float]:
    """The predicted second moment :math:`\\mathbb{E}|x_l|^2 / d` of a residual stream after each
    of ``depth`` blocks (``depth + 1`` values, from a unit-second-moment input :math:`x_0`).

    A block adds :math:`s\\,f(\\cdot)` to the stream, :math:`s` = ``branch_scale``, and its
    branch :math:`f` returns ``branch_gain`` :math:`g` times its input's second moment (at
    initialization, independent of the stream: 0.5 for Linear-ReLU-Linear with
    :math:`\\mathrm{Var}(W) = 1/\\mathrm{fan\\_in}` and no biases).

    - ``"pre"`` (pre-LN, Xiong et al. 2020): :math:`x + s f(\\mathrm{LN}(x))`: :math:`1 + l s^2 g`.
    - ``"post"`` (post-LN, the original Transformer): :math:`\\mathrm{LN}(x + s f(x))`: 1.
    - ``"peri"`` (Kim et al. 2025): :math:`x + s\\,\\mathrm{LN}(f(\\mathrm{LN}(x)))`:
      :math:`1 + l s^2`.
    - ``"dyt"`` (Zhu et al. 2025): pre-LN with :math:`\\tanh(\\alpha x)`, :math:`\\alpha = 0.5`:
      :math:`m_{l+1} = m_l + s^2 g\\, \\mathbb{E}[\\tanh(\\alpha \\sqrt{m_l} z)^2]`.
    - ``"none"``: :math:`x + s f(x)`: :math:`(1 + s^2 g)^l` (bounded by :math:`e^{g}` for
      :math:`s = 1/\\sqrt{L}`).
    - ``"rezero"`` (Bachlechner et al. 2020): :math:`x + \\alpha f(x)`, :math:`\\alpha = 0` at
      initialization: 1.

    >>> residual_stream("pre", 4)
    [1.0, 1.5, 2.0, 2.5, 3.0]
    >>> [round(m, 4) for m in residual_stream("none", 2, branch_scale=0.5 ** 0.5)]
    [1.0, 1.25, 1.5625]
    """
    valid = ("post", "pre", "peri", "dyt", "none", "rezero")
    if placement not in valid:
        raise ValueError(f"placement {placement!r} not supported, use one of {list(valid)}")
    if not (isinstance(depth, int) and depth >= 0):
        raise ValueError(f"depth {depth!r} not allowed, use an integer at least 0")
    s2 = branch_scale**2
    out = [1.0]
    for _ in range(depth):
        m = out[-1]
        if placement == "pre":
            m = m + s2 * branch_gain
        elif placement == "peri":
            m = m + s2
        elif placement == "dyt":
            m = m + s2 * branch_gain * gauss_expect(
                lambda u: torch.tanh(0.5 * u) ** 2, m
            )  # alpha0 = 0.5
        elif placement == "none":
            m = m * (1.0 + s2 * branch_gain)
        out.append(m)  # post-LN and ReZero keep 1
    return out


def log_norm_variance(depth: int, widths: int | Sequence[int]) -> float:
    """The variance of :math:`\\ln |x_L|^2` over random initializations of a ReLU stack at He
    initialization (Hanin & Rolnick 2018): about :math:`5 \\sum_l 1 / n_l`.

    Depth alone does not make a He-initialized ReLU net fail; depth over width does: the log
    norm performs a random walk whose steps have variance about :math:`5 / n_l`.

    >>> round(log_norm_variance(10, 100), 12), round(log_norm_variance(2, [10, 20]), 12)
    (0.5, 0.75)
    """
    layers = [widths] * depth if isinstance(widths, int) else list(widths)
    if len(layers) != depth or any(not isinstance(n, int) or n < 1 for n in layers):
        raise ValueError(f"widths {widths!r} not allowed, use one positive integer or {depth}")
    return 5.0 * sum(1.0 / n for n in layers)


def linear_variance(gain: float, depth: int, input_variance: float = 1.0) -> list[float]:
    """Predicted variance after each of ``depth`` linear layers: ``input_variance * g**(2k)``.

    >>> [round(v, 4) for v in linear_variance(1.1, 3)]
    [1.21, 1.4641, 1.7716]
    """
    return [input_variance * gain ** (2 * k) for k in range(1, depth + 1)]


def relu_variance(gain: float, depth: int, input_variance: float = 1.0) -> list[float]:
    """Predicted variance of the ReLU outputs of a stack with ``n * Var(w) = gain**2``.

    The input is zero-mean (its second moment is its variance); every later layer reads ReLU
    outputs, whose second moment is half the previous pre-activation variance.

    >>> [round(v, 4) for v in relu_variance(math.sqrt(2.0), 3)]  # He: flat
    [0.6817, 0.6817, 0.6817]
    """
    relu_factor = 0.5 - 1.0 / (2.0 * math.pi)  # Var(relu(a)) / Var(a), a ~ N(0, Var(a))
    out = []
    pre = gain**2 * input_variance  # Var(a_1)
    for _ in range(depth):
        out.append(relu_factor * pre)
        pre = gain**2 * pre / 2.0  # E[relu(a)^2] = Var(a) / 2
    return out


MEAN_FIELD_CODE = (
    gelu_grad,
    activation_pair,
    clamp_length,
    _unit_legendre,
    _legendre,
    _half_line,
    gauss_expect,
    pair_expect,
    q_map,
    c_map,
    q_trajectory,
    c_trajectory,
    _bisect,
    fixed_length,
    _chi,
    _c_slope,
    _fixed_correlation,
    MeanField,
    _check_variances,
    mean_field,
    critical_sigma_w2,
    trainable_depth,
)
"""What a script that calls the mean-field predictions pastes, in dependency order (as
``functional.BATCH_NORM_CODE``): an experiment's ``code`` starts with it."""
QUADRATURE_CODE = (gelu_grad, activation_pair, _unit_legendre, _legendre, _half_line, gauss_expect)
"""The Gaussian expectations alone, for a script that needs no fixed point."""
JACOBIAN_CODE = (*QUADRATURE_CODE, _scale_free, JacobianSpectrum, jacobian_spectrum)
BN_GROWTH_CODE = (*QUADRATURE_CODE, bn_gradient_growth)
RESIDUAL_CODE = (_unit_legendre, _legendre, _half_line, gauss_expect, residual_stream)
