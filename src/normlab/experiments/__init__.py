"""The experiment registry: every seed experiment, runnable by name.

>>> [e.name for e in list_experiments()][:3]
['linear-scale', 'drift', 'bn-columns']
>>> run_experiment("linear-scale").output_std > 0
True
"""

from __future__ import annotations

from typing import Any

from normlab.experiments import (
    bn_columns,
    bn_from_scratch,
    bn_lr,
    bn_lr_sweep,
    bn_running_stats,
    bn_stack,
    doctor,
    drift,
    init_compare,
    init_train,
    linear_scale,
    symmetry,
    variance,
)
from normlab.experiments.base import (
    Experiment,
    Parameter,
    ParameterError,
    ParameterTypeError,
    Progress,
    Result,
    Table,
    params_dict,
)

_REGISTRY: dict[str, Experiment] = {
    m.EXPERIMENT.name: m.EXPERIMENT
    for m in (
        linear_scale,
        drift,
        bn_columns,
        bn_running_stats,
        bn_stack,
        symmetry,
        variance,
        init_compare,
        init_train,
        bn_from_scratch,
        bn_lr,
        bn_lr_sweep,
        doctor,
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


def run_experiment(name: str, progress: Progress | None = None, **params: Any) -> Result:
    """Validate ``params`` against the experiment's declaration, run it, return its Result.

    The Result records the experiment's name and the full parameter set it ran with, so it can
    be reproduced.
    """
    experiment = get_experiment(name)
    p = experiment.make_params(params)
    result = experiment.run(p, progress)
    result.experiment = name
    result.params = params_dict(p)
    return result


__all__ = [
    "Experiment",
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
]
