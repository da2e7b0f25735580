"""``jacobian-spectrum``: dynamical isometry, measured against its prediction.

A deep stack :math:`h^l = W^l x^{l-1} + b^l`, :math:`x^l = \\phi(h^l)` maps a small change of its
input to a change of its output through the input-output Jacobian

.. math::
    J = \\frac{\\partial x^L}{\\partial x^0} = D^L W^L D^{L-1} W^{L-1} \\cdots D^1 W^1,
    \\qquad D^l = \\mathrm{diag}\\,\\phi'(h^l).

Its squared singular values :math:`s^2` say how much each input direction is stretched. At the
critical weight scale (:math:`\\chi_1 = \\sigma_w^2 \\mathbb{E}[\\phi'(h)^2] = 1`, with the
pre-activations at their fixed-point length :math:`q^*`) their mean is 1 at every depth, but
their spread is not (Pennington, Schoenholz & Ganguli 2017, "Resurrecting the sigmoid in deep
learning through dynamical isometry"):

.. math::
    \\mathrm{Var}(s^2) = L\\,\\Big(\\frac{\\mu_2}{\\mu_1^2} - 1 - s_1\\Big), \\qquad
    \\mu_k = \\mathbb{E}_z\\big[\\phi'(\\sqrt{q^*} z)^{2k}\\big],

with :math:`s_1 = -1` for Gaussian weights and 0 for orthogonal ones. A linear stack with
orthogonal weights is an exact isometry; with Gaussian weights its spectrum spreads as
:math:`L`. ReLU's derivative is 0 or 1, so :math:`\\mu_2/\\mu_1^2 = 2` whatever the weights: no
initialization makes it isometric. tanh near the origin (small :math:`q^*`) is nearly linear,
so orthogonal weights keep its whole spectrum near 1: dynamical isometry.

The Jacobian is computed exactly, as the product above, for one input at the fixed point; every
layer's :math:`s^2` come from ``torch.linalg.svdvals``; the prediction is
:func:`normlab.theory.jacobian_spectrum`. It holds while :math:`L/n` is small: a finite width
adds a bias of about :math:`L/(2n)` to :math:`\\mathrm{Var}(s^2)/L` and a seed-to-seed spread
that grows like :math:`L/n`, and the overall scale (the mean) drifts from 1 by a random factor.
The prediction's variance is :math:`\\mathrm{mean}^2 L (\\ldots)`, so the figure compares
:math:`\\mathrm{Var}(s^2)/\\mathrm{mean}(s^2)^2`, which that drift leaves alone.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from normlab import figures as fig
from normlab.experiments.base.params import device_param, param, seed_param
from normlab.experiments.base.registry import Cost, Experiment
from normlab.experiments.base.results import Result
from normlab.figures import Table
from normlab.models import fmt, fmt_as
from normlab.theory import JACOBIAN_CODE, activation_pair, gauss_expect, jacobian_spectrum

ZERO = 1e-12
"""A predicted spread below this is 0 (the linear orthogonal stack's: the quadrature leaves
about 1e-14 per layer), left off the log axis rather than drawn as if it were a value."""
LOG_FLOOR = 1e-16
"""A variance of exactly 0 is drawn at this floor of the log axis (float32's rounding leaves the
orthogonal linear stack's at about 1e-13)."""


@dataclass(frozen=True)
class Params:
    activation: str = param(
        "tanh", "activation phi after every layer", choices=("linear", "relu", "tanh")
    )
    q_star: float = param(
        0.01,
        "fixed-point pre-activation variance q* (tanh: small q* is near the origin, nearly linear)",
        min=0.001,
        max=4.0,
        step=0.001,
    )
    depth: int = param(
        32,
        "layers L; the spectrum is histogrammed at depths 1, 4, 16, 64 up to L, and at L",
        min=1,
        max=100,
        step=1,
    )
    width: int = param(
        256, "width n of every layer (the Jacobian is n x n)", min=8, max=512, step=1
    )
    bins: int = param(60, "histogram bins over 0 <= s^2 <= 3", min=5, max=200, step=1)
    seed: int = seed_param()
    device: str = device_param()


# -- the code (plain PyTorch: what `normlab run jacobian-spectrum --code` prints) ---------------


def critical_point(activation: str, q_star: float) -> tuple[float, float]:
    """(sigma_w2, sigma_b2) on the critical line chi_1 = 1 whose fixed-point length is q*."""
    phi, dphi = activation_pair(activation)
    sigma_w2 = 1.0 / gauss_expect(lambda u: dphi(u) ** 2, q_star)  # chi_1 = 1
    sigma_b2 = q_star - sigma_w2 * gauss_expect(lambda u: phi(u) ** 2, q_star)  # q* = q_map(q*)
    return sigma_w2, max(sigma_b2, 0.0)  # linear and relu: 0 (up to rounding)


def draw_weight(weights: str, n: int, sigma_w2: float) -> torch.Tensor:
    """An (n, n) weight: Gaussian N(0, sigma_w2 / n) entries, or sqrt(sigma_w2) times a random
    orthogonal matrix (the same n * Var(w) = sigma_w2)."""
    if weights == "gaussian":
        return torch.randn(n, n) * (sigma_w2 / n) ** 0.5
    return nn.init.orthogonal_(torch.empty(n, n), gain=sigma_w2**0.5)


def jacobian_spectra(
    activation: str, weights: str, q_star: float, depth: int, width: int, device: str
) -> Iterator[torch.Tensor]:
    """Yields s^2 of J_l = D_l W_l ... D_1 W_1 after every layer l, for one input at the fixed
    point."""
    phi, dphi = activation_pair(activation)
    sigma_w2, sigma_b2 = critical_point(activation, q_star)
    z = torch.randn(width)  # (n,)
    h = z * (q_star / z.pow(2).mean()) ** 0.5  # (n,): pre-activations of length exactly q*
    x = phi(h).to(device)  # x^0: the output of a layer at the fixed point
    jac = torch.eye(width, device=device)  # (n, n): dx^0 / dx^0
    for _ in range(depth):
        w = draw_weight(weights, width, sigma_w2).to(device)  # (n_out, n_in)
        b = (torch.randn(width) * sigma_b2**0.5).to(device)  # (n,)
        h = w @ x + b  # (n,) pre-activations
        x = phi(h)
        jac = dphi(h)[:, None] * (w @ jac)  # D_l W_l J_{l-1}: (n, n)
        yield torch.linalg.svdvals(jac).cpu() ** 2  # (n,) squared singular values


def histogram(s2: torch.Tensor, bins: int, top: float = 3.0) -> dict[str, Any]:
    """Counts of s^2 in ``bins`` equal bins over [0, top]; those above are counted apart."""
    counts = torch.histc(s2, bins=bins, min=0.0, max=top)  # (bins,): histc skips s^2 > top
    beyond = int((s2 > top).sum())
    edges = torch.linspace(0.0, top, bins + 1)  # (bins + 1,)
    return {"counts": counts.tolist(), "edges": edges.tolist(), "beyond": beyond}


def dynamical_isometry(
    activation: str, q_star: float, depth: int, width: int, bins: int, seed: int, device: str
) -> Iterator[dict[str, Any]]:
    """Measured and predicted moments of s^2 at every depth, and histograms at a few depths,
    for Gaussian and for orthogonal weights (the same input, the same seed).

    Yields the result so far after every layer of each stack, and last the whole result.
    """
    hist_depths = sorted({d for d in (1, 4, 16, 64) if d <= depth} | {depth})
    sigma_w2, sigma_b2 = critical_point(activation, q_star)
    result: dict[str, Any] = {
        "activation": activation,
        "q_star": q_star,
        "sigma_w2": sigma_w2,
        "sigma_b2": sigma_b2,
        "width": width,
        "hist_depths": hist_depths,
        "runs": [],
    }
    for weights in ("gaussian", "orthogonal"):
        torch.manual_seed(seed)
        # Pennington et al.: mean chi^L = 1 here, variance mean^2 L (mu2 / mu1^2 - 1 - s1)
        predicted = [
            jacobian_spectrum(activation, layer, width, weights, q_star=q_star)
            for layer in range(1, depth + 1)
        ]
        run: dict[str, Any] = {
            "weights": weights,
            "mean": [],
            "variance": [],
            "relative": [],  # var / mean^2: the spread with the finite width's drift divided out
            "largest": [],
            "theory": {
                "mean": [p.mean for p in predicted],
                "variance": [p.variance for p in predicted],
            },
            "histograms": [],
        }
        result["runs"].append(run)
        for layer, s2 in enumerate(
            jacobian_spectra(activation, weights, q_star, depth, width, device), start=1
        ):
            run["mean"].append(s2.mean().item())
            run["variance"].append(s2.var(unbiased=False).item())
            run["relative"].append((s2.var(unbiased=False) / s2.mean() ** 2).item())
            run["largest"].append(s2.max().item())
            if layer in hist_depths:
                run["histograms"].append(histogram(s2, bins))
            yield result  # every layer so far


def tables(result: dict[str, Any]) -> list[dict[str, Any]]:
    """Mean and spread of s^2 at a few depths, against the theory, for both kinds of weights."""
    runs = result["runs"]
    depth = len(runs[0]["mean"])
    shown = sorted({1, 2, 4, 8, 16, 32, 64, depth} & set(range(1, depth + 1)))
    columns = ["depth"]
    for r in runs:
        w = r["weights"]
        columns += [f"{w} mean", f"{w} var", f"{w} var/mean² (theory)"]
    rows = []
    for d in shown:
        row = [str(d)]
        for r in runs:
            relative = f"{fmt_as(r['relative'][d - 1], '.4g')} "
            relative += f"({fmt_as(r['theory']['variance'][d - 1], '.4g')})"
            row += [fmt(r["mean"][d - 1]), fmt_as(r["variance"][d - 1], ".4g"), relative]
        rows.append(row)
    notes = [
        f"{result['activation']} at q* = {result['q_star']:.4g}: sigma_w2 = "
        f"{fmt(result['sigma_w2'], 6)}, sigma_b2 = {fmt_as(result['sigma_b2'], '.4g')} "
        "(the critical line chi_1 = 1)",
        "theory (Pennington et al. 2017): mean 1, var = mean² L (mu2/mu1² - 1 - s1), "
        f"for L/n small (here up to {depth / result['width']:.3g})",
    ]
    for r in runs:
        beyond = [h["beyond"] for h in r["histograms"]]
        notes.append(
            f"{r['weights']}: largest s² {fmt_as(r['largest'][-1], '.4g')} at depth {depth}; "
            f"s² above 3 at depths {result['hist_depths']}: {beyond}"
        )
    return [
        {
            "title": "Squared singular values s² of the Jacobian",
            "columns": columns,
            "rows": rows,
            "notes": notes,
        }
    ]


# -- the result ---------------------------------------------------------------------------------


@dataclass
class SpectrumHistogram:
    counts: list[float]  # (bins,): s^2 per bin over [0, 3]
    edges: list[float]  # (bins + 1,)
    beyond: int  # how many s^2 lie above 3


@dataclass
class Prediction:
    mean: list[float]  # (depth,): 1 at the critical point
    variance: list[float]  # (depth,): l * (mu2 / mu1^2 - 1 - s1)


@dataclass
class WeightsRun:
    weights: str  # "gaussian" or "orthogonal"
    mean: list[float]  # (depth,): mean of s^2 after layer l
    variance: list[float]  # (depth,): biased variance of s^2 after layer l
    relative: list[float]  # (depth,): variance / mean^2
    largest: list[float]  # (depth,): the largest s^2
    theory: Prediction
    histograms: list[SpectrumHistogram]  # one per hist depth


@dataclass
class JacobianSpectrumResult(Result):
    activation: str
    q_star: float
    sigma_w2: float
    sigma_b2: float
    width: int
    hist_depths: list[int]
    runs: list[WeightsRun]

    @property
    def depth(self) -> int:
        return len(self.runs[0].theory.mean)  # the whole stack's (a partial run predicts it all)

    @property
    def finished(self) -> bool:
        """Whether both stacks have run every layer (a streamed frame's partial run has not)."""
        last = self.runs[-1]
        return last.weights == "orthogonal" and len(last.mean) == self.depth

    def run(self, weights: str) -> WeightsRun:
        """The run with ``weights`` ("gaussian" or "orthogonal")."""
        return next(r for r in self.runs if r.weights == weights)

    def tables(self) -> list[Table]:
        return Table.from_dicts(tables(self.data()))

    def figures(self) -> list[fig.Figure]:
        """The histograms and the moments over depth; a partial run (a streamed frame) draws
        the layers run so far, the theory over the whole stack."""
        return [self._histogram_figure(), self._moments_figure()]

    def _so_far(self) -> str:
        """A partial run's title: the stack under way and its layers done."""
        if self.finished:
            return ""
        last = self.runs[-1]
        return f", so far: {last.weights} weights to layer {len(last.mean)} of {self.depth}"

    def _histogram_figure(self) -> fig.Figure:
        panels = []  # a row per depth: Gaussian weights left, orthogonal right
        reached = self.hist_depths[: len(self.runs[0].histograms)]  # the first stack's so far
        for i, depth in enumerate(reached):
            for k, r in enumerate(self.runs):
                if i < len(r.histograms):
                    panels.append(self._histogram_panel(r, depth, r.histograms[i], fig.PALETTE[k]))
                else:  # a partial run's second stack, not this deep yet
                    title = f"{r.weights.capitalize()}, depth {depth}: to come"
                    panels.append(fig.Panel(fig.Axis("s²"), fig.Axis("count"), [], title=title))
        kind = {"linear": "linear", "relu": "ReLU", "tanh": "tanh"}[self.activation]
        return fig.Figure(
            f"Squared singular values of a {kind} stack's Jacobian over depth "
            f"(over each panel: var/mean², measured vs theory){self._so_far()}",
            panels,
            columns=len(self.runs),
            height=2.4,
        )

    def _histogram_panel(
        self, r: WeightsRun, depth: int, h: SpectrumHistogram, color: str
    ) -> fig.Panel:
        bars = fig.Series(
            f"{r.weights} weights",
            [(a + b) / 2 for a, b in itertools.pairwise(h.edges)],
            h.counts,
            kind="histogram",
            color=color,
            edges=h.edges,
            legend=False,
        )
        relative, theory = r.relative[depth - 1], r.theory.variance[depth - 1]
        return fig.Panel(
            fig.Axis("s²"),
            fig.Axis("count"),
            [bars],
            title=f"{r.weights.capitalize()}, depth {depth}: {relative:.3g} vs {theory:.3g}",
            lines=[fig.Line(1.0, axis="x", color="#000000")],
            note=f"{h.beyond} above 3" if h.beyond else "",
        )

    def _moments_figure(self) -> fig.Figure:
        depths = fig.steps(self.depth, start=1)  # the theory's, every layer
        panels = []
        # theory's variance is mean^2 L (...): at its mean of 1, the measured var / mean^2
        for stat, label in (("mean", "mean of s²"), ("relative", "var(s²) / mean(s²)²")):
            series = []
            for k, r in enumerate(self.runs):
                color = fig.PALETTE[k]
                predicted = r.theory.mean if stat == "mean" else r.theory.variance
                series += [
                    fig.Series(
                        f"{r.weights} measured",
                        depths[: len(r.mean)],  # the layers run (a partial run: so far)
                        fig.floored(getattr(r, stat), LOG_FLOOR),
                        kind="markers",
                        color=color,
                    ),
                    fig.Series(
                        f"{r.weights} theory",
                        depths,
                        [v if v > ZERO else None for v in predicted],
                        color=color,
                        dash="dash",
                    ),
                ]
            panels.append(
                fig.Panel(
                    fig.Axis("depth L (log scale)", scale="log"),
                    fig.Axis(f"{label} (log scale)", scale="log"),
                    series,
                    lines=[fig.Line(1.0)] if stat == "mean" else [],
                    note="dots: measured; dashed: theory (Pennington et al. 2017)",
                )
            )
        title = f"Mean and spread of s² over depth: measured against theory{self._so_far()}"
        return fig.Figure(title, panels)


EXPERIMENT = Experiment(
    name="jacobian-spectrum",
    title="Jacobian spectrum and dynamical isometry",
    summary=(
        "squared singular values of a deep stack's input-output Jacobian, Gaussian vs orthogonal "
        "weights at the critical point, against Pennington et al.'s mean and variance"
    ),
    params_type=Params,
    result_type=JacobianSpectrumResult,
    entry=dynamical_isometry,
    tables=tables,
    code=(
        *JACOBIAN_CODE,  # normlab.theory's prediction, pasted into the script with its helpers
        critical_point,
        draw_weight,
        jacobian_spectra,
        histogram,
        dynamical_isometry,
        fmt,
        fmt_as,
        tables,
    ),
    cost=Cost(12.0),
    stages=lambda p: 2 * p.depth,  # every layer of the Gaussian stack, then the orthogonal one
    stage="layer",
)
