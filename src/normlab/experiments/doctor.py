"""``doctor``: diagnose a model of the zoo, as built or re-initialized, with or without norms.

A model from :mod:`normlab.zoo` is built from ``seed``, optionally re-initialized by
:func:`normlab.doctor.fix` (``init``), and given to :func:`normlab.doctor.diagnose` on ``steps``
random standard-normal batches of ``batch`` examples. ``norm`` inserts a normalization layer
after each hidden Linear, before its activation; only the MLP models take it (``resnet`` already
has BatchNorm2d after every conv; the transformer and the LSTM have their own structure), and any
other model refuses a norm other than ``none``. The result holds the per-layer table (labels,
activation mean and std, dead and saturated fractions, gradient std and the weights' gradient
ratio), the verdict and the suggestions.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import torch

from normlab import doctor, zoo
from normlab.experiments.base import (
    Experiment,
    ParameterError,
    Progress,
    Result,
    Table,
    device_param,
    param,
    seed_param,
)

INITS = ("default", *doctor.FIX_METHODS)


@dataclass(frozen=True)
class Params:
    model: str = param("vanishing-tanh", "the zoo model to examine", choices=tuple(zoo.MODELS))
    init: str = param("default", "re-initialize first (default: as built)", choices=INITS)
    norm: str = param(
        "none", "normalization after each hidden Linear (MLP models only)", choices=zoo.NORMS
    )
    steps: int = param(
        3, "forward and backward passes (a fresh random batch each)", min=1, max=20, step=1
    )
    batch: int = param(64, "examples per batch", min=2, max=512, step=1)
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


def _cell(x: float, digits: int = 3) -> str:
    return f"{x:.{digits}g}" if math.isfinite(x) else "-"


def _frac(x: float) -> str:
    return f"{x:.0%}" if math.isfinite(x) else "-"


def diagnosis_tables(d: doctor.Diagnosis, title: str) -> list[Table]:
    """The per-layer table and the verdict with its suggestions, as the CLI and pages show them."""
    rows = [
        (
            layer.name,
            layer.kind,
            _cell(layer.act_mean),
            _cell(layer.act_std),
            _frac(layer.dead_frac),
            _frac(layer.saturated_frac),
            _cell(layer.grad_std),
            _cell(layer.grad_ratio),
            ", ".join(layer.labels),
        )
        for layer in d.layers
    ]
    columns = (
        "layer",
        "kind",
        "act mean",
        "act std",
        "dead",
        "saturated",
        "grad std",
        "grad ratio",
        "labels",
    )
    note = f"input {tuple(d.input_shape)}, std {_cell(d.input_std)}; {d.steps} step(s)"
    return [
        Table(title, columns, rows, notes=(note,)),
        Table(
            "Verdict: " + d.verdict,
            ("suggestion",),
            [(s,) for s in d.suggestions],
        ),
    ]


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
    fix: doctor.FixReport | None  # what init did, None for "default"

    @property
    def diagnosis(self) -> doctor.Diagnosis:
        return doctor.Diagnosis(**{f.name: getattr(self, f.name) for f in _DIAGNOSIS_FIELDS})

    def tables(self) -> list[Table]:
        return diagnosis_tables(self.diagnosis, f"Diagnosis of {self.model} ({self.init} init)")


def run(p: Params, progress: Progress | None = None) -> DoctorResult:
    net = zoo.build(p.model, p.seed, p.norm)
    g = torch.Generator().manual_seed(p.seed)
    shape = zoo.input_shape(p.model, p.batch)
    batches = [torch.randn(shape, generator=g) for _ in range(p.steps)]
    # re-initialize on the cpu, where the seeded generator draws, then move
    report = None if p.init == "default" else doctor.fix(net, p.init, batches[0], generator=g)
    net.to(p.device)
    d = doctor.diagnose(net, [x.to(p.device) for x in batches], generator=g)
    found = {f.name: getattr(d, f.name) for f in _DIAGNOSIS_FIELDS}
    return DoctorResult(model=p.model, init=p.init, fix=report, **found)


EXPERIMENT = Experiment(
    name="doctor",
    title="Model doctor",
    summary="per-layer labels (vanishing, exploding, dead, ...) and a cure, for a zoo model",
    params_type=Params,
    run=run,
)
