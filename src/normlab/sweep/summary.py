r"""A sweep's summary: per cell, the final and best loss, whether it trained, and the learning-rate
sensitivity of each setting of the other axes.

A *cell* is one setting of the swept axes; where the sweep has a seed axis, a cell holds one run
per seed and its numbers are the **mean over its seeds**, with the spread (the sample standard
deviation over the seeds, ``ddof=1``) beside them. Every number comes from the loss curve the
experiment's result stores (the key :attr:`~normlab.experiments.Experiment.loss_curve` names;
``losses`` by default): the loss at every step, measured before that step's update, so that its
first value :math:`\ell_0` is the loss at initialization.

Per run:

- **final**: the curve's last value; **best**: its smallest finite value;
- **diverged**: the curve holds a non-finite value, or the final loss is above :math:`\ell_0`.
  Why this rule: it needs no threshold of our choosing, and a run that ends worse than it started
  has not trained, whatever its curve did between; it is the same line the sensitivity below
  draws (a loss above :math:`\ell_0` counts as :math:`\ell_0`, no better than not training).

Per cell, over its seeds: ``final`` and ``best`` are means (a diverged seed whose loss is not
finite makes the cell's mean not finite: it is shown as diverged, never averaged away),
``diverged`` is the fraction of seeds that diverged, and the cell is ``trainable`` when none did.
The numbers an experiment declares beside its curve, one per run
(:attr:`~normlab.experiments.Experiment.sweep_values`, a measured ``chi_1`` say), are per cell
the mean over the seeds and its spread, ``measured``: not finite when a seed's is not.

The learning-rate sensitivity (Wortsman et al. 2023, "Small-scale proxies for large-scale
Transformer training instabilities", section 3.2) of one setting of the other axes, over the
learning rates :math:`\mathcal{H}` the sweep tried:

.. math::
    S = \frac{1}{|\mathcal{H}|} \sum_{\eta \in \mathcal{H}}
        \big(\min(\ell(\eta), \ell_0) - \ell^*\big),
    \qquad \ell^* = \min_{\eta \in \mathcal{H}} \min(\ell(\eta), \ell_0)

with :math:`\ell(\eta)` the cell's final loss (its mean over seeds) and :math:`\ell_0` its loss
at initialization. A diverged rate counts as :math:`\ell_0`, so one blow-up costs a bounded
amount. :math:`\ell^*` is the paper's :math:`\min_\eta \ell(\eta)` whenever some rate trains
below :math:`\ell_0` (the case of interest); taking it over the capped losses keeps :math:`S \ge
0` when none does (then :math:`S = 0`: nothing trains, nothing to be sensitive about). Small
:math:`S`: the setting trains about as well over the whole range of rates.

>>> curves = {0.1: [0.7, 0.5, 0.4], 1.0: [0.7, 0.3, 0.2], 3.0: [0.7, 2.0, float("nan")]}
>>> records = [{"params": {"lr": lr}, "status": "ok", "result": {"losses": c}}
...            for lr, c in curves.items()]
>>> s = summarize("bn-lr", [("lr", (0.1, 1.0, 3.0))], records)
>>> [(c.final, c.diverged) for c in s.cells]
[(0.4, 0.0), (0.2, 0.0), (inf, 1.0)]
>>> round(s.sensitivity()[0].value, 6)  # ((0.4 - 0.2) + 0 + (0.7 - 0.2)) / 3
0.233333
"""

from __future__ import annotations

import dataclasses
import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from normlab.experiments import get_experiment
from normlab.sweep.grid import SEED
from normlab.sweep.sweeps import Sweep

LR_AXIS = "lr"
"""The axis the learning-rate sensitivity is taken over (its name in the registry)."""

AxisValues = tuple[str, Sequence[Any]]
"""An axis as the summary reads it: its name and its values, in the sweep's order."""


