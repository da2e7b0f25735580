"""Matplotlib figures drawn from experiment results.

Every function here only reads a :class:`~normlab.experiments.base.Result` and draws it: nothing
is measured or trained. Figures are built with the object-oriented API (``Figure`` plus an Agg
canvas, never ``pyplot``), so drawing is safe from any thread and never opens a window.

>>> from normlab.experiments.linear_scale import LinearScaleResult
>>> r = LinearScaleResult(input_std=1.0, output_std=0.7, scaled_input_std=10.0,
...                       scaled_output_std=6.0, scale=10.0)
>>> len(figure(r).axes)
1
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
from matplotlib import colormaps
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.cm import ScalarMappable
from matplotlib.colors import LogNorm, Normalize
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

from normlab.doctor import (
    EXPLODING,
    GRAD_EXPLODING,
    GRAD_VANISHING,
    VANISHING,
    Diagnosis,
    LayerDiagnosis,
)
from normlab.experiments.base import Histogram, Result
from normlab.experiments.bn_columns import BnColumnsResult
from normlab.experiments.bn_from_scratch import BnFromScratchResult
from normlab.experiments.bn_lr import BnLrResult
from normlab.experiments.bn_lr_sweep import BnLrSweepResult
from normlab.experiments.bn_running_stats import RunningStatsResult
from normlab.experiments.doctor import DoctorResult
from normlab.experiments.drift import StackResult
from normlab.experiments.init_compare import InitCompareResult
from normlab.experiments.init_train import InitTrainResult
from normlab.experiments.linear_scale import LinearScaleResult
from normlab.experiments.symmetry import SymmetryResult, SymmetrySummary
from normlab.experiments.variance import VarianceResult
from normlab.probe import ActivationStats, GradientStats

FloatArray = npt.NDArray[np.float64]

FORMATS = (".png", ".svg")
"""File suffixes :func:`save` writes."""

LOSS_CLIP = 5.0  # bn-lr: a diverging loss is drawn at this ceiling, as the seed does
SWEEP_FLOOR = 1e-6  # bn-lr-sweep: a final loss of 0 still shows on the log axis
LOG_FLOOR = 1e-30  # a collapsed variance (0 in float32) still shows on a log axis
INIT_TRAIN_FLOOR = 1e-12
MAX_LINES = 8  # per-feature curves beyond this crowd the axes


# -- helpers -----------------------------------------------------------------------------------


def _floats(values: Any) -> FloatArray:
    """A float array of ``values`` (nested lists allowed); ``None`` becomes ``nan``."""
    return np.array(values, dtype=np.float64)


def _floor(values: Any, floor: float) -> tuple[FloatArray, bool]:
    """``values`` raised to at least ``floor`` for a log axis; also whether any value was raised.

    ``nan`` stays ``nan`` (a gap); ``+inf`` is kept and simply not drawn.
    """
    a = _floats(values)
    low = a < floor  # nan compares False
    return np.where(low, floor, a), bool(low.any())


def _num(x: float | None) -> float:
    """A scalar as a float; ``None`` (a non-finite value after ``to_dict``) becomes ``nan``."""
    return math.nan if x is None else float(x)


def _bars(values: Any) -> FloatArray:
    """Bar heights: a non-finite value leaves its bar out (``nan``) instead of breaking the axes."""
    a = _floats(values)
    return np.where(np.isfinite(a), a, np.nan)


def _fmt(x: float | None, spec: str = ".4g") -> str:
    if x is None or not math.isfinite(x):
        return "n/a" if x is None else str(x)
    return format(x, spec)


def _params_line(result: Result, names: Sequence[str]) -> str:
    """``"width 16, batch 64, seed 0"`` from the run's recorded parameters (empty if unknown)."""
    shown = [f"{n.replace('_', ' ')} {result.params[n]}" for n in names if n in result.params]
    return ", ".join(shown)


def _title(fig: Figure, text: str, result: Result, names: Sequence[str]) -> None:
    line = _params_line(result, names)
    fig.suptitle(text + (f"\n{line}" if line else ""), fontsize=11)


def _log_y(ax: Axes, *arrays: FloatArray) -> None:
    """Log y axis; with no positive finite value anywhere, fixed limits instead of a warning."""
    ax.set_yscale("log")
    if not any(bool(np.any(np.isfinite(a) & (a > 0))) for a in arrays):
        ax.set_ylim(0.1, 10.0)


