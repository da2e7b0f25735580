"""Sweeps started from the lab: checked by the sweep engine, bounded, queued like any run.

``POST /api/sweeps`` (:mod:`normlab.lab.routes.sweeps`) hands its body to :func:`plan` and
:func:`start`. The lab's rule for what a request may cost holds for sweeps too (issue 34, item
6): a sweep started here is bounded, in configurations (:data:`MAX_CONFIGS`) and in the CPU
its experiment declares for a run at its maxima (:data:`CPU_BUDGET_S`), and waits its turn
in the :class:`~normlab.lab.runner.Runner`'s job thread, one sweep computing at a time; a
larger sweep is the command line's (``normlab sweep``, on a cluster with ``--ray``).

A sweep runs exactly as ``normlab sweep`` runs it (:meth:`normlab.sweep.Sweep.run`, the
engine's groups, batched where the experiment can): the same cells, the same ids, the same
numbers, in the same store file, so a sweep the lab stopped is resumed by either. Each of its
runs (each batched call) holds the experiments' ``ENGINE`` lock, as the engine's in-process
backend takes it, so the lab's other runs take turns with it. It stops when
the lab shuts down, before its next unit of work (:func:`stopping`); what it stored stays.
"""

from __future__ import annotations

import functools
import json
import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import Future
from pathlib import Path
from typing import Any

from normlab.experiments import ParameterError, get_experiment, list_experiments
from normlab.lab.runner import Runner
from normlab.sweep import Backend, Grid, GridError, Group, Outcome, Store, Sweep, in_process
from normlab.sweep.grid import grid_items
from normlab.sweep.summary import check_curve

MAX_CONFIGS = 48
"""The most configurations (cells times seeds) a sweep started from the lab may have. Enough
for a useful picture on one page: ``chaos-cell`` over 6 weight by 8 bias variances (the
mean-field phase diagram). The CPU budget bounds a costlier experiment further
(:data:`CPU_BUDGET_S`: ``bn-lr``'s 12 learning rates with and without BatchNorm, 24 runs, pass).
A larger grid is ``normlab sweep``'s."""

CPU_BUDGET_S = 300.0
"""The most CPU a sweep started from the lab may declare: its configurations times its
experiment's :attr:`~normlab.experiments.Experiment.cost` ``cpu_s``, the bound on one run at
every setting's maximum. So the bound holds whatever the settings: ``chaos-cell``'s 6 s a run
lets the 48 cells of a 6 x 8 phase diagram through (288 s), ``bn-lr``'s 10 s the 24 runs of 12
rates with and without BatchNorm (240 s), ``edge-of-chaos``'s 14 s 21 runs. Five minutes of
one core at most, and a run below its maxima costs a part of its bound: what a learner may
wait for behind a page's grid, while the lab's other runs take turns with it."""

MAX_SPEC_CHARS = 1000
"""The longest text one axis of the grid may be (``lr=0.1,0.2,...``: 48 values in a few
hundred characters)."""


def sweepable() -> list[str]:
    """The experiments a sweep may be started on from the lab: those whose result holds a
    loss curve, which a sweep's page summarizes (:func:`~normlab.sweep.summary.check_curve`)."""
    names = []
    for e in list_experiments():
        try:
            check_curve(e.name)
        except ValueError:
            continue
        names.append(e.name)
    return names


def plan(
    experiment: str,
    grid: Mapping[str, Any] | Sequence[str],
    seeds: int | None,
    store: str | Path,
) -> Sweep:
    """The sweep of ``experiment`` over ``grid`` (``{NAME: SPEC}`` as a sweep file's
    ``[grid]``, or ``NAME=SPEC`` texts as on the command line) and ``seeds``, into ``store``,
    checked by the sweep engine and held to the lab's bounds. Nothing runs and nothing is
    stored here.

    Raises:
        ParameterError: an experiment the lab does not sweep (``experiment``), a bad axis (a
            :class:`~normlab.sweep.GridError` naming its parameter), or a grid over
            :data:`MAX_CONFIGS` or :data:`CPU_BUDGET_S` (``grid``).
    """
    allowed = sweepable()
    if experiment not in allowed:
        raise ParameterError(
            "experiment",
            f"experiment {experiment!r}: the lab sweeps the experiments with a loss curve, "
            f"use one of: {', '.join(allowed)} (normlab sweep on the command line runs any)",
        )
    axes = dict(grid) if isinstance(grid, Mapping) else grid_items(list(grid))
    for name, spec in axes.items():
        _check_spec(name, spec)
    built = Grid.from_mapping(experiment, axes, seeds)
    _check_bounds(experiment, math.prod(len(a.values) for a in built.axes))
    return Sweep(experiment, built, store=store)