@dataclass(frozen=True)
class RunNumbers:
    """One run's numbers, read off its loss curve (see the module docstring)."""

    loss0: float  # the loss at initialization (before the first update)
    final: float  # the last value (inf when not finite)
    best: float  # the smallest finite value (inf when none is)
    diverged: bool  # a non-finite value, or final > loss0


def run_numbers(curve: Sequence[float | None]) -> RunNumbers:
    """The numbers of one loss curve (``None``, as JSON writes ``nan``, is not finite)."""
    if not curve:
        raise ValueError("loss curve: empty, a run of at least one step is needed")
    values = [math.inf if v is None or not math.isfinite(v) else float(v) for v in curve]
    finite = [v for v in values if math.isfinite(v)]
    loss0, final = values[0], values[-1]
    diverged = len(finite) < len(values) or final > loss0
    return RunNumbers(loss0, final, min(finite, default=math.inf), diverged)


@dataclass(frozen=True)
class Cell:
    """One setting of the swept axes (seed left out), its numbers averaged over its seeds.

    ``values`` maps each axis to its value. ``runs`` counts the seeds stored with a result,
    ``pending`` those not stored yet, ``errors`` those that raised. The numbers are ``None``
    until a run is stored; ``final_std`` and ``best_std`` (over the seeds, ``ddof=1``) are
    ``None`` below two finite runs. ``measured`` maps each value the experiment declares
    (:attr:`~normlab.experiments.Experiment.sweep_values`) to its mean over the seeds (``nan``
    when a seed's is not finite), ``measured_std`` to their spread, as ``final_std``.
    """

    values: Mapping[str, Any]
    runs: int
    pending: int
    errors: int
    loss0: float | None
    final: float | None
    final_std: float | None
    best: float | None
    best_std: float | None
    diverged: float | None  # the fraction of its runs that diverged
    measured: Mapping[str, float | None] = field(default_factory=dict)
    measured_std: Mapping[str, float | None] = field(default_factory=dict)

    @property
    def trainable(self) -> bool | None:
        """Whether every stored run of the cell trained (``None`` before the first)."""
        return None if self.diverged is None else self.diverged == 0.0

    def value(self, name: str) -> float | None:
        """``final``, ``best``, ``diverged`` or a ``measured`` value: what a heat map shows of
        the cell."""
        if name in self.measured:
            return self.measured[name]
        if name not in CELL_VALUES:
            allowed = ", ".join((*CELL_VALUES, *self.measured))
            raise ValueError(f"value {name!r} not supported, use one of: {allowed}")
        number: float | None = getattr(self, name)
        return number

    def to_dict(self) -> dict[str, Any]:
        numbers = (self.loss0, self.final, self.final_std, self.best, self.best_std)
        loss0, final, final_std, best, best_std = (_json(v) for v in numbers)
        return {
            "values": dict(self.values),
            "runs": self.runs,
            "pending": self.pending,
            "errors": self.errors,
            "loss0": loss0,
            "final": final,
            "final_std": final_std,
            "best": best,
            "best_std": best_std,
            "diverged": self.diverged,
            "trainable": self.trainable,
            "measured": {k: _json(v) for k, v in self.measured.items()},
            "measured_std": {k: _json(v) for k, v in self.measured_std.items()},
        }


CELL_VALUES = ("final", "best", "diverged")
"""What a cell has to show; ``sensitivity`` is a setting's, over the learning rates."""
VALUES = (*CELL_VALUES, "sensitivity")
"""Every value a heat map can show."""


@dataclass(frozen=True)
class Sensitivity:
    """The learning-rate sensitivity of one setting of the other axes (``None`` until every
    learning rate of it has a stored run)."""

    values: Mapping[str, Any]
    value: float | None

    def to_dict(self) -> dict[str, Any]:
        return {"values": dict(self.values), "sensitivity": _json(self.value)}


