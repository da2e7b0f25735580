"""A sweep's summary described as figures and tables: a heat map of any two axes, the cells.

:func:`heatmap` shows one value (``final``, ``best``, ``diverged`` or ``sensitivity``, see
:mod:`normlab.sweep.summary`, or one of the experiment's
:attr:`~normlab.experiments.Experiment.sweep_values`, named by its key) over two of the sweep's
axes; every other axis is either fixed at one of its values (``fixed``) or averaged over (the
mean of the cells that have a stored run).
A mean that takes in a diverged cell (an infinite loss) is not finite, a gap in the map: a
region that diverges for some setting of the averaged axes is shown as such. The axes'
values are placed at 0, 1, 2, ... and named by their ticks, so that a geometric learning-rate
range, a list of names and true/false all read alike.

Nothing here draws: ``normlab.plots`` (``normlab sweep --plot``) and the lab's renderer
(``/sweeps``) draw what :class:`SweepView` describes.

>>> from normlab.sweep.summary import summarize
>>> records = [{"params": {"lr": lr, "init": init}, "status": "ok",
...             "result": {"losses": [0.7, loss]}}
...            for lr, init, loss in [(0.1, "he", 0.5), (1.0, "he", 0.3),
...                                   (0.1, "xavier", 0.6), (1.0, "xavier", 0.9)]]
>>> s = summarize("bn-lr", [("lr", (0.1, 1.0)), ("init", ("he", "xavier"))], records)
>>> heatmap(s, "lr", "init").panels[0].series[0].z
((0.5, 0.3), (0.6, 0.9))
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from normlab import figures as fig
from normlab.experiments import ParameterError, ParameterTypeError, get_experiment
from normlab.figures import Table
from normlab.models import fmt
from normlab.sweep.summary import LR_AXIS, SweepSummary

LABELS = {
    "final": "final loss",
    "best": "best loss",
    "diverged": "fraction of runs diverged",
    "sensitivity": "learning-rate sensitivity",
}
"""How each built-in value is named on a figure (one the experiment declares: by its key)."""


class ViewError(ParameterError):
    """A view that cannot be drawn: its message names the option and what is allowed."""


@dataclass(frozen=True)
class SweepView:
    """What to show of a summary: the heat map of ``value`` over ``x`` and ``y`` (with the
    other axes ``fixed`` or averaged), and the tables. ``figures()`` is empty when the sweep
    has no axis to map; with one (``y`` None) the map is one row."""

    summary: SweepSummary
    x: str | None
    y: str | None
    value: str = "final"
    fixed: Mapping[str, Any] = field(default_factory=dict)

    def figures(self) -> list[fig.Figure]:
        if self.x is None:
            return []
        return [heatmap(self.summary, self.x, self.y, self.value, self.fixed)]

    def tables(self) -> list[Table]:
        return tables(self.summary)


def view(
    summary: SweepSummary,
    x: str | None = None,
    y: str | None = None,
    value: str = "final",
    fixed: Sequence[str] = (),
) -> SweepView:
    """A :class:`SweepView` from options as typed (``fixed``: ``NAME=VALUE`` texts), checked:
    a bad one raises :class:`ViewError` naming it. ``x`` and ``y`` default to the axes the
    value can use with the most values (the learning rate first, on ``x``)."""
    if value == "sensitivity" and LR_AXIS not in summary.axis_names:
        raise ViewError("value", f"value 'sensitivity' needs a sweep over {LR_AXIS!r}")
    if value not in summary.value_names:
        allowed = ", ".join(summary.value_names)
        raise ViewError("value", f"value {value!r} not supported, use one of: {allowed}")
    usable = [a for a in summary.axis_names if value != "sensitivity" or a != LR_AXIS]
    for option, name in (("x", x), ("y", y)):
        if name is not None and name not in usable:
            shown = ", ".join(usable) or "none"
            raise ViewError(option, f"{option} {name!r}: not an axis to map, use one of: {shown}")
    if x is not None and x == y:
        raise ViewError("y", f"y {y!r}: the same axis as x, choose another")
    pinned = {item.partition("=")[0].strip().replace("-", "_") for item in fixed}
    sizes = {name: len(values) for name, values in summary.axes}
    # the learning rate first, then the axes with the most values: the map's widest sides
    free = sorted(
        (a for a in usable if a not in (x, y, *pinned)), key=lambda a: (a != LR_AXIS, -sizes[a])
    )
    x = x or (free.pop(0) if free else None)
    y = y or (free.pop(0) if free else None)
    return SweepView(summary, x, y, value, parse_fixed(summary, fixed, {x, y}, value))


def parse_fixed(
    summary: SweepSummary, items: Sequence[str], mapped: set[str | None], value: str
) -> dict[str, Any]:
    """``["init=he"]`` as ``{"init": "he"}``, each value parsed by its parameter's declaration
    and found among the axis' values."""
    declared = {p.name: p for p in get_experiment(summary.experiment).parameters}
    axes = dict(summary.axes)
    out: dict[str, Any] = {}
    for item in items:
        name, sep, spec = item.partition("=")
        name = name.strip().replace("-", "_")
        if (
            not sep
            or name not in axes
            or name in mapped
            or (value == "sensitivity" and name == LR_AXIS)
        ):
            refused = mapped | ({LR_AXIS} if value == "sensitivity" else set())
            others = [a for a in axes if a not in refused]
            shown = ", ".join(others) or "none"
            raise ViewError("fix", f"fix {item!r}: write NAME=VALUE, NAME one of: {shown}")
        try:
            parsed = declared[name].parse(spec)
        except (ParameterError, ParameterTypeError, ValueError):
            parsed = None
        # a value as the ticks write it (0.3162 for 0.316227766017) finds its axis value
        found = [v for v in axes[name] if parsed is not None and text(v) == text(parsed)]
        if not found:
            shown = ", ".join(text(v) for v in axes[name])
            raise ViewError("fix", f"fix {item!r}: {name} is one of: {shown}")
        out[name] = found[0]
    return out


