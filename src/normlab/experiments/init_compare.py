"""``init-compare``: Xavier and He from their formulas, checked, then raced on a deep ReLU stack.

Xavier/Glorot (uniform) draws :math:`U(-a, a)` with :math:`a = \\sqrt{6/(n_{in} + n_{out})}`
(variance :math:`2/(n_{in}+n_{out})`); He/Kaiming (normal, ReLU) draws
:math:`\\mathcal{N}(0, 2/n_{in})`, the factor 2 making up for the half a ReLU zeroes. The result
checks both formulas against what ``torch.nn.init`` draws, then follows the per-layer activation
variance of a deep ReLU stack under four schemes written from scratch, with the mean-field
prediction beside each, and histograms of the activations at one deep layer.
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
from normlab.experiments.base.results import Histogram, Result
from normlab.figures import Table
from normlab.models import fmt, fmt_as, he_normal, histogram, xavier_uniform
from normlab.theory import relu_variance

LOG_FLOOR = 1e-30
"""A variance that collapsed to 0 (float32 underflow) is drawn at this floor of the log axis."""


@dataclass(frozen=True)
class Params:
    fan_in: int = param(
        128, "fan-in of the weight checked against the formulas", min=1, max=4096, step=1
    )
    fan_out: int = param(
        64,
        "fan-out of that weight (two at least: a 1 x 1 weight has no spread)",
        min=2,
        max=4096,
        step=1,
    )
    depth: int = param(20, "ReLU layers in the stack", min=1, max=60, step=1)
    width: int = param(128, "width of every layer", min=2, max=512, step=1)
    batch: int = param(256, "rows in the batch", min=2, max=1024, step=1)
    hist_layer: int = param(
        10,
        "layer whose activations are histogrammed (at most depth)",
        min=1,
        max=60,
        step=1,
        follows=("<=", "depth"),
    )
    bins: int = param(60, "histogram bins", min=5, max=200, step=1)
    seed: int = seed_param()
    device: str = device_param()


# -- the code (plain PyTorch: what `normlab run init-compare --code` prints) --------------------


def small_random(fan_in: int, fan_out: int) -> torch.Tensor:
    return torch.randn(fan_out, fan_in) * 0.02


def large_random(fan_in: int, fan_out: int) -> torch.Tensor:
    return torch.randn(fan_out, fan_in) * 0.30


def relu_stack(
    init: Any,
    depth: int,
    width: int,
    batch: int,
    hist_layer: int,
    bins: int,
    seed: int,
    device: str,
) -> dict[str, Any]:
    """Per-layer variance of a ReLU stack whose weights ``init(fan_in, fan_out)`` draws."""
    torch.manual_seed(seed)
    a = torch.randn(batch, width).to(device)  # (N, n)
    variances, hist = [], {}
    for k in range(depth):
        w = init(width, width).to(device)  # (n_out, n_in)
        a = torch.relu(a @ w.t())  # (N, n) -> (N, n)
        variances.append(a.var(unbiased=False).item())
        if k + 1 == hist_layer:
            hist = histogram(a.flatten().cpu(), bins)
    return {"variances": variances, "histogram": hist}


def init_compare(
    fan_in: int,
    fan_out: int,
    depth: int,
    width: int,
    batch: int,
    hist_layer: int,
    bins: int,
    seed: int,
    device: str,
) -> Iterator[dict[str, Any]]:
    """The formulas against torch.nn.init, then four schemes raced on a deep ReLU stack.

    Yields the result so far after every scheme's stack, and last the whole race.
    """
    torch.manual_seed(seed)
    w = torch.empty(fan_out, fan_in)
    nn.init.xavier_uniform_(w)
    xavier_max = w.abs().max().item()  # ~ the bound a
    nn.init.kaiming_normal_(w, nonlinearity="relu")  # He normal, fan-in mode
    he_std = w.std().item()
    schemes = {  # name: (init, n * Var(w) for a square layer of this width)
        "small random (std 0.02)": (small_random, width * 0.02**2),
        "large random (std 0.30)": (large_random, width * 0.30**2),
        "Xavier uniform": (xavier_uniform, 1.0),
        "He normal": (he_normal, 2.0),
    }
    result: dict[str, Any] = {
        "xavier_bound_formula": (6.0 / (fan_in + fan_out)) ** 0.5,
        "xavier_max_abs": xavier_max,
        "he_std_formula": (2.0 / fan_in) ** 0.5,
        "he_std_measured": he_std,
        "hist_layer": hist_layer,
        "curves": [],
    }
    for name, (init, n_var) in schemes.items():
        run = relu_stack(init, depth, width, batch, hist_layer, bins, seed, device)
        result["curves"].append({"scheme": name, **run, "theory": relu_variance(n_var**0.5, depth)})
        yield result  # every scheme so far


def tables(result: dict[str, Any]) -> list[dict[str, Any]]:
    """The formulas beside what torch draws, then each scheme's variance at some of the layers."""
    check = [
        [
            "Xavier uniform bound a",
            fmt(result["xavier_bound_formula"], 5),
            f"{fmt(result['xavier_max_abs'], 5)} (max |w|)",
        ],
        ["He normal std", fmt(result["he_std_formula"], 5), fmt(result["he_std_measured"], 5)],
    ]
    curves = result["curves"]
    depth = len(curves[0]["variances"])
    shown = sorted({1, 2, 5, 10, 15, 20, 30, 40, 50, 60, depth} & set(range(1, depth + 1)))
    rows = [[str(k), *(fmt_as(c["variances"][k - 1], ".3g") for c in curves)] for k in shown]
    return [
        {
            "title": "Formula vs torch.nn.init",
            "columns": ["", "formula", "torch draws"],
            "rows": check,
            "notes": [],
        },
        {
            "title": "Deep ReLU stack: activation variance per layer",
            "columns": ["layer", *(c["scheme"] for c in curves)],
            "rows": rows,
            "notes": [f"{len(shown)} of the {depth} layers; the figure draws every one"],
        },
    ]