@dataclass(frozen=True)
class SweepSummary:
    """The cells of a sweep, in grid order, its axes (those with more than one value, seed
    left out) and the values its experiment declares (``measured``, each cell's)."""

    experiment: str
    axes: tuple[AxisValues, ...]
    seeds: int
    cells: tuple[Cell, ...]
    measured: tuple[str, ...] = ()

    @property
    def axis_names(self) -> tuple[str, ...]:
        return tuple(name for name, _ in self.axes)

    @property
    def value_names(self) -> tuple[str, ...]:
        """Every value a heat map of this sweep may show: :data:`VALUES` (``sensitivity`` only
        with an axis :data:`LR_AXIS`), then ``measured``."""
        builtin = (v for v in VALUES if v != "sensitivity" or LR_AXIS in self.axis_names)
        return (*builtin, *self.measured)

    def sensitivity(self, lr_axis: str = LR_AXIS) -> list[Sensitivity]:
        """The learning-rate sensitivity (module docstring) of each setting of the other axes,
        in grid order; a :class:`ValueError` when the sweep has no ``lr_axis``."""
        if lr_axis not in self.axis_names:
            shown = ", ".join(self.axis_names) or "none"
            raise ValueError(f"sensitivity needs the axis {lr_axis!r}, this sweep's: {shown}")
        groups: dict[tuple[Any, ...], list[Cell]] = {}
        for cell in self.cells:
            key = tuple((k, v) for k, v in cell.values.items() if k != lr_axis)
            groups.setdefault(key, []).append(cell)
        return [Sensitivity(dict(key), lr_sensitivity(cells)) for key, cells in groups.items()]

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "experiment": self.experiment,
            "axes": [{"name": n, "values": list(v)} for n, v in self.axes],
            "seeds": self.seeds,
            "cells": [c.to_dict() for c in self.cells],
        }
        if LR_AXIS in self.axis_names:
            out["sensitivity"] = [s.to_dict() for s in self.sensitivity()]
        return out


def lr_sensitivity(cells: Sequence[Cell]) -> float | None:
    r"""Wortsman et al.'s sensitivity over ``cells``, one per learning rate (module docstring):
    the mean of :math:`\min(\ell(\eta), \ell_0) - \ell^*`; ``None`` while a cell has no run."""
    capped = []
    for cell in cells:
        if cell.final is None or cell.loss0 is None:
            return None
        capped.append(min(cell.final, cell.loss0))  # a diverged rate counts as loss0
    best = min(capped)  # l*: the best loss over the rates
    return statistics.fmean(v - best for v in capped)


def summarize(
    experiment: str, axes: Sequence[AxisValues], records: Sequence[Mapping[str, Any]]
) -> SweepSummary:
    """The summary of a sweep's ``records`` (as :meth:`~normlab.sweep.Sweep.records` gives them:
    ``params``, ``status`` ``ok``/``error``/``pending``, ``result``) over its ``axes``.

    Raises:
        ValueError: a stored result without the experiment's loss curve, or without a number
            for one of its :attr:`~normlab.experiments.Experiment.sweep_values`.
    """
    key = check_curve(experiment)
    measured = get_experiment(experiment).sweep_values
    swept = tuple((n, tuple(v)) for n, v in axes if n != SEED and len(v) > 1)
    seeds = next((len(v) for n, v in axes if n == SEED), 1)
    by_cell: dict[tuple[Any, ...], list[Mapping[str, Any]]] = {}
    for record in records:
        at = tuple(record["params"][name] for name, _ in swept)
        by_cell.setdefault(at, []).append(record)
    cells = []
    for at, members in by_cell.items():
        results = [r["result"] for r in members if _ok(r)]
        runs = [run_numbers(_curve(experiment, key, r)) for r in results]
        numbers = {n: [_number(experiment, n, r) for r in results] for n in measured}
        pending = sum(r["status"] == "pending" for r in members)
        errors = sum(r["status"] == "error" for r in members)
        values = dict(zip((n for n, _ in swept), at, strict=True))
        cells.append(_cell(values, runs, numbers, pending, errors))
    return SweepSummary(experiment, swept, seeds, tuple(cells), measured)


