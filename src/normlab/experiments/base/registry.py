"""A registered experiment: its declared parameters, its plain-PyTorch code, its result, its cost.

The registry itself (the list of experiments, ``run_experiment``) is :mod:`normlab.experiments`;
this module defines what one entry of it is.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import threading
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

from normlab.experiments.base.params import Parameter, make_params, parameters_of
from normlab.experiments.base.results import Result

Progress = Callable[[int, int], None]
"""Called as ``progress(done, total)`` while a run advances: after every optimizer step of a run
that trains, after every step (every yield) of one that streams without training."""
Live = Callable[[Callable[[], "Result"]], None]
"""Called as ``live(partial)`` at every yield of a streaming experiment's entry (its result so
far; the last yield is the whole run); ``partial()`` builds that Result."""

ENGINE = threading.RLock()
"""Held while an experiment's code runs. The code seeds torch's global generator and prints to
``sys.stdout``, as a learner's notebook does, so two runs at once would draw from each other's
stream (and print into each other's output): they take turns."""


@dataclass(frozen=True)
class Cost:
    """The most one run of an experiment may cost, at every setting's maximum: CPU seconds (one
    torch thread) and resident memory above the lab's own, on a loaded 2-core machine, with
    margin. ``tests/lab/test_maxima.py`` walks every experiment at :meth:`Experiment.maxima`
    and holds it to this (``benchmarks/maxima.py`` measures the same); the help of each of its
    sized parameters states it (:attr:`Parameter.sized`)."""

    cpu_s: float
    mib: int = 1024

    def __str__(self) -> str:
        memory = f"{self.mib / 1024:g} GiB" if self.mib >= 1024 else f"{self.mib} MiB"
        return (
            f"at every setting's maximum a run takes at most about {self.cpu_s:g} s of CPU"
            f" and {memory}"
        )


@dataclass(frozen=True)
class Experiment:
    """A registered experiment: its declared parameters, its plain-PyTorch code, its result.

    ``code`` is the experiment's computation, the functions and classes a learner reads, in the
    order a script defines them; they use only torch, numpy, scikit-learn and the standard
    library. ``entry`` (one of them) takes every declared parameter as a keyword and returns a
    dict of plain numbers and lists; ``tables`` (one of them) formats that dict's key numbers,
    once: it returns ``[{"title": str, "columns": [str], "rows": [[str]], "notes": [str]}]``,
    which the script prints (:func:`normlab.models.print_tables`) and the result's
    :meth:`~normlab.experiments.base.results.Result.tables` shows in the CLI and the lab. normlab
    calls ``entry`` itself and builds ``result_type`` from its dict, and :mod:`~normlab.
    experiments.script` renders the same objects' source as a script, so what normlab reports
    is what the code prints. ``total_steps(params)`` counts the optimizer steps a training run
    takes; an entry that streams without training declares ``stages(params)`` instead, how many
    times it yields (its own steps, each a ``stage``: a layer, a stack; the last yield is the whole
    run). Either is the run's progress, :meth:`steps` of them in :attr:`unit`. ``loss_curve``
    names the result's key that holds the training loss at every step, the loss before the
    first update first (what a sweep's summary reads, :mod:`normlab.sweep.summary`).
    ``sweep_values`` names the result's keys that hold one number per run (a float; ``None`` or
    not finite where the measurement failed), such as a measured ``chi_1``: a sweep's summary
    shows each per cell, its mean over the seeds, beside the loss curve's numbers, and a
    sweep's heat map can show it, named by its key. ``cost`` bounds its costliest allowed run,
    :meth:`maxima`, whose choices ``heaviest`` names where the last one is not the costliest.
    """

    name: str
    title: str
    summary: str
    params_type: type
    result_type: type[Result]
    entry: Callable[..., Any]  # returns the result dict, or yields it as it grows (streams)
    tables: Callable[[dict[str, Any]], list[dict[str, Any]]]
    code: tuple[Any, ...]
    cost: Cost
    heaviest: Mapping[str, Any] = field(default_factory=dict)
    total_steps: Callable[[Any], int] | None = None
    stages: Callable[[Any], int] | None = None
    stage: str = "step"
    # Batching (a sweep's, normlab.sweep): ``batched(configs)`` runs several full parameter
    # dicts (every declared parameter) in one call, and returns each one's result dict in order:
    # the dict ``entry`` returns (or yields last) for it, to float tolerance. Configurations may
    # share a call when ``batch_key(params)`` gives them equal keys: what stacking their models
    # needs equal (a net's shape, its steps, the device), while what differs (learning rate,
    # init, seed) lives in the stacked weights. Why: a small net's step is mostly per-operation
    # overhead (Python, dispatch, a kernel launch on a GPU), which one stacked forward and
    # backward for all pays once. An experiment sets both or neither; one that sets neither
    # (its runs differ in shape, or it does not train) runs one configuration at a time. Like
    # ``entry``, ``batched`` seeds torch's generator: its caller holds ENGINE and keeps its own
    # random state, as run_experiment does.
    batched: Callable[[Sequence[Mapping[str, Any]]], list[dict[str, Any]]] | None = None
    batch_key: Callable[[Mapping[str, Any]], Hashable] | None = None
    loss_curve: str = "losses"  # the result's key holding the training loss per step (sweeps)
    sweep_values: tuple[str, ...] = ()  # the result's keys of one number per run (sweeps)

    def __post_init__(self) -> None:
        if (self.batched is None) != (self.batch_key is None):
            raise ValueError(f"experiment {self.name!r}: set batched and batch_key together")
        for needed in (self.entry, self.tables):
            if needed not in self.code:
                raise ValueError(f"experiment {self.name!r}: {needed.__name__} is not in its code")
        declared = parameters_of(self.params_type)
        unknown = set(self.heaviest) - {p.name for p in declared}
        if unknown:
            raise ValueError(f"experiment {self.name!r}: heaviest names no parameter {unknown}")
        unbounded = [p.name for p in declared if p.kind in ("int", "float") and p.max is None]
        if unbounded:  # its cost could not be bounded, nor maxima() built
            raise ValueError(f"experiment {self.name!r}: {unbounded} declare no maximum")
        _check_sweep_values(self)
        if self.stages is not None and (self.trains or not self.streams):
            raise ValueError(
                f"experiment {self.name!r}: stages count the yields of an entry that streams "
                "without training (a training run counts its optimizer steps: total_steps)"
            )

    @property
    def trains(self) -> bool:
        """Whether a run trains (it steps an optimizer and reports progress)."""
        return self.total_steps is not None

    @property
    def streams(self) -> bool:
        """Whether ``entry`` shows its result as it grows: it yields the result so far, and
        last the whole run (a generator function), rather than returning it."""
        return inspect.isgeneratorfunction(self.entry)

    def steps(self, params: Any) -> int | None:
        """How many steps a run with ``params`` (a ``Params``) takes, as its progress counts
        them: the optimizer steps of a run that trains, the stages of one that streams without
        training; ``None`` where the run counts none."""
        counted = self.total_steps if self.trains else self.stages
        return counted(params) if counted is not None else None

    @property
    def unit(self) -> str:
        """What one of :meth:`steps` is: an optimizer "step", or the declared ``stage``."""
        return "step" if self.trains else self.stage

    @property
    def parameters(self) -> tuple[Parameter, ...]:
        """The declared parameters; a sized one's help states the experiment's :attr:`cost`."""
        return _with_cost(parameters_of(self.params_type), self.cost)

    def maxima(self) -> dict[str, Any]:
        """The costliest allowed request: every number at its maximum (a list as long as
        allowed), every bool true, every choice its last, except what :attr:`heaviest` names
        (the choices that cost most, found with ``benchmarks/maxima.py``)."""
        out: dict[str, Any] = {}
        for p in parameters_of(self.params_type):
            if p.kind in ("int", "float"):
                top = cast(float, p.max)  # every number declares one: see __post_init__
                out[p.name] = int(top) if p.kind == "int" else top
            elif p.kind == "float_list":
                out[p.name] = [p.max] * (p.max_len or 1)
            elif p.kind == "bool":
                out[p.name] = True
            else:
                out[p.name] = (p.choices or ())[-1]
        return {**out, **self.heaviest}

    def make_params(self, values: Mapping[str, object]) -> Any:
        """Validate ``values`` (names and each value) and build the ``Params`` instance."""
        return make_params(self.params_type, values, self.name)


SWEEP_BUILTINS = ("final", "best", "diverged", "sensitivity")
"""The values a sweep's summary reads off the loss curve (:mod:`normlab.sweep.summary`): no
:attr:`Experiment.sweep_values` may take their names."""


def _check_sweep_values(exp: Experiment) -> None:
    """Each of ``exp.sweep_values`` is a field of its result, once, and no built-in value."""
    names = exp.sweep_values
    if isinstance(names, str) or not all(isinstance(n, str) for n in names):
        raise ValueError(
            f"experiment {exp.name!r}: sweep_values {names!r}: give a tuple of result keys"
        )
    common = {f.name for f in dataclasses.fields(Result)}  # experiment, params: not numbers
    fields = [
        f.name
        for f in dataclasses.fields(exp.result_type)
        if f.name != exp.loss_curve and f.name not in common
    ]
    for name in names:
        if name in SWEEP_BUILTINS:
            raise ValueError(
                f"experiment {exp.name!r}: sweep value {name!r} is a built-in sweep value "
                f"({', '.join(SWEEP_BUILTINS)}): name the result's key otherwise"
            )
        if name not in fields:
            raise ValueError(
                f"experiment {exp.name!r}: sweep value {name!r} is not a field of its result "
                f"other than its loss curve, use one of: {', '.join(fields) or 'none'}"
            )
    if len(set(names)) < len(names):
        raise ValueError(f"experiment {exp.name!r}: sweep_values {names!r} repeats a name")


@functools.cache
def _with_cost(parameters: tuple[Parameter, ...], cost: Cost) -> tuple[Parameter, ...]:
    return tuple(
        dataclasses.replace(p, help=f"{p.help} ({cost})") if p.sized else p for p in parameters
    )
