"""``init-compare``: Xavier and He from their formulas, checked, then raced on a deep ReLU stack.

Xavier/Glorot (uniform) draws :math:`U(-a, a)` with :math:`a = \\sqrt{6/(n_{in} + n_{out})}`
(variance :math:`2/(n_{in}+n_{out})`); He/Kaiming (normal, ReLU) draws
:math:`\\mathcal{N}(0, 2/n_{in})`, the factor 2 making up for the half a ReLU zeroes. The result
checks both against what :mod:`normlab.init` draws, then follows the per-layer activation variance
of a deep ReLU stack under four schemes, with the mean-field prediction beside each, and
histograms of the activations at one deep layer.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch

from normlab import init, theory
from normlab.experiments.base import (
    Experiment,
    Histogram,
    ParameterError,
    Result,
    Table,
    device_param,
    histogram,
    param,
    seed_param,
)

Draw = Callable[[torch.Tensor, torch.Generator], object]
SCHEMES: dict[str, tuple[Draw, Callable[[int], float]]] = {
    # name: (draw into a (n_out, n_in) tensor, n * Var(w) as a function of the fan-in n)
    "small random (std 0.02)": (
        lambda w, g: init.normal_(w, 0.0, 0.02, generator=g),
        lambda n: n * 0.02**2,
    ),
    "large random (std 0.30)": (
        lambda w, g: init.normal_(w, 0.0, 0.30, generator=g),
        lambda n: n * 0.30**2,
    ),
    "Xavier uniform": (lambda w, g: init.xavier_uniform_(w, generator=g), lambda n: 1.0),
    "He normal": (
        lambda w, g: init.kaiming_normal_(w, nonlinearity="relu", generator=g),
        lambda n: 2.0,
    ),
}


@dataclass(frozen=True)
class Params:
    fan_in: int = param(
        128, "fan-in of the weight checked against the formulas", min=1, max=4096, step=1
    )
    fan_out: int = param(64, "fan-out of that weight", min=1, max=4096, step=1)
    depth: int = param(20, "ReLU layers in the stack", min=1, max=60, step=1)
    width: int = param(128, "width of every layer", min=2, max=512, step=1)
    batch: int = param(256, "rows in the batch", min=2, max=1024, step=1)
    hist_layer: int = param(
        10, "layer whose activations are histogrammed (at most depth)", min=1, max=60, step=1
    )
    bins: int = param(60, "histogram bins", min=5, max=200, step=1)
    seed: int = seed_param()
    device: str = device_param()

    def __post_init__(self) -> None:
        if self.hist_layer > self.depth:
            raise ParameterError(
                "hist_layer",
                f"parameter 'hist_layer': {self.hist_layer} is deeper than the stack, "
                f"use a layer in [1, {self.depth}] (depth)",
            )


@dataclass
class SchemeCurve:
    scheme: str
    variances: list[float]  # (depth,): biased variance of each ReLU layer's output
    theory: list[float]  # (depth,): mean-field prediction
    histogram: Histogram  # activations at hist_layer


@dataclass
class InitCompareResult(Result):
    xavier_bound_formula: float
    xavier_max_abs: float
    he_std_formula: float
    he_std_measured: float
    hist_layer: int
    curves: list[SchemeCurve]

    def tables(self) -> list[Table]:
        check = [
            (
                "Xavier uniform bound a",
                f"{self.xavier_bound_formula:.5f}",
                f"{self.xavier_max_abs:.5f} (max |w|)",
            ),
            ("He normal std", f"{self.he_std_formula:.5f}", f"{self.he_std_measured:.5f}"),
        ]
        depth = len(self.curves[0].variances)
        shown = sorted({1, 2, 5, 10, 15, 20, 30, 40, 50, 60, depth} & set(range(1, depth + 1)))
        rows = [(str(k), *(f"{c.variances[k - 1]:.3g}" for c in self.curves)) for k in shown]
        return [
            Table("Formula vs normlab.init", ("", "formula", "drawn"), check),
            Table(
                "Deep ReLU stack: activation variance per layer",
                ("layer", *(c.scheme for c in self.curves)),
                rows,
            ),
        ]


def run(p: Params, progress: object = None) -> InitCompareResult:
    g = torch.Generator().manual_seed(p.seed)
    w = torch.empty(p.fan_out, p.fan_in)
    init.xavier_uniform_(w, generator=g)
    xavier_max = w.abs().max().item()
    init.kaiming_normal_(w, nonlinearity="relu", generator=g)
    he_std = w.std().item()

    curves = []
    for name, (draw, n_var) in SCHEMES.items():
        g = torch.Generator().manual_seed(p.seed)
        a = torch.randn(p.batch, p.width, generator=g).to(p.device)  # (N, n)
        variances = torch.empty(p.depth, device=p.device)
        hist = None
        for k in range(p.depth):
            weight = torch.empty(p.width, p.width)
            draw(weight, g)
            a = torch.relu(a @ weight.to(p.device).t())  # (N, n) -> (N, n)
            variances[k] = a.var(unbiased=False)
            if k + 1 == p.hist_layer:
                hist = histogram(a.flatten().cpu(), p.bins)
        assert hist is not None
        gain = math.sqrt(n_var(p.width))
        curves.append(
            SchemeCurve(name, variances.cpu().tolist(), theory.relu_variance(gain, p.depth), hist)
        )
    return InitCompareResult(
        xavier_bound_formula=math.sqrt(6.0 / (p.fan_in + p.fan_out)),
        xavier_max_abs=xavier_max,
        he_std_formula=math.sqrt(2.0 / p.fan_in),
        he_std_measured=he_std,
        hist_layer=p.hist_layer,
        curves=curves,
    )


EXPERIMENT = Experiment(
    name="init-compare",
    title="Xavier and He initialization",
    summary="Xavier/He formulas vs drawn weights; per-layer ReLU variance under four schemes",
    params_type=Params,
    run=run,
)