def summarize_sweep(sweep: Sweep) -> SweepSummary:
    """The summary of ``sweep`` as its store holds it now (:meth:`Sweep.records`)."""
    return summarize(
        sweep.experiment, [(a.name, a.values) for a in sweep.grid.axes], sweep.records()
    )


def check_curve(experiment: str) -> str:
    """The result key holding ``experiment``'s loss curve; a :class:`ValueError` when its
    result declares no such field (nothing to summarize)."""
    exp = get_experiment(experiment)
    key = exp.loss_curve
    if key not in {f.name for f in dataclasses.fields(exp.result_type)}:
        raise ValueError(
            f"experiment {experiment!r}: its result has no loss curve {key!r} to summarize "
            "(an experiment names its curve with Experiment(loss_curve=...))"
        )
    return key


def _cell(
    values: dict[str, Any],
    runs: list[RunNumbers],
    numbers: Mapping[str, list[float]],
    pending: int,
    errors: int,
) -> Cell:
    """A cell's numbers: the mean over its runs (its seeds) and their spread; ``numbers``
    holds each declared value's runs, in the order of ``runs``."""
    if not runs:
        nothing = dict.fromkeys(numbers)  # each declared value: None, as the losses
        return Cell(values, 0, pending, errors, *(None,) * 6, nothing, nothing)
    final, final_std = _mean_std([r.final for r in runs])
    best, best_std = _mean_std([r.best for r in runs])
    loss0 = statistics.fmean(r.loss0 for r in runs)
    diverged = sum(r.diverged for r in runs) / len(runs)
    # a failed measurement has no sign: nan, where a diverged loss is +inf
    spread = {name: _mean_std(seeds, math.nan) for name, seeds in numbers.items()}
    measured = {name: mean for name, (mean, _) in spread.items()}
    measured_std = {name: std for name, (_, std) in spread.items()}
    losses = (loss0, final, final_std, best, best_std, diverged)
    return Cell(values, len(runs), pending, errors, *losses, measured, measured_std)


def _mean_std(values: list[float], not_finite: float = math.inf) -> tuple[float, float | None]:
    """The mean (``not_finite`` when a value is not: a diverged seed stays visible) and the
    sample standard deviation (``None`` below two values, or when one is not finite)."""
    if not all(math.isfinite(v) for v in values):
        return not_finite, None
    std = statistics.stdev(values) if len(values) > 1 else None
    return statistics.fmean(values), std


def _ok(record: Mapping[str, Any]) -> bool:
    return record["status"] == "ok" and record["result"] is not None


def _curve(experiment: str, key: str, result: Mapping[str, Any]) -> list[float | None]:
    curve = result.get(key)
    if not isinstance(curve, list) or not all(
        v is None or (isinstance(v, int | float) and not isinstance(v, bool)) for v in curve
    ):
        raise ValueError(
            f"experiment {experiment!r}: its result has no loss curve {key!r} (a list of numbers):"
            " declare the key with Experiment(loss_curve=...)"
        )
    return curve


def _number(experiment: str, name: str, result: Mapping[str, Any]) -> float:
    """One run's declared value (``None``, as JSON writes ``nan``, is not finite: ``nan``)."""
    value = result.get(name, ...)
    if value is None:
        return math.nan
    if not isinstance(value, int | float) or isinstance(value, bool):
        raise ValueError(
            f"experiment {experiment!r}: its result has no number {name!r} (one number per run,"
            " as its Experiment(sweep_values=...) declares)"
        )
    return float(value)


def _json(value: float | None) -> float | None:
    """A number as JSON holds it: a value that is not finite (a diverged loss) is ``None``."""
    return value if value is None or math.isfinite(value) else None
