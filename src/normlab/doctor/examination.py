"""The whole examination: :func:`examine` diagnoses a model (:func:`normlab.doctor.diagnose`),
then fixes it and diagnoses it again, or checks every remedy that applies in training."""

from __future__ import annotations

import copy
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from normlab.doctor.constants import FIX_METHODS
from normlab.doctor.cure import fix
from normlab.doctor.remedies import REMEDIES, Advice, advise, check_cost
from normlab.doctor.results import Diagnosis, FixReport
from normlab.doctor.running import Input, _steps
from normlab.doctor.training import TRIAL_SEEDS, TRIAL_STEPS, Trial, trial
from normlab.doctor.visit import diagnose


@dataclass
class Examination:
    """What :func:`examine` found: the model as given and, when a fix was asked for, what the
    fix did and the model after it."""

    before: Diagnosis
    fix: FixReport | None = None
    after: Diagnosis | None = None
    trial: Trial | None = None  # the short training comparison; None without a fix
    advice: list[Advice] | None = None  # every remedy tried (check=True); None: not checked
    advice_note: str | None = None  # why the advice was not checked, when it was not

    def to_dict(self) -> dict[str, Any]:
        """``before``'s dict, plus ``fix`` (the report, with ``after`` and ``trial`` inside),
        ``advice`` (each remedy tried) and ``advice_note`` when checked."""
        out = self.before.to_dict()
        if self.fix is not None and self.after is not None:
            trial = None if self.trial is None else self.trial.to_dict()
            out["fix"] = {**self.fix.to_dict(), "after": self.after.to_dict(), "trial": trial}
        if self.advice is not None or self.advice_note is not None:
            out["advice"] = None if self.advice is None else [a.to_dict() for a in self.advice]
            out["advice_note"] = self.advice_note
        return out


_fix = fix  # examine's argument of that name hides the function


def examine(
    model: nn.Module,
    batches: Input | Sequence[Input],
    fix: str | None = None,
    *,
    generator: torch.Generator | None = None,
    output: str | None = None,
    tied: bool = False,
    trial_steps: int = TRIAL_STEPS,
    seeds: int = TRIAL_SEEDS,
    check: bool = False,
) -> Examination:
    """Diagnose ``model``; with ``fix``, re-initialize it by that method and diagnose it again;
    with ``check`` (and no fix), try every remedy that applies (:func:`advise`).

    What ``normlab doctor [--fix METHOD]`` does: :func:`diagnose`, then :func:`fix` on the first
    batch and :func:`diagnose` once more, all drawing from ``generator`` in that order, so one
    seed gives one report. An unknown method is refused before anything runs.

    Args:
        model: the network; re-initialized in place when ``fix`` is given.
        batches: one input batch, or several (one step each), for both diagnoses.
        fix: one of :data:`FIX_METHODS`, or ``None`` to diagnose only.
        generator: draws the readouts (and the new weights).
        output: the output field to read, as for :func:`diagnose`.
        tied: :func:`fix` re-initializes tied weights too.
        trial_steps: after a fix, train copies of the model as given and fixed this many steps
            over ``seeds`` seeds (:func:`trial`), and re-diagnose it, so that no fix is called a
            cure unless it measured one; 0: skip. With ``check``, the steps of each remedy's run.
        seeds: the seeds of those runs, in [2, 10].
        check: a flagged model's advice is tried in training (:func:`advise`), unless it has
            more than :data:`MAX_CHECK_PARAMS` parameters (``advice_note`` then says so).

    Returns:
        an :class:`Examination` (``fix`` and ``after`` are ``None`` without a fix).

    Raises:
        ModelInputError, ModelOutputError, CannotDiagnose: as :func:`diagnose`.
        ValueError: an unknown method, a model with no layer to re-initialize, or LSUV that
            could not rescale a layer.

    Examples::

        >>> from normlab import zoo
        >>> net = zoo.build("vanishing-tanh")
        >>> exam = examine(net, torch.randn(64, 32), fix="xavier")
        >>> exam.before.problems, exam.after.problems
        (['vanishing'], [])
    """
    if fix is not None and fix not in FIX_METHODS:
        raise ValueError(f"method {fix!r} not supported, use one of {FIX_METHODS}")
    before = diagnose(model, batches, generator=generator, output=output)
    if fix is None and check and trial_steps > 0 and before.problems:
        if note := check_cost(model):
            return Examination(before, advice_note=note)
        advice = advise(
            model, batches, before, seeds=seeds, steps=trial_steps, generator=generator,
            output=output,
        )  # fmt: skip
        return Examination(before, advice=advice)
    if fix is None:
        return Examination(before)
    xs = _steps(batches)
    given = copy.deepcopy(model) if trial_steps > 0 else None
    report = _fix(model, fix, xs[0], generator=generator, tied=tied)
    after = diagnose(model, batches, generator=generator, output=output)
    measured = None
    if given is not None:
        measured = trial(
            given, model, xs, steps=trial_steps, seeds=seeds, generator=generator,
            output=output, diagnoses=(before, after), addresses=REMEDIES[fix].addresses,
        )  # fmt: skip
    return Examination(before, report, after, measured)
