"""``variance``: the variance argument, measured against its prediction.

A zero-mean, unit-variance batch passes through ``depth`` square layers whose weights are
:math:`\\mathcal{N}(0, (g/\\sqrt{n})^2)` with :math:`n` the fan-in, so :math:`n\\,\\mathrm{Var}(w)
= g^2`. Without an activation the variance after layer :math:`k` is predicted to be
:math:`g^{2k}`: it vanishes for :math:`g < 1`, holds for :math:`g = 1` and explodes for
:math:`g > 1`. With ``activation="relu"`` the prediction is :func:`normlab.theory.relu_variance`.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch

from normlab import figures as fig
from normlab.experiments.base.params import device_param, param, seed_param
from normlab.experiments.base.registry import Cost, Experiment
from normlab.experiments.base.results import Result
from normlab.figures import Table
from normlab.models import fmt_as
from normlab.theory import linear_variance, relu_variance

LOG_FLOOR = 1e-30
"""A variance that collapsed to 0 (float32 underflow) is drawn at this floor of the log axis."""


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
    batch: int = param(256, "rows in the batch", min=2, max=512, step=1)
    activation: str = param("linear", "activation after each layer", choices=("linear", "relu"))
    seed: int = seed_param()
    device: str = device_param()


# -- the code (plain PyTorch: what `normlab run variance --code` prints) ------------------------


def layer_variances(
    gain: float, depth: int, width: int, batch: int, activation: str, seed: int, device: str
) -> list[float]:
    """The variance after each of ``depth`` layers whose weights have std ``gain / sqrt(n)``."""
    torch.manual_seed(seed)
    a = torch.randn(batch, width).to(device)  # (N, n) ~ N(0, 1)
    std = gain / width**0.5  # so that n * Var(w) = gain**2
    variances = []
    for _ in range(depth):
        w = (torch.randn(width, width) * std).to(device)  # (n_out, n_in)
        a = a @ w.t()  # (N, n_in) @ (n_in, n_out) -> (N, n_out)
        if activation == "relu":
            a = torch.relu(a)
        variances.append(a.var(unbiased=False).item())
    return variances


def variance(
    gains: list[float],
    depth: int,
    width: int,
    batch: int,
    activation: str,
    seed: int,
    device: str,
) -> Iterator[dict[str, Any]]:
    """Measured and predicted variance per layer for every gain (the same seed for each).

    Yields the curves so far after every gain, and last the whole result.
    """
    predict = linear_variance if activation == "linear" else relu_variance
    result: dict[str, Any] = {"layers": list(range(1, depth + 1)), "curves": []}
    result["activation"] = activation
    for gain in gains:
        result["curves"].append(
            {
                "gain": gain,
                "measured": layer_variances(gain, depth, width, batch, activation, seed, device),
                "theory": predict(gain, depth),
            }
        )
        yield result  # every gain so far


def tables(result: dict[str, Any]) -> list[dict[str, Any]]:
    """Measured / predicted variance at layers 1, 2, 5, 10, 20, ... and the last, per gain."""
    depth, curves = len(result["layers"]), result["curves"]
    shown = [k for k in result["layers"] if k in (1, 2, 5, 10, 20, 30, 40, 50, 75, 100, depth)]
    rows = []
    for k in shown:
        pairs = [(c["measured"][k - 1], c["theory"][k - 1]) for c in curves]
        rows.append([str(k), *(f"{fmt_as(m, '.4g')} / {fmt_as(t, '.4g')}" for m, t in pairs)])
    rule = "g^(2k)" if result["activation"] == "linear" else "the ReLU recursion"
    return [
        {
            "title": f"Activation variance vs {rule}",
            "columns": ["layer k", *(f"g={c['gain']:g} measured / theory" for c in curves)],
            "rows": rows,
            "notes": [],
        }
    ]


# -- the result ---------------------------------------------------------------------------------


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
        return Table.from_dicts(tables(self.data()))

    def figures(self) -> list[fig.Figure]:
        """Every gain's curve against its theory; a partial run (a streamed frame) draws the
        gains run so far."""
        layers = [float(k) for k in self.layers]
        series = []
        for i, c in enumerate(self.curves):
            color = fig.PALETTE[i % len(fig.PALETTE)]
            series += [
                fig.Series(
                    f"g = {c.gain:g} measured",
                    layers,
                    fig.floored(c.measured, LOG_FLOOR),
                    kind="markers",
                    color=color,
                ),
                fig.Series(
                    f"g = {c.gain:g} theory",
                    layers,
                    fig.floored(c.theory, LOG_FLOOR),
                    color=color,
                    dash="dash",
                    legend=False,
                ),
            ]
        rule = "g^(2k)" if self.activation == "linear" else "the ReLU rule"
        panel = fig.Panel(
            fig.Axis("layer k"),
            fig.Axis("activation variance (log scale)", scale="log"),
            series,
            lines=[fig.Line(1.0, label="Var = 1")],
            note=f"dots: measured; dashed: theory {rule}",
        )
        kind = "Linear" if self.activation == "linear" else "ReLU"
        title = f"{kind} stack, weight std g/√n: measured against theory"
        gains = len(self.params.get("gains", self.curves))  # the whole run's
        if len(self.curves) < gains:
            title += f", so far: {len(self.curves)} of {gains} gains"
        return [fig.Figure(title, [panel])]


EXPERIMENT = Experiment(
    name="variance",
    title="Variance across depth",
    summary="per-layer activation variance for weight std g/sqrt(n), against the theory g^(2k)",
    params_type=Params,
    result_type=VarianceResult,
    entry=variance,
    tables=tables,
    code=(linear_variance, relu_variance, layer_variances, variance, fmt_as, tables),
    cost=Cost(6.0),
    stages=lambda p: len(p.gains),  # a gain's stack at a time
    stage="gain",
)