def heatmap(
    summary: SweepSummary,
    x: str,
    y: str | None,
    value: str = "final",
    fixed: Mapping[str, Any] | None = None,
) -> fig.Figure:
    """The heat map of ``value`` over axes ``x`` and ``y`` (module docstring); with ``y``
    None, one row over ``x``."""
    fixed = dict(fixed or {})
    axes = dict(summary.axes)
    xs, ys = list(axes[x]), list(axes[y]) if y is not None else ["all"]
    buckets: dict[tuple[int, int], list[float]] = {}
    for values, number in _points(summary, value):
        if number is None or any(values[k] != v for k, v in fixed.items()):
            continue
        at = (xs.index(values[x]), 0 if y is None else ys.index(values[y]))
        buckets.setdefault(at, []).append(number)
    z = tuple(
        tuple(_mean(buckets.get((i, j))) for i in range(len(xs))) for j in range(len(ys))
    )  # (len(ys), len(xs)): z[j][i] at (x[i], y[j])
    label = LABELS.get(value, value)
    series = fig.Series(
        label,
        [float(i) for i in range(len(xs))],
        [float(j) for j in range(len(ys))],
        "heatmap",
        z=z,
        colorscale="Reds" if value == "diverged" else "viridis",
        zlimits=(0.0, 1.0) if value == "diverged" else None,
    )
    note = _note(summary, value, x, y, fixed)
    panel = fig.Panel(_axis(x, xs), _axis(y or "", ys), [series], note=note)
    by = x if y is None else f"{x} and {y}"
    return fig.Figure(f"{summary.experiment}: {label} by {by}", [panel], height=4.6)


def _points(summary: SweepSummary, value: str) -> list[tuple[Mapping[str, Any], float | None]]:
    """Each cell's (or, for the sensitivity, each setting's) axis values and number."""
    if value == "sensitivity":
        return [(s.values, s.value) for s in summary.sensitivity()]
    return [(c.values, c.value(value)) for c in summary.cells if c.runs]


def _mean(numbers: list[float] | None) -> float | None:
    """The mean of a bucket (``inf`` in it: not finite, a gap); ``None`` for an empty one."""
    return statistics.fmean(numbers) if numbers else None


def _axis(name: str, values: Sequence[Any]) -> fig.Axis:
    ticks = tuple(float(i) for i in range(len(values)))
    return fig.Axis(name, ticks=ticks, tick_labels=tuple(text(v) for v in values))


def _note(
    summary: SweepSummary, value: str, x: str, y: str | None, fixed: Mapping[str, Any]
) -> str:
    """What the map holds besides its two axes: the fixed axes, the averaged ones, the gaps."""
    skip = {x, y, *fixed} | ({LR_AXIS} if value == "sensitivity" else set())
    averaged = [f"{n} ({len(v)})" for n, v in summary.axes if n not in skip]
    if summary.seeds > 1:
        averaged.append(f"{summary.seeds} seeds")
    parts = [f"{k}={text(v)}" for k, v in fixed.items()]
    if averaged:
        parts.append("mean over " + ", ".join(averaged))
    if value == "diverged":
        parts.append("blank: not run yet")
    elif value in summary.measured:
        parts.append("blank: not finite or not run yet")
    else:
        parts.append("blank: diverged or not run yet")
    return "; ".join(parts)


def tables(summary: SweepSummary) -> list[Table]:
    """The cells (mean ± spread over the seeds, the experiment's declared values after the
    losses) and, with a learning-rate axis, each other setting's sensitivity."""
    names = summary.axis_names
    spread = " (mean ± std over seeds)" if summary.seeds > 1 else ""
    rows = []
    for c in summary.cells:
        shown = [text(c.values[n]) for n in names]
        numbers = [_pm(c.final, c.final_std), _pm(c.best, c.best_std), fmt(c.loss0)]
        measured = [_pm(c.measured.get(n), c.measured_std.get(n)) for n in summary.measured]
        diverged = "" if c.diverged is None else f"{round(c.diverged * c.runs)}/{c.runs}"
        rows.append((*shown, *numbers, *measured, diverged, _status(c.runs, c.pending, c.errors)))
    losses = ("final loss", "best loss", "loss at init")
    columns = (*names, *losses, *summary.measured, "diverged", "runs")
    notes = ("diverged: a loss that is not finite, or a final loss above the loss at init",)
    out = [Table(f"{summary.experiment}: {len(rows)} cells{spread}", columns, rows, notes)]
    if LR_AXIS in names:
        others = [n for n in names if n != LR_AXIS]
        sens = [(*(text(s.values[n]) for n in others), fmt(s.value)) for s in summary.sensitivity()]
        note = (
            "mean over lr of min(final loss, loss at init) - best of those (Wortsman et al. 2023)"
        )
        out.append(Table("learning-rate sensitivity", (*others, "sensitivity"), sens, (note,)))
    return out


def _pm(mean: float | None, std: float | None) -> str:
    return fmt(mean) if std is None else f"{fmt(mean)} ± {fmt(std)}"


def _status(runs: int, pending: int, errors: int) -> str:
    parts = [f"{runs} done"] + [
        f"{n} {w}" for n, w in ((pending, "pending"), (errors, "raised")) if n
    ]
    return ", ".join(parts)


def text(value: Any) -> str:
    """An axis value as the command line writes it (``true``, ``0.316``, ``he``)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return f"{value:.4g}"
    if isinstance(value, list):
        return ",".join(text(v) for v in value)
    return str(value)