# -- the result ---------------------------------------------------------------------------------


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
        return Table.from_dicts(tables(self.data()))

    def figures(self) -> list[fig.Figure]:
        """The variance over depth and the histograms; a partial run (a streamed frame) draws
        the schemes run so far."""
        return [self._variance_figure(), self._histogram_figure()]

    def _so_far(self) -> str:
        """A partial run's title: how many of the four schemes have run."""
        return f", so far: {len(self.curves)} of 4 schemes" if len(self.curves) < 4 else ""

    def _variance_figure(self) -> fig.Figure:
        series = []
        for i, c in enumerate(self.curves):
            color = fig.PALETTE[i % len(fig.PALETTE)]
            layers = fig.steps(len(c.variances), start=1)
            series += [
                fig.Series(
                    c.scheme, layers, fig.floored(c.variances, LOG_FLOOR), "line+markers", color
                ),
                fig.Series(
                    f"{c.scheme} theory",
                    layers,
                    fig.floored(c.theory, LOG_FLOOR),
                    color=color,
                    dash="dash",
                    width=1.0,
                    legend=False,
                ),
            ]
        panel = fig.Panel(
            fig.Axis("ReLU layer k"),
            fig.Axis("activation variance (log scale)", scale="log"),
            series,
            lines=[fig.Line(1.0), fig.Line(float(self.hist_layer), axis="x", color="#000000")],
            note=f"dashed: theory; dotted vertical: layer {self.hist_layer}, histogrammed below",
        )
        return fig.Figure(f"Four initializations on a deep ReLU stack{self._so_far()}", [panel])

    def _histogram_figure(self) -> fig.Figure:
        panels = []
        for i, c in enumerate(self.curves):
            counts, edges = c.histogram.counts, c.histogram.edges
            top, note = _cut_spike(counts, edges)
            bars = fig.Series(
                c.scheme,
                [(a + b) / 2 for a, b in itertools.pairwise(edges)],
                counts,
                kind="histogram",
                color=fig.PALETTE[i % len(fig.PALETTE)],
                edges=edges,
                legend=False,
                opacity=0.7,
            )
            panels.append(
                fig.Panel(
                    fig.Axis("activation value"),
                    fig.Axis("count", limits=None if top is None else (0.0, top)),
                    [bars],
                    title=c.scheme,
                    note=note,
                )
            )
        title = f"Activations at layer {self.hist_layer}{self._so_far()}"
        return fig.Figure(title, panels, columns=2, height=2.8)


def _cut_spike(counts: list[float], edges: list[float]) -> tuple[float | None, str]:
    """A y limit that cuts a bin dwarfing all others (ReLU's zeros), and a note saying so."""
    ranked = sorted(counts, reverse=True)
    if len(ranked) < 2 or ranked[1] <= 0 or ranked[0] < 4 * ranked[1]:
        return None, ""
    peak = counts.index(ranked[0])
    return 1.6 * ranked[1], f"↑ {ranked[0]:.0f} values at {edges[peak]:.2g} (bar cut)"


EXPERIMENT = Experiment(
    name="init-compare",
    title="Xavier and He initialization",
    summary="Xavier/He formulas vs torch.nn.init; per-layer ReLU variance under four schemes",
    params_type=Params,
    result_type=InitCompareResult,
    entry=init_compare,
    tables=tables,
    code=(
        relu_variance,
        xavier_uniform,
        he_normal,
        small_random,
        large_random,
        histogram,
        relu_stack,
        init_compare,
        fmt,
        fmt_as,
        tables,
    ),
    cost=Cost(8.0),
    stages=lambda p: 4,  # a scheme's stack at a time (the formulas are checked with the first)
    stage="scheme",
)
