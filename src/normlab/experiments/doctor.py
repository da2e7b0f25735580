"""``doctor``: diagnose a model of the zoo, as built or re-initialized, with or without norms.

A model from :mod:`normlab.zoo` is built from ``seed``, optionally re-initialized by
:func:`normlab.doctor.fix` (``init``), and given to :func:`normlab.doctor.diagnose` on ``steps``
random standard-normal batches of ``batch`` examples. ``norm`` inserts a normalization layer
after each hidden Linear, before its activation; only the MLP models take it (``resnet`` already
has BatchNorm2d after every conv; the transformer and the LSTM have their own structure), and any
other model refuses a norm other than ``none``. The result holds the per-layer table (labels,
activation mean and std, dead and saturated fractions, gradient std and the weights' gradient
ratio), the verdict and the suggestions. The run streams: first the fix, step by step (each
layer LSUV rescales, :func:`normlab.doctor.fixing`), then after every pass the diagnosis of the
batches so far (:func:`normlab.doctor.diagnosing`); its progress counts both.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from normlab import doctor, zoo
from normlab import figures as fig
from normlab.doctor.view import diagnosis_figure
from normlab.experiments.base.params import ParameterError, device_param, param, seed_param
from normlab.experiments.base.registry import Cost, Experiment
from normlab.experiments.base.results import Result
from normlab.figures import Table
from normlab.init import WEIGHT_LAYERS

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
    # the diagnosis; a partial run still in its fix (a streamed frame) has none yet: steps 0
    layers: list[doctor.LayerDiagnosis] = field(default_factory=list)  # (layers,) forward order
    verdict: str = ""
    problems: list[str] = field(default_factory=list)
    suggestions: list[str] = field(default_factory=list)
    input_shape: list[int] = field(default_factory=list)
    input_std: float = math.nan
    steps: int = 0
    notes: list[str] = field(default_factory=list)  # what the doctor read differently, and why
    trend: doctor.Trend | None = None  # the gradient ratio over depth
    stream: doctor.Stream | None = None  # the residual stream over depth
    fix: doctor.FixReport | None = None  # what init did (so far), None for "default"

    @property
    def diagnosis(self) -> doctor.Diagnosis:
        return doctor.Diagnosis(**{f.name: getattr(self, f.name) for f in _DIAGNOSIS_FIELDS})

    def tables(self) -> list[Table]:
        return Table.from_dicts(tables(self.data()))

    def figures(self) -> list[fig.Figure]:
        """The diagnosis figure; a partial run (a streamed frame) draws the diagnosis of the
        passes so far, and says so, or, still in its fix, the layers LSUV has rescaled."""
        if self.steps == 0:
            return [_fix_figure(self)]
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
    report = None
    if init != "default":
        for report in doctor.fixing(net, init, batches[0], generator=g):  # LSUV: layer by layer
            yield {"model": model, "init": init, "fix": dataclasses.asdict(report)}  # no pass yet
    net.to(device)
    found = {"model": model, "init": init, "fix": report and dataclasses.asdict(report)}
    for d in doctor.diagnosing(net, [x.to(device) for x in batches], generator=g):
        yield found | dataclasses.asdict(d)  # the passes so far; the last is the whole visit


def tables(result: dict[str, Any]) -> list[dict[str, Any]]:
    """The doctor's per-layer table, then its verdict and suggestions, as normlab shows them."""
    from normlab.doctor import Diagnosis, LayerDiagnosis, diagnosis_tables

    layers = [LayerDiagnosis(**layer) for layer in result["layers"]]
    said = ("verdict", "problems", "suggestions", "input_shape", "input_std", "steps", "notes")
    found = Diagnosis(layers, *(result[k] for k in said))
    title = f"Diagnosis of {result['model']} ({result['init']} init)"
    return [table.to_dict() for table in diagnosis_tables(found, title)]


def _fix_figure(r: DoctorResult) -> fig.Figure:
    """A run still in its fix: for LSUV, each layer's output variance once rescaled, on an axis
    of all the layers it will rescale, against its goal (1, within its tolerance); for another
    fix (one step), the gain it chose for each layer."""
    assert r.fix is not None  # a frame before the passes comes from the fix
    lsuv = r.fix.lsuv
    bands: tuple[fig.Band, ...] = ()
    if lsuv is None:
        done, layers, of = f"{r.init} done", r.fix.layers, len(r.fix.layers)
        y, what = r.fix.gains, "gain"
    else:
        of = fix_stages(r.model, r.params.get("norm", "none"), r.init)
        done, layers = f"LSUV, layer {len(lsuv.layers)} of {of} rescaled", lsuv.layers
        y, what = lsuv.variances, "output variance, rescaled"
        bands = (fig.Band(1 - lsuv.tol, 1 + lsuv.tol, label=f"1 ± {lsuv.tol:g}: LSUV's goal"),)
    x = list(range(1, len(layers) + 1))
    panel = fig.Panel(
        fig.Axis("layer (forward order)", limits=(0.5, of + 0.5)),
        fig.Axis(what),
        [fig.Series(what, x, y, kind="line+markers", legend=False)],
        bands=bands,
    )
    return fig.Figure(f"{r.model} ({r.init} init), so far: {done}", [panel])


@functools.cache
def fix_stages(model: str, norm: str, init: str) -> int:
    """The steps of a run's fix: none as built, one for he, xavier or orthogonal, and for lsuv
    a step per layer it rescales, the Linear and Conv layers the model's forward pass calls
    (counted on one built, as :func:`normlab.init.lsuv_layers` finds them)."""
    if init == "default":
        return 0
    if init != "lsuv":
        return 1
    net = zoo.build(model, 0, norm)
    called: set[nn.Module] = set()
    hooks = [
        m.register_forward_hook(lambda m, *_: called.add(m))
        for m in net.modules()
        if isinstance(m, WEIGHT_LAYERS)
    ]
    with torch.no_grad():
        net(torch.zeros(zoo.input_shape(model, 2)))  # (2, ...): what runs, not what it gives
    for hook in hooks:
        hook.remove()
    return len(called)


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
    stages=lambda p: fix_stages(p.model, p.norm, p.init) + p.steps,
    stage="stage",  # a layer LSUV rescaled, or the fix, then a forward and backward pass
)
