"""``doctor``: diagnose a model of the zoo, as built or re-initialized, with or without norms.

A model from :mod:`normlab.zoo` is built from ``seed``, optionally re-initialized by
:func:`normlab.doctor.fix` (``init``), and given to :func:`normlab.doctor.diagnose` on ``steps``
random standard-normal batches of ``batch`` examples. ``norm`` inserts a normalization layer
after each hidden Linear, before its activation; only the MLP models take it (``resnet`` already
has BatchNorm2d after every conv; the transformer and the LSTM have their own structure), and any
other model refuses a norm other than ``none``. The result holds the per-layer table (labels,
activation mean and std, dead and saturated fractions, gradient std and the weights' gradient
ratio), the verdict and the suggestions. The run streams: after every pass it yields the
diagnosis of the batches so far (:func:`normlab.doctor.diagnosing`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch

from normlab import doctor, zoo
from normlab import figures as fig
from normlab.doctor.view import diagnosis_figure
from normlab.experiments.base.params import ParameterError, device_param, param, seed_param
from normlab.experiments.base.registry import Cost, Experiment
from normlab.experiments.base.results import Result
from normlab.figures import Table

INITS = ("default", *doctor.FIX_METHODS)
_TAKE_NORM = ", ".join(m.name for m in zoo.MODELS.values() if m.takes_norm)


@dataclass(frozen=True)
class Params:
    model: str = param("vanishing-tanh", "the zoo model to examine", choices=tuple(zoo.MODELS))
    init: str = param("default", "re-initialize first (default: as built)", choices=INITS)
    norm: str = param(
        "none",
        f"normalization after each hidden Linear ('none' unless model is an MLP: {_TAKE_NORM})",
        choices=zoo.NORMS,
    )
    steps: int = param(
        3, "forward and backward passes (a fresh random batch each)", min=1, max=4, step=1
    )
    batch: int = param(64, "examples per batch", min=2, max=128, step=1)
    seed: int = seed_param()
    device: str = device_param()

    def __post_init__(self) -> None:
        if self.norm != "none" and not zoo.MODELS[self.model].takes_norm:
            mlps = ", ".join(repr(m.name) for m in zoo.MODELS.values() if m.takes_norm)
            raise ParameterError(
                "norm",
                f"parameter 'norm': {self.norm!r} is not allowed for model {self.model!r}, "
                f"use 'none' (only {mlps} take a norm)",
            )


_DIAGNOSIS_FIELDS = dataclasses.fields(doctor.Diagnosis)
"""A DoctorResult carries every field of the Diagnosis it came from, flat in its JSON."""


@dataclass
class DoctorResult(Result):
    model: str
    init: str
    layers: list[doctor.LayerDiagnosis]  # (layers,) in forward order
    verdict: str
    problems: list[str]
    suggestions: list[str]
    input_shape: list[int]
    input_std: float
    steps: int
    notes: list[str]  # what the doctor read differently, and why
    trend: doctor.Trend | None  # the gradient ratio over depth
    stream: doctor.Stream | None  # the residual stream over depth
    fix: doctor.FixReport | None  # what init did, None for "default"

    @property
    def diagnosis(self) -> doctor.Diagnosis:
        return doctor.Diagnosis(**{f.name: getattr(self, f.name) for f in _DIAGNOSIS_FIELDS})

    def tables(self) -> list[Table]:
        return Table.from_dicts(tables(self.data()))

    def figures(self) -> list[fig.Figure]:
        """The diagnosis figure; a partial run (a streamed frame) draws the diagnosis of the
        passes so far, and says so."""
        drawn = diagnosis_figure(self.diagnosis)
        passes = self.params.get("steps", self.steps)  # the whole run's
        so_far = f", so far: pass {self.steps} of {passes}" if self.steps < passes else ""
        title = f"{self.model} ({self.init} init): {', '.join(self.problems) or 'healthy'}"
        return [dataclasses.replace(drawn, title=title + so_far)]


def doctor_zoo(
    model: str, init: str, norm: str, steps: int, batch: int, seed: int, device: str
) -> Iterator[dict[str, Any]]:
    """Diagnose a zoo model with normlab's doctor, as built or re-initialized first."""
    from normlab import doctor, zoo  # the doctor is normlab's own tool

    net = zoo.build(model, seed, norm)
    g = torch.Generator().manual_seed(seed)
    shape = zoo.input_shape(model, batch)
    batches = [torch.randn(shape, generator=g) for _ in range(steps)]
    # re-initialize on the cpu, where the seeded generator draws, then move
    report = None if init == "default" else doctor.fix(net, init, batches[0], generator=g)
    net.to(device)
    for d in doctor.diagnosing(net, [x.to(device) for x in batches], generator=g):
        found = {"model": model, "init": init, "fix": report and dataclasses.asdict(report)}
        yield found | dataclasses.asdict(d)  # the passes so far; the last is the whole visit


def tables(result: dict[str, Any]) -> list[dict[str, Any]]:
    """The doctor's per-layer table, then its verdict and suggestions, as normlab shows them."""
    from normlab.doctor import Diagnosis, LayerDiagnosis, diagnosis_tables

    layers = [LayerDiagnosis(**layer) for layer in result["layers"]]
    said = ("verdict", "problems", "suggestions", "input_shape", "input_std", "steps", "notes")
    found = Diagnosis(layers, *(result[k] for k in said))
    title = f"Diagnosis of {result['model']} ({result['init']} init)"
    return [table.to_dict() for table in diagnosis_tables(found, title)]


EXPERIMENT = Experiment(
    name="doctor",
    title="Model doctor",
    summary="per-layer labels (vanishing, exploding, dead, ...) and a cure, for a zoo model",
    params_type=Params,
    result_type=DoctorResult,
    entry=doctor_zoo,
    tables=tables,
    code=(doctor_zoo, tables),
    cost=Cost(10.0),
    heaviest={"model": "pre-ln", "norm": "none"},  # a 12-layer transformer
    stages=lambda p: p.steps,  # a forward and backward pass at a time (after the fix, if any)
    stage="pass",
)
