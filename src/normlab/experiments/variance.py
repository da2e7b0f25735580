"""``variance``: the variance argument, measured against its prediction.

A zero-mean, unit-variance batch passes through ``depth`` square layers whose weights are
:math:`\\mathcal{N}(0, (g/\\sqrt{n})^2)` with :math:`n` the fan-in, so :math:`n\\,\\mathrm{Var}(w)
= g^2`. Without an activation the variance after layer :math:`k` is predicted to be
:math:`g^{2k}`: it vanishes for :math:`g < 1`, holds for :math:`g = 1` and explodes for
:math:`g > 1`. With ``activation="relu"`` the prediction is :func:`normlab.theory.relu_variance`.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from normlab import theory
from normlab.experiments.base import (
    Experiment,
    Result,
    Table,
    device_param,
    param,
    seed_param,
)


@dataclass(frozen=True)
class Params:
    gains: tuple[float, ...] = param(
        (0.85, 1.0, 1.15),
        "gains g (weight std = g / sqrt(n))",
        min=0.5,
        max=1.5,
        step=0.01,
        max_len=5,
    )
    depth: int = param(40, "number of layers", min=1, max=100, step=1)
    width: int = param(128, "fan-in n = width of every layer", min=2, max=512, step=1)
    batch: int = param(256, "rows in the batch", min=2, max=1024, step=1)
    activation: str = param("linear", "activation after each layer", choices=("linear", "relu"))
    seed: int = seed_param()
    device: str = device_param()


@dataclass
class VarianceCurve:
    gain: float
    measured: list[float]  # (depth,): biased variance of layer k's output
    theory: list[float]  # (depth,): the prediction


@dataclass
class VarianceResult(Result):
    layers: list[int]
    curves: list[VarianceCurve]
    activation: str

    def tables(self) -> list[Table]:
        depth = len(self.layers)
        shown = sorted({1, 2, 5, 10, 20, 30, 40, 50, 75, 100, depth} & set(range(1, depth + 1)))
        cols = ("layer k", *(f"g={c.gain:g} measured / theory" for c in self.curves))
        rows = [
            (str(k), *(f"{c.measured[k - 1]:.4g} / {c.theory[k - 1]:.4g}" for c in self.curves))
            for k in shown
        ]
        rule = "g^(2k)" if self.activation == "linear" else "the ReLU recursion"
        return [Table(f"Activation variance vs {rule}", cols, rows)]


def layer_variances(p: Params, gain: float) -> torch.Tensor:
    """Measured variance after each layer for one gain: a ``(depth,)`` CPU tensor."""
    g = torch.Generator().manual_seed(p.seed)
    a = torch.randn(p.batch, p.width, generator=g).to(p.device)  # (N, n) ~ N(0, 1)
    std = gain / (p.width**0.5)
    out = torch.empty(p.depth, device=p.device)
    for k in range(p.depth):
        w = (torch.randn(p.width, p.width, generator=g) * std).to(p.device)  # (n_out, n_in)
        a = a @ w.t()  # (N, n_in) @ (n_in, n_out) -> (N, n_out)
        if p.activation == "relu":
            a = torch.relu(a)
        out[k] = a.var(unbiased=False)
    return out.cpu()


def run(p: Params, progress: object = None) -> VarianceResult:
    predict = theory.linear_variance if p.activation == "linear" else theory.relu_variance
    curves = [
        VarianceCurve(gain=g, measured=layer_variances(p, g).tolist(), theory=predict(g, p.depth))
        for g in p.gains
    ]
    return VarianceResult(
        layers=list(range(1, p.depth + 1)), curves=curves, activation=p.activation
    )


EXPERIMENT = Experiment(
    name="variance",
    title="Variance across depth",
    summary="per-layer activation variance for weight std g/sqrt(n), against the theory g^(2k)",
    params_type=Params,
    run=run,
)
