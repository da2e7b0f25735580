"""The experiment registry: every seed experiment, runnable by name.

>>> [e.name for e in list_experiments()][:3]
['linear-scale', 'drift', 'bn-columns']
>>> run_experiment("linear-scale").output_std > 0
True
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch
from torch.optim.optimizer import register_optimizer_step_post_hook

from normlab.experiments import (
    bn_columns,
    bn_from_scratch,
    bn_gradient_explosion,
    bn_lr,
    bn_lr_sweep,
    bn_regularization,
    bn_running_stats,
    bn_stack,
    chaos_cell,
    coord_check,
    doctor,
    drift,
    edge_of_chaos,
    error_surface,
    init_compare,
    init_train,
    jacobian_spectrum,
    linear_scale,
    residual_stream,
    script,
    symmetry,
    training,
    two_moons,
    variance,
)
from normlab.experiments.base.params import (
    Parameter,
    ParameterError,
    ParameterTypeError,
    params_dict,
)
from normlab.experiments.base.registry import ENGINE, Experiment, Live, Progress
from normlab.experiments.base.results import Result
from normlab.figures import Table

_REGISTRY: dict[str, Experiment] = {
    m.EXPERIMENT.name: m.EXPERIMENT
    for m in (
        linear_scale,
        drift,
        bn_columns,
        bn_running_stats,
        bn_stack,
        two_moons,
        error_surface,
        symmetry,
        variance,
        init_compare,
        init_train,
        bn_from_scratch,
        bn_lr,
        bn_lr_sweep,
        bn_regularization,
        edge_of_chaos,
        chaos_cell,
        jacobian_spectrum,
        bn_gradient_explosion,
        residual_stream,
        coord_check,
        doctor,
        training,
    )
}


class UnknownExperiment(ValueError):
    """An experiment name that is not registered."""


def list_experiments() -> list[Experiment]:
    """Every registered experiment, in lesson order."""
    return list(_REGISTRY.values())


def get_experiment(name: str) -> Experiment:
    """The experiment called ``name``; an unknown name raises ``UnknownExperiment``."""
    try:
        return _REGISTRY[name]
    except KeyError:
        valid = ", ".join(_REGISTRY)
        raise UnknownExperiment(f"experiment {name!r} not found, use one of: {valid}") from None


def run_experiment(
    name: str, progress: Progress | None = None, live: Live | None = None, **params: Any
) -> Result:
    """Validate ``params`` against the experiment's declaration, run it, return its Result.

    The Result records the experiment's name and the full parameter set it ran with, so it can
    be reproduced. The caller's global random state is restored afterwards. ``progress`` is
    called as ``progress(done, total)`` after every optimizer step of a training experiment,
    and after every yield of one that streams its stages (``Experiment.stages``: a layer, a
    stack done); it may raise to stop the run. ``live``, for an experiment that streams
    (``Experiment.streams``: its entry yields its result as it grows), is called as
    ``live(partial)`` at every yield, the last (the whole run) included; ``partial()`` builds
    the Result so far (it copies the data: call it only for what you will show). The
    experiment's code knows nothing of ``live``.
    """
    experiment = get_experiment(name)
    p = experiment.make_params(params)
    values = params_dict(p)
    total = experiment.steps(p) or 0
    if live is not None and not experiment.streams:
        raise ValueError(f"experiment {name!r} does not stream its result: pass no live")
    trained = progress if experiment.trains else None  # counted at its optimizer steps
    staged = progress if experiment.stages is not None else None  # counted at its yields
    with ENGINE, _own_rng(values.get("device", "cpu")), _counting(trained, total):
        raw = _run(experiment, values, live, staged, total)
    return _result(experiment, raw, values)


def _run(
    experiment: Experiment,
    values: dict[str, Any],
    live: Live | None,
    staged: Progress | None = None,
    total: int = 0,
) -> dict[str, Any]:
    """The dict ``entry`` returns, or the last one a streaming entry yields (each yield is
    handed to ``live`` as it comes, after ``staged(done, total)`` where its stages count)."""
    if not experiment.streams:
        raw: dict[str, Any] = experiment.entry(**values)
        return raw
    last: dict[str, Any] | None = None
    for done, raw in enumerate(experiment.entry(**values), start=1):
        if staged is not None:
            staged(done, total)
        if live is not None:
            live(functools.partial(_result, experiment, raw, values))
        last = raw
    if last is None:
        raise RuntimeError(f"experiment {experiment.name!r} yielded no result")
    return last


def _result(experiment: Experiment, raw: dict[str, Any], values: dict[str, Any]) -> Result:
    result = experiment.result_type.from_raw(raw)
    result.experiment = experiment.name
    result.params = values
    return result


@contextmanager
def _own_rng(device: str) -> Iterator[None]:
    """Keep the caller's global random state (CPU, and the GPU when the run uses it)."""
    devices = [torch.cuda.current_device()] if device == "cuda" else []
    with torch.random.fork_rng(devices=devices):
        yield


@contextmanager
def _counting(progress: Progress | None, total: int) -> Iterator[None]:
    """Call ``progress`` after each optimizer step taken in this thread, while inside."""
    if progress is None:
        yield
        return
    owner = threading.get_ident()
    done = 0

    def after_step(optimizer: object, args: object, kwargs: object) -> None:
        nonlocal done
        if threading.get_ident() == owner:
            done += 1
            progress(done, total)

    handle = register_optimizer_step_post_hook(after_step)
    try:
        yield
    finally:
        handle.remove()


__all__ = [
    "Experiment",
    "Live",
    "Parameter",
    "ParameterError",
    "ParameterTypeError",
    "Progress",
    "Result",
    "Table",
    "UnknownExperiment",
    "get_experiment",
    "list_experiments",
    "params_dict",
    "run_experiment",
    "script",
]