def _new(ncols: int = 1, *, width: float = 7.0, height: float = 4.5) -> tuple[Figure, list[Axes]]:
    fig = Figure(figsize=(width, height), layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(1, ncols, squeeze=False)[0]
    for ax in axes:
        ax.grid(True, alpha=0.4)
        ax.set_axisbelow(True)
    return fig, list(axes)


# -- one drawing function per Result type --------------------------------------------------------


def _linear_scale(r: LinearScaleResult) -> Figure:
    fig, (ax,) = _new(width=6.5)
    x = np.arange(2)
    labels = ["normal input", f"{_fmt(r.scale, 'g')} × input"]
    w = 0.38
    bars_in = ax.bar(
        x - w / 2, _bars([r.input_std, r.scaled_input_std]), w, label="input std", color="tab:gray"
    )
    bars_out = ax.bar(
        x + w / 2,
        _bars([r.output_std, r.scaled_output_std]),
        w,
        label="output std",
        color="tab:blue",
    )
    ax.bar_label(bars_in, fmt="%.4g", fontsize=8)
    ax.bar_label(bars_out, fmt="%.4g", fontsize=8)
    ax.set_xticks(x, labels)
    ax.set_ylabel("standard deviation")
    out, scaled_out = _num(r.output_std), _num(r.scaled_output_std)
    ratio = scaled_out / out if out and math.isfinite(out) else math.nan
    ax.set_title(
        f"output std grew {_fmt(ratio, '.2f')}× for a {_fmt(r.scale, 'g')}× input", fontsize=10
    )
    ax.legend(loc="upper left")
    ax.margins(y=0.12)
    _title(
        fig,
        "One Linear layer passes its input's scale along",
        r,
        ("in_features", "out_features", "batch", "seed"),
    )
    return fig


def _stack(r: StackResult) -> Figure:
    fig, (ax,) = _new()
    means = _floats([r.input_mean, *r.means])
    stds = _floats([r.input_std, *r.stds])
    layers = np.arange(len(stds))
    ax.plot(layers, stds, "o-", color="tab:blue", label="std")
    ax.plot(layers, means, "s--", color="tab:orange", label="mean")
    ax.axhline(0.0, color="gray", lw=0.8)
    ax.set_xlabel("layer (0 = input)")
    ax.set_ylabel("statistic of the layer's output")
    ax.set_xticks(layers if len(layers) <= 21 else layers[:: max(1, len(layers) // 10)])
    ax.legend(loc="best")
    norm = "" if r.norm == "none" else f"{r.norm} norm → "
    stack = f"Linear → {norm}{r.activation}"
    what = "nothing resets the scale" if r.norm == "none" else "the normalization pins the scale"
    depth = len(r.stds)
    _title(
        fig,
        f"Mean and std per layer through {depth} × ({stack})\n{what}",
        r,
        ("width", "batch", "seed"),
    )
    return fig


def _bn_columns(r: BnColumnsResult) -> Figure:
    fig, (ax_std, ax_mean) = _new(2, width=10.0)
    cols = np.arange(len(r.input_stds))
    w = 0.38
    std_before = _bars(_floor(r.input_stds, 1e-12)[0])
    std_after = _bars(_floor(r.output_stds, 1e-12)[0])
    b1 = ax_std.bar(cols - w / 2, std_before, w, color="tab:red", label="before")
    b2 = ax_std.bar(cols + w / 2, std_after, w, color="tab:blue", label="after BatchNorm1d")
    ax_std.bar_label(b1, fmt="%.3g", fontsize=8)
    ax_std.bar_label(b2, fmt="%.3g", fontsize=8)
    ax_std.axhline(1.0, color="gray", ls=":", label="std = 1")
    _log_y(ax_std, std_before, std_after)
    ax_std.set_ylabel("column std (biased, ÷N), log scale")
    ax_std.set_title("std per column: very different before, all 1 after", fontsize=10)

    m1 = ax_mean.bar(cols - w / 2, _bars(r.input_means), w, color="tab:red", label="before")
    m2 = ax_mean.bar(
        cols + w / 2, _bars(r.output_means), w, color="tab:blue", label="after BatchNorm1d"
    )
    ax_mean.bar_label(m1, fmt="%.3g", fontsize=8)
    ax_mean.bar_label(m2, labels=[_fmt(v, ".1g") for v in r.output_means], fontsize=8)
    ax_mean.axhline(0.0, color="gray", lw=0.8)
    ax_mean.set_ylabel("column mean")
    ax_mean.set_title("mean per column: all 0 after", fontsize=10)
    for ax in (ax_std, ax_mean):
        ax.set_xticks(cols, [f"column {j}" for j in cols])
        ax.legend(loc="best", fontsize=8)
        ax.margins(y=0.12)
    _title(
        fig,
        "BatchNorm1d (training mode) on columns of very different scale",
        r,
        ("batch", "scales", "seed"),
    )
    return fig


def _bn_running_stats(r: RunningStatsResult) -> Figure:
    fig, (ax_m, ax_v) = _new(2, width=11.0)
    running_m = _floats(r.running_means)  # (passes, C)
    running_v = _floats(r.running_vars)
    batch_m = _floats(r.batch_means)
    batch_v = _floats(r.batch_vars)
    n_pass, n_feat = running_m.shape
    shown = min(n_feat, MAX_LINES)
    passes = np.arange(n_pass + 1)
    for j in range(shown):
        color = f"C{j}"
        # pass 0: a freshly built layer holds mean 0 and variance 1
        ax_m.plot(
            passes, np.r_[0.0, running_m[:, j]], "o-", ms=4, color=color, label=f"feature {j}"
        )
        ax_v.plot(
            passes, np.r_[1.0, running_v[:, j]], "o-", ms=4, color=color, label=f"feature {j}"
        )
        ax_m.plot(passes[1:], batch_m[:, j], "x", ms=6, color=color, alpha=0.7)
        ax_v.plot(passes[1:], batch_v[:, j], "x", ms=6, color=color, alpha=0.7)
    true_mean, true_var = _num(r.true_mean), _num(r.true_var)
    ax_m.plot([], [], color="k", ls="--", label=f"true mean {_fmt(r.true_mean, 'g')}")
    ax_v.plot([], [], color="k", ls="--", label=f"true var {_fmt(r.true_var, 'g')}")
    if math.isfinite(true_mean):
        ax_m.axhline(true_mean, color="k", ls="--")
    if math.isfinite(true_var):
        ax_v.axhline(true_var, color="k", ls="--")
    marker = Line2D([], [], ls="", marker="x", color="gray", label="this pass's batch stat")
    for ax, what in ((ax_m, "running mean"), (ax_v, "running var")):
        ax.set_xlabel("training pass (0 = freshly built layer)")
        ax.set_ylabel(what)
        handles, _ = ax.get_legend_handles_labels()
        ax.legend(handles=[*handles, marker], loc="best", fontsize=8)
        if n_pass <= 20:
            ax.set_xticks(passes)
    values = np.r_[running_v.ravel(), batch_v.ravel(), true_var, 1.0]
    finite = values[np.isfinite(values)]
    if finite.size and finite.min() > 0 and finite.max() / finite.min() >= 100:
        _log_y(ax_v, finite)
        ax_v.set_ylabel("running var (log scale)")
    ax_m.set_title("running mean per feature", fontsize=10)
    ax_v.set_title("running var per feature (unbiased batch var)", fontsize=10)
    rule = (
        "cumulative average (momentum=None)"
        if r.params.get("cumulative")
        else f"momentum {r.params['momentum']:g}"
        if "momentum" in r.params
        else ""
    )
    more = f" (first {shown} of {n_feat} features)" if shown < n_feat else ""
    head = "BatchNorm1d running statistics head for the data's true values"
    _title(
        fig, head + (f", {rule}" if rule else "") + more, r, ("passes", "batch", "scale", "seed")
    )
    return fig


def _symmetry_line(s: SymmetrySummary) -> str:
    return (
        f"{s.init} init: max |w0 − w1| = {_fmt(s.max_weight_diff)}, "
        f"max |g0 − g1| = {_fmt(s.max_grad_diff)}, distinct units {s.distinct_units}"
    )


def _symmetry(r: SymmetryResult) -> Figure:
    fig, (ax_w, ax_g) = _new(2, width=11.0, height=5.0)
    w = _floats(r.weights)  # (steps, hidden, 2)
    g = _floats(r.grads)
    steps = np.arange(w.shape[0])
    hidden = w.shape[1]
    for j in range(hidden):
        ax_w.plot(steps, w[:, j, 0], lw=1.5, color=f"C{j % 10}", label=f"unit {j}")
        ax_g.plot(steps, g[:, j, 0], lw=1.5, color=f"C{j % 10}", label=f"unit {j}")
    overlap = r.summary.distinct_units == 1
    note = (
        f"all {hidden} lines overlap: the units stay identical"
        if overlap
        else f"{r.summary.distinct_units} distinct units of {hidden}"
    )
    ax_w.set_title(f"weight W1[unit, 0] over steps\n{note}", fontsize=10)
    ax_g.set_title(f"gradient dL/dW1[unit, 0] over steps\n{note}", fontsize=10)
    ax_w.set_ylabel("weight value")
    ax_g.set_ylabel("gradient value")
    for ax in (ax_w, ax_g):
        ax.set_xlabel("training step")
        if hidden <= 12:
            ax.legend(fontsize=7, ncol=2, loc="best")
    fig.suptitle(
        f"The symmetry problem: {r.init} init, hidden units over training\n"
        f"{_symmetry_line(r.summary)}\ncontrast, {_symmetry_line(r.contrast)}",
        fontsize=10,
    )
    return fig


def _variance(r: VarianceResult) -> Figure:
    fig, (ax,) = _new(width=7.5, height=5.0)
    layers = _floats(r.layers)
    drawn: list[FloatArray] = []
    clipped = False
    rule = r"theory $g^{2k}$" if r.activation == "linear" else "theory, ReLU recursion"
    for i, c in enumerate(r.curves):
        measured, low_m = _floor(c.measured, LOG_FLOOR)
        theory, low_t = _floor(c.theory, LOG_FLOOR)
        clipped |= low_m or low_t
        drawn += [measured, theory]
        color = f"C{i}"
        ax.plot(
            layers, measured, "o", ms=3.5, color=color, label=f"g = {_fmt(c.gain, 'g')} measured"
        )
        ax.plot(layers, theory, "--", color=color, lw=1.2)
    ax.plot([], [], "--", color="gray", label=f"{rule} (dashed)")
    ax.axhline(1.0, color="gray", ls=":", label="Var = 1 (stable)")
    _log_y(ax, *drawn)
    ax.set_xlabel("layer k")
    floor = f", clipped at {LOG_FLOOR:g}" if clipped else ""
    ax.set_ylabel(f"activation variance (log scale{floor})")
    ax.legend(loc="best", fontsize=8)
    stack = "linear stack" if r.activation == "linear" else "ReLU stack"
    _title(
        fig,
        f"Variance across depth, {stack}, weight std = g / √n: measured (dots) vs theory",
        r,
        ("width", "batch", "seed"),
    )
    return fig


def _hist(ax: Axes, h: Histogram, color: str, label: str | None = None, alpha: float = 0.6) -> None:
    counts = _floats(h.counts)
    counts = np.where(np.isfinite(counts), counts, 0.0)
    edges = _floats(h.edges)
    if not np.all(np.isfinite(edges)):  # a blown-up layer: nothing sensible to bin
        ax.text(
            0.5, 0.5, "activations not finite", ha="center", va="center", transform=ax.transAxes
        )
        return
    ax.stairs(counts, edges, fill=True, color=color, alpha=alpha, label=label)


def _cap_spike(ax: Axes, h: Histogram) -> None:
    """Cut a bin that dwarfs all others (ReLU's zeros) so the rest of the shape stays visible."""
    raw = _floats(h.counts)
    raw = np.where(np.isfinite(raw), raw, 0.0)
    counts = np.sort(raw)
    if counts.size < 2 or counts[-2] <= 0 or counts[-1] < 4 * counts[-2]:
        return
    ax.set_ylim(0, 1.6 * counts[-2])
    peak = int(np.argmax(raw))
    edges = _floats(h.edges)
    ax.annotate(
        f"↑ {counts[-1]:.0f} values in the bin at {edges[peak]:.2g} (cut)",
        xy=(edges[peak], 1.6 * counts[-2]),
        xytext=(4, -10),
        textcoords="offset points",
        fontsize=7,
        va="top",
    )


def _init_compare(r: InitCompareResult) -> Figure:
    n = len(r.curves)
    fig = Figure(figsize=(12.0, 1.6 * n + 1.8), layout="constrained")
    FigureCanvasAgg(fig)
    grid = fig.add_gridspec(n, 2, width_ratios=(1.5, 1.0))
    ax = fig.add_subplot(grid[:, 0])
    drawn: list[FloatArray] = []
    clipped = False
    for i, c in enumerate(r.curves):
        variances, low_v = _floor(c.variances, LOG_FLOOR)
        theory, low_t = _floor(c.theory, LOG_FLOOR)
        clipped |= low_v or low_t
        drawn += [variances, theory]
        layers = np.arange(1, len(variances) + 1)
        ax.plot(layers, variances, "o-", ms=3, color=f"C{i}", label=c.scheme)
        ax.plot(layers, theory, "--", color=f"C{i}", lw=1.0)
    ax.plot([], [], "--", color="gray", label="mean-field theory (dashed)")
    ax.axhline(1.0, color="gray", ls=":", label="Var = 1")
    ax.axvline(
        r.hist_layer, color="k", lw=0.8, alpha=0.5, label=f"layer {r.hist_layer}: histograms →"
    )
    _log_y(ax, *drawn)
    ax.grid(True, alpha=0.4)
    ax.set_xlabel("ReLU layer k")
    floor = f", clipped at {LOG_FLOOR:g}" if clipped else ""
    ax.set_ylabel(f"activation variance (log scale{floor})")
    ax.set_title("per-layer activation variance: measured (dots) vs theory (dashed)", fontsize=10)
    ax.legend(loc="best", fontsize=8)
    for i, c in enumerate(r.curves):
        hax = fig.add_subplot(grid[i, 1])
        _hist(hax, c.histogram, f"C{i}")
        _cap_spike(hax, c.histogram)
        hax.grid(True, alpha=0.4)
        hax.set_title(f"{c.scheme}: activations at layer {r.hist_layer}", fontsize=9)
        hax.set_ylabel("count", fontsize=8)
        hax.tick_params(labelsize=7)
        if i == n - 1:
            hax.set_xlabel("activation value (each panel has its own x range)", fontsize=8)
    check = (
        f"Xavier bound a: formula {_fmt(r.xavier_bound_formula, '.5f')}, drawn max |w| "
        f"{_fmt(r.xavier_max_abs, '.5f')};   He std: formula {_fmt(r.he_std_formula, '.5f')}, "
        f"drawn {_fmt(r.he_std_measured, '.5f')}"
    )
    line = _params_line(r, ("fan_in", "fan_out", "width", "batch", "seed"))
    fig.suptitle(
        f"Initialization schemes on a deep ReLU stack\n{check}" + (f"\n{line}" if line else ""),
        fontsize=10,
    )
    return fig


def _init_train(r: InitTrainResult) -> Figure:
    fig, (ax_v, ax_l) = _new(2, width=11.0)
    fwd, low_f = _floor(r.forward_variances, INIT_TRAIN_FLOOR)
    bwd, low_b = _floor(r.backward_variances, INIT_TRAIN_FLOOR)
    layers = np.arange(1, len(fwd) + 1)
    # big dots under small squares: both stay visible where the two curves coincide
    ax_v.plot(layers, fwd, "o-", ms=9, color="tab:blue", label="activation variance (forward)")
    ax_v.plot(
        np.arange(1, len(bwd) + 1),
        bwd,
        "s--",
        color="tab:purple",
        label="gradient variance dL/dh (backward)",
    )
    ax_v.axhline(1.0, color="gray", ls=":", label="Var = 1")
    _log_y(ax_v, fwd, bwd)
    ax_v.set_xticks(layers)
    ax_v.set_xlabel("hidden layer")
    floor = f", clipped at {INIT_TRAIN_FLOOR:g}" if low_f or low_b else ""
    ax_v.set_ylabel(f"variance at initialization (log scale{floor})")
    ax_v.set_title(f"variance at init: {r.method}", fontsize=10)
    ax_v.legend(loc="best", fontsize=8)

    losses = _floats(r.losses)
    steps = np.arange(len(losses))
    ax_l.plot(steps, losses, color="tab:red")
    ax_l.set_xlabel("training step")
    finite = losses[np.isfinite(losses) & (losses > 0)]
    if finite.size and finite.max() / finite.min() > 100:  # a blow-up: spans orders of magnitude
        ax_l.set_yscale("log")
        ax_l.set_ylabel("BCE loss (log scale)")
    else:
        ax_l.set_ylabel("BCE loss")
        ax_l.set_ylim(bottom=0)
    bad = np.flatnonzero(~np.isfinite(losses))
    title = f"training loss: {r.method}"
    if bad.size:
        ax_l.axvline(bad[0], color="k", ls="--", lw=0.8, label="loss no longer finite")
        ax_l.legend(loc="best", fontsize=8)
        title += f"\n(loss not finite from step {bad[0]}: training diverged)"
    ax_l.set_title(title, fontsize=10)
    _title(
        fig,
        f"Initialization decides whether a deep ReLU net trains: {r.method}",
        r,
        ("hidden_layers", "width", "lr", "steps", "seed"),
    )
    return fig


def _bn_from_scratch(r: BnFromScratchResult) -> Figure:
    fig = Figure(figsize=(12.0, 4.6), layout="constrained")
    FigureCanvasAgg(fig)
    ax_b, ax_a, ax_t = fig.subplots(1, 3, width_ratios=(1.0, 1.0, 0.55))
    _hist(ax_b, r.before_hist, "tab:red", alpha=0.7)
    ax_b.set_title(
        f"column 0 BEFORE batch_norm\nmean {_fmt(r.before_means[0], '.2f')}, "
        f"std {_fmt(r.before_stds[0], '.2f')}",
        fontsize=10,
    )
    _hist(ax_a, r.after_hist, "tab:blue", label="x̂ (γ = 1, β = 0)", alpha=0.7)
    _hist(ax_a, r.rescaled_hist, "tab:green", label="γ = 2, β = 1", alpha=0.45)
    ax_a.set_title(
        f"column 0 AFTER batch_norm\nx̂ mean {_fmt(r.after_means[0], '.2f')}, "
        f"std {_fmt(r.after_stds[0], '.2f')}",
        fontsize=10,
    )
    if ax_a.patches:
        ax_a.legend(loc="best", fontsize=8)
    for ax in (ax_b, ax_a):
        ax.grid(True, alpha=0.4)
        ax.set_axisbelow(True)
        ax.set_xlabel("value")
        ax.set_ylabel("count")
    p = r.parity
    rows = [
        ("train output", p.train_output),
        ("running_mean", p.running_mean),
        ("running_var", p.running_var),
        ("eval output", p.eval_output),
        ("input grad", p.input_grad),
    ]
    text = "normlab vs torch\nBatchNorm1d\nmax |difference|\n\n" + "\n".join(
        f"{name:<13}{_fmt(v, '.2g'):>8}" for name, v in rows
    )
    ax_t.axis("off")
    ax_t.text(
        0.0,
        0.5,
        text,
        family="monospace",
        fontsize=9,
        va="center",
        ha="left",
        transform=ax_t.transAxes,
        bbox={"boxstyle": "round", "facecolor": "whitesmoke", "edgecolor": "gray"},
    )
    _title(
        fig,
        "Batch normalization from scratch: a skewed column re-centred and rescaled",
        r,
        ("batch", "features", "seed"),
    )
    return fig


def _bn_lr(r: BnLrResult) -> Figure:
    fig, (ax,) = _new()
    for bn in (False, True):
        losses = _floats(r.losses_with(bn))
        drawn = np.where(np.isfinite(losses), np.clip(losses, 0.0, LOSS_CLIP), LOSS_CLIP)
        chosen = bn == r.batch_norm
        ax.plot(
            np.arange(len(drawn)),
            drawn,
            color="tab:blue" if bn else "tab:red",
            lw=2.2 if chosen else 0.9,
            alpha=1.0 if chosen else 0.7,
            label=("with BN" if bn else "without BN") + (" (chosen)" if chosen else ""),
            zorder=3 if chosen else 2,
        )
    ax.set_ylim(0.0, LOSS_CLIP)
    ax.set_xlabel("training step")
    ax.set_ylabel(f"BCE loss (clipped at {LOSS_CLIP:g})")
    ax.legend(loc="upper right")
    shape = ""
    if "hidden_layers" in r.params and "width" in r.params:
        shape = f"{r.params['hidden_layers']} × {r.params['width']} "
    _title(
        fig,
        f"Same {shape}MLP at learning rate {_fmt(r.lr, 'g')}, with and without BatchNorm",
        r,
        ("steps", "seed"),
    )
    return fig


def _sweep_losses(values: Any) -> tuple[FloatArray, bool]:
    """Losses for the sweep's log axis: non-finite or above the ceiling drawn at ``LOSS_CLIP``.

    Also whether any value sat above the ceiling or was not finite (the plot then says so).
    """
    a = _floats(values)
    high = ~np.isfinite(a) | (a > LOSS_CLIP)
    return np.where(high, LOSS_CLIP, np.maximum(a, SWEEP_FLOOR)), bool(high.any())


def _lr_axis(ax: Axes, lrs: FloatArray) -> None:
    """Log x axis labelled in plain numbers (0.1, 0.2, 0.3, 0.5, 1, 2), not powers of ten."""
    ok = lrs[np.isfinite(lrs) & (lrs > 0)]
    if not ok.size:  # nothing to place on a log axis (a result rebuilt from broken JSON)
        return
    ax.set_xscale("log")
    ax.xaxis.set_major_locator(LogLocator(base=10.0, subs=(1.0, 2.0, 3.0, 5.0)))
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    ax.xaxis.set_minor_formatter(NullFormatter())
    ax.set_xlim(float(ok.min()) / 1.15, float(ok.max()) * 1.15)


def _bn_lr_sweep(r: BnLrSweepResult) -> Figure:
    fig, (ax,) = _new(width=7.5, height=5.2)
    lrs = _floats(r.lrs)
    curves: list[Line2D] = []  # legend, first column: the two settings and the peak key
    rates: list[Line2D] = []  # second column: the largest stable rates and the threshold
    clipped = False
    stable_at: list[str] = []
    for c in r.curves:
        name = "with BN" if c.batch_norm else "without BN"
        color = "tab:blue" if c.batch_norm else "tab:red"
        final, high_f = _sweep_losses(c.final_losses)
        peak, high_p = _sweep_losses(c.peak_losses)
        clipped |= high_f or high_p
        stable = np.array(c.stable, dtype=bool)
        (ln,) = ax.plot(lrs, final, "-", color=color, lw=2.0, label=name, zorder=3)
        curves.append(ln)
        ax.plot(
            lrs[stable], final[stable], "o", ms=7, color=color, label=f"_stable {name}", zorder=4
        )
        ax.plot(
            lrs[~stable],
            final[~stable],
            "o",
            ms=7,
            mfc="white",
            mec=color,
            mew=1.6,
            label=f"_unstable {name}",
            zorder=4,
        )
        ax.plot(lrs, peak, "^", ms=6, color=color, alpha=0.35, label=f"_peak {name}", zorder=2)
        i = c.largest_stable_lr_index
        best = lrs[i] if i is not None else math.nan
        top = " (the largest tried)" if i is not None and i == len(lrs) - 1 else ""
        stable_at.append(f"{name} {_fmt(best, '.3g') if i is not None else 'none'}{top}")
        if math.isfinite(best) and best > 0:
            label = f"largest stable rate {name}: {_fmt(best, '.3g')}"
            rates.append(ax.axvline(best, color=color, ls=":", lw=1.5, label=label))
    curves.append(
        Line2D([], [], ls="", marker="^", color="gray", alpha=0.35, label="peak loss after warm-up")
    )
    stable_loss = r.params.get("stable_loss")
    if isinstance(stable_loss, (int, float)):
        label = f"stable_loss {stable_loss:g}"
        rates.append(ax.axhline(stable_loss, color="gray", ls="--", lw=0.9, label=label))
    markers = [
        Line2D([], [], ls="", marker="o", color="gray", label="filled: stable"),
        Line2D(
            [], [], ls="", marker="o", mfc="white", mec="gray", mew=1.6, label="hollow: unstable"
        ),
    ]
    ax.axhline(LOSS_CLIP, color="k", lw=0.8, alpha=0.6)
    ax.text(
        0.01,
        LOSS_CLIP,
        f"{'not finite or ' if clipped else ''}above {LOSS_CLIP:g}: drawn on this line",
        transform=ax.get_yaxis_transform(),
        fontsize=7.5,
        va="bottom",
        color="0.3",
    )
    ax.set_yscale("log")
    finals = [v for c in r.curves for v in _sweep_losses(c.final_losses)[0]]
    ax.set_ylim(min([0.1, *finals]) / 1.6, LOSS_CLIP * 1.6)
    _lr_axis(ax, lrs)
    ax.set_xlabel("learning rate (log scale)")
    tail = r.params.get("tail")
    last = f"the last {tail} steps" if isinstance(tail, int) else "the last steps"
    ax.set_ylabel(f"final loss (mean of {last}, log scale)")
    ax.set_title(
        "largest stable rate: " + ", ".join(stable_at) + "\nstable: ends below stable_loss "
        "and never climbs above its starting loss after warm-up",
        fontsize=9,
    )
    handles = [*curves, *rates, *markers]
    fig.legend(handles=handles, loc="outside lower center", ncol=3, fontsize=8)
    _title(
        fig,
        "Final loss against the learning rate, with and without BatchNorm",
        r,
        ("hidden_layers", "width", "steps", "stable_loss", "seed"),
    )
    return fig


# -- doctor --------------------------------------------------------------------------------------

DIAGNOSIS_FLOOR = 1e-38  # a collapsed std (0 in float32) still shows on the log axes
MAX_LAYER_TICKS = 30  # more layer names than this crowd the x axis: label every k-th

LABEL_COLORS = {
    "ok": "#2e7d32",
    "vanishing": "#1565c0",
    "exploding": "#c62828",
    "dead": "#424242",
    "saturated": "#ef6c00",
    "symmetric": "#6a1b9a",
}


def _layer_values(
    layers: Sequence[LayerDiagnosis], attr: str, floor: float | None
) -> npt.NDArray[np.float64]:
    """One attribute per layer; not finite (or ``None`` from JSON) -> nan, a gap in the line."""
    a = np.array([getattr(layer, attr) for layer in layers], dtype=np.float64)
    a = np.where(np.isfinite(a), a, np.nan)
    if floor is not None:
        a = np.where(a < floor, floor, a)  # nan stays nan
    return a


def _shade(ax: Axes, curves: Sequence[npt.NDArray[np.float64]], low: float, high: float) -> None:
    """A log axis for ``curves``, dotted lines at ``low`` and ``high`` and the bands beyond."""
    for limit in (low, high):
        ax.axhline(limit, color="#999", lw=0.8, ls=":")
    _log_y(ax, *curves)
    lo, hi = ax.get_ylim()  # shade within the data's range, not out to the floor
    ax.axhspan(lo, low, color=LABEL_COLORS["vanishing"], alpha=0.08)
    ax.axhspan(high, hi, color=LABEL_COLORS["exploding"], alpha=0.08)
    ax.set_ylim(lo, hi)


def _fraction(a: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
    """Bar heights in [0, 1]; a missing fraction draws no bar."""
    return np.clip(np.nan_to_num(a, nan=0.0), 0.0, 1.0)


def diagnosis_figure(
    diagnosis: Diagnosis, after: Diagnosis | None = None, label: str = "fixed"
) -> Figure:
    """Four panels over the layers: activation std / input std, the weights' gradient ratio,
    gradient std, dead/saturated fractions."""
    runs = [("as given", diagnosis)] + ([(label, after)] if after is not None else [])
    fig = Figure(figsize=(10, 11), layout="constrained")
    FigureCanvasAgg(fig)
    ax_act, ax_rho, ax_grad, ax_frac = fig.subplots(4, 1, sharex=True)
    names = [layer.name for layer in diagnosis.layers]
    x = np.arange(len(names))
    act = [_layer_values(d.layers, "scale", DIAGNOSIS_FLOOR) for _, d in runs]
    rho = [_layer_values(d.layers, "grad_ratio", DIAGNOSIS_FLOOR) for _, d in runs]
    grad = [_layer_values(d.layers, "grad_std", DIAGNOSIS_FLOOR) for _, d in runs]
    for (name, _), a, r, g, style in zip(runs, act, rho, grad, ("-o", "--s"), strict=False):
        ax_act.plot(x, a, style, ms=3, label=name)
        weighted = np.isfinite(r)  # only weight layers have a ratio: join their points
        ax_rho.plot(x[weighted], r[weighted], style, ms=3, label=name)
        ax_grad.plot(x, g, style, ms=3, label=name)
    _shade(ax_act, act, VANISHING, EXPLODING)
    _shade(ax_rho, rho, GRAD_VANISHING, GRAD_EXPLODING)
    _log_y(ax_grad, *grad)
    ax_act.set_ylabel("activation std / input std")
    ax_act.set_title("Activation scale (shaded: vanishing below, exploding above)")
    ax_rho.set_ylabel("gradient ratio ρ")
    ax_rho.set_title(
        "Each weight layer's |dL/dW| / |W| over the last weight layer's "
        "(shaded: vanishing below, exploding above)"
    )
    ax_grad.set_ylabel("gradient std")
    ax_grad.set_title("Gradient of the loss w.r.t. each layer's output")
    width = 0.8 / len(runs)
    for k, (name, d) in enumerate(runs):
        offset = (k - (len(runs) - 1) / 2) * width
        hatch = "//" if k else None  # the fixed model's bars, told apart without color
        dead = _fraction(_layer_values(d.layers, "dead_frac", None))
        sat = _fraction(_layer_values(d.layers, "saturated_frac", None))
        ax_frac.bar(
            x + offset,
            dead,
            width,
            label=f"dead ({name})",
            color=LABEL_COLORS["dead"],
            hatch=hatch,
        )
        ax_frac.bar(
            x + offset,
            sat,
            width,
            bottom=dead,
            label=f"saturated ({name})",
            color=LABEL_COLORS["saturated"],
            alpha=0.7,
            hatch=hatch,
        )
    ax_frac.set_ylim(0, 1)
    ax_frac.set_ylabel("fraction")
    ax_frac.set_title("Dead units and saturated outputs")
    step = max(1, math.ceil(len(names) / MAX_LAYER_TICKS))
    ax_frac.set_xticks(x[::step], names[::step], rotation=60, ha="right", fontsize=7)
    ax_frac.set_xlabel("layer (forward order)")
    for ax in (ax_act, ax_rho, ax_grad, ax_frac):
        if ax.lines or ax.patches:
            ax.legend(fontsize=7, loc="best")
    return fig


def _doctor(r: DoctorResult) -> Figure:
    fig = diagnosis_figure(r.diagnosis)
    _title(
        fig,
        f"Doctor: {r.model} ({r.init} init): {r.verdict}",
        r,
        ("norm", "steps", "batch", "seed"),
    )
    return fig


_DRAW: dict[type[Result], Callable[[Any], Figure]] = {
    LinearScaleResult: _linear_scale,
    StackResult: _stack,
    BnColumnsResult: _bn_columns,
    RunningStatsResult: _bn_running_stats,
    SymmetryResult: _symmetry,
    VarianceResult: _variance,
    InitCompareResult: _init_compare,
    InitTrainResult: _init_train,
    BnFromScratchResult: _bn_from_scratch,
    BnLrResult: _bn_lr,
    BnLrSweepResult: _bn_lr_sweep,
    DoctorResult: _doctor,
}


def figure(result: Result) -> Figure:
    """Draw ``result`` as a labelled figure (Agg canvas, no window).

    Raises:
        TypeError: ``result`` is not one of the Result types listed in ``_DRAW``.
    """
    for kind in type(result).__mro__:
        draw = _DRAW.get(kind)
        if draw is not None:
            return draw(result)
    valid = ", ".join(t.__name__ for t in _DRAW)
    raise TypeError(f"cannot draw a {type(result).__name__}, use one of: {valid}")


def save(result: Result, path: str | os.PathLike[str]) -> Path:
    """Draw ``result`` and write it to ``path`` as PNG or SVG, chosen by the suffix.

    Returns the path written.

    Raises:
        ValueError: the suffix is not one of :data:`FORMATS`.
        FileNotFoundError: the parent directory does not exist (none is created).
    """
    target = Path(path)
    suffix = target.suffix.lower()
    if suffix not in FORMATS:
        raise ValueError(
            f"file suffix {target.suffix!r} not supported, use one of {', '.join(FORMATS)}"
        )
    if not target.parent.is_dir():
        raise FileNotFoundError(f"directory {str(target.parent)!r} does not exist")
    fig = figure(result)
    metadata = {"Date": None} if suffix == ".svg" else None  # reproducible SVG bytes
    fig.savefig(target, format=suffix[1:], dpi=110, metadata=metadata)
    return target


# -- probe statistics (normlab.probe): per-layer curves and histograms over steps ----------------

PROBE_LOG = ("std", "grad_std", "grad_norm", "update_ratio")  # drawn on a log axis
_PROBE_WORDS = {
    "mean": "mean",
    "std": "std",
    "min": "minimum",
    "max": "maximum",
    "zero_frac": "fraction exactly 0",
    "saturated_frac": "fraction saturated",
    "grad_std": "std of dL/d(output)",
    "grad_norm": "norm of dL/d(output)",
    "update_ratio": "‖Δw‖ / ‖w‖ per optimizer step",
}


def _probe_statistics(stats: ActivationStats | GradientStats) -> list[str]:
    if isinstance(stats, ActivationStats):
        return ["mean", "std", "min", "max", "zero_frac", "saturated_frac", *stats.extra]
    return ["grad_std", "grad_norm"] + (["update_ratio"] if stats.update_ratio is not None else [])


def _probe_values(stats: ActivationStats | GradientStats, name: str) -> FloatArray:
    """``[step][layer]`` values of one statistic as a (steps, layers) float array."""
    if isinstance(stats, ActivationStats) and name in stats.extra:
        rows = stats.extra[name]
    else:
        rows = getattr(stats, name)
    return _floats(rows).reshape(len(rows), len(stats.layers))


def _layer_label(name: str) -> str:
    return name or "(model)"


def probe_curves(
    stats: ActivationStats | GradientStats, statistics: Sequence[str] | None = None
) -> Figure:
    """Per-layer curves over the steps: one panel per statistic, one line per layer.

    Lines are colored by depth (forward order, light to dark); up to :data:`MAX_LINES` layers
    get a legend, more get a color bar. ``std``-like statistics use a log axis (a value of 0,
    a dead layer, is drawn at the floor :data:`LOG_FLOOR`); ``nan`` leaves a gap.

    Args:
        stats: an :class:`~normlab.probe.ActivationStats` or :class:`~normlab.probe.GradientStats`.
        statistics: names to draw; by default ``("std", "zero_frac")`` for activations and the
            gradient std (and the update ratio, when measured) for gradients.

    Raises:
        ValueError: a name in ``statistics`` is not one of the result's statistics.
    """
    valid = _probe_statistics(stats)
    if statistics is None:
        activations = isinstance(stats, ActivationStats)
        names = ["std", "zero_frac"] if activations else [n for n in valid if n != "grad_norm"]
    else:
        names = list(statistics)
    bad = [n for n in names if n not in valid]
    if bad or not names:
        raise ValueError(f"statistics {bad or names!r} not supported, use names from {valid}")
    fig, axes = _new(len(names), width=max(6.5, 5.2 * len(names)), height=4.6)
    layers = len(stats.layers)
    cmap = colormaps["viridis_r"]
    color = Normalize(0, max(layers - 1, 1))
    for ax, name in zip(axes, names, strict=True):
        values = _probe_values(stats, name)  # (steps, layers)
        log = name in PROBE_LOG
        clipped = False
        if log:
            values, clipped = _floor(values, LOG_FLOOR)
        steps = np.arange(values.shape[0])
        marker = "o" if values.shape[0] <= 40 else None
        for j, layer in enumerate(stats.layers):
            ax.plot(
                steps,
                values[:, j],
                "-",
                marker=marker,
                ms=3,
                lw=1.2,
                color=cmap(color(j)),
                label=_layer_label(layer),
            )
        words = _PROBE_WORDS.get(name, name)
        if name == "saturated_frac" and isinstance(stats, ActivationStats):
            words = f"fraction with |x| ≥ {stats.saturation:g}"
        if log:
            _log_y(ax, values)
            words += f" (log scale{f', clipped at {LOG_FLOOR:g}' if clipped else ''})"
        ax.set_ylabel(words)
        ax.set_xlabel("step")
        ax.set_title(name, fontsize=10)
        if steps.size and steps.size <= 20:
            ax.set_xticks(steps)
        if 0 < layers <= MAX_LINES:
            ax.legend(fontsize=7, loc="best")
    if layers > MAX_LINES:
        bar = fig.colorbar(ScalarMappable(norm=color, cmap=cmap), ax=axes, shrink=0.9)
        bar.set_label(
            f"layer, forward order ({_layer_label(stats.layers[0])} … "
            f"{_layer_label(stats.layers[-1])})"
        )
    what = "activations" if isinstance(stats, ActivationStats) else "gradients"
    fig.suptitle(f"Per-layer {what} over {stats.steps} step(s), {layers} layer(s)", fontsize=11)
    return fig


def probe_heatmap(stats: ActivationStats, layer: str | None = None, step: int = -1) -> Figure:
    """The activation histograms as a heat map: count (log color) of each bin.

    With ``layer=None``, one column per layer (forward order) at ``step``: where the scale
    collapses or explodes with depth. With a layer name, one column per step for that layer:
    how its distribution moves during training. Cells with no count stay blank; the end bins
    also hold the values beyond the histogram's range.

    Raises:
        ValueError: no step recorded, ``step`` out of range, or ``layer`` not a probed layer.
    """
    if not stats.hist:
        raise ValueError("stats has no step recorded: run the model inside the probe first")
    if layer is None:
        if not -stats.steps <= step < stats.steps:
            raise ValueError(f"step {step} out of range, use -{stats.steps} to {stats.steps - 1}")
        counts = _floats(stats.hist[step])  # (layers, bins)
        xlabel = "layer (forward order)"
        shown = step % stats.steps
        title = f"histogram of every layer at step {shown}"
    else:
        if layer not in stats.layers:
            raise ValueError(f"layer {layer!r} not probed, use one of {stats.layers}")
        j = stats.layers.index(layer)
        counts = _floats([h[j] for h in stats.hist])  # (steps, bins)
        xlabel = "step"
        title = f"histogram of layer {_layer_label(layer)!r} over the steps"
    counts = counts.reshape(-1, len(stats.bin_edges) - 1)
    fig, (ax,) = _new(width=max(7.0, min(14.0, 4.0 + 0.18 * counts.shape[0])), height=5.0)
    ax.grid(False)
    columns = np.arange(counts.shape[0] + 1) - 0.5
    edges = _floats(stats.bin_edges)
    drawn = np.ma.masked_where(~(counts > 0), counts).T  # (bins, columns); no count: blank
    top = float(np.nanmax(counts)) if counts.size and np.any(counts > 0) else 1.0
    mesh = ax.pcolormesh(
        columns, edges, drawn, norm=LogNorm(vmin=1.0, vmax=max(top, 2.0)), cmap="magma_r"
    )
    fig.colorbar(mesh, ax=ax, label="count in the sample (log color)")
    ax.axhline(0.0, color="tab:blue", lw=0.8, ls=":")
    if layer is None and counts.shape[0] <= 30:
        ax.set_xticks(
            np.arange(counts.shape[0]),
            [_layer_label(n) for n in stats.layers],
            rotation=90,
            fontsize=7,
        )
    ax.set_xlabel(xlabel)
    ax.set_ylabel("value (the end bins hold the values beyond)")
    ax.set_title(title, fontsize=10)
    sample = f", sample of {stats.sample_size} per output" if stats.sample_size else ""
    fig.suptitle(f"Activation histograms, {len(edges) - 1} bins{sample}", fontsize=11)
    return fig