def _check_spec(name: str, spec: object) -> None:
    """Refuse an axis text longer than :data:`MAX_SPEC_CHARS`, or a range ``A:B:N`` of more
    than :data:`MAX_CONFIGS` points, before the engine builds its values."""
    if not isinstance(spec, str):
        return
    if len(spec) > MAX_SPEC_CHARS:
        raise GridError(name, f"parameter {name!r}: at most {MAX_SPEC_CHARS} characters")
    parts = spec.split(":")
    if len(parts) in (3, 4) and parts[2].strip().isdigit() and int(parts[2]) > MAX_CONFIGS:
        raise GridError(
            name,
            f"parameter {name!r}: {spec.strip()!r} has {int(parts[2])} points, a sweep "
            f"started from the lab at most {MAX_CONFIGS} configurations",
        )


def most_runs(experiment: str) -> int:
    """The most configurations a sweep of ``experiment`` started from the lab may have:
    :data:`MAX_CONFIGS`, or fewer where its declared cost a run would pass
    :data:`CPU_BUDGET_S`."""
    return min(MAX_CONFIGS, int(CPU_BUDGET_S // get_experiment(experiment).cost.cpu_s))


def _check_bounds(experiment: str, size: int) -> None:
    cost = get_experiment(experiment).cost.cpu_s
    most = most_runs(experiment)
    if size > most:
        raise GridError(
            "grid",
            f"the grid has {size} configurations; a sweep started from the lab runs at most "
            f"{MAX_CONFIGS}, and at most {CPU_BUDGET_S:g} s of CPU at the settings' maxima "
            f"({experiment} declares {cost:g} s a run: {most} runs). Run it on the command "
            f"line: normlab sweep {experiment} --grid NAME=SPEC ... (with --ray on a cluster)",
        )


def start(runner: Runner, sweep: Sweep) -> dict[str, Any]:
    """Queue ``sweep`` on ``runner`` (:meth:`~normlab.lab.runner.Runner.submit`; a sweep of
    the same grid already queued or computing is not queued again) and record it in its store
    at once, so that the list and its page show it while it waits and runs. Answers its id,
    its page, its configurations and its place in the line.

    Raises:
        RunBusy: the line is full (nothing is recorded).
        RunCancelled: the lab is stopping.
        StoreError: the store cannot be written.
    """
    ids = [c.id for c in sweep.configs]
    key = json.dumps([sweep.experiment, sweep.spec(), ids])
    recorded: Future[None] = Future()
    place = runner.submit(key, functools.partial(_run, sweep, recorded))
    try:
        with Store(sweep.store) as store:  # the record Sweep.run writes first, written now
            sweep_id = store.add_sweep(sweep.experiment, sweep.spec(), ids)
    except BaseException as exc:
        recorded.set_exception(exc)
        raise
    recorded.set_result(None)
    return {"id": sweep_id, "url": f"/sweeps/{sweep_id}", "total": len(ids), "queued": place}


def _run(sweep: Sweep, recorded: Future[None], check: Callable[[], None]) -> None:
    """Run ``sweep`` once :func:`start` has recorded it (two connections that create one
    SQLite file at once may find it locked); not at all if that failed (its request said so)."""
    if recorded.exception() is None:
        sweep.run(backend=stopping(check))


def stopping(check: Callable[[], None]) -> Backend:
    """The engine's in-process backend (:func:`~normlab.sweep.in_process`), calling
    ``check()`` before each unit of work: each configuration of an experiment that runs one by
    one, each group of one that batches (its configurations share one call). ``check`` raises
    to stop the sweep there; every outcome already given has been stored."""

    def backend(groups: Sequence[Group]) -> Iterator[Outcome]:
        for group in groups:
            if get_experiment(group.experiment).batched is not None:
                check()
                yield from in_process([group])
                continue
            for config in group.configs:
                check()
                yield from in_process([Group(group.experiment, (config,), group.threads)])

    return backend
